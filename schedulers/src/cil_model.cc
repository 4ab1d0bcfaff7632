#include "viper/schedulers/cil_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

namespace viper {
namespace schedulers {

const char* ToString(CountingMode mode) {
  switch (mode) {
    case CountingMode::kFluid: return "fluid";
    case CountingMode::kDiscrete: return "discrete";
    case CountingMode::kViper: return "viper";
  }
  return "?";
}

StatusOr<CountingMode> CountingModeFromString(const std::string& name) {
  for (CountingMode m : {CountingMode::kFluid, CountingMode::kDiscrete, CountingMode::kViper}) {
    if (name == ToString(m)) return m;
  }
  return InvalidArgumentError("unknown counting mode '" + name + "' (expected fluid, discrete or viper)");
}

std::string Evaluation::BriefReport() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "cil %.6g (%s), %lld checkpoints, slowdown %.4g s, objective %.6g", cil,
                ToString(mode), static_cast<long long>(checkpoints), slowdown_s, objective);
  std::string s = buf;
  if (mean_staleness_s) {
    std::snprintf(buf, sizeof(buf), ", mean staleness %.4g s", *mean_staleness_s);
    s += buf;
  }
  return s;
}

double FluidVersionCost(double rate, double loss, double drift_per_s, double checkpoint_start_s, double a,
                        double b) {
  const double da = a - checkpoint_start_s;
  const double db = b - checkpoint_start_s;
  return rate * (loss * (b - a) + 0.5 * drift_per_s * (db * db - da * da));
}

std::vector<double> ArrivalTimes(const RequestModel& requests, double window_end_s) {
  std::vector<double> t;
  const bool by_count = requests.window == WindowKind::kRequestCount;
  const int64_t count = requests.request_count;
  switch (requests.arrivals) {
    case ArrivalProcess::kFixedRate:
      for (int64_t q = 0;; ++q) {
        const double x = static_cast<double>(q) * requests.interval_s;
        if (by_count ? q >= count : x >= window_end_s) break;
        t.push_back(x);
      }
      break;
    case ArrivalProcess::kPoisson: {
      std::mt19937_64 rng(requests.seed);
      std::exponential_distribution<double> gap(1.0 / requests.interval_s);
      double x = 0.0;
      while (true) {
        x += gap(rng);
        if (by_count ? static_cast<int64_t>(t.size()) >= count : x >= window_end_s) break;
        t.push_back(x);
      }
      break;
    }
    case ArrivalProcess::kTrace:
      for (double x : requests.trace_s) {
        if (by_count ? static_cast<int64_t>(t.size()) >= count : x >= window_end_s) break;
        t.push_back(x);
      }
      break;
  }
  return t;
}

StatusOr<Evaluation> Evaluate(const Problem& problem, const LossCurve& curve, const Schedule& schedule,
                              CountingMode mode) {
  VIPER_RETURN_IF_ERROR(problem.Validate());
  // A diverged model (+inf) is charged +inf for the requests it serves
  // (a version that serves none costs nothing).
  VIPER_RETURN_IF_ERROR(curve.CheckCovers(problem, /*allow_diverged=*/true));
  {
    // Order and range only: spacing and budget are not enforced here.
    Problem loose = problem;
    loose.min_spacing_iterations = 1;
    loose.slowdown_budget_s.reset();
    VIPER_RETURN_IF_ERROR(loose.CheckSchedule(schedule));
  }
  const int64_t m = static_cast<int64_t>(schedule.size());
  const double sigma = problem.cost.stall_s;
  const double delta = problem.cost.delay_s;
  const double rho = problem.drift_per_s;
  const double rate = problem.requests.RatePerSecond();

  Evaluation ev;
  ev.mode = mode;
  ev.checkpoints = m;
  ev.slowdown_s = static_cast<double>(m) * sigma;
  ev.window_end_s = problem.WindowEnd(m);
  ev.requests_per_version.assign(static_cast<size_t>(m + 1), 0.0);
  const double R = ev.window_end_s;

  // Version k: loss, checkpoint start T, servable from A. Version 0 is the warm-up model.
  std::vector<double> loss(m + 1), T(m + 1), A(m + 1);
  loss[0] = curve.at(problem.warmup_iterations);
  T[0] = 0.0;
  A[0] = 0.0;
  for (int64_t k = 1; k <= m; ++k) {
    loss[k] = curve.at(schedule[k - 1]);
    T[k] = problem.CheckpointStart(schedule[k - 1], k);
    A[k] = T[k] + delta;
    if (A[k] >= R) ++ev.unserved_versions;
  }

  switch (mode) {
    case CountingMode::kFluid: {
      double staleness_integral = 0.0;
      for (int64_t k = 0; k <= m; ++k) {
        const double a = std::min(std::max(A[k], 0.0), R);
        const double b = k < m ? std::min(A[k + 1], R) : R;
        if (b <= a) continue;
        ev.cil += FluidVersionCost(rate, loss[k], rho, T[k], a, b);
        ev.requests_per_version[k] = rate * (b - a);
        staleness_integral += rate * 0.5 * ((b - T[k]) * (b - T[k]) - (a - T[k]) * (a - T[k]));
        ev.requests += rate * (b - a);
      }
      if (ev.requests > 0.0) ev.mean_staleness_s = staleness_integral / ev.requests;
      break;
    }
    case CountingMode::kDiscrete: {
      const std::vector<double> arrivals = ArrivalTimes(problem.requests, R);
      double staleness = 0.0;
      int64_t k = 0;
      for (double t : arrivals) {
        while (k < m && A[k + 1] <= t) ++k;
        ev.cil += loss[k] + rho * (t - T[k]);
        staleness += t - T[k];
        ev.requests_per_version[k] += 1.0;
      }
      ev.requests = static_cast<double>(arrivals.size());
      if (!arrivals.empty()) ev.mean_staleness_s = staleness / ev.requests;
      break;
    }
    case CountingMode::kViper: {
      const double t_infer = 1.0 / rate;
      const double t_p = sigma;
      const double t_c = std::max(0.0, delta - sigma);
      const double tau = problem.seconds_per_iteration;
      int64_t left = problem.requests.window == WindowKind::kRequestCount
                         ? problem.requests.request_count
                         : static_cast<int64_t>(std::floor(R * rate + 1e-9));
      ev.requests = static_cast<double>(left);
      int64_t prev = problem.warmup_iterations;
      for (int64_t k = 1; k <= m; ++k) {
        const double inter = static_cast<double>(schedule[k - 1] - prev);
        const double span = inter * tau + t_p + (k == 1 ? t_c : 0.0);
        // The 1e-9 keeps floor() from losing a request to rounding (e.g. 0.3/0.1).
        int64_t count = static_cast<int64_t>(std::floor(span / t_infer + 1e-9));
        count = std::min(count, left);
        ev.cil += loss[k - 1] * static_cast<double>(count);
        ev.requests_per_version[k - 1] = static_cast<double>(count);
        left -= count;
        prev = schedule[k - 1];
      }
      ev.cil += loss[m] * static_cast<double>(left);
      ev.requests_per_version[m] = static_cast<double>(left);
      break;
    }
  }
  ev.objective = ev.cil + problem.price_per_slowdown_s * ev.slowdown_s;
  return ev;
}

}  // namespace schedulers
}  // namespace viper
