// viper plan: plan checkpoint schedules from the warm-up part of a training
// log and print the schedule(s) with the predicted CIL and slowdown.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "cli_util.h"
#include "commands.h"
#include "log_options.h"
#include "viper/core/training_log.h"
#include "viper/predictor/cost_model.h"
#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"
#include "viper/schedulers/strategy.h"

namespace viper {
namespace cli {
namespace {

namespace sch = schedulers;

StatusOr<std::vector<double>> ReadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open request trace '" + path + "'");
  std::vector<double> t;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    try {
      size_t used = 0;
      t.push_back(std::stod(line, &used));
    } catch (const std::exception&) {
      return InvalidArgumentError(path + ":" + std::to_string(n) + ": expected an arrival time in seconds, got '" +
                                  line + "'");
    }
  }
  return t;
}

// JSON {"stall_s": .., "delay_s": ..} or TierCost fields
// {"model_size_bytes", "snapshot_latency_s", "snapshot_bandwidth_bytes_per_s", ...}.
StatusOr<sch::CheckpointCost> ReadCostModel(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open cost model '" + path + "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    return InvalidArgumentError(path + ": not valid JSON: " + e.what());
  }
  try {
    if (j.contains("stall_s") || j.contains("delay_s")) {
      sch::CheckpointCost c;
      c.stall_s = j.value("stall_s", 0.0);
      c.delay_s = j.value("delay_s", 0.0);
      std::string error;
      if (!c.IsValid(&error)) return InvalidArgumentError(path + ": " + error);
      return c;
    }
    sch::TierCost t;
    t.model_size_bytes = j.at("model_size_bytes").get<double>();
    t.snapshot_latency_s = j.value("snapshot_latency_s", t.snapshot_latency_s);
    t.snapshot_bandwidth_bytes_per_s = j.value("snapshot_bandwidth_bytes_per_s", t.snapshot_bandwidth_bytes_per_s);
    t.transfer_latency_s = j.value("transfer_latency_s", t.transfer_latency_s);
    t.transfer_bandwidth_bytes_per_s = j.value("transfer_bandwidth_bytes_per_s", t.transfer_bandwidth_bytes_per_s);
    t.load_latency_s = j.value("load_latency_s", t.load_latency_s);
    t.load_bandwidth_bytes_per_s = j.value("load_bandwidth_bytes_per_s", t.load_bandwidth_bytes_per_s);
    t.synchronous = j.value("synchronous", t.synchronous);
    if (j.contains("notification")) {
      VIPER_ASSIGN_OR_RETURN(t.notification, sch::NotificationFromString(j["notification"].get<std::string>()));
    }
    t.poll_period_s = j.value("poll_period_s", t.poll_period_s);
    std::string error;
    if (!t.IsValid(&error)) return InvalidArgumentError(path + ": " + error);
    return t.ToCheckpointCost();
  } catch (const std::exception& e) {
    return InvalidArgumentError(path + ": " + e.what() + " (expected stall_s/delay_s or model_size_bytes and tier fields)");
  }
}

std::string ScheduleText(const sch::Schedule& s, size_t max_items) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_items; ++i) out += (i ? " " : "") + std::to_string(s[i]);
  if (s.size() > max_items) out += " ... (" + std::to_string(s.size() - max_items) + " more)";
  return out.empty() ? "(none)" : out;
}

}  // namespace

int RunPlan(const std::vector<std::string>& args) {
  po::options_description desc("Options");
  LogOptions log_options;
  int64_t warmup = -1, total = -1, requests = 0, min_spacing = 1, epoch_len = 0;
  double interval_s = 1.0, stall_s = 0.0, delay_s = 0.0, drift = 0.0, budget_s = -1.0, price = 0.0, tau = 0.0;
  std::string strategy = "all", trace_path, cost_path, json_path, metric = "train_loss", families = "viper";
  desc.add_options()("help,h", "print this help");
  AddLogOptions(&desc, &log_options);
  desc.add_options()
      ("warmup", po::value(&warmup)->required(), "warm-up: last iteration seen before planning (W); the planner fits only iterations <= W")
      ("total-iterations", po::value(&total), "last training iteration N (default: the log's last iteration)")
      ("strategy", po::value(&strategy)->default_value(strategy), "epoch, viper-fixed, viper-greedy, fixed, optimal, online, oracle, a comma list, or all")
      ("requests", po::value(&requests), "serve a fixed window of M requests (Viper's setting); default: serve while training runs")
      ("request-interval-s", po::value(&interval_s)->default_value(interval_s), "seconds between requests (fixed rate)")
      ("request-trace", po::value(&trace_path), "file of request arrival times, seconds after warm-up, one per line (planning uses its mean rate)")
      ("stall-s", po::value(&stall_s)->default_value(stall_s), "producer stall per checkpoint, seconds (sigma)")
      ("delay-s", po::value(&delay_s)->default_value(delay_s), "checkpoint start to servable on the consumer, seconds (delta)")
      ("cost-model", po::value(&cost_path), "JSON file with stall_s/delay_s, or model_size_bytes plus snapshot/transfer/load latency_s and bandwidth_bytes_per_s, synchronous, notification, poll_period_s (overrides --stall-s/--delay-s)")
      ("drift", po::value(&drift)->default_value(drift), "loss added per second of a version's age (rho), loss units per second")
      ("slowdown-budget-s", po::value(&budget_s), "cap on total training stall, seconds (default: none)")
      ("price-per-slowdown-s", po::value(&price)->default_value(price), "cost units charged per second of stall in the objective")
      ("min-spacing", po::value(&min_spacing)->default_value(min_spacing), "minimum iterations between checkpoints")
      ("seconds-per-iteration", po::value(&tau), "seconds per iteration (default: estimated from the log's wall times, else 1)")
      ("iterations-per-epoch", po::value(&epoch_len), "epoch length for the epoch strategy (default: from the log's epochs)")
      ("metric", po::value(&metric)->default_value(metric), "loss to plan on: train_loss or val_loss")
      ("families", po::value(&families)->default_value(families), "curve families for the predictor: viper, all, or a list (exp3,pow3,...)")
      ("json", po::value(&json_path), "also write the plans as JSON to this path ('-' = stdout)");
  po::variables_map vm;
  const int rc = ParseOrHelp(args, desc, &vm, "viper plan --log FILE --warmup W [options]",
                             "Fits the learning curve on the log's iterations <= W, plans checkpoint schedules for "
                             "iterations (W, N] and prints, per strategy, the schedule, checkpoints, predicted CIL "
                             "(fluid model, on the prediction), CIL on the log's real curve, and training slowdown.");
  if (rc != 0) return rc < 0 ? kExitOk : rc;

  auto log = ReadLog(log_options);
  if (!log.ok()) return Fail("plan", log.status());
  auto metric_kind = predictor::LossMetricFromString(metric);
  if (!metric_kind.ok()) return Fail("plan", metric_kind.status());
  auto points = predictor::ExtractCurve(*log, *metric_kind);
  if (!points.ok()) return Fail("plan", points.status());
  auto kinds = sch::ParseStrategyKinds(strategy);
  if (!kinds.ok()) return Fail("plan", kinds.status());

  const LogSummary summary = Summarize(*log);
  sch::Problem p;
  p.warmup_iterations = warmup;
  p.total_iterations = total >= 0 ? total : static_cast<int64_t>(points->iterations.back());
  if (warmup <= static_cast<int64_t>(points->iterations.front())) {
    return Fail("plan", InvalidArgumentError("--warmup " + std::to_string(warmup) + " leaves no warm-up points (" +
                                             log->source + " starts at iteration " +
                                             std::to_string(static_cast<int64_t>(points->iterations.front())) + ")"));
  }
  if (tau > 0) {
    p.seconds_per_iteration = tau;
  } else if (auto it = predictor::EstimateIterationTime(*log); it.ok() && it->seconds_per_iteration > 0) {
    p.seconds_per_iteration = it->seconds_per_iteration;
  }
  p.cost.stall_s = stall_s;
  p.cost.delay_s = delay_s;
  if (!cost_path.empty()) {
    auto c = ReadCostModel(cost_path);
    if (!c.ok()) return Fail("plan", c.status());
    p.cost = *c;
  }
  p.requests.interval_s = interval_s;
  if (!trace_path.empty()) {
    auto t = ReadTrace(trace_path);
    if (!t.ok()) return Fail("plan", t.status());
    p.requests.arrivals = sch::ArrivalProcess::kTrace;
    p.requests.trace_s = *t;
  }
  if (vm.count("requests")) {
    p.requests.window = sch::WindowKind::kRequestCount;
    p.requests.request_count = requests;
  }
  p.drift_per_s = drift;
  p.price_per_slowdown_s = price;
  if (vm.count("slowdown-budget-s")) p.slowdown_budget_s = budget_s;
  p.min_spacing_iterations = min_spacing;
  if (Status st = p.Validate(); !st.ok()) return Fail("plan", st);

  // The prediction: fitted on the warm-up points only.
  predictor::LearningCurvePredictor::Options popt;
  auto fam = predictor::ParseCurveFamilies(families);
  if (!fam.ok()) return Fail("plan", fam.status());
  popt.families = *fam;
  const predictor::CurveData warm = points->Prefix(static_cast<double>(warmup));
  auto fitted = predictor::LearningCurvePredictor::Fit(warm, popt);
  if (!fitted.ok()) return Fail("plan", fitted.status().WithContext("fitting the warm-up"));
  std::vector<double> pred = fitted->PredictRange(p.warmup_iterations, p.total_iterations);
  for (double& v : pred) v = std::max(0.0, v);

  sch::PlanningInput input;
  input.problem = p;
  input.predicted = sch::LossCurve(p.warmup_iterations, pred);
  input.observed = *points;
  auto truth = sch::InterpolateCurve(*points, p.warmup_iterations, p.total_iterations);
  if (!truth.ok()) return Fail("plan", truth.status());
  input.truth = *truth;

  sch::StrategyOptions sopt;
  sopt.iterations_per_epoch = epoch_len > 0 ? epoch_len
                              : summary.iterations_per_epoch ? static_cast<int64_t>(*summary.iterations_per_epoch)
                                                             : 0;
  sopt.forecaster = sch::MakePredictorForecaster(popt);

  std::printf("log %s: W = %lld, N = %lld, %.4g s/iteration, stall %.4g s, delay %.4g s, %s window, %.4g requests/s\n",
              log->source.c_str(), static_cast<long long>(p.warmup_iterations),
              static_cast<long long>(p.total_iterations), p.seconds_per_iteration, p.cost.stall_s, p.cost.delay_s,
              sch::ToString(p.requests.window), p.requests.RatePerSecond());
  std::printf("prediction: %s\n\n", fitted->summary().BriefReport().c_str());
  std::printf("%-13s %11s %12s %14s %14s %10s\n", "strategy", "checkpoints", "slowdown_s", "predicted_cil",
              "cil_on_log", "plan_s");
  nlohmann::json out;
  out["log"] = log->source;
  out["warmup"] = p.warmup_iterations;
  out["total_iterations"] = p.total_iterations;
  out["prediction"] = fitted->summary().BriefReport();
  for (sch::StrategyKind k : *kinds) {
    if (k == sch::StrategyKind::kEpoch && sopt.iterations_per_epoch <= 0) {
      std::fprintf(stderr, "viper plan: skipping epoch: the log has no epochs; give --iterations-per-epoch\n");
      continue;
    }
    auto strat = sch::MakeStrategy(k, sopt);
    if (!strat.ok()) return Fail("plan", strat.status());
    auto plan = (*strat)->MakePlan(input);
    if (!plan.ok()) return Fail("plan", plan.status().WithContext(sch::ToString(k)));
    auto on_log = sch::Evaluate(p, *truth, plan->schedule, sch::CountingMode::kFluid);
    if (!on_log.ok()) return Fail("plan", on_log.status());
    const auto& s = plan->summary;
    std::printf("%-13s %11lld %12.4g %14.6g %14.6g %10.3g\n", sch::ToString(k),
                static_cast<long long>(s.checkpoints), s.slowdown_s, s.predicted.cil, on_log->cil, s.plan_time_s);
    if (kinds->size() == 1) {
      std::printf("\nschedule: %s\n%s\n", ScheduleText(plan->schedule, 50).c_str(), s.BriefReport().c_str());
    }
    nlohmann::json j;
    j["strategy"] = sch::ToString(k);
    j["schedule"] = plan->schedule;
    j["checkpoints"] = s.checkpoints;
    j["slowdown_s"] = s.slowdown_s;
    j["predicted_cil"] = s.predicted.cil;
    j["predicted_objective"] = s.predicted.objective;
    j["cil_on_log"] = on_log->cil;
    j["exact"] = s.exact;
    j["message"] = s.message;
    j["plan_time_s"] = s.plan_time_s;
    out["plans"].push_back(j);
  }
  if (!json_path.empty()) {
    if (Status st = WriteJson(out, json_path); !st.ok()) return Fail("plan", st);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
