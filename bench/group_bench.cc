// Sharded producers -> re-sharded consumers (issue 28, transports/group.h).
// Run under six ranks (4 producers, 2 consumers), alone:
//   mpirun --oversubscribe -np 6 build/bench/viper-bench --benchmark_filter=TransportsGroup
// The model (Arg 0 bytes, 8 F32 matrices of 1024 columns plus a replicated
// vector) is split by rows on the 4 producer ranks and by rows (Arg 2 = 0)
// or columns (1) on the 2 consumer ranks; by columns every consumer rank
// needs a piece of every producer rank's shard. kRounds rounds in the same
// run, each one after the other (interleaved), each with 2 warm-up versions
// and one timed version, all sync, on the host tier; the figures are the
// medians over the rounds:
//   shm:       one whole-model update of the same total bytes, Publisher on
//              rank 0 (shm protocol) -> Subscriber on rank 4: publish start
//              to the consumer's servable acknowledgement (the baseline);
//   group shm: ShardedPublisher 4 -> ShardedSubscriber 2, double buffer,
//              link shm with a ring of 2 buckets of Arg 1 bytes: publish
//              start on producer rank 0 to the consumer group's commit
//              acknowledgement (the manual time);
//   group shm1: the same with a ring of one bucket;
//   group mpi: the same over two-sided MPI;
//   bounded:   bucket_bytes = Arg 1 into the consumers' own tensors, on
//              each link.
// Counters: bytes_ratio (max over consumer ranks of bytes received / bytes
// of its slices; goal 1.00), update_over_shm (group shm / shm update
// latency; goal <= 1.2), shm1_update_over_shm, mpi_update_over_shm,
// bounded_over_shm / bounded_mpi_over_shm, extra_over_bucket (the largest
// staging a bounded consumer rank held / bucket_bytes, MPI link; goal <=
// 2; the shm link holds none), ring_over_bucket (a producer rank's ring /
// bucket), pause_s (the longest serving pause of a bounded consumer rank
// per version, shm link).
//
// BM_TransportsGroupGpuReshard (the GPU tier's goal; skipped without a CUDA
// device), under the same six ranks sharing one GPU: 4 producer ranks
// publish device-resident shards over the gpu link (CUDA IPC) to 2
// consumer ranks (re-sharded as Arg 1 says), against one whole-image CUDA
// IPC copy of the same total bytes (rank 0's device buffer mapped by rank
// 4, one cudaMemcpy device to device, timed on rank 4 from the barrier to
// the copy's end: the raw reference). kRounds interleaved rounds, medians.
// Counters: gpu_update_over_ipc_copy (goal <= 1.2), bytes_ratio,
// group_gpu_update_s, ipc_copy_s; bounded on the gpu link (into the
// consumers' device tensors): bounded_gpu_update_over_ipc_copy,
// bounded_gpu_pause_s, bounded_gpu_extra_bytes.
#include <benchmark/benchmark.h>

#include "viper/config.h"

#if VIPER_HAVE_MPI
#if VIPER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "viper/transports/device_memory.h"
#include "viper/transports/group.h"
#include "viper/transports/mpi_session.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace {

using namespace viper;              // NOLINT
using namespace viper::transports;  // NOLINT

constexpr int kProducers = 4;
constexpr int kConsumers = 2;
constexpr int kWarmUp = 2;
constexpr int kRounds = 5;

MpiSession* GroupBenchSession() {
  static std::unique_ptr<MpiSession> session = [] {
    int argc = 0;
    char** argv = nullptr;
    auto s = MpiSession::Init(&argc, &argv);
    return s.ok() ? std::move(*s) : nullptr;
  }();
  return session.get();
}

// The model; `consumer_split` (-1: the producers' layout, split by rows)
// is the dimension the consumers split the matrices along.
std::vector<TensorLayout> Tensors(uint64_t bytes, int consumer_split) {
  const int64_t cols = 1024;
  int64_t rows = static_cast<int64_t>(bytes / 8 / cols / 4);
  rows -= rows % (kProducers * kConsumers);
  std::vector<TensorLayout> t;
  for (int i = 0; i < 8; ++i) {
    t.push_back(
        {"w" + std::to_string(i), DType::kF32, {rows, cols}, consumer_split < 0 ? 0 : consumer_split});
  }
  t.push_back({"norm", DType::kF32, {cols}, consumer_split < 0 ? -1 : 0});  // replicated on the producers
  return t;
}

ModelState Allocate(const ShardLayout& l, int rank, uint32_t seed) {
  ModelState m;
  for (std::size_t t = 0; t < l.tensors().size(); ++t) {
    Tensor x = Tensor::Allocate(l.tensors()[t].name, l.tensors()[t].dtype, l.LocalShape(t, rank));
    uint32_t* p = x.As<uint32_t>();
    for (std::size_t i = 0; i < x.size_bytes / 4; ++i) p[i] = seed + static_cast<uint32_t>(i);
    (void)m.Add(std::move(x));
  }
  return m;
}

double MaxOverWorld(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// The baseline: rank 0 -> rank 4, whole model, shm, sync; ranks 1-3 and 5
// take part in the collective setup only (their subscribers stop at once).
// Returns the mean update latency over `n` versions on rank 0.
double ShmUpdateSeconds(uint64_t bytes, int n, std::string* error) {
  const int rank = GroupBenchSession()->rank();
  ModelState whole;
  for (int t = 0; t < 8; ++t) {
    Tensor x = Tensor::Allocate("w" + std::to_string(t), DType::kF32, {static_cast<int64_t>(bytes / 8 / 4)});
    (void)whole.Add(std::move(x));
  }
  double total = 0;
  if (rank == 0) {
    Publisher::Options o;
    o.mode = Mode::kSync;
    o.host_protocol = HostProtocol::kShm;
    o.subscriber_ranks = {kProducers};
    o.staging_bytes = bytes + (1 << 20);
    auto pub = Publisher::Create(o);
    if (!pub.ok()) {
      *error = pub.status().ToString();
    }
    for (int v = 0; pub.ok() && v < kWarmUp + n; ++v) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto r = (*pub)->Publish(whole, v);
      if (!r.ok() || r->consumers.empty() || !r->consumers[0].delivered) {
        *error = "shm version not delivered";
      } else if (v >= kWarmUp) {
        total += r->consumers[0].servable_s;
      }
    }
    if (pub.ok()) (void)(*pub)->Close();
  } else {
    Subscriber::Options so;
    so.preallocate_bytes = rank == kProducers ? bytes + (1 << 20) : 0;
    auto sub = Subscriber::Create(so);
    if (sub.ok() && rank != kProducers) (*sub)->Stop();
    for (int v = 0; v < kWarmUp + n; ++v) {
      MPI_Barrier(MPI_COMM_WORLD);
      if (sub.ok() && rank == kProducers) (void)(*sub)->WaitForVersion(v, 600);
    }
    if (sub.ok()) {
      if (rank == kProducers) (*sub)->WaitUntilDone(60);
      (*sub)->Stop();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return total / n;
}

struct GroupFigures {
  double update_s = 0;     // mean, rank 0 (the other ranks: 0)
  double bytes_ratio = 0;  // max over consumer ranks
  double extra_bytes = 0;  // max staging over consumer ranks
  double pause_s = 0;      // max per version over consumer ranks
  double ring_bytes = 0;   // max over producer ranks
  std::string error;
};

// 4 -> 2 groups over `link` (shm: a ring of `ring_buckets` buckets of
// `ring_bucket_bytes`); `bucket_bytes` 0: double buffer, else bounded;
// `n` timed versions.
GroupFigures GroupUpdate(uint64_t bytes, int consumer_split, uint64_t bucket_bytes, int n, GroupLink link,
                         uint64_t ring_bucket_bytes, int ring_buckets) {
  const int rank = GroupBenchSession()->rank();
  GroupFigures f;
  GroupRanks ranks{{0, 1, 2, 3}, {4, 5}};
  auto p = ShardLayout::Make(kProducers, Tensors(bytes, -1));
  auto q = ShardLayout::Make(kConsumers, Tensors(bytes, consumer_split));
  if (!p.ok() || !q.ok()) {
    f.error = (p.ok() ? q.status() : p.status()).ToString();
    return f;
  }
  double total = 0, ratio = 0, extra = 0, pause = 0, ring = 0;
  if (rank < kProducers) {
    ModelState shard = Allocate(*p, rank, 7);
    if (link == GroupLink::kGpu) {  // the gpu link's producers train on the device
      auto on_device = CopyToDevice(shard);
      if (!on_device.ok()) f.error = on_device.status().ToString();
      if (on_device.ok()) shard = std::move(*on_device);
    }
    ShardedPublisher::Options o;
    o.link = link;
    o.bucket_bytes = ring_bucket_bytes;
    o.ring_buckets = ring_buckets;
    auto pub = ShardedPublisher::Create(ranks, *p, o);
    for (int v = 0; pub.ok() && v < kWarmUp + n; ++v) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto s = (*pub)->Publish(shard, v);
      if (rank == 0 && (!s.ok() || !s->committed))
        f.error = s.ok() ? s->BriefReport() : s.status().ToString();
      if (s.ok() && v >= kWarmUp) total += s->update_s;
      if (s.ok()) ring = std::max(ring, static_cast<double>(s->ring_bytes));
      if (s.ok() && std::getenv("VIPER_BENCH_VERBOSE"))
        std::fprintf(stderr, "%s\n", s->BriefReport().c_str());
    }
    if (!pub.ok()) f.error = pub.status().ToString();
  } else {
    ModelState target;
    ShardedSubscriber::Options o;
    o.link = link;
    o.bucket_bytes = bucket_bytes;
    if (bucket_bytes > 0) target = Allocate(*q, rank - kProducers, 0);
    if (bucket_bytes > 0 && link == GroupLink::kGpu) {  // bounded on the gpu link: device targets
      auto on_device = CopyToDevice(target);
      if (!on_device.ok()) f.error = on_device.status().ToString();
      if (on_device.ok()) target = std::move(*on_device);
    }
    auto sub = ShardedSubscriber::Create(ranks, *q, o, bucket_bytes > 0 ? &target : nullptr);
    for (int v = 0; sub.ok() && v < kWarmUp + n; ++v) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto s = (*sub)->ReceiveNext(600);
      if (!s.ok() || v < kWarmUp) continue;
      ratio = std::max(ratio, static_cast<double>(s->received_bytes) / static_cast<double>(s->slice_bytes));
      extra = std::max(extra, static_cast<double>(s->staging_bytes));
      pause = std::max(pause, s->pause_s);
      if (std::getenv("VIPER_BENCH_VERBOSE")) std::fprintf(stderr, "%s\n", s->BriefReport().c_str());
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  f.update_s = total / n;
  f.bytes_ratio = MaxOverWorld(ratio);
  f.extra_bytes = MaxOverWorld(extra);
  f.pause_s = MaxOverWorld(pause);
  f.ring_bytes = MaxOverWorld(ring);
  return f;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Arg 0: model bytes; Arg 1: bucket bytes (the shm link's ring buckets and
// the bounded consumers' bucket); Arg 2: the dimension the consumers split
// the matrices along (0: rows, 4 -> 2 pieces of whole rows; 1: columns,
// every row cut in two, 2 KiB runs).
void BM_TransportsGroupReshard(benchmark::State& state) {
  MpiSession* s = GroupBenchSession();
  if (s == nullptr || s->size() != kProducers + kConsumers) {
    state.SkipWithError("run under mpirun -np 6 (4 producer and 2 consumer ranks), alone");
    return;
  }
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const uint64_t bucket = static_cast<uint64_t>(state.range(1));
  const int split = static_cast<int>(state.range(2));
  std::string error;
  // Per round: the baseline, then each group configuration (interleaved).
  std::vector<double> shm, group, group1, mpi, bounded, bounded_mpi, pause;
  double ratio = 0, bounded_ratio = 0, extra_mpi = 0, extra_shm = 0, ring = 0, double_extra = 0;
  for (int round = 0; round < kRounds; ++round) {
    shm.push_back(ShmUpdateSeconds(bytes, 1, &error));
    const GroupFigures g = GroupUpdate(bytes, split, 0, 1, GroupLink::kShm, bucket, 2);
    const GroupFigures g1 = GroupUpdate(bytes, split, 0, 1, GroupLink::kShm, bucket, 1);
    const GroupFigures m = GroupUpdate(bytes, split, 0, 1, GroupLink::kMpi, 0, 2);
    const GroupFigures b = GroupUpdate(bytes, split, bucket, 1, GroupLink::kShm, bucket, 2);
    const GroupFigures bm = GroupUpdate(bytes, split, bucket, 1, GroupLink::kMpi, 0, 2);
    group.push_back(g.update_s);
    group1.push_back(g1.update_s);
    mpi.push_back(m.update_s);
    bounded.push_back(b.update_s);
    bounded_mpi.push_back(bm.update_s);
    pause.push_back(b.pause_s);
    ratio = std::max({ratio, g.bytes_ratio, g1.bytes_ratio, m.bytes_ratio});
    bounded_ratio = std::max({bounded_ratio, b.bytes_ratio, bm.bytes_ratio});
    extra_mpi = std::max(extra_mpi, bm.extra_bytes);
    extra_shm = std::max(extra_shm, b.extra_bytes);
    ring = std::max(ring, g.ring_bytes);
    double_extra = std::max(double_extra, g.extra_bytes);
    for (const GroupFigures* f : {&g, &g1, &m, &b, &bm}) {
      if (error.empty() && !f->error.empty()) error = f->error;
    }
    if (s->rank() == 0 && std::getenv("VIPER_BENCH_VERBOSE")) {
      std::fprintf(stderr, "round %d: shm %.4f group shm %.4f shm1 %.4f mpi %.4f bounded shm %.4f mpi %.4f\n",
                   round, shm.back(), g.update_s, g1.update_s, m.update_s, b.update_s, bm.update_s);
    }
  }
  const double shm_s = Median(shm), group_s = Median(group);
  for (auto _ : state) state.SetIterationTime(group_s);
  if (s->rank() != 0) {
    state.SetLabel("rank " + std::to_string(s->rank()));
    return;
  }
  if (!error.empty()) state.SkipWithError(error.c_str());
  state.counters["shm_update_s"] = shm_s;
  state.counters["group_update_s"] = group_s;
  state.counters["group_shm1_update_s"] = Median(group1);
  state.counters["group_mpi_update_s"] = Median(mpi);
  state.counters["bounded_update_s"] = Median(bounded);
  state.counters["bounded_mpi_update_s"] = Median(bounded_mpi);
  state.counters["bytes_ratio"] = ratio;
  state.counters["bounded_bytes_ratio"] = bounded_ratio;
  state.counters["update_over_shm"] = group_s / shm_s;
  state.counters["shm1_update_over_shm"] = Median(group1) / shm_s;
  state.counters["mpi_update_over_shm"] = Median(mpi) / shm_s;
  state.counters["bounded_over_shm"] = Median(bounded) / shm_s;
  state.counters["bounded_mpi_over_shm"] = Median(bounded_mpi) / shm_s;
  state.counters["extra_over_bucket"] = extra_mpi / static_cast<double>(bucket);
  state.counters["shm_extra_over_bucket"] = extra_shm / static_cast<double>(bucket);
  state.counters["ring_over_bucket"] = ring / static_cast<double>(bucket);
  state.counters["pause_s"] = Median(pause);
  state.counters["double_buffer_extra_over_slices"] = double_extra / static_cast<double>(bytes / kConsumers);
}

#if VIPER_HAVE_CUDA
// The raw reference: rank 0 holds `bytes` of device memory, rank 4 maps it
// by CUDA IPC and copies it whole into its own, device to device; the
// other ranks wait at the barriers. The copy's seconds on rank 4 (every
// rank returns the same, via MaxOverWorld), `n` copies after one warm-up.
double IpcCopySeconds(uint64_t bytes, int n, std::string* error) {
  const int rank = GroupBenchSession()->rank();
  void* mine = nullptr;
  cudaIpcMemHandle_t handle{};
  int ok = 1;
  if (rank == 0 || rank == kProducers) ok = cudaMalloc(&mine, bytes) == cudaSuccess ? 1 : 0;
  if (rank == 0 && ok) {
    ok = cudaMemset(mine, 7, bytes) == cudaSuccess && cudaIpcGetMemHandle(&handle, mine) == cudaSuccess;
  }
  MPI_Bcast(&handle, sizeof(handle), MPI_BYTE, 0, MPI_COMM_WORLD);
  void* mapped = nullptr;
  if (rank == kProducers && ok) {
    ok = cudaIpcOpenMemHandle(&mapped, handle, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess;
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  double total = 0;
  for (int v = 0; all_ok && v < 1 + n; ++v) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != kProducers) continue;
    const double t0 = MonotonicSeconds();
    // cudaMemcpy device to device does not wait for the copy on the host
    // (CUDA runtime API, "API synchronization behavior"): wait for it here.
    cudaMemcpy(mine, mapped, bytes, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    if (v >= 1) total += MonotonicSeconds() - t0;
  }
  if (!all_ok && error->empty()) *error = "the whole-image CUDA IPC reference could not be set up";
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0 keeps its buffer until rank 4 has copied
  if (mapped) cudaIpcCloseMemHandle(mapped);
  if (mine) cudaFree(mine);
  return MaxOverWorld(total / n);
}

// Arg 0: model bytes; Arg 1: the consumers' split (as BM_TransportsGroupReshard's Arg 2).
void BM_TransportsGroupGpuReshard(benchmark::State& state) {
  MpiSession* s = GroupBenchSession();
  if (s == nullptr || s->size() != kProducers + kConsumers) {
    state.SkipWithError("run under mpirun -np 6 (4 producer and 2 consumer ranks), alone");
    return;
  }
  std::string reason;
  int has = CudaDeviceAvailable(&reason) ? 1 : 0, all = 0;
  MPI_Allreduce(&has, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    state.SkipWithError(
        ("groups' gpu link: " + (has ? std::string("a rank has no CUDA device") : reason)).c_str());
    return;
  }
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const int split = static_cast<int>(state.range(1));
  std::string error;
  std::vector<double> copy, group, bounded, pause;
  double ratio = 0, extra = 0;
  for (int round = 0; round < kRounds; ++round) {
    copy.push_back(IpcCopySeconds(bytes, 1, &error));
    const GroupFigures g = GroupUpdate(bytes, split, 0, 1, GroupLink::kGpu, 0, 2);
    // Bounded: straight into the consumers' device tensors (16 MiB digest windows).
    const GroupFigures b = GroupUpdate(bytes, split, 16 << 20, 1, GroupLink::kGpu, 0, 2);
    group.push_back(g.update_s);
    bounded.push_back(b.update_s);
    pause.push_back(b.pause_s);
    ratio = std::max({ratio, g.bytes_ratio, b.bytes_ratio});
    extra = std::max(extra, b.extra_bytes);
    if (error.empty() && !g.error.empty()) error = g.error;
    if (error.empty() && !b.error.empty()) error = b.error;
    if (s->rank() == 0 && std::getenv("VIPER_BENCH_VERBOSE")) {
      std::fprintf(stderr, "round %d: ipc copy %.5f group gpu %.5f\n", round, copy.back(), g.update_s);
    }
  }
  const double copy_s = Median(copy), group_s = Median(group);
  for (auto _ : state) state.SetIterationTime(group_s);
  if (s->rank() != 0) {
    state.SetLabel("rank " + std::to_string(s->rank()));
    return;
  }
  if (!error.empty()) state.SkipWithError(error.c_str());
  state.counters["ipc_copy_s"] = copy_s;
  state.counters["group_gpu_update_s"] = group_s;
  state.counters["gpu_update_over_ipc_copy"] = group_s / copy_s;
  state.counters["bounded_gpu_update_over_ipc_copy"] = Median(bounded) / copy_s;
  state.counters["bounded_gpu_pause_s"] = Median(pause);
  state.counters["bounded_gpu_extra_bytes"] = extra;  // no staging: 0
  state.counters["bytes_ratio"] = ratio;
}
#endif  // VIPER_HAVE_CUDA

}  // namespace

#if VIPER_HAVE_CUDA
BENCHMARK(BM_TransportsGroupGpuReshard)
    ->Args({256 << 20, 0})
    ->Args({256 << 20, 1})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
#endif

BENCHMARK(BM_TransportsGroupReshard)
    ->Args({64 << 20, 4 << 20, 0})
    ->Args({64 << 20, 4 << 20, 1})
    ->Args({256 << 20, 16 << 20, 0})
    ->Args({256 << 20, 16 << 20, 1})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

#endif  // VIPER_HAVE_MPI
