// A delta consumer's back buffer brought forward (issue 27), shared by the
// host tier's delta path (tier_host_delta.cc) and the PFS tier's reader
// (tier_pfs.cc). A delta version is rebuilt in a landing buffer that first
// holds the served image. With landing buffers in turn, the free one usually
// still holds the version served before the current one; when the last
// delta rebuilt the served version from exactly that image, copying only
// what that delta wrote (delta_ranges.h) brings it to the served image, and
// the whole copy is avoided. The landing pool says which image a buffer
// holds (LandingPool::Note, AcquireHolding): anything that may have written
// into it since makes the pool forget. The delta applied next hashes the
// whole rebuilt image (delta::Apply), so a buffer that did not hold what the
// pool said is refused, never served.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "delta_ranges.h"
#include "tier.h"

namespace viper {
namespace transports {
namespace internal {

// What the pool records for `v`'s image: version, viper.checksum, size.
LandingPool::Content ContentOf(const ModelVersion& v);

// One receive path's back buffer (its receiving thread only).
class BackBuffer {
 public:
  explicit BackBuffer(LandingPool* pool) : pool_(pool) {}

  // A landing buffer with room for `bytes` to rebuild a delta version
  // against `served` in: when `may_forward` and the last delta remembered
  // rebuilt `served` from an image a free pool buffer still holds, that
  // buffer (`*forward` set); else any free one (LandingPool::Acquire).
  StatusOr<std::shared_ptr<AlignedBuffer>> Acquire(const ModelVersion& served, uint64_t bytes,
                                                   bool may_forward, bool* forward);
  // Puts served's image at `buffer`: when `forward` (from Acquire), only
  // the ranges the last delta wrote; else the whole image. Returns the
  // bytes copied.
  uint64_t BringForward(bool forward, const ModelVersion& served, std::byte* buffer) const;
  // A delta rebuilt `target` from `served` writing only `written`
  // (nullopt: not known, nothing to bring forward next time): notes
  // served's buffer (when the pool's) as holding `served`, which was
  // verified and is not written while served, and keeps `written` for the
  // next Acquire.
  void Remember(const ModelVersion& served, const LandingPool::Content& target,
                std::optional<ImageRanges> written);
  // Nothing to bring forward next time.
  void Forget() { changed_.reset(); }

 private:
  // The last delta remembered rebuilt `target` from `base` (the same size)
  // by writing only `ranges`.
  struct Changed {
    LandingPool::Content base, target;
    ImageRanges ranges;
    uint64_t bytes = 0;  // their sum
  };

  LandingPool* pool_;
  std::optional<Changed> changed_;
};

}  // namespace internal
}  // namespace transports
}  // namespace viper
