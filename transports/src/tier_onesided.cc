// The one-sided host protocol, both halves (tier.h): the producer puts the
// staged image (header + data) into the consumer's MPI_Win_allocate window,
// then sends Done; the consumer copies it out (the window memory is freed
// collectively and cannot outlive the Subscriber) and verifies the whole
// image. MPI builds only (mpi_stub.cc otherwise).
#include <algorithm>
#include <cstring>

#include "mpi_link.h"
#include "tier_onesided.h"

namespace viper {
namespace transports {
namespace internal {

namespace {

class OneSidedSender : public TierSender {
 public:
  explicit OneSidedSender(ProducerControl* control) : control_(control) {}
  ~OneSidedSender() override { Close(); }

  Status Open() {
    void* base = nullptr;
    if (MPI_Win_allocate(0, 1, MPI_INFO_NULL, control_->link().comm, &base, &win_) != MPI_SUCCESS) {
      return AbortedError("MPI_Win_allocate failed");
    }
    MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
    return Status::Ok();
  }

  Status Send(const StagedVersion& s, double start_s, SendOutcome* out) override {
    const Publisher::Options& options = control_->options();
    const double t0 = MonotonicSeconds();
    const Announce a =
        control_->AnnounceStaged(kAnnounceHost, s.version(), s.iteration(), s.image_bytes(), s.checksum());
    VIPER_ASSIGN_OR_RETURN(const ReadyList ready, control_->Handshake(a, out));
    std::vector<int> sent_to;
    for (const auto& [rank, msg] : ready) {
      if (Put(s, rank, msg.window_offset) && control_->SendDone(rank, a).ok()) {
        sent_to.push_back(rank);
      } else {
        control_->Drop(rank, "one-sided put failed", out);
      }
    }
    out->transfer_s = MonotonicSeconds() - t0;
    if (options.mode == Mode::kAsync || options.wait_for_servable) {
      control_->CollectAcks(s.version(), sent_to, start_s, out);
    }
    return Status::Ok();
  }

  void Close() override {
    if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);  // collective with the consumers' windows
  }

 private:
  // Passive-target epoch: the puts are complete at the target when
  // MPI_Win_unlock returns (this wait cannot be bounded by a timeout).
  bool Put(const StagedVersion& s, int rank, uint64_t window_offset) {
    const uint64_t chunk = control_->options().chunk_bytes;
    bool ok = MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win_) == MPI_SUCCESS;
    for (uint64_t off = 0; ok && off < s.image_bytes(); off += chunk) {
      const uint64_t n = std::min(chunk, s.image_bytes() - off);
      ok = MPI_Put(s.image() + off, static_cast<int>(n), MPI_BYTE, rank,
                   static_cast<MPI_Aint>(window_offset + off), static_cast<int>(n), MPI_BYTE,
                   win_) == MPI_SUCCESS;
    }
    return (MPI_Win_unlock(rank, win_) == MPI_SUCCESS) && ok;
  }

  ProducerControl* control_;
  MPI_Win win_ = MPI_WIN_NULL;
};

class OneSidedReceiver : public TierReceiver {
 public:
  OneSidedReceiver(ConsumerControl* control, LandingPool* pool) : control_(control), pool_(pool) {}
  ~OneSidedReceiver() override {
    if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  }

  Status Open() {
    const uint64_t slot = control_->options().window_slot_bytes;
    if (MPI_Win_allocate(static_cast<MPI_Aint>(slot), 1, MPI_INFO_NULL, control_->link().comm, &base_,
                         &win_) != MPI_SUCCESS) {
      return AbortedError("MPI_Win_allocate of " + std::to_string(slot) + " bytes failed");
    }
    MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
    std::memset(base_, 0, slot);  // pre-touch
    return Status::Ok();
  }

  bool Takes(const Announce& a) override {
    return a.kind == kAnnounceHost && a.protocol == static_cast<uint32_t>(HostProtocol::kOneSided);
  }

  StatusOr<Landed> Receive(const Announce& a) override {
    const double t0 = MonotonicSeconds();
    const uint64_t slot = control_->options().window_slot_bytes;
    Ready ready = control_->ReadyFor(a);
    ready.accept = a.image_bytes <= slot ? 1 : 0;
    VIPER_RETURN_IF_ERROR(control_->SendReady(a, ready));
    if (!ready.accept) {
      return OutOfRangeError("version of " + std::to_string(a.image_bytes) +
                             " bytes exceeds window_slot_bytes " + std::to_string(slot));
    }
    VIPER_RETURN_IF_ERROR(control_->AwaitDone(a));
    // Make the puts visible to this process's loads, then copy out of the
    // window so the slot is free for the next version at once.
    const int rank = control_->rank();
    MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win_);
    MPI_Win_sync(win_);
    MPI_Win_unlock(rank, win_);
    Landed landed;
    VIPER_ASSIGN_OR_RETURN(landed.buffer, pool_->Acquire(a.image_bytes));
    std::memcpy(landed.buffer->data(), base_, a.image_bytes);
    landed.size = a.image_bytes;
    landed.moved_bytes = a.image_bytes;
    landed.source = Source(a);
    landed.receive_s = MonotonicSeconds() - t0;
    return landed;
  }

  std::string Source(const Announce&) const override { return control_->ProducerName(); }

 private:
  ConsumerControl* control_;
  LandingPool* pool_;
  MPI_Win win_ = MPI_WIN_NULL;
  void* base_ = nullptr;
};

}  // namespace

StatusOr<std::unique_ptr<TierSender>> MakeOneSidedSender(const SenderSetup& setup) {
  auto sender = std::make_unique<OneSidedSender>(setup.control);
  VIPER_RETURN_IF_ERROR(sender->Open());
  return std::unique_ptr<TierSender>(std::move(sender));
}

StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeOneSidedReceivers(const ReceiverSetup& setup) {
  auto receiver = std::make_unique<OneSidedReceiver>(setup.control, setup.pool);
  VIPER_RETURN_IF_ERROR(receiver->Open());
  std::vector<std::unique_ptr<TierReceiver>> paths;
  paths.push_back(std::move(receiver));
  return paths;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
