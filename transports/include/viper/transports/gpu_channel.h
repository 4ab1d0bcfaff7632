// The GPU tier: a model image in device memory moved from the producer's GPU
// to a consumer's GPU between two MPI ranks. Same node: CUDA IPC (the device
// staging buffer's cudaIpcMemHandle and an interprocess event are exchanged
// once over MPI; each version is one device-to-device copy ordered by the
// event). Otherwise: a pipelined device -> pinned host -> MPI -> pinned host
// -> device copy with `pipeline_depth` chunks in flight. Debian's Open MPI is
// not CUDA-aware and NCCL refuses two ranks on one GPU, hence these paths.
// CUDA types stay in the .cc file; without CUDA or a device the API reports
// Unavailable at run time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "viper/core/status.h"

namespace viper {
namespace transports {

class GpuChannel {
 public:
  enum class Path { kCudaIpc, kPinnedHostPipeline };
  static const char* ToString(Path path);  // "cuda-ipc", "pinned-host-pipeline"

  struct Options {
    bool is_producer = false;               // producer (sends) or consumer (receives)
    int peer_rank = 0;                      // the other side in MPI_COMM_WORLD
    int device = 0;                         // CUDA device ordinal of this rank
    uint64_t capacity_bytes = 64ull << 20;  // largest image; device staging size
    bool allow_ipc = true;                  // use CUDA IPC when both ranks share a node
    uint64_t chunk_bytes = 16ull << 20;     // host pipeline: bytes per chunk
    int pipeline_depth = 2;                 // host pipeline: chunks in flight (>= 2)
    double timeout_s = 30;                  // seconds to wait on the peer

    bool IsValid(std::string* error) const;
  };

  // True when this build has CUDA and a device is visible; otherwise false
  // and `reason` says why ("no CUDA device: ...").
  static bool DeviceAvailable(std::string* reason);

  // Collective with the peer only (both call it; no other rank takes part):
  // creates the pair's communicator, exchanges node names and, for
  // IPC, the memory and event handles.
  static StatusOr<std::unique_ptr<GpuChannel>> Create(const Options& options);
  ~GpuChannel();
  GpuChannel(const GpuChannel&) = delete;
  GpuChannel& operator=(const GpuChannel&) = delete;

  // Producer: moves `bytes` bytes at device pointer `device_src` to the peer
  // and returns once the peer has them in its device buffer (seconds taken).
  StatusOr<double> Send(const void* device_src, uint64_t bytes, uint64_t version);
  // Consumer: receives the next version into `device_dst` (capacity bytes);
  // returns its size. Sets *version.
  StatusOr<uint64_t> Receive(void* device_dst, uint64_t capacity, uint64_t* version);

  Path path() const;

  class Impl;

 private:
  explicit GpuChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace transports
}  // namespace viper
