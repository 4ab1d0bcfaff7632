// The closed loop's cost per observation: a run of N iterations with a
// validation point every 50, the training loss at every iteration, all fed
// through OnlinePlanner::Observe and ShouldCheckpoint as the live producer
// does. Each call is timed alone; the counters are the median and the p99 per
// observation (microseconds), split into all observations and the validation
// points (where the exact re-plan, and sometimes a fit, happen). A step in
// the curve halfway makes the detector start a new regime. Second argument:
// 1 = a fixed request window (re-plans then go through the count-coupled
// solver's certificate). Third argument: 1 = the traffic drifts and the
// served version is re-measured at every validation point (ObserveServed:
// it loses 0.5 per N/2 iterations of age), so re-plans carry the measured
// decay (the solver's drift term) and the gate compares with it.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "viper/schedulers/online.h"

namespace viper {
namespace bench {
namespace {

namespace sch = schedulers;

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

void BM_OnlineObservation(benchmark::State& state) {
  const int64_t N = state.range(0);
  const bool fixed_window = state.range(1) != 0;
  const bool remeasure = state.range(2) != 0;
  const double decay_per_iteration = 1.0 / static_cast<double>(N);
  sch::Problem p;
  p.warmup_iterations = N / 10;
  p.total_iterations = N;
  p.seconds_per_iteration = 0.01;
  p.cost.stall_s = 0.008;  // the GPU preset at 600 MB
  p.cost.delay_s = 0.123;
  p.requests.interval_s = 0.01;
  if (fixed_window) {
    p.requests.window = sch::WindowKind::kRequestCount;
    p.requests.request_count = N - p.warmup_iterations;
  }
  predictor::LearningCurvePredictor::Options po;  // the default ensemble of 15 families
  std::mt19937_64 rng(1), kept_rng(2);  // the kept models' noise apart: the rest sees the same draws
  std::normal_distribution<double> noise(0.0, 0.01);
  auto loss = [&](int64_t i) {
    const double x = static_cast<double>(i);
    return i < N / 2 ? 0.4 + 2.0 * std::exp(-x / (0.1 * N)) : 0.3 + 0.3 * std::exp(-(x - N / 2) / (0.05 * N));
  };
  std::vector<double> all_us, validation_us;
  int64_t checkpoints = 0, replans = 0, refits = 0, changes = 0, republished = 0;
  double decay = 0;
  for (auto _ : state) {
    sch::OnlinePlanner planner(p, sch::PredictorForecasterFactory(po));
    all_us.clear();
    validation_us.clear();
    for (int64_t i = 1; i <= N; ++i) {
      const bool validation = i % 50 == 0;
      const auto t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(planner.Observe(i, loss(i) + 5 * noise(rng), sch::ObservationKind::kTraining));
      if (validation) benchmark::DoNotOptimize(planner.Observe(i, loss(i) + noise(rng), sch::ObservationKind::kValidation));
      if (validation && remeasure && i > p.warmup_iterations) {
        const int64_t v = planner.served_model();
        const double again = loss(v) + decay_per_iteration * static_cast<double>(i - v) + noise(rng);
        benchmark::DoNotOptimize(planner.ObserveServed(std::max(0.0, again)));
        // The kept models too (re-publishing): up to keep_versions of them.
        for (int64_t kept : planner.KeptVersions()) {
          const double l = loss(kept) + decay_per_iteration * static_cast<double>(i - kept) + noise(kept_rng);
          benchmark::DoNotOptimize(planner.ObserveKept(kept, std::max(0.0, l)));
        }
      }
      auto now = planner.ShouldCheckpoint(i);
      if (now.ok() && *now) benchmark::DoNotOptimize(planner.Commit(i));
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      all_us.push_back(us);
      if (validation && i > p.warmup_iterations) validation_us.push_back(us);
    }
    checkpoints = static_cast<int64_t>(planner.taken().size());
    replans = planner.summary().replans;
    refits = planner.summary().refits;
    changes = planner.summary().changes;
    decay = planner.summary().max_decay_per_s;
    republished = planner.summary().republished;
  }
  state.counters["obs_median_us"] = Quantile(all_us, 0.5);
  state.counters["obs_p99_us"] = Quantile(all_us, 0.99);
  state.counters["val_median_us"] = Quantile(validation_us, 0.5);
  state.counters["val_p99_us"] = Quantile(validation_us, 0.99);
  state.counters["val_max_us"] = Quantile(validation_us, 1.0);
  state.counters["checkpoints"] = static_cast<double>(checkpoints);
  state.counters["replans"] = static_cast<double>(replans);
  state.counters["fits"] = static_cast<double>(refits);
  state.counters["changes"] = static_cast<double>(changes);
  state.counters["decay_per_s"] = decay;
  state.counters["republished"] = static_cast<double>(republished);
}
BENCHMARK(BM_OnlineObservation)
    ->Args({10000, 0, 0})
    ->Args({10000, 1, 0})
    ->Args({100000, 0, 0})
    ->Args({100000, 1, 0})
    ->Args({10000, 0, 1})
    ->Args({100000, 0, 1})
    ->Args({100000, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace bench
}  // namespace viper
