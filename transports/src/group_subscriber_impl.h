// The consumer group's rank object (ShardedSubscriber::Impl), shared by
// group_subscriber.cc (receiving a version) and group_commit.cc (the
// two-phase commit: votes, the decision, ranks in doubt).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "group_gpu.h"
#include "group_internal.h"
#include "group_shm.h"
#include "group_testing.h"
#include "viper/transports/aligned_buffer.h"
#include "viper/transports/group.h"

namespace viper {
namespace transports {

class ShardedSubscriber::Impl {
 public:
  // The protocol's types (group_internal.h, group_shm.h, group_testing.h).
  using GroupSetup = internal::GroupSetup;
  using ShmLink = internal::ShmLink;
  using GroupFault = internal::GroupFault;
  using FaultTimeout = internal::FaultTimeout;
  using Block = internal::Block;

  Impl(GroupSetup g, Options o, ModelState* target, std::unique_ptr<ShmLink> shm, internal::GpuLinkPtr gpu)
      : g_(std::move(g)), options_(o), target_(target), shm_(std::move(shm)), gpu_(std::move(gpu)) {}

  StatusOr<Summary> ReceiveNext(double wait_s);

  GroupSetup g_;
  Options options_;
  ModelState* target_;            // bounded mode
  std::unique_ptr<ShmLink> shm_;  // null: MPI (or gpu)
  internal::GpuLinkPtr gpu_;      // null: not the gpu link
  uint64_t last_attempted_ = 0;
  uint64_t fault_version_ = 0;
  GroupFault fault_ = GroupFault::kNone;
  FaultTimeout fault_timeout_;
  double Timeout(uint64_t version) const { return fault_timeout_.For(version, options_.peer_timeout_s); }

  // Double buffer: the served version and the spare back buffer.
  mutable std::mutex mu_;
  std::shared_ptr<const ShardVersion> current_;
  std::shared_ptr<AlignedBuffer> spare_;
  // Bounded: the target, served under serve_mu_ while bounded_serving_.
  mutable std::shared_mutex serve_mu_;
  bool bounded_serving_ = false;
  ShardVersion bounded_;
  std::shared_ptr<AlignedBuffer> staging_;

  // Consumer rank 0: its decisions, by version (the last kDecisionsKept),
  // answered to ranks in doubt.
  std::map<uint64_t, bool> decisions_;
  static constexpr std::size_t kDecisionsKept = 64;
  std::vector<std::pair<int, uint64_t>> queries_;  // (union rank, version) not decided yet
  // A rank in doubt: the version it voted yes for and heard no decision
  // about (0: none), what it received (double buffer: the back buffer, kept
  // until the doubt is settled). Double buffer: while withheld_, nothing is
  // served (the old version may already be replaced elsewhere).
  uint64_t doubt_version_ = 0;
  int64_t doubt_iteration_ = 0;
  uint64_t doubt_whole_ = 0;
  std::shared_ptr<AlignedBuffer> doubt_buffer_;
  internal::GpuLanded doubt_device_;  // gpu link: the device back buffer in doubt
  bool withheld_ = false;             // under mu_

 private:
  enum class Outcome { kCommitted, kAborted, kInDoubt };
  struct Incoming;
  // All P headers of the next version (the first within wait_s, the rest
  // within the peer timeout). NotFound when none began.
  Status ReceiveHeaders(double wait_s, std::vector<std::vector<uint64_t>>* headers, double* first_s);
  // The consumer group's decision: every rank's vote to rank 0, its answer
  // back. Rank 0 also acknowledges to producer rank 0.
  Outcome Commit(uint64_t version, bool ok, uint64_t whole, double deadline_s);
  // Consumer rank 0: answers every query waiting (its decision; "not
  // committed" for a version it never decided but has gone past); one for
  // a version it may still decide is kept and answered once it has.
  void AnswerQueries();
  // A rank in doubt: the decision, if it arrived late or rank 0 answers
  // within `wait_s`; applies it.
  void Resolve(double wait_s, Summary* sum);
  // Serves (committed) or drops the version this rank was in doubt about.
  void Settle(bool committed);
  // Enters doubt about `version` (received into `buffer`, double buffer).
  void EnterDoubt(const Incoming& in, std::shared_ptr<AlignedBuffer> buffer);

  // The steps of ReceiveNext, in order (Incoming: what the headers said).
  // The headers; the version's number even when they fail.
  Status ReadHeaders(double wait_s, Incoming* in);
  // Windows [k0, k1) of this rank's image from every producer rank at once,
  // window k0 landing at `base`; each piece checked against its digest.
  // False (and sum->message) when a piece is late, lost or wrong.
  bool ReceiveWindows(const Incoming& in, uint64_t k0, uint64_t k1, std::byte* base, Summary* sum);
  // Double buffer: all windows into a back buffer (the spare, if no reader
  // holds it).
  // (The shm link sets in->whole.)
  bool ReceiveDoubleBuffer(Incoming* in, Summary* sum, std::shared_ptr<AlignedBuffer>* buffer);
  void InstallDoubleBuffer(const Incoming& in, std::shared_ptr<AlignedBuffer> buffer);
  // Serves `in` from the image at `data` (host or device memory), kept
  // alive by `owner`; a host buffer the served version held becomes the spare.
  void InstallVersion(const Incoming& in, std::shared_ptr<void> owner, std::byte* data, MemoryKind memory);
  // gpu link: every producer's runs device to device into a back buffer
  // (`landed`), each piece checked on the device.
  bool ReceiveGpu(const Incoming& in, Summary* sum, internal::GpuLanded* landed);
  // gpu link, bounded: every producer's runs device to device straight
  // into the target's tensors, each piece checked there; takes `paused`
  // (serving stops) before the first copy.
  bool ReceiveGpuBounded(const Incoming& in, Summary* sum, std::unique_lock<std::shared_mutex>* paused,
                         double* pause_start);
  // Bounded: window by window through the staging bucket into the target;
  // takes `paused` (serving stops) before the first copy.
  bool ReceiveBounded(Incoming* in, Summary* sum, std::unique_lock<std::shared_mutex>* paused,
                      double* pause_start);
  // shm link: every producer rank's buckets, copied out of its ring into
  // `base` (double buffer) or, bounded, straight into the target (taking
  // `paused` before the first copy); sets in->whole from the producers'
  // shard checksums.
  bool ReceiveShm(Incoming* in, std::byte* base, Summary* sum, std::unique_lock<std::shared_mutex>* paused,
                  double* pause_start);
};

// What the headers of one version said.
struct ShardedSubscriber::Impl::Incoming {
  uint64_t version = 0;
  int64_t iteration = 0;
  uint64_t whole = 0;  // XXH3 of the producers' shard checksums
  double first_s = 0;  // when the first header came
  std::vector<std::vector<uint64_t>> headers;
};

}  // namespace transports
}  // namespace viper
