// The planning context: a real training log and a checkpoint cost turned into
// the planning problem, the true curve and the predictor's curve (fitted on
// the warm-up only), and the one path every caller plans through
// (PlanStrategy). The one place a scenario is assembled: `viper
// simulate|plan|evaluate`, viper.Planner (Python), `viper run` (the live
// producer and its comparison with the simulation) and viper-bench each make
// one MakeScenario call; the simulator only judges the plans. Pure
// computation: the caller reads files.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "viper/core/status.h"
#include "viper/core/training_log.h"
#include "viper/core/transfer.h"
#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"
#include "viper/core/staleness_table.h"
#include "viper/schedulers/problem.h"
#include "viper/schedulers/staleness.h"
#include "viper/schedulers/strategy.h"

namespace viper {
namespace schedulers {

// Where a scenario's checkpoint cost comes from (ScenarioOptions::tier).
// MakeScenario turns each source into Scenario::tier, the phases the
// simulator replays, and Problem::cost = tier.ToCheckpointCost(), the sigma
// and delta the planners see.

// A tier's calibrated preset (presets.h) for a model size and mode.
struct PresetCost {
  // The transport tier.
  Tier tier = Tier::kGpu;
  // Model size in bytes (> 0); 600 MB is the paper's NT3.A.
  double model_size_bytes = 600e6;
  // Synchronous (producer blocked until delivered) or async (blocked for the snapshot only).
  bool synchronous = false;
  // Push notification or polling.
  Notification notification = Notification::kPush;
  // Polling period in seconds (> 0 when polling).
  double poll_period_s = 1.0;
};

// sigma and delta as measured (a live run's version 0, `--stall-s/--delay-s`,
// viper.Planner's cost). As phases: the snapshot lasts sigma and the load the
// rest of delta, with no per-byte term (a 1-byte model, every bandwidth the
// largest double); async, so the stall is sigma alone.
struct MeasuredCost {
  // sigma: seconds the producer is blocked per checkpoint (>= 0).
  double stall_s = 0.0;
  // delta: seconds from the checkpoint's start until servable (>= 0; one
  // below stall_s counts as stall_s).
  double delay_s = 0.0;
  // Polling adds half a poll period to delta (the mean wait of a poller).
  Notification notification = Notification::kPush;
  // Polling period in seconds (> 0 when polling).
  double poll_period_s = 1.0;
};

// A preset, measured sigma/delta, or explicit phases (taken as they are: a
// cost model fitted on measured samples, a test's own tier).
using CostSource = std::variant<PresetCost, MeasuredCost, TierCost>;

// The phases of a cost source (validate them with TierCost::IsValid; a
// MeasuredCost's sigma and delta are checked by ScenarioOptions::IsValid).
TierCost ToTierCost(const CostSource& source);

struct ScenarioOptions {
  // Warm-up W in iterations; 0 = warmup_fraction of the log's iteration range.
  int64_t warmup_iterations = 0;
  // Warm-up as a fraction of the log, in (0, 1), when warmup_iterations is 0.
  double warmup_fraction = 0.2;
  // N, the last training iteration; 0 = the log's last.
  int64_t total_iterations = 0;
  // What the planners observe; absent = val_loss when the warm-up holds
  // enough validation points for the predictor, else train_loss (and then
  // `online` still observes val_loss when the warm-up holds any: see
  // Scenario::online_metric). Never test_loss: that is the judge's truth.
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
  // The transport's cost: a tier preset (by default the gpu tier's, 600 MB,
  // async, push), measured sigma/delta, or explicit phases.
  CostSource tier = PresetCost();
  // The closed loop's settings for `online` (its metric follows `metric`).
  OnlinePlanner::Options online;
  // A staleness table of the same run (core/staleness_table.h): the judge
  // and the oracle then charge L(version, traffic) from its test_loss, and
  // `online` re-measures the served version from its val_loss. Absent = the
  // diagonal (a stale version is charged the loss it had on its own traffic).
  std::optional<StalenessTable> staleness;
  // Seconds the producer pauses to re-measure one model it does not train
  // (CheckpointCost::remeasure_s: `online`'s served and kept models on a
  // traffic state new to them, charged by the judge). Negative = the log's
  // own validation pause (ValidationPauseSeconds); 0 = free.
  double remeasure_s = -1.0;
  // Re-measure beside training instead of pausing it
  // (CheckpointCost::remeasure_beside): the default since the sixty-third
  // session, as the live producer does (LiveRun::Options::remeasure_beside).
  bool remeasure_beside = true;

  bool IsValid(std::string* error) const;
};

// What measuring a model on the validation sample costs the producer in
// the log: the median over its validation rows of that row's iteration time
// less the median iteration time (rows logged at consecutive iterations
// only; at least 0). 0 where the log cannot show one (no wall times, or no
// validation row right after another row).
double ValidationPauseSeconds(const TrainingLog& log);

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
  // What `online` observes, as a live producer measures it: val_loss
  // whenever the warm-up holds a validation point, even where it holds
  // fewer than the warm-up fit needs and `metric` (the static strategies'
  // fit) fell back to train_loss; else `metric`. A producer that validates
  // measures every validation point as it comes, and the per-batch training
  // loss overstates what a newer version gains on the traffic (bench/README,
  // "Twenty-ninth session"). online_points is that series over the whole
  // log where the two metrics differ, else empty (OnlinePoints).
  predictor::LossMetric online_metric = predictor::LossMetric::kTrainLoss;
  predictor::CurveData online_points;
  Problem problem;        // with cost = tier.ToCheckpointCost()
  TierCost tier;          // the cost source's phases (ToTierCost)
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

// InvalidArgument for bad options or a log that cannot make the scenario (a
// warm-up too short for the predictor names the warm-up that would do);
// FailedPrecondition with a message that starts "<log.source>: " when tau is
// to be measured and the log has no wall times for it (the caller says how
// to give tau in its own words).
StatusOr<Scenario> MakeScenario(const TrainingLog& log, const ScenarioOptions& options);

// Plans with one strategy (online gets OnlineForecasters and observes
// OnlinePoints).
StatusOr<Plan> PlanStrategy(const Scenario& scenario, StrategyKind kind);
// The kind of observation `online` plans on: Scenario::online_metric.
ObservationKind OnlineObservationKind(const Scenario& scenario);
// The series `online` observes: online_points where online_metric differs
// from metric, else points.
const predictor::CurveData& OnlinePoints(const Scenario& scenario);
// The online planner's forecasters: the scenario's predictor, which fits a
// regime from `online.min_fit_points` measurements where that is fewer than
// the warm-up fit's minimum (predictor_options.min_points), but from no
// fewer than 5 (the 4-parameter families need more points than
// parameters). With the predictor's own minimum, a regime's fit below it
// would fail and its forecast would stay flat.
ForecasterFactory OnlineForecasters(const Scenario& scenario, const OnlinePlanner::Options& online);
// The run's own clock, Problem::elapsed_s from the log's per-iteration times
// that the simulator replays (empty without them): what the bounds (oracle,
// val-oracle) plan on, where the other strategies have only the warm-up's
// uniform tau (PlanningInput::truth_elapsed_s).
std::vector<double> TruthElapsed(const Scenario& scenario);
// The scenario's problem on that clock: a bound's problem.
Problem BoundProblem(const Scenario& scenario);

// How the clock the simulator replays (the log's own per-iteration times
// after the warm-up) compares with tau, the warm-up's pace that every
// strategy but the bounds plans on. A run on a loaded machine shows it:
// the wall clock replays each stall of the producer as traffic that moved
// on (bench/README.md, "Nineteenth session").
struct ReplayedPace {
  double seconds_per_iteration = 0;  // mean over W+1..N
  double over_tau = 0;               // that / problem.seconds_per_iteration
  // Share of the time after the warm-up spent in iterations slower than
  // 10x the median one. On a quiet machine the validation points alone make
  // 11-29% of it (the shipped and held-out runs); on a loaded one, most.
  double slow_share = 0;
};
// nullopt when the scenario replays no per-iteration times (a uniform tau).
std::optional<ReplayedPace> MeasureReplayedPace(const Scenario& scenario);
// One line for a human: the replayed pace, its ratio to tau, the slow share,
// and, when the ratio is outside [2/3, 3/2] or the slow share above a half,
// what that does to a wall-clock evaluation.
std::string DescribeReplayedPace(const ReplayedPace& pace);
// Whether DescribeReplayedPace warns.
bool IrregularPace(const ReplayedPace& pace);

}  // namespace schedulers
}  // namespace viper
