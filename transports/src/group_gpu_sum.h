// Internal (CUDA builds): sum64 (device_checksum.h) of many pieces at once,
// each a byte stream of runs scattered in one device buffer, for the
// groups' gpu link (group_gpu.cc). Piece i's digest equals Sum64Host of its
// runs' bytes laid end to end.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "viper/core/status.h"

namespace viper {
namespace transports {
namespace internal {

// A run of a piece: `bytes` at `offset` of the buffer, at `start` of the
// piece's stream. A piece's runs are sorted by start and cover [0, its
// length) without gaps.
struct DeviceRun {
  unsigned long long offset = 0;
  unsigned long long start = 0;
  unsigned long long bytes = 0;
};

// Queues on `stream` the unfinished sums of `pieces` pieces into `sums`
// (device, `pieces` words, zeroed here): piece i's runs are
// runs[first[i] .. first[i + 1]) (device arrays), read at `base`.
// `max_piece_bytes` sizes the grid. The digest of piece i is then
// Sum64Finish(sums[i], its length).
Status Sum64PiecesAsync(const std::byte* base, const DeviceRun* runs, const unsigned int* first, int pieces,
                        uint64_t max_piece_bytes, unsigned long long* sums, cudaStream_t stream);

}  // namespace internal
}  // namespace transports
}  // namespace viper
