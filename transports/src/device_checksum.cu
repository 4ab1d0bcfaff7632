// The sum64 kernel (see device_checksum.h): a grid-stride sum of mixed words,
// reduced per warp with shuffles, per block in shared memory, and across
// blocks with one 64-bit atomicAdd each (addition commutes, so the result
// does not depend on the order).
#include <algorithm>
#include <string>

#include "device_checksum.h"
#include "device_reduce.cuh"

namespace viper {
namespace transports {
namespace internal {
namespace {

__device__ __forceinline__ unsigned long long Mix(unsigned long long z) { return Sum64Mix(z); }

__global__ void Sum64Kernel(const unsigned long long* __restrict__ words, unsigned long long n_words,
                            const unsigned char* __restrict__ tail, unsigned int tail_bytes,
                            unsigned long long* __restrict__ out) {
  unsigned long long sum = 0;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Four independent loads in flight per thread.
  for (; i + 3 * stride < n_words; i += 4 * stride) {
    const unsigned long long a = __ldg(words + i), b = __ldg(words + i + stride);
    const unsigned long long c = __ldg(words + i + 2 * stride), d = __ldg(words + i + 3 * stride);
    sum += Mix(a ^ ((i + 1) * kSum64K1)) + Mix(b ^ ((i + stride + 1) * kSum64K1)) +
           Mix(c ^ ((i + 2 * stride + 1) * kSum64K1)) + Mix(d ^ ((i + 3 * stride + 1) * kSum64K1));
  }
  for (; i < n_words; i += stride) sum += Mix(__ldg(words + i) ^ ((i + 1) * kSum64K1));
  if (tail_bytes != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned long long w = 0;
    for (unsigned int b = 0; b < tail_bytes; ++b) w |= static_cast<unsigned long long>(tail[b]) << (8 * b);
    sum += Mix(w ^ ((n_words + 1) * kSum64K1));
  }
  AddBlockSum(sum, out);
}

Status CudaFailure(const char* what, cudaError_t e) {
  return UnavailableError(std::string("sum64: ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace

StatusOr<uint64_t> Sum64Device(const void* data, uint64_t bytes, void* scratch, cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(data) % 8 != 0) {
    return InvalidArgumentError("sum64: device data must be 8-byte aligned");
  }
  auto* out = static_cast<unsigned long long*>(scratch);
  cudaError_t e = cudaMemsetAsync(out, 0, sizeof(*out), stream);
  if (e != cudaSuccess) return CudaFailure("cudaMemsetAsync", e);
  const unsigned long long n_words = bytes / 8;
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  constexpr int kThreads = 256;
  const unsigned long long wanted = (n_words + kThreads - 1) / kThreads;
  const unsigned int blocks = static_cast<unsigned int>(
      std::max<unsigned long long>(1, std::min<unsigned long long>(wanted, 8ull * sms)));
  const auto* base = static_cast<const unsigned char*>(data);
  Sum64Kernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const unsigned long long*>(base), n_words,
                                               base + 8 * n_words, static_cast<unsigned int>(bytes % 8), out);
  e = cudaGetLastError();
  if (e != cudaSuccess) return CudaFailure("kernel launch", e);
  unsigned long long sum = 0;
  e = cudaMemcpyAsync(&sum, out, sizeof(sum), cudaMemcpyDeviceToHost, stream);
  if (e != cudaSuccess) return CudaFailure("cudaMemcpyAsync", e);
  e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return CudaFailure("cudaStreamSynchronize", e);
  return Sum64Mix(sum + bytes * kSum64K2);
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
