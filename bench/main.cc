// viper-bench: Google Benchmark main. Benchmarks live in bench/*_bench.cc.
// Besides Google Benchmark's flags it takes --viper_log=FILE (repeatable): a
// training log added to the strategy comparison next to the shipped ones.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "bench_registry.h"

int main(int argc, char** argv) {
  std::vector<std::string> logs;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    constexpr const char kLog[] = "--viper_log=";
    if (i > 0 && std::strncmp(argv[i], kLog, sizeof(kLog) - 1) == 0) {
      logs.emplace_back(argv[i] + sizeof(kLog) - 1);
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  viper::bench::RegisterStrategyBenchmarks(logs);
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
