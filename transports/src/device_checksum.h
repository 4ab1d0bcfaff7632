// Internal: the GPU tier's data checksum, "sum64". XXH3 is a sequential
// walk over 1 KiB blocks and cannot run in parallel on a GPU, so a version
// in device memory carries this checksum instead (metadata key
// viper.device_checksum). Definition, for n bytes read as little-endian
// 64-bit words w_0..w_{k-1} (the last one zero-padded):
//
//   sum64 = Mix(n * K2 + sum_i Mix(w_i ^ ((i + 1) * K1)))   (mod 2^64)
//
// Mix is the SplitMix64 finaliser, a bijection, so changing any single word
// always changes the sum; word order enters through the index, the length
// through the final mix. It detects torn, truncated and corrupted copies; it
// is not a cryptographic hash. The sum is order-free, so a GPU reduces it in
// any order and gets the same bits as the host reference.
#pragma once

#include <cstdint>

#include "viper/config.h"
#include "viper/core/status.h"

#if VIPER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace viper {
namespace transports {
namespace internal {

constexpr uint64_t kSum64K1 = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kSum64K2 = 0xD6E8FEB86659FD93ull;

#ifdef __CUDACC__
#define VIPER_HOST_DEVICE __host__ __device__
#else
#define VIPER_HOST_DEVICE
#endif

// SplitMix64's finaliser (a bijection on 64-bit words); host and device.
VIPER_HOST_DEVICE inline uint64_t Sum64Mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z;
}

// The reference, on host memory.
uint64_t Sum64Host(const void* data, uint64_t bytes);

#if VIPER_HAVE_CUDA
// sum64 of `bytes` bytes of device memory at `data` (8-byte aligned), computed
// on `stream`; `scratch` is 8 bytes of device memory. Waits for the result.
StatusOr<uint64_t> Sum64Device(const void* data, uint64_t bytes, void* scratch, cudaStream_t stream);
#endif

}  // namespace internal
}  // namespace transports
}  // namespace viper
