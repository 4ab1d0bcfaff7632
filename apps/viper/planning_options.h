// Options shared by `viper plan` and `viper simulate`: warm-up, metric,
// predictor selection, requests, transport cost, drift, budget. They turn a
// training log into the planning context: the problem, the true curve, the
// predictor's curve fitted on the warm-up only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli_util.h"
#include "log_options.h"
#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"
#include "viper/schedulers/problem.h"
#include "viper/schedulers/strategy.h"
#include "viper/schedulers/scenario.h"
#include "viper/simulator/compare.h"
#include "viper/simulator/presets.h"

namespace viper {
namespace cli {

struct PlanningOptions {
  int64_t warmup = 0;                 // W in iterations; 0 = use warmup_fraction
  double warmup_fraction = 0.2;       // of the log's iteration range
  int64_t total_iterations = 0;       // N; 0 = the log's last iteration
  std::string metric = "auto";        // auto|train_loss|val_loss: what the planners observe
  std::string truth_metric = "auto";  // auto|test_loss|val_loss|train_loss: what the schedules are judged on
  std::string select = "ensemble";    // predictor selection
  double seconds_per_iteration = 0;   // 0 = measured from the log
  std::string arrivals = "fixed";     // fixed|poisson|trace
  double request_interval_s = 0;      // 0 = one request per training iteration (tau)
  int64_t requests = 0;               // > 0: fixed window of this many requests
  std::string request_trace;          // file of arrival times (s since warm-up end), one per line
  uint64_t seed = 1;                  // Poisson seed
  std::string transport = "gpu";      // gpu|host|pfs preset
  std::string mode = "async";         // sync|async
  std::string notify = "push";        // push|poll
  double poll_period_s = 1.0;         // polling period
  std::string model_bytes = "600M";   // model size for the presets and the cost model
  std::string cost_model;             // measured samples (CSV/JSON) instead of the preset
  double stall_s = -1;                // direct sigma (with delay_s) instead of a tier
  double delay_s = -1;                // direct delta
  double drift = 0;                   // rho, loss per second of staleness
  double price_per_slowdown_s = 0;    // objective units per second of slowdown
  double slowdown_budget_s = -1;      // < 0 = unlimited
  int64_t min_spacing = 1;            // iterations between checkpoints
  schedulers::OnlinePlanner::Options online;  // the closed loop's gate and change detector
};

void AddPlanningOptions(po::options_description* desc, PlanningOptions* options);

// Everything a strategy needs, built from a log and the options: the
// simulator's Scenario (problem, tier, true and predicted curves, ...) plus
// the log itself and where the cost came from.
struct PlanningContext : schedulers::Scenario {
  TrainingLog log;
  std::string cost_source;  // "gpu preset", "measured (FILE)", "direct (--stall-s/--delay-s)"
  double model_bytes = 0;
};

StatusOr<PlanningContext> BuildPlanningContext(const LogOptions& log_options, const PlanningOptions& options);

// Builds the strategy and plans. Adds the forecaster for `online`.
StatusOr<schedulers::Plan> PlanWith(const PlanningContext& ctx, schedulers::StrategyKind kind);

}  // namespace cli
}  // namespace viper
