// Strategies judged on the truth: every strategy of a planning context
// (schedulers/scenario.h) is planned there and simulated here on the true
// curve. The simulator only judges plans; it never makes them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/schedulers/scenario.h"
#include "viper/schedulers/strategy.h"
#include "viper/simulator/simulator.h"

namespace viper {
namespace simulator {

// One strategy judged on the truth.
struct StrategyOutcome {
  schedulers::StrategyKind kind = schedulers::StrategyKind::kOptimal;
  schedulers::Plan plan;
  SimulationResult sim;
  std::optional<double> regret_vs_oracle;  // cil / oracle cil - 1
  std::optional<double> change_vs_epoch;   // cil / epoch cil - 1
};

struct Comparison {
  std::vector<StrategyOutcome> outcomes;  // in the order asked; failed strategies are in `skipped`
  std::vector<std::string> skipped;       // "epoch: the log has no epochs", ...
};

// Called with each plan's schedule before it is simulated (the CLI refuses a
// simulation too large for memory); an error ends the comparison.
using ScheduleCheck = std::function<Status(const schedulers::Schedule& schedule)>;

// Plans and simulates each strategy on the true curve with `base_options`
// (normally SimulatorOptionsFor(scenario)). Needs scenario.truth. An error of
// `check`, or of the simulation, is returned with the strategy's name as
// context.
StatusOr<Comparison> CompareStrategies(const schedulers::Scenario& scenario, const std::vector<schedulers::StrategyKind>& kinds,
                                       const Simulator::Options& base_options, const ScheduleCheck& check = nullptr);

// The simulator options of a scenario (problem, tier, iteration times).
Simulator::Options SimulatorOptionsFor(const schedulers::Scenario& scenario);

}  // namespace simulator
}  // namespace viper
