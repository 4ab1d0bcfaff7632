// The strategies of DESIGN.md §2 behind one interface. `online` plays the
// closed-loop planner (online.h) over the log's observations in iteration
// order, exactly as the live producer drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"
#include "viper/schedulers/cil_model.h"
#include "viper/schedulers/online.h"
#include "viper/schedulers/problem.h"
#include "viper/schedulers/solvers.h"
#include "viper/schedulers/staleness.h"

namespace viper {
namespace schedulers {

enum class StrategyKind { kEpoch, kViperFixed, kViperGreedy, kFixed, kOptimal, kOnline, kOracle };
const char* ToString(StrategyKind kind);  // "epoch", "viper-fixed", ...
StatusOr<StrategyKind> StrategyKindFromString(const std::string& name);
std::vector<StrategyKind> AllStrategyKinds();
// "all" or "epoch,optimal,..." -> kinds; errors name the bad entry.
StatusOr<std::vector<StrategyKind>> ParseStrategyKinds(const std::string& list);

// Dense per-iteration curve on [first, last] from sparse points: linear
// interpolation, constant beyond the ends. Fails without points.
StatusOr<LossCurve> InterpolateCurve(const predictor::CurveData& points, int64_t first, int64_t last);

// What a strategy plans from.
struct PlanningInput {
  Problem problem;
  // The planner's belief about the loss at every iteration of [W, N]
  // (normally the predictor's extrapolation of the warm-up).
  LossCurve predicted;
  // The logged (iteration, loss) points of the planning metric. Strategies
  // other than `oracle` read only those with iteration <= W, except
  // `online`, which consumes them one by one in iteration order and decides
  // at each from what it has seen so far (what a live producer would see).
  predictor::CurveData observed;
  // What `observed` is: validation losses, or training losses.
  ObservationKind observed_kind = ObservationKind::kValidation;
  // The true curve on [W, N] (for `oracle`); absent = oracle unavailable.
  std::optional<LossCurve> truth;
  // A staleness table's test_loss surface: `oracle` is then the exact optimum
  // on it (SolveOptimalOnSurface) instead of on `truth`.
  std::shared_ptr<const StalenessSurface> truth_staleness;
  // The same table's val_loss surface: `online` reads from it, at each of its
  // observation points t, only L(served version, t), the served version
  // re-measured on that moment's validation sample (what a live producer
  // measures then; nothing later). Null = no re-measurement.
  std::shared_ptr<const StalenessSurface> observed_staleness;
  // The run's own clock (Problem::elapsed_s: seconds from W to the end of
  // each iteration of [W, N], from the log's per-iteration times that the
  // judge replays; empty = unknown): `oracle` plans on it instead of the
  // uniform warm-up tau the other strategies have, so that the bound is
  // planned on the clock the schedule is judged on. Only a bound may read
  // it: it is the future.
  std::vector<double> truth_elapsed_s;
};

struct StrategyOptions {
  // epoch: iterations per epoch (> 0).
  int64_t iterations_per_epoch = 0;
  // online: makes the forecaster of each regime (required for online).
  ForecasterFactory forecasters;
  // online: the closed loop's settings (its metric is PlanningInput::observed_kind).
  OnlinePlanner::Options online;
};

struct PlanSummary {
  StrategyKind strategy = StrategyKind::kOptimal;
  // True when the schedule is proven optimal for the fluid objective on the
  // curve it was planned on (fixed: among single intervals).
  bool exact = false;
  // One sentence on what was done.
  std::string message;
  int64_t checkpoints = 0;
  // m * sigma, seconds, plus the keep copies and the re-measuring pauses.
  double slowdown_s = 0.0;
  // online: models re-measured on a traffic state new to them (served and
  // kept; Plan::pauses) and the producer time they took, seconds; beside
  // training, the seconds the decisions waited for them (Plan::waits).
  int64_t remeasurements = 0;
  double remeasure_s = 0.0;
  double remeasure_wait_s = 0.0;
  // Fluid evaluation on the predicted curve (what the planner expects).
  Evaluation predicted;
  // The solver's own figure (see Solution::objective).
  double solver_objective = 0.0;
  int64_t dp_layers = 0;
  // online: exact re-plans (one per measurement after the warm-up).
  int64_t replans = 0;
  // Wall time of MakePlan, seconds (informational; never asserted).
  double plan_time_s = 0.0;

  // "optimal: 42 checkpoints, predicted CIL 1.23e4, slowdown 4.2 s (exact, 1 layer, 0.05 s)".
  std::string BriefReport() const;
};

struct Plan {
  Schedule schedule;
  // The model each checkpoint publishes (simulator::Simulator::Options::
  // published): empty = its own iteration's; a strategy that re-publishes an
  // older kept version that measures better on today's traffic fills it.
  std::vector<int64_t> published;
  // The iterations at which the producer copied its model without
  // publishing it (simulator::Simulator::Options::kept_at): `online`'s
  // copies of possible regime ends (OnlinePlanner::copies; where a switch
  // is predicted next, or at every validation point). Each blocks the
  // producer cost.keep_copy_s.
  std::vector<int64_t> kept;
  // The producer's pauses to re-measure models it does not train, as
  // (iteration, seconds) with increasing iterations (simulator::Simulator::
  // Options::pauses): `online`'s served and kept models, each measured on a
  // traffic state new to it (cost.remeasure_s each; a state it was measured
  // on before is read again for free, as the live producer does). Each comes
  // after the measurement at its iteration, before a checkpoint there.
  std::vector<std::pair<int64_t, double>> pauses;
  // Re-measured beside training (cost.remeasure_beside): the seconds the
  // decision at an iteration waited for its re-measurements, as (iteration,
  // seconds) with increasing iterations (simulator::Simulator::Options::
  // waits). The producer trains on meanwhile; a checkpoint there starts
  // that much later (it publishes the model of its iteration, kept aside).
  std::vector<std::pair<int64_t, double>> waits;
  PlanSummary summary;
  // online with OnlinePlanner::Options::record_decisions: every decision.
  std::vector<OnlinePlanner::Decision> decisions;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual StrategyKind kind() const = 0;
  virtual StatusOr<Plan> MakePlan(const PlanningInput& input) = 0;
};

// InvalidArgument when an option the kind needs is missing.
StatusOr<std::unique_ptr<Strategy>> MakeStrategy(StrategyKind kind, const StrategyOptions& options);

}  // namespace schedulers
}  // namespace viper
