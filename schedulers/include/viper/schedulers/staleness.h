// A stale version on today's traffic (DESIGN.md §1): the loss surface
// L(v, t) of a staleness table (core/staleness_table.h), the fluid CIL of a
// schedule charged on it, and the exact oracle under it.
//
// Interpolation. The table measures L on a grid: versions v_1 < ... < v_G
// (the rows' version_iteration) and, per version, some traffic points t >= v.
// Between them the surface is
//   L(v, t) = D(v) + P_a(t) - P_a(v),   P_a(x) = L(a, x) - L(a, a),
// where D is the diagonal L(v, v) interpolated linearly between the grid
// versions that have their diagonal row (constant beyond the ends), a is the
// largest grid version <= v whose row reaches t, and P_a is interpolated
// linearly between the row's traffic points (its first point is (a, 0); a
// row without its diagonal takes D(a) there). In words: a version between
// grid points starts at the interpolated diagonal and decays, over the
// traffic interval [v, t], as the nearest older measured version decayed over
// that same interval. On grid pairs the surface is the table itself; a step
// change at traffic iteration c reaches every version older than c, and a
// version made after c does not inherit the step its older neighbour took.
// Fractional traffic (between iterations) is linear in t as well.
//
// Diverged models. A loss of +inf (a NaN or inf read with
// NonFinitePolicy::kDiverged) is a model that diverged: it must be +inf on
// its own diagonal and then counts as +inf on every traffic (a table with
// +inf off the diagonal of a finite version is an error). The diagonal
// between a measured version and a diverged one is +inf (nothing says when it
// diverged), and a diverged row never judges another version's decay.
//
// Coverage. A pair (v, t) is covered when some grid version a <= v has a row
// reaching t; anything else is an error naming the pair, never an
// extrapolation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "viper/core/staleness_table.h"
#include "viper/core/status.h"
#include "viper/schedulers/problem.h"

namespace viper {
namespace schedulers {

// Which measurement of the table a surface holds.
enum class StalenessSample {
  kValidation,  // val_loss: the producer's validation sample (what a planner may observe)
  kTest,        // test_loss: the disjoint traffic sample (the judge's truth)
};
const char* ToString(StalenessSample sample);

class StalenessSurface {
 public:
  // InvalidArgument naming the table when it is empty, has no diagonal row,
  // or holds a pair with t < v or a negative or NaN loss (or +inf off the
  // diagonal of a finite version).
  static StatusOr<StalenessSurface> Make(const StalenessTable& table, StalenessSample sample);

  // L(version, traffic), traffic >= version (fractional traffic
  // interpolated). OutOfRange naming the pair when it is not covered.
  StatusOr<double> At(int64_t version, double traffic) const;
  // The integral of L(version, p) dp over p in [p0, p1], version <= p0 <= p1.
  StatusOr<double> Integral(int64_t version, double p0, double p1) const;
  // OK when every version in [first_version, ...] can be judged on traffic up
  // to last_traffic: some grid version <= first_version has a row reaching
  // last_traffic. The message names the pair and what the table holds.
  Status CheckCovers(int64_t first_version, int64_t last_traffic) const;

  // Grid versions (increasing).
  std::vector<int64_t> Versions() const;
  // The measured pairs as (version, traffic, loss), by version then traffic
  // (a row without its diagonal shows the interpolated one); for plots.
  struct GridPoint {
    int64_t version;
    double traffic, loss;
  };
  std::vector<GridPoint> Grid() const;
  // A diverged model: the diagonal at `version` is +inf (a grid version
  // whose own-time loss is +inf, or a version interpolated against one).
  // At() and Integral() charge it +inf on every traffic; the oracle never
  // publishes it.
  bool Diverged(int64_t version) const;
  // Where the traffic first changes: the smallest traffic knot t at which
  // some finite version v < t measures more than `relative_tolerance` x its
  // own-time loss away from it (|L(v, t) - L(v, v)|), and the largest knot
  // below t (every version measured the same up to there). None when no pair
  // moves that much: traffic that does not drift.
  struct Change {
    double last_unchanged = 0.0;
    double first_changed = 0.0;
  };
  std::optional<Change> FirstChange(double relative_tolerance) const;
  // The table's file (for messages) and sample.
  const std::string& source() const { return source_; }
  StalenessSample sample() const { return sample_; }
  // The smallest loss anywhere on the grid (a lower bound of the surface).
  double min_loss() const { return min_loss_; }

 private:
  struct Row {
    int64_t version = 0;
    std::vector<double> traffic;  // knots, increasing; traffic[0] == version
    std::vector<double> excess;   // P at the knots (excess[0] == 0)
    std::vector<double> prefix;   // integral of P from version to each knot
    double min_excess = 0.0;      // the smallest P (< 0: some stale pair beats the diagonal)
    bool diverged = false;        // its own-time loss is +inf (then every excess is 0)
  };
  // The row judging (version, traffic), or nullptr.
  const Row* RowFor(int64_t version, double traffic) const;
  double Diagonal(double version) const;
  static double Excess(const Row& row, double x);
  static double ExcessIntegral(const Row& row, double x);
  Status NotCovered(int64_t version, double traffic) const;

  std::string source_;
  StalenessSample sample_ = StalenessSample::kTest;
  std::vector<Row> rows_;               // by version
  std::vector<double> diag_v_, diag_l_; // the diagonal's knots
  double min_loss_ = 0.0;
};

// The fluid CIL of `schedule` charged on `surface` (DESIGN.md §1 with
// L(s_k, t)): version k is served on [A_k, A_{k+1}) clipped to the window,
// each instant charged L(s_k, p(x)) at rate requests/s, where p(x) is the
// traffic's position. Under TrafficClock::kProducer it is the producer's: it
// advances one iteration per tau while training, stays at s_k during
// checkpoint k's stall and at N after training ends. Under kWall it is
// min(N, W + x / tau): stalls do not hold it back.
// Plus the problem's linear drift term, as in cil_model.h. `objective` adds
// price_per_slowdown_s x m x sigma. Versions never servable inside the window
// serve nothing.
struct SurfaceEvaluation {
  double cil = 0.0;
  double objective = 0.0;
  double window_end_s = 0.0;
};
// `published`: the model each checkpoint publishes (empty = its own; an
// older one in [W, s_k]: a re-publish, charged that model's loss).
// `kept`: iterations (increasing, in (W, N]) at whose end the producer
// copies a model it keeps unpublished (Plan::kept), each a stall of
// cost.keep_copy_s before a checkpoint at the same iteration; under the
// producer clock the traffic stays at that iteration meanwhile. They count
// in the objective's slowdown too. `pauses`: the producer's other pauses
// (Plan::pauses, (iteration, seconds)), after a copy at the same iteration,
// charged the same way. `waits`: decisions that waited for re-measurements
// beside training (Plan::waits, (iteration, seconds)): a checkpoint there
// becomes servable that much later; nothing stalls.
StatusOr<SurfaceEvaluation> EvaluateOnSurface(const Problem& problem, const StalenessSurface& surface,
                                              const Schedule& schedule,
                                              const std::vector<int64_t>& published = {},
                                              const std::vector<int64_t>& kept = {},
                                              const std::vector<std::pair<int64_t, double>>& pauses = {},
                                              const std::vector<std::pair<int64_t, double>>& waits = {});

// The exact optimum of EvaluateOnSurface's objective over every schedule
// whose checkpoints are grid versions of the surface inside (W, N] (and, where
// `extra_candidates` is given, those iterations too) and all become servable
// inside the window, with the problem's spacing, budget, price and window
// (both semantics). (Under a drifting table a checkpoint that never serves can
// still lower a fixed window's CIL a little under the producer clock: its
// stall holds the producer, and with it the traffic's drift, for sigma. Such
// schedules are left out: stalling to hold the traffic back is not a schedule
// anyone runs, and under the wall clock it holds nothing back.) A dynamic
// programme over candidates. Producer clock: O(C^2) segment costs once plus
// O(C^2) per checkpoint count for a fixed window (O(C^2) in all while
// training). Wall clock: a segment's cost depends on the stalls before it, so
// O(C^2) segment costs per checkpoint count, for both windows (O(C^3) at
// worst; a layer whose cheapest state already costs the best complete
// schedule ends the search). Exact among those candidates,
// which are every iteration a closed loop that decides at validation points
// can choose; off-grid schedules are judged by interpolation and are not
// searched. InvalidArgument when the table does not cover [W, N] or has more
// than max_candidates candidates.
//
// Re-publishing: a checkpoint may publish an older model instead of its own
// (a producer that kept it; recurring domains), at the same stall and
// delivery. The optimum then lets every checkpoint publish any earlier
// candidate or version 0, which only changes each segment's cost to the
// cheapest model over it: C^3 / 6 model-segment costs (times the layers
// under the wall clock). Searched when that is at most max_republish_work
// (`republish_searched`; 0 = never), so the bound holds for every strategy
// that re-publishes kept versions.
struct SurfaceSolution {
  Schedule schedule;
  // The model each checkpoint publishes; empty when every one publishes its own.
  std::vector<int64_t> published;
  int64_t republished = 0;  // checkpoints that publish an older model
  bool republish_searched = false;
  double objective = 0.0;
  int64_t candidates = 0;
  int64_t layers = 0;  // checkpoint counts examined (1 while training)
};
//
// `fixed_prefix`: checkpoints every schedule searched must begin with (their
// published models still the cheapest, as above), the rest free among the
// candidates after its last. With a causal planner's checkpoints taken before
// the traffic reached a drift, the optimum is the best that planner could
// still have done after it (`viper evaluate`'s after-drift bound).
StatusOr<SurfaceSolution> SolveOptimalOnSurface(const Problem& problem, const StalenessSurface& surface,
                                                const std::vector<int64_t>& extra_candidates = {},
                                                int64_t max_candidates = 4000, double max_republish_work = 2e7,
                                                const Schedule& fixed_prefix = {});

// The causal pair bound: what no planner that decides from what the
// producer measures can beat on both of two runs it cannot tell apart until
// the traffic passes `diverge_traffic` (a recurring domain's first return
// against the same run whose traffic never returns; trained alike, their
// tables agree until then). Every decision taken before that (which
// checkpoint, which model it publishes) is the same on both; later ones are
// each run's own. For any weight l in (0, 1) and any such planner,
//   max(regret_a, regret_b) >= l regret_a + (1 - l) regret_b
//                          >= min over shared decisions of that sum,
// regret being the objective over each run's exact optimum
// (SolveOptimalOnSurface, re-publishing searched) minus one. That minimum
// is exact by dynamic programming: each run's best continuation from every
// checkpoint decided after `diverge_traffic` (backward), then the shared
// decisions (forward). `bound` is its largest value over `lambdas`.
// Candidates are the runs' grid versions, as the oracle's: the bound holds
// for planners that checkpoint at validation points. Both runs are judged
// on `problem` (one clock, one cost). The work is about C^3 K / 6 slot costs
// for C candidates and K checkpoints at most; InvalidArgument above 2e8
// (thin the tables' versions), or above max_candidates.
struct CausalPairBound {
  double bound = 0.0;                                // the largest weighted lower bound on the worse regret
  double lambda = 0.0;                               // the weight on run a where it is reached
  std::vector<std::pair<double, double>> by_lambda;  // (weight, bound)
  double objective_a = 0.0, objective_b = 0.0;       // each run's optimum
  int64_t shared_decisions = 0;  // (checkpoint, count) states decided before the runs differ
  int64_t candidates = 0;
  // At the weight that gives `bound`, the schedules that reach it (each
  // checkpoint with the model it publishes): the first shared_checkpoints
  // are the same on both runs, the rest each run's own.
  Schedule schedule_a, schedule_b;
  std::vector<int64_t> published_a, published_b;
  int64_t shared_checkpoints = 0;
};
StatusOr<CausalPairBound> SolveCausalPairBound(const Problem& problem, const StalenessSurface& a,
                                               const StalenessSurface& b, double diverge_traffic,
                                               const std::vector<double>& lambdas,
                                               int64_t max_candidates = 400);
// The causal bound over a family of runs (the pair bound's general form):
// runs[m] decides with every other run whose parts_at is at or after the
// traffic point of the decision (the traffic at the checkpoint's start, on
// runs[0]'s clock), alone after parts_at[m]. A calm run and the same run
// with its drift at T1 < T2 < ... (each table agreeing with the calm one
// until its drift, so with each other until the earlier drift) are such a
// family: parts_at is each drifting run's agreement with the calm one, and
// the calm run's the latest of them. A family whose members could be told
// apart later than parts_at says (two drifting runs that agree longer than
// either does with the calm one) gets a lower bound still: a planner free
// to decide them apart sooner can only do better. For each weight vector w
// (positive, summing to one, one weight per run) the exact minimum over
// shared decisions of sum_m w_m regret_m, by the same backward passes (one
// per run) and one forward pass over the shared states, each run leaving
// them at its parts_at; `bound` is the largest over `weights`. At equal
// weights it is a floor under the family's mean regret. The work is about
// M C^3 K / 6 slot costs for M runs; InvalidArgument above 2e8 a run or above
// max_candidates.
struct CausalBound {
  double bound = 0.0;
  std::vector<double> weights;  // where `bound` is reached
  std::vector<std::pair<std::vector<double>, double>> by_weights;
  std::vector<double> objectives;  // each run's optimum
  int64_t shared_decisions = 0;    // (checkpoint, count) states some runs decide together
  int64_t candidates = 0;
  // At `weights`, the schedules that reach the bound, one per run: its first
  // shared_checkpoints[m] are decided with the runs that had not parted
  // when each was taken; the rest are its own.
  std::vector<Schedule> schedules;
  std::vector<std::vector<int64_t>> published;
  std::vector<int64_t> shared_checkpoints;
};
StatusOr<CausalBound> SolveCausalBound(const Problem& problem, const std::vector<const StalenessSurface*>& runs,
                                       const std::vector<double>& parts_at,
                                       const std::vector<std::vector<double>>& weights,
                                       int64_t max_candidates = 400);
// The traffic iteration up to which two surfaces hold the same measured
// pairs with the same losses: the last traffic point of their grids before
// the first that differs (`from` when the first already differs). Between
// that point and the next the interpolated surfaces differ.
double SurfacesAgreeUntil(const StalenessSurface& a, const StalenessSurface& b, int64_t from);

}  // namespace schedulers
}  // namespace viper
