// The schedule solvers behind the strategies, and the references they are
// tested against.
//
// What "exact" means. SolveOptimal and SolveFixedInterval minimise the FLUID
// objective of cil_model.h (CIL counted as rate x loss x time, plus
// price_per_slowdown_s x m x sigma) over every schedule in (W, N] that
// respects min_spacing_iterations and slowdown_budget_s; the result equals the
// O(K N^2) dynamic programme and exhaustive enumeration up to floating-point
// rounding (tests: 1e-9 relative). Counted per request (kDiscrete) the same
// schedule's CIL differs from the fluid value by less than the cost of one
// request per served version (fixed rate), i.e. at most (m + 1) x the largest
// per-request cost. Planning with a trace uses its mean rate.
//
// Why the DP is near-linear. Version k (k >= 1) is served from A_k to
// A_{k+1} = A_k + (s_{k+1} - s_k)*tau + sigma: its cost
//   rate*(l(s_k)*L + rho/2*L^2 + rho*delta*L),  L = (s_{k+1} - s_k)*tau + sigma,
// does not depend on how many checkpoints came before, and as a function of
// u = (s_{k+1} - W)*tau it is (a term in u alone) + (a line in u whose slope
// and intercept depend on s_k only). So
//   dp(j) = c(u_j) + min_i [slope_i*u_j + intercept_i(dp(i))]
// is a minimum over lines, answered by a Li Chao tree in O(log N). Min
// spacing g only delays a line's insertion until j = i + g.
//
// The window. Serving while training ends at R = (N-W)*tau + m*sigma; the last
// version then serves (N - s_m)*tau + sigma - delta, independent of m: one DP
// pass is exact. A fixed window (request count or end time) has a fixed R, and
// the last version's share R - A_m shrinks by sigma per checkpoint: the cost
// couples to m through that term only. SolveOptimal then runs one Li Chao pass
// per count m = 1, 2, ... (layer m extends layer m-1), and stops exactly when
// no state of the current layer can still beat the best complete schedule:
// state (m, j) costs at least dp_m(j) + rate*min_{i>=j} l(i)*(R - A_m(j)) to
// complete (losses and drift are >= 0), so it is dropped when that is >= the
// best found; when none survives, no larger m can win. A slowdown budget caps
// the layers at floor(budget / sigma); with serve-while-training the one-pass
// answer is used when it is within budget, else the layered DP.
//
// Checkpoints never servable inside the window (A_m > R) are excluded: with
// non-negative losses, drift and price, dropping them never raises the
// objective (they serve no request; while training they only lengthen the
// window, adding non-negative cost), so the optimum is among the rest.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "viper/core/status.h"
#include "viper/schedulers/problem.h"

namespace viper {
namespace schedulers {

// Where (re-)planning starts: checkpoints already taken, for the online
// planner. checkpoints_taken == 0 means the start of serving (version 0 at W).
struct PlanStart {
  // Checkpoints already taken (k0 >= 0).
  int64_t checkpoints_taken = 0;
  // Iteration of the last one (> W when checkpoints_taken > 0).
  int64_t last_checkpoint = 0;
  // First iteration a new checkpoint may take, for planning from "now"
  // (0 = no limit: the first one min spacing allows after the last one).
  // Schedules start at max(earliest_iteration, the spacing limit).
  int64_t earliest_iteration = 0;
  // Loss of the version being served, replacing curve.at(last checkpoint)
  // (curve.at(W) with none taken) in its cost: the closed loop passes the
  // measured value instead of the forecast's. Finite and >= 0.
  std::optional<double> served_loss;
};

// How a solver reached its answer.
enum class SolveMethod {
  kOther,       // not one of the DPs below (enumeration, intervals, Viper's algorithms, epoch)
  kSinglePass,  // one count-free pass was exact (the window does not couple the count, or it did not matter)
  kLagrangian,  // count-coupled: Lagrangian passes closed the certificate
  kLayered,     // count-coupled: the certificate did not close; the layered DP (seeded) decided
  kQuadratic,   // the O(N^2) reference
};
const char* ToString(SolveMethod method);

struct Solution {
  // New checkpoints (after the start), strictly increasing.
  Schedule schedule;
  // What the solver minimised: for the fluid solvers, the fluid objective of
  // the versions served from the start on (the whole objective when starting
  // at W); for Viper's algorithms, their Algorithm 1 CIL estimate.
  double objective = 0.0;
  // DP passes run in all: count-free passes plus layers of the layered DP
  // (1 = a single count-free pass; 0 for non-DP solvers).
  int64_t layers = 0;
  // Count-free (Lagrangian) passes among them.
  int64_t passes = 0;
  // Which method decided.
  SolveMethod method = SolveMethod::kOther;
  // Candidates examined (intervals, or lines inserted in the DP).
  int64_t candidates = 0;
};

// Exact optimal irregular schedule (fluid objective), O(K N log N) with K
// layers (K = 1 when serving while training without a binding budget).
StatusOr<Solution> SolveOptimal(const Problem& problem, const LossCurve& curve, const PlanStart& start = {});
// The same optimum by the plain dynamic programme, evaluating every
// predecessor directly: O(N^2) per layer. The reference for tests and bench.
StatusOr<Solution> SolveOptimalQuadratic(const Problem& problem, const LossCurve& curve,
                                         const PlanStart& start = {});
// The same optimum by evaluating every subset of (W, N] with Evaluate();
// N - W <= 20.
StatusOr<Solution> SolveByEnumeration(const Problem& problem, const LossCurve& curve);
// Exact optimal single interval d (checkpoints at W+d, W+2d, ... <= N, or
// none), fluid objective, constraints respected. O(N log N) in total.
StatusOr<Solution> SolveFixedInterval(const Problem& problem, const LossCurve& curve);

// Viper's Algorithm 2: every interval 1..N-W, each scored with Algorithm 1's
// counting (CountingMode::kViper); the smallest score wins (first on ties).
// Ignores price, budget and spacing, as published.
StatusOr<Solution> ViperFixedInterval(const Problem& problem, const LossCurve& curve);
// Viper's Algorithm 3 threshold: mean + standard deviation (population) of
// the drops l[t-1] - l[t] between consecutive warm-up losses. Needs >= 2.
StatusOr<double> ViperGreedyThreshold(const std::vector<double>& warmup_losses);
// Viper's Algorithm 3: walking i = W+1..N, checkpoint at i when
// curve(last checkpoint) - curve(i) > threshold (last starts at W).
StatusOr<Solution> ViperGreedy(const Problem& problem, const LossCurve& curve, double threshold);
// Every epoch boundary: the multiples of iterations_per_epoch in (W, N].
StatusOr<Solution> EpochSchedule(const Problem& problem, int64_t iterations_per_epoch);

}  // namespace schedulers
}  // namespace viper
