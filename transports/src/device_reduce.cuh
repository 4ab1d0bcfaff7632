// Internal (CUDA device code): adds every thread's 64-bit value of a block
// to `*out` (shuffles per warp, shared memory across warps, one atomicAdd
// per block; addition commutes, so the result does not depend on the
// order). Every thread of the block must call it; blockDim.x a multiple of
// 32, at most 1024. Used by the sum64 kernels (device_checksum.cu,
// group_gpu_sum.cu).
#pragma once

namespace viper {
namespace transports {
namespace internal {

__device__ __forceinline__ void AddBlockSum(unsigned long long sum, unsigned long long* out) {
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
  __shared__ unsigned long long warp_sums[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    sum = lane < static_cast<int>(blockDim.x / 32) ? warp_sums[lane] : 0;
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) atomicAdd(out, sum);
  }
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
