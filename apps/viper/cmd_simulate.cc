// viper simulate: the main job. Fits the predictor on the warm-up of a real
// log, plans with every strategy, and judges each schedule in the
// discrete-event simulator against the log's TRUE curve.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>

#include "cli_util.h"
#include "commands.h"
#include "log_options.h"
#include "planning_options.h"
#include "viper/core/units.h"
#include "viper/datasets/staleness_reader.h"
#include "viper/schedulers/staleness.h"
#include "viper/simulator/simulator.h"

namespace viper {
namespace cli {
namespace {

using Row = simulator::StrategyOutcome;

// Draws the true curve, the prediction, each strategy's checkpoints and a CIL
// bar chart with gnuplot. The bars start at zero and carry each strategy's
// regret vs the oracle. With a staleness table, a fourth panel draws it as a
// heatmap: each measured pair at (traffic iteration, version iteration),
// coloured by its test_loss (the judge's), with the oracle's versions marked.
Status Plot(const PlanningContext& ctx, const std::vector<Row>& rows, const std::string& png) {
  std::ostringstream curves, warm, marks, bars;
  for (auto* os : {&curves, &warm, &marks, &bars}) os->precision(10);
  const auto& p = ctx.problem;
  // A run that diverged (+inf) or blew up (1e21) would flatten every other
  // loss against the axis: when some loss to draw is over 100x the warm-up's
  // largest, losses are drawn clipped at 4x it, and the title says so.
  double warm_max = 0, top = 0;
  for (double l : ctx.observed.losses) warm_max = std::max(warm_max, l);
  if (ctx.truth) {
    for (int64_t i = p.warmup_iterations; i <= p.total_iterations; ++i) top = std::max(top, ctx.truth->at(i));
  }
  if (ctx.staleness_truth) {
    for (const auto& g : ctx.staleness_truth->Grid()) top = std::max(top, g.loss);
  }
  const double ceiling =
      warm_max > 0 && top > 100 * warm_max ? 4 * warm_max : std::numeric_limits<double>::infinity();
  bool clipped = false;
  auto clip = [&](double l) {
    if (l > ceiling) {
      clipped = true;
      return ceiling;
    }
    return l;
  };
  const int64_t step = std::max<int64_t>(1, (p.total_iterations - p.warmup_iterations) / 2000);
  for (int64_t i = p.warmup_iterations; i <= p.total_iterations; i += step) {
    curves << i << " ";
    if (ctx.truth) curves << clip(ctx.truth->at(i)); else curves << "NaN";
    curves << " " << clip(ctx.predicted.at(i)) << "\n";
  }
  for (size_t k = 0; k < ctx.observed.size(); ++k) warm << ctx.observed.iterations[k] << " " << ctx.observed.losses[k] << "\n";
  bool any_mark = false, any_republish = false;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& plan = rows[r].plan;
    for (size_t q = 0; q < plan.schedule.size(); ++q) {
      const bool again = !plan.published.empty() && plan.published[q] != plan.schedule[q];
      marks << plan.schedule[q] << " " << r << " " << (again ? 1 : 0) << "\n";
      any_mark = true;
      any_republish = any_republish || again;
    }
    char regret[48] = "";
    if (rows[r].sim.diverged_requests > 0) {
      std::snprintf(regret, sizeof regret, "+inf: served a diverged model");
    } else if (rows[r].regret_vs_oracle) {
      std::snprintf(regret, sizeof regret, "%s", FormatPercent(*rows[r].regret_vs_oracle).c_str());
    }
    const double cil = std::isfinite(rows[r].sim.cil) ? rows[r].sim.cil : 0.0;  // +inf: no bar, the label says why
    bars << r << " \"" << schedulers::ToString(rows[r].kind) << "\" " << cil << " \"" << regret << "\"\n";
  }
  if (!any_mark) marks << "0 -10 0\n";
  std::string ytics;
  for (size_t r = 0; r < rows.size(); ++r) {
    ytics += (r ? ", " : "") + std::string("\"") + schedulers::ToString(rows[r].kind) + "\" " + std::to_string(r);
  }
  std::ostringstream heat;
  heat.precision(10);
  const bool table = ctx.staleness_truth != nullptr;
  if (table) {
    for (const auto& g : ctx.staleness_truth->Grid()) heat << g.traffic << " " << g.version << " " << clip(g.loss) << "\n";
  }
  char clip_note[96] = "";
  if (clipped) std::snprintf(clip_note, sizeof clip_note, "; losses above %.3g (4x the warm-up's largest) drawn at it", ceiling);
  const std::string truth = predictor::ToString(ctx.truth_metric), observed = ObservedMetrics(ctx);
  const std::string title = ctx.log.source + " (planners observe " + observed + ", judged on " + truth +
                            (TruthIsTrainingLoss(ctx) ? ": the noisy per-batch training loss" : "") + "; warm-up " +
                            std::to_string(p.warmup_iterations) + " of " + std::to_string(p.total_iterations) + ")";
  std::ostringstream gp;
  gp << "$curves << EOD\n" << curves.str() << "EOD\n$warm << EOD\n" << warm.str() << "EOD\n"
     << "$marks << EOD\n" << marks.str() << "EOD\n$bars << EOD\n" << bars.str() << "EOD\n"
     << (table ? "$heat << EOD\n" + heat.str() + "EOD\n" : std::string())
     << "set multiplot layout " << (table ? 4 : 3) << ",1 title " << GnuplotQuote(title + clip_note) << "\n"
     << "set xlabel 'iteration'; set ylabel 'loss'; set grid; set key outside right top\n"
     << "plot $curves u 1:2 w l lw 2 lc rgb '#222222' t " << GnuplotQuote("truth: " + truth + " (log)") << ", "
     << "$curves u 1:3 w l lw 2 dt 2 lc rgb '#d62728' t 'predicted from warm-up', "
     << "$warm u 1:2 w p pt 7 ps 0.4 lc rgb '#1f77b4' t " << GnuplotQuote("warm-up " + observed) << "\n"
     << "set ylabel ''; set ytics (" << ytics << "); set yrange [-0.5:" << rows.size() - 0.5 << "]\n"
     << "set title " << GnuplotQuote(any_republish ? "checkpoints per strategy (circles: it re-publishes an older kept model)"
                                                    : "checkpoints per strategy") << "; unset key\n"
     << "plot $marks u 1:($3 == 0 ? $2 : 1/0) w p pt 2 ps 0.6 lc rgb '#2ca02c', "
     << "$marks u 1:($3 == 1 ? $2 : 1/0) w p pt 6 ps 0.9 lc rgb '#ff7f0e'\n"
     << "set title 'simulated CIL on the true curve (lower is better; the axis starts at 0; labels: regret vs the oracle)'\n"
     << "set ytics auto; set yrange [0:*]; set offsets 0, 0, graph 0.12, 0\n"
     << "set style fill solid 0.7; set boxwidth 0.6; set xlabel ''; set ylabel 'CIL'; set xrange [-0.5:"
     << rows.size() - 0.5 << "]\n"
     << "plot $bars u 1:3:xtic(2) w boxes lc rgb '#1f77b4', $bars u 1:3:4 w labels offset 0,0.8 font ',9'\n";
  if (table) {
    gp << "unset offsets; unset xtics; set xtics auto; set autoscale x; set autoscale y\n"
       << "set title " << GnuplotQuote("staleness table " + ctx.staleness_source +
                                      ": test_loss of version v (y) on the traffic after iteration t (x)") << "\n"
       << "set xlabel 'traffic iteration t'; set ylabel 'version v'; set cblabel 'test_loss'; set palette rgb 33,13,10\n"
       << "plot $heat u 1:2:3 w p pt 5 ps 0.5 palette notitle\n";
  }
  gp << "unset multiplot\n";
  return RunGnuplot(std::string("set terminal pngcairo noenhanced size 1300,") + (table ? "1450" : "1100") +
                        " font 'DejaVu Sans,10'",
                    gp.str(), png);
}

}  // namespace

namespace {

struct SimulateArgs {
  LogOptions log;
  PlanningOptions planning;
  std::string strategies = "all", json_path, plot_path, trace_path, trace_strategy = "optimal", requests_csv,
      decisions_csv;
  std::vector<std::string> versus_staleness;
  double versus_self_weight = 0.0;  // 0: equal weights
  double poll_phase_s = 0.0;
  bool quiet = false;
  std::vector<schedulers::StrategyKind> kinds;
  schedulers::StrategyKind trace_kind = schedulers::StrategyKind::kOptimal;
};

constexpr const char* kUsage = "viper simulate --log FILE [--warmup N|P%] [options]";

// Parses and validates; 0 ok, -1 after --help, 2 bad usage (printed).
int ParseSimulateArgs(const std::vector<std::string>& args, SimulateArgs* a) {
  po::options_description desc("Options");
  desc.add_options()("help,h", "print this help");
  AddLogOptions(&desc, &a->log);
  desc.add_options()
      ("strategies", po::value(&a->strategies)->default_value(a->strategies), "comma-separated list or 'all': epoch,viper-fixed,viper-greedy,fixed,optimal,online,oracle")
      ("json", po::value(&a->json_path), "write the comparison as JSON to this path ('-' = stdout only JSON, the table goes to stderr); schema viper.simulate/1")
      ("plot", po::value(&a->plot_path), "draw the curves, checkpoints and CIL bars to this PNG (gnuplot)")
      ("trace", po::value(&a->trace_path), "write a Chrome trace-event JSON (Perfetto) of one strategy's run")
      ("trace-strategy", po::value(&a->trace_strategy)->default_value(a->trace_strategy), "strategy whose run --trace and --requests-csv record")
      ("requests-csv", po::value(&a->requests_csv), "write every request (time, version, iteration, loss) of that run as CSV")
      ("decisions-csv", po::value(&a->decisions_csv), "write online's decision at every measurement after the warm-up as CSV: what it saw (the candidate's and the served model's losses, the traffic's iteration, the noise, the best kept model, the decay and lag price it charged, the switches and predicted return) and what it chose (plan, gate, holds, publish and which model), and last where the replay's judge placed the traffic (judge_traffic_iteration, beside the planner's estimate traffic_iteration); README, 'Why online published'")
      ("versus-staleness", po::value(&a->versus_staleness)->composing(), "with --staleness: the staleness table of a second run that the producer cannot tell from this one until some traffic point (trained alike; e.g. the same recurring run with a period longer than the run: its traffic never returns). Prints the causal pair bound: the regret (fluid objective, against each run's exact optimum on its table's test_loss) that no planner deciding at validation points from what the producer measures can stay below on both runs; both are judged on this log's clock and cost. Given more than once (at most 16), the causal bound over the family (this run and each table, each parting from this one where its validation sample first differs; e.g. a calm run and the same run with its drift at several iterations): the least mean regret over them of any such planner. README 'The causal pair bound'")
      ("versus-self-weight", po::value(&a->versus_self_weight), "with --versus-staleness given more than once: the weight in (0, 1) on this log's run in the family's mean, the rest shared equally by the tables' runs (default: all equal); e.g. a calm run's share of the traffic a planner expects")
      ("poll-phase-s", po::value(&a->poll_phase_s)->default_value(a->poll_phase_s), "time of the first poll after warm-up, seconds in [0, 86400] (polling only)")
      ("quiet,q", po::bool_switch(&a->quiet), "no progress lines on stderr");
  AddPlanningOptions(&desc, &a->planning);
  po::variables_map vm;
  const int rc = ParseOrHelp(
      args, desc, &vm, kUsage,
      "Fits the predictor on the warm-up part of a real training log, plans a schedule with each strategy,\n"
      "and runs every schedule through the discrete-event simulator (producer stalls, transfers, push or\n"
      "polling, consumer loads, requests) charging each request the TRUE loss from the log of the version\n"
      "serving it. Prints CIL, regret vs the oracle (optimal planned on the truth), change vs epoch-boundary\n"
      "updates, checkpoints, training slowdown and staleness per strategy.\n"
      "Exit codes: 0 ok, 1 bad input (the log, a file), 2 bad usage (an option value; the message names it).");
  if (rc != 0) return rc;
  auto kinds = schedulers::ParseStrategyKinds(a->strategies);
  if (!kinds.ok()) return UsageError("simulate", "--strategies " + a->strategies + ": " + kinds.status().message());
  a->kinds = *kinds;
  if (!a->decisions_csv.empty()) {
    if (std::find(a->kinds.begin(), a->kinds.end(), schedulers::StrategyKind::kOnline) == a->kinds.end()) {
      return UsageError("simulate", "--decisions-csv records online's decisions: add online to --strategies " +
                                        a->strategies);
    }
    a->planning.scenario.online.record_decisions = true;
  }
  auto trace_kind = schedulers::StrategyKindFromString(a->trace_strategy);
  if (!trace_kind.ok()) {
    return UsageError("simulate", "--trace-strategy " + a->trace_strategy + ": " + trace_kind.status().message());
  }
  a->trace_kind = *trace_kind;
  // --trace and --requests-csv record one strategy's run: one not planned
  // would leave them unwritten, with nothing said.
  if ((!a->trace_path.empty() || !a->requests_csv.empty()) &&
      std::find(a->kinds.begin(), a->kinds.end(), a->trace_kind) == a->kinds.end()) {
    return UsageError("simulate", std::string(a->trace_path.empty() ? "--requests-csv" : "--trace") +
                                      " records --trace-strategy " + a->trace_strategy +
                                      ", which --strategies " + a->strategies +
                                      " does not plan: add it there or name one of them with --trace-strategy");
  }
  Status st = CheckReal("--poll-phase-s", a->poll_phase_s, 0, 86400);
  // Each run of a family costs one backward pass (up to about a minute).
  constexpr size_t kMaxVersusTables = 16;
  if (st.ok() && a->versus_staleness.size() > kMaxVersusTables) {
    st = InvalidArgumentError("--versus-staleness given " + std::to_string(a->versus_staleness.size()) +
                              " times; at most " + std::to_string(kMaxVersusTables));
  }
  if (st.ok() && vm.count("versus-self-weight")) {
    if (a->versus_staleness.size() < 2) {
      st = InvalidArgumentError("--versus-self-weight needs --versus-staleness given at least twice");
    } else if (!(a->versus_self_weight > 0 && a->versus_self_weight < 1)) {
      st = InvalidArgumentError("--versus-self-weight must be inside (0, 1), got " +
                                std::to_string(a->versus_self_weight));
    }
  }
  if (st.ok()) st = ValidatePlanningOptions(a->planning);
  if (!st.ok()) return UsageError("simulate", st.message());
  return 0;
}

// A table read as the judge's truth (test_loss) and the producer's view (val_loss).
struct VersusTable {
  schedulers::StalenessSurface truth, observed;
};
StatusOr<VersusTable> ReadVersusTable(const std::string& path, const std::string& non_finite) {
  datasets::StalenessReader::Options table_options;
  VIPER_ASSIGN_OR_RETURN(table_options.non_finite, datasets::NonFinitePolicyFromString(non_finite));
  VIPER_ASSIGN_OR_RETURN(auto versus, datasets::StalenessReader::ReadFile(path, table_options));
  VIPER_ASSIGN_OR_RETURN(auto truth, schedulers::StalenessSurface::Make(versus, schedulers::StalenessSample::kTest));
  VIPER_ASSIGN_OR_RETURN(auto observed,
                         schedulers::StalenessSurface::Make(versus, schedulers::StalenessSample::kValidation));
  return VersusTable{std::move(truth), std::move(observed)};
}

// The causal pair bound of this run against the run of `versus_path`'s
// table (schedulers::SolveCausalPairBound), as JSON.
StatusOr<nlohmann::json> CausalPairBoundAgainst(const PlanningContext& ctx, const std::string& versus_path,
                                                const std::string& non_finite,
                                                const std::function<void(const std::string&)>& progress) {
  VIPER_ASSIGN_OR_RETURN(VersusTable versus, ReadVersusTable(versus_path, non_finite));
  const schedulers::Problem bp = schedulers::BoundProblem(ctx);
  const double agree = schedulers::SurfacesAgreeUntil(*ctx.staleness_observed, versus.observed, bp.warmup_iterations);
  std::vector<double> lambdas;
  for (int q = 1; q < 20; ++q) lambdas.push_back(0.05 * q);
  progress("causal pair bound against " + versus_path + " (validation samples agree up to traffic iteration " +
           std::to_string(static_cast<long long>(agree)) + ")");
  auto bound = schedulers::SolveCausalPairBound(bp, *ctx.staleness_truth, versus.truth, agree, lambdas);
  if (!bound.ok()) return Status(bound.status().code(), versus_path + ": " + bound.status().message());
  nlohmann::json j;
  j["versus"] = versus_path;
  j["agree_until_traffic"] = agree;
  j["bound"] = bound->bound;
  j["lambda"] = bound->lambda;
  j["objective"] = bound->objective_a;
  j["objective_versus"] = bound->objective_b;
  j["shared_decisions"] = bound->shared_decisions;
  j["candidates"] = bound->candidates;
  // The schedules the bound comes from: the first shared_checkpoints the same on both runs.
  j["shared_checkpoints"] = bound->shared_checkpoints;
  j["schedule"] = bound->schedule_a;
  j["published"] = bound->published_a;
  j["schedule_versus"] = bound->schedule_b;
  j["published_versus"] = bound->published_b;
  nlohmann::json by = nlohmann::json::array();
  for (const auto& [l, b] : bound->by_lambda) by.push_back({{"lambda", l}, {"bound", b}});
  j["by_lambda"] = by;
  return j;
}

// The causal bound over this run and the runs of `versus_paths`' tables
// (schedulers::SolveCausalBound), at equal weights or `self_weight` (> 0) on
// this run and the rest shared: a floor under their weighted mean regret.
// Each run parts from this one where its validation sample first differs;
// this one with the last of them.
StatusOr<nlohmann::json> CausalBoundOver(const PlanningContext& ctx, const std::vector<std::string>& versus_paths,
                                         double self_weight, const std::string& non_finite,
                                         const std::function<void(const std::string&)>& progress) {
  const schedulers::Problem bp = schedulers::BoundProblem(ctx);
  std::vector<VersusTable> tables;
  std::vector<const schedulers::StalenessSurface*> runs = {&*ctx.staleness_truth};
  std::vector<double> parts_at = {static_cast<double>(bp.warmup_iterations)};
  tables.reserve(versus_paths.size());
  for (const std::string& path : versus_paths) {
    VIPER_ASSIGN_OR_RETURN(VersusTable t, ReadVersusTable(path, non_finite));
    tables.push_back(std::move(t));
    parts_at.push_back(
        schedulers::SurfacesAgreeUntil(*ctx.staleness_observed, tables.back().observed, bp.warmup_iterations));
    parts_at[0] = std::max(parts_at[0], parts_at.back());
  }
  for (const VersusTable& t : tables) runs.push_back(&t.truth);
  const double M = static_cast<double>(runs.size());
  progress("causal bound over " + std::to_string(runs.size()) + " runs (this log's and " +
           std::to_string(versus_paths.size()) + " tables)");
  std::vector<double> weights(runs.size(), 1.0 / M);
  if (self_weight > 0) {
    weights.assign(runs.size(), (1 - self_weight) / (M - 1));
    weights[0] = self_weight;
  }
  auto bound = schedulers::SolveCausalBound(bp, runs, parts_at, {weights});
  if (!bound.ok()) return Status(bound.status().code(), "causal bound: " + bound.status().message());
  nlohmann::json j;
  j["bound"] = bound->bound;  // the floor under the weighted mean regret
  j["weights"] = weights;
  j["shared_decisions"] = bound->shared_decisions;
  j["candidates"] = bound->candidates;
  nlohmann::json rs = nlohmann::json::array();
  for (size_t m = 0; m < runs.size(); ++m) {
    nlohmann::json r;
    r["table"] = m == 0 ? std::string("(this log's)") : versus_paths[m - 1];
    r["agree_until_traffic"] = parts_at[m];
    r["objective"] = bound->objectives[m];
    r["shared_checkpoints"] = bound->shared_checkpoints[m];
    // This run's regret under the schedules the bound comes from (their mean is the bound).
    VIPER_ASSIGN_OR_RETURN(schedulers::SurfaceEvaluation e,
                           schedulers::EvaluateOnSurface(bp, *runs[m], bound->schedules[m], bound->published[m]));
    r["regret"] = e.objective / bound->objectives[m] - 1;
    r["schedule"] = bound->schedules[m];
    r["published"] = bound->published[m];
    rs.push_back(r);
  }
  j["runs"] = rs;
  return j;
}

}  // namespace

int ParseSimulateOptions(const std::vector<std::string>& args) {
  SimulateArgs a;
  return ParseSimulateArgs(args, &a);
}

int RunSimulate(const std::vector<std::string>& args) {
  SimulateArgs a;
  const int rc = ParseSimulateArgs(args, &a);
  if (rc != 0) return rc < 0 ? kExitOk : rc;
  const LogOptions& log_options = a.log;
  const PlanningOptions& options = a.planning;
  const auto& kinds = a.kinds;
  const auto& json_path = a.json_path;
  const auto& plot_path = a.plot_path;
  const auto& trace_path = a.trace_path;
  const auto& requests_csv = a.requests_csv;
  const bool quiet = a.quiet;
  auto progress = [&](const std::string& s) {
    if (!quiet) std::cerr << "viper simulate: " << s << "\n";
  };
  // --json -: stdout holds only the JSON document; the table goes to stderr.
  FILE* const table = JsonToStdout(json_path) ? stderr : stdout;

  progress("reading " + log_options.path + " and fitting the predictor on the warm-up");
  auto ctx_or = BuildPlanningContext(log_options, options);
  if (!ctx_or.ok()) return Fail("simulate", ctx_or.status());
  const PlanningContext& ctx = *ctx_or;
  progress("predictor: " + ctx.predictor_report);

  progress("planning and simulating " + std::to_string(kinds.size()) + " strategies");
  simulator::Simulator::Options so = simulator::SimulatorOptionsFor(ctx);
  so.poll_phase_s = a.poll_phase_s;
  auto comparison = simulator::CompareStrategies(ctx, kinds, so, SimulationSizeCheck(ctx));
  if (!comparison.ok()) {
    if (comparison.status().code() == StatusCode::kOutOfRange) return UsageError("simulate", comparison.status().message());
    return Fail("simulate", comparison.status());
  }
  for (const auto& skipped : comparison->skipped) std::cerr << "viper simulate: skipped " << skipped << "\n";
  const auto& rows = comparison->outcomes;
  if (rows.empty()) return Fail("simulate", InvalidArgumentError("no strategy produced a schedule"));
  bool traced_run = false;
  for (const auto& r : rows) {
    progress(r.plan.summary.BriefReport() + "; simulated " + r.sim.BriefReport());
    if (r.kind == schedulers::StrategyKind::kOnline && !a.decisions_csv.empty()) {
      Status st = WriteText(a.decisions_csv, schedulers::DecisionsCsv(r.plan.decisions));
      if (!st.ok()) return Fail("simulate", st);
    }
    if (r.kind != a.trace_kind || (trace_path.empty() && requests_csv.empty())) continue;
    traced_run = true;
    // Re-run the traced strategy recording every request.
    simulator::Simulator::Options traced = so;
    traced.record_requests = !requests_csv.empty();
    traced.published = r.plan.published;
    traced.kept_at = r.plan.kept;
    traced.pauses = r.plan.pauses;
    traced.waits = r.plan.waits;
    auto result = simulator::Simulator(traced).Run(*ctx.truth, r.plan.schedule);
    if (!result.ok()) return Fail("simulate", result.status());
    if (!trace_path.empty()) {
      Status st = WriteTrace(result->ChromeTrace(), trace_path, "simulate-trace");
      if (!st.ok()) return Fail("simulate", st);
    }
    if (!requests_csv.empty()) {
      Status st = WriteText(requests_csv, result->RequestCsv());
      if (!st.ok()) return Fail("simulate", st);
    }
  }
  if ((!trace_path.empty() || !requests_csv.empty()) && !traced_run) {
    return Fail("simulate", FailedPreconditionError("--trace-strategy " + a.trace_strategy +
                                                    " was skipped (see above): no --trace or --requests-csv written"));
  }

  const auto& p = ctx.problem;
  std::fprintf(table, "log %s: %s, warm-up W=%lld of N=%lld iterations, tau %.4g s/iteration (%s)\n",
               ctx.log.source.c_str(), ObservedMetrics(ctx).c_str(),
               static_cast<long long>(p.warmup_iterations), static_cast<long long>(p.total_iterations),
               p.seconds_per_iteration, ctx.tau_source.c_str());
  const auto pace = schedulers::MeasureReplayedPace(ctx);
  if (pace) std::fprintf(table, "%s\n", schedulers::DescribeReplayedPace(*pace).c_str());
  std::fprintf(table, "transport %s, %s, %s%s, model %s: stall %s, update latency %s per checkpoint\n",
              ctx.cost_source.c_str(), ctx.tier.synchronous ? "sync" : "async",
              schedulers::ToString(ctx.tier.notification),
              ctx.tier.notification == schedulers::Notification::kPoll
                  ? (" every " + FormatSeconds(ctx.tier.poll_period_s)).c_str()
                  : "",
              FormatBytes(ctx.model_bytes).c_str(), FormatSeconds(p.cost.stall_s).c_str(),
              FormatSeconds(p.cost.delay_s).c_str());
  std::fprintf(table, "requests: %s every %s, %s\n", schedulers::ToString(p.requests.arrivals),
              FormatSeconds(p.requests.interval_s).c_str(),
              p.requests.window == schedulers::WindowKind::kRequestCount
                  ? (std::to_string(p.requests.request_count) + " requests").c_str()
                  : "served while training runs");
  std::fprintf(table, "predictor: %s\n", ctx.predictor_report.c_str());
  std::fprintf(table, "%s\n\n", TruthNote(ctx).c_str());
  std::fprintf(table, "%-13s %12s %12s %10s %9s %6s %11s %11s %11s\n", "strategy", "CIL", "predicted", "regret", "vs epoch",
              "ckpts", "slowdown", "staleness", "plan time");
  for (const auto& r : rows) {
    char regret[32] = "-", vs_epoch[32] = "-";
    if (r.regret_vs_oracle) std::snprintf(regret, sizeof(regret), "%s", FormatPercent(*r.regret_vs_oracle).c_str());
    if (r.change_vs_epoch) std::snprintf(vs_epoch, sizeof(vs_epoch), "%s", FormatPercent(*r.change_vs_epoch).c_str());
    std::fprintf(table, "%-13s %12.6g %12.6g %10s %9s %6lld %11s %11s %11s\n", schedulers::ToString(r.kind), r.sim.cil,
                r.plan.summary.predicted.cil, regret, vs_epoch, static_cast<long long>(r.sim.checkpoints),
                FormatSeconds(r.sim.slowdown_s).c_str(), FormatSeconds(r.sim.mean_staleness_s.value_or(0)).c_str(),
                FormatSeconds(r.plan.summary.plan_time_s).c_str());
  }
  std::fprintf(table, "\nCIL: simulated on the true curve. predicted: what the planner expected (fluid model, predicted curve).\n"
              "regret: CIL / oracle CIL - 1. staleness: mean request time minus its version's checkpoint time.\n");
  for (const auto& r : rows) {
    if (r.sim.diverged_requests == 0) continue;
    std::fprintf(table, "%s served %lld of %lld requests from a diverged model (a non-finite loss): its CIL is +inf\n",
                schedulers::ToString(r.kind), static_cast<long long>(r.sim.diverged_requests),
                static_cast<long long>(r.sim.requests));
  }

  nlohmann::json pair_json, family_json;
  if (!a.versus_staleness.empty() && (!ctx.staleness_truth || !ctx.staleness_observed)) {
    return Fail("simulate", InvalidArgumentError("--versus-staleness " + a.versus_staleness[0] +
                                                 ": needs this log's own staleness table (--staleness FILE or auto)"));
  }
  if (a.versus_staleness.size() > 1) {
    auto bound = CausalBoundOver(ctx, a.versus_staleness, a.versus_self_weight, log_options.non_finite, progress);
    if (!bound.ok()) return Fail("simulate", bound.status());
    family_json = *bound;
    std::fprintf(table,
                 "\ncausal bound over this run and %zu others (each parting from this one where its validation "
                 "sample first differs): no planner that decides at validation points from what the producer "
                 "measures keeps its mean regret over them below %s (fluid objective; weight %.3g on this run, "
                 "%.3g on each other)\n",
                 a.versus_staleness.size(), FormatPercent(family_json["bound"].get<double>()).c_str(),
                 family_json["weights"][0].get<double>(), family_json["weights"][1].get<double>());
    for (const auto& r : family_json["runs"]) {
      std::fprintf(table,
                   "  %-40s parts at traffic %6.0f, optimum %.6g, %lld checkpoints decided with others, regret %s\n",
                   r["table"].get<std::string>().c_str(), r["agree_until_traffic"].get<double>(),
                   r["objective"].get<double>(), static_cast<long long>(r["shared_checkpoints"].get<int64_t>()),
                   FormatPercent(r["regret"].get<double>()).c_str());
    }
  } else if (!a.versus_staleness.empty()) {
    auto bound = CausalPairBoundAgainst(ctx, a.versus_staleness[0], log_options.non_finite, progress);
    if (!bound.ok()) return Fail("simulate", bound.status());
    pair_json = *bound;
    const double agree = pair_json["agree_until_traffic"].get<double>();
    char where[160];
    if (agree > static_cast<double>(p.warmup_iterations)) {
      std::snprintf(where, sizeof(where),
                    "the validation samples agree up to traffic iteration %.0f; %lld decisions shared", agree,
                    static_cast<long long>(pair_json["shared_decisions"].get<int64_t>()));
    } else {
      std::snprintf(where, sizeof(where),
                    "the validation samples differ by the warm-up's end: no decision is shared");
    }
    std::fprintf(table,
                 "\ncausal pair bound against %s (%s): no planner that decides at validation points from "
                 "what the producer measures keeps its regret below %s on both runs (fluid objective, "
                 "weight %.2f on this run; optima %.6g and %.6g)\n",
                 a.versus_staleness[0].c_str(), where,
                 FormatPercent(pair_json["bound"].get<double>()).c_str(), pair_json["lambda"].get<double>(),
                 pair_json["objective"].get<double>(), pair_json["objective_versus"].get<double>());
  }

  if (!json_path.empty()) {
    nlohmann::json j;
    if (!pair_json.is_null()) j["causal_pair_bound"] = pair_json;
    if (!family_json.is_null()) j["causal_bound"] = family_json;
    j["log"] = ctx.log.source;
    j["metric"] = predictor::ToString(ctx.metric);
    j["online_metric"] = predictor::ToString(ctx.online_metric);
    j["truth_metric"] = predictor::ToString(ctx.truth_metric);
    j["judge"] = JudgeName(ctx);
    j["traffic_clock"] = schedulers::ToString(ctx.problem.requests.traffic_clock);
    j["staleness_table"] = ctx.staleness_source.empty() ? nlohmann::json() : nlohmann::json(ctx.staleness_source);
    j["separate_truth"] = ctx.separate_truth;
    j["truth_is_training_loss"] = TruthIsTrainingLoss(ctx);
    j["tau_source"] = ctx.tau_source;
    j["replayed_pace"] = ReplayedPaceJson(pace);
    j["warmup_iterations"] = p.warmup_iterations;
    j["total_iterations"] = p.total_iterations;
    j["seconds_per_iteration"] = p.seconds_per_iteration;
    j["predictor"] = ctx.predictor_report;
    j["transport"] = {{"source", ctx.cost_source},
                      {"mode", ctx.tier.synchronous ? "sync" : "async"},
                      {"notify", schedulers::ToString(ctx.tier.notification)},
                      {"poll_period_s", ctx.tier.poll_period_s},
                      {"model_bytes", ctx.model_bytes},
                      {"stall_s", p.cost.stall_s},
                      {"delay_s", p.cost.delay_s},
                      {"remeasure_s", p.cost.remeasure_s},
                      {"remeasure", p.cost.remeasure_beside ? "beside" : "pause"}};
    j["requests"] = {{"arrivals", schedulers::ToString(p.requests.arrivals)},
                     {"interval_s", p.requests.interval_s},
                     {"window", schedulers::ToString(p.requests.window)},
                     {"count", p.requests.request_count}};
    j["drift_per_s"] = p.drift_per_s;
    nlohmann::json list = nlohmann::json::array();
    for (const auto& r : rows) {
      nlohmann::json s;
      s["strategy"] = schedulers::ToString(r.kind);
      s["cil"] = r.sim.cil;  // +inf (a diverged model served) is written as null
      s["diverged_requests"] = r.sim.diverged_requests;
      s["predicted_cil"] = r.plan.summary.predicted.cil;
      s["regret_vs_oracle"] = r.regret_vs_oracle ? nlohmann::json(*r.regret_vs_oracle) : nlohmann::json();
      s["change_vs_epoch"] = r.change_vs_epoch ? nlohmann::json(*r.change_vs_epoch) : nlohmann::json();
      s["checkpoints"] = r.sim.checkpoints;
      s["requests"] = r.sim.requests;
      s["slowdown_s"] = r.sim.slowdown_s;
      s["keep_copies"] = r.sim.keep_copies;  // models copied to keep, unpublished (in slowdown_s)
      // Models re-measured on a traffic state new to them, and the producer's
      // pauses for it (in slowdown_s; --remeasure-s); beside training
      // (--remeasure beside), what the checkpoints waited for them.
      s["remeasurements"] = r.plan.summary.remeasurements;
      s["remeasure_s"] = r.sim.pause_s;
      s["remeasure_wait_s"] = r.sim.wait_s;
      s["mean_staleness_s"] = r.sim.mean_staleness_s.value_or(0);
      s["p99_staleness_s"] = r.sim.p99_staleness_s.value_or(0);
      s["mean_update_latency_s"] = r.sim.mean_update_latency_s.value_or(0);
      s["superseded_versions"] = r.sim.superseded_versions;
      s["plan_time_s"] = r.plan.summary.plan_time_s;
      s["exact"] = r.plan.summary.exact;
      s["message"] = r.plan.summary.message;
      s["schedule"] = r.plan.schedule;
      // The model each checkpoint publishes, when a strategy re-published a kept one.
      if (!r.plan.published.empty()) s["published"] = r.plan.published;
      // Where the producer copied a model it kept unpublished (keep_copies of them).
      if (!r.plan.kept.empty()) s["kept"] = r.plan.kept;
      list.push_back(s);
    }
    j["strategies"] = list;
    Status st = WriteJson(j, json_path, "simulate");
    if (!st.ok()) return Fail("simulate", st);
  }
  if (!plot_path.empty()) {
    Status st = Plot(ctx, rows, plot_path);
    if (!st.ok()) return Fail("simulate", st);
    progress("plot written to " + plot_path);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
