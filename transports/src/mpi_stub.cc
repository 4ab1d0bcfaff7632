// Built instead of mpi_link.cc, control.cc, tier_host.cc and
// tier_onesided.cc when Viper is built without MPI (CMake picks it): the
// controls cannot be opened, so nothing else here is ever called.
#include <functional>
#include <memory>

#include "keep_until_finalize.h"
#include "tier_host.h"
#include "tier_onesided.h"

namespace viper {
namespace transports {
namespace internal {

struct MpiLink {};

ProducerControl::ProducerControl(const Publisher::Options& options) : options_(options) {}
ProducerControl::~ProducerControl() = default;

StatusOr<std::unique_ptr<ProducerControl>> ProducerControl::Open(const Publisher::Options& options) {
  return UnavailableError(std::string("tier ") + ToString(options.tier) + " with notify " +
                          ToString(options.notify) + " needs MPI; Viper was built without it");
}

Announce ProducerControl::AnnounceStaged(AnnounceKind, uint64_t, int64_t, uint64_t, uint64_t) const {
  return Announce();
}
void ProducerControl::NotifyDurable(const Announce&, double, bool, SendOutcome*,
                                    const std::function<void()>& meanwhile) {
  if (meanwhile) meanwhile();
}
void ProducerControl::Close() {}

ConsumerControl::ConsumerControl(const Subscriber::Options& options) : options_(options) {}
ConsumerControl::~ConsumerControl() = default;

StatusOr<std::unique_ptr<ConsumerControl>> ConsumerControl::Open(const Subscriber::Options&) {
  return UnavailableError("notify push needs MPI; Viper was built without it");
}

StatusOr<std::optional<Announce>> ConsumerControl::NextAnnouncement() {
  return UnavailableError("built without MPI");
}
Ready ConsumerControl::ReadyFor(const Announce&) const { return Ready(); }
Status ConsumerControl::SendReady(const Announce&, const Ready&) {
  return UnavailableError("built without MPI");
}
void ConsumerControl::Acknowledge(const Announce&, const Status&, double, double, uint64_t) {}
double ConsumerControl::TransferWindow(const Announce&) const { return 0; }

StatusOr<std::unique_ptr<TierSender>> MakeOneSidedSender(const SenderSetup&) {
  return UnavailableError("tier host needs MPI; Viper was built without it");
}
StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeOneSidedReceivers(const ReceiverSetup&) {
  return UnavailableError("tier host needs MPI; Viper was built without it");
}
StatusOr<std::unique_ptr<TierSender>> MakeHostSender(const SenderSetup&) {
  return UnavailableError("tier host needs MPI; Viper was built without it");
}
// Only made with a control, which cannot be opened here.
StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeHostReceivers(const ReceiverSetup&) {
  return std::vector<std::unique_ptr<TierReceiver>>();
}

// Without MPI nothing but its owner can read the memory.
void KeepUntilFinalize(std::shared_ptr<const void>) {}

}  // namespace internal
}  // namespace transports
}  // namespace viper
