// The planning context: a real training log turned into the planning
// problem, the true curve and the predictor's curve (fitted on the warm-up
// only), and the one path every caller plans through (PlanStrategy). Shared by
// `viper simulate`, `viper plan`, `viper run` (the live producer) and
// viper-bench; the simulator only judges the plans. Pure computation: the
// caller reads files.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/core/training_log.h"
#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"
#include "viper/core/staleness_table.h"
#include "viper/schedulers/problem.h"
#include "viper/schedulers/staleness.h"
#include "viper/schedulers/strategy.h"

namespace viper {
namespace schedulers {

struct ScenarioOptions {
  // Warm-up W in iterations; 0 = warmup_fraction of the log's iteration range.
  int64_t warmup_iterations = 0;
  // Warm-up as a fraction of the log, in (0, 1), when warmup_iterations is 0.
  double warmup_fraction = 0.2;
  // N, the last training iteration; 0 = the log's last.
  int64_t total_iterations = 0;
  // What the planners observe; absent = val_loss when the warm-up holds
  // enough validation points for the predictor, else train_loss. Never
  // test_loss: that is the judge's truth.
  std::optional<predictor::LossMetric> metric;
  // What the schedules are judged on (the served truth); absent = test_loss
  // when the log has it (a sample disjoint from validation, standing for the
  // inference traffic), else the planning metric itself (the output says so).
  std::optional<predictor::LossMetric> truth_metric;
  // Predictor options (selection, families, ...).
  predictor::LearningCurvePredictor::Options predictor;
  // tau in seconds as the planners see it; 0 = the mean over the warm-up
  // (wall-time span / iteration span, validation and epoch-boundary pauses
  // included): a producer knows nothing of later rows. The simulator still
  // replays the log's own per-iteration times (log_iteration_times).
  double seconds_per_iteration = 0;
  // Simulate with the log's per-iteration wall times (true) or constant tau.
  bool log_iteration_times = true;
  // Seconds between requests (mean for Poisson); 0 = tau, one request per
  // training iteration. Overrides problem_template.requests.interval_s.
  double request_interval_s = 0;
  // Arrivals, window, drift, price, budget and spacing as in
  // Problem. Its W, N, tau, cost and request interval are ignored.
  Problem problem_template;
  // The transport: phases for the simulator and sigma/delta for the planners.
  TierCost tier;
  // The closed loop's settings for `online` (its metric follows `metric`).
  OnlinePlanner::Options online;
  // A staleness table of the same run (core/staleness_table.h): the judge
  // and the oracle then charge L(version, traffic) from its test_loss, and
  // `online` re-measures the served version from its val_loss. Absent = the
  // diagonal (a stale version is charged the loss it had on its own traffic).
  std::optional<StalenessTable> staleness;

  bool IsValid(std::string* error) const;
};

struct Scenario {
  std::string source;                 // the log's file
  predictor::LossMetric metric = predictor::LossMetric::kTrainLoss;
  predictor::CurveData points;        // the metric over the whole log
  // What the truth curve is read from; separate_truth = it is not the
  // planning metric (a disjoint sample), so no rule can be rewarded for
  // selecting the noise it observed.
  predictor::LossMetric truth_metric = predictor::LossMetric::kTrainLoss;
  bool separate_truth = false;
  predictor::CurveData observed;      // points with iteration <= W
  Problem problem;        // with cost = tier.ToCheckpointCost()
  TierCost tier;
  std::optional<LossCurve> truth;  // [W, N] when the log covers N
  LossCurve predicted;    // [W, N] from the warm-up only
  std::string predictor_report;
  predictor::LearningCurvePredictor::Options predictor_options;
  OnlinePlanner::Options online;      // the closed loop's settings
  int64_t iterations_per_epoch = 0;   // 0 when the log has no epochs
  std::vector<double> iteration_times_s;  // W+1..N (empty = constant tau)
  // From ScenarioOptions::staleness: test_loss (the judge's) and val_loss
  // (what a producer re-measures) surfaces; null without a table.
  std::shared_ptr<const StalenessSurface> staleness_truth, staleness_observed;
  std::string staleness_source;        // the table's file
};

StatusOr<Scenario> MakeScenario(const TrainingLog& log, const ScenarioOptions& options);

// Seconds per iteration measured over the warm-up (the rows up to iteration
// W): the MEAN of its wall-time steps, not the median, since validation and
// epoch-boundary pauses are part of the training time the serving window and
// the checkpoint times see. InvalidArgument naming the log when it has no
// wall-time column or fewer than two timed rows by W (the caller adds how to
// give tau instead).
StatusOr<double> WarmupSecondsPerIteration(const TrainingLog& log, int64_t W);

// Plans with one strategy (online gets a predictor-backed forecaster).
StatusOr<Plan> PlanStrategy(const Scenario& scenario, StrategyKind kind);

}  // namespace schedulers
}  // namespace viper
