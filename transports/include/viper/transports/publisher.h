// The producer side of the transfer engine. One Publisher (usually on rank 0)
// sends each published version to the Subscribers on the other ranks (host or
// GPU tier over MPI) or writes it to the PFS directory (pfs tier), and tells
// them (push) or lets them find it (poll).
//
//   auto pub = Publisher::Create(options);          // collective with the Subscribers
//   auto report = pub->Publish(model, iteration);   // returns when training may go on
//   pub->Close();                                   // flushes (async) and says goodbye
//
// The gpu tier stages each version in device memory (two buffers in async
// mode) and checksums it there (sum64); consumers on the same node copy it
// device-to-device by CUDA IPC, others through a pipeline of pinned host
// chunks over MPI. Its transfer_s lasts until every consumer has its copy
// (the staging buffer is reused only then).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/model_state.h"
#include "viper/core/status.h"
#include "viper/transports/pfs_store.h"
#include "viper/transports/types.h"

namespace viper {
namespace transports {

// Version-aware delta updates (issue 27): whether a consumer that holds the
// base the producer kept receives only what changed (viper/transports/delta.h).
enum class DeltaMode {
  kOff,   // every version whole
  kAuto,  // a delta where a consumer holds the base, the delta is smaller and
          // it is predicted faster over that consumer's link (host: per
          // consumer on another node, from measured rates: encode + delta
          // bytes / link + apply < image bytes / link; the first version to
          // a consumer is full, it measures the link; on the producer's node,
          // shm or two-sided, the link is shared memory and the full copy is
          // faster than diff + apply); pfs: off
  kOn,    // a delta whenever one is smaller, shm consumers and pfs included
};
const char* ToString(DeltaMode mode);  // "off", "auto", "on"
std::optional<DeltaMode> DeltaModeFromString(const std::string& name);

class Publisher {
 public:
  struct Options {
    Tier tier = Tier::kHost;                 // gpu | host | pfs
    Mode mode = Mode::kAsync;                // sync | async
    Notify notify = Notify::kPush;           // push | poll (poll needs tier pfs)
    // host tier: shm (default; consumers on this node copy each version out
    // of shared memory, the others get it over MPI as with two-sided),
    // two-sided or one-sided (the Subscribers must say one-sided too). See
    // HostProtocol in types.h. Where the shared segment cannot be made (e.g.
    // /dev/shm too small) shm warns once and sends two-sided.
    HostProtocol host_protocol = HostProtocol::kShm;
    // MPI: bytes per message or MPI_Put; keeps each under the 2 GiB int count.
    uint64_t chunk_bytes = 64ull << 20;
    // MPI: chunks in flight per consumer.
    int max_inflight_chunks = 8;
    // Staging buffer capacity reserved up front (header + data); grown on the
    // first larger publish. 0 = size it on the first publish. Unused (not
    // allocated) in sync mode with tier host and the two-sided or shm
    // protocol, which send straight from the tensors. With shm the shared
    // segment is also made in Create, of this size.
    uint64_t staging_bytes = 0;
    // Async mode, host and pfs tiers: threads that copy the tensors into the
    // staging buffer (the stall), each a large contiguous piece (at least
    // 4 MiB: smaller snapshots use fewer threads). 1 = the calling thread
    // alone. The extra threads are started once (in Create when
    // staging_bytes is set, else on the first Publish) and kept. They shorten
    // the stall only when this rank may run on more than one core: mpirun
    // binds each rank to one core by default, so launch with e.g.
    // `--bind-to none` or `--map-by slot:PE=4`. 0 (the default) = as many
    // as the CPUs this process may run on, at most 4 (so 1 when bound to one
    // core); training waits for the copy either way. Sync mode and the gpu
    // tier copy on one thread.
    int snapshot_threads = 0;
    // Ranks of the consumers; empty = every other rank of MPI_COMM_WORLD.
    std::vector<int> subscriber_ranks;
    // host tier, two-sided and shm: how a version reaches the consumers
    // that receive it over MPI (see Fanout in types.h): node (default;
    // direct on one node), direct, tree. With shm, consumers on this node
    // copy from shared memory whatever the plan.
    Fanout fanout = Fanout::kNode;
    // fanout tree: ranks each consumer forwards to, in [1, 32].
    int tree_arity = 2;
    // Seconds to wait for a consumer's handshake, transfer or acknowledgement
    // before it is dropped as lost.
    double peer_timeout_s = 30;
    // sync + push: also wait for each consumer's acknowledgement that the
    // version is servable (its report then has servable times). The shm
    // protocol always waits for the consumers that copy from shared memory.
    bool wait_for_servable = true;
    // pfs tier: directory, O_DIRECT, writer threads, versions kept. The
    // directory is created when missing (mode 0700) and must belong to this
    // user and not be writable by group or others (private_dir.h); each
    // file is written with mode 0600.
    std::string pfs_dir;
    bool o_direct = false;
    int pfs_writer_threads = 1;
    int pfs_keep_versions = 2;
    PfsStore::Layout pfs_layout = PfsStore::Layout::kFlat;  // file naming in pfs_dir
    // pfs tier, flat layout: write each version after the first as a delta
    // against the previous one (PfsStore::WriteDelta: a full version instead
    // when the delta is not smaller, every pfs_delta_chain_max + 1 versions,
    // or when the previous one is not in the directory). Readers rebuild a
    // delta version from its chain and verify it before it is served. The
    // sender keeps a copy of the previous image (one model of host memory).
    // (pfs_delta = true is delta = kOn on the pfs tier; either turns it on.)
    bool pfs_delta = false;
    int pfs_delta_chain_max = 8;
    // Delta versions (DeltaMode above). host tier, two-sided and shm: the
    // producer keeps the last version's image (one model of host memory, two
    // more while encoding) and, for each consumer whose Ready says it holds
    // that version (version and checksum) and, with auto, is on another
    // node (measured on one node, BM_TransportsHostDelta: a 2%-changed
    // version as a delta took 1.6-2.9x a full send, the diff and apply
    // costing more than shared memory saves) and predicted to gain by the
    // rates measured for it (ConsumerResult::encoding_reason says the
    // prediction), sends a delta instead of the image
    // (directly, not through the fan-out relays); a consumer holding
    // anything else (new, restarted, one that missed or rejected a version)
    // gets the full version. The consumer rebuilds the image in a copy of
    // the version it serves and verifies it before it is swapped in; a
    // delta that fails is rejected (the consumer keeps serving its version)
    // and that consumer gets the next version whole. pfs tier: kOn writes
    // delta files as pfs_delta (kAuto: full files). gpu tier, kOn only: a
    // consumer that copies by CUDA IPC and holds the base the producer kept
    // on the device gets delta records, diffed and applied on the device
    // (tier_gpu.cc, device_delta.h); pinned-host consumers, and kAuto, get
    // full versions. One-sided: full.
    DeltaMode delta = DeltaMode::kAuto;
    // The run's identity (private_dir.h: NewSessionId), written into each
    // version's metadata as viper-run.session; Subscribers given the same
    // session_id serve only versions that carry it. Empty = none.
    std::string session_id;
    // pfs tier: a key file only this user can read (a regular file of 16 to
    // 4096 bytes, owned by this user, mode 0600 or stricter). Each version
    // then carries viper-run.hmac, an HMAC-SHA256 under that key over its
    // version, iteration, session id, tensor table and data: a Subscriber
    // with the same key serves only versions made by a holder of the key,
    // across runs and shared directories. Costs one SHA-256 pass over the
    // data per version. Empty = none.
    std::string hmac_key_file;
    // Written as viper.producer in each version's metadata.
    int32_t producer_id = 0;
    // gpu tier: CUDA device of the staging buffers (the model's tensors may
    // be on it, on another device, or in host memory).
    int gpu_device = 0;

    bool IsValid(std::string* error) const;
  };

  // What happened to one version at one consumer.
  struct ConsumerResult {
    int rank = -1;
    bool delivered = false;   // acknowledged as servable
    bool lost = false;        // dropped (timeout or MPI error); never sent to again
    double servable_s = 0;    // publish start -> acknowledgement received
    double load_s = 0;        // consumer-side receive + verify, as it reported
    // Bytes of this version that reached this consumer, as its receive path
    // counted them (acknowledged versions, rejected ones too): the whole
    // image on every tier today; a delta path moves less.
    uint64_t bytes_moved = 0;
    // How it was sent: "full", or "delta of version N" (host tier).
    std::string encoding;
    // Why (host tier with delta on or auto): "delta: predicted 0.21 s < full
    // 0.80 s", "full: predicted delta 0.95 s >= full 0.61 s", "full: link
    // not measured yet", "full: on the producer's node (shared memory)",
    // "full: it does not hold version N", ...; "" with delta off.
    std::string encoding_reason;
    std::string message;      // why it failed, when it did
  };

  // Per-version report.
  struct VersionReport {
    uint64_t version = 0;
    int64_t iteration = 0;
    uint64_t bytes = 0;            // serialized size (header + data)
    double stall_s = 0;            // time Publish blocked the caller
    // Copy into the staging buffer (plus, sync pfs and one-sided, the
    // checksum). Sync two-sided: 0, there is no copy: the chunks go out
    // straight from the tensors and are hashed while in flight (in transfer_s).
    double snapshot_s = 0;
    // Send to all consumers (two-sided: with the overlapped hashing; shm and
    // gpu: until every consumer acknowledged its copy) / write the file.
    double transfer_s = 0;
    double notify_s = 0;           // push messages after a pfs write
    // What the tier wrote for this version: pfs, the file's bytes (a delta
    // file is smaller than `bytes`); 0 on tiers that do not say. And how:
    // "full", or "delta of version N" (pfs_delta), with the codec's reason
    // when a full version was written instead. host tier with a delta
    // offered: written_bytes is the delta's size and encoding the codec's
    // BriefReport (per tensor: unchanged / sparse / dense counts) with how
    // many consumers took it; ConsumerResult::encoding says which each got.
    uint64_t written_bytes = 0;
    std::string encoding;
    // host tier: bytes the producer itself sent over MPI for this version
    // (two-sided streams and deltas, to the consumers the fan-out plans give
    // it; relays forward the rest; shm copies not counted); 0 on other tiers.
    uint64_t sent_bytes = 0;
    bool superseded = false;       // async: replaced by a newer snapshot before it was sent
    bool sent = false;             // the background send finished (sync: always)
    std::vector<ConsumerResult> consumers;
    std::string BriefReport() const;
  };

  struct Summary {
    uint64_t published = 0;        // Publish calls that succeeded
    uint64_t sent = 0;             // versions that left the staging buffer
    uint64_t superseded = 0;       // async versions replaced before being sent
    std::vector<int> lost_consumers;
    double total_stall_s = 0;
    std::string message;           // last error, if any
    std::string BriefReport() const;
  };

  // Collective with the Subscribers for the MPI tiers (all ranks of
  // MPI_COMM_WORLD must create theirs): MPI must be initialised with
  // MPI_THREAD_MULTIPLE (see MpiSession). The pfs tier with poll needs no MPI.
  static StatusOr<std::unique_ptr<Publisher>> Create(const Options& options);
  ~Publisher();  // Close() if not closed
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // Publishes `state` (host tensors; host or device tensors for the gpu tier) as the
  // next version, taken after training iteration `iteration`. Returns when the
  // producer may modify `state` again: sync once delivered (or the file is
  // durable), async once the snapshot is in the staging buffer. For async the
  // report has the stall and snapshot only; Reports() gets the rest later.
  StatusOr<VersionReport> Publish(const ModelState& state, int64_t iteration);

  // Waits until the background sender is idle (async); no-op for sync.
  Status Flush();
  // Flushes, tells the consumers that no more versions come, stops the
  // background thread. Idempotent.
  Status Close();

  // Reports of all versions so far (the async ones completed in the background).
  std::vector<VersionReport> Reports() const;
  // (bytes, seconds) samples for the predictor's cost model.
  std::vector<CostSample> CostSamples() const;
  Summary summary() const;
  const Options& options() const;

  class Impl;

 private:
  explicit Publisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace transports
}  // namespace viper
