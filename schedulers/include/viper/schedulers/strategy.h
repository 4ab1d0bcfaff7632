// The strategies of DESIGN.md §2 behind one interface, the forecaster the
// online strategy re-fits, and the step API the live producer drives.
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
#include "viper/schedulers/problem.h"
#include "viper/schedulers/solvers.h"

namespace viper {
namespace schedulers {

enum class StrategyKind { kEpoch, kViperFixed, kViperGreedy, kFixed, kOptimal, kOnline, kOracle };
const char* ToString(StrategyKind kind);  // "epoch", "viper-fixed", ...
StatusOr<StrategyKind> StrategyKindFromString(const std::string& name);
std::vector<StrategyKind> AllStrategyKinds();
// "all" or "epoch,optimal,..." -> kinds; errors name the bad entry.
StatusOr<std::vector<StrategyKind>> ParseStrategyKinds(const std::string& list);

// Forecasts the loss curve from the losses observed so far.
class Forecaster {
 public:
  virtual ~Forecaster() = default;
  // Predicted losses for every iteration in [first, last] (finite, >= 0),
  // from the points of `observed` (iterations increasing).
  virtual StatusOr<LossCurve> Forecast(const predictor::CurveData& observed, int64_t first, int64_t last) = 0;
};

// A Forecaster backed by predictor::LearningCurvePredictor: Fit on the first
// call, Refit (warm-started) when more points are observed.
std::unique_ptr<Forecaster> MakePredictorForecaster(const predictor::LearningCurvePredictor::Options& options);

// Dense per-iteration curve on [first, last] from sparse points: linear
// interpolation, constant beyond the ends. Fails without points.
StatusOr<LossCurve> InterpolateCurve(const predictor::CurveData& points, int64_t first, int64_t last);

// Receding-horizon planner: forecast from what has been seen, plan the rest
// exactly (SolveOptimal from the checkpoints taken), take the first planned
// checkpoint, repeat. The live producer calls the same two methods.
class OnlinePlanner {
 public:
  OnlinePlanner(Problem problem, std::shared_ptr<Forecaster> forecaster);

  // The next checkpoint iteration (> the last taken one), given the losses
  // observed so far; nullopt when the plan takes no more checkpoints.
  StatusOr<std::optional<int64_t>> NextCheckpoint(const predictor::CurveData& observed);
  // Records a checkpoint taken at `iteration` (after the last, inside (W, N]).
  Status Commit(int64_t iteration);

  const Schedule& taken() const { return taken_; }
  int64_t replans() const { return replans_; }
  // The remaining plan of the last NextCheckpoint call.
  const Schedule& last_plan() const { return last_plan_; }

 private:
  Problem problem_;
  std::shared_ptr<Forecaster> forecaster_;
  Schedule taken_;
  Schedule last_plan_;
  int64_t replans_ = 0;
};

// What a strategy plans from.
struct PlanningInput {
  Problem problem;
  // The planner's belief about the loss at every iteration of [W, N]
  // (normally the predictor's extrapolation of the warm-up).
  LossCurve predicted;
  // The logged (iteration, loss) points. Strategies other than `oracle` read
  // only those with iteration <= W, except `online`, which reads those up to
  // its latest checkpoint (what a live producer would have seen).
  predictor::CurveData observed;
  // The true curve on [W, N] (for `oracle`); absent = oracle unavailable.
  std::optional<LossCurve> truth;
};

struct StrategyOptions {
  // epoch: iterations per epoch (> 0).
  int64_t iterations_per_epoch = 0;
  // online: forecaster re-fitted at every checkpoint (required for online).
  std::shared_ptr<Forecaster> forecaster;
};

struct PlanSummary {
  StrategyKind strategy = StrategyKind::kOptimal;
  // True when the schedule is proven optimal for the fluid objective on the
  // curve it was planned on (fixed: among single intervals).
  bool exact = false;
  // One sentence on what was done.
  std::string message;
  int64_t checkpoints = 0;
  // m * sigma, seconds.
  double slowdown_s = 0.0;
  // Fluid evaluation on the predicted curve (what the planner expects).
  Evaluation predicted;
  // The solver's own figure (see Solution::objective).
  double solver_objective = 0.0;
  int64_t dp_layers = 0;
  // online: NextCheckpoint calls (each a re-fit and a re-plan).
  int64_t replans = 0;
  // Wall time of MakePlan, seconds (informational; never asserted).
  double plan_time_s = 0.0;

  // "optimal: 42 checkpoints, predicted CIL 1.23e4, slowdown 4.2 s (exact, 1 layer, 0.05 s)".
  std::string BriefReport() const;
};

struct Plan {
  Schedule schedule;
  PlanSummary summary;
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
