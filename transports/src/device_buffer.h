// Internal (CUDA builds): an owned cudaMalloc allocation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "viper/config.h"
#include "viper/core/status.h"

#if VIPER_HAVE_CUDA
#include <cuda_runtime_api.h>

namespace viper {
namespace transports {
namespace internal {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `bytes` of device memory on the current device (Unavailable on failure, saying how much).
  static StatusOr<DeviceBuffer> Allocate(uint64_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::byte* data() const { return data_; }
  uint64_t capacity() const { return capacity_; }

 private:
  std::byte* data_ = nullptr;
  uint64_t capacity_ = 0;
};

// "what: cudaGetErrorString(e)" as Unavailable.
Status CudaStatus(const char* what, cudaError_t e);

// The gpu tier's set-up on both sides: checks that a device is usable
// (Unavailable "tier gpu: no CUDA device: ..." otherwise), selects `device`
// and creates a non-blocking stream on it.
Status OpenGpuStream(int device, cudaStream_t* stream);

}  // namespace internal
}  // namespace transports
}  // namespace viper

#define VIPER_CUDA_RETURN_IF_ERROR(call)                                      \
  do {                                                                        \
    cudaError_t viper_cuda_e_ = (call);                                       \
    if (viper_cuda_e_ != cudaSuccess)                                         \
      return ::viper::transports::internal::CudaStatus(#call, viper_cuda_e_); \
  } while (0)

#endif  // VIPER_HAVE_CUDA
