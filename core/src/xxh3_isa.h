// Internal: XXH3-64 from xxhash's own code (xxhash.h with XXH_INLINE_ALL),
// compiled once per x86-64 vector extension. Debian's libxxhash is built for
// the baseline (SSE2), and xxhash's runtime dispatcher (xxh_x86dispatch.c) is
// not packaged; the same code built with -mavx2 hashes about 3x faster from
// cache, which matters because every received version is hashed in full.
// Digests are identical across extensions (XXH3 is defined on the bytes, not
// on the vector width). checksum.cc picks one per process.
//
// The xxh3_*.cc files include nothing but <xxhash.h> and <cstddef>/<cstdint>:
// a C++ inline function emitted in a file built with -mavx2 could be the copy
// the linker keeps for the whole program.
#pragma once

#include <cstddef>
#include <cstdint>

namespace viper {
namespace internal {

struct Xxh3Isa {
  const char* name;  // "sse2", "avx2", "avx512"
  uint64_t (*oneshot)(const void* data, std::size_t size);
  void* (*create)();  // a reset XXH3_state_t, or nullptr (out of memory)
  void (*destroy)(void* state);
  void (*update)(void* state, const void* data, std::size_t size);
  uint64_t (*digest)(const void* state);
};

extern const Xxh3Isa kXxh3Baseline;  // the compiler's default target
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VIPER_XXH3_X86_VARIANTS 1
extern const Xxh3Isa kXxh3Avx2;
extern const Xxh3Isa kXxh3Avx512;
#endif

}  // namespace internal
}  // namespace viper
