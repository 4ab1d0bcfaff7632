// Applying a delta (delta.h's Apply): every record checked against the
// base before a byte of the buffer changes, then the rebuilt image verified.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "delta_internal.h"
#include "viper/core/checksum.h"
#include "viper/transports/delta.h"

namespace viper {
namespace transports {
namespace delta {
using namespace internal;  // NOLINT: the format's byte helpers, image and header patch

namespace {

// One record, checked against the base.
struct Record {
  uint32_t index = 0;
  unsigned rice = 0;  // the Rice parameter of sparse-gaps
  Encoding encoding = Encoding::kDense;
  uint64_t count = 0;
  const std::byte* payload = nullptr;
  uint64_t payload_bytes = 0;
};

// Checks every record of the body (from `records_at`, after the header patch) against the
// base's tensors: indices ascending and in range, element sizes, counts,
// payload sizes, every position inside its tensor, the body used exactly.
StatusOr<std::vector<Record>> CheckRecords(const DeltaHeader& h, const std::byte* body, uint64_t records_at,
                                           const Image& base) {
  std::vector<RecordTensor> tensors;
  for (const Tensor& t : base.state.tensors()) {
    tensors.push_back({t.size_bytes, static_cast<unsigned>(DTypeSize(t.dtype)), t.name});
  }
  std::vector<Record> records;
  const std::byte* p = body + records_at;
  const std::byte* end = body + h.body_bytes;
  int64_t previous = -1;
  for (uint64_t r = 0; r < h.record_count; ++r) {
    VIPER_ASSIGN_OR_RETURN(
        const RecordHeader rh,
        ReadRecordHeader(r, h.record_count, p, static_cast<uint64_t>(end - p), previous, tensors));
    previous = rh.index;
    p += kRecordHeaderBytes;
    Record rec;
    rec.index = rh.index;
    rec.rice = rh.rice;
    rec.encoding = rh.encoding;
    rec.count = rh.count;
    rec.payload = p;
    rec.payload_bytes = rh.payload_bytes;
    p += rec.payload_bytes;
    if (rec.encoding == Encoding::kSparseGaps) {
      const RecordTensor& t = tensors[rec.index];
      VIPER_RETURN_IF_ERROR(CheckPositions(r, rh, t, reinterpret_cast<const uint8_t*>(rec.payload),
                                           rec.payload_bytes - rec.count * t.element_bytes, nullptr));
    }
    records.push_back(rec);
  }
  if (p != end) {
    return InvalidArgumentError("delta has " + std::to_string(end - p) + " bytes after its last record");
  }
  return records;
}

}  // namespace

// (Over 80 lines: check everything, then write, then verify, in one place.)
StatusOr<Applied> Apply(std::byte* buffer, uint64_t base_size, uint64_t capacity, const std::byte* delta,
                        uint64_t delta_size) {
  VIPER_ASSIGN_OR_RETURN(DeltaHeader h, ReadHeader(delta, delta_size));
  if (h.body_bytes != delta_size - kFixedHeaderBytes) {
    return DataLossError("delta of " + std::to_string(delta_size) + " bytes; its header says " +
                         std::to_string(h.body_bytes) + " after the " + std::to_string(kFixedHeaderBytes) +
                         "-byte fixed header (truncated or trailing bytes)");
  }
  const std::byte* body = delta + kFixedHeaderBytes;
  const uint64_t body_sum = Xxh3_64(body, h.body_bytes);
  if (body_sum != h.body_checksum) {
    return DataLossError("delta body checksum mismatch: the header says " + ChecksumToHex(h.body_checksum) +
                         ", the body hashes to " + ChecksumToHex(body_sum));
  }
  if (h.target_version <= h.base_version) {
    return InvalidArgumentError("delta to version " + std::to_string(h.target_version) + " from version " +
                                std::to_string(h.base_version) + ": a delta goes forward");
  }
  auto parsed = ParseImage(buffer, base_size, "the buffer");
  if (!parsed.ok()) {
    return FailedPreconditionError("the delta's base (version " + std::to_string(h.base_version) +
                                   ") is not in the buffer: " + parsed.status().message());
  }
  Image& base = *parsed;
  if (base.state.metadata.version != h.base_version || base.checksum != h.base_checksum ||
      base_size != h.base_image_bytes) {
    return FailedPreconditionError(
        "the delta is against version " + std::to_string(h.base_version) + " (checksum " +
        ChecksumToHex(h.base_checksum) + ", " + std::to_string(h.base_image_bytes) + " bytes); the buffer holds version " +
        std::to_string(base.state.metadata.version) + " (checksum " + ChecksumToHex(base.checksum) + ", " +
        std::to_string(base_size) + " bytes)");
  }
  const uint64_t data_bytes = base_size - base.info.data_offset;
  const std::string_view base_json = TrimmedJson(buffer, base.info.data_offset);
  VIPER_ASSIGN_OR_RETURN(HeaderPatch patch, ReadHeaderPatch(h, body, &base_json));
  if (h.target_image_bytes != h.target_header_bytes + data_bytes) {
    return InvalidArgumentError("delta says the image has " + std::to_string(h.target_image_bytes) + " bytes; its " +
                                std::to_string(h.target_header_bytes) + "-byte header and the base's " +
                                std::to_string(data_bytes) + "-byte data section make " +
                                std::to_string(h.target_header_bytes + data_bytes));
  }
  if (h.target_image_bytes > capacity) {
    return OutOfRangeError("the rebuilt image needs " + std::to_string(h.target_image_bytes) +
                           " bytes; the buffer holds " + std::to_string(capacity));
  }
  VIPER_ASSIGN_OR_RETURN(std::vector<Record> records, CheckRecords(h, body, patch.wire_bytes(), base));
  // The target header, rebuilt before the base's is overwritten.
  const std::string header = RebuildHeader(h.target_header_bytes, patch, body, base_json);

  // Everything is checked: rewrite the buffer (from here on it no longer holds the base).
  struct Slot {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset, bytes;
  };
  std::vector<Slot> table;
  table.reserve(base.state.size());
  for (const Tensor& t : base.state.tensors()) {
    table.push_back({t.name, t.dtype, t.shape, Offset(base, buffer, t), t.size_bytes});
  }
  const uint64_t old_offset = base.info.data_offset;
  base.state = ModelState();
  if (h.target_header_bytes != old_offset) {
    std::memmove(buffer + h.target_header_bytes, buffer + old_offset, data_bytes);
  }
  std::memcpy(buffer, header.data(), h.target_header_bytes);
  std::byte* data = buffer + h.target_header_bytes;
  for (const Record& rec : records) {
    const Slot& s = table[rec.index];
    std::byte* t = data + s.offset;
    const unsigned e = static_cast<unsigned>(DTypeSize(s.dtype));
    if (rec.encoding == Encoding::kDense) {
      std::memcpy(t, rec.payload, s.bytes);
      continue;
    }
    const uint64_t positions_bytes = rec.payload_bytes - rec.count * e;
    const std::byte* values = rec.payload + positions_bytes;
    const uint8_t* q = reinterpret_cast<const uint8_t*>(rec.payload);
    if (rec.encoding == Encoding::kSparseGaps) {
      BitReader bits(q, positions_bytes);
      const uint64_t n = s.bytes / e;
      uint64_t index = 0;
      for (uint64_t j = 0; j < rec.count; ++j) {
        uint64_t gap = 0;
        VIPER_CHECK(bits.GetRice(rec.rice, n - index, &gap));  // checked by CheckRecords
        index += gap;
        CopyElement(t + index * e, values + j * e, e);
        ++index;
      }
    }
  }

  // The rebuilt image must be the version the delta names, bit for bit.
  Applied out;
  out.image_bytes = h.target_image_bytes;
  st::ParseOptions po;
  po.require_checksum = true;
  auto state = st::Parse(nullptr, buffer, h.target_image_bytes, po, &out.info);
  if (!state.ok()) {
    return DataLossError("the rebuilt version " + std::to_string(h.target_version) +
                         " fails its checks (a corrupt or misapplied delta): " + state.status().message());
  }
  auto sum_it = out.info.metadata.find(st::kChecksumKey);
  const auto sum = sum_it == out.info.metadata.end() ? std::nullopt : ChecksumFromHex(sum_it->second);
  if (state->metadata.version != h.target_version || !sum || *sum != h.target_checksum ||
      out.info.checksum != st::ChecksumKind::kDataAndHeader || !out.info.data_verified) {
    return DataLossError("the rebuilt image is not version " + std::to_string(h.target_version) + " with checksum " +
                         ChecksumToHex(h.target_checksum) + " (it says version " +
                         std::to_string(state->metadata.version) + ")");
  }
  const auto& tensors = state->tensors();
  bool same = tensors.size() == table.size();
  for (std::size_t i = 0; same && i < tensors.size(); ++i) {
    same = tensors[i].name == table[i].name && tensors[i].dtype == table[i].dtype &&
           tensors[i].shape == table[i].shape && tensors[i].size_bytes == table[i].bytes &&
           static_cast<uint64_t>(tensors[i].data - data) == table[i].offset;
  }
  if (!same) {
    return DataLossError("the rebuilt version " + std::to_string(h.target_version) +
                         "'s tensor table differs from its base's (a delta only changes tensor bytes)");
  }
  out.state = std::move(*state);
  return out;
}

}  // namespace delta
}  // namespace transports
}  // namespace viper
