#include "viper/transports/device_memory.h"

#include <cstring>
#include <memory>
#include <string>

#include "device_buffer.h"
#include "viper/config.h"
#include "viper/transports/aligned_buffer.h"

namespace viper {
namespace transports {

#if VIPER_HAVE_CUDA

namespace internal {

Status CudaStatus(const char* what, cudaError_t e) {
  return UnavailableError(std::string(what) + ": " + cudaGetErrorString(e));
}

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(uint64_t bytes) {
  DeviceBuffer b;
  cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&b.data_), bytes == 0 ? 1 : bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return UnavailableError("cudaMalloc of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e));
  }
  b.capacity_ = bytes;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), capacity_(o.capacity_) {
  o.data_ = nullptr;
  o.capacity_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFree(data_);
    data_ = o.data_;
    capacity_ = o.capacity_;
    o.data_ = nullptr;
    o.capacity_ = 0;
  }
  return *this;
}

Status OpenGpuStream(int device, cudaStream_t* stream) {
  std::string reason;
  if (!CudaDeviceAvailable(&reason)) return UnavailableError("tier gpu: " + reason);
  VIPER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  VIPER_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking));
  return Status::Ok();
}

}  // namespace internal

bool CudaDeviceAvailable(std::string* reason) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    if (reason) {
      *reason = std::string("no CUDA device: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
    }
    return false;
  }
  return true;
}

StatusOr<ModelState> CopyToDevice(const ModelState& state, int device) {
  std::string reason;
  if (!CudaDeviceAvailable(&reason)) return UnavailableError(reason);
  VIPER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  constexpr uint64_t kAlign = 256;
  uint64_t total = 0;
  for (const Tensor& t : state.tensors()) total = RoundUp(total, kAlign) + t.size_bytes;
  VIPER_ASSIGN_OR_RETURN(internal::DeviceBuffer buffer, internal::DeviceBuffer::Allocate(total));
  auto owner = std::make_shared<internal::DeviceBuffer>(std::move(buffer));
  ModelState out;
  out.metadata = state.metadata;
  uint64_t off = 0;
  for (const Tensor& t : state.tensors()) {
    off = RoundUp(off, kAlign);
    Tensor d;
    d.name = t.name;
    d.dtype = t.dtype;
    d.shape = t.shape;
    d.memory = MemoryKind::kDevice;
    d.data = owner->data() + off;
    d.size_bytes = t.size_bytes;
    d.owner = std::shared_ptr<void>(owner, d.data);
    if (t.size_bytes > 0)
      VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpy(d.data, t.data, t.size_bytes, cudaMemcpyDefault));
    off += t.size_bytes;
    VIPER_RETURN_IF_ERROR(out.Add(std::move(d)));
  }
  return out;
}

StatusOr<ModelState> CopyToHost(const ModelState& state) {
  ModelState out;
  out.metadata = state.metadata;
  for (const Tensor& t : state.tensors()) {
    Tensor h = Tensor::Allocate(t.name, t.dtype, t.shape);
    if (h.size_bytes != t.size_bytes) {
      return InvalidArgumentError("tensor '" + t.name + "' has " + std::to_string(t.size_bytes) +
                                  " bytes, its shape needs " + std::to_string(h.size_bytes));
    }
    if (t.size_bytes > 0) {
      if (t.memory == MemoryKind::kHost) {
        std::memcpy(h.data, t.data, t.size_bytes);
      } else {
        VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpy(h.data, t.data, t.size_bytes, cudaMemcpyDeviceToHost));
      }
    }
    VIPER_RETURN_IF_ERROR(out.Add(std::move(h)));
  }
  return out;
}

#else  // !VIPER_HAVE_CUDA

bool CudaDeviceAvailable(std::string* reason) {
  if (reason) *reason = "no CUDA device: Viper was built without CUDA";
  return false;
}

StatusOr<ModelState> CopyToDevice(const ModelState&, int) {
  return UnavailableError("no CUDA device: Viper was built without CUDA");
}

StatusOr<ModelState> CopyToHost(const ModelState& state) {
  ModelState out;
  out.metadata = state.metadata;
  for (const Tensor& t : state.tensors()) {
    if (t.memory != MemoryKind::kHost)
      return UnavailableError("tensor '" + t.name + "' is in device memory and Viper was built without CUDA");
    Tensor h = Tensor::Allocate(t.name, t.dtype, t.shape);
    if (h.size_bytes != t.size_bytes) {
      return InvalidArgumentError("tensor '" + t.name + "' has " + std::to_string(t.size_bytes) +
                                  " bytes, its shape needs " + std::to_string(h.size_bytes));
    }
    if (t.size_bytes > 0) std::memcpy(h.data, t.data, t.size_bytes);
    VIPER_RETURN_IF_ERROR(out.Add(std::move(h)));
  }
  return out;
}

#endif

}  // namespace transports
}  // namespace viper
