// Internal: the tiers behind Publisher and Subscriber. Each wire protocol is
// one file holding both halves, a TierSender and one or more TierReceivers:
//
//   tier_host.cc      shm + two-sided (one pass interleaves them)
//   tier_onesided.cc  MPI_Put into the consumer's window
//   tier_pfs.cc       the PFS directory (+ push notification)
//   tier_gpu.cc       CUDA IPC + the pinned-host pipeline (tier_gpu_stub.cc without CUDA)
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
#include "viper/transports/pfs_store.h"
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
// (receiving thread only).
class LandingPool {
 public:
  Status Preallocate(uint64_t bytes, int count);
  StatusOr<std::shared_ptr<AlignedBuffer>> Acquire(uint64_t bytes);
  // Takes `buffer` out of the pool for good (receives may still land in it).
  void Retire(const std::shared_ptr<AlignedBuffer>& buffer);

 private:
  std::vector<std::shared_ptr<AlignedBuffer>> pool_;
};

// A version a receiver has landed and not yet verified: Subscriber::Impl
// parses, verifies and swaps it in. Or, from the gpu tier, `verified`: a
// device version checked on the device, installed as it is.
struct Landed {
  std::shared_ptr<AlignedBuffer> buffer;
  uint64_t size = 0;
  std::string source;
  double receive_s = 0;
  // Hashed while it landed: the header must end at data_offset and carry
  // `checksum`; the data is not hashed again.
  bool streamed = false;
  uint64_t data_offset = 0;
  uint64_t checksum = 0;
  std::shared_ptr<ModelVersion> verified;
};

// One receive path of a subscriber. Subscriber::Impl keeps its paths in an
// ordered table, fastest first (gpu: CUDA IPC, then pinned host; host: shm,
// then two-sided; one-sided; pfs): the first that takes an announcement
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
};

// ---- the tier table: what each tier's file makes (nullptr where a tier does
// not take part), in the order Subscriber::Impl tries the receive paths.

// tier_pfs.cc: the PFS tier (`control`: push notification, else nullptr).
StatusOr<std::unique_ptr<TierSender>> MakePfsSender(const Publisher::Options& options,
                                                    ProducerControl* control);
// The subscriber's reader of the PFS directory: a receive path for pushed
// versions, and what its poll loop reads.
class PfsReceiver : public TierReceiver {
 public:
  PfsReceiver(const Subscriber::Options& options, LandingPool* pool);
  bool Takes(const Announce& a) override { return a.kind == kAnnouncePfs; }
  StatusOr<Landed> Receive(const Announce& a) override { return Load(a.version); }
  std::string Source(const Announce& a) const override { return store_->PathFor(a.version); }
  StatusOr<std::vector<uint64_t>> Versions() const { return store_->ListVersions(); }
  std::string PathFor(uint64_t version) const { return store_->PathFor(version); }
  StatusOr<PfsStore::FileId> Identify(uint64_t version) const { return store_->Identify(version); }
  // The directory, when it exists, must be private (private_dir.h; owned by
  // this user or root). Checked at Create and before each read.
  Status CheckDirectory() const;
  // Reads version `version` into a landing buffer.
  StatusOr<Landed> Load(uint64_t version);

 private:
  std::unique_ptr<PfsStore> store_;
  LandingPool* pool_;
};

// tier_onesided.cc (mpi_stub.cc without MPI). Collective with the other
// side's (MPI_Win_allocate): made right after the control.
StatusOr<std::unique_ptr<TierSender>> MakeOneSidedSender(ProducerControl* control);
StatusOr<std::unique_ptr<TierReceiver>> MakeOneSidedReceiver(ConsumerControl* control, LandingPool* pool);

// tier_host.cc (mpi_stub.cc without MPI): shm and two-sided.
StatusOr<std::unique_ptr<TierSender>> MakeHostSender(ProducerControl* control);
std::vector<std::unique_ptr<TierReceiver>> MakeHostReceivers(ConsumerControl* control, LandingPool* pool);

// tier_gpu.cc (tier_gpu_stub.cc without CUDA): the sender stages on the
// device (`staging`: the publisher's two buffers).
StatusOr<std::unique_ptr<TierSender>> MakeGpuSender(ProducerControl* control, StagedVersion* staging,
                                                    int count);
StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeGpuReceivers(ConsumerControl* control);
// Binds the calling thread to `device` (the subscriber's receive thread).
Status BindGpuThread(int device);

}  // namespace internal
}  // namespace transports
}  // namespace viper
