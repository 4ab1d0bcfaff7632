// Internal: the host tier's shared-memory protocol (HostProtocol::kShm).
// The producer owns one POSIX shared-memory segment; consumers on its node
// map it (consumers on other nodes, or that cannot map it, get the version
// over the two-sided protocol instead). For each version the producer copies the data section into the
// segment (after the header's room) and hashes each block right after
// copying it, publishing its progress in the segment's control page; each
// consumer copies the landed bytes out into its own landing buffer, hashing
// them the same way, while the producer is still writing. The header, with
// viper.checksum, is written last. So each side reads the bytes once and
// hashes them from cache, and no MPI message carries data.
//
// Lifetime: the producer creates the segment under a unique name, announces
// the name, and unlinks it once every consumer has mapped it, so a crash
// leaves nothing behind in /dev/shm after the first handshake. Its pages are
// reserved with posix_fallocate: a full /dev/shm is an error at creation,
// not a SIGBUS mid-copy.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stream_hash.h"  // ByteRange
#include "viper/core/checksum.h"
#include "viper/core/status.h"

namespace viper {
namespace transports {
namespace internal {

// The segment's first page. The producer writes; consumers only read.
struct ShmControl {
  uint64_t magic = 0;                   // kShmMagic once initialised
  std::atomic<uint64_t> version{0};     // version being written (set before it is announced)
  std::atomic<uint64_t> data_bytes{0};  // bytes of its data section written so far
  std::atomic<uint64_t> complete{0};    // version + 1 once its header is written too
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");
constexpr uint64_t kShmMagic = 0x3176'6d68'7372'7076ull;  // "vpershm1"
constexpr uint64_t kShmControlBytes = 4096;

class ShmSegment {
 public:
  // Creates `name` (e.g. "/viper-..."; must not exist) with room for
  // `payload_bytes` after the control page, reserved and mapped read-write
  // (page tables filled at once, as in Open).
  static StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name, uint64_t payload_bytes);
  // Maps an existing segment read-only; it must hold `payload_bytes`.
  static StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name, uint64_t payload_bytes);
  ~ShmSegment();  // unmaps; the creator also unlinks the name if still linked
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name (mappings stay valid). Idempotent.
  void Unlink();

  const std::string& name() const { return name_; }
  uint64_t payload_bytes() const { return payload_bytes_; }
  ShmControl* control() const { return reinterpret_cast<ShmControl*>(base_); }
  std::byte* payload() const { return base_ + kShmControlBytes; }

 private:
  ShmSegment(std::string name, std::byte* base, uint64_t payload_bytes, bool owner)
      : name_(std::move(name)), base_(base), payload_bytes_(payload_bytes), owner_(owner) {}

  std::string name_;
  std::byte* base_ = nullptr;
  uint64_t payload_bytes_ = 0;
  bool owner_ = false;
  bool linked_ = true;
};

// Removes the segments "/viper-<pid>-..." of this user whose producer
// (`pid`, on this host: /dev/shm is per node) is dead: a producer killed
// between creating its segment and every consumer's first Ready leaves one.
// Returns their names.
std::vector<std::string> RemoveDeadSegments(const std::string& shm_dir = "/dev/shm");

// One version written into a segment: copies `ranges` (the data section, in
// order) after the header's room a step at a time, hashing as it copies and
// publishing its progress after each step; then Complete writes the header.
// Sets the control page's version (and resets the progress) on construction,
// so construct it before the version is announced.
class ShmWriter {
 public:
  ShmWriter(ShmSegment* segment, std::vector<ByteRange> ranges, uint64_t header_bytes, uint64_t version);
  // Copies up to `max_bytes` more. Returns false when there was nothing left.
  bool Step(uint64_t max_bytes);
  bool done() const { return index_ >= ranges_.size(); }
  // XXH3-64 of the data section; only once done().
  uint64_t Digest() const { return hasher_.Digest(); }
  // Writes the header (header_bytes at `header`) and marks the version complete.
  void Complete(const std::byte* header);

 private:
  ShmSegment* segment_;
  std::vector<ByteRange> ranges_;
  uint64_t header_bytes_;
  uint64_t version_;
  std::size_t index_ = 0;  // range being copied
  uint64_t offset_ = 0;    // within it
  uint64_t written_ = 0;   // data bytes copied so far
  Xxh3Hasher hasher_;
};

// Copies `bytes` from `src` to `dst` a block at a time, hashing each block of
// `dst` into `hasher` right after it is copied (while it is in cache).
constexpr std::size_t kCopyHashBlockBytes = 128 * 1024;
void CopyAndHash(std::byte* dst, const std::byte* src, std::size_t bytes, Xxh3Hasher* hasher);

}  // namespace internal
}  // namespace transports
}  // namespace viper
