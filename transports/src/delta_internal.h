// Internal to the delta codec, not installed: what the encoder (delta.cc),
// the applier (delta_apply.cc) and the format's shared parts
// (delta_format.cc) all read: little-endian byte helpers, a parsed image,
// and the target header carried as a patch of the base's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "viper/transports/delta.h"

namespace viper {
namespace transports {
namespace delta {
namespace internal {

namespace st = safetensors;

inline void PutU64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline uint64_t GetU64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
inline uint32_t GetU32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
// Native unaligned 8-byte load (x86-64 and every target Viper builds for are
// little-endian; only equality of words is used, so byte order is moot).
inline uint64_t Load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Copies one element of `e` bytes (1, 2, 4 or 8) with a fixed-size copy, not a call.
inline void CopyElement(std::byte* to, const std::byte* from, unsigned e) {
  switch (e) {
    case 1:
      *to = *from;
      return;
    case 2:
      std::memcpy(to, from, 2);
      return;
    case 4:
      std::memcpy(to, from, 4);
      return;
    default:
      std::memcpy(to, from, 8);
      return;
  }
}

// A parsed image and the viper.checksum its header states.
struct Image {
  ModelState state;
  st::ParseInfo info;
  uint64_t checksum = 0;
  uint64_t size = 0;
};
StatusOr<Image> ParseImage(const std::byte* data, uint64_t size, const std::string& which);

inline uint64_t Offset(const Image& image, const std::byte* base, const Tensor& t) {
  return static_cast<uint64_t>(t.data - base) - image.info.data_offset;
}

// Empty when the two images have the same tensor table (names, dtypes,
// shapes, offsets), else what differs.
std::string TableDifference(const Image& a, const std::byte* a_data, const Image& b, const std::byte* b_data);

// The JSON of a safetensors header of `header_bytes` (8-byte length prefix +
// JSON + padding) without its trailing padding spaces.
std::string_view TrimmedJson(const std::byte* header, uint64_t header_bytes);

// The target header as a patch of the base's: the shared prefix and suffix
// of the two trimmed JSONs, and the target's trimmed JSON length (its
// padding spaces up to target_header_bytes are implied).
struct HeaderPatch {
  uint64_t prefix = 0, suffix = 0, json_bytes = 0;
  uint64_t middle_bytes() const { return json_bytes - prefix - suffix; }
  uint64_t wire_bytes() const { return kHeaderPatchFixedBytes + middle_bytes(); }
};

// The shared prefix and suffix of two trimmed JSONs.
HeaderPatch DiffHeaders(std::string_view base, std::string_view target);

// Reads and checks the header patch at the start of the body (without the
// base: the lengths against the body and the target header; with `base_json`
// also against the base's JSON).
StatusOr<HeaderPatch> ReadHeaderPatch(const DeltaHeader& h, const std::byte* body, const std::string_view* base_json);

// A safetensors header of `header_bytes` (at least 8 + the patch's JSON)
// from the base's JSON and a checked patch: the length prefix, the shared
// prefix, the carried bytes, the shared suffix, then spaces (the padding of
// Viper's PadHeader and of safetensors writers) up to `header_bytes`.
std::string RebuildHeader(uint64_t header_bytes, const HeaderPatch& patch, const std::byte* body,
                          std::string_view base_json);

// Reads the Golomb-Rice codes that delta.cc's BitWriter wrote (gap g with
// parameter r: g >> r one-bits, a zero bit, the low r bits of g).
class BitReader {
 public:
  BitReader(const uint8_t* p, uint64_t bytes) : p_(p), bytes_(bytes) {}
  // One Rice-coded gap; false when the bits run out or the gap would reach
  // `limit` (the elements left in the tensor).
  bool GetRice(unsigned r, uint64_t limit, uint64_t* gap) {
    uint64_t q = 0;
    for (;;) {  // the unary part: count one-bits up to the zero
      Refill();
      if (fill_ == 0) return false;
      const uint64_t inverse = ~buf_;  // buf_ has zeros above fill_
      const unsigned ones = inverse == 0 ? 64 : static_cast<unsigned>(__builtin_ctzll(inverse));
      if (ones < fill_) {
        q += ones;
        Consume(ones + 1);
        break;
      }
      q += fill_;
      Consume(fill_);
      if (q > (limit >> r)) return false;
    }
    if (q > (limit >> r)) return false;
    uint64_t low = 0;
    if (r > 0) {
      Refill();
      if (fill_ < r) return false;
      low = buf_ & ((1ull << r) - 1);
      Consume(r);
    }
    *gap = (q << r) | low;
    return *gap < limit;
  }
  // Bits not read are the last byte's zero padding only.
  bool RestIsPadding() const { return pos_ == bytes_ && fill_ < 8 && buf_ == 0; }

 private:
  void Refill() {
    while (fill_ <= 56 && pos_ < bytes_) {
      buf_ |= static_cast<uint64_t>(p_[pos_++]) << fill_;
      fill_ += 8;
    }
  }
  void Consume(unsigned n) {
    buf_ = n >= 64 ? 0 : buf_ >> n;
    fill_ -= n;
  }
  const uint8_t* p_;
  uint64_t bytes_, pos_ = 0, buf_ = 0;
  unsigned fill_ = 0;
};

// One record's header as written (delta.cc's Encode and the device codec,
// device_delta.cu, write the same bytes).
inline void PutRecordHeader(std::byte* p, uint32_t index, Encoding enc, unsigned e, unsigned rice,
                            uint64_t count, uint64_t payload) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(index >> (8 * i));
  p[4] = static_cast<std::byte>(enc);
  p[5] = static_cast<std::byte>(e);
  p[6] = static_cast<std::byte>(rice);
  p[7] = std::byte{0};
  PutU64(p + 8, count);
  PutU64(p + 16, payload);
}

// A tensor of the base as the record checks see it.
struct RecordTensor {
  uint64_t bytes = 0;
  unsigned element_bytes = 1;
  std::string_view name;  // for messages
};

// One record's header, read and checked.
struct RecordHeader {
  uint32_t index = 0;
  unsigned rice = 0;  // the Rice parameter of sparse-gaps
  Encoding encoding = Encoding::kDense;
  uint64_t count = 0;
  uint64_t payload_bytes = 0;
};

// Record `r` of `record_count`, its header at `p` with `left` bytes of the
// body from there on, after the record of tensor `previous` (-1: first),
// checked against the base's `tensors`: room for the header, a known
// encoding, the tensor index in range and ascending, its element size, the
// Rice parameter and reserved byte, the payload inside the body, a dense
// record's count and size, a sparse record's count (InvalidArgument or
// DataLoss naming the record, tensor and field). Positions: CheckPositions.
StatusOr<RecordHeader> ReadRecordHeader(uint64_t r, uint64_t record_count, const std::byte* p, uint64_t left,
                                        int64_t previous, const std::vector<RecordTensor>& tensors);

// A sparse record's Rice-coded positions (`positions_bytes` at `bits`):
// every one inside the tensor, no bits left but the last byte's padding.
// With `positions`, the element indices decoded.
Status CheckPositions(uint64_t r, const RecordHeader& h, const RecordTensor& t, const uint8_t* bits,
                      uint64_t positions_bytes, std::vector<uint64_t>* positions);

}  // namespace internal
}  // namespace delta
}  // namespace transports
}  // namespace viper
