// Core benchmarks: checksum speed against memcpy of the same bytes, per XXH3
// implementation.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "viper/core/checksum.h"

namespace {

void BM_Memcpy(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(n, 1), dst(n, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_Memcpy)->Arg(64 << 20);

void BM_Xxh3Checksum(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(n, 1);
  for (auto _ : state) benchmark::DoNotOptimize(viper::Xxh3_64(src.data(), n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_Xxh3Checksum)->Arg(64 << 20);

// Each XXH3 implementation this CPU runs (baseline, avx2, avx512; the one in
// use is the label), side by side: 64 MiB hashed in 128 KiB pieces that are
// in cache (how the transports hash a block right after copying it) and in
// one pass from memory, against memcpy of the same 64 MiB. Counters:
// <impl>_cache_GBps, <impl>_mem_GBps, memcpy_GBps; best of 5 each.
void BM_Xxh3Implementations(benchmark::State& state) {
  constexpr std::size_t kBytes = 64 << 20, kPiece = 128 << 10;
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  auto best_s = [](auto&& f) {
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  for (auto _ : state) {
    const double memcpy_s = best_s([&] {
      std::memcpy(dst.data(), src.data(), kBytes);
      benchmark::ClobberMemory();
    });
    state.counters["memcpy_GBps"] = kBytes / memcpy_s / 1e9;
    for (const std::string& name : viper::Xxh3Implementations()) {
      const double cache_s = best_s([&] {
        viper::Xxh3Hasher h(name);
        for (std::size_t i = 0; i < kBytes / kPiece; ++i) h.Update(src.data(), kPiece);
        benchmark::DoNotOptimize(h.Digest());
      });
      const double mem_s = best_s([&] {
        viper::Xxh3Hasher h(name);
        h.Update(src.data(), kBytes);
        benchmark::DoNotOptimize(h.Digest());
      });
      state.counters[name + "_cache_GBps"] = kBytes / cache_s / 1e9;
      state.counters[name + "_mem_GBps"] = kBytes / mem_s / 1e9;
    }
  }
  state.SetLabel(std::string("in use: ") + viper::Xxh3Implementation());
}
BENCHMARK(BM_Xxh3Implementations)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
