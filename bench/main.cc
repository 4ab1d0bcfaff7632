// viper-bench: Google Benchmark main. Benchmarks live in bench/*_bench.cc.
// Besides Google Benchmark's flags it takes --viper_log=FILE (repeatable): a
// training log added to the strategy comparison next to the shipped ones.
//
// Under `mpirun -np 2` rank 0 runs and reports everything; the other ranks
// run only the transport benchmarks it runs (as their consumers, in the same
// order) and print nothing, so the output stays one clean report. A filter
// that selects transport benchmarks must name them ("Transports").
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_registry.h"

namespace {

// The MPI rank from the launcher's environment (Open MPI, MPICH/PMI), or 0.
int LauncherRank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> logs;
  std::vector<std::string> args;
  std::string filter = ".";
  for (int i = 0; i < argc; ++i) {
    constexpr const char kLog[] = "--viper_log=";
    constexpr const char kFilter[] = "--benchmark_filter=";
    if (i > 0 && std::strncmp(argv[i], kLog, sizeof(kLog) - 1) == 0) {
      logs.emplace_back(argv[i] + sizeof(kLog) - 1);
      continue;
    }
    if (i > 0 && std::strncmp(argv[i], kFilter, sizeof(kFilter) - 1) == 0) {
      filter = argv[i] + sizeof(kFilter) - 1;
      continue;
    }
    args.emplace_back(argv[i]);
  }
  if (LauncherRank() > 0) {
    // Only rank 0 writes --benchmark_out (the ranks would share the file).
    args.erase(std::remove_if(args.begin() + 1, args.end(),
                              [](const std::string& a) { return a.rfind("--benchmark_out", 0) == 0; }),
               args.end());
    // The transport benchmarks rank 0 runs: all of them by default, or those
    // of a filter that names them (it must contain "Transports"; Google
    // Benchmark's POSIX regex has no lookahead to intersect filters).
    if (filter == ".") filter = "^BM_Transports";
    else if (filter.find("Transports") == std::string::npos) filter = "^$";
    if (!std::freopen("/dev/null", "w", stdout)) return 1;
  }
  args.push_back("--benchmark_filter=" + filter);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  int cargc = static_cast<int>(cargs.size());
  viper::bench::RegisterStrategyBenchmarks(logs);
  benchmark::Initialize(&cargc, cargs.data());
  if (benchmark::ReportUnrecognizedArguments(cargc, cargs.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
