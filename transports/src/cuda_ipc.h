// Internal (CUDA builds): a device allocation and an interprocess event
// shared by CUDA IPC, as opaque handle bytes that travel in a message. Used
// by the gpu tier (tier_gpu.cc) and the groups' gpu link (group_gpu.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>

#include "device_buffer.h"

namespace viper {
namespace transports {
namespace internal {

inline constexpr std::size_t kIpcHandleBytes = 64;
static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes &&
                  sizeof(cudaIpcEventHandle_t) == kIpcHandleBytes,
              "IPC handle size");

// The handles of `allocation` (the base of a cudaMalloc allocation) and
// `event` (created with cudaEventInterprocess | cudaEventDisableTiming).
inline Status ExportIpc(void* allocation, cudaEvent_t event, char mem[kIpcHandleBytes],
                        char event_out[kIpcHandleBytes]) {
  cudaIpcMemHandle_t m;
  cudaIpcEventHandle_t e;
  VIPER_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&m, allocation));
  VIPER_CUDA_RETURN_IF_ERROR(cudaIpcGetEventHandle(&e, event));
  std::memcpy(mem, &m, sizeof(m));
  std::memcpy(event_out, &e, sizeof(e));
  return Status::Ok();
}

// Maps another process's allocation and opens its event from their handles;
// on failure nothing stays open (and the CUDA error is cleared). Close with
// cudaIpcCloseMemHandle(*base) and cudaEventDestroy(*event).
inline Status OpenIpc(const char mem[kIpcHandleBytes], const char event[kIpcHandleBytes], void** base,
                      cudaEvent_t* event_out) {
  cudaIpcMemHandle_t m;
  cudaIpcEventHandle_t e;
  std::memcpy(&m, mem, sizeof(m));
  std::memcpy(&e, event, sizeof(e));
  cudaError_t rc = cudaIpcOpenMemHandle(base, m, cudaIpcMemLazyEnablePeerAccess);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    *base = nullptr;
    return CudaStatus("cudaIpcOpenMemHandle", rc);
  }
  rc = cudaIpcOpenEventHandle(event_out, e);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    cudaIpcCloseMemHandle(*base);
    *base = nullptr;
    *event_out = nullptr;
    return CudaStatus("cudaIpcOpenEventHandle", rc);
  }
  return Status::Ok();
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
