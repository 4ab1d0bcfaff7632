// Internal: the parts of the sharded groups (group.h) both halves use: the
// messages, the setup both groups make together, and the helpers that cut a
// plan into windows and move them as MPI hindexed types. group.cc defines
// them; group_publisher.cc and group_subscriber.cc are the two halves.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backoff.h"
#include "mpi_link.h"
#include "viper/transports/group.h"
#include "viper/transports/sharding.h"
#include "viper/transports/types.h"

namespace viper {
namespace transports {
namespace internal {

inline constexpr uint64_t kMagic = 0x5649505253484431ull;  // "VIPRSHD1"
inline constexpr int kGroupTagDecide = 1;
inline constexpr int kGroupTagHeader = 2;
inline constexpr int kGroupTagVote = 3;
inline constexpr int kGroupTagCommit = 4;
inline constexpr int kGroupTagAck = 5;
// A consumer rank in doubt (it voted yes and heard no decision) -> consumer
// rank 0: what did you decide for this version (Query); rank 0's answer
// (Answer, yes 1 or 0), from its record of decisions.
inline constexpr int kGroupTagQuery = 6;
inline constexpr int kGroupTagAnswer = 7;
inline constexpr int kGroupTagDataBase =
    16384;  // + version % 16384: a late piece of a failed version never matches a later one
inline constexpr int kGroupCreateTag = 2811;  // MPI_Comm_create_group

inline int DataTag(uint64_t version) { return kGroupTagDataBase + static_cast<int>(version % 16384); }

// Producer rank 0 -> the other producer ranks, once per step.
struct DecideMsg {
  uint64_t magic = kMagic;
  uint64_t version = 0;
  int64_t iteration = 0;
  uint64_t publish = 0;
};
// Consumer rank -> consumer rank 0 (Vote); consumer rank 0 -> the other
// consumer ranks (Commit) and -> producer rank 0 (Ack).
struct VoteMsg {
  uint64_t magic = kMagic;
  uint64_t version = 0;
  uint64_t yes = 0;
  uint64_t whole_checksum = 0;
};
// The header a producer rank sends each consumer rank: these fields, then
// one digest per window of the consumer's image (0 where it sends nothing).
inline constexpr int kHeaderFields = 7;  // magic, version, iteration, shard digest, valid, producer, windows

// "1.234" (seconds, for messages).
std::string Seconds(double s);

// Both groups' view of the job: the union communicator and who is where.
struct GroupSetup {
  MPI_Comm all = MPI_COMM_NULL;  // union of both groups, never freed (as the control's)
  std::vector<int> producers;    // union rank of each producer rank
  std::vector<int> consumers;    // union rank of each consumer rank
  int rank = 0;                  // in this side's group
  ShardLayout p_layout, q_layout;
  TransferPlan plan;
  uint64_t window_bytes = 0;  // the consumers' window (bucket or chunk)
};

// Collective over both groups: the union communicator, both layouts (each
// group's rank 0 sends its own; every rank checks its layout is that one),
// the consumers' window size (`window_bytes`, the consumer side's), the plan.
StatusOr<GroupSetup> MakeGroup(const GroupRanks& ranks, bool producer, const ShardLayout& mine,
                               uint64_t window_bytes);

// `text` from `root` to every rank of `comm`.
Status BcastText(MPI_Comm comm, int root, std::string* text);
// Collective over the union: Ok on every rank when `local` is Ok on every
// rank; else the lowest failing rank's error (its message prefixed with its
// side and rank) on every rank.
Status Agree(const GroupSetup& g, bool producer, const Status& local);
// How many ranks of the union share this rank's node (`on_node`) of how
// many (`everyone`).
Status NodeCount(const GroupSetup& g, int* on_node, int* everyone);

// Windows of `window` bytes covering `bytes`.
inline uint64_t Windows(uint64_t bytes, uint64_t window) { return (bytes + window - 1) / window; }

// The copies of `copies` (sorted by destination) that fall in [lo, hi) of
// the destination, clipped to it.
std::vector<ByteCopy> Clip(const std::vector<ByteCopy>& copies, uint64_t lo, uint64_t hi);

// Memory blocks of a shard image held as separate tensors: [offset, offset
// + bytes) of the image, split at tensor boundaries.
struct Block {
  std::byte* data;
  uint64_t bytes;
};

// Appends the blocks of [offset, offset + bytes) of rank `rank`'s shard
// image, held as the separate tensors of `shard`.
void AppendBlocks(const ModelState& shard, const ShardLayout& layout, int rank, uint64_t offset,
                  uint64_t bytes, std::vector<Block>* out);
// XXH3 of the blocks in order.
uint64_t HashBlocks(const std::vector<Block>& blocks);
// An MPI type covering `blocks` at their absolute addresses (use with
// MPI_BOTTOM). Each block < 2 GiB (a window is).
StatusOr<MPI_Datatype> BlocksType(const std::vector<Block>& blocks);
// How a piece (one producer rank's bytes of one window of a consumer rank's
// image) travels: each copy of at least kOwnMessageBytes as its own message
// (contiguous on the producer; Open MPI's shared-memory transport copies
// those once, on the receiver, with CMA); the smaller ones (a column
// split's runs) as a byte stream in plan order, cut into messages of at
// most kGatherMessageBytes, each an hindexed type on the producer (Open MPI
// packs it through its shared-memory fragments) and, where the runs are
// contiguous on the consumer (a column split's rows are), one contiguous
// block there (Coalesce), posted first. Both sides cut the same copies the
// same way; the piece's digest covers all of them in order.
inline constexpr uint64_t kOwnMessageBytes = 64 << 10;
inline constexpr uint64_t kGatherMessageBytes = 4 << 20;
std::vector<std::vector<ByteCopy>> Messages(const std::vector<ByteCopy>& copies);
// Merges blocks adjacent in memory.
std::vector<Block> Coalesce(const std::vector<Block>& blocks);
// Posts `blocks` as one message (MPI_Isend / MPI_Irecv): contiguous bytes
// when it is one block, else an hindexed type.
Status PostBlocks(bool send, const std::vector<Block>& blocks, int peer, int tag, MPI_Comm comm,
                  MPI_Request* request);

// Waits for `requests` until all complete or `deadline_s`; `completed(i)`
// runs once per request as it completes, `idle`, if set, between polls. On
// the deadline the rest are cancelled and freed, and false is returned.
bool WaitAll(std::vector<MPI_Request>* requests, double deadline_s, const std::function<void(int)>& completed,
             const std::function<void()>& idle = nullptr);

// Receives T messages from `source` with `tag` until one with our magic for
// which `wanted` holds (others are stale: dropped), or `deadline_s`.
// `idle`, if set, runs between polls (consumer rank 0 answers queries).
template <typename T>
bool WaitPod(MPI_Comm comm, int source, int tag, double deadline_s, T* msg,
             const std::function<bool(const T&)>& wanted, const std::function<void()>& idle = nullptr) {
  Backoff backoff(100);
  while (true) {
    auto got = internal::TryRecvPod(comm, source, tag, msg);
    if (!got.ok()) return false;
    if (*got && msg->magic == kMagic && wanted(*msg)) return true;
    if (*got) continue;  // stale or foreign: next
    if (MonotonicSeconds() > deadline_s) return false;
    if (idle) idle();
    backoff.Pause();
  }
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
