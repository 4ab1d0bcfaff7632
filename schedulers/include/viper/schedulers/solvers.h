// The schedule solvers behind the strategies, and the references they are
// tested against.
//
// What "exact" means. SolveOptimal and SolveFixedInterval minimise the FLUID
// objective of cil_model.h (CIL counted as rate x loss x time, plus
// price_per_slowdown_s x m x sigma) over every schedule in (W, N] that
// respects min_spacing_iterations and slowdown_budget_s; the result equals the
// O(K N^2) dynamic programme and exhaustive enumeration up to floating-point
// rounding (tests: 1e-9 relative). When SolveOptimal decides by its
// certificate (below) the schedule is optimal to within kCertificateSlack =
// 1e-10 relative, the level of the DP's own rounding at N = 1e6. Counted per
// request (kDiscrete) the same schedule's CIL differs from the fluid value by
// less than the cost of one request per served version (fixed rate), i.e. at
// most (m + 1) x the largest per-request cost. Planning with a trace uses its
// mean rate.
//
// Why one DP pass is near-linear. Version k (k >= 1) is served from A_k to
// A_{k+1} = A_k + (s_{k+1} - s_k)*tau + sigma: its cost
//   rate*(l(s_k)*L + rho/2*L^2 + rho*delta*L),  L = (s_{k+1} - s_k)*tau + sigma,
// does not depend on how many checkpoints came before, and as a function of
// u = (s_{k+1} - W)*tau it is (a term in u alone) + (a line in u whose slope
// and intercept depend on s_k only). So
//   dp(j) = c(u_j) + min_i [slope_i*u_j + intercept_i(dp(i))]
// is a minimum over lines queried at increasing u. When the slopes never
// increase (a decreasing curve, or enough drift) the monotone convex hull
// trick answers it in amortised O(1); otherwise a hull sorted by slope with
// in-place insertion (a line not below the envelope at the current u and
// steeper than it is never needed again, since queries only move right),
// handed over to a Li Chao tree (O(log N)) if insertions move too many
// lines. Min spacing g only delays a line's insertion until j = i + g.
//
// The window. Serving while training ends at R = (N-W)*tau + m*sigma; the last
// version then serves (N - s_m)*tau + sigma - delta, independent of m: one DP
// pass is exact when no budget binds. A fixed window (request count or end
// time) has a fixed R, and the count couples through the last version only:
// with last checkpoint j preceded by k new ones (k0 taken before the start),
// x = R - A_j = x0_j - k*sigma, x0_j = R - U_j - delta - k0*sigma, and its cost
//   T_j(k) = rate*(l_j*x + rho/2*x^2 + rho*delta*x) = T_j(0) - c_j*k + q*k^2,
//   c_j = rate*sigma*(l_j + rho*delta + rho*x0_j),  q = rate*rho*sigma^2/2,
// for 0 <= k <= kmax_j (servable: x >= 0; the budget; spacing allows at most
// (j - first)/g earlier ones). A binding budget is the same with c = q = 0.
// Let D_k(j) be the least cost of the versions served up to A_j over paths
// with exactly k earlier new checkpoints (count-free segment costs, prices
// included). The optimum is min(no new checkpoint, min_j min_k D_k(j) + T_j(k)).
//
// Lagrangian passes. Rewarding every transition by lambda, one count-free pass
// computes, exactly and for every j at once, phi_j(lambda) = min_k D_k(j) -
// lambda*k, together with the count k_j of the minimising path. Hence
//   (a) D_k(j) >= phi_j(lambda) + lambda*k for every k (a line in k), and
//   (b) that path costs exactly D_{k_j}(j) = phi_j(lambda) + lambda*k_j, so when
//       k_j <= kmax_j it is a feasible schedule worth D + T_j(k_j): an upper
//       bound UB on the optimum.
// Neither needs convexity of D_k(j) in k. A third line holds before any pass:
// until A_j every request is served by the start's version or by a new
// checkpoint i < j, servable no earlier than U_i + k0*sigma + delta, so its
// loss is at least m(t) = min(start loss, l_i over those i), and the k stalls
// before j add k*sigma of time served at >= min(start loss, l over [first, j));
// this gives D_k(j) >= rate*(G_j + m_j*sigma*k) + (k+1)*price (drift only adds).
// For each j two probe lines are kept (of the pairs, the one with the highest
// bound) and LB_j = min over integer k in [0, kmax_j] of max(lines)(k) +
// T_j(k): the function is convex in k (a maximum of lines plus q*k^2, q >= 0),
// so its integer minimum is at the floor or ceiling of a breakpoint, a
// stationary point or an end, all of which are tried. Every schedule with a
// new checkpoint has a last one j with some k <= kmax_j and costs at least
// LB_j; so once LB_j >= UB - slack for every j, the schedule behind UB is
// optimal (the certificate). The next lambda comes from the open j with the
// smallest LB, the first of these strictly between the lambdas of the known
// points of D_.(j) that bracket the bound's minimiser k^ and not tried
// before: c_j - 2*q*k^ (for q = 0 that pass settles j); the chord slope
// between the points (it finds a vertex of D's lower hull between them or
// proves there is none); c_j when no point lies above k^ (with drift the
// first aim is then the line's own multiplier); the midpoint. None: stop.
// This choice only affects speed. Passes span states up to the last open one, and states whose
// bound already exceeds UB stay ruled out (UB only decreases).
//
// Fallback. When the certificate has not closed after 40 passes (or no lambda
// can make progress: a hull edge, a duality gap of a non-monotone curve), the
// layered DP decides: one Li Chao pass per count m = 1, 2, ..., seeded with UB
// and its schedule, and capped at the largest count at which some open state's
// bound is still below UB. It stops exactly when no state of the current layer
// can still beat the best complete schedule: state (m, j) costs at least
// dp_m(j) + rate*min_{i>=j} l(i)*(R - A_m(j)) to complete (losses and drift
// are >= 0), so it is dropped when that is >= the best found; when none
// survives, no larger m can win.
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

// How exact SolveOptimal must be. The default is the certificate at 1e-10
// relative (exact for every purpose). A re-plan on a forecast may accept a
// larger certified gap: the passes then stop once no open state's bound is
// more than max_relative_gap * max(1, |UB|) below UB, and the schedule
// returned is within that of the optimum, which Solution::certified_gap
// reports. The layered fallback, when it runs, is capped by the same bounds,
// so the same gap holds for it.
struct SolveOptions {
  double max_relative_gap = 0.0;  // in [0, 1e-2]; <= 1e-10 means the default certificate
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
  // Relative gap the certificate proved: objective <= optimum + gap *
  // max(1, |objective|). At most 1e-10 unless SolveOptions allowed more.
  double certified_gap = 0.0;
};

// Exact optimal irregular schedule (fluid objective): one count-free pass
// when serving while training without a budget; otherwise Lagrangian passes
// with a certificate, and the layered DP only when that does not close
// (Solution::method says which). A pass is O(N) for monotone slopes, else
// O(N log N) at worst. Buffers are kept per thread between calls (re-plans
// allocate nothing once warm); results never depend on them.
StatusOr<Solution> SolveOptimal(const Problem& problem, const LossCurve& curve, const PlanStart& start = {},
                                const SolveOptions& options = {});
// The same optimum by the layered DP alone: what SolveOptimal falls back to
// when its certificate does not close, seeded with one Lagrangian pass's
// best schedule (a single pass when the window is count-free without a
// budget). A reference for tests and bench.
StatusOr<Solution> SolveOptimalLayered(const Problem& problem, const LossCurve& curve, const PlanStart& start = {});
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
