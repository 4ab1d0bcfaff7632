// Strategies side by side: for each shipped log (and each --viper_log=FILE),
// each tier preset and each warm-up fraction, one entry per strategy whose
// counters are the simulated CIL on the log's true curve, the regret vs the
// oracle, the change vs epoch-boundary updates, checkpoints, training
// slowdown and planning time. Names: strategies/<log>/<tier>/w<pct>/<strategy>,
// so --benchmark_filter selects them.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench_registry.h"
#include "viper/datasets/log_reader.h"
#include "viper/schedulers/scenario.h"
#include "viper/simulator/compare.h"

namespace viper {
namespace bench {
namespace {

namespace sch = schedulers;
namespace sim = simulator;

// One comparison per (log, tier, warm-up), computed on first use and shared
// by that comparison's strategy entries.
struct Case {
  std::string log_path;
  Tier tier;
  double warmup_fraction;
  std::once_flag once;
  StatusOr<sim::Comparison> comparison = Status(StatusCode::kInternal, "not run");
  double plan_and_simulate_s = 0;
};

void Compute(Case* c) {
  auto log = datasets::LogReader::ReadFile(c->log_path, {});
  if (!log.ok()) {
    c->comparison = log.status();
    return;
  }
  sch::ScenarioOptions o;
  o.warmup_fraction = c->warmup_fraction;
  // The paper's NT3.B size (1.7 GB), asynchronous, push notification.
  o.tier = sch::PresetCost{c->tier, 1.7e9, false, sch::Notification::kPush};
  auto scenario = sch::MakeScenario(*log, o);
  if (!scenario.ok()) {
    c->comparison = scenario.status();
    return;
  }
  c->comparison = sim::CompareStrategies(*scenario, sch::AllStrategyKinds(), sim::SimulatorOptionsFor(*scenario));
}

void BM_Strategy(benchmark::State& state, Case* c, sch::StrategyKind kind) {
  std::call_once(c->once, Compute, c);
  if (!c->comparison.ok()) {
    state.SkipWithError(c->comparison.status().message().c_str());
    return;
  }
  const sim::StrategyOutcome* outcome = nullptr;
  for (const auto& o : c->comparison->outcomes) {
    if (o.kind == kind) outcome = &o;
  }
  if (!outcome) {
    state.SkipWithError((std::string(sch::ToString(kind)) + " produced no schedule on this log").c_str());
    return;
  }
  // The comparison is computed once per (log, tier, warm-up) outside the
  // timed loop; the entry reports its figures as counters (plan_time_s is the
  // strategy's own planning time).
  for (auto _ : state) benchmark::DoNotOptimize(outcome);
  state.counters["cil"] = outcome->sim.cil;
  state.counters["regret_vs_oracle"] = outcome->regret_vs_oracle.value_or(0.0);
  state.counters["change_vs_epoch"] = outcome->change_vs_epoch.value_or(0.0);
  state.counters["checkpoints"] = static_cast<double>(outcome->sim.checkpoints);
  state.counters["slowdown_s"] = outcome->sim.slowdown_s;
  state.counters["plan_time_s"] = outcome->plan.summary.plan_time_s;
  state.counters["mean_staleness_s"] = outcome->sim.mean_staleness_s.value_or(0.0);
}

std::vector<std::unique_ptr<Case>>& Cases() {
  static std::vector<std::unique_ptr<Case>> cases;  // benchmarks are registered globally
  return cases;
}

}  // namespace

void RegisterStrategyBenchmarks(const std::vector<std::string>& extra_logs) {
  namespace fs = std::filesystem;
  std::vector<std::string> logs = datasets::ShippedLogFiles();
  logs.insert(logs.end(), extra_logs.begin(), extra_logs.end());
  for (const std::string& path : logs) {
    std::string stem = fs::path(path).filename().string();
    stem = stem.substr(0, stem.find('.'));
    for (Tier tier : {Tier::kGpu, Tier::kHost, Tier::kPfs}) {
      for (double w : {0.1, 0.2, 0.4}) {
        Cases().push_back(std::make_unique<Case>());
        Case* c = Cases().back().get();
        c->log_path = path;
        c->tier = tier;
        c->warmup_fraction = w;
        for (sch::StrategyKind kind : sch::AllStrategyKinds()) {
          const std::string name = "strategies/" + stem + "/" + ToString(tier) + "/w" +
                                   std::to_string(static_cast<int>(w * 100)) + "/" + sch::ToString(kind);
          benchmark::RegisterBenchmark(name.c_str(), BM_Strategy, c, kind)->Iterations(1)->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
}

}  // namespace bench
}  // namespace viper
