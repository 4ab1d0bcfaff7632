#include "viper/simulator/compare.h"

#include <cmath>

namespace viper {
namespace simulator {

Simulator::Options SimulatorOptionsFor(const schedulers::Scenario& sc) {
  Simulator::Options so;
  so.problem = sc.problem;
  so.tier = sc.tier;
  so.iteration_times_s = sc.iteration_times_s;
  so.staleness = sc.staleness_truth;
  return so;
}

StatusOr<Comparison> CompareStrategies(const schedulers::Scenario& sc, const std::vector<schedulers::StrategyKind>& kinds,
                                       const Simulator::Options& base_options, const ScheduleCheck& check) {
  if (!sc.truth) {
    return InvalidArgumentError("the log ends before N = " + std::to_string(sc.problem.total_iterations) +
                                ": the simulator needs the true curve up to N");
  }
  Comparison c;
  for (auto kind : kinds) {
    auto plan = schedulers::PlanStrategy(sc, kind);
    if (!plan.ok()) {
      c.skipped.push_back(std::string(schedulers::ToString(kind)) + ": " + plan.status().message());
      continue;
    }
    if (check) {
      if (Status st = check(plan->schedule); !st.ok()) return st.WithContext(schedulers::ToString(kind));
    }
    Simulator::Options options = base_options;
    options.published = plan->published;
    options.kept_at = plan->kept;
    options.pauses = plan->pauses;
    options.waits = plan->waits;
    Simulator sim(options);
    auto result = sim.Run(*sc.truth, plan->schedule);
    if (!result.ok()) return result.status().WithContext(schedulers::ToString(kind));
    c.outcomes.push_back(StrategyOutcome{kind, std::move(*plan), std::move(*result), std::nullopt, std::nullopt});
  }
  std::optional<double> oracle, epoch;
  for (const auto& o : c.outcomes) {
    if (o.kind == schedulers::StrategyKind::kOracle) oracle = o.sim.cil;
    if (o.kind == schedulers::StrategyKind::kEpoch) epoch = o.sim.cil;
  }
  // A schedule that served a diverged model has CIL +inf: its regret is +inf,
  // and nothing is compared with it (a change against +inf says nothing).
  auto ratio = [](double a, double b) -> std::optional<double> {
    if (!(b > 0) || std::isinf(b)) return std::nullopt;
    return a / b - 1;
  };
  for (auto& o : c.outcomes) {
    if (oracle) o.regret_vs_oracle = ratio(o.sim.cil, *oracle);
    if (epoch) o.change_vs_epoch = ratio(o.sim.cil, *epoch);
  }
  return c;
}

}  // namespace simulator
}  // namespace viper
