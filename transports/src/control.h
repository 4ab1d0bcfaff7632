// Internal: the control protocol between a Publisher and its Subscribers,
// both halves (control.cc; mpi_stub.cc without MPI): the private
// communicator and session id, announcements, Ready answers, fan-out routes,
// acknowledgements, dropped consumers and every deadline. The tiers
// (tier.h) borrow a control to move their bytes; Publisher::Impl and
// Subscriber::Impl own it. No MPI types here: the tiers that move bytes over
// MPI reach the communicator through MpiLink (mpi_link.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fanout.h"
#include "viper/core/status.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"
#include "wire.h"

namespace viper {
namespace transports {
namespace internal {

struct MpiLink;  // mpi_link.h (MPI builds only)

// What sending one version did: a result per consumer that was told of it
// (delivered with its servable time, refused, not delivered, or lost) and
// the times taken. Publisher::Impl copies it into the VersionReport.
struct SendOutcome {
  std::vector<Publisher::ConsumerResult> consumers;
  double transfer_s = 0;
  double notify_s = 0;
  // What the tier wrote (VersionReport::written_bytes, encoding).
  uint64_t written_bytes = 0;
  std::string encoding;
  // What the producer itself sent (VersionReport::sent_bytes).
  uint64_t sent_bytes = 0;
  // The consumers this send dropped (ConsumerResult::lost).
  std::vector<int> Lost() const {
    std::vector<int> lost;
    for (const auto& c : consumers) {
      if (c.lost) lost.push_back(c.rank);
    }
    return lost;
  }
};

// Consumers that accepted an announcement, with their answers.
using ReadyList = std::vector<std::pair<int, Ready>>;

// The producer's half.
class ProducerControl {
 public:
  // Collective over MPI_COMM_WORLD (every rank creates its Publisher or
  // Subscriber): duplicates it, agrees on the session id, lists the
  // consumers. Unavailable without MPI.
  static StatusOr<std::unique_ptr<ProducerControl>> Open(const Publisher::Options& options);
  ~ProducerControl();
  ProducerControl(const ProducerControl&) = delete;
  ProducerControl& operator=(const ProducerControl&) = delete;

  MpiLink& link() { return *link_; }
  uint64_t session() const { return session_; }
  int rank() const { return rank_; }
  const char* host() const { return host_; }  // this node's name (fan-out by node, CUDA IPC, shm)
  const Publisher::Options& options() const { return options_; }

  // An announcement of a staged version of `kind`, ready to send.
  Announce AnnounceStaged(AnnounceKind kind, uint64_t version, int64_t iteration, uint64_t image_bytes,
                          uint64_t checksum) const;
  // Sends `a` to every consumer still served and waits (peer_timeout_s) for
  // each to answer Ready. Returns those that accepted; refusals and silent
  // consumers go into `out`.
  StatusOr<ReadyList> Handshake(const Announce& a, SendOutcome* out);
  // Two-sided: plans who forwards the version to whom over the consumers
  // in `ready` (those that take one stream: the full version, or the host
  // tier's delta, whose takers get a plan of their own) and, when `routed`
  // (as `a` announced), sends each its Route. Sets `acking` to the consumers that will acknowledge (one whose
  // Route cannot be sent is dropped).
  FanoutPlan Route(const Announce& a, bool routed, const ReadyList& ready, SendOutcome* out,
                   std::vector<int>* acking);
  // Waits (peer_timeout_s) for the acknowledgements of `version` from
  // `ranks`; servable times count from `start_s`.
  void CollectAcks(uint64_t version, const std::vector<int>& ranks, double start_s, SendOutcome* out);
  // Sends `msg` (kTagDone) to `rank` within peer_timeout_s.
  Status SendDone(int rank, const Announce& msg);
  // pfs tier, push: tells every consumer that `a`'s version is durable,
  // runs `meanwhile` (work of the producer's that the consumers need not
  // wait for) and, when `wait_for_acks`, collects their acknowledgements.
  void NotifyDurable(const Announce& a, double start_s, bool wait_for_acks, SendOutcome* out,
                     const std::function<void()>& meanwhile = {});
  // Stops serving `rank` (never sent to again) and records why in `out`.
  void Drop(int rank, const std::string& why, SendOutcome* out);
  // Goodbye to every consumer still served.
  void Close();

 private:
  explicit ProducerControl(const Publisher::Options& options);
  // Sends `a` to every consumer still served; drops those that do not take
  // `what` in time. Returns those told.
  std::vector<int> Tell(const Announce& a, const std::string& what, SendOutcome* out);
  Publisher::Options options_;
  std::unique_ptr<MpiLink> link_;
  std::vector<int> live_;  // consumers still served (one sending thread at a time)
  uint64_t session_ = 0;
  int rank_ = 0;
  char host_[64] = {0};
  bool closed_ = false;
};

// The consumer's half.
class ConsumerControl {
 public:
  // Collective over MPI_COMM_WORLD, as ProducerControl::Open.
  static StatusOr<std::unique_ptr<ConsumerControl>> Open(const Subscriber::Options& options);
  ~ConsumerControl();
  ConsumerControl(const ConsumerControl&) = delete;
  ConsumerControl& operator=(const ConsumerControl&) = delete;

  MpiLink& link() { return *link_; }
  uint64_t session() const { return session_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int producer() const { return options_.producer_rank; }
  const char* host() const { return host_; }
  const Subscriber::Options& options() const { return options_; }
  std::string ProducerName() const { return "rank " + std::to_string(producer()); }

  // The producer's next announcement of this session, if one is waiting.
  // An error means the link to the producer broke.
  StatusOr<std::optional<Announce>> NextAnnouncement();
  // The answer to `a`, not yet accepted, on any receive path.
  Ready ReadyFor(const Announce& a) const;
  Status SendReady(const Announce& a, const Ready& ready);
  // Waits for the producer's Route of `version` and checks it.
  Status AwaitRoute(uint64_t version, double deadline, Route* route);
  // Waits for the producer's Done of `a` (one-sided).
  Status AwaitDone(const Announce& a);
  // Acknowledges `a`: servable when `status` is ok, else rejected with its
  // code; `bytes_moved` of it reached this consumer.
  void Acknowledge(const Announce& a, const Status& status, double load_s, double notify_s,
                   uint64_t bytes_moved);

  // Seconds a transfer announced by `a` may take: transfer_timeout_s after
  // the producer's longest wait for the other consumers' answers.
  double TransferWindow(const Announce& a) const;
  double TransferDeadline(const Announce& a) const;
  std::string WindowText(const Announce& a) const;  // TransferWindow for messages, "%.1f"

 private:
  explicit ConsumerControl(const Subscriber::Options& options);
  Subscriber::Options options_;
  std::unique_ptr<MpiLink> link_;
  uint64_t session_ = 0;
  int rank_ = 0;
  int size_ = 1;
  char host_[64] = {0};
};

}  // namespace internal
}  // namespace transports
}  // namespace viper
