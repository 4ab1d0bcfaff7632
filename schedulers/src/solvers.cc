#include "viper/schedulers/solvers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "solver_model.h"
#include "viper/schedulers/cil_model.h"

// The references and baselines: enumeration, the single-interval searches,
// Viper's Algorithms 2 and 3, epoch boundaries. The exact optimal solvers are
// in optimal.cc.
namespace viper {
namespace schedulers {
namespace {

using internal::CheckInputs;
using internal::kInf;

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

}  // namespace

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
