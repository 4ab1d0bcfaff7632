// Page-aligned, pre-touched host buffers: staging on the producer, landing
// buffers on the consumer, and O_DIRECT I/O. First touch of fresh pages is
// far slower than a copy into touched ones, so buffers are touched once at
// allocation and reused.
#pragma once

#include <cstddef>
#include <cstdint>

#include "viper/core/status.h"

namespace viper {
namespace transports {

class AlignedBuffer {
 public:
  static constexpr std::size_t kAlignmentBytes = 4096;

  AlignedBuffer() = default;
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;

  // Allocates `capacity_bytes` (rounded up to kAlignmentBytes) aligned to
  // kAlignmentBytes and writes every page once. Returns an error when the
  // memory is not there.
  static StatusOr<AlignedBuffer> Allocate(std::size_t capacity_bytes);

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t capacity() const { return capacity_; }

  // Makes the pages read-only (mprotect), or writable again: a verified
  // version a consumer serves must not change under its readers (a write
  // faults). False where the pages cannot be protected alone (a page larger
  // than kAlignmentBytes). Writable again before it is freed or reused.
  bool SetReadOnly(bool read_only);
  bool read_only() const { return read_only_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t capacity_ = 0;
  bool read_only_ = false;
};

// Rounds `n` up to a multiple of `alignment` (a power of two).
inline uint64_t RoundUp(uint64_t n, uint64_t alignment) { return (n + alignment - 1) & ~(alignment - 1); }

}  // namespace transports
}  // namespace viper
