// Sharded producers and re-sharded consumers (issue 28), host tier: over
// shared memory when both groups are on one node, else two-sided MPI; GPU
// tier: CUDA IPC between ranks sharing a node (link kGpu, below).
//
// A producer group of P ranks publishes one version together, each rank its
// shard of a ShardLayout; a consumer group of Q ranks with its own layout
// receives it, each rank exactly its slices (TransferPlan, computed once at
// creation), from all producer ranks in parallel, verifies them and the
// group swaps all its ranks to the version together or not at all.
//
//   producers (P ranks)                      consumers (Q ranks)
//   rank 0 decides: Decide -> ranks 1..P-1
//   each: header (version, shard digest,  -> each consumer rank: all headers,
//         one digest per window per pair)      then the windows' bytes from
//   each: the windows' bytes (an MPI             every producer at once,
//         hindexed type straight from the        each piece hashed and checked
//         tensors, no staging copy)            Vote -> consumer rank 0
//                                              consumer rank 0: Commit (yes
//                                              only if every rank voted ok for
//                                              the version) -> ranks 1..Q-1
//   producer rank 0 <- Ack (committed,       <- consumer rank 0
//                    whole checksum)
//
// The group swaps together or not at all: consumer rank 0 alone decides,
// and records its decision before sending it. A consumer rank that voted
// yes and hears no decision in time is in doubt (Summary::in_doubt): it
// serves nothing, neither the old version nor the new, until it learns the
// decision (at its next ReceiveNext it asks consumer rank 0, which answers
// while in ReceiveNext itself) or a later version commits. So no two
// consumer ranks ever serve different versions; a rank in doubt whose rank
// 0 is gone for good serves nothing for good.
//
// Checksums: XXH3-64. A producer rank's shard checksum is XXH3 of its shard
// image (its tensors in layout order); the checksum of the whole version is
// XXH3 of the P shard checksums (little-endian uint64, producer rank order),
// computed by every consumer rank from the headers and carried back to
// producer rank 0 in the Ack. What a consumer verifies before its vote is
// finer: every piece it receives (one producer rank's bytes of one window of
// its image) against the digest the producer computed over the same bytes
// in the same order.
//
// Memory. Default: a consumer rank receives into a back buffer of its shard
// size and swaps it in (the double buffer). Bounded (`bucket_bytes` > 0 and
// a target): on the MPI link it receives one window of `bucket_bytes` at a
// time into a staging buffer of that size, verifies it and copies it into
// the target tensors it owns (its engine's parameters); on the shm link it
// copies straight from the producers' rings into them and verifies as it
// goes (no staging); on the gpu link (the target is then device tensors on
// gpu_device) it copies every run device to device straight from the
// producers' staging buffers into them and checks every piece's sum64
// where it landed (no staging either). Serving pauses from the first copy
// to the group's commit decision (Serve returns false meanwhile; the
// summary says how long). If the group then does not commit, the target
// holds parts of two versions and the rank serves nothing until a version
// commits (never a mix).
//
// Links (Options::link, decided together at Create). kMpi: the bytes as
// above. kShm (every rank of both groups on one node): each producer rank
// owns a shared-memory ring of `ring_buckets` (1 or 2) slots; it copies its
// shard image into the ring a bucket (`bucket_bytes` of the image) at a
// time, each slot holding the bucket's pieces for consumer rank 0, 1, ...
// one after the other (the runs scattered as they are copied, each piece
// hashed contiguously while in cache, with the shard checksum), and tells
// every consumer rank over MPI (Ready: the bucket, the digest of that
// consumer's piece); each consumer rank copies its piece, one contiguous
// range, straight out of the ring into its back buffer (bounded: its
// target tensors, no staging bucket), hashes it, checks the digest and
// tells the producer (Released) so that it can reuse the slot. Only these
// small messages travel on MPI. The ring is the bytes a producer rank holds
// beyond its shard: one slot (the producer waits for every consumer before
// writing the next bucket) or two (it writes one while the consumers copy
// the other); a slot is a bucket, less where some of the bucket goes to no
// consumer, more where consumer ranks replicate a tensor (each taker's copy
// is in the slot). The shard checksum comes with the last Ready.
// kGpu (every rank of both groups on one node, each with a CUDA device):
// each producer rank owns a device staging buffer of
// its shard size, allocated at Create and exported once by CUDA IPC (the
// handle and an interprocess event, exchanged over MPI at Create; the
// allocation never changes, since a shard's size is the layout's). Per
// version it copies its tensors (host or device memory alike, as the gpu
// tier's producer does) into it, records the event, computes on the device
// the sum64 (device_checksum.h) of its shard image and of every piece (its
// bytes of one window of a consumer rank's image, in plan order) and sends
// the headers. Each consumer rank has mapped the staging buffers of the
// producer ranks it takes bytes from (per the plan); it waits on their
// events and copies exactly its runs device to device into a device back
// buffer (strided runs, a column split's rows, as one cudaMemcpy2DAsync),
// tells each producer (Released) that it may reuse its staging buffer,
// checks every piece's sum64 on the device and votes; the same two-phase
// commit decides, and the served version's tensors are device memory.
// Bounded (a target of device tensors on gpu_device, checked at Create on
// every rank together: a host target is refused naming the tensor): the
// runs go straight into the target's tensors instead (strided copies
// never cross a tensor), the pieces are hashed there, no back buffer.
// On this link a piece's digest and a producer's shard checksum are sum64,
// not XXH3 (the whole checksum is still XXH3 of the P shard checksums).
// Publish returns once every consumer rank released the staging buffer.
// kAuto: kShm when every rank of both groups is on one node and every
// producer's ring could be made and mapped, else kMpi. kAuto never picks
// kGpu: where a consumer's versions live (host or device memory) is the
// consumer's choice, so it asks for kGpu (any rank asking for it decides
// it for all; kAuto elsewhere follows). Every guarantee
// above holds on both links (a producer killed mid-version: the consumers
// time out waiting for its next Ready and the group commits nothing).
// Segments are named "/viper-<pid>-grp...", created with O_EXCL and mode
// 0600 and unlinked once every consumer rank has mapped them (as the host
// tier's: a producer killed before that leaves its segment until a later
// producer on the node removes it, RemoveDeadSegments).
//
// Both groups are made together: every producer and consumer rank calls
// Create (collective over the union of both groups, MPI_Comm_create_group),
// groups of one job made one pair at a time in the same order everywhere.
// MPI must be initialised with MPI_THREAD_MULTIPLE (MpiSession). Without MPI
// Create returns Unavailable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "viper/core/model_state.h"
#include "viper/core/status.h"
#include "viper/transports/sharding.h"

namespace viper {
namespace transports {

// Which ranks of MPI_COMM_WORLD make up the two groups (disjoint; group rank
// i is the i-th entry).
struct GroupRanks {
  std::vector<int> producers;
  std::vector<int> consumers;
  // Checks: both non-empty, no rank twice, every rank in [0, world_size).
  bool IsValid(int world_size, std::string* error) const;
};

// How the bytes travel (see above). The same on every rank of both groups,
// or kAuto on some: two different explicit links (kMpi, kShm, kGpu) is an
// error.
enum class GroupLink { kAuto, kMpi, kShm, kGpu };
const char* GroupLinkName(GroupLink link);  // "auto", "mpi", "shm", "gpu"

class ShardedPublisher {
 public:
  struct Options {
    GroupLink link = GroupLink::kAuto;
    // shm link: the bucket, bytes of a producer's shard image per slot (0:
    // the consumers' window, their bucket_bytes in bounded mode, else
    // chunk_bytes; never more than the largest producer shard), and the
    // ring's slots (1 or 2: 1, the default, keeps what a producer holds
    // beyond its shard to one bucket; 2 lets it write one bucket while the
    // consumers copy the other, for twice the memory). Producer rank 0's
    // values hold for every producer rank.
    uint64_t bucket_bytes = 0;
    int ring_buckets = 1;
    // Every wait on another rank (the decision, a send, the Ack) gives up
    // after this long; the version is then not delivered.
    double peer_timeout_s = 30;
    // How long a producer rank other than 0 waits in Publish for rank 0's
    // decision (rank 0 may still be training, or finishing the previous
    // version's wait for the consumers).
    double decision_timeout_s = 600;
    // gpu link: the CUDA device this rank stages its shard on.
    int gpu_device = 0;
    bool IsValid(std::string* error) const;
  };

  struct Summary {
    bool published = false;       // false: rank 0 decided not to publish
    uint64_t version = 0;         // the group's version number (from 1)
    uint64_t shard_checksum = 0;  // XXH3 of this rank's shard image
    uint64_t sent_bytes = 0;      // bytes this rank sent (its planned bytes, or fewer on failure)
    bool sent = false;            // every send of this rank completed
    // Producer rank 0 only (the others: false / 0): whether the consumer
    // group committed the version, and the whole version's checksum as the
    // consumers computed it.
    bool committed = false;
    uint64_t whole_checksum = 0;
    double update_s = 0;      // Publish start to return (rank 0: to the Ack)
    uint64_t ring_bytes = 0;  // shm link: the ring this rank holds beyond its shard (0: MPI)
    std::string message;      // what went wrong, if anything
    std::string BriefReport() const;
  };

  // Collective with the consumers' ShardedSubscriber::Create. `layout` is the
  // producer layout (the same on every producer rank).
  static StatusOr<std::unique_ptr<ShardedPublisher>> Create(const GroupRanks& ranks,
                                                            const ShardLayout& layout,
                                                            const Options& options);
  ~ShardedPublisher();

  // Publishes this rank's `shard` (its slices, CheckShard) if producer rank
  // 0's `publish` is true (the others' is ignored: they follow rank 0's
  // decision). Every producer rank calls it once per step. Returns when
  // this rank's sends are done (the shard may change then) and, on rank 0,
  // the consumers' Ack has arrived. An error: bad input, or MPI itself
  // failed; a version the consumers did not take is a Summary with
  // committed = false.
  StatusOr<Summary> Publish(const ModelState& shard, int64_t iteration, bool publish = true);

  int rank() const;  // in the producer group
  const TransferPlan& plan() const;
  GroupLink link() const;  // the link decided at Create: kMpi, kShm or kGpu

  class Impl;
  Impl* impl_for_testing() { return impl_.get(); }  // src/group_testing.h

 private:
  explicit ShardedPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One committed version as a consumer rank serves it: its slices.
struct ShardVersion {
  uint64_t version = 0;
  int64_t iteration = 0;
  uint64_t whole_checksum = 0;  // the group version's (see above)
  ModelState state;             // this rank's slices (views into the buffer, or the target's tensors)
};

class ShardedSubscriber {
 public:
  struct Options {
    GroupLink link = GroupLink::kAuto;  // see ShardedPublisher::Options::link
    // Every wait on another rank once a version has begun gives up after
    // this long (the version is then not committed anywhere).
    double peer_timeout_s = 30;
    // 0: double buffer (a back buffer of the shard size). > 0: bounded
    // mode, receiving into the target tensors through a staging buffer of
    // this many bytes (needs a target; the shm link copies straight from
    // the producers' rings into the target, the gpu link from the
    // producers' device staging buffers, no staging: there it is the window
    // each piece digest covers). The same on every consumer rank.
    uint64_t bucket_bytes = 0;
    // Double buffer: the largest message (each < 2 GiB); on the gpu link,
    // the window each piece digest covers.
    uint64_t chunk_bytes = 64ull << 20;
    // gpu link: the CUDA device this rank's back buffers (and so the served
    // versions' tensors) live on; bounded, the device the target's tensors
    // must be on.
    int gpu_device = 0;
    bool IsValid(std::string* error) const;
  };

  struct Summary {
    bool received = false;  // a version began (headers arrived)
    uint64_t version = 0;
    bool verified = false;        // this rank's pieces all matched their digests
    bool committed = false;       // the group swapped to it
    uint64_t received_bytes = 0;  // bytes that landed on this rank
    uint64_t slice_bytes = 0;     // this rank's slices (the layout)
    uint64_t staging_bytes = 0;   // extra memory this rank held for the version (back buffer or bucket)
    double receive_s = 0;         // first header to the last piece verified
    double commit_s = 0;          // the vote and decision
    double pause_s = 0;           // bounded mode: serving paused (first copy to decision)
    bool serving = false;         // a version is served after this call
    // This rank voted yes for `version` and heard no decision within the
    // deadline: it serves nothing (neither the old version nor the new)
    // until it learns the decision (from consumer rank 0, at its next
    // ReceiveNext) or a later version commits.
    bool in_doubt = false;
    // Set when this call first settled an earlier version this rank was in
    // doubt about: that version, and whether the group had committed it
    // (then this rank served it from here, until this call's version).
    uint64_t resolved_version = 0;
    bool resolved_committed = false;
    std::string message;
    std::string BriefReport() const;
  };

  // Collective with the producers' ShardedPublisher::Create. `layout` is
  // this group's layout (its tensors the producers', in their order).
  // `target`, in bounded mode: this rank's tensors to receive into
  // (CheckShard against `layout`; host memory, device memory on
  // gpu_device on the gpu link), owned by the caller and outliving this
  // object; nullptr in double-buffer mode.
  static StatusOr<std::unique_ptr<ShardedSubscriber>> Create(const GroupRanks& ranks,
                                                             const ShardLayout& layout,
                                                             const Options& options,
                                                             ModelState* target = nullptr);
  ~ShardedSubscriber();

  // Receives the next version: waits up to `wait_s` for it to begin, then
  // takes part in the group's commit. Every consumer rank calls it once per
  // published version. NotFound when no version began within `wait_s`.
  // A rank in doubt about an earlier version first asks consumer rank 0 for
  // its decision (waiting up to min(wait_s, peer_timeout_s); rank 0 answers
  // while it is in ReceiveNext itself).
  StatusOr<Summary> ReceiveNext(double wait_s);

  // Calls `fn` with the version this rank serves, holding it stable for the
  // call; false (fn not called) when none is served (none yet, bounded mode
  // mid-commit, or after a failed bounded commit).
  bool Serve(const std::function<void(const ShardVersion&)>& fn) const;
  // Double-buffer mode: the served version (kept alive by the pointer);
  // nullptr when none is, and always in bounded mode (use Serve).
  std::shared_ptr<const ShardVersion> Current() const;
  uint64_t version() const;  // served version, 0: none

  int rank() const;  // in the consumer group
  const TransferPlan& plan() const;
  GroupLink link() const;  // the link decided at Create: kMpi, kShm or kGpu

  class Impl;
  Impl* impl_for_testing() { return impl_.get(); }  // src/group_testing.h

 private:
  explicit ShardedSubscriber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace transports
}  // namespace viper
