// Options shared by `viper plan`, `viper simulate` and `viper evaluate`:
// warm-up, metric, predictor selection, requests, transport cost, drift,
// budget. They turn a training log into the planning context: the problem,
// the true curve, the predictor's curve fitted on the warm-up only.
//
// Program_options binds straight onto the fields of `scenario` (the
// library's ScenarioOptions), so each default exists once: in the library's
// Options struct (the transport flags default to its cost source, the gpu
// preset), or here where the library has none.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "cli_util.h"
#include "log_options.h"
#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"
#include "viper/schedulers/problem.h"
#include "viper/schedulers/scenario.h"
#include "viper/schedulers/strategy.h"
#include "viper/simulator/compare.h"

namespace viper {
namespace cli {

struct PlanningOptions {
  // Bound directly: total_iterations, seconds_per_iteration,
  // request_interval_s, problem_template (seed, drift, price, spacing), online
  // and the preset's poll period. Its warm-up fields are set from `warmup`;
  // its cost source (`tier`, a PresetCost until BuildPlanningContext picks
  // the source) from the transport flags below.
  schedulers::ScenarioOptions scenario;
  Warmup warmup = Warmup::Fraction(scenario.warmup_fraction);  // --warmup N|P%
  std::string metric = "auto";        // auto|train_loss|val_loss: what the planners observe
  std::string truth_metric = "auto";  // auto|test_loss|val_loss|train_loss: what the schedules are judged on
  std::string select = predictor::ToString(scenario.predictor.selection);
  double seconds_per_epoch = 0;       // > 0: tau = this / the log's iterations per epoch
  std::string arrivals = "fixed";     // fixed|poisson|trace (the library's kFixedRate)
  std::string traffic_clock = "wall";  // wall|producer (schedulers::TrafficClock)
  std::string anticipate_returns = "on";  // on|off (OnlinePlanner::Options::anticipate_returns)
  std::string calm_decisions = "on";      // on|off (OnlinePlanner::Options::calm_decisions)
  std::string partial_waits = "on";       // on|off (OnlinePlanner::Options::partial_waits)
  std::string keep_regime_ends = "predicted";  // off|predicted|every (OnlinePlanner::Options::regime_ends)
  std::string remeasure_s = "auto";            // auto | seconds (ScenarioOptions::remeasure_s)
  std::string remeasure = "beside";            // pause | beside (ScenarioOptions::remeasure_beside)
  std::string ramp_hold = "on";           // on|off (OnlinePlanner::Options::hold_young_ramps)
  int64_t requests = 0;               // > 0: fixed window of this many requests
  std::string request_trace;          // file of arrival times (s since warm-up end), one per line
  std::string transport = ToString(preset().tier);             // gpu|host|pfs preset
  std::string mode = preset().synchronous ? "sync" : "async";  // sync|async
  std::string notify = ToString(preset().notification);        // push|poll
  std::string model_bytes = "600M";   // model size for the presets and the cost model (the preset's, NT3.A)
  std::string cost_model;             // measured samples (CSV/JSON) instead of the preset
  std::optional<double> stall_s;      // direct sigma (with delay_s) instead of a tier
  std::optional<double> delay_s;      // direct delta
  double slowdown_budget_s = -1;      // < 0 = unlimited
  // Staleness table: a file, "auto" (<log stem>.staleness.csv[.gz] beside the
  // log, when there is one) or "none" (the diagonal judge).
  std::string staleness = "none";

  // The preset that the transport flags fill in (scenario.tier's default).
  schedulers::PresetCost& preset() { return std::get<schedulers::PresetCost>(scenario.tier); }
  const schedulers::PresetCost& preset() const { return std::get<schedulers::PresetCost>(scenario.tier); }
};

// Adds the planning options (bound to `options`) to `desc`.
void AddPlanningOptions(po::options_description* desc, PlanningOptions* options);

// Checks every option value that needs no file (ranges, NaN/inf, sizes,
// names): a failure is bad usage (exit 2) and names the option, the value
// and the valid range.
Status ValidatePlanningOptions(const PlanningOptions& options);

// Everything a strategy needs, built from a log and the options: the
// simulator's Scenario (problem, tier, true and predicted curves, ...) plus
// the log itself and where the cost came from.
struct PlanningContext : schedulers::Scenario {
  TrainingLog log;
  std::string cost_source;  // "gpu preset", "measured (FILE)", "direct (--stall-s/--delay-s)"
  double model_bytes = 0;
  std::string tau_source;   // "--seconds-per-iteration", "measured over the warm-up", ...
};

// The staleness table beside `log_path` (<stem>.staleness.csv.gz or .csv,
// the stem being the name without .csv/.json/.gz), or "" when there is none.
std::string StalenessTableBeside(const std::string& log_path);
// What the schedules' requests were charged: "staleness table" or "diagonal".
std::string JudgeName(const PlanningContext& ctx);

// Reads the log and builds the context. Errors are bad input (exit 1).
StatusOr<PlanningContext> BuildPlanningContext(const LogOptions& log_options, const PlanningOptions& options);

// The number of requests the simulated window of `schedule` would serve, and
// a check against kMaxRequests naming the options behind it: kOutOfRange.
Status CheckSimulationSize(const PlanningContext& ctx, const schedulers::Schedule& schedule);

// CheckSimulationSize as the check simulator::CompareStrategies runs on each
// plan before simulating it.
simulator::ScheduleCheck SimulationSizeCheck(const PlanningContext& ctx);

// The replayed clock against tau (schedulers::MeasureReplayedPace) as the
// simulate and evaluate JSONs carry it: null when the scenario replays no
// per-iteration times.
nlohmann::json ReplayedPaceJson(const std::optional<schedulers::ReplayedPace>& pace);

// One line saying what the schedules are judged on; warns when the truth is
// the noisy per-batch training loss.
std::string TruthNote(const PlanningContext& ctx);
// What the planners observe, for the output: the metric, followed by
// "(online: val_loss)" where the warm-up fit fell back to train_loss and
// online still observes the validation loss (Scenario::online_metric).
std::string ObservedMetrics(const PlanningContext& ctx);
// True when the truth curve is the training loss (noisy per-batch values).
bool TruthIsTrainingLoss(const PlanningContext& ctx);

// Builds the strategy and plans. Adds the forecaster for `online`.
StatusOr<schedulers::Plan> PlanWith(const PlanningContext& ctx, schedulers::StrategyKind kind);

}  // namespace cli
}  // namespace viper
