// The delta format's parts that encoding and applying share: parsing an
// image, comparing tensor tables, the target header as a patch of the
// base's (delta_internal.h), and reading a delta's header and contents
// (delta.h's ReadHeader, ReadContents, Identify).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

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

namespace {

std::string Where(uint64_t r, uint32_t index, const RecordTensor& t) {
  return "delta record " + std::to_string(r) + " (tensor " + std::to_string(index) + " '" +
         std::string(t.name.substr(0, 64)) + "')";
}

}  // namespace

StatusOr<RecordHeader> ReadRecordHeader(uint64_t r, uint64_t record_count, const std::byte* p, uint64_t left,
                                        int64_t previous, const std::vector<RecordTensor>& tensors) {
  if (left < kRecordHeaderBytes) {
    return DataLossError("delta truncated: record " + std::to_string(r) + " of " +
                         std::to_string(record_count) + " has no room for its header");
  }
  RecordHeader rec;
  rec.index = GetU32(p);
  const uint8_t enc = static_cast<uint8_t>(p[4]);
  const unsigned e = static_cast<uint8_t>(p[5]);
  rec.rice = static_cast<uint8_t>(p[6]);
  const bool reserved_zero =
      p[7] == std::byte{0} &&
      (rec.rice == 0 || (enc == static_cast<uint8_t>(Encoding::kSparseGaps) && rec.rice <= 56));
  rec.count = GetU64(p + 8);
  rec.payload_bytes = GetU64(p + 16);
  left -= kRecordHeaderBytes;
  if (enc != static_cast<uint8_t>(Encoding::kSparseGaps) && enc != static_cast<uint8_t>(Encoding::kDense)) {
    return InvalidArgumentError("delta record " + std::to_string(r) + ": unknown encoding " +
                                std::to_string(enc) + " (1 sparse-gaps, 3 dense)");
  }
  if (rec.index >= tensors.size()) {
    return InvalidArgumentError("delta record " + std::to_string(r) + " names tensor " +
                                std::to_string(rec.index) + "; the base has " +
                                std::to_string(tensors.size()));
  }
  if (static_cast<int64_t>(rec.index) <= previous) {
    return InvalidArgumentError("delta record " + std::to_string(r) + ": tensor " +
                                std::to_string(rec.index) + " does not follow tensor " +
                                std::to_string(previous) + " (records ascend)");
  }
  const RecordTensor& t = tensors[rec.index];
  const uint64_t te = t.element_bytes;
  const uint64_t n = t.bytes / te;
  if (e != te || !reserved_zero) {
    return InvalidArgumentError(Where(r, rec.index, t) + ": element size " + std::to_string(e) +
                                " (the tensor's is " + std::to_string(te) + "), Rice parameter " +
                                std::to_string(rec.rice) +
                                " (at most 56, only for sparse-gaps) or reserved byte not zero");
  }
  if (rec.payload_bytes > left) {
    return DataLossError(Where(r, rec.index, t) + ": payload of " + std::to_string(rec.payload_bytes) +
                         " bytes, only " + std::to_string(left) + " left in the delta");
  }
  if (enc == static_cast<uint8_t>(Encoding::kDense)) {
    rec.encoding = Encoding::kDense;
    if (rec.count != n || rec.payload_bytes != t.bytes) {
      return InvalidArgumentError(Where(r, rec.index, t) + ": dense record of " + std::to_string(rec.count) +
                                  " elements / " + std::to_string(rec.payload_bytes) +
                                  " bytes; the tensor has " + std::to_string(n) + " / " +
                                  std::to_string(t.bytes));
    }
    return rec;
  }
  rec.encoding = Encoding::kSparseGaps;
  if (rec.count == 0 || rec.count > n || rec.count > rec.payload_bytes / e) {
    return InvalidArgumentError(Where(r, rec.index, t) + ": " + std::to_string(rec.count) +
                                " changed elements in a tensor of " + std::to_string(n) + " with " +
                                std::to_string(rec.payload_bytes) + " payload bytes");
  }
  return rec;
}

Status CheckPositions(uint64_t r, const RecordHeader& h, const RecordTensor& t, const uint8_t* bits,
                      uint64_t positions_bytes, std::vector<uint64_t>* positions) {
  const uint64_t n = t.bytes / t.element_bytes;
  BitReader reader(bits, positions_bytes);
  if (positions != nullptr) positions->resize(h.count);
  uint64_t next = 0;
  for (uint64_t j = 0; j < h.count; ++j) {
    uint64_t gap = 0;
    if (!reader.GetRice(h.rice, n - next, &gap)) {
      return InvalidArgumentError(Where(r, h.index, t) + ": position " + std::to_string(j) +
                                  " is truncated or lies past the tensor's " + std::to_string(n) +
                                  " elements");
    }
    if (positions != nullptr) (*positions)[j] = next + gap;
    next += gap + 1;
  }
  if (!reader.RestIsPadding()) {
    return InvalidArgumentError(Where(r, h.index, t) + ": position bits left after the last position");
  }
  return Status::Ok();
}

}  // namespace internal

using namespace internal;  // NOLINT: the helpers above

StatusOr<DeltaHeader> ReadHeader(const std::byte* data, uint64_t size) {
  if (size < kFixedHeaderBytes) {
    return DataLossError("delta truncated: " + std::to_string(size) + " bytes, the fixed header alone is " +
                         std::to_string(kFixedHeaderBytes));
  }
  if (std::memcmp(data, kMagicVersion1, sizeof(kMagicVersion1)) == 0) {
    return InvalidArgumentError("delta format 1 (VIPERDL1: the target header carried whole) is no longer read; this "
                                "build reads VIPERDL2 (the header as a patch of the base's): send the full version");
  }
  if (std::memcmp(data, kMagic, sizeof(kMagic)) != 0) return DataLossError("not a Viper delta (no VIPERDL2 magic)");
  const uint64_t stated = GetU64(data + 88);
  const uint64_t actual = Xxh3_64(data, 88);
  if (stated != actual) {
    return DataLossError("delta header checksum mismatch: it says " + ChecksumToHex(stated) + ", the header hashes to " +
                         ChecksumToHex(actual));
  }
  DeltaHeader h;
  h.base_version = GetU64(data + 8);
  h.base_checksum = GetU64(data + 16);
  h.target_version = GetU64(data + 24);
  h.target_checksum = GetU64(data + 32);
  h.target_image_bytes = GetU64(data + 40);
  h.target_header_bytes = GetU64(data + 48);
  h.base_image_bytes = GetU64(data + 56);
  h.record_count = GetU64(data + 64);
  h.body_bytes = GetU64(data + 72);
  h.body_checksum = GetU64(data + 80);
  return h;
}

StatusOr<Contents> ReadContents(const std::byte* data, uint64_t size) {
  Contents c;
  VIPER_ASSIGN_OR_RETURN(c.header, ReadHeader(data, size));
  const DeltaHeader& h = c.header;
  if (h.body_bytes != size - kFixedHeaderBytes) {
    return DataLossError("delta of " + std::to_string(size) + " bytes; its header says " +
                         std::to_string(h.body_bytes) + " after the fixed header (truncated or trailing bytes)");
  }
  const std::byte* body = data + kFixedHeaderBytes;
  if (Xxh3_64(body, h.body_bytes) != h.body_checksum) return DataLossError("delta body checksum mismatch");
  VIPER_ASSIGN_OR_RETURN(HeaderPatch patch, ReadHeaderPatch(h, body, nullptr));
  c.header_patch_bytes = patch.wire_bytes();
  c.header_shared_bytes = patch.prefix + patch.suffix;
  if (c.header_shared_bytes == 0) {  // the whole JSON is carried: its metadata can be listed without the base
    // Unpadded (8 + the JSON): bounded by the body, whatever target_header_bytes claims.
    const std::string header = RebuildHeader(8 + patch.json_bytes, patch, body, std::string_view());
    auto metadata = st::ParseMetadata(reinterpret_cast<const std::byte*>(header.data()), header.size());
    if (!metadata.ok()) return metadata.status().WithContext("delta's target header");
    c.target_metadata = std::move(*metadata);
  }
  const std::byte* p = body + patch.wire_bytes();
  const std::byte* end = body + h.body_bytes;
  for (uint64_t r = 0; r < h.record_count; ++r) {
    if (static_cast<uint64_t>(end - p) < kRecordHeaderBytes) {
      return DataLossError("delta truncated: record " + std::to_string(r) + " has no room for its header");
    }
    RecordInfo info;
    info.tensor_index = GetU32(p);
    const uint8_t enc = static_cast<uint8_t>(p[4]);
    if (enc != static_cast<uint8_t>(Encoding::kSparseGaps) && enc != static_cast<uint8_t>(Encoding::kDense)) {
      return InvalidArgumentError("delta record " + std::to_string(r) + ": unknown encoding " + std::to_string(enc));
    }
    info.encoding = static_cast<Encoding>(enc);
    info.changed_elements = GetU64(p + 8);
    info.payload_bytes = GetU64(p + 16);
    p += kRecordHeaderBytes;
    if (info.payload_bytes > static_cast<uint64_t>(end - p)) {
      return DataLossError("delta record " + std::to_string(r) + ": payload of " + std::to_string(info.payload_bytes) +
                           " bytes, only " + std::to_string(end - p) + " left");
    }
    p += info.payload_bytes;
    c.records.push_back(info);
  }
  if (p != end) return InvalidArgumentError("delta has " + std::to_string(end - p) + " bytes after its last record");
  return c;
}

StatusOr<ImageId> Identify(const std::byte* image, uint64_t size) {
  VIPER_ASSIGN_OR_RETURN(Image parsed, ParseImage(image, size, "image"));
  return ImageId{parsed.state.metadata.version, parsed.checksum};
}

}  // namespace delta
}  // namespace transports
}  // namespace viper
