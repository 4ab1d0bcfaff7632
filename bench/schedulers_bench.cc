// Schedulers: optimal and fixed at N = 1e6 (goal < 1 s each), and the
// near-linear DP against the O(N^2) DP and viper-fixed, side by side in the
// same run (compare the reported times; nothing is asserted here). The
// fixed-window (request-count) optimal is layered by count and runs at N = 2e4
// only: at N = 1e6 it needs hundreds of O(N log N) layers (see README).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>

#include "viper/schedulers/solvers.h"

namespace {

using viper::schedulers::LossCurve;
using viper::schedulers::Problem;
using viper::schedulers::WindowKind;

// A noisy exponential learning curve with LR drops, N iterations, W = N/5.
struct Setup {
  Problem p;
  LossCurve c;
};

Setup Make(int64_t n, WindowKind window) {
  Setup s;
  s.p.warmup_iterations = n / 5;
  s.p.total_iterations = n;
  s.p.seconds_per_iteration = 0.1;
  s.p.cost.stall_s = 0.6;   // NT3.A host-tier latency scale
  s.p.cost.delay_s = 1.0;
  s.p.requests.interval_s = 0.05;
  s.p.requests.window = window;
  s.p.requests.request_count = static_cast<int64_t>(0.8 * n * 0.1 / 0.05);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-0.02, 0.02);
  std::vector<double> l;
  for (int64_t i = 0; i <= n; ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(n);
    l.push_back(2.0 * std::exp(-4 * t) + 0.2 + (t > 0.5 ? -0.05 : 0.0) + u(rng));
  }
  s.c = LossCurve(0, l);
  return s;
}

void BM_Optimal(benchmark::State& state) {
  const Setup s = Make(state.range(0), static_cast<WindowKind>(state.range(1)));
  for (auto _ : state) {
    auto sol = viper::schedulers::SolveOptimal(s.p, s.c);
    benchmark::DoNotOptimize(sol);
    state.counters["checkpoints"] = static_cast<double>(sol->schedule.size());
    state.counters["layers"] = static_cast<double>(sol->layers);
  }
}
BENCHMARK(BM_Optimal)->Args({20000, 0})->Args({1000000, 0})->Args({20000, 1})
    ->Unit(benchmark::kMillisecond);

void BM_OptimalQuadraticDp(benchmark::State& state) {
  const Setup s = Make(state.range(0), WindowKind::kWhileTraining);
  for (auto _ : state) benchmark::DoNotOptimize(viper::schedulers::SolveOptimalQuadratic(s.p, s.c));
}
BENCHMARK(BM_OptimalQuadraticDp)->Arg(20000)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_FixedInterval(benchmark::State& state) {
  const Setup s = Make(state.range(0), WindowKind::kWhileTraining);
  for (auto _ : state) benchmark::DoNotOptimize(viper::schedulers::SolveFixedInterval(s.p, s.c));
}
BENCHMARK(BM_FixedInterval)->Arg(20000)->Arg(1000000)->Unit(benchmark::kMillisecond);

void BM_ViperFixed(benchmark::State& state) {
  const Setup s = Make(state.range(0), WindowKind::kRequestCount);
  for (auto _ : state) benchmark::DoNotOptimize(viper::schedulers::ViperFixedInterval(s.p, s.c));
}
BENCHMARK(BM_ViperFixed)->Arg(20000)->Arg(1000000)->Unit(benchmark::kMillisecond);

}  // namespace
