// viper plan: plan checkpoint schedules from the warm-up part of a training
// log and print the schedule(s) with the predicted CIL and slowdown. Shares
// its options and its planning context with `viper simulate`.
#include <cstdio>
#include <iostream>

#include "cli_util.h"
#include "commands.h"
#include "log_options.h"
#include "planning_options.h"
#include "viper/core/units.h"
#include "viper/schedulers/cil_model.h"

namespace viper {
namespace cli {
namespace {

namespace sch = schedulers;

std::string ScheduleText(const sch::Schedule& s, size_t max_items) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_items; ++i) out += (i ? " " : "") + std::to_string(s[i]);
  if (s.size() > max_items) out += " ... (" + std::to_string(s.size() - max_items) + " more)";
  return out.empty() ? "(none)" : out;
}

struct PlanArgs {
  LogOptions log;
  PlanningOptions planning;
  std::string strategy = "all", json_path;
  std::vector<sch::StrategyKind> kinds;
};

// Parses and validates; 0 ok, -1 after --help, 2 bad usage (printed).
int ParsePlanArgs(const std::vector<std::string>& args, PlanArgs* a) {
  po::options_description desc("Options");
  desc.add_options()("help,h", "print this help");
  AddLogOptions(&desc, &a->log);
  desc.add_options()
      ("strategy", po::value(&a->strategy)->default_value(a->strategy), "epoch|viper-fixed|viper-greedy|fixed|optimal|online|oracle, a comma-separated list, or all")
      ("json", po::value(&a->json_path), "write the plans as JSON to this path ('-' = stdout only JSON, the table goes to stderr); schema viper.plan/1");
  AddPlanningOptions(&desc, &a->planning);
  po::variables_map vm;
  const int rc = ParseOrHelp(
      args, desc, &vm, "viper plan --log FILE [--warmup N|P%] --strategy NAME|all [options]",
      "Fits the predictor on the warm-up part of the log and plans the checkpoint schedule of each strategy up\n"
      "to N (default: the log's last iteration). Prints the schedule, the number of checkpoints, the predicted\n"
      "CIL (fluid model on the predicted curve), the training slowdown, and, where the log covers N, the fluid\n"
      "CIL of the schedule on the log's true curve. `viper simulate` runs the full discrete-event judgement.\n"
      "Exit codes: 0 ok, 1 bad input (the log, a file), 2 bad usage (an option value; the message names it).");
  if (rc != 0) return rc;
  auto kinds = sch::ParseStrategyKinds(a->strategy);
  if (!kinds.ok()) return UsageError("plan", "--strategy " + a->strategy + ": " + kinds.status().message());
  a->kinds = *kinds;
  Status st = ValidatePlanningOptions(a->planning);
  if (!st.ok()) return UsageError("plan", st.message());
  return 0;
}

}  // namespace

int ParsePlanOptions(const std::vector<std::string>& args) {
  PlanArgs a;
  return ParsePlanArgs(args, &a);
}

int RunPlan(const std::vector<std::string>& args) {
  PlanArgs a;
  const int rc = ParsePlanArgs(args, &a);
  if (rc != 0) return rc < 0 ? kExitOk : rc;
  const LogOptions& log_options = a.log;
  const PlanningOptions& options = a.planning;
  const auto* kinds = &a.kinds;
  const std::string& json_path = a.json_path;
  FILE* const table = JsonToStdout(json_path) ? stderr : stdout;
  auto ctx_or = BuildPlanningContext(log_options, options);
  if (!ctx_or.ok()) return Fail("plan", ctx_or.status());
  const PlanningContext& ctx = *ctx_or;
  const sch::Problem& p = ctx.problem;

  std::fprintf(table, "log %s: %s, W = %lld, N = %lld, %.4g s/iteration (%s)\n", ctx.log.source.c_str(),
               ObservedMetrics(ctx).c_str(), static_cast<long long>(p.warmup_iterations),
               static_cast<long long>(p.total_iterations), p.seconds_per_iteration, ctx.tau_source.c_str());
  std::fprintf(table, "cost %s: stall %s, delay %s per checkpoint; %s window, %.4g requests/s\n", ctx.cost_source.c_str(),
              FormatSeconds(p.cost.stall_s).c_str(), FormatSeconds(p.cost.delay_s).c_str(),
              sch::ToString(p.requests.window), p.requests.RatePerSecond());
  std::fprintf(table, "prediction: %s\n", ctx.predictor_report.c_str());
  if (ctx.truth) std::fprintf(table, "CIL on log: %s\n", TruthNote(ctx).c_str());
  std::fprintf(table, "\n");
  std::fprintf(table, "%-13s %11s %12s %14s %14s %10s\n", "strategy", "checkpoints", "slowdown", "predicted CIL",
              "CIL on log", "plan time");
  nlohmann::json out;
  out["log"] = ctx.log.source;
  out["metric"] = predictor::ToString(ctx.metric);
  out["online_metric"] = predictor::ToString(ctx.online_metric);
  out["warmup_iterations"] = p.warmup_iterations;
  out["total_iterations"] = p.total_iterations;
  out["seconds_per_iteration"] = p.seconds_per_iteration;
  out["stall_s"] = p.cost.stall_s;
  out["delay_s"] = p.cost.delay_s;
  out["remeasure_s"] = p.cost.remeasure_s;
  out["remeasure"] = p.cost.remeasure_beside ? "beside" : "pause";
  out["prediction"] = ctx.predictor_report;
  out["truth_metric"] = predictor::ToString(ctx.truth_metric);
  out["judge"] = JudgeName(ctx);
  out["traffic_clock"] = schedulers::ToString(ctx.problem.requests.traffic_clock);
  out["staleness_table"] = ctx.staleness_source.empty() ? nlohmann::json() : nlohmann::json(ctx.staleness_source);
  out["separate_truth"] = ctx.separate_truth;
  out["truth_is_training_loss"] = TruthIsTrainingLoss(ctx);
  out["tau_source"] = ctx.tau_source;
  out["plans"] = nlohmann::json::array();
  for (sch::StrategyKind k : *kinds) {
    auto plan = PlanWith(ctx, k);
    if (!plan.ok()) {
      std::cerr << "viper plan: skipping " << sch::ToString(k) << ": " << plan.status().message() << "\n";
      continue;
    }
    std::optional<double> on_log;
    if (ctx.staleness_truth) {
      // On the table, as the judge charges it (the models re-published and
      // the copies kept for that included).
      auto ev = sch::EvaluateOnSurface(p, *ctx.staleness_truth, plan->schedule, plan->published, plan->kept,
                                       plan->pauses, plan->waits);
      if (!ev.ok()) return Fail("plan", ev.status());
      on_log = ev->cil;
    } else if (ctx.truth) {
      auto ev = sch::Evaluate(p, *ctx.truth, plan->schedule, sch::CountingMode::kFluid);
      if (!ev.ok()) return Fail("plan", ev.status());
      on_log = ev->cil;
    }
    const auto& s = plan->summary;
    char on_log_text[32] = "-";
    if (on_log) std::snprintf(on_log_text, sizeof(on_log_text), "%.6g", *on_log);
    std::fprintf(table, "%-13s %11lld %12s %14.6g %14s %10s\n", sch::ToString(k), static_cast<long long>(s.checkpoints),
                FormatSeconds(s.slowdown_s).c_str(), s.predicted.cil, on_log_text, FormatSeconds(s.plan_time_s).c_str());
    if (kinds->size() == 1) {
      std::fprintf(table, "\nschedule: %s\n%s\n", ScheduleText(plan->schedule, 50).c_str(), s.BriefReport().c_str());
      if (!plan->published.empty()) {
        std::string again;
        for (size_t q = 0; q < plan->schedule.size(); ++q) {
          if (plan->published[q] == plan->schedule[q]) continue;
          again += (again.empty() ? "" : ", ") + std::to_string(plan->schedule[q]) + " publishes the model of " +
                   std::to_string(plan->published[q]);
        }
        std::fprintf(table, "re-published: %s\n", again.c_str());
      }
      if (!plan->kept.empty()) {
        std::fprintf(table, "copies kept unpublished (regime ends): %s\n", ScheduleText(plan->kept, 50).c_str());
      }
    }
    nlohmann::json j;
    j["strategy"] = sch::ToString(k);
    j["schedule"] = plan->schedule;
    // The model each checkpoint publishes, when a strategy re-published a kept one.
    if (!plan->published.empty()) j["published"] = plan->published;
    // Where the producer copies a model it keeps unpublished (online's regime ends).
    if (!plan->kept.empty()) j["kept"] = plan->kept;
    j["checkpoints"] = s.checkpoints;
    j["slowdown_s"] = s.slowdown_s;
    j["predicted_cil"] = s.predicted.cil;
    j["predicted_objective"] = s.predicted.objective;
    j["cil_on_log"] = on_log ? nlohmann::json(*on_log) : nlohmann::json();
    j["exact"] = s.exact;
    j["message"] = s.message;
    j["plan_time_s"] = s.plan_time_s;
    out["plans"].push_back(j);
  }
  if (out["plans"].empty()) return Fail("plan", InvalidArgumentError("no strategy produced a schedule"));
  if (!json_path.empty()) {
    if (Status st = WriteJson(out, json_path, "plan"); !st.ok()) return Fail("plan", st);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
