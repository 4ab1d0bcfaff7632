// Schedulers: optimal and fixed at N = 1e6 (goal < 1 s each), and the
// near-linear DP against the O(N^2) DP and viper-fixed, side by side in the
// same run (compare the reported times; nothing is asserted here).
// BM_OptimalFixedWindow: the fixed-window optimum (Lagrangian passes with a
// certificate, layered fallback) at N = 2e4 and 1e6 for the tier presets'
// stalls and a stall of one iteration (goals: < 10 ms and < 1 s).
// BM_Replan: the closed loop's re-plan from random points of a run (goal:
// median < 5 ms at 1e5 iterations), median and p99 as counters.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "viper/schedulers/solvers.h"
#include "viper/schedulers/presets.h"

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

// Stall levels: the async tier presets at the paper's NT3.B size (1.7 GB,
// push: sigma/delta = gpu 0.023/0.32 s, host 0.50/0.91 s, pfs 1.36/2.71 s),
// and one iteration's time (0.1 s) with the host tier's delay.
viper::schedulers::CheckpointCost StallLevel(int64_t level) {
  using viper::Tier;
  const Tier tier = level == 0 ? Tier::kGpu : level == 2 ? Tier::kPfs : Tier::kHost;
  auto cost = viper::schedulers::PresetTierCost(tier, 1.7e9, false, viper::schedulers::Notification::kPush).ToCheckpointCost();
  if (level == 3) cost.stall_s = 0.1;
  return cost;
}
const char* const kStallNames[] = {"gpu", "host", "pfs", "iteration"};

// The bench curve: 0 = Make's noisy curve with a step, 1 = the smooth
// decreasing curve a forecaster produces (same trend, no noise, no step),
// 2 = the smooth curve with drift (rho = 1e-4 loss per second served: a
// version never refreshed over the window would gain ~0.5 x its loss).
Setup MakeCurve(int64_t n, WindowKind window, int64_t stall_level, int64_t smooth) {
  Setup s = Make(n, window);
  s.p.cost = StallLevel(stall_level);
  if (smooth == 2) s.p.drift_per_s = 1e-4 * 2e4 / static_cast<double>(n);
  if (smooth) {
    std::vector<double> l;
    for (int64_t i = 0; i <= n; ++i) l.push_back(2.0 * std::exp(-4.0 * static_cast<double>(i) / n) + 0.2);
    s.c = LossCurve(0, l);
  }
  return s;
}

void BM_OptimalFixedWindow(benchmark::State& state) {
  const Setup s = MakeCurve(state.range(0), WindowKind::kRequestCount, state.range(1), state.range(2));
  const char* const kCurves[] = {"/noisy", "/smooth", "/smooth+drift"};
  state.SetLabel(std::string(kStallNames[state.range(1)]) + kCurves[state.range(2)]);
  for (auto _ : state) {
    auto sol = viper::schedulers::SolveOptimal(s.p, s.c);
    if (!sol.ok()) {
      state.SkipWithError(sol.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(sol);
    state.counters["checkpoints"] = static_cast<double>(sol->schedule.size());
    state.counters["passes"] = static_cast<double>(sol->passes);
    state.counters["layers"] = static_cast<double>(sol->layers - sol->passes);
    state.counters["certified"] = sol->method == viper::schedulers::SolveMethod::kLayered ? 0.0 : 1.0;
  }
}
BENCHMARK(BM_OptimalFixedWindow)
    ->ArgsProduct({{20000, 1000000}, {0, 1, 2, 3}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond);

// Re-planning as the closed loop does it: from a random iteration `now` of a
// run of N iterations, with the checkpoints the full-run plan took before
// now, a measured served loss 1% off the forecast, and earliest = now + 1.
// Each call is timed alone (manual time, wall clock); median and p99 are
// counters, also in thread CPU time (cpu_*: what the call costs without the
// waits of a shared machine).
void BM_Replan(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto window = static_cast<WindowKind>(state.range(1));
  const Setup s = MakeCurve(n, window, 1, 1);
  // Third argument: the certified gap as -log10 (0 = exact; 6 = 1e-6, the
  // closed loop's default replan_gap).
  const viper::schedulers::SolveOptions options{state.range(2) > 0 ? std::pow(10.0, -static_cast<double>(state.range(2)))
                                                                   : 0.0};
  state.SetLabel(std::string(viper::schedulers::ToString(window)) + "/host/smooth" +
                 (state.range(2) > 0 ? "/gap 1e-" + std::to_string(state.range(2)) : "/exact"));
  const auto full = viper::schedulers::SolveOptimal(s.p, s.c);
  if (!full.ok()) {
    state.SkipWithError(full.status().ToString().c_str());
    return;
  }
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> at(s.p.warmup_iterations, n - 1);
  std::vector<double> times_ms, cpu_ms, passes;
  const auto thread_cpu_s = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  for (auto _ : state) {
    const int64_t now = at(rng);
    viper::schedulers::PlanStart start;
    const auto& plan = full->schedule;
    start.checkpoints_taken = std::lower_bound(plan.begin(), plan.end(), now + 1) - plan.begin();
    if (start.checkpoints_taken > 0) start.last_checkpoint = plan[start.checkpoints_taken - 1];
    start.earliest_iteration = now + 1;
    start.served_loss =
        1.01 * s.c.at(start.checkpoints_taken > 0 ? start.last_checkpoint : s.p.warmup_iterations);
    const double c0 = thread_cpu_s();
    const auto t0 = std::chrono::steady_clock::now();
    auto sol = viper::schedulers::SolveOptimal(s.p, s.c, start, options);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu_ms.push_back((thread_cpu_s() - c0) * 1e3);
    benchmark::DoNotOptimize(sol);
    state.SetIterationTime(dt);
    times_ms.push_back(dt * 1e3);
    if (sol.ok()) passes.push_back(static_cast<double>(sol->layers));
  }
  const auto publish = [&](std::vector<double>& v, const std::string& prefix) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    state.counters[prefix + "median_ms"] = v[v.size() / 2];
    state.counters[prefix + "p99_ms"] = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  };
  publish(times_ms, "");
  publish(cpu_ms, "cpu_");
  if (!passes.empty()) {
    std::sort(passes.begin(), passes.end());
    state.counters["passes_median"] = passes[passes.size() / 2];
    state.counters["passes_p99"] = passes[std::min(passes.size() - 1, passes.size() * 99 / 100)];
  }
}
BENCHMARK(BM_Replan)
    ->ArgsProduct({{10000, 100000, 1000000}, {0, 1}, {0, 6}})
    ->UseManualTime()
    ->Iterations(200)
    ->Unit(benchmark::kMillisecond);

}  // namespace
