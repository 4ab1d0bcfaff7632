#include "viper/transports/aligned_buffer.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace viper {
namespace transports {

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

StatusOr<AlignedBuffer> AlignedBuffer::Allocate(std::size_t capacity_bytes) {
  const std::size_t n = RoundUp(capacity_bytes == 0 ? 1 : capacity_bytes, kAlignmentBytes);
  void* p = nullptr;
  if (int rc = ::posix_memalign(&p, kAlignmentBytes, n); rc != 0) {
    return ErrnoError("posix_memalign of " + std::to_string(n) + " bytes", rc);
  }
  // Pre-touch: fault every page in now rather than during the first copy.
  std::memset(p, 0, n);
  AlignedBuffer buffer;
  buffer.data_ = static_cast<std::byte*>(p);
  buffer.capacity_ = n;
  return buffer;
}

}  // namespace transports
}  // namespace viper
