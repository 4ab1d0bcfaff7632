// safetensors codec speed, each measured against memcpy of the same bytes in
// the same run: serialize (copy + XXH3 + header) and parse with checksum
// verification (header parse + XXH3 of the data section; tensors are views).
//
// Counters: <op>_ratio = time of <op> / time of memcpy of the model's data
// bytes, both timed in every iteration (1.0 = as fast as a copy);
// <op>_GBps and memcpy_GBps are the throughputs behind the ratio.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "viper/core/safetensors.h"

namespace {

using Clock = std::chrono::steady_clock;

// ~100 F32 tensors of uneven sizes (weights 1..7 repeating) adding up to
// about `total_bytes`, with non-constant contents.
viper::ModelState MakeModel(std::size_t total_bytes) {
  constexpr int kTensors = 100;
  int weight_sum = 0;
  for (int i = 0; i < kTensors; ++i) weight_sum += 1 + i % 7;
  viper::ModelState state;
  for (int i = 0; i < kTensors; ++i) {
    const int64_t elements = static_cast<int64_t>(total_bytes / 4 / weight_sum * (1 + i % 7));
    auto t = viper::Tensor::Allocate("layer" + std::to_string(i / 2) + (i % 2 ? ".bias" : ".weight"),
                                     viper::DType::kF32, {elements});
    float* f = t.As<float>();
    for (int64_t k = 0; k < elements; ++k) f[k] = static_cast<float>((k * 2654435761u + i) % 1000) * 1e-3f;
    if (!state.Add(std::move(t)).ok()) std::abort();
  }
  state.metadata = {1, 1000, 0};
  return state;
}

// A pre-touched buffer of `n` bytes (no page faults inside the timed region).
std::unique_ptr<std::byte[]> Touched(std::size_t n) {
  std::unique_ptr<std::byte[]> p(new std::byte[n]);
  std::memset(p.get(), 1, n);
  return p;
}

// memcpy of the model's tensors (the same pieces the codec copies), timed.
double MemcpySeconds(const viper::ModelState& state, std::byte* dst) {
  const auto start = Clock::now();
  for (const auto& t : state.tensors()) {
    std::memcpy(dst, t.data, t.size_bytes);
    dst += t.size_bytes;
  }
  benchmark::ClobberMemory();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void Report(benchmark::State& state, const char* op, double op_s, double memcpy_s, std::size_t data_bytes) {
  const double n = static_cast<double>(state.iterations());
  state.counters[std::string(op) + "_ratio"] = op_s / memcpy_s;
  state.counters[std::string(op) + "_GBps"] = data_bytes * n / op_s / 1e9;
  state.counters["memcpy_GBps"] = data_bytes * n / memcpy_s / 1e9;
  state.counters["tensors"] = 100;
  state.SetBytesProcessed(static_cast<int64_t>(n * data_bytes));
}

void BM_SafetensorsSerialize(benchmark::State& state) {
  const viper::ModelState model = MakeModel(static_cast<std::size_t>(state.range(0)) << 20);
  const std::size_t data_bytes = model.TotalBytes();
  const uint64_t size = *viper::safetensors::SerializedSize(model);
  auto out = Touched(size);
  auto copy = Touched(data_bytes);
  double op_s = 0, memcpy_s = 0;
  for (auto _ : state) {
    memcpy_s += MemcpySeconds(model, copy.get());
    const auto start = Clock::now();
    auto written = viper::safetensors::SerializeTo(model, out.get(), size);
    benchmark::ClobberMemory();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!written.ok()) {
      state.SkipWithError(written.status().ToString().c_str());
      return;
    }
    op_s += s;
    state.SetIterationTime(s);
  }
  Report(state, "serialize", op_s, memcpy_s, data_bytes);
}
BENCHMARK(BM_SafetensorsSerialize)->Arg(64)->Arg(600)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_SafetensorsParseVerify(benchmark::State& state) {
  const viper::ModelState model = MakeModel(static_cast<std::size_t>(state.range(0)) << 20);
  const std::size_t data_bytes = model.TotalBytes();
  auto bytes = viper::safetensors::Serialize(model);
  if (!bytes.ok()) {
    state.SkipWithError(bytes.status().ToString().c_str());
    return;
  }
  auto buffer = std::make_shared<std::vector<std::byte>>(*std::move(bytes));
  auto copy = Touched(data_bytes);
  viper::safetensors::ParseOptions options;
  options.verify_checksum = true;
  options.require_checksum = true;
  double op_s = 0, memcpy_s = 0;
  for (auto _ : state) {
    memcpy_s += MemcpySeconds(model, copy.get());
    const auto start = Clock::now();
    auto parsed = viper::safetensors::Parse(buffer, buffer->data(), buffer->size(), options);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!parsed.ok() || parsed->size() != model.size()) {
      state.SkipWithError(parsed.ok() ? "tensor count differs" : parsed.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(parsed->tensors().data());
    op_s += s;
    state.SetIterationTime(s);
  }
  Report(state, "parse_verify", op_s, memcpy_s, data_bytes);
}
BENCHMARK(BM_SafetensorsParseVerify)->Arg(64)->Arg(600)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
