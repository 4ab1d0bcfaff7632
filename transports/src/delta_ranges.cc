#include "delta_ranges.h"

namespace viper {
namespace transports {
namespace internal {

std::optional<ImageRanges> RangesWritten(const delta::Applied& applied, const std::byte* image,
                                         uint64_t base_size, const std::vector<delta::RecordInfo>& records) {
  if (applied.image_bytes != base_size) return std::nullopt;
  const auto& tensors = applied.state.tensors();  // data-offset order, as the records index them
  ImageRanges ranges{{0, applied.info.data_offset}};
  for (const delta::RecordInfo& r : records) {
    if (r.tensor_index >= tensors.size()) return std::nullopt;  // Apply checked it: cannot happen
    const Tensor& t = tensors[r.tensor_index];
    const uint64_t offset = static_cast<uint64_t>(t.data - image);
    auto& last = ranges.back();
    if (last.first + last.second == offset) {
      last.second += t.size_bytes;
    } else {
      ranges.push_back({offset, t.size_bytes});
    }
  }
  return ranges;
}

uint64_t RangeBytes(const ImageRanges& ranges) {
  uint64_t bytes = 0;
  for (const auto& range : ranges) bytes += range.second;
  return bytes;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
