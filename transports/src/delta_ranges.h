// What a delta wrote when it rebuilt an image in place (issue 27): the
// ranges a consumer must copy from the image it serves to bring a buffer
// holding the delta's base forward to that image. Used by the PFS store
// (PfsStore::ReadFrom) and the back buffer (back_buffer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "viper/transports/delta.h"

namespace viper {
namespace transports {
namespace internal {

// (offset, bytes) ranges of an image, ascending, adjacent ones merged.
using ImageRanges = std::vector<std::pair<uint64_t, uint64_t>>;

// The ranges of `image` (`applied`: the image a delta with `records`
// rebuilt in place from a `base_size`-byte base) that the delta wrote: the
// header (up to the data section) and the tensors it has records for; every
// byte outside them is the base's. nullopt when the image's size is not
// `base_size` (a header of another size moves the whole data section) or a
// record names no tensor of the image.
std::optional<ImageRanges> RangesWritten(const delta::Applied& applied, const std::byte* image,
                                         uint64_t base_size, const std::vector<delta::RecordInfo>& records);

// The sum of the ranges' bytes.
uint64_t RangeBytes(const ImageRanges& ranges);

}  // namespace internal
}  // namespace transports
}  // namespace viper
