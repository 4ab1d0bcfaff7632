// Checksums of model bytes: XXH3-64 (xxhash), fast enough to verify every
// received version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace viper {
namespace internal {
struct Xxh3Isa;  // core/src/xxh3_isa.h
}  // namespace internal

uint64_t Xxh3_64(const void* data, std::size_t size);

// XXH3 is xxhash's own code built for several x86-64 vector extensions
// ("baseline", "avx2", "avx512"); each process uses the widest its CPU runs,
// or the one named by $VIPER_XXH3 if the CPU runs it. Digests are the same
// whichever is used. Xxh3Implementation() names the one in use,
// Xxh3Implementations() those this CPU runs.
const char* Xxh3Implementation();
std::vector<std::string> Xxh3Implementations();

// Incremental XXH3-64 over several pieces (e.g. tensors in order).
class Xxh3Hasher {
 public:
  Xxh3Hasher();
  // With a named implementation (tests, benches); one this CPU cannot run is
  // a fatal error.
  explicit Xxh3Hasher(const std::string& implementation);
  ~Xxh3Hasher();
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;
  void Update(const void* data, std::size_t size);
  uint64_t Digest() const;

 private:
  const internal::Xxh3Isa* isa_;  // the implementation (core/src/xxh3_isa.h)
  void* state_;                   // its XXH3_state_t, kept out of this header
};

// 16 lowercase hex digits, and back.
std::string ChecksumToHex(uint64_t value);
std::optional<uint64_t> ChecksumFromHex(const std::string& hex);

}  // namespace viper
