// Sum64PiecesAsync (group_gpu_sum.h): one grid row per piece, each thread a
// grid stride over the piece's 64-bit words. A word lies in one run when
// the runs are 8-byte multiples (then one aligned load when the address
// is); else its bytes are gathered across runs. Block sums are reduced by
// AddBlockSum (device_reduce.cuh), one atomicAdd per block (addition
// commutes: the result does not depend on the order).
#include <algorithm>
#include <string>

#include "device_checksum.h"
#include "device_reduce.cuh"
#include "group_gpu_sum.h"

namespace viper {
namespace transports {
namespace internal {
namespace {

// The run of [lo, hi) holding stream byte `at` (the last run starting at or before it).
__device__ unsigned int FindRun(const DeviceRun* __restrict__ runs, unsigned int lo, unsigned int hi,
                                unsigned long long at) {
  while (hi - lo > 1) {
    const unsigned int mid = lo + (hi - lo) / 2;
    if (runs[mid].start <= at) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

__global__ void Sum64PiecesKernel(const unsigned char* __restrict__ base, const DeviceRun* __restrict__ runs,
                                  const unsigned int* __restrict__ first,
                                  unsigned long long* __restrict__ sums) {
  const unsigned int piece = blockIdx.y;
  const unsigned int r0 = first[piece], r1 = first[piece + 1];
  unsigned long long sum = 0;
  if (r1 > r0) {
    const unsigned long long n = runs[r1 - 1].start + runs[r1 - 1].bytes;
    const unsigned long long words = (n + 7) / 8;
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < words; i += stride) {
      const unsigned long long at = 8 * i, end = at + 8 < n ? at + 8 : n;
      unsigned int r = FindRun(runs, r0, r1, at);
      const DeviceRun& run = runs[r];
      const unsigned char* p = base + run.offset + (at - run.start);
      unsigned long long w = 0;
      if (end - at == 8 && at + 8 <= run.start + run.bytes && reinterpret_cast<uintptr_t>(p) % 8 == 0) {
        w = *reinterpret_cast<const unsigned long long*>(p);
      } else {
        for (unsigned long long b = at; b < end; ++b) {
          while (b >= runs[r].start + runs[r].bytes) ++r;
          w |= static_cast<unsigned long long>(base[runs[r].offset + (b - runs[r].start)]) << (8 * (b - at));
        }
      }
      sum += Sum64Mix(w ^ ((i + 1) * kSum64K1));
    }
  }
  AddBlockSum(sum, sums + piece);
}

}  // namespace

Status Sum64PiecesAsync(const std::byte* base, const DeviceRun* runs, const unsigned int* first, int pieces,
                        uint64_t max_piece_bytes, unsigned long long* sums, cudaStream_t stream) {
  if (pieces <= 0) return Status::Ok();
  if (pieces > 65535) {
    return InvalidArgumentError("sum64 of pieces: " + std::to_string(pieces) + " pieces, at most 65535");
  }
  cudaError_t e = cudaMemsetAsync(sums, 0, sizeof(*sums) * static_cast<std::size_t>(pieces), stream);
  if (e != cudaSuccess)
    return UnavailableError(std::string("sum64 of pieces: cudaMemsetAsync: ") + cudaGetErrorString(e));
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  constexpr int kThreads = 256;
  const unsigned long long words = (max_piece_bytes + 7) / 8;
  const unsigned long long wanted = (words + kThreads - 1) / kThreads;
  const unsigned long long cap = std::max<unsigned long long>(1, 8ull * sms / pieces);
  dim3 grid(static_cast<unsigned int>(std::max<unsigned long long>(1, std::min(wanted, cap))),
            static_cast<unsigned int>(pieces));
  Sum64PiecesKernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<const unsigned char*>(base), runs, first,
                                                   sums);
  e = cudaGetLastError();
  if (e != cudaSuccess)
    return UnavailableError(std::string("sum64 of pieces: kernel launch: ") + cudaGetErrorString(e));
  return Status::Ok();
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
