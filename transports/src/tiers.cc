// What the tiers share (tier.h): TierSender's defaults and the subscriber's
// landing buffers.
#include <algorithm>

#include "tier.h"

namespace viper {
namespace transports {
namespace internal {

Status TierSender::Send(const StagedVersion&, double, SendOutcome*) {
  return InternalError("this tier sends streams, not staged images");
}

Status TierSender::Send(const StreamSource&, double, SendOutcome*) {
  return InternalError("this tier sends staged images, not streams");
}

Status LandingPool::Preallocate(uint64_t bytes, int count) {
  for (int i = 0; i < count; ++i) {
    VIPER_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(bytes));
    pool_.push_back(std::make_shared<AlignedBuffer>(std::move(b)));
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<AlignedBuffer>> LandingPool::Acquire(uint64_t bytes) {
  for (auto& b : pool_) {
    if (b.use_count() == 1 && b->capacity() >= bytes) {
      b->SetReadOnly(false);  // a served version's, nobody holds it any more
      return b;
    }
  }
  VIPER_ASSIGN_OR_RETURN(AlignedBuffer fresh, AlignedBuffer::Allocate(bytes));
  // Keep at most three buffers: front, back, and one a slow reader may hold.
  pool_.erase(std::remove_if(pool_.begin(), pool_.end(), [](const auto& b) { return b.use_count() == 1; }),
              pool_.end());
  pool_.push_back(std::make_shared<AlignedBuffer>(std::move(fresh)));
  return pool_.back();
}

void LandingPool::Retire(const std::shared_ptr<AlignedBuffer>& buffer) {
  pool_.erase(std::remove(pool_.begin(), pool_.end(), buffer), pool_.end());
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
