// Internal: the producer's staging buffer. Layout [header reserve][data]:
// the safetensors header is padded with spaces to a multiple of 4096 and
// written just before the data, so the whole image (header + data) starts
// page-aligned and can go to O_DIRECT, MPI or the network as one range.
#pragma once

#include <cstdint>

#include "viper/core/model_state.h"
#include "viper/core/status.h"
#include "viper/transports/aligned_buffer.h"

namespace viper {
namespace transports {
namespace internal {

class StagedVersion {
 public:
  // Copies the tensor bytes of `state` (host tensors) into the data region,
  // growing the buffer when needed. This is the producer's stall in async mode.
  // With `hash_while_copying` (sync mode) the checksum is computed block by
  // block right after each block is copied, while it is still in cache, and
  // Finalize does not read the data again.
  Status Snapshot(const ModelState& state, uint64_t version, int64_t iteration, int32_t producer_id,
                  uint64_t min_capacity_bytes = 0, bool hash_while_copying = false);
  // Checksums the data and writes the header in front of it.
  Status Finalize();

  const std::byte* image() const { return buffer_.data() + reserve_ - header_bytes_; }
  uint64_t image_bytes() const { return header_bytes_ + data_bytes_; }
  uint64_t header_bytes() const { return header_bytes_; }
  uint64_t data_bytes() const { return data_bytes_; }
  uint64_t checksum() const { return checksum_; }
  uint64_t version() const { return layout_.metadata.version; }
  int64_t iteration() const { return layout_.metadata.iteration; }
  std::byte* data() { return buffer_.data() + reserve_; }

 private:
  AlignedBuffer buffer_;
  uint64_t reserve_ = 0;       // bytes before the data (a multiple of 4096)
  uint64_t header_bytes_ = 0;  // padded header, a multiple of 4096
  uint64_t data_bytes_ = 0;
  uint64_t checksum_ = 0;
  bool checksum_ready_ = false;
  ModelState layout_;          // tensors as views into the data region
};

// Re-pads a serialized safetensors header (length prefix + JSON) with spaces
// to a multiple of `alignment` bytes, rewriting the length prefix.
std::string PadHeader(std::string header, uint64_t alignment);

}  // namespace internal
}  // namespace transports
}  // namespace viper
