// The sharded groups' gpu link, both halves (group_gpu.h; CUDA and MPI
// builds, group_gpu_stub.cc otherwise). A producer rank's staging buffer
// and its interprocess event are exported once, at Create; consumer ranks
// map the ones they need for the life of the group.
#include "group_gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "cuda_ipc.h"
#include "device_buffer.h"
#include "device_checksum.h"
#include "group_gpu_sum.h"
#include "group_shm.h"  // ReleaseMsg, kGroupTagRelease (the shm link's "slot copied out")
#include "viper/core/checksum.h"
#include "viper/transports/device_memory.h"

namespace viper {
namespace transports {
namespace internal {

namespace {

// sum64's last step (device_checksum.h) on a piece's unfinished sum.
uint64_t Finish(unsigned long long sum, uint64_t bytes) { return Sum64Mix(sum + bytes * kSum64K2); }

}  // namespace

struct GpuLink {
  bool producer = false;
  int device = 0;
  cudaStream_t stream = nullptr;
  DeviceBuffer scratch;  // 8 bytes: the shard checksum
  // Producer: its staging buffer (the shard image) and ready event.
  DeviceBuffer staging;
  cudaEvent_t event = nullptr;
  // Consumer: every producer rank's staging buffer mapped (null where the
  // plan takes nothing from it) and event; its batched copies (dst: an
  // offset in the back buffer, or bounded an absolute address in the
  // target); the back buffers (one not held by a served version is reused).
  std::vector<void*> mapped;
  std::vector<cudaEvent_t> events;
  std::vector<std::vector<Copy2D>> copies;
  std::vector<std::shared_ptr<DeviceBuffer>> pool;
  // Bounded consumer: the target (the caller's device tensors) and the
  // lowest address among them, which the pieces' run offsets start from.
  const ModelState* target = nullptr;
  const std::byte* target_base = nullptr;
  // The pieces this rank hashes (producer: [consumer][window]; consumer:
  // [producer][window]), flattened: first_piece[x] is x's first, the runs
  // on the device, each piece's length on the host.
  std::vector<int> first_piece;
  std::vector<uint64_t> piece_bytes;
  uint64_t max_piece_bytes = 0;
  DeviceBuffer runs, first, sums;
  std::vector<unsigned long long> sums_host;

  ~GpuLink() {
    if (device >= 0) cudaSetDevice(device);
    for (void* m : mapped) {
      if (m) cudaIpcCloseMemHandle(m);
    }
    for (cudaEvent_t e : events) {
      if (e) cudaEventDestroy(e);
    }
    if (event) cudaEventDestroy(event);
    if (stream) cudaStreamDestroy(stream);
  }
};

void GpuLinkDeleter::operator()(GpuLink* link) const { delete link; }

namespace {

// The pieces' runs: for each x of `count` (consumer ranks on a producer,
// producer ranks on a consumer), each window of `window` bytes of the
// consumer's image, the plan's copies clipped to it, at their offset on
// this side; uploaded once.
Status BuildPieces(const GroupSetup& g, GpuLink* l) {
  const uint64_t W = g.window_bytes;
  std::vector<DeviceRun> runs;
  std::vector<unsigned int> first;
  const int count = l->producer ? g.q_layout.ranks() : g.p_layout.ranks();
  for (int x = 0; x < count; ++x) {
    const int p = l->producer ? g.rank : x, c = l->producer ? x : g.rank;
    l->first_piece.push_back(static_cast<int>(l->piece_bytes.size()));
    for (uint64_t k = 0; k < Windows(g.q_layout.ShardBytes(c), W); ++k) {
      first.push_back(static_cast<unsigned int>(runs.size()));
      uint64_t at = 0;
      for (const ByteCopy& b : Clip(g.plan.Copies(p, c), k * W, (k + 1) * W)) {
        if (l->target == nullptr) {
          runs.push_back({l->producer ? b.src_offset : b.dst_offset, at, b.bytes});
          at += b.bytes;
          continue;
        }
        // Bounded: where the bytes lie in the target's tensors (a run that
        // crosses a tensor boundary in the image is two runs there).
        std::vector<Block> in_target;
        AppendBlocks(*l->target, g.q_layout, g.rank, b.dst_offset, b.bytes, &in_target);
        for (const Block& x : in_target) {
          runs.push_back({static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(x.data) -
                                                          reinterpret_cast<uintptr_t>(l->target_base)),
                          at, x.bytes});
          at += x.bytes;
        }
      }
      l->piece_bytes.push_back(at);
      l->max_piece_bytes = std::max(l->max_piece_bytes, at);
    }
  }
  l->first_piece.push_back(static_cast<int>(l->piece_bytes.size()));
  first.push_back(static_cast<unsigned int>(runs.size()));
  if (l->piece_bytes.size() > 65535) {
    return InvalidArgumentError(
        "link gpu: " + std::to_string(l->piece_bytes.size()) +
        " pieces on one rank (at most 65535: raise ShardedSubscriber::Options::chunk_bytes, or "
        "bucket_bytes in bounded mode)");
  }
  VIPER_ASSIGN_OR_RETURN(l->runs,
                         DeviceBuffer::Allocate(std::max<uint64_t>(8, runs.size() * sizeof(DeviceRun))));
  VIPER_ASSIGN_OR_RETURN(l->first, DeviceBuffer::Allocate(first.size() * sizeof(unsigned int)));
  VIPER_ASSIGN_OR_RETURN(
      l->sums, DeviceBuffer::Allocate(std::max<uint64_t>(8, l->piece_bytes.size() * sizeof(uint64_t))));
  if (!runs.empty()) {
    VIPER_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(l->runs.data(), runs.data(), runs.size() * sizeof(DeviceRun), cudaMemcpyHostToDevice));
  }
  VIPER_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(l->first.data(), first.data(), first.size() * sizeof(unsigned int), cudaMemcpyHostToDevice));
  l->sums_host.resize(l->piece_bytes.size());
  return Status::Ok();
}

// Every piece's unfinished sum64 over `base`, into l->sums_host (waits).
Status SumPieces(GpuLink* l, const std::byte* base) {
  const int pieces = static_cast<int>(l->piece_bytes.size());
  if (pieces == 0) return Status::Ok();
  VIPER_RETURN_IF_ERROR(Sum64PiecesAsync(base, reinterpret_cast<const DeviceRun*>(l->runs.data()),
                                         reinterpret_cast<const unsigned int*>(l->first.data()), pieces,
                                         l->max_piece_bytes,
                                         reinterpret_cast<unsigned long long*>(l->sums.data()), l->stream));
  VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(l->sums_host.data(), l->sums.data(),
                                             l->sums_host.size() * sizeof(unsigned long long),
                                             cudaMemcpyDeviceToHost, l->stream));
  VIPER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(l->stream));
  return Status::Ok();
}

// This rank's half of MakeGpuLink before the handles travel: the device,
// the stream, and (producer) the staging buffer and event, exported into
// `handles` (memory then event handle).
Status OpenLocal(const GroupSetup& g, GpuLink* l, int device, char* handles) {
  std::string reason;
  if (!CudaDeviceAvailable(&reason)) return UnavailableError(reason);
  int n = 0;
  VIPER_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&n));
  if (device >= n) {
    return InvalidArgumentError("gpu_device " + std::to_string(device) + " but " + std::to_string(n) +
                                " CUDA device(s) visible");
  }
  VIPER_RETURN_IF_ERROR(OpenGpuStream(device, &l->stream));
  l->device = device;
  VIPER_ASSIGN_OR_RETURN(l->scratch, DeviceBuffer::Allocate(8));
  if (!l->producer) return Status::Ok();
  VIPER_ASSIGN_OR_RETURN(l->staging,
                         DeviceBuffer::Allocate(std::max<uint64_t>(8, g.p_layout.ShardBytes(g.rank))));
  VIPER_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&l->event, cudaEventDisableTiming | cudaEventInterprocess));
  return ExportIpc(l->staging.data(), l->event, handles, handles + kIpcHandleBytes);
}

// Consumer: maps the staging buffer and opens the event of every producer
// rank the plan takes bytes from.
Status OpenPeers(const GroupSetup& g, GpuLink* l, const std::vector<char>& all_handles, int handle_bytes) {
  const int P = g.p_layout.ranks();
  l->mapped.assign(P, nullptr);
  l->events.assign(P, nullptr);
  l->copies.resize(P);
  for (int p = 0; p < P; ++p) {
    if (g.plan.Bytes(p, g.rank) == 0) continue;
    const char* h = all_handles.data() + static_cast<std::size_t>(g.producers[p]) * handle_bytes;
    const Status opened = OpenIpc(h, h + kIpcHandleBytes, &l->mapped[p], &l->events[p]);
    if (!opened.ok()) {
      return Status(opened.code(),
                    "producer rank " + std::to_string(p) + "'s staging buffer: " + opened.message());
    }
    l->copies[p] = l->target ? BatchCopiesInto(g.plan.Copies(p, g.rank), *l->target, g.q_layout, g.rank)
                             : BatchCopies(g.plan.Copies(p, g.rank));
  }
  return Status::Ok();
}

// Bounded consumer: every target tensor with bytes is device memory on
// `device` (CheckGpuTarget has checked what the host knows); sets the base
// the pieces' runs are offsets from.
Status CheckTargetOnDevice(GpuLink* l, int device) {
  for (const Tensor& t : l->target->tensors()) {
    if (t.size_bytes == 0) continue;
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, t.data);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it
      return InvalidArgumentError("target tensor '" + t.name +
                                  "': cudaPointerGetAttributes: " + cudaGetErrorString(e));
    }
    if (a.type != cudaMemoryTypeDevice || a.device != device) {
      const std::string is = a.type == cudaMemoryTypeDevice
                                 ? "device memory on CUDA device " + std::to_string(a.device)
                             : a.type == cudaMemoryTypeManaged ? "managed memory"
                             : a.type == cudaMemoryTypeHost    ? "pinned host memory"
                                                               : "host memory";
      return InvalidArgumentError("bounded mode on the gpu link receives into device memory on gpu_device " +
                                  std::to_string(device) + ": target tensor '" + t.name + "' is " + is);
    }
    if (l->target_base == nullptr ||
        reinterpret_cast<uintptr_t>(t.data) < reinterpret_cast<uintptr_t>(l->target_base)) {
      l->target_base = t.data;
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<GpuLinkPtr> MakeGpuLink(const GroupSetup& g, bool producer, int device, const ModelState* target,
                                 const Status& precheck, const char* option) {
  // Set first: ~GpuLink skips cudaSetDevice while device < 0 (nothing opened).
  GpuLinkPtr l(new GpuLink);
  l->producer = producer;
  l->device = -1;
  l->target = producer ? nullptr : target;
  int on_node = 0, everyone = 0;
  VIPER_RETURN_IF_ERROR(NodeCount(g, &on_node, &everyone));
  if (on_node != everyone) {
    return FailedPreconditionError(std::string("sharded groups: ") + option +
                                   " = gpu needs every rank of both groups on one node (CUDA IPC); " +
                                   std::to_string(on_node) + " of " + std::to_string(everyone) +
                                   " are on this rank's");
  }
  constexpr int kHandleBytes = 2 * kIpcHandleBytes;  // memory, then event
  std::vector<char> mine(kHandleBytes, 0);
  // A rank's objection first (it names the option to change), then the devices.
  Status agreed = Agree(g, producer, precheck);
  if (agreed.ok()) {
    Status local = OpenLocal(g, l.get(), device, mine.data());
    if (local.ok() && l->target) local = CheckTargetOnDevice(l.get(), device);
    agreed = Agree(g, producer, local);
  }
  if (!agreed.ok()) {
    return Status(agreed.code(), std::string("sharded groups: ") + option + " = gpu: " + agreed.message());
  }
  int everyone_all = 0;
  MPI_Comm_size(g.all, &everyone_all);
  std::vector<char> all(static_cast<std::size_t>(everyone_all) * kHandleBytes);
  if (MPI_Allgather(mine.data(), kHandleBytes, MPI_BYTE, all.data(), kHandleBytes, MPI_BYTE, g.all) !=
      MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Allgather of the CUDA IPC handles failed");
  }
  Status local = producer ? Status::Ok() : OpenPeers(g, l.get(), all, kHandleBytes);
  if (local.ok()) local = BuildPieces(g, l.get());
  agreed = Agree(g, producer, local);
  if (!agreed.ok()) {
    return Status(agreed.code(), std::string("sharded groups: ") + option + " = gpu: " + agreed.message());
  }
  return l;
}

StatusOr<GpuStaged> GpuStage(const GroupSetup& g, GpuLink* l, const ModelState& shard, bool corrupt) {
  VIPER_CUDA_RETURN_IF_ERROR(cudaSetDevice(l->device));
  std::byte* staging = l->staging.data();
  for (std::size_t t = 0; t < shard.size(); ++t) {
    const Tensor& x = shard.tensors()[t];
    if (x.size_bytes == 0) continue;
    // Host or device sources alike (unified addressing), as the gpu tier's producer.
    VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging + g.p_layout.LocalOffset(t, g.rank), x.data,
                                               x.size_bytes, cudaMemcpyDefault, l->stream));
  }
  VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(l->event, l->stream));
  GpuStaged out;
  VIPER_ASSIGN_OR_RETURN(out.shard_checksum,
                         Sum64Device(staging, g.p_layout.ShardBytes(g.rank), l->scratch.data(), l->stream));
  VIPER_RETURN_IF_ERROR(SumPieces(l, staging));
  const int Q = g.q_layout.ranks();
  out.digests.resize(Q);
  uint64_t first_taken = UINT64_MAX;  // the first byte any consumer takes (corrupt)
  for (int c = 0; c < Q; ++c) {
    for (int i = l->first_piece[c]; i < l->first_piece[c + 1]; ++i) {
      const uint64_t n = l->piece_bytes[i];
      out.digests[c].push_back(n == 0 ? 0 : Finish(l->sums_host[i], n));
    }
    if (!g.plan.Copies(g.rank, c).empty())
      first_taken = std::min(first_taken, g.plan.Copies(g.rank, c)[0].src_offset);
  }
  if (corrupt && first_taken != UINT64_MAX) {
    unsigned char b = 0;
    VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpy(&b, staging + first_taken, 1, cudaMemcpyDeviceToHost));
    b ^= 0xFF;
    VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpy(staging + first_taken, &b, 1, cudaMemcpyHostToDevice));
  }
  return out;
}

bool GpuAwaitReleases(const GroupSetup& g, uint64_t version, double deadline_s, std::string* message) {
  for (int c = 0; c < g.q_layout.ranks(); ++c) {
    if (g.plan.Bytes(g.rank, c) == 0) continue;
    ReleaseMsg m;
    if (!WaitPod<ReleaseMsg>(g.all, g.consumers[c], kGroupTagRelease, deadline_s, &m,
                             [version](const ReleaseMsg& r) { return r.version == version; })) {
      *message = "consumer rank " + std::to_string(c) + " did not release the staging buffer of version " +
                 std::to_string(version) + " in time";
      return false;
    }
  }
  return true;
}

namespace {

// A consumer's version once its destination is chosen: every producer's
// runs (each after its event) to `dst` + each copy's dst (the back buffer;
// 0 in bounded mode, where dst is an absolute address), `first_copy` (if
// any) before the first is queued; then the producers are released, and
// every piece is hashed where it landed (`sum_base` + its runs' offsets)
// and checked against the headers.
bool CopyAndVerify(const GroupSetup& g, GpuLink* l, uint64_t version,
                   const std::vector<std::vector<uint64_t>>& headers, double deadline_s, uintptr_t dst,
                   const std::byte* sum_base, const std::function<void()>& first_copy,
                   uint64_t* received_bytes, std::string* message) {
  auto fail = [&](const Status& s) {
    *message = "version " + std::to_string(version) + ": " + s.message();
    return false;
  };
  Status copied;
  bool started = false;
  const int P = g.p_layout.ranks();
  for (int p = 0; p < P && copied.ok(); ++p) {
    if (!l->mapped[p]) continue;
    cudaError_t e = cudaStreamWaitEvent(l->stream, l->events[p], 0);
    if (e != cudaSuccess) copied = CudaStatus("cudaStreamWaitEvent", e);
    const auto* src = static_cast<const std::byte*>(l->mapped[p]);
    for (const Copy2D& c : l->copies[p]) {
      if (!copied.ok()) break;
      if (!started && first_copy) first_copy();
      started = true;
      void* to = reinterpret_cast<void*>(dst + c.dst);
      e = c.height == 1 ? cudaMemcpyAsync(to, src + c.src, c.width, cudaMemcpyDeviceToDevice, l->stream)
                        : cudaMemcpy2DAsync(to, c.dpitch, src + c.src, c.spitch, c.width, c.height,
                                            cudaMemcpyDeviceToDevice, l->stream);
      if (e != cudaSuccess) copied = CudaStatus(c.height == 1 ? "cudaMemcpyAsync" : "cudaMemcpy2DAsync", e);
    }
  }
  if (copied.ok()) {
    const cudaError_t e = cudaStreamSynchronize(l->stream);
    if (e != cudaSuccess) copied = CudaStatus("cudaStreamSynchronize", e);
  }
  // The producers may reuse their staging buffers now (also after a
  // failure: this rank reads nothing more of this version from them).
  ReleaseMsg release;
  release.version = version;
  for (int p = 0; p < P; ++p) {
    if (!l->mapped[p]) continue;
    (void)SendPod(g.all, g.producers[p], kGroupTagRelease, release,
                  std::max(0.1, deadline_s - MonotonicSeconds()));
  }
  if (!copied.ok()) return fail(copied);
  for (int p = 0; p < P; ++p) {
    if (l->mapped[p]) *received_bytes += g.plan.Bytes(p, g.rank);
  }
  const Status summed = SumPieces(l, sum_base);
  if (!summed.ok()) return fail(summed);
  for (int p = 0; p < P; ++p) {
    for (int i = l->first_piece[p]; i < l->first_piece[p + 1]; ++i) {
      const uint64_t n = l->piece_bytes[i];
      if (n == 0) continue;
      const uint64_t k = static_cast<uint64_t>(i - l->first_piece[p]);
      const uint64_t got = Finish(l->sums_host[i], n), want = headers[p][kHeaderFields + k];
      if (got != want) {
        *message = "version " + std::to_string(version) + ": producer rank " + std::to_string(p) +
                   "'s piece of window " + std::to_string(k) + " (" + std::to_string(n) +
                   " bytes) does not match its digest in device memory (sum64 " + ChecksumToHex(got) +
                   ", the producer's " + ChecksumToHex(want) + ")";
        return false;
      }
    }
  }
  return true;
}

}  // namespace

bool GpuReceive(const GroupSetup& g, GpuLink* l, uint64_t version,
                const std::vector<std::vector<uint64_t>>& headers, double deadline_s, GpuLanded* landed,
                uint64_t* received_bytes, std::string* message) {
  if (cudaSetDevice(l->device) != cudaSuccess) {
    *message = "version " + std::to_string(version) + ": cudaSetDevice failed";
    return false;
  }
  const uint64_t bytes = std::max<uint64_t>(8, g.q_layout.ShardBytes(g.rank));
  std::shared_ptr<DeviceBuffer> buffer;
  for (auto& b : l->pool) {
    if (b.use_count() == 1 && b->capacity() >= bytes) buffer = b;
  }
  if (!buffer) {
    l->pool.erase(
        std::remove_if(l->pool.begin(), l->pool.end(), [](const auto& b) { return b.use_count() == 1; }),
        l->pool.end());
    auto fresh = DeviceBuffer::Allocate(bytes);
    if (!fresh.ok()) {
      *message = "version " + std::to_string(version) + ": " + fresh.status().message();
      return false;
    }
    buffer = std::make_shared<DeviceBuffer>(std::move(*fresh));
    l->pool.push_back(buffer);
  }
  if (!CopyAndVerify(g, l, version, headers, deadline_s, reinterpret_cast<uintptr_t>(buffer->data()),
                     buffer->data(), nullptr, received_bytes, message)) {
    return false;
  }
  landed->data = buffer->data();
  landed->capacity = buffer->capacity();
  landed->owner = std::move(buffer);
  return true;
}

bool GpuReceiveInto(const GroupSetup& g, GpuLink* l, uint64_t version,
                    const std::vector<std::vector<uint64_t>>& headers, double deadline_s,
                    const std::function<void()>& first_copy, uint64_t* received_bytes, std::string* message) {
  if (l->target == nullptr) {
    *message = "version " + std::to_string(version) + ": the gpu link was made without a target";
    return false;
  }
  if (cudaSetDevice(l->device) != cudaSuccess) {
    *message = "version " + std::to_string(version) + ": cudaSetDevice failed";
    return false;
  }
  return CopyAndVerify(g, l, version, headers, deadline_s, 0, l->target_base, first_copy, received_bytes,
                       message);
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
