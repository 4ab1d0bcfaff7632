// The one-sided host protocol (tier_onesided.cc; mpi_stub.cc without MPI):
// MPI_Put into the consumer's MPI_Win_allocate window. Its announcements
// carry no payload of their own (the common header's image_bytes and
// checksum say it all). Making either half is collective with the other
// side's (MPI_Win_allocate): right after the control.
#pragma once

#include <memory>
#include <vector>

#include "tier.h"
#include "wire.h"

namespace viper {
namespace transports {
namespace internal {

inline Status CheckOneSidedPayload(const Announce& a) {
  return GetTierPayload<NoTierPayload>(a, "host one-sided").status();
}

StatusOr<std::unique_ptr<TierSender>> MakeOneSidedSender(const SenderSetup& setup);
StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeOneSidedReceivers(const ReceiverSetup& setup);

}  // namespace internal
}  // namespace transports
}  // namespace viper
