#include "viper/transports/aligned_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace viper {
namespace transports {

AlignedBuffer::~AlignedBuffer() {
  SetReadOnly(false);  // free() may write into the block
  std::free(data_);
}

bool AlignedBuffer::SetReadOnly(bool read_only) {
  if (data_ == nullptr || read_only == read_only_) return true;
  static const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0 || static_cast<std::size_t>(page) > kAlignmentBytes ||
      reinterpret_cast<uintptr_t>(data_) % static_cast<uintptr_t>(page) != 0 || capacity_ % page != 0) {
    return false;
  }
  if (::mprotect(data_, capacity_, read_only ? PROT_READ : PROT_READ | PROT_WRITE) != 0) return false;
  read_only_ = read_only;
  return true;
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      read_only_(std::exchange(other.read_only_, false)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    SetReadOnly(false);
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    read_only_ = std::exchange(other.read_only_, false);
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
