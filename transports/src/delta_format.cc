// The delta format's parts that encoding and applying share: parsing an
// image, comparing tensor tables, and the target header as a patch of the
// base's (delta_internal.h).
#include <algorithm>
#include <string>

#include "delta_internal.h"
#include "viper/core/checksum.h"

namespace viper {
namespace transports {
namespace delta {
namespace internal {

StatusOr<Image> ParseImage(const std::byte* data, uint64_t size, const std::string& which) {
  st::ParseOptions po;
  po.verify_checksum = false;
  po.require_checksum = true;
  Image image;
  image.size = size;
  auto state = st::Parse(nullptr, data, size, po, &image.info);
  if (!state.ok()) return state.status().WithContext(which);
  if (image.info.checksum != st::ChecksumKind::kDataAndHeader) {
    return InvalidArgumentError(which + ": not a Viper format-2 image (viper.format and viper.header_checksum "
                                "are needed to name it by version and checksum)");
  }
  auto it = image.info.metadata.find(st::kChecksumKey);
  if (it == image.info.metadata.end()) return InvalidArgumentError(which + ": no viper.checksum");
  auto checksum = ChecksumFromHex(it->second);
  if (!checksum) return InvalidArgumentError(which + ": viper.checksum is not 16 hex digits");
  image.checksum = *checksum;
  image.state = std::move(*state);
  return image;
}

std::string TableDifference(const Image& a, const std::byte* a_data, const Image& b, const std::byte* b_data) {
  const auto& ta = a.state.tensors();
  const auto& tb = b.state.tensors();
  if (ta.size() != tb.size()) {
    return std::to_string(ta.size()) + " tensors against " + std::to_string(tb.size());
  }
  if (a.size - a.info.data_offset != b.size - b.info.data_offset) return "data sections of different sizes";
  for (std::size_t i = 0; i < ta.size(); ++i) {
    if (ta[i].name != tb[i].name || ta[i].dtype != tb[i].dtype || ta[i].shape != tb[i].shape ||
        ta[i].size_bytes != tb[i].size_bytes || Offset(a, a_data, ta[i]) != Offset(b, b_data, tb[i])) {
      return "tensor " + std::to_string(i) + " ('" + ta[i].name.substr(0, 64) + "') differs in name, dtype, shape "
             "or offset";
    }
  }
  return "";
}

std::string_view TrimmedJson(const std::byte* header, uint64_t header_bytes) {
  const char* json = reinterpret_cast<const char*>(header) + 8;
  uint64_t n = header_bytes - 8;
  while (n > 0 && json[n - 1] == ' ') --n;
  return {json, static_cast<std::size_t>(n)};
}

HeaderPatch DiffHeaders(std::string_view base, std::string_view target) {
  HeaderPatch patch;
  patch.json_bytes = target.size();
  const uint64_t shorter = std::min(base.size(), target.size());
  while (patch.prefix < shorter && base[patch.prefix] == target[patch.prefix]) ++patch.prefix;
  while (patch.suffix < shorter - patch.prefix &&
         base[base.size() - 1 - patch.suffix] == target[target.size() - 1 - patch.suffix]) {
    ++patch.suffix;
  }
  return patch;
}

StatusOr<HeaderPatch> ReadHeaderPatch(const DeltaHeader& h, const std::byte* body, const std::string_view* base_json) {
  if (h.target_header_bytes < 16 || h.target_header_bytes % 8 != 0 || h.target_header_bytes > h.target_image_bytes) {
    return InvalidArgumentError("delta's target header of " + std::to_string(h.target_header_bytes) +
                                " bytes is malformed (at least 16, a multiple of 8, inside the " +
                                std::to_string(h.target_image_bytes) + "-byte image)");
  }
  if (h.body_bytes < kHeaderPatchFixedBytes) {
    return DataLossError("delta truncated: a body of " + std::to_string(h.body_bytes) +
                         " bytes has no room for the header patch's " + std::to_string(kHeaderPatchFixedBytes));
  }
  HeaderPatch patch;
  patch.prefix = GetU64(body);
  patch.suffix = GetU64(body + 8);
  patch.json_bytes = GetU64(body + 16);
  const uint64_t json_room = h.target_header_bytes - 8;
  if (patch.json_bytes > json_room || patch.prefix > patch.json_bytes ||
      patch.suffix > patch.json_bytes - patch.prefix) {
    return InvalidArgumentError("delta's header patch (shared prefix " + std::to_string(patch.prefix) + ", suffix " +
                                std::to_string(patch.suffix) + ", JSON " + std::to_string(patch.json_bytes) +
                                " bytes) does not fit a " + std::to_string(json_room) + "-byte target JSON");
  }
  if (patch.middle_bytes() > h.body_bytes - kHeaderPatchFixedBytes) {
    return DataLossError("delta's header patch carries " + std::to_string(patch.middle_bytes()) + " bytes; only " +
                         std::to_string(h.body_bytes - kHeaderPatchFixedBytes) + " are left in the body");
  }
  if (base_json != nullptr && (patch.prefix > base_json->size() || patch.suffix > base_json->size() - patch.prefix)) {
    return InvalidArgumentError("delta's header patch shares " + std::to_string(patch.prefix) + " + " +
                                std::to_string(patch.suffix) + " bytes with a base JSON of " +
                                std::to_string(base_json->size()));
  }
  return patch;
}

std::string RebuildHeader(uint64_t header_bytes, const HeaderPatch& patch, const std::byte* body,
                          std::string_view base_json) {
  std::string header(header_bytes, ' ');
  PutU64(reinterpret_cast<std::byte*>(header.data()), header_bytes - 8);
  char* out = header.data() + 8;
  if (patch.prefix > 0) std::memcpy(out, base_json.data(), patch.prefix);
  if (patch.middle_bytes() > 0) std::memcpy(out + patch.prefix, body + kHeaderPatchFixedBytes, patch.middle_bytes());
  if (patch.suffix > 0) {
    std::memcpy(out + patch.prefix + patch.middle_bytes(), base_json.data() + base_json.size() - patch.suffix,
                patch.suffix);
  }
  return header;
}

}  // namespace internal
}  // namespace delta
}  // namespace transports
}  // namespace viper
