#include "viper/transports/gpu_channel.h"

#include <cstring>
#include <string>
#include <vector>

#include "viper/config.h"
#include "viper/transports/device_memory.h"
#include "viper/transports/types.h"

#if VIPER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if VIPER_HAVE_MPI
#include "mpi_link.h"
#endif

namespace viper {
namespace transports {

const char* GpuChannel::ToString(Path path) {
  return path == Path::kCudaIpc ? "cuda-ipc" : "pinned-host-pipeline";
}

bool GpuChannel::Options::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (peer_rank < 0) return fail("peer_rank: must be >= 0");
  if (device < 0) return fail("device: must be >= 0");
  if (capacity_bytes == 0) return fail("capacity_bytes: must be > 0");
  if (chunk_bytes == 0 || chunk_bytes > (1ull << 30)) return fail("chunk_bytes: must be in [1, 2^30]");
  if (pipeline_depth < 2 || pipeline_depth > 16) return fail("pipeline_depth: must be in [2, 16]");
  if (!(timeout_s > 0)) return fail("timeout_s: must be > 0");
  return true;
}

#if VIPER_HAVE_CUDA && VIPER_HAVE_MPI

namespace {

constexpr int kTagGpuSetup = 7101, kTagGpuVersion = 7102, kTagGpuAck = 7103, kTagGpuChunk = 7104;

Status CudaError(const char* what, cudaError_t e) {
  return UnavailableError(std::string(what) + ": " + cudaGetErrorString(e));
}
#define VIPER_CUDA(call)                                            \
  do {                                                              \
    cudaError_t viper_e_ = (call);                                  \
    if (viper_e_ != cudaSuccess) return CudaError(#call, viper_e_); \
  } while (0)

struct Setup {
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int32_t ipc = 0;  // the producer offers IPC handles
  cudaIpcMemHandle_t mem;
  cudaIpcEventHandle_t event;
};

struct VersionMsg {
  uint64_t version = 0;
  uint64_t bytes = 0;
};

}  // namespace

bool GpuChannel::DeviceAvailable(std::string* reason) { return CudaDeviceAvailable(reason); }

class GpuChannel::Impl {
 public:
  explicit Impl(const Options& o) : o_(o) {}
  ~Impl() {
    if (peer_base_) cudaIpcCloseMemHandle(peer_base_);
    if (event_) cudaEventDestroy(event_);
    for (auto& e : chunk_events_) cudaEventDestroy(e);
    for (void* p : pinned_) cudaFreeHost(p);
    if (staging_) cudaFree(staging_);
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  Status Init() {
    std::string reason;
    if (!DeviceAvailable(&reason)) return UnavailableError(reason);
    VIPER_CUDA(cudaSetDevice(o_.device));
    VIPER_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      return FailedPreconditionError("MPI is not initialised (create a transports::MpiSession)");
    // A private two-rank communicator, created by the pair alone
    // (MPI_Comm_create_group is collective over the group only; a dup of
    // MPI_COMM_WORLD would need every rank and pair it with another rank's
    // unrelated collective). Producer is rank 0 in it, consumer rank 1.
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (o_.peer_rank == me) return InvalidArgumentError("GpuChannel: peer_rank is this rank");
    const int members[2] = {o_.is_producer ? me : o_.peer_rank, o_.is_producer ? o_.peer_rank : me};
    MPI_Group world_group, pair_group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, 2, members, &pair_group);
    const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, pair_group, kTagGpuSetup, &comm_);
    MPI_Group_free(&pair_group);
    MPI_Group_free(&world_group);
    if (rc != MPI_SUCCESS) return AbortedError("MPI_Comm_create_group of the GPU channel's pair failed");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    peer_ = o_.is_producer ? 1 : 0;
    Setup mine, theirs;
    int len = 0;
    MPI_Get_processor_name(mine.host, &len);
    if (o_.is_producer) {
      VIPER_CUDA(cudaMalloc(&staging_, o_.capacity_bytes));
      if (o_.allow_ipc) {
        VIPER_CUDA(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming | cudaEventInterprocess));
        VIPER_CUDA(cudaIpcGetMemHandle(&mine.mem, staging_));
        VIPER_CUDA(cudaIpcGetEventHandle(&mine.event, event_));
        mine.ipc = 1;
      }
    }
    // Exchange once: node names (and the producer's handles).
    MPI_Sendrecv(&mine, sizeof(Setup), MPI_BYTE, peer_, kTagGpuSetup, &theirs, sizeof(Setup), MPI_BYTE, peer_,
                 kTagGpuSetup, comm_, MPI_STATUS_IGNORE);
    const bool same_node = std::strncmp(mine.host, theirs.host, MPI_MAX_PROCESSOR_NAME) == 0;
    const Setup& producer = o_.is_producer ? mine : theirs;
    int use_ipc = same_node && producer.ipc && o_.allow_ipc;
    if (!o_.is_producer && use_ipc) {
      // Opening may fail (e.g. a different device without peer access): fall back.
      if (cudaIpcOpenMemHandle(&peer_base_, producer.mem, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess ||
          cudaIpcOpenEventHandle(&event_, producer.event) != cudaSuccess) {
        cudaGetLastError();
        use_ipc = 0;
      }
    }
    // Both sides agree on the path: IPC only when the consumer opened the handles.
    int agreed = 0;
    MPI_Sendrecv(&use_ipc, 1, MPI_INT, peer_, kTagGpuSetup, &agreed, 1, MPI_INT, peer_, kTagGpuSetup, comm_,
                 MPI_STATUS_IGNORE);
    path_ = (use_ipc && agreed) ? Path::kCudaIpc : Path::kPinnedHostPipeline;
    if (path_ == Path::kPinnedHostPipeline) {
      pinned_.resize(o_.pipeline_depth, nullptr);
      chunk_events_.resize(o_.pipeline_depth, nullptr);
      for (int i = 0; i < o_.pipeline_depth; ++i) {
        VIPER_CUDA(cudaMallocHost(&pinned_[i], o_.chunk_bytes));
        VIPER_CUDA(cudaEventCreateWithFlags(&chunk_events_[i], cudaEventDisableTiming));
      }
    }
    return Status::Ok();
  }

  StatusOr<double> Send(const void* src, uint64_t bytes, uint64_t version) {
    if (!o_.is_producer) return FailedPreconditionError("Send on a consumer channel");
    if (bytes > o_.capacity_bytes) return OutOfRangeError("Send: image larger than capacity_bytes");
    const double t0 = MonotonicSeconds();
    VersionMsg msg{version, bytes};
    if (path_ == Path::kCudaIpc) {
      VIPER_CUDA(cudaMemcpyAsync(staging_, src, bytes, cudaMemcpyDeviceToDevice, stream_));
      VIPER_CUDA(cudaEventRecord(event_, stream_));
      VIPER_RETURN_IF_ERROR(internal::SendPod(comm_, peer_, kTagGpuVersion, msg, o_.timeout_s));
    } else {
      VIPER_RETURN_IF_ERROR(internal::SendPod(comm_, peer_, kTagGpuVersion, msg, o_.timeout_s));
      // Chunk i: D2H into pinned[i % depth] -> MPI_Isend. A pinned buffer is
      // refilled only after its previous send completed.
      const int depth = o_.pipeline_depth;
      std::vector<MPI_Request> sends(depth, MPI_REQUEST_NULL);
      const uint64_t chunks = (bytes + o_.chunk_bytes - 1) / o_.chunk_bytes;
      uint64_t next_copy = 0, next_send = 0;
      const double deadline = MonotonicSeconds() + o_.timeout_s;
      while (next_send < chunks) {
        // Start copies ahead while slots are free.
        while (next_copy < chunks && next_copy < next_send + depth) {
          const int slot = static_cast<int>(next_copy % depth);
          if (sends[slot] != MPI_REQUEST_NULL) {
            VIPER_RETURN_IF_ERROR(WaitRequest(&sends[slot], deadline));
          }
          const uint64_t off = next_copy * o_.chunk_bytes, n = std::min(o_.chunk_bytes, bytes - off);
          VIPER_CUDA(cudaMemcpyAsync(pinned_[slot], static_cast<const char*>(src) + off, n,
                                     cudaMemcpyDeviceToHost, stream_));
          VIPER_CUDA(cudaEventRecord(chunk_events_[slot], stream_));
          ++next_copy;
        }
        const int slot = static_cast<int>(next_send % depth);
        VIPER_CUDA(cudaEventSynchronize(chunk_events_[slot]));
        const uint64_t off = next_send * o_.chunk_bytes, n = std::min(o_.chunk_bytes, bytes - off);
        if (MPI_Isend(pinned_[slot], static_cast<int>(n), MPI_BYTE, peer_, kTagGpuChunk, comm_,
                      &sends[slot]) != MPI_SUCCESS) {
          return AbortedError("MPI_Isend of a GPU chunk failed");
        }
        ++next_send;
      }
      for (auto& r : sends) {
        if (r != MPI_REQUEST_NULL) VIPER_RETURN_IF_ERROR(WaitRequest(&r, deadline));
      }
    }
    // The consumer acknowledges once the bytes are in its device buffer; the
    // staging buffer may be overwritten only after that.
    VersionMsg ack;
    VIPER_RETURN_IF_ERROR(RecvWithTimeout(kTagGpuAck, &ack));
    return MonotonicSeconds() - t0;
  }

  StatusOr<uint64_t> Receive(void* dst, uint64_t capacity, uint64_t* version) {
    if (o_.is_producer) return FailedPreconditionError("Receive on a producer channel");
    VersionMsg msg;
    VIPER_RETURN_IF_ERROR(RecvWithTimeout(kTagGpuVersion, &msg));
    if (msg.bytes > capacity) return OutOfRangeError("Receive: version larger than the destination buffer");
    if (path_ == Path::kCudaIpc) {
      VIPER_CUDA(cudaStreamWaitEvent(stream_, event_, 0));
      VIPER_CUDA(cudaMemcpyAsync(dst, peer_base_, msg.bytes, cudaMemcpyDeviceToDevice, stream_));
      VIPER_CUDA(cudaStreamSynchronize(stream_));
    } else {
      const int depth = o_.pipeline_depth;
      const uint64_t chunks = (msg.bytes + o_.chunk_bytes - 1) / o_.chunk_bytes;
      const double deadline = MonotonicSeconds() + o_.timeout_s;
      std::vector<MPI_Request> recvs(depth, MPI_REQUEST_NULL);
      std::vector<bool> copying(depth, false);
      uint64_t next_post = 0, next_done = 0;
      while (next_done < chunks) {
        while (next_post < chunks && next_post < next_done + depth) {
          const int slot = static_cast<int>(next_post % depth);
          if (copying[slot]) {
            VIPER_CUDA(cudaEventSynchronize(chunk_events_[slot]));  // the H2D copy from this slot is done
            copying[slot] = false;
          }
          const uint64_t off = next_post * o_.chunk_bytes, n = std::min(o_.chunk_bytes, msg.bytes - off);
          if (MPI_Irecv(pinned_[slot], static_cast<int>(n), MPI_BYTE, peer_, kTagGpuChunk, comm_,
                        &recvs[slot]) != MPI_SUCCESS) {
            return AbortedError("MPI_Irecv of a GPU chunk failed");
          }
          ++next_post;
        }
        const int slot = static_cast<int>(next_done % depth);
        VIPER_RETURN_IF_ERROR(WaitRequest(&recvs[slot], deadline));
        const uint64_t off = next_done * o_.chunk_bytes, n = std::min(o_.chunk_bytes, msg.bytes - off);
        VIPER_CUDA(cudaMemcpyAsync(static_cast<char*>(dst) + off, pinned_[slot], n, cudaMemcpyHostToDevice,
                                   stream_));
        VIPER_CUDA(cudaEventRecord(chunk_events_[slot], stream_));
        copying[slot] = true;
        ++next_done;
      }
      VIPER_CUDA(cudaStreamSynchronize(stream_));
    }
    VIPER_RETURN_IF_ERROR(internal::SendPod(comm_, peer_, kTagGpuAck, msg, o_.timeout_s));
    *version = msg.version;
    return msg.bytes;
  }

  Path path() const { return path_; }

 private:
  Status WaitRequest(MPI_Request* r, double deadline) {
    for (;;) {
      int flag = 0;
      if (MPI_Test(r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return AbortedError("MPI_Test failed");
      if (flag) return Status::Ok();
      if (MonotonicSeconds() > deadline) {
        MPI_Request_free(r);
        return AbortedError("GPU transfer: the peer did not progress within timeout_s");
      }
    }
  }
  template <typename T>
  Status RecvWithTimeout(int tag, T* msg) {
    const double deadline = MonotonicSeconds() + o_.timeout_s;
    internal::Backoff backoff(20);
    for (;;) {
      VIPER_ASSIGN_OR_RETURN(bool got, internal::TryRecvPod(comm_, peer_, tag, msg));
      if (got) return Status::Ok();
      if (MonotonicSeconds() > deadline) {
        return AbortedError("GPU channel: nothing from rank " + std::to_string(o_.peer_rank) +
                            " within timeout_s");
      }
      backoff.Pause();
    }
  }

  Options o_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int peer_ = 0;  // the peer's rank in comm_
  cudaStream_t stream_ = nullptr;
  void* staging_ = nullptr;      // producer: device staging (IPC-exported)
  void* peer_base_ = nullptr;    // consumer: the producer's staging, mapped
  cudaEvent_t event_ = nullptr;  // interprocess event ordering the IPC copy
  std::vector<void*> pinned_;
  std::vector<cudaEvent_t> chunk_events_;
  Path path_ = Path::kPinnedHostPipeline;
};

StatusOr<std::unique_ptr<GpuChannel>> GpuChannel::Create(const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("GpuChannel::Options::" + error);
  auto impl = std::make_unique<Impl>(options);
  VIPER_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<GpuChannel>(new GpuChannel(std::move(impl)));
}

StatusOr<double> GpuChannel::Send(const void* src, uint64_t bytes, uint64_t version) {
  return impl_->Send(src, bytes, version);
}
StatusOr<uint64_t> GpuChannel::Receive(void* dst, uint64_t capacity, uint64_t* version) {
  return impl_->Receive(dst, capacity, version);
}
GpuChannel::Path GpuChannel::path() const { return impl_->path(); }

#else  // no CUDA or no MPI

bool GpuChannel::DeviceAvailable(std::string* reason) {
  if (reason) {
    *reason = VIPER_HAVE_CUDA ? "no CUDA device: the GPU tier also needs MPI, and this build has none"
                              : "no CUDA device: Viper was built without CUDA";
  }
  return false;
}

class GpuChannel::Impl {
 public:
  Path path() const { return Path::kPinnedHostPipeline; }
};

StatusOr<std::unique_ptr<GpuChannel>> GpuChannel::Create(const Options& options) {
  std::string reason;
  DeviceAvailable(&reason);
  return UnavailableError(reason);
}
StatusOr<double> GpuChannel::Send(const void*, uint64_t, uint64_t) { return UnavailableError("no GPU tier"); }
StatusOr<uint64_t> GpuChannel::Receive(void*, uint64_t, uint64_t*) { return UnavailableError("no GPU tier"); }
GpuChannel::Path GpuChannel::path() const { return impl_->path(); }

#endif

GpuChannel::GpuChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuChannel::~GpuChannel() = default;

}  // namespace transports
}  // namespace viper
