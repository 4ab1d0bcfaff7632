// Delta versions (issue 27; viper/transports/delta.h, PfsStore::WriteDelta),
// each figure against a raw reference measured in the same run (medians of
// as many runs):
//   BM_DeltaEncode/<workload>/<MiB>: one diff+encode of the new image against
//     the base, and one Apply into a copy of the base (the consumer's back
//     buffer, verification included), / one memcpy of the image
//     (encode_over_memcpy, apply_over_memcpy: wall clock; *_cpu: this
//     thread's CPU time, what a loaded machine distorts less); bytes moved / the encoding
//     bound: values_bound = changed elements x element bytes (unchanged
//     tensors 0), entropy_bound = that plus log2 C(n, k) bits per tensor (what
//     any code must spend to say which k of n elements changed).
//     Workloads: 0 frozen backbone (F32; the top 1/8 of the tensors trained,
//     every element changed, the rest identical), 1 BF16 small step (2% of
//     the elements, at random positions, moved by one ULP), 2 dense FP32 SGD
//     (every element changed: the whole-version fallback).
//     The producer's stall of a delta version (issue 27 goal: <= 1.5 memcpy),
//     CPU time / one memcpy's: fused_over_memcpy[_cpu] = the live model's
//     data copied into the image, hashed and diffed against the base in one
//     pass (delta::CopyHashAndFeed, the host tier's path) plus the records
//     (Encoder::Finish), made of fused_pass_cpu + fused_records_cpu; for
//     comparison separate_over_memcpy[_cpu] = the two passes the host tier
//     made before (copy + hash a slice at a time, separate_copy_hash_cpu,
//     then Encode), copy_hash_cpu = the fused pass without an encoder, and
//     hash_cpu = XXH3 of the data from memory. The fused delta and digest are
//     checked against Encode's (the benchmark fails otherwise).
//   BM_DeltaPfs/<MiB>/<o_direct>: a PFS version with 2% of its F32 elements
//     changed, written as a delta (WriteDelta: encode, write, fsync) and read
//     by a consumer holding the base (ReadFrom: read the delta, apply,
//     verify), / the same version written and read whole (Write + Read):
//     delta_over_full. Directory: $VIPER_BENCH_PFS_DIR (default $TMPDIR or /tmp).
// The model size is the second argument (MiB; 600 is the size).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "viper/core/checksum.h"
#include "viper/core/safetensors.h"
#include "viper/transports/aligned_buffer.h"
#include "viper/transports/delta.h"
#include "viper/transports/pfs_store.h"
#include "viper/transports/types.h"

namespace {

using namespace viper;              // NOLINT
using namespace viper::transports;  // NOLINT
using Bytes = std::vector<std::byte>;

// xorshift64*: fast enough to fill 600 MB.
struct Rng {
  uint64_t s;
  uint64_t operator()() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
};

struct Workload {
  Bytes base, target;
  uint64_t data_offset = 0;  // of the target's data section
  double values_bound = 0;   // bytes
  double entropy_bound = 0;  // bytes
  double changed_fraction = 0;
};

// log2 C(n, k).
double Log2Binomial(double n, double k) {
  return (std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1)) / std::log(2.0);
}

// The bounds, from a plain element-by-element comparison (independent of the codec).
void CountBounds(Workload* w) {
  auto a = safetensors::Parse(nullptr, w->base.data(), w->base.size());
  auto b = safetensors::Parse(nullptr, w->target.data(), w->target.size());
  if (!a.ok() || !b.ok()) std::abort();
  double changed = 0, total = 0;
  for (std::size_t i = 0; i < a->size(); ++i) {
    const Tensor& x = a->tensors()[i];
    const Tensor& y = b->tensors()[i];
    const std::size_t e = DTypeSize(x.dtype);
    const uint64_t n = x.size_bytes / e;
    uint64_t k = 0;
    for (uint64_t j = 0; j < n; ++j) k += std::memcmp(x.data + j * e, y.data + j * e, e) != 0;
    total += n;
    changed += k;
    if (k == 0) continue;
    w->values_bound += static_cast<double>(k * e);
    w->entropy_bound += static_cast<double>(k * e) + Log2Binomial(n, k) / 8;
  }
  w->changed_fraction = changed / total;
}

// A model of about `mib` MiB in 24 tensors, version 1, and its version 2 after `kind`'s update.
Workload Make(int kind, uint64_t mib, double sparse_fraction = 0.02) {
  const int tensors = 24;
  const DType dtype = kind == 1 ? DType::kBF16 : DType::kF32;
  const std::size_t e = DTypeSize(dtype);
  const int64_t n = static_cast<int64_t>((mib << 20) / tensors / e);
  ModelState m;
  Rng rng{0x9e3779b97f4a7c15ull};
  for (int t = 0; t < tensors; ++t) {
    Tensor x = Tensor::Allocate("layer" + std::to_string(t) + ".weight", dtype, {n});
    uint64_t* p = reinterpret_cast<uint64_t*>(x.data);
    for (std::size_t i = 0; i < x.size_bytes / 8; ++i) p[i] = rng();
    (void)m.Add(std::move(x));
  }
  m.metadata.version = 1;
  Workload w;
  w.base = *safetensors::Serialize(m);
  // A changed element is picked with probability `fraction`: geometric gaps.
  const double fraction = kind == 0 ? 1.0 : kind == 2 ? 1.0 : sparse_fraction;
  const double log1m = std::log1p(-std::min(fraction, 0.999999));
  for (int t = 0; t < tensors; ++t) {
    if (kind == 0 && t < tensors - tensors / 8) continue;  // the frozen backbone
    Tensor& x = m.mutable_tensors()[t];
    if (fraction >= 1.0) {
      for (int64_t i = 0; i < n; ++i) x.data[i * e] ^= std::byte{1};  // the lowest mantissa bit moves
      continue;
    }
    for (int64_t i = 0;;) {
      const double u = (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0;
      i += static_cast<int64_t>(std::log(u) / log1m);
      if (i >= n) break;
      if (e == 2) {
        uint16_t v;
        std::memcpy(&v, x.data + i * 2, 2);
        v = static_cast<uint16_t>(v + 1);  // one ULP (BF16)
        std::memcpy(x.data + i * 2, &v, 2);
      } else {
        x.data[i * e] ^= std::byte{1};
      }
      ++i;
    }
  }
  m.metadata.version = 2;
  w.target = *safetensors::Serialize(m);
  safetensors::ParseInfo info;
  if (!safetensors::Parse(nullptr, w.target.data(), w.target.size(), {}, &info).ok()) std::abort();
  w.data_offset = info.data_offset;
  CountBounds(&w);
  return w;
}

// This thread's CPU seconds: on a shared, loaded machine the wall clock of
// a pass also counts the time other processes held the core.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void BM_DeltaEncode(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const uint64_t mib = static_cast<uint64_t>(state.range(1));
  Workload w = Make(kind, mib);
  auto out = AlignedBuffer::Allocate(w.target.size());  // pre-touched, as a staging buffer is
  auto back = AlignedBuffer::Allocate(w.target.size() + 4096);
  if (!out.ok() || !back.ok()) {
    state.SkipWithError("cannot allocate the buffers");
    return;
  }
  auto image = AlignedBuffer::Allocate(w.target.size());
  auto fused_out = AlignedBuffer::Allocate(w.target.size());
  if (!image.ok() || !fused_out.ok()) {
    state.SkipWithError("cannot allocate the buffers");
    return;
  }
  Bytes out_copy;
  delta::Encoder encoder;  // kept from run to run, as the host tier keeps it from version to version
  std::vector<double> encode_s, apply_s, memcpy_s, encode_cpu, apply_cpu, memcpy_cpu;
  std::vector<double> fused_s, fused_cpu, pass_cpu, finish_cpu, copy_hash_cpu, hash_cpu, separate_s, separate_cpu,
      separate_copy_cpu;
  delta::EncodeSummary summary;
  for (auto _ : state) {
    const double c0 = ThreadCpuSeconds();
    const double t0 = MonotonicSeconds();
    auto s = delta::Encode(w.base.data(), w.base.size(), w.target.data(), w.target.size(), out->data(),
                           out->capacity());
    const double t1 = MonotonicSeconds();
    encode_cpu.push_back(ThreadCpuSeconds() - c0);
    if (!s.ok()) {
      state.SkipWithError(s.status().ToString().c_str());
      return;
    }
    summary = *s;
    out_copy.assign(out->data(), out->data() + summary.delta_bytes);  // Encode's delta, to compare
    state.SetIterationTime(t1 - t0);
    encode_s.push_back(t1 - t0);
    if (!summary.full) {
      std::memcpy(back->data(), w.base.data(), w.base.size());
      const double c2 = ThreadCpuSeconds();
      const double t2 = MonotonicSeconds();
      auto a = delta::Apply(back->data(), w.base.size(), back->capacity(), out->data(), summary.delta_bytes);
      apply_s.push_back(MonotonicSeconds() - t2);
      apply_cpu.push_back(ThreadCpuSeconds() - c2);
      if (!a.ok() || std::memcmp(back->data(), w.target.data(), w.target.size()) != 0) {
        state.SkipWithError("the rebuilt image differs from the target");
        return;
      }
    }
    const double c3 = ThreadCpuSeconds();
    const double t3 = MonotonicSeconds();
    std::memcpy(out->data(), w.target.data(), w.target.size());  // the reference: one copy of the image
    memcpy_s.push_back(MonotonicSeconds() - t3);
    memcpy_cpu.push_back(ThreadCpuSeconds() - c3);
    benchmark::DoNotOptimize(out->data());
    // The producer's stall with the diff fused into the snapshot (the host
    // tier's delta path): the live model (the target's data section) copied
    // into the image, hashed and diffed in one pass, the header written, the
    // records written; then its parts alone: the pass without the diff
    // (copy + hash), the hash alone.
    const double c4 = ThreadCpuSeconds();
    const double t4 = MonotonicSeconds();
    if (!encoder.Start(w.base.data(), w.base.size()).ok()) {
      state.SkipWithError("the base does not parse");
      return;
    }
    const std::vector<delta::Span> model = {{w.target.data() + w.data_offset, w.target.size() - w.data_offset}};
    const uint64_t digest = delta::CopyHashAndFeed(model, image->data() + w.data_offset, &encoder);
    std::memcpy(image->data(), w.target.data(), w.data_offset);  // the header, built once the digest is known
    const double t5 = MonotonicSeconds();
    const double c5 = ThreadCpuSeconds();
    auto fused = encoder.Finish(image->data(), w.target.size(), fused_out->data(), fused_out->capacity());
    fused_s.push_back(MonotonicSeconds() - t4);
    fused_cpu.push_back(ThreadCpuSeconds() - c4);
    finish_cpu.push_back(ThreadCpuSeconds() - c5);
    pass_cpu.push_back(c5 - c4);
    (void)t5;
    if (!fused.ok() || fused->delta_bytes != summary.delta_bytes || fused->full != summary.full ||
        std::memcmp(fused_out->data(), out_copy.data(), summary.delta_bytes) != 0 ||
        digest != Xxh3_64(w.target.data() + w.data_offset, w.target.size() - w.data_offset)) {
      state.SkipWithError("the fused pass's delta or digest differs from Encode's");
      return;
    }
    // Before the fusion: the image copied and hashed a slice at a time (the
    // host tier's CopyAndHash), then diffed and encoded (Encode), two passes.
    const double c9 = ThreadCpuSeconds();
    const double t9 = MonotonicSeconds();
    {
      Xxh3Hasher hasher;
      const std::byte* from = w.target.data() + w.data_offset;
      std::byte* to = image->data() + w.data_offset;
      const uint64_t data_bytes = w.target.size() - w.data_offset;
      for (uint64_t off = 0; off < data_bytes; off += 128 * 1024) {
        const uint64_t n = std::min<uint64_t>(128 * 1024, data_bytes - off);
        std::memcpy(to + off, from + off, n);
        hasher.Update(to + off, n);
      }
      benchmark::DoNotOptimize(hasher.Digest());
    }
    separate_copy_cpu.push_back(ThreadCpuSeconds() - c9);
    auto separate = delta::Encode(w.base.data(), w.base.size(), image->data(), w.target.size(), fused_out->data(),
                                  fused_out->capacity());
    separate_s.push_back(MonotonicSeconds() - t9);
    separate_cpu.push_back(ThreadCpuSeconds() - c9);
    if (!separate.ok()) {
      state.SkipWithError(separate.status().ToString().c_str());
      return;
    }
    const double c6 = ThreadCpuSeconds();
    benchmark::DoNotOptimize(delta::CopyHashAndFeed(model, image->data() + w.data_offset, nullptr));
    const double c7 = ThreadCpuSeconds();
    benchmark::DoNotOptimize(Xxh3_64(w.target.data() + w.data_offset, w.target.size() - w.data_offset));
    const double c8 = ThreadCpuSeconds();
    copy_hash_cpu.push_back(c7 - c6);
    hash_cpu.push_back(c8 - c7);
  }
  const double moved = static_cast<double>(summary.BytesMoved());
  state.counters["MiB"] = static_cast<double>(w.target.size()) / 1048576.0;
  state.counters["changed_pct"] = 100 * w.changed_fraction;
  state.counters["full"] = summary.full ? 1 : 0;
  state.counters["moved_MiB"] = moved / 1048576.0;
  state.counters["over_values_bound"] = moved / w.values_bound;
  state.counters["over_entropy_bound"] = moved / w.entropy_bound;
  if (summary.full) state.counters["over_full"] = moved / static_cast<double>(w.target.size());
  state.counters["encode_over_memcpy"] = Median(encode_s) / Median(memcpy_s);
  if (!apply_s.empty()) state.counters["apply_over_memcpy"] = Median(apply_s) / Median(memcpy_s);
  state.counters["encode_over_memcpy_cpu"] = Median(encode_cpu) / Median(memcpy_cpu);
  // The stall with the diff fused into the snapshot, and what it is made of (CPU).
  state.counters["fused_over_memcpy"] = Median(fused_s) / Median(memcpy_s);
  state.counters["separate_over_memcpy"] = Median(separate_s) / Median(memcpy_s);
  state.counters["separate_over_memcpy_cpu"] = Median(separate_cpu) / Median(memcpy_cpu);
  state.counters["separate_copy_hash_cpu"] = Median(separate_copy_cpu) / Median(memcpy_cpu);
  state.counters["fused_over_memcpy_cpu"] = Median(fused_cpu) / Median(memcpy_cpu);
  state.counters["fused_pass_cpu"] = Median(pass_cpu) / Median(memcpy_cpu);
  state.counters["fused_records_cpu"] = Median(finish_cpu) / Median(memcpy_cpu);
  state.counters["copy_hash_cpu"] = Median(copy_hash_cpu) / Median(memcpy_cpu);
  state.counters["hash_cpu"] = Median(hash_cpu) / Median(memcpy_cpu);
  if (!apply_cpu.empty()) state.counters["apply_over_memcpy_cpu"] = Median(apply_cpu) / Median(memcpy_cpu);
  state.SetLabel(summary.BriefReport());
}

void BM_DeltaPfs(benchmark::State& state) {
  const uint64_t mib = static_cast<uint64_t>(state.range(0));
  const bool o_direct = state.range(1) != 0;
  Workload w = Make(/*kind=*/3, mib, 0.02);
  const char* env = std::getenv("VIPER_BENCH_PFS_DIR");
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(env ? env : tmp ? tmp : "/tmp") + "/viper-delta-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    state.SkipWithError("cannot create the PFS directory");
    return;
  }
  PfsStore::Options o;
  o.dir = tmpl;
  o.keep_versions = 0;
  o.o_direct = o_direct;
  PfsStore store(o);
  // O_DIRECT writes from aligned buffers.
  auto base = AlignedBuffer::Allocate(w.base.size());
  auto target = AlignedBuffer::Allocate(w.target.size());
  auto back = AlignedBuffer::Allocate(w.target.size() + 4096);
  if (!base.ok() || !target.ok() || !back.ok()) {
    state.SkipWithError("cannot allocate the buffers");
    return;
  }
  std::memcpy(base->data(), w.base.data(), w.base.size());
  std::memcpy(target->data(), w.target.data(), w.target.size());
  std::vector<double> full_s, delta_s, encode_s;
  uint64_t delta_bytes = 0;
  for (auto _ : state) {
    // Full: version 1 written and read whole (the consumer's buffer then holds it).
    const double t0 = MonotonicSeconds();
    auto wf = store.Write(1, base->data(), w.base.size());
    auto rf = wf.ok() ? store.Read(1, &*back) : StatusOr<uint64_t>(wf.status());
    const double t1 = MonotonicSeconds();
    // Delta: version 2 against version 1, read by that consumer.
    auto wd = store.WriteDelta(2, target->data(), w.target.size(), base->data(), w.base.size());
    std::vector<uint64_t> chain;
    auto rd = wd.ok() ? store.ReadFrom(2, 1, w.base.size(), &*back, &chain) : StatusOr<uint64_t>(wd.status());
    const double t2 = MonotonicSeconds();
    if (!rf.ok() || !rd.ok() || !wd->delta || chain != std::vector<uint64_t>{2} ||
        std::memcmp(back->data(), w.target.data(), w.target.size()) != 0) {
      state.SkipWithError((!rf.ok() ? rf.status().ToString()
                           : !rd.ok() ? rd.status().ToString()
                                      : "not a delta, or a different image: " + wd->delta_report)
                              .c_str());
      break;
    }
    state.SetIterationTime(t2 - t1);
    full_s.push_back(t1 - t0);
    delta_s.push_back(t2 - t1);
    encode_s.push_back(wd->encode_s);
    delta_bytes = wd->bytes;
  }
  std::system(("rm -rf " + tmpl).c_str());
  if (delta_s.empty()) return;
  state.counters["MiB"] = static_cast<double>(w.target.size()) / 1048576.0;
  state.counters["delta_MiB"] = static_cast<double>(delta_bytes) / 1048576.0;
  state.counters["full_s"] = Median(full_s);
  state.counters["delta_s"] = Median(delta_s);
  state.counters["encode_s"] = Median(encode_s);
  state.counters["delta_over_full"] = Median(delta_s) / Median(full_s);
}

}  // namespace

BENCHMARK(BM_DeltaEncode)
    ->ArgsProduct({{0, 1, 2}, {64, 600}})
    ->ArgNames({"workload", "MiB"})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeltaPfs)
    ->ArgsProduct({{64, 600}, {0, 1}})
    ->ArgNames({"MiB", "o_direct"})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
