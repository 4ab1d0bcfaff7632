#include "back_buffer.h"

#include <cstring>
#include <utility>

namespace viper {
namespace transports {
namespace internal {

LandingPool::Content ContentOf(const ModelVersion& v) {
  return {v.state.metadata.version, v.checksum, v.size_bytes};
}

StatusOr<std::shared_ptr<AlignedBuffer>> BackBuffer::Acquire(const ModelVersion& served, uint64_t bytes,
                                                             bool may_forward, bool* forward) {
  *forward = false;
  if (may_forward && changed_ && changed_->target == ContentOf(served)) {
    std::shared_ptr<AlignedBuffer> back = pool_->AcquireHolding(changed_->base, bytes);
    if (back) {
      *forward = true;
      return back;
    }
  }
  return pool_->Acquire(bytes);
}

uint64_t BackBuffer::BringForward(bool forward, const ModelVersion& served, std::byte* buffer) const {
  if (!forward || !changed_) {
    std::memcpy(buffer, served.bytes, served.size_bytes);
    return served.size_bytes;
  }
  for (const auto& [offset, bytes] : changed_->ranges)
    std::memcpy(buffer + offset, served.bytes + offset, bytes);
  return changed_->bytes;
}

void BackBuffer::Remember(const ModelVersion& served, const LandingPool::Content& target,
                          std::optional<ImageRanges> written) {
  changed_.reset();
  pool_->Note(served.bytes, ContentOf(served));
  if (!written) return;
  Changed c;
  c.base = ContentOf(served);
  c.target = target;
  c.bytes = RangeBytes(*written);
  c.ranges = std::move(*written);
  changed_ = std::move(c);
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
