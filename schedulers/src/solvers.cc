#include "viper/schedulers/solvers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "viper/schedulers/cil_model.h"

namespace viper {
namespace schedulers {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The problem's numbers, and the pieces of the fluid objective.
class Model {
 public:
  Model(const Problem& p, const LossCurve& l, const PlanStart& start)
      : p_(p),
        l_(l),
        W_(p.warmup_iterations),
        N_(p.total_iterations),
        g_(p.min_spacing_iterations),
        tau_(p.seconds_per_iteration),
        sigma_(p.cost.stall_s),
        delta_(p.cost.delay_s),
        rho_(p.drift_per_s),
        rate_(p.requests.RatePerSecond()),
        price_(p.price_per_slowdown_s * p.cost.stall_s),
        k0_(start.checkpoints_taken),
        a_(start.checkpoints_taken > 0 ? start.last_checkpoint : p.warmup_iterations),
        earliest_(start.earliest_iteration),
        start_loss_(start.served_loss ? *start.served_loss : l.at(a_)) {}

  int64_t W() const { return W_; }
  int64_t N() const { return N_; }
  int64_t g() const { return g_; }
  int64_t k0() const { return k0_; }
  int64_t a() const { return a_; }
  // First iteration a new checkpoint may take.
  int64_t lo() const { return std::max(k0_ == 0 ? W_ + 1 : a_ + g_, earliest_); }
  double rate() const { return rate_; }
  double loss(int64_t i) const { return l_.at(i); }
  bool CountFree() const { return p_.requests.window == WindowKind::kWhileTraining; }
  double U(int64_t j) const { return static_cast<double>(j - W_) * tau_; }

  // Cost of the version served before the first new checkpoint j (plus j's price).
  double StartCost(int64_t j) const {
    if (k0_ == 0) {
      const double a1 = U(j) + delta_;
      return FluidVersionCost(rate_, start_loss_, rho_, 0.0, 0.0, a1) + price_;
    }
    const double L = static_cast<double>(j - a_) * tau_ + sigma_;
    return FluidVersionCost(rate_, start_loss_, rho_, 0.0, delta_, L + delta_) + price_;
  }
  // Cost of the version of checkpoint i, served until checkpoint j is servable (count-free).
  double Seg(int64_t i, int64_t j) const {
    const double L = static_cast<double>(j - i) * tau_ + sigma_;
    return FluidVersionCost(rate_, loss(i), rho_, 0.0, delta_, L + delta_);
  }
  // Seg(i, j) + price = Quad(j) + Slope(i)*U(j) + Icpt(i): the line form.
  double Slope(int64_t i) const {
    const double v = sigma_ - U(i);
    return rate_ * (loss(i) + rho_ * (v + delta_));
  }
  double Icpt(int64_t i) const {
    const double v = sigma_ - U(i);
    return rate_ * (loss(i) * v + 0.5 * rho_ * v * v + rho_ * delta_ * v);
  }
  double Quad(int64_t j) const {
    const double u = U(j);
    return rate_ * 0.5 * rho_ * u * u + price_;
  }
  // Whether checkpoint j, as the K-th overall, is servable inside the window.
  bool Servable(int64_t j, int64_t K) const {
    return p_.CheckpointStart(j, K) + delta_ <= p_.WindowEnd(K);
  }
  // Cost of the last version (checkpoint j, K-th overall) until the window ends.
  std::optional<double> Terminal(int64_t j, int64_t K) const { return TerminalWithLoss(j, K, loss(j)); }
  std::optional<double> TerminalWithLoss(int64_t j, int64_t K, double l) const {
    const double T = p_.CheckpointStart(j, K);
    const double R = p_.WindowEnd(K);
    if (T + delta_ > R) return std::nullopt;
    return FluidVersionCost(rate_, l, rho_, T, T + delta_, R);
  }
  // Lower bound on the cost to complete from state (checkpoint j, K-th overall).
  double RemainingLowerBound(int64_t j, int64_t K, double suffix_min_loss) const {
    const double gap = p_.WindowEnd(K) - (p_.CheckpointStart(j, K) + delta_);
    return gap > 0.0 ? rate_ * suffix_min_loss * gap : 0.0;
  }
  // Cost with no new checkpoint; nullopt when the start's version is not servable.
  std::optional<double> Empty() const {
    if (k0_ == 0) return FluidVersionCost(rate_, start_loss_, rho_, 0.0, 0.0, p_.WindowEnd(0));
    return TerminalWithLoss(a_, k0_, start_loss_);
  }
  // Largest j whose state as the K-th checkpoint is servable (lo() - 1 if none).
  int64_t LastServable(int64_t K) const {
    const double slack = p_.WindowEnd(K) - delta_ - static_cast<double>(K - 1) * sigma_;
    int64_t hi = N_;
    if (slack < static_cast<double>(N_ - W_) * tau_) {
      hi = slack < 0 ? W_ : W_ + static_cast<int64_t>(std::floor(slack / tau_));
    }
    hi = std::min(hi, N_);
    while (hi >= lo() && !Servable(hi, K)) --hi;
    while (hi + 1 <= N_ && Servable(hi + 1, K)) ++hi;
    return std::max(hi, lo() - 1);
  }
  int64_t MaxNewCheckpoints() const {
    const int64_t total = p_.MaxCheckpoints();
    return total == std::numeric_limits<int64_t>::max() ? total : std::max<int64_t>(0, total - k0_);
  }

 private:
  const Problem& p_;
  const LossCurve& l_;
  int64_t W_, N_, g_;
  double tau_, sigma_, delta_, rho_, rate_, price_;
  int64_t k0_, a_, earliest_;
  double start_loss_;  // loss of the version served at the start (measured, or the curve's)
};

// Li Chao tree: lower envelope of lines y = m*x + b over the points
// x(idx) = xs[idx], idx in [0, n). Nodes use the compact (l + r) | (l != r)
// numbering, so 2n slots suffice.
class LiChao {
 public:
  explicit LiChao(std::vector<double> xs)
      : xs_(std::move(xs)),
        n_(static_cast<int64_t>(xs_.size())),
        m_(2 * xs_.size() + 1),
        b_(2 * xs_.size() + 1),
        id_(2 * xs_.size() + 1, -1) {}

  void Reset(int64_t n) {
    n_ = n;
    std::fill(id_.begin(), id_.begin() + std::min<size_t>(id_.size(), 2 * static_cast<size_t>(n) + 1), -1);
  }

  void Insert(double m, double b, int64_t id) {
    int64_t l = 0, r = n_ - 1;
    while (true) {
      const int64_t node = (l + r) | (l != r ? 1 : 0);
      if (id_[node] < 0) {
        m_[node] = m;
        b_[node] = b;
        id_[node] = id;
        return;
      }
      const int64_t mid = (l + r) / 2;
      const bool left_better = m * xs_[l] + b < m_[node] * xs_[l] + b_[node];
      const bool mid_better = m * xs_[mid] + b < m_[node] * xs_[mid] + b_[node];
      if (mid_better) {
        std::swap(m, m_[node]);
        std::swap(b, b_[node]);
        std::swap(id, id_[node]);
      }
      if (l == r) return;
      if (left_better != mid_better) {
        r = mid;
      } else {
        l = mid + 1;
      }
    }
  }

  // (min value, line id) at idx; id -1 when empty.
  std::pair<double, int64_t> Query(int64_t idx) const {
    double best = kInf;
    int64_t best_id = -1;
    int64_t l = 0, r = n_ - 1;
    const double x = xs_[idx];
    while (true) {
      const int64_t node = (l + r) | (l != r ? 1 : 0);
      if (id_[node] >= 0) {
        const double y = m_[node] * x + b_[node];
        if (y < best) {
          best = y;
          best_id = id_[node];
        }
      }
      if (l == r) break;
      const int64_t mid = (l + r) / 2;
      if (idx <= mid) {
        r = mid;
      } else {
        l = mid + 1;
      }
    }
    return {best, best_id};
  }

 private:
  std::vector<double> xs_;
  int64_t n_;
  std::vector<double> m_, b_;
  std::vector<int64_t> id_;
};

Status CheckInputs(const Problem& problem, const LossCurve& curve, const PlanStart& start) {
  VIPER_RETURN_IF_ERROR(problem.Validate());
  VIPER_RETURN_IF_ERROR(curve.CheckCovers(problem));
  if (start.checkpoints_taken < 0) return InvalidArgumentError("start.checkpoints_taken must be >= 0");
  if (start.earliest_iteration < 0 || start.earliest_iteration > problem.total_iterations + 1) {
    return InvalidArgumentError("start.earliest_iteration " + std::to_string(start.earliest_iteration) +
                                " is outside [0, N + 1]");
  }
  if (start.served_loss && !(std::isfinite(*start.served_loss) && *start.served_loss >= 0)) {
    return InvalidArgumentError("start.served_loss must be finite and >= 0");
  }
  if (start.checkpoints_taken > 0 &&
      (start.last_checkpoint <= problem.warmup_iterations || start.last_checkpoint > problem.total_iterations)) {
    return InvalidArgumentError("start.last_checkpoint " + std::to_string(start.last_checkpoint) +
                                " is outside (W, N]");
  }
  return Status::Ok();
}

// The fluid objective of a schedule without any checking (Evaluate's kFluid
// arithmetic, for the inner loops of the interval searches).
double FastFluidObjective(const Problem& p, const LossCurve& curve, const Schedule& s) {
  const int64_t m = static_cast<int64_t>(s.size());
  const double R = p.WindowEnd(m);
  const double rate = p.requests.RatePerSecond();
  const double delta = p.cost.delay_s;
  double cil = 0.0;
  double prev_T = 0.0, prev_A = 0.0, prev_loss = curve.at(p.warmup_iterations);
  for (int64_t k = 1; k <= m + 1; ++k) {
    double next_A = R;
    if (k <= m) next_A = std::min(R, p.CheckpointStart(s[k - 1], k) + delta);
    const double a = std::min(std::max(prev_A, 0.0), R);
    if (next_A > a) cil += FluidVersionCost(rate, prev_loss, p.drift_per_s, prev_T, a, next_A);
    if (k <= m) {
      prev_T = p.CheckpointStart(s[k - 1], k);
      prev_A = prev_T + delta;
      prev_loss = curve.at(s[k - 1]);
    }
  }
  return cil + p.price_per_slowdown_s * static_cast<double>(m) * p.cost.stall_s;
}

// Algorithm 1 counting without checking (Evaluate's kViper arithmetic).
double FastViperCil(const Problem& p, const LossCurve& curve, const Schedule& s) {
  const int64_t m = static_cast<int64_t>(s.size());
  const double rate = p.requests.RatePerSecond();
  const double t_infer = 1.0 / rate;
  const double t_c = std::max(0.0, p.cost.delay_s - p.cost.stall_s);
  int64_t left = p.requests.window == WindowKind::kRequestCount
                     ? p.requests.request_count
                     : static_cast<int64_t>(std::floor(p.WindowEnd(m) * rate + 1e-9));
  double cil = 0.0;
  int64_t prev = p.warmup_iterations;
  for (int64_t k = 1; k <= m; ++k) {
    const double span = static_cast<double>(s[k - 1] - prev) * p.seconds_per_iteration + p.cost.stall_s +
                        (k == 1 ? t_c : 0.0);
    const int64_t count = std::min(static_cast<int64_t>(std::floor(span / t_infer + 1e-9)), left);
    cil += curve.at(prev) * static_cast<double>(count);
    left -= count;
    prev = s[k - 1];
  }
  return cil + curve.at(prev) * static_cast<double>(left);
}

Schedule IntervalSchedule(int64_t W, int64_t N, int64_t d) {
  Schedule s;
  for (int64_t x = W + d; x <= N; x += d) s.push_back(x);
  return s;
}

// One count-free pass (serve while training): dp over the last checkpoint.
Solution SinglePass(const Model& M) {
  Solution sol;
  sol.layers = 1;
  const int64_t lo = M.lo(), N = M.N();
  std::optional<double> empty = M.Empty();
  sol.objective = empty ? *empty : 0.0;
  if (!empty || lo > N) return sol;  // nothing servable can follow
  const int64_t n = N - lo + 1;
  std::vector<double> xs(n);
  for (int64_t j = lo; j <= N; ++j) xs[j - lo] = M.U(j);
  LiChao tree(std::move(xs));
  std::vector<double> dp(n);
  std::vector<int64_t> parent(n, -1);
  int64_t best_j = -1;
  double best = *empty;
  for (int64_t j = lo; j <= N; ++j) {
    const int64_t i = j - M.g();
    if (i >= lo) {
      tree.Insert(M.Slope(i), dp[i - lo] + M.Icpt(i), i);
      ++sol.candidates;
    }
    double v = M.StartCost(j);
    int64_t par = -1;
    auto q = tree.Query(j - lo);
    if (q.second >= 0 && q.first + M.Quad(j) < v) {
      v = q.first + M.Quad(j);
      par = q.second;
    }
    dp[j - lo] = v;
    parent[j - lo] = par;
    // The terminal's condition and cost do not depend on the count here.
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

// One Li Chao pass per checkpoint count, with exact pruning (see solvers.h).
StatusOr<Solution> Layered(const Model& M, int64_t max_layers) {
  Solution sol;
  const int64_t lo = M.lo(), N = M.N();
  std::optional<double> empty = M.Empty();
  sol.objective = empty ? *empty : 0.0;
  if (!empty || lo > N || max_layers <= 0) return sol;
  const int64_t n = N - lo + 1;
  std::vector<double> suffix_min(n);
  for (int64_t j = N; j >= lo; --j) {
    suffix_min[j - lo] = j == N ? M.loss(j) : std::min(M.loss(j), suffix_min[j - lo + 1]);
  }
  std::vector<double> xs(n);
  for (int64_t j = lo; j <= N; ++j) xs[j - lo] = M.U(j);
  LiChao tree(std::move(xs));
  std::vector<double> prev(n, kInf), cur(n, kInf);
  std::vector<std::vector<int32_t>> parents;  // per layer, for j in [lo, lo + size)
  double best = *empty;
  int64_t best_layer = 0, best_j = -1;
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
    tree.Reset(width);
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
  int64_t j = best_j;
  for (int64_t k = best_layer; k >= 1; --k) {
    sol.schedule.push_back(j);
    j = k > 1 ? lo + parents[k - 1][j - lo] : -1;
  }
  std::reverse(sol.schedule.begin(), sol.schedule.end());
  return sol;
}

}  // namespace

StatusOr<Solution> SolveOptimal(const Problem& problem, const LossCurve& curve, const PlanStart& start) {
  VIPER_RETURN_IF_ERROR(CheckInputs(problem, curve, start));
  const Model M(problem, curve, start);
  const int64_t max_new = M.MaxNewCheckpoints();
  if (M.CountFree()) {
    Solution sol = SinglePass(M);
    if (static_cast<int64_t>(sol.schedule.size()) <= max_new) return sol;
  }
  const int64_t span = M.N() - M.lo() + 1;
  const int64_t cap = span <= 0 ? 0 : 1 + (span - 1) / M.g();  // most checkpoints that fit with spacing
  return Layered(M, std::min(max_new, cap));
}

StatusOr<Solution> SolveOptimalQuadratic(const Problem& problem, const LossCurve& curve, const PlanStart& start) {
  VIPER_RETURN_IF_ERROR(CheckInputs(problem, curve, start));
  const Model M(problem, curve, start);
  Solution sol;
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

StatusOr<Solution> SolveByEnumeration(const Problem& problem, const LossCurve& curve) {
  VIPER_RETURN_IF_ERROR(CheckInputs(problem, curve, {}));
  const int64_t n = problem.total_iterations - problem.warmup_iterations;
  if (n > 20) return InvalidArgumentError("enumeration needs N - W <= 20, got " + std::to_string(n));
  Solution sol;
  sol.objective = kInf;
  for (uint64_t mask = 0; mask < (uint64_t{1} << n); ++mask) {
    Schedule s;
    for (int64_t b = 0; b < n; ++b) {
      if (mask >> b & 1) s.push_back(problem.warmup_iterations + 1 + b);
    }
    if (!problem.CheckSchedule(s).ok()) continue;
    ++sol.candidates;
    auto ev = Evaluate(problem, curve, s, CountingMode::kFluid);
    if (!ev.ok()) return ev.status();
    if (ev->objective < sol.objective) {
      sol.objective = ev->objective;
      sol.schedule = s;
    }
  }
  return sol;
}

StatusOr<Solution> SolveFixedInterval(const Problem& problem, const LossCurve& curve) {
  VIPER_RETURN_IF_ERROR(CheckInputs(problem, curve, {}));
  const int64_t W = problem.warmup_iterations, N = problem.total_iterations;
  Solution sol;
  sol.objective = FastFluidObjective(problem, curve, {});
  ++sol.candidates;
  const int64_t max_m = problem.MaxCheckpoints();
  for (int64_t d = 1; d <= N - W; ++d) {
    const int64_t m = (N - W) / d;
    if (m > max_m || (m >= 2 && d < problem.min_spacing_iterations)) continue;
    Schedule s = IntervalSchedule(W, N, d);
    ++sol.candidates;
    const double obj = FastFluidObjective(problem, curve, s);
    if (obj < sol.objective) {
      sol.objective = obj;
      sol.schedule = std::move(s);
    }
  }
  return sol;
}

StatusOr<Solution> ViperFixedInterval(const Problem& problem, const LossCurve& curve) {
  VIPER_RETURN_IF_ERROR(CheckInputs(problem, curve, {}));
  const int64_t W = problem.warmup_iterations, N = problem.total_iterations;
  Solution sol;
  sol.objective = kInf;
  for (int64_t d = 1; d <= N - W; ++d) {
    Schedule s = IntervalSchedule(W, N, d);
    ++sol.candidates;
    const double cil = FastViperCil(problem, curve, s);
    if (cil < sol.objective) {
      sol.objective = cil;
      sol.schedule = std::move(s);
    }
  }
  return sol;
}

StatusOr<double> ViperGreedyThreshold(const std::vector<double>& warmup_losses) {
  if (warmup_losses.size() < 2) {
    return InvalidArgumentError("viper-greedy needs at least 2 warm-up losses for its threshold, got " +
                                std::to_string(warmup_losses.size()));
  }
  const size_t n = warmup_losses.size() - 1;
  double mean = 0.0;
  for (size_t t = 1; t <= n; ++t) mean += warmup_losses[t - 1] - warmup_losses[t];
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (size_t t = 1; t <= n; ++t) {
    const double d = warmup_losses[t - 1] - warmup_losses[t] - mean;
    var += d * d;
  }
  var /= static_cast<double>(n);
  return mean + std::sqrt(var);
}

StatusOr<Solution> ViperGreedy(const Problem& problem, const LossCurve& curve, double threshold) {
  VIPER_RETURN_IF_ERROR(CheckInputs(problem, curve, {}));
  if (!std::isfinite(threshold)) return InvalidArgumentError("viper-greedy threshold is not finite");
  Solution sol;
  int64_t last = problem.warmup_iterations;
  for (int64_t i = problem.warmup_iterations + 1; i <= problem.total_iterations; ++i) {
    ++sol.candidates;
    if (curve.at(last) - curve.at(i) > threshold) {
      sol.schedule.push_back(i);
      last = i;
    }
  }
  sol.objective = FastViperCil(problem, curve, sol.schedule);
  return sol;
}

StatusOr<Solution> EpochSchedule(const Problem& problem, int64_t iterations_per_epoch) {
  VIPER_RETURN_IF_ERROR(problem.Validate());
  if (iterations_per_epoch <= 0) {
    return InvalidArgumentError("iterations_per_epoch must be > 0 for the epoch strategy");
  }
  Solution sol;
  const int64_t first = (problem.warmup_iterations / iterations_per_epoch + 1) * iterations_per_epoch;
  for (int64_t x = first; x <= problem.total_iterations; x += iterations_per_epoch) sol.schedule.push_back(x);
  sol.candidates = static_cast<int64_t>(sol.schedule.size());
  return sol;
}

}  // namespace schedulers
}  // namespace viper
