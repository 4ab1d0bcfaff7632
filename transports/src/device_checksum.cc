#include "device_checksum.h"

#include <cstring>

namespace viper {
namespace transports {
namespace internal {

uint64_t Sum64Host(const void* data, uint64_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  const uint64_t words = bytes / 8;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);  // little-endian hosts only (x86-64, aarch64)
    sum += Sum64Mix(w ^ ((i + 1) * kSum64K1));
  }
  if (bytes % 8 != 0) {
    uint64_t w = 0;
    std::memcpy(&w, p + 8 * words, bytes % 8);
    sum += Sum64Mix(w ^ ((words + 1) * kSum64K1));
  }
  return Sum64Mix(sum + bytes * kSum64K2);
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
