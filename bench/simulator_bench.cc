// Simulator speed: events per second, and a full run of 10^6 requests over
// 10^5 iterations (goal: under 0.5 s on one core).
#include <benchmark/benchmark.h>

#include <cmath>

#include "viper/schedulers/presets.h"
#include "viper/simulator/simulator.h"

namespace viper {
namespace {

namespace sch = schedulers;

void BM_SimulatorFullRun(benchmark::State& state) {
  const int64_t iterations = state.range(0);
  const int64_t requests = state.range(1);
  const int64_t checkpoints = state.range(2);
  simulator::Simulator::Options o;
  o.problem.warmup_iterations = 0;
  o.problem.total_iterations = iterations;
  o.problem.seconds_per_iteration = 0.01;
  o.tier = sch::PresetTierCost(Tier::kHost, 600e6, false, sch::Notification::kPush);
  // Requests spread over the training time so that about `requests` arrive.
  o.problem.requests.interval_s = 0.01 * static_cast<double>(iterations) / static_cast<double>(requests);
  std::vector<double> losses;
  for (int64_t i = 0; i <= iterations; ++i) losses.push_back(0.2 + 2.0 * std::exp(-static_cast<double>(i) / 2e4));
  const sch::LossCurve curve(0, losses);
  sch::Schedule schedule;
  for (int64_t k = 1; k <= checkpoints; ++k) schedule.push_back(k * iterations / (checkpoints + 1));
  simulator::Simulator sim(o);
  int64_t events = 0;
  for (auto _ : state) {
    auto r = sim.Run(curve, schedule);
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    events += r->events;
    benchmark::DoNotOptimize(r->cil);
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["requests"] = static_cast<double>(requests);
}
// The case: 10^5 iterations, 10^6 requests; with few and with many checkpoints.
BENCHMARK(BM_SimulatorFullRun)->Args({100000, 1000000, 100})->Args({100000, 1000000, 10000})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace viper
