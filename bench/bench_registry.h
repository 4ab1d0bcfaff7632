// Benchmarks registered at run time (they depend on files found at start-up).
#pragma once

#include <string>
#include <vector>

namespace viper {
namespace bench {

// One entry per (log, tier, warm-up, strategy): the shipped logs plus `extra_logs`.
void RegisterStrategyBenchmarks(const std::vector<std::string>& extra_logs);

}  // namespace bench
}  // namespace viper
