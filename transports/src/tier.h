// Internal: the tiers behind Publisher and Subscriber. Each wire protocol is
// one file holding both halves, a TierSender and one or more TierReceivers,
// with a header declaring its announcement payload and factories, and one
// entry in the tier table (TierEntry below, tiers.cc):
//
//   tier_gpu.{h,cc}       CUDA IPC + the pinned-host pipeline (tier_gpu_stub.cc without CUDA)
//   tier_host.{h,cc}      shm + two-sided (one pass interleaves them)
//   tier_onesided.{h,cc}  MPI_Put into the consumer's window
//   tier_pfs.{h,cc}       the PFS directory (+ push notification)
//
// and the control protocol (handshake, announce, acks, drops, deadlines) is
// control.h. Tiers report what happened (a SendOutcome; a Landed image or a
// verified device version) and never call back into Publisher::Impl or
// Subscriber::Impl, which keep the lifecycle, threads, reports and
// verify-and-swap. Without MPI, mpi_stub.cc stands in for the control
// protocol and the MPI tiers, and without CUDA tier_gpu_stub.cc for the gpu
// tier (CMake picks the files; no #if in these classes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "control.h"
#include "staging.h"
#include "stream_hash.h"
#include "viper/core/status.h"
#include "viper/transports/aligned_buffer.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"
#include "wire.h"

namespace viper {
namespace transports {
namespace internal {

// One version to stream: its data section as ranges in order, and how to get
// the padded header once the checksum of those ranges is known.
struct StreamSource {
  uint64_t version = 0;
  int64_t iteration = 0;
  uint64_t header_bytes = 0;
  uint64_t data_bytes = 0;
  std::vector<ByteRange> ranges;
  // Owners of the memory of `ranges`, kept until MPI_Finalize when a
  // consumer is dropped mid-transfer (its freed send requests may still
  // read them); empty where that memory outlives the publisher anyway.
  std::vector<std::shared_ptr<const void>> owners;
  // Returns header_bytes bytes that stay valid while the pointer is held.
  std::function<std::shared_ptr<const std::byte>(uint64_t checksum)> header;
};

// The producer's half of a tier. One sending thread at a time.
class TierSender {
 public:
  virtual ~TierSender() = default;
  // Whether versions go as streams (Send(StreamSource)) rather than as
  // finalized staged images (Send(StagedVersion)).
  virtual bool Streams() const { return false; }
  // Work done at creation rather than in the first publish (the shm segment).
  virtual void Prepare(uint64_t staging_bytes) {}
  // Binds the calling thread to the tier's device (gpu).
  virtual Status BindThread() { return Status::Ok(); }
  // Moves one version to the consumers; `start_s` is when its Publish
  // began (servable times count from there). An error is the tier's (a
  // failing disk or device), not a consumer's: those go into `out`.
  virtual Status Send(const StagedVersion& s, double start_s, SendOutcome* out);
  virtual Status Send(const StreamSource& src, double start_s, SendOutcome* out);
  // Releases the shm segment and the one-sided window (collective: after
  // the control's goodbye, which lets the consumers free theirs).
  virtual void Close() {}
};

// Landing buffers of a subscriber, reused once no version refers to them
// (use_count 1; receiving thread only). The pool also knows, per buffer,
// which image it holds when a receive path has said so (Note): the host
// delta path brings such a buffer (its back buffer, holding the version
// served before the current one) forward by copying only what the last
// delta changed, instead of copying the whole served image into another.
// Handing a buffer out (Acquire, AcquireHolding) forgets what it holds,
// since its taker writes into it; Retire forgets the buffer. So a buffer is
// known to hold an image only while nothing has been given the right to
// write into it since Note.
class LandingPool {
 public:
  // An image a buffer holds from its first byte: version, viper.checksum
  // and size in bytes. size 0: nothing known.
  struct Content {
    uint64_t version = 0;
    uint64_t checksum = 0;
    uint64_t size = 0;
    bool known() const { return size > 0; }
    bool operator==(const Content& o) const {
      return version == o.version && checksum == o.checksum && size == o.size;
    }
  };

  Status Preallocate(uint64_t bytes, int count);
  // A buffer nobody holds with room for `bytes` (one that holds no known
  // image first, keeping a known one for AcquireHolding), else a new one;
  // what it held is forgotten.
  StatusOr<std::shared_ptr<AlignedBuffer>> Acquire(uint64_t bytes);
  // The buffer known to hold `content` when nobody holds it and it has room
  // for `bytes`, writable, with what it held forgotten (its taker rewrites
  // it); nullptr when there is none.
  std::shared_ptr<AlignedBuffer> AcquireHolding(const Content& content, uint64_t bytes);
  // The pool's buffer whose first byte is `data` holds `content` (a served,
  // verified version's image: nobody writes into a buffer while it is
  // served). No-op when `data` is not the start of one of the pool's buffers.
  void Note(const std::byte* data, const Content& content);
  // Takes `buffer` out of the pool for good (receives may still land in it).
  void Retire(const std::shared_ptr<AlignedBuffer>& buffer);

 private:
  struct Entry {
    std::shared_ptr<AlignedBuffer> buffer;
    Content content;  // what it holds, when known
  };
  std::vector<Entry> pool_;
};

// A version a receiver has landed and not yet verified: Subscriber::Impl
// parses, verifies and swaps it in. Or, from the gpu tier, `verified`: a
// device version checked on the device, installed as it is.
struct Landed {
  std::shared_ptr<AlignedBuffer> buffer;
  uint64_t size = 0;
  // Bytes that reached this consumer for it (over MPI, out of the shm
  // segment, from the file, device to device): the whole image on every
  // tier today; a delta path lands fewer and rebuilds the rest.
  uint64_t moved_bytes = 0;
  // Rebuilt from a delta against the version the subscriber held.
  bool from_delta = false;
  // Of those, rebuilt in the back buffer brought forward: it held the
  // version served before the held one, and only what the last delta
  // changed (the header and its tensors) was copied from the held image;
  // the others copied the held image whole. `copied_bytes`: what was copied.
  bool brought_forward = false;
  uint64_t copied_bytes = 0;
  std::string source;
  double receive_s = 0;
  // Hashed while it landed: the header must end at data_offset and carry
  // `checksum`; the data is not hashed again.
  bool streamed = false;
  uint64_t data_offset = 0;
  uint64_t checksum = 0;
  std::shared_ptr<ModelVersion> verified;
};

// One receive path of a subscriber. Subscriber::Impl keeps its paths in the
// tier table's order, fastest first (gpu: CUDA IPC, then pinned host; host:
// shm, then two-sided; one-sided; pfs): the first that takes an announcement
// receives it, so a path that cannot (another node, no mapping) falls back
// to the next.
class TierReceiver {
 public:
  virtual ~TierReceiver() = default;
  // Whether this path can receive the version announced by `a`.
  virtual bool Takes(const Announce& a) = 0;
  // Answers `a` (Ready) and receives the version. Aborted: the producer
  // stopped mid-transfer (the subscription ends); other errors cost this
  // version only.
  virtual StatusOr<Landed> Receive(const Announce& a) = 0;
  // Where a version announced by `a` comes from, for messages.
  virtual std::string Source(const Announce& a) const = 0;
  // Binds the calling thread (the subscriber's receiving thread) to the
  // path's device (gpu).
  virtual Status BindThread() { return Status::Ok(); }
};

// ---- the tier table (tiers.cc): every wire protocol is one entry, its code
// one file (tier_<name>.{h,cc}: both halves and its announcement payload),
// as NCCL's ncclTransports[]. A publisher sends with the first entry that
// serves its options; a subscriber keeps the receive paths of every entry
// that receives under its options, in table order (fastest first), and tries
// them in that order for each announcement, after the announcing entry's
// decoder has checked its payload.

// What a tier's sender is made from.
struct SenderSetup {
  const Publisher::Options& options;
  ProducerControl* control = nullptr;  // nullptr where the tier needs none (pfs, poll)
  StagedVersion* staging = nullptr;    // the publisher's staging buffers (the gpu tier stages on the device)
  int staging_count = 0;
};

// What a tier's receive paths are made from.
struct ReceiverSetup {
  const Subscriber::Options& options;
  ConsumerControl* control = nullptr;  // nullptr: notify poll
  LandingPool* pool = nullptr;         // landing buffers of host-memory paths
  // The version the subscriber serves now (nullptr: none yet): what a
  // version-aware path rebuilds from (a delta applied to a copy of it).
  std::function<std::shared_ptr<const ModelVersion>()> held;
};

// The image of `held` when it can be a delta's base (a host-memory image
// with Viper's checksum); nullptr otherwise.
inline const ModelVersion* HeldImage(const std::shared_ptr<const ModelVersion>& held) {
  if (!held || held->memory != MemoryKind::kHost || held->bytes == nullptr || !held->verified ||
      held->checksum == 0)
    return nullptr;
  return held.get();
}

struct TierEntry {
  const char* name;  // for messages and tests
  // Producer: whether this tier moves the versions of a publisher with
  // `options` (the first entry that does is its tier; Options::IsValid
  // leaves exactly one), and whether it needs the control (the MPI session
  // with the consumers), opened before MakeSender.
  bool (*sends)(const Publisher::Options& options);
  bool (*needs_control)(const Publisher::Options& options);
  // Consumer: whether a subscriber with `options` keeps this tier's receive
  // paths (`pushed`: it has a control).
  bool (*receives)(const Subscriber::Options& options, bool pushed);
  // Whether making its sender and receivers is collective (MPI_Win_allocate):
  // the subscriber makes those first, right after the control, in the
  // producer's order.
  bool collective;
  // Whether `a` is this tier's announcement.
  bool (*announced)(const Announce& a);
  // Whether a consumer answers its announcements with a Ready (a refusal
  // too); pfs notifications wait for the acknowledgement only.
  bool ready_handshake;
  // The tier's payload decoder: the size exactly, then its fields. An error
  // says what is wrong; the announcement is refused.
  Status (*check_payload)(const Announce& a);
  StatusOr<std::unique_ptr<TierSender>> (*make_sender)(const SenderSetup& setup);
  StatusOr<std::vector<std::unique_ptr<TierReceiver>>> (*make_receivers)(const ReceiverSetup& setup);
};

// The table, in the order the receive paths are tried.
const std::vector<TierEntry>& Tiers();
// The tier of a publisher with `options`; nullptr when none serves them.
const TierEntry* SenderTier(const Publisher::Options& options);
// The entries whose receive paths a subscriber with `options` keeps, in order.
std::vector<const TierEntry*> ReceiverTiers(const Subscriber::Options& options, bool pushed);
// The tier that announced `a`; nullptr for a kind no tier announces.
const TierEntry* AnnouncingTier(const Announce& a);

}  // namespace internal
}  // namespace transports
}  // namespace viper
