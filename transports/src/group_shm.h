// Internal: the sharded groups' shared-memory link (group.h, "Links"). Each
// producer rank owns a ring of `slots` slots (ShmSegment, as the host
// tier's); per version it copies its shard image into the ring a bucket
// (`bucket_bytes` of its image) at a time and sends every consumer rank a
// ReadyMsg for each bucket; each consumer rank copies its bytes of that
// bucket out of the ring, checks the digest and answers a ReleaseMsg.
//
// A piece is one producer rank's bytes of one bucket for one consumer rank,
// in the producer's image order; its digest is XXH3 of those bytes in that
// order. A slot holds a bucket's pieces one after the other in consumer rank
// order (not the image itself): the producer scatters its image's runs into
// them as it copies (a column split's 2 KiB runs included) and hashes each
// piece contiguously, a consumer rank reads its piece as one contiguous
// range. Bytes no consumer rank takes from this producer are not copied; a
// byte several consumer ranks take (a tensor they replicate) is copied once
// per taker, so a slot is the largest bucket's pieces together: the bucket,
// or less, or, where consumers replicate, up to Q times it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "group_internal.h"
#include "shm_segment.h"

namespace viper {
namespace transports {
namespace internal {

// Consumer rank -> producer rank: bucket `bucket` of `version` copied out.
inline constexpr int kGroupTagRelease = 8;
// Producer rank -> consumer rank, on DataTag(version): bucket `bucket` is
// in its slot (bucket % slots); `digest`: that consumer's bytes in it;
// `shard_checksum`: on the last bucket, XXH3 of the producer's shard image.
struct ReadyMsg {
  uint64_t magic = kMagic;
  uint64_t version = 0;
  uint64_t bucket = 0;
  uint64_t digest = 0;
  uint64_t shard_checksum = 0;
};
struct ReleaseMsg {
  uint64_t magic = kMagic;
  uint64_t version = 0;
  uint64_t bucket = 0;
};

// One side's end of the link, made at Create.
struct ShmLink {
  uint64_t bucket_bytes = 0;  // of a producer's image, the same for every producer rank
  int slots = 0;              // 1 or 2
  int consumers = 0;
  std::vector<uint64_t> buckets;     // per producer rank: buckets of its shard, >= 1
  std::vector<uint64_t> slot_bytes;  // per producer rank: its largest bucket's pieces, >= 1
  // Per producer rank, [bucket * consumers + c]: where consumer rank c's
  // piece starts in the slot; [.. + consumers]: the bucket's total.
  std::vector<std::vector<uint64_t>> piece_offsets;
  uint64_t PieceOffset(int p, uint64_t bucket, int c) const {
    return piece_offsets[p][bucket * (consumers + 1) + c];
  }
  uint64_t PieceBytes(int p, uint64_t bucket, int c) const {
    return PieceOffset(p, bucket, c + 1) - PieceOffset(p, bucket, c);
  }
  std::unique_ptr<ShmSegment> own;                 // producer: its ring
  std::vector<std::unique_ptr<ShmSegment>> rings;  // consumer: every producer rank's, mapped read-only
  uint64_t RingBytes(int p) const { return slot_bytes[p] * static_cast<uint64_t>(slots); }
};

// Collective over both groups (after MakeGroup): decides the link from
// every rank's `link` and whether all are on one node; for shm, producer
// ranks make their rings (`bucket_bytes`, `slots`: producer rank 0's) and
// consumer ranks map them. nullptr: MPI. An error: kMpi and kShm asked
// together, or kShm asked where it cannot be had.
StatusOr<std::unique_ptr<ShmLink>> MakeShmLink(const GroupSetup& g, bool producer, GroupLink link,
                                               uint64_t bucket_bytes, int slots);

// XXH3 of a sequence of runs, the same digest however they are cut: runs
// shorter than kDirectBytes are gathered in a small buffer (in cache) and
// hashed from there, longer ones directly (XXH3 on short inputs costs
// several times its contiguous rate).
class RunHasher {
 public:
  static constexpr uint64_t kDirectBytes = 16 << 10;
  static constexpr uint64_t kGatherBytes = 64 << 10;
  RunHasher() : gather_(kGatherBytes) {}
  void Add(const std::byte* data, uint64_t bytes);
  uint64_t Digest();  // flushes; then no more Add

 private:
  void Flush();
  Xxh3Hasher hasher_;
  std::vector<std::byte> gather_;
  uint64_t used_ = 0;
};

// `copies` sorted by source offset (the order pieces are hashed in).
std::vector<ByteCopy> BySource(std::vector<ByteCopy> copies);

// Producer rank `g.rank`: writes `shard` (valid for the layout) into its
// ring bucket by bucket, announcing each to every consumer rank, and waits
// until every consumer rank has released every bucket; gives up `timeout_s`
// after it began.
struct ShmSent {
  bool sent = false;  // every consumer rank released every bucket
  uint64_t sent_bytes = 0;
  uint64_t shard_checksum = 0;
  std::string message;
};
// `announced`, if set, runs after each bucket's Ready messages (its
// number); false: stop there (tests' faults).
ShmSent ShmSend(const GroupSetup& g, ShmLink* link, const ModelState& shard, uint64_t version,
                double timeout_s, const std::function<bool(uint64_t)>& announced = nullptr);

// Consumer rank `g.rank`: every producer rank's buckets of `version`,
// copied to where `dst` says (the blocks of [offset, offset + bytes) of this
// rank's image), `first_copy` run once before the first byte is written,
// `idle` between polls; each piece checked against its digest. `whole`:
// the version's checksum (from the producers' shard checksums). False (and
// *message) when a piece is late or wrong.
bool ShmReceive(const GroupSetup& g, const ShmLink& link, uint64_t version, double deadline_s,
                const std::function<void(uint64_t, uint64_t, std::vector<Block>*)>& dst,
                const std::function<void()>& first_copy, const std::function<void()>& idle,
                uint64_t* received_bytes, uint64_t* whole, std::string* message);

}  // namespace internal
}  // namespace transports
}  // namespace viper
