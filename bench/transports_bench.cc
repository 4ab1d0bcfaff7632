// Transfer-engine benchmarks. Run under two ranks:
//   mpirun -np 2 build/bench/viper-bench --benchmark_filter=Transports
// Rank 0 publishes, rank 1 consumes; every benchmark runs a fixed number of
// iterations on both ranks so they stay in step. Timed benchmarks use
// Google Benchmark's manual time (the time column is the measured phase per
// version, on rank 0) and its rate and average counters (GB/s over that
// time, seconds per version); each figure is reported next to its baseline
// measured in the same run, the same number of times (its median: one slow
// run of a reference on a shared machine does not decide a ratio), as a ratio:
//   host:   mpi_ratio (Viper send bandwidth / raw MPI_Send), memcpy_ratio
//   pfs:    dd_ratio (Viper O_DIRECT write/read bandwidth / dd oflag|iflag=direct)
//   update: pfs_poll_over_host (PFS + 1 s polling latency / host + push latency)
//   stall:  stall_over_memcpy, stall4_over_memcpy (async Publish stall with
//           1 and 4 snapshot threads / one memcpy), sync_over_async
//   notify: push notification p50 / p90 (microseconds)
//   delta:  delta_over_full (update latency of a 2%-changed version sent as
//           a delta / sent whole; BM_TransportsHostDelta, and written as a
//           delta file / a full one on the PFS tier, BM_TransportsPfsDelta),
//           stall_over_full
//   fanout delta: sent_over_direct (producer's bytes per version with relays
//           / sending every taker its delta; BM_TransportsFanoutDelta, under
//           mpirun -np 3 or more, alone: --benchmark_filter=FanoutDelta)
//   fanout: last_over_single (last of N consumers / one consumer alone;
//           under mpirun -np 3 or more, alone: --benchmark_filter=Fanout)
//   gpu:    copy_over_d2d (the consumer's copy of the image by CUDA IPC, or
//           through pinned host memory, / cudaMemcpy device-to-device in one
//           process), update_s, stall_over_d2d (async stall / that copy)
//   gpu delta: delta_over_full (update latency of a 2%-changed version as a
//           device-encoded delta over CUDA IPC / sent whole), stall_over_d2d
//           (sync Publish of that delta / one device cudaMemcpy of the image;
//           BM_TransportsGpuDelta)
// Samples go to $VIPER_BENCH_CSV (default transports_cost_samples.csv) as
// tier,mode,phase,bytes,seconds. PFS directory: $VIPER_BENCH_PFS_DIR (default
// $TMPDIR or /tmp). 1.7 GB cases only with VIPER_BENCH_LARGE=1.
#include <benchmark/benchmark.h>

#include "viper/config.h"

#if VIPER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#if VIPER_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "viper/transports/aligned_buffer.h"
#include "viper/transports/device_memory.h"
#include "viper/transports/mpi_session.h"
#include "viper/transports/pfs_store.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace {

using namespace viper;              // NOLINT
using namespace viper::transports;  // NOLINT

// MPI for the whole bench process: initialised on first use, finalised at exit.
MpiSession* Session() {
  static std::unique_ptr<MpiSession> session = [] {
    int argc = 0;
    char** argv = nullptr;
    auto s = MpiSession::Init(&argc, &argv);
    return s.ok() ? std::move(*s) : nullptr;
  }();
  return session.get();
}

// True when this run has a producer (rank 0) and a consumer (rank 1);
// otherwise the benchmark is skipped with the reason.
bool NeedTwoRanks(benchmark::State& state) {
  MpiSession* s = Session();
  if (s == nullptr) {
    state.SkipWithError("MPI could not be initialised with MPI_THREAD_MULTIPLE");
    return false;
  }
  if (s->size() < 2) {
    state.SkipWithError("needs a consumer rank: run under mpirun -np 2");
    return false;
  }
  return true;
}
int Rank() { return Session()->rank(); }

std::string CsvPath() {
  const char* p = std::getenv("VIPER_BENCH_CSV");
  return p ? p : "transports_cost_samples.csv";
}
// Appends samples (rank 0 only); the first call of the process truncates.
void AppendSamples(const std::vector<CostSample>& samples) {
  static bool first = true;
  if (Rank() != 0 || samples.empty()) return;
  (void)WriteCostSamplesCsv(CsvPath(), samples, /*append=*/!first);
  first = false;
}

ModelState MakeModel(uint64_t bytes, uint32_t seed) {
  ModelState m;
  const int kTensors = 8;
  for (int t = 0; t < kTensors; ++t) {
    const int64_t n = static_cast<int64_t>(bytes / kTensors / 4);
    Tensor x = Tensor::Allocate("w" + std::to_string(t), DType::kF32, {n});
    uint32_t* p = x.As<uint32_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = seed + static_cast<uint32_t>(i);
    (void)m.Add(std::move(x));
  }
  return m;
}

// Median of `times` (the baselines' figure: one slow run on a shared
// machine does not decide a ratio).
double Median(std::vector<double> times) {
  if (times.empty()) return 0;
  std::sort(times.begin(), times.end());
  const std::size_t h = times.size() / 2;
  return times.size() % 2 ? times[h] : 0.5 * (times[h - 1] + times[h]);
}

// Median seconds of `reps` memcpy of `bytes` between pre-touched buffers.
double MemcpySeconds(uint64_t bytes, int reps) {
  auto a = AlignedBuffer::Allocate(bytes);
  auto b = AlignedBuffer::Allocate(bytes);
  std::memcpy(b->data(), a->data(), bytes);  // touches both
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const double t0 = MonotonicSeconds();
    std::memcpy(b->data(), a->data(), bytes);
    benchmark::DoNotOptimize(b->data());
    times.push_back(MonotonicSeconds() - t0);
  }
  return Median(times);
}

// Raw chunked MPI_Send of `bytes` from rank 0 to 1 (pre-touched buffers),
// median of `reps` after one untimed, timed on rank 0 until rank 1 confirms receipt.
double RawMpiSeconds(uint64_t bytes, int reps) {
  auto buf = AlignedBuffer::Allocate(bytes);
  const uint64_t chunk = 64ull << 20;
  std::vector<double> times;
  for (int i = -1; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MonotonicSeconds();
    for (uint64_t off = 0; off < bytes; off += chunk) {
      const int n = static_cast<int>(std::min(chunk, bytes - off));
      if (Rank() == 0) {
        MPI_Send(buf->data() + off, n, MPI_BYTE, 1, 99, MPI_COMM_WORLD);
      } else if (Rank() == 1) {
        MPI_Recv(buf->data() + off, n, MPI_BYTE, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
    }
    if (Rank() == 0) MPI_Recv(nullptr, 0, MPI_BYTE, 1, 98, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (Rank() == 1) MPI_Send(nullptr, 0, MPI_BYTE, 0, 98, MPI_COMM_WORLD);
    if (i >= 0) times.push_back(MonotonicSeconds() - t0);
  }
  return Median(times);
}

std::vector<int> OnlyRankOne() { return {1}; }

// Arg value -> host protocol: 0 two-sided, 1 one-sided, 2 shm.
HostProtocol ProtocolArg(int64_t arg) {
  return arg == 2 ? HostProtocol::kShm : (arg == 1 ? HostProtocol::kOneSided : HostProtocol::kTwoSided);
}

// Host tier, sync: bandwidth of the transfer (until the consumer has
// acknowledged a verified copy, for shm; until the sends complete for the
// MPI protocols) vs raw MPI_Send and memcpy.
// Arg 0: model bytes; arg 1: protocol (0 two-sided, 1 one-sided, 2 shm).
void BM_TransportsHost(benchmark::State& state) {
  if (!NeedTwoRanks(state)) return;
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const HostProtocol protocol = ProtocolArg(state.range(1));
  const int reps = static_cast<int>(state.max_iterations);
  const double raw_s = RawMpiSeconds(bytes, reps);
  const double memcpy_s = MemcpySeconds(bytes, reps);
  double transfer_s = 0, update_s = 0;
  int n = 0;
  if (Rank() == 0) {
    Publisher::Options o;
    o.tier = Tier::kHost;
    o.mode = Mode::kSync;
    o.host_protocol = protocol;
    o.subscriber_ranks = OnlyRankOne();
    o.staging_bytes = bytes + (1 << 20);
    auto pub = Publisher::Create(o);
    if (!pub.ok()) {
      state.SkipWithError(pub.status().ToString().c_str());
      return;
    }
    ModelState m = MakeModel(bytes, 1);
    MPI_Barrier(MPI_COMM_WORLD);  // both sides have allocated and touched their buffers
    // Warm-up versions (both landing buffers' first use; not timed), as the
    // raw MPI baseline's first send is not.
    (void)(*pub)->Publish(m, -1);
    (void)(*pub)->Publish(m, -1);
    for (auto _ : state) {
      auto r = (*pub)->Publish(m, n);
      if (!r.ok() || r->consumers.empty() || !r->consumers[0].delivered) {
        state.SkipWithError(r.ok() ? r->BriefReport().c_str() : r.status().ToString().c_str());
        break;
      }
      if (std::getenv("VIPER_BENCH_VERBOSE")) std::fprintf(stderr, "%s\n", r->BriefReport().c_str());
      state.SetIterationTime(r->transfer_s);
      transfer_s += r->transfer_s;
      update_s += r->consumers[0].servable_s;
      ++n;
    }
    (void)(*pub)->Close();
    AppendSamples((*pub)->CostSamples());
  } else {
    Subscriber::Options o;
    o.tier = Tier::kHost;
    o.host_protocol = protocol;
    o.window_slot_bytes = bytes + (1 << 20);
    o.preallocate_bytes = bytes + (1 << 20);
    auto sub = Subscriber::Create(o);
    MPI_Barrier(MPI_COMM_WORLD);
    n = 2;  // after the two warm-up versions
    for (auto _ : state) {
      if (sub.ok()) (void)(*sub)->WaitForVersion(n++, 600);
      state.SetIterationTime(0);  // the producer's rank reports the time
    }
    if (sub.ok()) (*sub)->WaitUntilDone(60);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (Rank() == 0 && n > 0) {
    using benchmark::Counter;
    const double mean_s = transfer_s / n;  // the manual time per iteration
    state.counters["viper_GBps"] = Counter(bytes / 1e9, Counter::kIsIterationInvariantRate);
    state.counters["raw_mpi_GBps"] = bytes / raw_s / 1e9;
    state.counters["memcpy_GBps"] = bytes / memcpy_s / 1e9;
    state.counters["mpi_ratio"] = raw_s / mean_s;  // Viper's bandwidth (mean) / raw MPI's (median)
    state.counters["memcpy_ratio"] = memcpy_s / mean_s;
    state.counters["update_s"] = Counter(update_s, Counter::kAvgIterations);
    state.SetBytesProcessed(static_cast<int64_t>(bytes) * n);
  } else {
    state.SetLabel("consumer rank");
  }
}

// The next version of `m` for the delta benchmarks: 2% of its elements, at
// random positions, change bits.
// 2% of the elements of each tensor from `first_trained` on (0: all).
void ChangeTwoPercent(ModelState* m, std::mt19937_64* rng, int first_trained = 0) {
  int index = 0;
  for (Tensor& t : m->mutable_tensors()) {
    if (index++ < first_trained) continue;
    uint32_t* p = t.As<uint32_t>();
    const uint64_t n = static_cast<uint64_t>(t.NumElements());
    for (uint64_t k = 0; k < n / 50; ++k) p[(*rng)() % n] ^= 0x00400000u;
  }
}

// Collective, for the delta benchmarks. Rank 0 publishes `reps` + 2
// versions of a `bytes` model with `o` (the first whole, each next with 2%
// of its elements changed) and passes the reports of the last `reps` to
// `timed` (after a full first version and one warm delta: both landing
// buffers used once); every version must reach every consumer
// (`o.subscriber_ranks`, empty: all other ranks). The other ranks subscribe
// with `so` until the producer closes (run it with no rank left out).
// `first_trained` > 0: a frozen backbone, only the tensors from that one on
// (of MakeModel's 8) change.
Status PublishDeltaVersions(const Publisher::Options& o, const Subscriber::Options& so, uint64_t bytes,
                            int reps, const std::function<void(const Publisher::VersionReport&)>& timed,
                            bool on_device = false, int first_trained = 0) {
  const std::size_t consumers = o.subscriber_ranks.empty() ? static_cast<std::size_t>(Session()->size() - 1)
                                                           : o.subscriber_ranks.size();
  if (Rank() == 0) {
    auto pub = Publisher::Create(o);
    MPI_Barrier(MPI_COMM_WORLD);
    if (!pub.ok()) return pub.status();
    ModelState m = MakeModel(bytes, 3);
    std::mt19937_64 rng(0x9e3779b97f4a7c15ull);
    for (int v = 0; v < reps + 2; ++v) {
      if (v > 0) ChangeTwoPercent(&m, &rng, first_trained);
      // on_device: the model in device memory, copied there before the Publish (not timed).
      StatusOr<ModelState> device = on_device ? CopyToDevice(m) : StatusOr<ModelState>(ModelState());
      if (!device.ok()) return device.status();
      auto r = (*pub)->Publish(on_device ? *device : m, v);
      if (!r.ok()) return r.status();
      if (o.mode == Mode::kAsync) {
        // Async: Publish returned after the snapshot (its stall); the rest of
        // the report comes once the background send is done.
        const double stall_s = r->stall_s;
        VIPER_RETURN_IF_ERROR((*pub)->Flush());
        auto reports = (*pub)->Reports();
        if (reports.empty()) return InternalError("no report after Flush");
        *r = reports.back();
        r->stall_s = stall_s;
      }
      bool delivered = r->consumers.size() == consumers;
      for (const auto& c : r->consumers) delivered &= c.delivered;
      if (!delivered) return UnavailableError(r->BriefReport());
      if (std::getenv("VIPER_BENCH_VERBOSE")) std::fprintf(stderr, "%s\n", r->BriefReport().c_str());
      if (v >= 2) timed(*r);
    }
    return (*pub)->Close();
  }
  auto sub = Subscriber::Create(so);
  MPI_Barrier(MPI_COMM_WORLD);
  if (!sub.ok()) return sub.status();
  (void)(*sub)->WaitUntilDone(600);
  return Status::Ok();
}

// After a delta benchmark's two runs (PublishDeltaVersions: the reference,
// then the one under test): the median of `tested_s` is each iteration's
// manual time; the consumer ranks are labelled and get false; rank 0 gets
// whether both runs succeeded (else the benchmark is skipped with why).
bool FinishDeltaRuns(benchmark::State& state, const std::vector<double>& tested_s, const Status& reference,
                     const Status& tested) {
  for (auto _ : state) state.SetIterationTime(tested_s.empty() ? 0 : Median(tested_s));
  MPI_Barrier(MPI_COMM_WORLD);
  if (Rank() != 0) {
    state.SetLabel("consumer rank");
    return false;
  }
  if (!reference.ok() || !tested.ok()) {
    state.SkipWithError((reference.ok() ? tested : reference).ToString().c_str());
    return false;
  }
  return true;
}

// Delta updates on the host tier (issue 27): update latency (publish start
// -> servable at the consumer, its acknowledgement) of versions with 2% of
// their F32 elements changed, sent to a consumer that holds the previous one
// with Publisher::Options::delta (auto or on), / the same versions sent
// whole (delta off), medians over as many versions each, one run.
// Arg 0: model bytes; arg 1: protocol (0 two-sided, 2 shm); arg 2: delta
// mode (1 auto, 2 on). Counters: delta_over_full (the goal: <= 0.25 where
// the link is slower than memory, never above 1.0 on one node with auto,
// where the producer sends the full copy), delta_update_s, full_update_s,
// moved_fraction (bytes moved / image), delta_taken (versions the consumer
// got as deltas / versions), stall_over_full (the Publish stall: the
// producer's diff pass), delta_load_s and full_load_s (the consumer's
// receive + rebuild + verify of a version, as it acknowledged: for a delta,
// its back buffer brought to the served version, by a whole copy or by
// copying what the last delta changed, and the delta applied).
// What the delta benchmarks keep of each timed version (the first consumer's).
struct DeltaFigures {
  std::vector<double> update_s, stall_s, load_s;
  uint64_t moved = 0, image = 0;
  int deltas = 0;
  void Add(const Publisher::VersionReport& r) {
    update_s.push_back(r.consumers[0].servable_s);
    load_s.push_back(r.consumers[0].load_s);
    stall_s.push_back(r.stall_s);
    moved += r.consumers[0].bytes_moved;
    image += r.bytes;
    if (r.consumers[0].encoding != "full") ++deltas;
  }
  // moved_fraction, delta_taken, and the update latencies against `full`'s.
  void Report(const DeltaFigures& full, benchmark::State& state) const {
    const double f = Median(full.update_s), d = Median(update_s);
    state.counters["full_update_s"] = f;
    state.counters["delta_update_s"] = d;
    state.counters["delta_over_full"] = d / f;
    state.counters["full_load_s"] = Median(full.load_s);
    state.counters["delta_load_s"] = Median(load_s);
    state.counters["moved_fraction"] = static_cast<double>(moved) / static_cast<double>(image);
    state.counters["delta_taken"] = static_cast<double>(deltas) / static_cast<double>(update_s.size());
  }
};

// BM_TransportsHostDelta's runs; `first_trained` as PublishDeltaVersions'.
void HostDelta(benchmark::State& state, int first_trained) {
  if (!NeedTwoRanks(state)) return;
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const HostProtocol protocol = ProtocolArg(state.range(1));
  const DeltaMode mode = state.range(2) == 2 ? DeltaMode::kOn : DeltaMode::kAuto;
  const int reps = static_cast<int>(state.max_iterations);
  using Figures = DeltaFigures;
  // `reps` timed versions with `delta`, from a sync (or async) Publisher.
  auto run = [&](DeltaMode delta, Figures* f, Mode publish_mode = Mode::kSync) {
    Publisher::Options o;
    o.tier = Tier::kHost;
    o.mode = publish_mode;
    o.host_protocol = protocol;
    o.subscriber_ranks = OnlyRankOne();
    o.staging_bytes = bytes + (1 << 20);
    o.delta = delta;
    Subscriber::Options so;
    so.tier = Tier::kHost;
    so.host_protocol = protocol;
    so.preallocate_bytes = bytes + (1 << 20);
    return PublishDeltaVersions(
        o, so, bytes, reps, [&](const Publisher::VersionReport& r) { f->Add(r); }, /*on_device=*/false,
        first_trained);
  };
  Figures full, delta, async_delta;
  const Status full_st = run(DeltaMode::kOff, &full);
  const Status delta_st = run(mode, &delta);
  // The same delta versions from an async Publisher (the default mode): its
  // stall is the staging snapshot, the diff runs on the sender thread.
  const Status async_st = run(mode, &async_delta, Mode::kAsync);
  const double memcpy_s = Rank() == 0 ? MemcpySeconds(bytes, std::max(reps, 3)) : 0;
  if (!FinishDeltaRuns(state, delta.update_s, full_st, delta_st)) return;
  delta.Report(full, state);
  state.counters["stall_over_full"] = Median(delta.stall_s) / Median(full.stall_s);
  if (async_st.ok()) {
    // The goal's figure in the default mode: a delta version's stall / one memcpy.
    state.counters["async_stall_over_memcpy"] = Median(async_delta.stall_s) / memcpy_s;
    state.counters["async_delta_update_s"] = Median(async_delta.update_s);
    state.counters["async_delta_taken"] =
        static_cast<double>(async_delta.deltas) / static_cast<double>(async_delta.update_s.size());
  } else {
    state.SetLabel("async run failed: " + async_st.ToString());
  }
}

void BM_TransportsHostDelta(benchmark::State& state) { HostDelta(state, 0); }

// The same on a frozen backbone: only the top 1/8 of the model (the last of
// its 8 tensors) trained, 2% of its elements per version. The consumer
// rebuilds a delta version in its back buffer brought forward (the header
// and that tensor copied from the served image) instead of a whole copy:
// delta_load_s against full_load_s shows it.
void BM_TransportsHostDeltaFrozen(benchmark::State& state) { HostDelta(state, 7); }

std::string PfsDir() {
  const char* d = std::getenv("VIPER_BENCH_PFS_DIR");
  const char* t = std::getenv("TMPDIR");
  std::string base = d ? d : (t ? t : "/tmp");
  std::string tmpl = base + "/viper-bench-pfs-XXXXXX";
  char* made = ::mkdtemp(tmpl.data());
  return made ? made : base;
}

double RunSeconds(const std::string& cmd) {
  const double t0 = MonotonicSeconds();
  const int rc = std::system(cmd.c_str());
  return rc == 0 ? MonotonicSeconds() - t0 : -1;
}

// PFS tier: O_DIRECT write (temp, fsync, rename, dir fsync) and read vs dd
// with oflag=direct conv=fsync / iflag=direct on the same directory.
// Arg 0: bytes; arg 1: writer threads. Rank 0 only.
void BM_TransportsPfs(benchmark::State& state) {
  if (Session() != nullptr && Rank() != 0) {
    state.SkipWithError("pfs benchmark runs on rank 0 only");
    return;
  }
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  PfsStore::Options o;
  o.dir = PfsDir();
  o.o_direct = true;
  o.writer_threads = static_cast<int>(state.range(1));
  o.keep_versions = 1;
  PfsStore store(o);
  auto buf = AlignedBuffer::Allocate(bytes);
  auto back_or = AlignedBuffer::Allocate(bytes);  // pre-touched, as a consumer's landing buffer is
  AlignedBuffer back = std::move(*back_or);
  double read_s = 0;
  uint64_t v = 0;
  std::vector<CostSample> samples;
  for (auto _ : state) {
    auto w = store.Write(v, buf->data(), bytes);
    if (!w.ok()) {
      state.SkipWithError(w.status().ToString().c_str());
      break;
    }
    state.SetIterationTime(w->write_s + w->sync_s);  // the manual time: the durable write
    const double t0 = MonotonicSeconds();
    auto r = store.Read(v, &back);
    const double rs = MonotonicSeconds() - t0;
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      break;
    }
    read_s += rs;
    samples.push_back({Tier::kPfs, Mode::kSync, "transfer", bytes, w->write_s + w->sync_s});
    samples.push_back({Tier::kPfs, Mode::kSync, "load", bytes, rs});
    ++v;
  }
  const uint64_t mb = bytes >> 20;
  const std::string f = o.dir + "/dd.bin";
  const double dd_w = RunSeconds("dd if=/dev/zero of=" + f + " bs=1M count=" + std::to_string(mb) +
                                 " oflag=direct conv=fsync status=none");
  const double dd_r = RunSeconds("dd if=" + f + " of=/dev/null bs=1M iflag=direct status=none");
  std::system(("rm -rf " + o.dir).c_str());
  if (v == 0) return;
  using benchmark::Counter;
  double write_s = 0;
  for (const auto& x : samples) write_s += x.phase == "transfer" ? x.seconds : 0;
  const double wbw = bytes * v / write_s, rbw = bytes * v / read_s;
  state.counters["write_GBps"] = Counter(bytes / 1e9, Counter::kIsIterationInvariantRate);
  state.counters["read_s"] = Counter(read_s, Counter::kAvgIterations);
  state.counters["read_GBps"] = rbw / 1e9;  // one manual time per benchmark: the read's rate by hand
  state.SetBytesProcessed(static_cast<int64_t>(bytes * v));
  if (dd_w > 0) state.counters["dd_write_ratio"] = wbw / ((mb << 20) / dd_w);
  if (dd_r > 0) state.counters["dd_read_ratio"] = rbw / ((mb << 20) / dd_r);
  if (Session() != nullptr) AppendSamples(samples);
}

// Delta updates on the PFS tier (issue 27), where the link (the disk, with
// fsync) is slower than memory: update latency (publish start -> the
// consumer's acknowledgement that the version is servable, push) of versions
// with 2% of their F32 elements changed, written as delta files against the
// previous version (Publisher::Options::pfs_delta) and read, rebuilt and
// verified by a consumer that holds that version, / the same versions
// written and read whole; sync, medians over as many versions each, one run.
// Arg 0: model bytes; arg 1: O_DIRECT (0, 1). Counters: delta_over_full
// (the goal: <= 0.25), delta_update_s, full_update_s, written_fraction
// (bytes written / image), delta_taken (versions written as deltas /
// versions), stall_over_full, delta_load_s and full_load_s (the consumer's
// read + rebuild + verify, as it acknowledged: for a delta, its back buffer
// brought to the served version, by a whole copy or by copying what the
// last delta changed, and the delta file applied). `first_trained` as
// PublishDeltaVersions'.
void PfsDelta(benchmark::State& state, int first_trained) {
  if (!NeedTwoRanks(state)) return;
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const bool o_direct = state.range(1) != 0;
  const int reps = static_cast<int>(state.max_iterations);
  std::string dir;
  {
    char name[512] = {0};
    if (Rank() == 0) std::snprintf(name, sizeof(name), "%s", PfsDir().c_str());
    MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, MPI_COMM_WORLD);
    dir = name;
  }
  struct Figures {
    std::vector<double> update_s, stall_s, load_s;
    uint64_t written = 0, image = 0;
    int deltas = 0;
  };
  // `reps` timed versions into their own directory (full or delta files).
  auto run = [&](bool delta, Figures* f) {
    Publisher::Options o;
    o.tier = Tier::kPfs;
    o.mode = Mode::kSync;
    o.notify = Notify::kPush;
    o.pfs_dir = dir + (delta ? "/delta" : "/full");
    o.o_direct = o_direct;
    o.pfs_delta = delta;
    o.subscriber_ranks = OnlyRankOne();
    o.staging_bytes = bytes + (1 << 20);
    Subscriber::Options so;
    so.tier = Tier::kPfs;
    so.notify = Notify::kPush;
    so.pfs_dir = o.pfs_dir;
    so.o_direct = o_direct;
    so.preallocate_bytes = bytes + (1 << 20);
    return PublishDeltaVersions(
        o, so, bytes, reps,
        [&](const Publisher::VersionReport& r) {
          f->update_s.push_back(r.consumers[0].servable_s);
          f->load_s.push_back(r.consumers[0].load_s);
          f->stall_s.push_back(r.stall_s);
          f->written += r.written_bytes;
          f->image += r.bytes;
          if (r.written_bytes < r.bytes) ++f->deltas;
        },
        /*on_device=*/false, first_trained);
  };
  Figures full, delta;
  const Status full_st = run(false, &full);
  const Status delta_st = run(true, &delta);
  MPI_Barrier(MPI_COMM_WORLD);
  if (Rank() == 0) std::system(("rm -rf " + dir).c_str());
  if (!FinishDeltaRuns(state, delta.update_s, full_st, delta_st)) return;
  const double f = Median(full.update_s), d = Median(delta.update_s);
  state.counters["full_update_s"] = f;
  state.counters["delta_update_s"] = d;
  state.counters["delta_over_full"] = d / f;
  state.counters["full_load_s"] = Median(full.load_s);
  state.counters["delta_load_s"] = Median(delta.load_s);
  state.counters["written_fraction"] = static_cast<double>(delta.written) / static_cast<double>(delta.image);
  state.counters["delta_taken"] = static_cast<double>(delta.deltas) / static_cast<double>(delta.update_s.size());
  state.counters["stall_over_full"] = Median(delta.stall_s) / Median(full.stall_s);
}

void BM_TransportsPfsDelta(benchmark::State& state) { PfsDelta(state, 0); }

// The same on a frozen backbone: only the last of the model's 8 tensors
// trained, 2% of its elements per version. From the third version on, the
// consumer rebuilds a delta version in its back buffer brought forward (the
// header and that tensor copied from the served image) instead of a whole
// copy: delta_load_s against full_load_s shows it.
void BM_TransportsPfsDeltaFrozen(benchmark::State& state) { PfsDelta(state, 7); }

// A sync host Publisher (rank 0) and Subscriber (rank 1) that live through a
// whole benchmark, as in a long-running deployment: created, then two
// untimed warm-up versions (versions 0 and 1). Collective.
struct WarmHostPair {
  static constexpr uint64_t kWarmUpVersions = 2;
  std::unique_ptr<Publisher> pub;
  std::unique_ptr<Subscriber> sub;
  std::size_t warm_samples = 0;
  std::string error;  // why the pair is not ready on this rank

  WarmHostPair(HostProtocol protocol, uint64_t bytes, const ModelState& m) {
    if (Rank() == 0) {
      Publisher::Options o;
      o.mode = Mode::kSync;
      o.host_protocol = protocol;
      o.subscriber_ranks = OnlyRankOne();
      o.staging_bytes = bytes + (1 << 20);
      auto created = Publisher::Create(o);  // collective with rank 1's Subscriber::Create
      if (!created.ok()) {
        error = created.status().ToString();
        return;
      }
      pub = std::move(created).value();
      for (uint64_t v = 0; v < kWarmUpVersions && error.empty(); ++v) {
        auto r = pub->Publish(m, static_cast<int64_t>(v));
        if (!r.ok() || r->consumers.empty() || !r->consumers[0].delivered) {
          error = std::string(ToString(protocol)) + " warm-up version " + std::to_string(v) +
                  " was not delivered: " + (r.ok() ? r->BriefReport() : r.status().ToString());
        }
      }
      warm_samples = pub->CostSamples().size();
    } else {
      Subscriber::Options so;
      so.preallocate_bytes = bytes + (1 << 20);
      auto created = Subscriber::Create(so);
      if (!created.ok()) {
        error = created.status().ToString();
        return;
      }
      sub = std::move(created).value();
      auto warm = sub->WaitForVersion(kWarmUpVersions - 1, 600);
      if (!warm.ok()) error = warm.status().ToString();
    }
  }

  // One timed version (collective): the producer's publish start to the
  // consumer's acknowledgement that it is servable, in seconds on rank 0.
  double TimedVersion(uint64_t n, const ModelState& m) {
    const uint64_t version = kWarmUpVersions + n;
    double servable_s = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (Rank() == 0) {
      auto r = pub->Publish(m, static_cast<int64_t>(version));
      if (r.ok() && !r->consumers.empty()) servable_s = r->consumers[0].servable_s;
      if (std::getenv("VIPER_BENCH_VERBOSE") && r.ok()) std::fprintf(stderr, "%s\n", r->BriefReport().c_str());
    } else {
      (void)sub->WaitForVersion(version, 600);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return servable_s;
  }

  // Collective: the producer says goodbye; returns its timed cost samples.
  std::vector<CostSample> Close() {
    std::vector<CostSample> timed;
    if (pub) {
      (void)pub->Close();
      const std::vector<CostSample> all = pub->CostSamples();
      timed.assign(all.begin() + static_cast<std::ptrdiff_t>(warm_samples), all.end());
    }
    if (sub) {
      sub->WaitUntilDone(60);
      sub->Stop();
    }
    return timed;
  }
};

// End-to-end update latency (Publish start -> servable at the consumer):
// host tier + push, with the two-sided MPI protocol (host_push_s) and with
// the shm protocol (shm_push_s), vs PFS tier + polling every 1 s
// (pfs_poll1s_s), the same number of versions each, one after the other in
// the same run. Each host pair is warm (WarmHostPair) and publishes one
// timed version at a time (sync, so Publish returns with the consumer's
// acknowledgement that it is servable). Arg 0: bytes.
void BM_TransportsUpdateLatency(benchmark::State& state) {
  if (!NeedTwoRanks(state)) return;
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  ModelState m = MakeModel(bytes, 3);
  double host_s = 0, shm_s = 0, poll_s = 0;
  int n = 0;
  std::string dir;
  {
    char name[512] = {0};
    if (Rank() == 0) std::snprintf(name, sizeof(name), "%s", PfsDir().c_str());
    MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, MPI_COMM_WORLD);
    dir = name;
  }
  std::vector<CostSample> samples;
  // Collective: whether `pair` is ready on both ranks; if not, both skip.
  auto ready = [&](WarmHostPair& pair) {
    int ok_here = pair.error.empty() ? 1 : 0, ok_all = 0;
    MPI_Allreduce(&ok_here, &ok_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (ok_all) return true;
    state.SkipWithError(pair.error.empty() ? "a host pair failed on the other rank" : pair.error.c_str());
    (void)pair.Close();
    return false;
  };
  // One pair at a time, as a deployment runs one: the idle consumer of a
  // second pair polls MPI every 20 us on the same core.
  {
    WarmHostPair two_sided(HostProtocol::kTwoSided, bytes, m);
    if (!ready(two_sided)) return;
    for (auto _ : state) {
      const double s = two_sided.TimedVersion(static_cast<uint64_t>(n), m);
      state.SetIterationTime(s);  // the manual time: host + push, two-sided
      host_s += s;
      ++n;
    }
    const std::vector<CostSample> timed = two_sided.Close();
    samples.insert(samples.end(), timed.begin(), timed.end());
  }
  {
    WarmHostPair shm(HostProtocol::kShm, bytes, m);
    if (!ready(shm)) return;
    for (int i = 0; i < n; ++i) shm_s += shm.TimedVersion(static_cast<uint64_t>(i), m);
    const std::vector<CostSample> timed = shm.Close();
    samples.insert(samples.end(), timed.begin(), timed.end());
  }
  // The baseline, as many versions, after the host versions: interleaved
  // with them, each PFS version (a fresh Publisher and Subscriber with
  // 600 MB staging and landing buffers each, O_DIRECT I/O) made the next host
  // version 2-3x slower on the 2-core VM, which a deployment that uses one
  // path does not see.
  for (int i = 0; i < n; ++i) {
    // pfs + poll every 1 s: the consumer timestamps the swap (CLOCK_MONOTONIC, one node).
    {
      double start = 0, servable = 0;
      if (Rank() == 0) {
        Publisher::Options o;
        o.tier = Tier::kPfs;
        o.notify = Notify::kPoll;
        o.mode = Mode::kSync;
        o.pfs_dir = dir;
        o.o_direct = true;
        o.pfs_keep_versions = 1;
        o.staging_bytes = bytes + (1 << 20);
        auto pub = Publisher::Create(o);
        MPI_Barrier(MPI_COMM_WORLD);  // the consumer is polling
        start = MonotonicSeconds();
        if (pub.ok()) {
          auto r = (*pub)->Publish(m, static_cast<int64_t>(i));
          if (r.ok()) samples.push_back({Tier::kPfs, Mode::kSync, "transfer", r->bytes, r->transfer_s});
        }
        MPI_Recv(&servable, 1, MPI_DOUBLE, 1, 97, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        poll_s += servable - start;
        samples.push_back({Tier::kPfs, Mode::kSync, "update", bytes, servable - start});
        std::system(("rm -f " + dir + "/model-v*.safetensors").c_str());
      } else {
        Subscriber::Options o;
        o.tier = Tier::kPfs;
        o.notify = Notify::kPoll;
        o.pfs_dir = dir;
        o.poll_period_s = 1.0;
        o.o_direct = true;
        o.preallocate_bytes = bytes + (1 << 20);
        auto sub = Subscriber::Create(o);
        (*sub)->SetCallback([&](std::shared_ptr<const ModelVersion>) { servable = MonotonicSeconds(); });
        // Random poll phase relative to the publish, as for a real server.
        usleep(static_cast<useconds_t>((i * 370000) % 1000000));
        MPI_Barrier(MPI_COMM_WORLD);
        (void)(*sub)->WaitForVersion(0, 600);
        (*sub)->Stop();
        MPI_Send(&servable, 1, MPI_DOUBLE, 0, 97, MPI_COMM_WORLD);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (Rank() == 0) {
    std::system(("rm -rf " + dir).c_str());
    using benchmark::Counter;
    state.counters["host_push_s"] = Counter(host_s, Counter::kAvgIterations);
    state.counters["shm_push_s"] = Counter(shm_s, Counter::kAvgIterations);
    state.counters["pfs_poll1s_s"] = Counter(poll_s, Counter::kAvgIterations);
    state.counters["pfs_poll_over_host"] = poll_s / host_s;
    state.counters["pfs_poll_over_shm"] = poll_s / shm_s;
    AppendSamples(samples);
  } else {
    state.SetLabel("consumer rank");
  }
}

// Minor page faults of this process so far.
long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Median of `reps` copies of the model's own tensors, one memcpy each, into a
// pre-touched page-aligned buffer: the snapshot done with plain memcpy,
// outside the library (which streams large snapshots, staging.h).
double TensorsMemcpySeconds(const ModelState& m, int reps) {
  uint64_t bytes = 0;
  for (const Tensor& t : m.tensors()) bytes += t.size_bytes;
  auto dst = AlignedBuffer::Allocate(bytes);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const double t0 = MonotonicSeconds();
    std::byte* d = dst->data();
    for (const Tensor& t : m.tensors()) {
      std::memcpy(d, t.data, t.size_bytes);
      d += t.size_bytes;
    }
    benchmark::DoNotOptimize(dst->data());
    times.push_back(MonotonicSeconds() - t0);
  }
  return Median(times);
}

// The stalls of one Publisher (rank 0) publishing to rank 1.
struct StallRun {
  double first_s = 0;           // the untimed first publish
  std::vector<double> timed_s;  // the `reps` after it
  double faults = 0;            // minor page faults per timed publish (the whole process)
};

// Collective: a Publisher on rank 0 and a Subscriber on rank 1. One untimed
// publish, then `reps` timed ones; each background send finishes before the
// next publish, so each stall is measured alone. With `state`, the timed
// publishes are its iterations, each stall its manual time.
StallRun RunStall(Mode mode, int snapshot_threads, uint64_t bytes, const ModelState& m, int reps,
                  benchmark::State* state = nullptr) {
  StallRun run;
  MPI_Barrier(MPI_COMM_WORLD);
  if (Rank() == 0) {
    Publisher::Options o;
    o.mode = mode;
    o.snapshot_threads = snapshot_threads;
    o.subscriber_ranks = OnlyRankOne();
    o.staging_bytes = bytes + (1 << 20);  // pre-allocated, pre-touched
    auto pub = Publisher::Create(o);
    MPI_Barrier(MPI_COMM_WORLD);
    if (!pub.ok()) return run;
    long faults = 0;
    auto publish = [&](int i) {
      const long f0 = MinorFaults();
      auto r = (*pub)->Publish(m, i);
      if (i > 0) faults += MinorFaults() - f0;
      (void)(*pub)->Flush();
      if (!r.ok()) return;
      if (i == 0) {
        run.first_s = r->stall_s;
      } else {
        run.timed_s.push_back(r->stall_s);
        if (state) state->SetIterationTime(r->stall_s);
      }
    };
    publish(0);
    if (state) {
      int i = 0;
      for (auto _ : *state) publish(++i);
    } else {
      for (int i = 1; i <= reps; ++i) publish(i);
    }
    run.faults = static_cast<double>(faults) / reps;
    (void)(*pub)->Close();
    AppendSamples((*pub)->CostSamples());
  } else {
    Subscriber::Options so;
    so.preallocate_bytes = bytes + (1 << 20);
    auto sub = Subscriber::Create(so);
    MPI_Barrier(MPI_COMM_WORLD);
    if (state) {
      for (auto _ : *state) state->SetIterationTime(0);  // the producer's rank reports the time
    }
    if (sub.ok()) (*sub)->WaitUntilDone(600);
  }
  return run;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / v.size();
}

// Producer stall: async Publish (one snapshot copy, on 1 and on 4 snapshot
// threads) vs one memcpy of the model, and sync Publish (snapshot + checksum
// + transfer + ack). Arg 0: bytes. The iterations are the async publishes
// with 1 thread (manual time: their stalls); the others as many times each
// (means) and the references (measured on rank 0 while rank 1 waits; medians). Each Publisher's first publish is untimed (first_stall_s).
void BM_TransportsStall(benchmark::State& state) {
  if (!NeedTwoRanks(state)) return;
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const int reps = static_cast<int>(state.max_iterations);  // timed publishes per Publisher, reference copies
  ModelState m;
  double memcpy_s = 0, tensors_s = 0;
  if (Rank() == 0) {
    m = MakeModel(bytes, 4);
    memcpy_s = MemcpySeconds(bytes, reps);
    tensors_s = TensorsMemcpySeconds(m, reps);
  }
  const StallRun async1 = RunStall(Mode::kAsync, 1, bytes, m, reps, &state);
  const StallRun async4 = RunStall(Mode::kAsync, 4, bytes, m, reps);
  const StallRun sync = RunStall(Mode::kSync, 1, bytes, m, reps);
  if (Rank() == 0 && (async1.timed_s.size() != static_cast<std::size_t>(reps) ||
                      async4.timed_s.size() != static_cast<std::size_t>(reps) ||
                      sync.timed_s.size() != static_cast<std::size_t>(reps))) {
    state.SkipWithError("a Publisher could not be created or a publish failed");
    return;
  }
  if (Rank() == 0) {
    using benchmark::Counter;
    state.counters["async_stall_s"] = Counter(Mean(async1.timed_s) * reps, Counter::kAvgIterations);
    state.counters["async4_stall_s"] = Mean(async4.timed_s);
    state.counters["first_stall_s"] = async1.first_s;
    state.counters["sync_stall_s"] = Mean(sync.timed_s);
    state.counters["memcpy_s"] = memcpy_s;                                   // median of reps
    state.counters["tensors_memcpy_s"] = tensors_s;                          // median of reps
    state.counters["stall_over_memcpy"] = Mean(async1.timed_s) / memcpy_s;   // mean / median
    state.counters["stall4_over_memcpy"] = Mean(async4.timed_s) / memcpy_s;  // 4 snapshot threads
    state.counters["sync_over_async"] = Mean(sync.timed_s) / Mean(async1.timed_s);
    state.counters["stall_faults"] = async1.faults;  // minor page faults per timed async publish
  } else {
    state.SetLabel("consumer rank");
  }
}

// Push notification latency: producer send of the announcement -> consumer
// receipt (CLOCK_MONOTONIC, shared by the processes of one node), over many tiny versions.
void BM_TransportsNotify(benchmark::State& state) {
  if (!NeedTwoRanks(state)) return;
  std::vector<double> lat;
  if (Rank() == 0) {
    Publisher::Options o;
    o.mode = Mode::kSync;
    o.subscriber_ranks = OnlyRankOne();
    auto pub = Publisher::Create(o);
    ModelState m = MakeModel(4096, 5);
    int i = 0;
    for (auto _ : state) (void)(*pub)->Publish(m, i++);
    (void)(*pub)->Close();
    int count = 0;
    MPI_Recv(&count, 1, MPI_INT, 1, 96, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    lat.resize(count);
    MPI_Recv(lat.data(), count, MPI_DOUBLE, 1, 96, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    std::sort(lat.begin(), lat.end());
    if (!lat.empty()) {
      state.counters["notify_p50_us"] = lat[lat.size() / 2] * 1e6;
      state.counters["notify_p90_us"] = lat[lat.size() * 9 / 10] * 1e6;
      std::vector<CostSample> samples;
      for (double s : lat) samples.push_back({Tier::kHost, Mode::kSync, "notify", 0, s});
      AppendSamples(samples);
    }
  } else {
    auto sub = Subscriber::Create(Subscriber::Options());
    for (auto _ : state) {
    }
    (*sub)->WaitUntilDone(600);
    for (const auto& s : (*sub)->CostSamples()) {
      if (s.phase == "notify") lat.push_back(s.seconds);
    }
    int count = static_cast<int>(lat.size());
    MPI_Send(&count, 1, MPI_INT, 0, 96, MPI_COMM_WORLD);
    MPI_Send(lat.data(), count, MPI_DOUBLE, 0, 96, MPI_COMM_WORLD);
    state.SetLabel("consumer rank");
  }
}

#if VIPER_HAVE_CUDA
// cudaMemcpyAsync device-to-device of `bytes` within this process, best of
// `reps`: device time (CUDA events) in *event_s, and wall time from the call
// to the end of cudaStreamSynchronize (how the consumer times its copy) as
// the result; the reference for the gpu tier's copy.
double DeviceCopySeconds(uint64_t bytes, int reps, double* event_s) {
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return -1;
  cudaMemset(a, 1, bytes);
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  double best = 1e30;
  *event_s = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = MonotonicSeconds();
    cudaEventRecord(start, stream);
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream);
    cudaEventRecord(stop, stream);
    cudaStreamSynchronize(stream);
    best = std::min(best, MonotonicSeconds() - t0);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    *event_s = std::min(*event_s, ms * 1e-3);
  }
  cudaStreamDestroy(stream);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return best;
}

// Whether every rank sees a CUDA device (collective); else the benchmark is skipped with why.
bool EveryRankHasADevice(benchmark::State& state) {
  std::string reason;
  int has_device = CudaDeviceAvailable(&reason) ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &has_device, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!has_device) state.SkipWithError(("gpu tier: " + reason).c_str());
  return has_device != 0;
}
#endif

// GPU tier: a device-resident model from rank 0's GPU to rank 1's.
// Arg 0: model bytes; arg 1: 1 CUDA IPC, 0 pinned-host pipeline; arg 2: 0
// sync, 1 async. Both ranks share the one GPU of this machine.
void BM_TransportsGpu(benchmark::State& state) {
  if (!NeedTwoRanks(state)) return;
#if VIPER_HAVE_CUDA
  if (!EveryRankHasADevice(state)) return;
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const bool ipc = state.range(1) != 0;
  const Mode mode = state.range(2) ? Mode::kAsync : Mode::kSync;
  const uint64_t room = bytes + (1 << 20);
  std::vector<double> copy_s, copy_device_s;  // consumer: receive_s, copy_device_s of each timed version
  double update_s = 0, stall_s = 0, verify_s = 0;
  int n = 0;
  if (Rank() == 0) {
    double d2d_event_s = 0;
    const double d2d_s = DeviceCopySeconds(bytes, 5, &d2d_event_s);
    Publisher::Options o;
    o.tier = Tier::kGpu;
    o.mode = mode;
    o.subscriber_ranks = OnlyRankOne();
    o.staging_bytes = room;
    auto pub = Publisher::Create(o);
    auto model = CopyToDevice(MakeModel(bytes, 1));
    MPI_Barrier(MPI_COMM_WORLD);
    if (!pub.ok() || !model.ok()) {
      state.SkipWithError((pub.ok() ? model.status() : pub.status()).ToString().c_str());
      return;
    }
    (void)(*pub)->Publish(*model, -1);  // warm-up: first use of both landing buffers, IPC mapping
    (void)(*pub)->Flush();
    (void)(*pub)->Publish(*model, -1);
    (void)(*pub)->Flush();
    for (auto _ : state) {
      auto r = (*pub)->Publish(*model, n);
      if (!r.ok()) {
        state.SkipWithError(r.status().ToString().c_str());
        break;
      }
      stall_s += r->stall_s;
      (void)(*pub)->Flush();  // async: one version at a time, so each is timed alone
      ++n;
    }
    (void)(*pub)->Close();
    for (const auto& r : (*pub)->Reports()) {
      if (r.iteration >= 0 && !r.consumers.empty()) update_s += r.consumers[0].servable_s;
    }
    AppendSamples((*pub)->CostSamples());
    int count = 0;
    MPI_Recv(&count, 1, MPI_INT, 1, 95, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    copy_s.resize(count);
    MPI_Recv(copy_s.data(), count, MPI_DOUBLE, 1, 95, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    copy_device_s.resize(count);
    MPI_Recv(copy_device_s.data(), count, MPI_DOUBLE, 1, 95, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(&verify_s, 1, MPI_DOUBLE, 1, 95, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (n > 0 && !copy_s.empty()) {
      const double best_copy = *std::min_element(copy_s.begin(), copy_s.end());
      state.counters["d2d_GBps"] = bytes / d2d_s / 1e9;
      state.counters["d2d_event_GBps"] = bytes / d2d_event_s / 1e9;
      state.counters["copy_GBps"] = bytes / best_copy / 1e9;
      state.counters["copy_over_d2d"] = d2d_s / best_copy;  // bandwidth ratio, both timed on the wall clock
      const double best_device = *std::min_element(copy_device_s.begin(), copy_device_s.end());
      state.counters["copy_event_GBps"] = bytes / best_device / 1e9;
      state.counters["copy_event_over_d2d_event"] = d2d_event_s / best_device;  // both timed with CUDA events
      state.counters["update_s"] = update_s / n;
      state.counters["stall_s"] = stall_s / n;
      state.counters["verify_s"] = verify_s;
      if (mode == Mode::kAsync) state.counters["stall_over_d2d"] = (stall_s / n) / d2d_s;
      state.SetBytesProcessed(static_cast<int64_t>(bytes) * n);
    }
    state.SetLabel(ipc ? "cuda-ipc" : "pinned-host");
  } else {
    Subscriber::Options so;
    so.tier = Tier::kGpu;
    so.allow_ipc = ipc;
    so.preallocate_bytes = room;
    auto sub = Subscriber::Create(so);
    MPI_Barrier(MPI_COMM_WORLD);
    n = 2;  // after the two warm-up versions
    double verify_sum = 0;
    for (auto _ : state) {
      if (!sub.ok()) continue;
      auto v = (*sub)->WaitForVersion(n++, 600);
      if (v.ok()) {
        copy_s.push_back((*v)->receive_s);
        copy_device_s.push_back((*v)->copy_device_s);
        verify_sum += (*v)->verify_s;
      }
    }
    if (sub.ok()) (*sub)->WaitUntilDone(60);
    int count = static_cast<int>(copy_s.size());
    verify_s = count > 0 ? verify_sum / count : 0;
    MPI_Send(&count, 1, MPI_INT, 0, 95, MPI_COMM_WORLD);
    MPI_Send(copy_s.data(), count, MPI_DOUBLE, 0, 95, MPI_COMM_WORLD);
    MPI_Send(copy_device_s.data(), count, MPI_DOUBLE, 0, 95, MPI_COMM_WORLD);
    MPI_Send(&verify_s, 1, MPI_DOUBLE, 0, 95, MPI_COMM_WORLD);
    state.SetLabel("consumer rank");
  }
  MPI_Barrier(MPI_COMM_WORLD);
#else
  state.SkipWithError("gpu tier: Viper was built without CUDA");
#endif
}

// Delta updates on the gpu tier (issue 27): a device-resident model of F32
// tensors, 2% of the elements changed per version, published in sync mode
// to one consumer that copies by CUDA IPC, with delta on (the producer diffs
// and encodes on the device, the consumer applies and verifies sum64 on its
// device) and, in the same run first, delta off. Arg 0: model bytes.
// Counters: delta_over_full (update latency, delta / whole), stall_over_d2d
// and full_stall_over_d2d (the sync Publish of a delta / whole version, which
// includes the consumer's copy, apply and verify, / one device-to-device
// cudaMemcpy of the image in this process), moved_fraction, delta_taken,
// delta_load_s, full_load_s.
// Skips without a device.
void BM_TransportsGpuDelta(benchmark::State& state) {
  if (!NeedTwoRanks(state)) return;
#if VIPER_HAVE_CUDA
  if (!EveryRankHasADevice(state)) return;
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const int reps = static_cast<int>(state.max_iterations);
  auto run = [&](DeltaMode delta, DeltaFigures* f) {
    Publisher::Options o;
    o.tier = Tier::kGpu;
    o.mode = Mode::kSync;
    o.subscriber_ranks = OnlyRankOne();
    o.staging_bytes = bytes + (1 << 20);
    o.delta = delta;
    Subscriber::Options so;
    so.tier = Tier::kGpu;
    so.allow_ipc = true;
    so.preallocate_bytes = bytes + (1 << 20);
    return PublishDeltaVersions(
        o, so, bytes, reps, [&](const Publisher::VersionReport& r) { f->Add(r); }, /*on_device=*/true);
  };
  DeltaFigures full, delta;
  const Status full_st = run(DeltaMode::kOff, &full);
  const Status delta_st = run(DeltaMode::kOn, &delta);
  double d2d_event_s = 0;
  const double d2d_s = Rank() == 0 ? DeviceCopySeconds(bytes, 5, &d2d_event_s) : 0;
  if (!FinishDeltaRuns(state, delta.update_s, full_st, delta_st)) return;
  delta.Report(full, state);
  state.counters["d2d_s"] = d2d_s;
  state.counters["stall_over_d2d"] = Median(delta.stall_s) / d2d_s;
  state.counters["full_stall_over_d2d"] = Median(full.stall_s) / d2d_s;
  state.SetLabel("cuda-ipc, sync");
#else
  state.SkipWithError("gpu tier: Viper was built without CUDA");
#endif
}

// For the fan-out benchmarks: skips unless there are two consumers or more.
bool NeedTwoConsumers(benchmark::State& state) {
  if (!NeedTwoRanks(state)) return false;
  if (Session()->size() >= 3) return true;
  state.SkipWithError("needs two or more consumers: run under mpirun -np 3 (or more)");
  return false;
}

// Fan-out to every other rank (mpirun -np 3 or more, with
// --benchmark_filter=Fanout; the other benchmarks use ranks 0 and 1 only):
// update latency of the last consumer to have the version with the plan
// under test, vs that of one consumer alone, measured one after the other in
// the same run (sync publishes, 16 MB chunks for both, two untimed warm-up
// versions each). Arg 0: bytes; arg 1: 0 direct, 1 tree of arity 2, 2 chain
// (those three over the two-sided protocol), 3 shm (every consumer copies
// out of the producer's shared segment).
void BM_TransportsFanout(benchmark::State& state) {
  if (!NeedTwoConsumers(state)) return;
  const int size = Session()->size();
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const int plan = static_cast<int>(state.range(1));
  const int timed = static_cast<int>(state.max_iterations);
  double single_s = 0, last_s = 0, mean_s = 0, transfer_s = 0;
  for (int phase = 0; phase < 2; ++phase) {  // 0: rank 1 alone; 1: every other rank
    std::vector<int> ranks = OnlyRankOne();
    if (phase == 1) {
      ranks.clear();
      for (int r = 1; r < size; ++r) ranks.push_back(r);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (Rank() == 0) {
      Publisher::Options o;
      o.mode = Mode::kSync;
      o.subscriber_ranks = ranks;
      o.chunk_bytes = 16ull << 20;
      o.host_protocol = plan == 3 ? HostProtocol::kShm : HostProtocol::kTwoSided;
      o.fanout = plan == 1 || plan == 2 ? Fanout::kTree : Fanout::kDirect;
      o.tree_arity = plan == 2 ? 1 : 2;
      auto pub = Publisher::Create(o);
      if (!pub.ok()) {
        state.SkipWithError(pub.status().ToString().c_str());
        return;  // the consumers time out
      }
      ModelState m = MakeModel(bytes, 5);
      MPI_Barrier(MPI_COMM_WORLD);
      for (int i = 0; i < 2 + timed; ++i) {
        auto r = (*pub)->Publish(m, i);
        if (!r.ok() || r->consumers.size() != ranks.size()) {
          state.SkipWithError(r.ok() ? r->BriefReport().c_str() : r.status().ToString().c_str());
          break;
        }
        if (i < 2) continue;
        double last = 0, sum = 0;
        for (const auto& c : r->consumers) {
          last = std::max(last, c.servable_s);
          sum += c.servable_s;
        }
        if (phase == 0) {
          single_s += last / timed;
        } else {
          last_s += last / timed;
          mean_s += sum / r->consumers.size() / timed;
          transfer_s += r->transfer_s / timed;
        }
      }
      (void)(*pub)->Close();
    } else if (std::find(ranks.begin(), ranks.end(), Rank()) != ranks.end()) {
      Subscriber::Options so;
      so.preallocate_bytes = bytes + (1 << 20);
      auto sub = Subscriber::Create(so);
      MPI_Barrier(MPI_COMM_WORLD);
      if (sub.ok()) (*sub)->WaitUntilDone(600);
    } else {
      MPI_Comm dup;  // Subscriber::Create is collective over MPI_COMM_WORLD
      MPI_Comm_dup(MPI_COMM_WORLD, &dup);
      uint64_t session = 0;
      MPI_Bcast(&session, 1, MPI_UINT64_T, 0, dup);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  int n = 0;
  for (auto _ : state) ++n;  // the timed work is above; keeps the iteration count
  if (Rank() == 0) {
    state.counters["consumers"] = size - 1;
    state.counters["single_s"] = single_s;
    state.counters["last_s"] = last_s;
    state.counters["mean_s"] = mean_s;
    state.counters["producer_send_s"] = transfer_s;
    state.counters["last_over_single"] = last_s / single_s;
  } else {
    state.SetLabel("consumer rank");
  }
}

// Fan-out relays forwarding deltas (issue 27 item 3; mpirun -np 3 or more,
// with --benchmark_filter=FanoutDelta): every other rank holds the previous
// version and takes a delta (delta on, two-sided, versions with 2% of their
// elements changed). The producer's bytes sent per version
// (VersionReport::sent_bytes) and the last consumer's update latency with a
// tree of arity 2 (relays forward the delta) vs the producer sending every
// taker its own (fanout direct), one after the other in the same run, medians
// over the timed versions (after a full first version and one warm delta;
// the time column: the relayed run's last-consumer latency). Arg 0: bytes.
// Counters: sent_over_direct (the goal: 2 / consumers, one delta per child
// of the root), last_over_direct, direct_sent_MB, relayed_sent_MB,
// delta_MB, direct_last_s, relayed_last_s, delta_taken (consumer-versions
// moved as deltas / all, both runs).
void BM_TransportsFanoutDelta(benchmark::State& state) {
  if (!NeedTwoConsumers(state)) return;
  const int size = Session()->size();
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const int reps = static_cast<int>(state.max_iterations);
  struct Figures {
    std::vector<double> sent_bytes, last_s, delta_bytes;
    int deltas = 0, taken = 0;
  };
  auto run = [&](Fanout fanout, Figures* f) {
    Publisher::Options o;
    o.mode = Mode::kSync;
    o.host_protocol = HostProtocol::kTwoSided;
    o.delta = DeltaMode::kOn;
    o.fanout = fanout;
    o.tree_arity = 2;
    o.staging_bytes = bytes + (1 << 20);
    Subscriber::Options so;
    so.preallocate_bytes = bytes + (1 << 20);
    return PublishDeltaVersions(o, so, bytes, reps, [&](const Publisher::VersionReport& r) {
      double last = 0;
      for (const auto& c : r.consumers) {
        last = std::max(last, c.servable_s);
        ++f->taken;
        if (c.encoding != "full") ++f->deltas;
      }
      f->sent_bytes.push_back(static_cast<double>(r.sent_bytes));
      f->delta_bytes.push_back(static_cast<double>(r.written_bytes));
      f->last_s.push_back(last);
    });
  };
  Figures direct, relayed;
  const Status direct_st = run(Fanout::kDirect, &direct);
  const Status relayed_st = run(Fanout::kTree, &relayed);
  // The time column: the relayed run's median latency of the last consumer.
  if (!FinishDeltaRuns(state, relayed.last_s, direct_st, relayed_st)) return;
  constexpr double kMBytes = 1e6;
  state.counters["consumers"] = size - 1;
  state.counters["delta_MB"] = Median(relayed.delta_bytes) / kMBytes;
  state.counters["direct_sent_MB"] = Median(direct.sent_bytes) / kMBytes;
  state.counters["relayed_sent_MB"] = Median(relayed.sent_bytes) / kMBytes;
  state.counters["sent_over_direct"] = Median(relayed.sent_bytes) / Median(direct.sent_bytes);
  state.counters["direct_last_s"] = Median(direct.last_s);
  state.counters["relayed_last_s"] = Median(relayed.last_s);
  state.counters["last_over_direct"] = Median(relayed.last_s) / Median(direct.last_s);
  state.counters["delta_taken"] =
      static_cast<double>(direct.deltas + relayed.deltas) / static_cast<double>(direct.taken + relayed.taken);
}

constexpr int64_t kMB = 1000 * 1000;
void Sizes(benchmark::internal::Benchmark* b, int64_t extra_arg = -1) {
  std::vector<int64_t> sizes = {64 * kMB, 600 * kMB};
  if (std::getenv("VIPER_BENCH_LARGE")) sizes.push_back(1700 * kMB);
  for (int64_t s : sizes) {
    if (extra_arg < 0) {
      b->Arg(s);
    } else {
      b->Args({s, extra_arg});
    }
  }
}

BENCHMARK(BM_TransportsHost)
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int64_t protocol : {0, 1, 2}) Sizes(b, protocol);
    })
    ->ArgNames({"bytes", "protocol"})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsHostDelta)
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int64_t s : {64 * kMB, 600 * kMB}) {
        b->Args({s, 0, 1});  // two-sided, auto: one node, the producer picks full
        b->Args({s, 0, 2});  // two-sided, on: deltas (run with --mca btl tcp,self for a TCP link)
        b->Args({s, 2, 1});  // shm, auto: the producer picks full
        b->Args({s, 2, 2});  // shm, on: deltas over MPI within the node
      }
    })
    ->ArgNames({"bytes", "protocol", "delta"})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsPfsDelta)
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int64_t s : {64 * kMB, 600 * kMB}) {
        b->Args({s, 1});  // O_DIRECT, as the PFS tier is deployed
        b->Args({s, 0});  // through the page cache
      }
    })
    ->ArgNames({"bytes", "o_direct"})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsPfsDeltaFrozen)
    ->Apply([](benchmark::internal::Benchmark* b) {
      b->Args({600 * kMB, 1});  // O_DIRECT
      b->Args({600 * kMB, 0});  // page cache
    })
    ->ArgNames({"bytes", "o_direct"})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsPfs)
    ->Apply([](benchmark::internal::Benchmark* b) {
      Sizes(b, 1);
      Sizes(b, 2);
    })
    ->ArgNames({"bytes", "writers"})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsUpdateLatency)
    ->Apply([](benchmark::internal::Benchmark* b) { Sizes(b); })
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsStall)
    ->Apply([](benchmark::internal::Benchmark* b) { Sizes(b); })
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsNotify)->Iterations(300)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransportsFanout)
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int64_t plan : {0, 1, 2, 3}) Sizes(b, plan);
    })
    ->ArgNames({"bytes", "plan"})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsFanoutDelta)
    ->Apply([](benchmark::internal::Benchmark* b) { Sizes(b); })
    ->ArgNames({"bytes"})
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsHostDeltaFrozen)
    ->Apply([](benchmark::internal::Benchmark* b) {
      b->Args({600 * kMB, 0, 2});  // two-sided, on (run with --mca btl tcp,self for a TCP link)
      b->Args({600 * kMB, 2, 2});  // shm, on
    })
    ->ArgNames({"bytes", "protocol", "delta"})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsGpuDelta)
    ->Arg(64 * kMB)
    ->Arg(600 * kMB)
    ->ArgNames({"bytes"})
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransportsGpu)
    ->Apply([](benchmark::internal::Benchmark* b) {
      std::vector<int64_t> sizes = {64 * kMB, 600 * kMB, 1700 * kMB};
      if (std::getenv("VIPER_BENCH_LARGE")) sizes.push_back(4700 * kMB);
      for (int64_t ipc : {1, 0}) {
        for (int64_t async : {0, 1}) {
          for (int64_t s : sizes) b->Args({s, ipc, async});
        }
      }
    })
    ->ArgNames({"bytes", "ipc", "async"})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace

#else  // !VIPER_HAVE_MPI

namespace {
void BM_TransportsHost(benchmark::State& state) {
  state.SkipWithError("Viper was built without MPI: the transport benchmarks need two MPI ranks");
}
BENCHMARK(BM_TransportsHost);
}  // namespace

#endif
