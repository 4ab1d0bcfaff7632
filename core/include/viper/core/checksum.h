// Checksums of model bytes: XXH3-64 (xxhash), fast enough to verify every
// received version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace viper {

uint64_t Xxh3_64(const void* data, std::size_t size);

// Incremental XXH3-64 over several pieces (e.g. tensors in order).
class Xxh3Hasher {
 public:
  Xxh3Hasher();
  ~Xxh3Hasher();
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;
  void Update(const void* data, std::size_t size);
  uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

// 16 lowercase hex digits, and back.
std::string ChecksumToHex(uint64_t value);
std::optional<uint64_t> ChecksumFromHex(const std::string& hex);

}  // namespace viper
