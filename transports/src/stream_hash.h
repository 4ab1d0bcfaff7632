// Internal: XXH3-64 of a data section computed while it moves. The producer
// hashes its ranges in bounded slices between MPI calls; the consumer hashes
// each chunk as soon as it has landed, on a worker thread, while the next
// chunks are still arriving. Both digests equal Xxh3_64 of the concatenation.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "viper/core/checksum.h"

namespace viper {
namespace transports {
namespace internal {

// `size` bytes at `data`.
struct ByteRange {
  const std::byte* data = nullptr;
  uint64_t size = 0;
};

// Hashes `ranges` in order: on a worker thread when `use_thread` (the
// caller's thread is then free for MPI progress, which on a shared-memory
// transport without single-copy is the copy itself), else a slice at a time
// in Step on the calling thread.
class SliceHasher {
 public:
  SliceHasher(std::vector<ByteRange> ranges, bool use_thread);
  ~SliceHasher();  // stops the worker (the digest is then lost)
  SliceHasher(const SliceHasher&) = delete;
  SliceHasher& operator=(const SliceHasher&) = delete;

  // Inline: hashes up to `max_bytes` more. Returns false when there was no
  // work for the caller (all hashed, or the worker is hashing).
  bool Step(uint64_t max_bytes);
  bool done() const { return done_.load(std::memory_order_acquire); }
  // The digest of all ranges; only once done().
  uint64_t Digest() const;

 private:
  void Hash(uint64_t max_bytes);  // up to max_bytes more; sets done_ at the end

  std::vector<ByteRange> ranges_;
  std::size_t index_ = 0;  // range being hashed
  uint64_t offset_ = 0;    // within it
  Xxh3Hasher hasher_;
  std::atomic<bool> done_{false};
  std::atomic<bool> stop_{false};
  std::thread worker_;
};

// CPUs this process may run on (its affinity mask), at least 1.
int UsableCpus();
// Whether that is more than one, so that a hashing thread runs beside the
// MPI thread instead of taking turns.
inline bool HaveSpareCpu() { return UsableCpus() > 1; }

// Hashes [base, base + landed) as `landed` grows: on a worker thread when
// `use_thread`, else inline in Landed. The bytes below `landed` must not
// change until Finish returns or the hasher is destroyed.
class LandingHasher {
 public:
  LandingHasher(const std::byte* base, bool use_thread);
  ~LandingHasher();  // joins the worker once it has hashed what had landed
  LandingHasher(const LandingHasher&) = delete;
  LandingHasher& operator=(const LandingHasher&) = delete;

  // The first `end` bytes have landed (monotonic).
  void Landed(uint64_t end);
  // Waits until every landed byte is hashed; returns the digest of them.
  uint64_t Finish();

 private:
  void Run();

  const std::byte* base_;
  Xxh3Hasher hasher_;
  uint64_t hashed_ = 0;  // owned by the worker (or the caller when inline)
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t landed_ = 0;  // guarded by mu_
  bool stop_ = false;    // guarded by mu_
  std::thread worker_;
};

}  // namespace internal
}  // namespace transports
}  // namespace viper
