// The exact optimal schedule (solvers.h explains the method and its proof):
// count-free Li Chao / hull passes, the Lagrangian certificate for
// count-coupled windows, the layered DP it falls back to, and the O(N^2)
// reference.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "solver_envelope.h"
#include "solver_model.h"
#include "viper/schedulers/cil_model.h"
#include "viper/schedulers/solvers.h"

namespace viper {
namespace schedulers {
namespace {

using internal::CheckInputs;
using internal::kInf;
using internal::LiChao;
using internal::Model;
using internal::QueryHull;

// A state is ruled out when its lower bound is within this relative slack of
// the best value found: the certified schedule is optimal to 1e-10 relative.
constexpr double kCertificateSlack = 1e-10;

// One Li Chao pass per checkpoint count, with exact pruning (see solvers.h).
// `seed` (objective, schedule) is a known feasible value to beat: states that
// cannot beat it are pruned from the start; it is returned when nothing does.
StatusOr<Solution> Layered(const Model& M, int64_t max_layers, const Solution* seed = nullptr) {
  Solution sol;
  sol.method = SolveMethod::kLayered;
  const int64_t lo = M.lo(), N = M.N();
  std::optional<double> empty = M.Empty();
  sol.objective = empty ? *empty : 0.0;
  if (!empty || lo > N || max_layers <= 0) {
    if (empty && seed && seed->objective < sol.objective) {
      sol.objective = seed->objective;
      sol.schedule = seed->schedule;
    }
    return sol;
  }
  const int64_t n = N - lo + 1;
  std::vector<double> suffix_min(n);
  for (int64_t j = N; j >= lo; --j) {
    suffix_min[j - lo] = j == N ? M.loss(j) : std::min(M.loss(j), suffix_min[j - lo + 1]);
  }
  std::vector<double> xs(n);
  for (int64_t j = lo; j <= N; ++j) xs[j - lo] = M.U(j);
  LiChao tree;
  std::vector<double> prev(n, kInf), cur(n, kInf);
  std::vector<std::vector<int32_t>> parents;  // per layer, for j in [lo, lo + size)
  double best = *empty;
  int64_t best_layer = 0, best_j = -1;
  if (seed && seed->objective < best) best = seed->objective;
  int64_t prev_hi = N;
  for (int64_t k = 1; k <= max_layers; ++k) {
    const int64_t K = M.k0() + k;
    const int64_t hi = std::min(M.LastServable(K), prev_hi + (k == 1 ? 0 : N));
    if (hi < lo) break;
    const int64_t width = hi - lo + 1;
    if (static_cast<double>(width) * static_cast<double>(parents.size() + 1) > 4e8) {
      return FailedPreconditionError("the layered DP would store over 4e8 predecessor entries (" +
                                     std::to_string(k) + " layers of " + std::to_string(width) +
                                     " iterations); shorten the horizon, raise min spacing or set a budget");
    }
    parents.emplace_back(width, -1);
    std::vector<int32_t>& par = parents.back();
    tree.Reset(xs.data(), width);
    bool alive = false;
    for (int64_t j = lo; j <= hi; ++j) {
      double v = kInf;
      if (k == 1) {
        v = M.StartCost(j);
      } else {
        const int64_t i = j - M.g();
        if (i >= lo && prev[i - lo] < kInf) {
          tree.Insert(M.Slope(i), prev[i - lo] + M.Icpt(i), i);
          ++sol.candidates;
        }
        auto q = tree.Query(j - lo);
        if (q.second >= 0) {
          v = q.first + M.Quad(j);
          par[j - lo] = static_cast<int32_t>(q.second - lo);
        }
      }
      cur[j - lo] = v;
      if (v < kInf) {
        if (auto t = M.Terminal(j, K); t && v + *t < best) {
          best = v + *t;
          best_layer = k;
          best_j = j;
        }
      }
    }
    for (int64_t j = hi + 1; j <= N; ++j) cur[j - lo] = kInf;
    // Exact pruning: drop states that cannot beat `best` however they continue.
    for (int64_t j = lo; j <= hi; ++j) {
      double& v = cur[j - lo];
      if (v == kInf) continue;
      const double bound = v + M.RemainingLowerBound(j, K, suffix_min[j - lo]) * (1.0 - 1e-12);
      if (bound >= best) {
        v = kInf;
      } else {
        alive = true;
      }
    }
    sol.layers = k;
    prev_hi = hi;
    std::swap(prev, cur);
    if (!alive) break;
  }
  sol.objective = best;
  if (best_j < 0 && seed && seed->objective <= best) {
    sol.schedule = seed->schedule;
    return sol;
  }
  int64_t j = best_j;
  for (int64_t k = best_layer; k >= 1; --k) {
    sol.schedule.push_back(j);
    j = k > 1 ? lo + parents[k - 1][j - lo] : -1;
  }
  std::reverse(sol.schedule.begin(), sol.schedule.end());
  return sol;
}

// The objective of `s` (new checkpoints after the start) by the Model's
// pieces, in the order the O(N^2) reference adds them.
double PathObjective(const Model& M, const Schedule& s) {
  if (s.empty()) return *M.Empty();
  double v = M.StartCost(s[0]);
  for (size_t t = 1; t < s.size(); ++t) v += M.Seg(s[t - 1], s[t]) + M.price();
  return v + *M.Terminal(s.back(), M.k0() + static_cast<int64_t>(s.size()));
}

// One pass's answer for state j, as a line in the count k of earlier new
// checkpoints: D_k(j) >= phi + lambda * k for every k, with equality at k.
struct Probe {
  double lambda = 0.0;
  double phi = 0.0;
  int64_t k = -1;  // -1: none
  double D() const { return phi + lambda * static_cast<double>(k); }
};

// max(a(k), b(k), base(k)) + t0 - c k + q k^2: the lower bound of a state
// with k earlier new checkpoints (a line is skipped when its k is -1).
double BoundAt(const Probe& a, const Probe& b, const Probe& base, double t0, double c, double q, int64_t k) {
  const double kd = static_cast<double>(k);
  double env = base.phi + base.lambda * kd;
  if (a.k >= 0) env = std::max(env, a.phi + a.lambda * kd);
  if (b.k >= 0) env = std::max(env, b.phi + b.lambda * kd);
  return env + t0 - c * kd + q * kd * kd;
}

// min over integer k in [0, kmax] of BoundAt(k): a convex function of k, so
// the minimum is at the floor or ceiling of one of its real stationary
// points or breakpoints, all of which are tried. Returns (value, argmin).
// When some single line already keeps the bound at or above `cutoff`, that
// line's minimum is returned instead (a weaker bound, enough to rule the
// state out).
std::pair<double, int64_t> LowerBound(const Probe& a, const Probe& b, const Probe& base, double t0, double c,
                                      double q, int64_t kmax, double cutoff = kInf) {
  const Probe* lines[3];
  int nl = 0;
  lines[nl++] = &base;
  if (a.k >= 0) lines[nl++] = &a;
  if (b.k >= 0) lines[nl++] = &b;
  if (cutoff < kInf) {
    // One line plus the convex terminal: its minimum is at an end or at the vertex.
    const double kmd = static_cast<double>(kmax);
    for (int x = 0; x < nl; ++x) {
      const double s = lines[x]->lambda - c, a0 = lines[x]->phi + t0;
      double v = std::min(a0, a0 + s * kmd + q * kmd * kmd);
      if (q > 0.0) {
        const double kv = std::floor(std::min(std::max(-s / (2.0 * q), 0.0), kmd));
        for (double kd : {kv, std::min(kv + 1.0, kmd)}) v = std::min(v, a0 + s * kd + q * kd * kd);
      }
      if (v >= cutoff) return {v, 0};
    }
  }
  double cand[8];
  int nc = 0;
  cand[nc++] = 0.0;
  cand[nc++] = static_cast<double>(kmax);
  for (int x = 0; x < nl; ++x) {
    if (q > 0.0) cand[nc++] = (c - lines[x]->lambda) / (2.0 * q);
    for (int y = x + 1; y < nl; ++y) {
      if (lines[x]->lambda != lines[y]->lambda) {
        cand[nc++] = (lines[x]->phi - lines[y]->phi) / (lines[y]->lambda - lines[x]->lambda);
      }
    }
  }
  double best = kInf;
  int64_t best_k = 0;
  for (int t = 0; t < nc; ++t) {
    const double x = cand[t];
    if (!(x == x)) continue;  // NaN
    const double lo = std::floor(std::min(std::max(x, 0.0), static_cast<double>(kmax)));
    for (double kd : {lo, lo + 1.0}) {
      if (kd > static_cast<double>(kmax)) continue;
      const int64_t k = static_cast<int64_t>(kd);
      const double v = BoundAt(a, b, base, t0, c, q, k);
      if (v < best) {
        best = v;
        best_k = k;
      }
    }
  }
  return {best, best_k};
}

// Per-call tables and buffers for the count-free passes, kept per thread so
// that a re-plan (one call per validation point) allocates nothing once
// warm. Nothing in it carries meaning from one call to the next.
struct Workspace {
  // Per state j (index j - lo): the query point U(j), the line of j as a
  // predecessor (slope, intercept), the count-free part of entering j
  // (quad, includes the price), the cost of j as the first new checkpoint,
  // and the last-version cost T_j(k) = t0 - c k + q k^2 for k <= kmax (kmax
  // -1: j can never be the last checkpoint).
  std::vector<double> x, slope, icpt, quad, start, t0, c;
  std::vector<int64_t> kmax;
  // One pass: value, count of earlier new checkpoints, predecessor (-1: none).
  std::vector<double> dp;
  std::vector<int64_t> cnt, par;
  // The two probes kept per state, and the states not yet ruled out.
  std::vector<Probe> pa, pb;
  // A line below D_k(j) for every k, known before any pass (see BuildTables).
  std::vector<Probe> base;
  // The bound of the kept pair, and its minimiser.
  std::vector<double> lb;
  std::vector<int64_t> lb_k;
  // Whether the predecessor lines' slopes never increase (set per call).
  bool monotone = false;
  std::vector<int64_t> open;
  QueryHull hull;
  LiChao tree;
  // The monotone pass's hull.
  std::vector<double> hm, hb;
  std::vector<int64_t> hid;
};

Workspace& ThreadWorkspace() {
  thread_local Workspace w;
  return w;
}

// Fills the per-state tables of w for states lo..N.
void BuildTables(const Model& M, int64_t max_new, Workspace& w, double* q_out) {
  const int64_t lo = M.lo(), N = M.N();
  const size_t n = static_cast<size_t>(N - lo + 1);
  for (auto* v : {&w.x, &w.slope, &w.icpt, &w.quad, &w.start, &w.t0, &w.c, &w.dp}) v->resize(n);
  w.kmax.resize(n);
  w.cnt.resize(n);
  w.par.resize(n);
  w.pa.resize(n);
  w.pb.resize(n);
  w.base.resize(n);
  w.lb.resize(n);
  w.lb_k.resize(n);
  const double rate = M.rate(), sigma = M.sigma(), rho = M.rho(), delta = M.delta();
  const bool count_free = M.CountFree() || sigma == 0.0;
  *q_out = count_free ? 0.0 : rate * rho * sigma * sigma * 0.5;
  const int64_t budget_k = max_new == std::numeric_limits<int64_t>::max() ? max_new : max_new - 1;
  // The base line. Until A_j every request is served by the start's version
  // or by a new checkpoint i < j servable by then, and checkpoint i is
  // servable no earlier than U_i + k0 sigma + delta; each has loss >= m(t) =
  // min(start loss, l_i over those i); drift and later ranks only add. So
  // D_k(j) >= rate (G(j) + m_j k sigma) + (k + 1) price, with G(j) the
  // integral of m over [A_s, A_j(0)], m_j = min(start loss, l over [lo, j))
  // and A_j(k) = U_j + (k0 + k) sigma + delta: a line in k.
  const double a_s = M.StartServable();
  const double shift = static_cast<double>(M.k0()) * sigma + delta;
  double run_min = M.StartLoss();  // min(start loss, l over [lo, j))
  double G = run_min * std::max(0.0, M.U(lo) + shift - a_s);
  // The window's end when fixed (the same double Problem::WindowEnd returns
  // for every count), and the references' servability test, inlined.
  const double R = count_free ? 0.0 : M.WindowEnd();
  const double tau = M.tau(), price = M.price(), start_loss = M.StartLoss();
  const bool uniform = M.Uniform();
  const int64_t k0 = M.k0(), g = M.g();
  for (int64_t j = lo; j <= N; ++j) {
    const size_t t = static_cast<size_t>(j - lo);
    const double u = M.U(j);
    const double l = M.loss(j);
    const auto servable = [&](int64_t K) { return u + static_cast<double>(K - 1) * sigma + delta <= R; };
    {
      const double beta = rate * G + price;
      w.base[t] = Probe{rate * run_min * sigma + price, beta * (1.0 - 1e-12), 0};
      run_min = std::min(run_min, l);
      if (j < N) G += run_min * std::max(0.0, (uniform ? u + tau : M.U(j + 1)) + shift - std::max(u + shift, a_s));
    }
    // Model::Slope, Icpt, Quad and StartCost, inlined.
    const double v = sigma - u;
    w.x[t] = u;
    w.slope[t] = rate * (l + rho * (v + delta));
    w.icpt[t] = rate * (l * v + 0.5 * rho * v * v + rho * delta * v);
    w.quad[t] = rate * 0.5 * rho * u * u + price;
    if (k0 == 0) {
      const double a1 = u + delta;
      w.start[t] = rate * (start_loss * a1 + 0.5 * rho * a1 * a1) + price;
    } else {
      const double L = M.Span(M.a(), j) + sigma;
      w.start[t] = rate * (start_loss * L + 0.5 * rho * ((L + delta) * (L + delta) - delta * delta)) + price;
    }
    int64_t kmax = std::min(budget_k, (j - lo) / g);
    if (count_free) {
      // The last version's cost does not depend on the count.
      const auto term = M.Terminal(j, M.k0() + 1);
      w.t0[t] = term ? *term : 0.0;
      w.c[t] = 0.0;
      if (!term) kmax = -1;
    } else if (!servable(k0 + 1)) {
      kmax = -1;
    } else {
      // x = R - A = x0 - k sigma; T = rate (l x + rho/2 x^2 + rho delta x).
      const double x0 = R - delta - u - static_cast<double>(k0) * sigma;
      w.t0[t] = rate * (l * x0 + 0.5 * rho * x0 * x0 + rho * delta * x0);
      w.c[t] = rate * sigma * (l + rho * delta + rho * x0);
      // The most earlier checkpoints that keep j servable, by the same test
      // as the references (Servable), starting from the real-valued bound.
      const double kf = std::floor(x0 / sigma);
      int64_t ks = kf > static_cast<double>(kmax) ? kmax + 1 : static_cast<int64_t>(std::max(kf, 0.0));
      while (ks >= 0 && !servable(k0 + ks + 1)) --ks;
      while (ks < kmax && servable(k0 + ks + 2)) ++ks;
      kmax = std::min(kmax, ks);
    }
    w.kmax[t] = kmax;
  }
}

// Pass() when the slopes never increase: the monotone convex hull trick,
// lines appended at the back, the head advancing with the queries.
int64_t MonotonePass(Workspace& w, int64_t n, int64_t g, double lambda) {
  w.hm.resize(static_cast<size_t>(n) + 1);
  w.hb.resize(static_cast<size_t>(n) + 1);
  w.hid.resize(static_cast<size_t>(n) + 1);
  double* hm = w.hm.data();
  double* hb = w.hb.data();
  int64_t* hid = w.hid.data();
  const double* slope = w.slope.data();
  const double* icpt = w.icpt.data();
  const double* x = w.x.data();
  double* dp = w.dp.data();
  int64_t* cnt = w.cnt.data();
  int64_t* par = w.par.data();
  int64_t head = 0, tail = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t i = t - g;
    if (i >= 0) {
      const double m = slope[i], b = dp[i] + icpt[i] - lambda;
      bool add = true;
      if (tail > head && hm[tail - 1] == m) {
        if (hb[tail - 1] <= b) {
          add = false;
        } else {
          --tail;
        }
      }
      if (add) {
        // The back line is needed iff it crosses its predecessor before the new line crosses it.
        while (tail - head >= 2 && !((hb[tail - 1] - hb[tail - 2]) * (hm[tail - 1] - m) <
                                     (b - hb[tail - 1]) * (hm[tail - 2] - hm[tail - 1]))) {
          --tail;
        }
        hm[tail] = m;
        hb[tail] = b;
        hid[tail] = i;
        ++tail;
      }
    }
    const double xt = x[t];
    while (tail - head >= 2 && hm[head + 1] * xt + hb[head + 1] <= hm[head] * xt + hb[head]) ++head;
    double v = w.start[t];
    int64_t k = 0, p = -1;
    if (tail > head) {
      const double y = hm[head] * xt + hb[head] + w.quad[t];
      if (y < v) {
        v = y;
        p = hid[head];
        k = cnt[p] + 1;
      }
    }
    dp[t] = v;
    cnt[t] = k;
    par[t] = p;
  }
  return std::max<int64_t>(0, n - g);
}

// One count-free DP pass with every transition (earlier checkpoint) rewarded
// by lambda: dp(j) = min(start(j), min_{i <= j-g} dp(i) + Seg(i,j) + price -
// lambda), i.e. dp(j) = phi_j(lambda) = min_k D_k(j) - lambda k, with the
// minimiser's count and predecessor. Uses the hull (amortised O(1) when
// slopes are monotone) and hands over to a Li Chao tree when in-place
// insertions have moved more than ~8 lines per state.
int64_t Pass(Workspace& w, int64_t n, int64_t g, double lambda) {
  if (w.monotone) return MonotonePass(w, n, g, lambda);
  QueryHull& hull = w.hull;
  hull.Reset(n);
  bool tree_mode = false;
  int64_t base = 0;
  const int64_t move_budget = 8 * n + 4096;
  int64_t lines = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t i = t - g;
    if (i >= 0) {
      const double b = w.dp[i] + w.icpt[i] - lambda;
      ++lines;
      if (tree_mode) {
        w.tree.Insert(w.slope[i], b, i);
      } else {
        hull.Insert(w.slope[i], b, i, w.x[t]);
        if (hull.moved() > move_budget) {
          tree_mode = true;
          base = t;
          w.tree.Reset(w.x.data() + base, n - base);
          hull.ForEach([&](double m, double bb, int64_t id) { w.tree.Insert(m, bb, id); });
        }
      }
    }
    double v = w.start[t];
    int64_t k = 0, p = -1;
    const auto q = tree_mode ? w.tree.Query(t - base) : hull.Query(w.x[t]);
    if (q.second >= 0 && q.first + w.quad[t] < v) {
      v = q.first + w.quad[t];
      p = q.second;
      k = w.cnt[p] + 1;
    }
    w.dp[t] = v;
    w.cnt[t] = k;
    w.par[t] = p;
  }
  return lines;
}

// The count-coupled optimum by Lagrangian passes with a certificate (see
// solvers.h), falling back to the layered DP seeded with the best schedule
// found when the certificate does not close within the pass cap.
// With `force_layered` (the reference SolveOptimalLayered) it stops after one
// pass and always hands over to the layered DP.
StatusOr<Solution> SolveByPasses(const Model& M, bool force_layered = false, double max_relative_gap = 0.0) {
  Solution sol;
  sol.method = SolveMethod::kSinglePass;
  const int64_t lo = M.lo(), N = M.N();
  const std::optional<double> empty = M.Empty();
  sol.objective = empty ? *empty : 0.0;
  if (!empty || lo > N) return sol;  // nothing servable can follow
  const int64_t max_new = M.MaxNewCheckpoints();
  if (max_new <= 0) return sol;
  const int64_t n = N - lo + 1;
  Workspace& w = ThreadWorkspace();
  double q = 0.0;
  BuildTables(M, max_new, w, &q);
  w.monotone = true;
  for (int64_t t = 1; t < n && w.monotone; ++t) w.monotone = w.slope[t] <= w.slope[t - 1];

  double ub = *empty;
  int64_t ub_j = -1;
  Schedule ub_schedule;
  if ((M.CountFree() || M.sigma() == 0.0) && max_new == std::numeric_limits<int64_t>::max()) {
    // Count-free and no budget: one pass at lambda = 0 is exact.
    sol.candidates += Pass(w, n, M.g(), 0.0);
    sol.passes = sol.layers = 1;
    for (int64_t t = 0; t < n; ++t) {
      if (w.kmax[t] >= 0 && w.dp[t] + w.t0[t] < ub) {
        ub = w.dp[t] + w.t0[t];
        ub_j = t;
      }
    }
    for (int64_t t = ub_j; t >= 0; t = w.par[t]) sol.schedule.push_back(lo + t);
    std::reverse(sol.schedule.begin(), sol.schedule.end());
    sol.objective = ub;
    return sol;
  }
  w.open.clear();
  for (int64_t t = 0; t < n; ++t) {
    if (w.kmax[t] >= 0) w.open.push_back(t);
    w.pa[t] = Probe{};
    w.pb[t] = Probe{};
  }
  const bool loose = max_relative_gap > kCertificateSlack;
  const double slack = std::max(kCertificateSlack, max_relative_gap);
  const auto tol = [slack](double v) { return slack * std::max(1.0, std::fabs(v)); };
  // The smallest bound of a ruled-out state: the optimum is at least
  // min(it, the final UB), which certifies the gap.
  double ruled_lb = kInf;

  // The first lambda: c_j of the lowest-loss state that can end a schedule
  // (0 when the count only meets the budget).
  double lambda = 0.0;
  {
    double best_l = kInf;
    for (int64_t t : w.open) {
      if (M.loss(lo + t) < best_l) {
        best_l = M.loss(lo + t);
        lambda = w.c[t];
      }
    }
  }
  const int64_t kMaxPasses = force_layered ? 1 : 40;
  std::vector<double> used;
  bool certified = false;
  while (true) {
    // States after the last open one matter neither as predecessors of an
    // open state nor as an improvement (their bound is >= the best already).
    if (w.open.empty()) {  // no state can end a schedule
      certified = true;
      break;
    }
    const int64_t span = w.open.back() + 1;
    sol.candidates += Pass(w, span, M.g(), lambda);
    ++sol.passes;
    used.push_back(lambda);
    // Upper bound: every open state whose minimiser is a servable,
    // budget-feasible path (the others cannot improve on it beyond the slack).
    ub_j = -1;
    for (int64_t t : w.open) {
      const int64_t k = w.cnt[t];
      if (k > w.kmax[t]) continue;
      const double kd = static_cast<double>(k);
      const double v = w.dp[t] + lambda * kd + w.t0[t] - w.c[t] * kd + q * kd * kd;
      if (v < ub) {
        ub = v;
        ub_j = t;
      }
    }
    if (ub_j >= 0) {
      ub_schedule.clear();
      for (int64_t t = ub_j; t >= 0; t = w.par[t]) ub_schedule.push_back(lo + t);
      std::reverse(ub_schedule.begin(), ub_schedule.end());
    }
    // Lower bounds: keep the pair of probes that bounds each open state best.
    int64_t focus = -1;
    double focus_lb = kInf;
    int64_t focus_k = 0;
    size_t kept = 0;
    for (int64_t t : w.open) {
      const Probe p{lambda, w.dp[t], w.cnt[t]};
      Probe& a = w.pa[t];
      Probe& b = w.pb[t];
      // Of the pairs among {a, b, p}, keep the one with the highest bound;
      // on a tie the one that brackets the bound's minimiser k^ with the
      // closest counts (the points the next aim needs).
      std::pair<double, int64_t> best{-kInf, 0};
      Probe keep_a = a, keep_b = b;
      auto rank = [](const Probe& u, const Probe& v, int64_t k_hat) {
        if (u.k < 0 || v.k < 0) return std::numeric_limits<int64_t>::max();
        const int64_t gap = std::abs(u.k - v.k);
        const bool brackets = std::min(u.k, v.k) <= k_hat && std::max(u.k, v.k) >= k_hat;
        return brackets ? gap : std::numeric_limits<int64_t>::max() / 2 + gap;
      };
      auto consider = [&](const Probe& x, const Probe& y) {
        const auto lb = LowerBound(x, y, w.base[t], w.t0[t], w.c[t], q, w.kmax[t], ub - tol(ub));
        if (lb.first > best.first ||
            (lb.first == best.first && rank(x, y, lb.second) < rank(keep_a, keep_b, best.second))) {
          best = lb;
          keep_a = x;
          keep_b = y;
        }
      };
      if (a.k >= 0) {
        best = {w.lb[t], w.lb_k[t]};  // the kept pair's bound, from the previous pass
        consider(p, b);
        consider(a, p);
      } else {
        consider(p, b);
      }
      w.lb[t] = best.first;
      w.lb_k[t] = best.second;
      a = keep_a;
      b = keep_b;
      // Ruled out. With a requested gap the slack is taken relative to the
      // bound (<= the optimum <= the final UB), so the final objective is
      // within max_relative_gap * max(1, objective) of the optimum.
      if (best.first >= ub - (loose ? tol(best.first) : tol(ub))) {
        ruled_lb = std::min(ruled_lb, best.first);
        continue;
      }
      w.open[kept++] = t;
      if (best.first < focus_lb) {
        focus_lb = best.first;
        focus = t;
        focus_k = best.second;
      }
    }
    w.open.resize(kept);
    if (w.open.empty()) {
      certified = true;
      break;
    }
    if (sol.passes >= kMaxPasses) break;
    // The next lambda, from the open state with the smallest bound: known
    // points of its D_k are (0, start) and its probes; aim between the two
    // that bracket the bound's minimiser k^ (the chord slope finds a hull
    // vertex between them or proves there is none), or at c - 2 q k^ when
    // that lies strictly inside (one pass then settles a drift-free state).
    const int64_t t = focus;
    struct Point {
      int64_t k;
      double D, lambda;
    };
    Point left{0, w.start[t], -kInf};
    std::optional<Point> right;
    for (const Probe* pr : {&w.pa[t], &w.pb[t]}) {
      if (pr->k < 0) continue;
      if (pr->k <= focus_k && pr->k >= left.k) left = {pr->k, pr->D(), pr->lambda};
      if (pr->k >= focus_k && (!right || pr->k < right->k)) right = Point{pr->k, pr->D(), pr->lambda};
    }
    const double aim = w.c[t] - 2.0 * q * static_cast<double>(focus_k);
    // Candidates in order of preference; the first strictly between the two
    // points' multipliers and not tried before is taken. With drift the aim
    // of a single line is that line's own multiplier (k^ is where its slope
    // meets the terminal's); c_j, the aim without drift, brackets from above.
    const double hi = right ? right->lambda : kInf;
    double cands[4];
    int nc = 0;
    cands[nc++] = aim;
    if (right && right->k > left.k) cands[nc++] = (right->D - left.D) / static_cast<double>(right->k - left.k);
    if (!right) cands[nc++] = w.c[t];
    if (right && left.lambda > -kInf) cands[nc++] = 0.5 * (left.lambda + right->lambda);
    std::optional<double> next;
    for (int x = 0; x < nc && !next; ++x) {
      if (cands[x] > left.lambda && cands[x] < hi && std::find(used.begin(), used.end(), cands[x]) == used.end()) {
        next = cands[x];
      }
    }
    if (!next) break;  // a hull edge between the points: no multiplier makes progress
    lambda = *next;
  }
  sol.layers = sol.passes;
  if (certified && !force_layered) {
    sol.method = sol.passes == 1 ? SolveMethod::kSinglePass : SolveMethod::kLagrangian;
    sol.schedule = ub_schedule;
    sol.objective = PathObjective(M, sol.schedule);
    sol.certified_gap = ruled_lb < kInf ? std::max(0.0, sol.objective - ruled_lb) / std::max(1.0, std::fabs(sol.objective)) : 0.0;
    return sol;
  }
  // Fallback: the layered DP, up to the largest count an open state could still use.
  // The bound of state t is convex in k: binary search for the largest k
  // (earlier checkpoints) at which it is still below the best value found.
  int64_t max_layers = 0;
  for (int64_t t : w.open) {
    const Probe& a = w.pa[t];
    const Probe& b = w.pb[t];
    int64_t k_lo = LowerBound(a, b, w.base[t], w.t0[t], w.c[t], q, w.kmax[t]).second, k_hi = w.kmax[t];
    while (k_lo < k_hi) {
      const int64_t mid = k_lo + (k_hi - k_lo + 1) / 2;
      if (BoundAt(a, b, w.base[t], w.t0[t], w.c[t], q, mid) < ub - tol(ub)) {
        k_lo = mid;
      } else {
        k_hi = mid - 1;
      }
    }
    max_layers = std::max(max_layers, k_lo + 1);
  }
  const int64_t cap = 1 + (n - 1) / M.g();
  if (force_layered && w.open.empty()) max_layers = cap;  // run it even when nothing is open
  Solution seed;
  seed.schedule = ub_schedule;
  seed.objective = ub;
  auto layered = Layered(M, std::min({max_new, cap, max_layers}), &seed);
  if (!layered.ok()) return layered.status();
  layered->passes = sol.passes;
  layered->candidates += sol.candidates;
  layered->layers += sol.passes;
  if (layered->schedule == ub_schedule) layered->objective = PathObjective(M, ub_schedule);
  // States ruled out within a requested gap capped the layers: the same gap holds.
  if (max_relative_gap > kCertificateSlack) {
    layered->certified_gap = ruled_lb < kInf ? std::max(0.0, layered->objective - ruled_lb) /
                                                   std::max(1.0, std::fabs(layered->objective))
                                             : 0.0;
  }
  return layered;
}

}  // namespace

const char* ToString(SolveMethod method) {
  switch (method) {
    case SolveMethod::kOther: return "other";
    case SolveMethod::kSinglePass: return "single-pass";
    case SolveMethod::kLagrangian: return "lagrangian";
    case SolveMethod::kLayered: return "layered";
    case SolveMethod::kQuadratic: return "quadratic";
  }
  return "?";
}

StatusOr<Solution> SolveOptimal(const Problem& problem, const LossCurve& curve, const PlanStart& start,
                                const SolveOptions& options) {
  if (!(options.max_relative_gap >= 0.0 && options.max_relative_gap <= 1e-2)) {
    return InvalidArgumentError("SolveOptions::max_relative_gap must be in [0, 1e-2], got " +
                                std::to_string(options.max_relative_gap));
  }
  VIPER_RETURN_IF_ERROR(CheckInputs(problem, curve, start));
  const Model M(problem, curve, start);
  return SolveByPasses(M, /*force_layered=*/false, options.max_relative_gap);
}

StatusOr<Solution> SolveOptimalLayered(const Problem& problem, const LossCurve& curve, const PlanStart& start) {
  VIPER_RETURN_IF_ERROR(CheckInputs(problem, curve, start));
  const Model M(problem, curve, start);
  return SolveByPasses(M, /*force_layered=*/true);
}

StatusOr<Solution> SolveOptimalQuadratic(const Problem& problem, const LossCurve& curve, const PlanStart& start) {
  VIPER_RETURN_IF_ERROR(CheckInputs(problem, curve, start));
  const Model M(problem, curve, start);
  Solution sol;
  sol.method = SolveMethod::kQuadratic;
  const int64_t lo = M.lo(), N = M.N();
  std::optional<double> empty = M.Empty();
  sol.objective = empty ? *empty : 0.0;
  if (!empty || lo > N) return sol;
  const int64_t n = N - lo + 1;
  const int64_t cap = 1 + (n - 1) / M.g();
  const int64_t max_layers = std::min(M.MaxNewCheckpoints(), cap);
  double best = *empty;
  if (M.CountFree() && max_layers >= cap) {
    // One pass: dp(j) = min(start(j), min_{i <= j-g} dp(i) + Seg(i, j)).
    sol.layers = 1;
    std::vector<double> dp(n);
    std::vector<int64_t> parent(n, -1);
    int64_t best_j = -1;
    for (int64_t j = lo; j <= N; ++j) {
      double v = M.StartCost(j);
      int64_t par = -1;
      for (int64_t i = lo; i <= j - M.g(); ++i) {
        const double c = dp[i - lo] + M.Seg(i, j) + problem.price_per_slowdown_s * problem.cost.stall_s;
        ++sol.candidates;
        if (c < v) {
          v = c;
          par = i;
        }
      }
      dp[j - lo] = v;
      parent[j - lo] = par;
      if (auto t = M.Terminal(j, M.k0() + 1); t && v + *t < best) {
        best = v + *t;
        best_j = j;
      }
    }
    sol.objective = best;
    for (int64_t j = best_j; j >= 0; j = parent[j - lo]) sol.schedule.push_back(j);
    std::reverse(sol.schedule.begin(), sol.schedule.end());
    return sol;
  }
  // Layered by count, no pruning: dp_k(j) over every k up to the cap.
  std::vector<std::vector<double>> dp;
  std::vector<std::vector<int64_t>> parent;
  int64_t best_k = 0, best_j = -1;
  for (int64_t k = 1; k <= max_layers; ++k) {
    const int64_t K = M.k0() + k;
    dp.emplace_back(n, kInf);
    parent.emplace_back(n, -1);
    for (int64_t j = lo; j <= N; ++j) {
      if (!M.Servable(j, K)) continue;
      double v = kInf;
      if (k == 1) {
        v = M.StartCost(j);
      } else {
        for (int64_t i = lo; i <= j - M.g(); ++i) {
          if (dp[k - 2][i - lo] == kInf) continue;
          const double c = dp[k - 2][i - lo] + M.Seg(i, j) + problem.price_per_slowdown_s * problem.cost.stall_s;
          ++sol.candidates;
          if (c < v) {
            v = c;
            parent[k - 1][j - lo] = i;
          }
        }
      }
      dp[k - 1][j - lo] = v;
      if (v == kInf) continue;
      if (auto t = M.Terminal(j, K); t && v + *t < best) {
        best = v + *t;
        best_k = k;
        best_j = j;
      }
    }
    sol.layers = k;
  }
  sol.objective = best;
  for (int64_t k = best_k, j = best_j; k >= 1; --k) {
    sol.schedule.push_back(j);
    j = parent[k - 1][j - lo];
  }
  std::reverse(sol.schedule.begin(), sol.schedule.end());
  return sol;
}

}  // namespace schedulers
}  // namespace viper
