#include "viper/transports/delta.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include "viper/core/checksum.h"

namespace viper {
namespace transports {
namespace delta {
namespace {

namespace st = safetensors;

void PutU64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
uint64_t GetU64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
uint32_t GetU32(const std::byte* p) {
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

uint64_t Offset(const Image& image, const std::byte* base, const Tensor& t) {
  return static_cast<uint64_t>(t.data - base) - image.info.data_offset;
}

// Empty when the two images have the same tensor table (names, dtypes,
// shapes, offsets), else what differs.
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

// Golomb-Rice coding of the gaps between changed elements: gap g with
// parameter r is g >> r one-bits, a zero bit, then the low r bits of g;
// bits fill each byte from its least significant bit.
class BitWriter {
 public:
  // `out` must have 8 bytes of room past the last byte the code takes (the
  // flush stores a whole word; bytes past the code are overwritten later).
  explicit BitWriter(std::byte* out) : out_(out) {}
  // Appends the low `count` bits of `bits` (count <= 57; bits above count are zero).
  inline void Put(uint64_t bits, unsigned count) {
    acc_ |= bits << fill_;
    fill_ += count;
    std::memcpy(out_ + used_, &acc_, 8);  // little-endian: the bytes in stream order
    const unsigned whole = fill_ >> 3;
    used_ += whole;
    acc_ = whole == 8 ? 0 : acc_ >> (8 * whole);
    fill_ &= 7;
  }
  inline void PutRice(uint64_t gap, unsigned r) {
    uint64_t q = gap >> r;
    const uint64_t low = r == 0 ? 0 : gap & (~0ull >> (64 - r));
    if (q + 1 + r <= 57) {  // the usual case: the whole code in one Put
      Put(((1ull << q) - 1) | (low << (q + 1)), static_cast<unsigned>(q + 1 + r));
      return;
    }
    for (; q > 0;) {
      const unsigned ones = static_cast<unsigned>(std::min<uint64_t>(q, 32));
      Put((1ull << ones) - 1, ones);
      q -= ones;
    }
    Put(0, 1);
    if (r > 0) Put(low, r);
  }
  uint64_t Finish() {  // bytes written
    if (fill_ > 0) out_[used_++] = static_cast<std::byte>(acc_);
    fill_ = 0;
    acc_ = 0;
    return used_;
  }

 private:
  std::byte* out_;
  uint64_t used_ = 0, acc_ = 0;
  unsigned fill_ = 0;
};

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

// Gaps are kept as u32 words; a gap of 2^32 - 1 or more (only in tensors of
// over 4G elements) as kWideGap followed by its low and high halves.
constexpr uint32_t kWideGap = UINT32_MAX;

// Calls f(gap) for each of the `k` gaps stored from `p`.
template <typename F>
inline void ForEachGap(const uint32_t* p, uint64_t k, F&& f) {
  for (uint64_t j = 0; j < k; ++j) {
    uint64_t gap = *p++;
    if (__builtin_expect(gap == kWideGap, 0)) {
      gap = p[0] | (static_cast<uint64_t>(p[1]) << 32);
      p += 2;
    }
    f(gap);
  }
}

// Bytes of `k` gaps (stored from `p`) Rice-coded with parameters r0, r0 + 1,
// r0 + 2, in one pass.
void RiceBytes3(const uint32_t* p, uint64_t k, unsigned r0, uint64_t out[3]) {
  uint64_t high[3] = {0, 0, 0};
  ForEachGap(p, k, [&](uint64_t gap) {
    high[0] += gap >> r0;
    high[1] += gap >> (r0 + 1);
    high[2] += gap >> (r0 + 2);
  });
  for (unsigned i = 0; i < 3; ++i) out[i] = (k * (1 + r0 + i) + high[i] + 7) / 8;
}

// The positions of one tensor's changed elements, as gaps, and their new
// values, found by one pass over both images.
class Scanner {
 public:
  // Scans `bytes` bytes (n elements of `e` bytes) of `a` (base) against `b`
  // (target), appending the changed elements' gaps and new values (gathered
  // while the line is in cache) after those of earlier tensors. Returns
  // false when it stopped early because no sparse record can be smaller
  // than dense; then call Discard.
  bool Scan(const std::byte* a, const std::byte* b, uint64_t bytes, unsigned e) {
    switch (e) {
      case 1:
        return ScanAs<1>(a, b, bytes);
      case 2:
        return ScanAs<2>(a, b, bytes);
      case 4:
        return ScanAs<4>(a, b, bytes);
      default:
        return ScanAs<8>(a, b, bytes);
    }
  }
  // Forgets what the last Scan appended (a dense or unchanged tensor).
  void Discard() {
    gap_used_ = gap_mark_;
    val_used_ = val_mark_;
  }

  uint64_t changed() const { return k_; }
  // Where the last Scan's gaps and values start in the buffers.
  uint64_t gaps_offset() const { return gap_mark_; }
  uint64_t values_offset() const { return val_mark_; }
  const uint32_t* gaps(uint64_t offset) const { return gaps_.get() + offset; }
  const std::byte* values(uint64_t offset) const { return values_.get() + offset; }

 private:
  // (Over 80 lines: the scan's state lives in locals, in registers: the
  // values are stored through std::byte pointers, which may alias anything
  // in memory, so members would be reloaded after every element.)
  template <unsigned E>
  bool ScanAs(const std::byte* a, const std::byte* b, uint64_t bytes) {
    gap_mark_ = gap_used_;
    val_mark_ = val_used_;
    uint32_t* g = gaps_.get() + gap_used_;
    uint32_t* g_end = gaps_.get() + gap_capacity_;
    std::byte* v = values_.get() + val_used_;
    std::byte* v_end = values_.get() + val_capacity_;
    uint64_t k = 0, next = 0;
    const uint64_t dense = bytes;
    // Room for `gaps` gap words and `values` value bytes.
    auto reserve = [&](uint64_t gaps, uint64_t values) {
      if (__builtin_expect(
              static_cast<uint64_t>(g_end - g) >= gaps && static_cast<uint64_t>(v_end - v) >= values, 1))
        return;
      gap_used_ = static_cast<uint64_t>(g - gaps_.get());
      val_used_ = static_cast<uint64_t>(v - values_.get());
      Grow(&gaps_, gap_used_, gaps, &gap_capacity_);
      Grow(&values_, val_used_, values, &val_capacity_);
      g = gaps_.get() + gap_used_;
      g_end = gaps_.get() + gap_capacity_;
      v = values_.get() + val_used_;
      v_end = values_.get() + val_capacity_;
    };
    // One changed element; false when sparse can no longer win.
    auto record = [&](uint64_t index) {
      const uint64_t gap = index - next;
      if (__builtin_expect(gap < kWideGap, 1)) {
        *g++ = static_cast<uint32_t>(gap);
      } else {
        g[0] = kWideGap;
        g[1] = static_cast<uint32_t>(gap);
        g[2] = static_cast<uint32_t>(gap >> 32);
        g += 3;
      }
      std::memcpy(v, b + index * E, E);
      v += E;
      next = index + 1;
      ++k;
      // Rice-coded gaps take at least a bit per changed element: once that
      // and the values reach the dense size, no sparse record can win. And
      // once 4096 elements are scanned at a changed density where sparse
      // breaks even with dense (e / (e + 1/8): 97% for 4-byte elements), the
      // tensor is sent dense without scanning the rest: sparse could only win
      // if the rest were mostly unchanged, and dense is exact either way (a
      // dense SGD step is decided in 4096 elements instead of 97% of the
      // tensor).
      if (next >= 4096 && k * (8 * E + 1) >= next * 8 * E) return false;
      return k * E + (k + 7) / 8 < dense;
    };
    // One bit per changed lane of XOR word `x`, lane i at bit i: per lane of
    // 8E bits, its top bit set when any is ((x & low) + low carries into it
    // without crossing into the next lane), then gathered to the bottom
    // (a multiply whose partial products do not collide: checked for every
    // pattern).
    auto lanes = [](uint64_t x) -> uint64_t {
      if constexpr (E == 8) {
        return x != 0;
      } else {
        constexpr uint64_t kLaneOne = ~0ull / ((1ull << (8 * E)) - 1);
        constexpr uint64_t kHigh = kLaneOne << (8 * E - 1);
        constexpr uint64_t kLow = ~kHigh;
        const uint64_t m = ((((x & kLow) + kLow) | x) & kHigh) >> (8 * E - 1);  // bit 8E i: lane i
        if constexpr (E == 4) return (m | (m >> 31)) & 3;
        if constexpr (E == 2) return ((m * 0x0000200040008001ull) >> 45) & 15;
        return (m * 0x0102040810204080ull) >> 56;
      }
    };
    // The changed elements of a mask of lanes (bit i: element first + i).
    auto elements = [&](uint64_t mask, uint64_t first) {
      for (; mask != 0; mask &= mask - 1) {
        if (!record(first + static_cast<unsigned>(__builtin_ctzll(mask)))) return false;
      }
      return true;
    };
    bool complete = true;
    const uint64_t words = bytes / 8;
    uint64_t w = 0;
    // A cache line (eight words) per step: the common unchanged case is one
    // OR of eight XORs and one branch.
    for (; complete && w + 8 <= words; w += 8) {
      const std::byte* pa = a + 8 * w;
      const std::byte* pb = b + 8 * w;
      uint64_t x[8];
      for (int i = 0; i < 8; ++i) x[i] = Load64(pa + 8 * i) ^ Load64(pb + 8 * i);
      if (((x[0] | x[1]) | (x[2] | x[3]) | ((x[4] | x[5]) | (x[6] | x[7]))) == 0) continue;
      // The block's changed lanes in one mask (64 / E bits), walked in one
      // loop: a branch per changed element, not per word.
      uint64_t mask = 0;
      for (int i = 0; i < 8; ++i) mask |= lanes(x[i]) << (i * (8 / E));
      reserve(8 * (8 / E) * 3, 64);
      complete = elements(mask, w * (8 / E));
    }
    for (; complete && w < words; ++w) {
      const uint64_t x = Load64(a + 8 * w) ^ Load64(b + 8 * w);
      if (x == 0) continue;
      reserve((8 / E) * 3, 8);
      complete = elements(lanes(x), w * (8 / E));
    }
    // The last bytes % 8 bytes, a whole number of elements (E divides 8).
    for (uint64_t off = words * 8; complete && off < bytes; off += E) {
      if (std::memcmp(a + off, b + off, E) == 0) continue;
      reserve(3, E);
      complete = record(off / E);
    }
    gap_used_ = static_cast<uint64_t>(g - gaps_.get());
    val_used_ = static_cast<uint64_t>(v - values_.get());
    k_ = k;
    return complete;
  }

  // Doubles a buffer short of room for `more` entries (not zero-filled:
  // only the used entries are ever read).
  template <typename T>
  static void Grow(std::unique_ptr<T[]>* buffer, uint64_t used, uint64_t more, uint64_t* capacity) {
    if (used + more <= *capacity) return;
    const uint64_t bigger = std::max<uint64_t>({1 << 16, *capacity * 2, used + more});
    std::unique_ptr<T[]> next(new T[bigger]);
    if (used > 0) std::memcpy(next.get(), buffer->get(), used * sizeof(T));
    *buffer = std::move(next);
    *capacity = bigger;
  }

  uint64_t k_ = 0;
  uint64_t gap_used_ = 0, gap_mark_ = 0, gap_capacity_ = 0;
  uint64_t val_used_ = 0, val_mark_ = 0, val_capacity_ = 0;
  std::unique_ptr<uint32_t[]> gaps_;     // every sparse tensor's gaps, in order
  std::unique_ptr<std::byte[]> values_;  // and their new values
};

// Bounds-checked writer into the caller's buffer.
class Writer {
 public:
  Writer(std::byte* out, uint64_t capacity) : out_(out), capacity_(capacity) {}
  bool Fits(uint64_t n) const { return n <= capacity_ - used_; }
  std::byte* Take(uint64_t n) {
    std::byte* p = out_ + used_;
    used_ += n;
    return p;
  }
  uint64_t used() const { return used_; }

 private:
  std::byte* out_;
  uint64_t capacity_, used_ = 0;
};

// The JSON of a safetensors header of `header_bytes` (8-byte length prefix +
// JSON + padding) without its trailing padding spaces.
std::string_view TrimmedJson(const std::byte* header, uint64_t header_bytes) {
  const char* json = reinterpret_cast<const char*>(header) + 8;
  uint64_t n = header_bytes - 8;
  while (n > 0 && json[n - 1] == ' ') --n;
  return {json, static_cast<std::size_t>(n)};
}

// The target header as a patch of the base's: the shared prefix and suffix
// of the two trimmed JSONs, and the target's trimmed JSON length (its
// padding spaces up to target_header_bytes are implied).
struct HeaderPatch {
  uint64_t prefix = 0, suffix = 0, json_bytes = 0;
  uint64_t middle_bytes() const { return json_bytes - prefix - suffix; }
  uint64_t wire_bytes() const { return kHeaderPatchFixedBytes + middle_bytes(); }
};

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

// Reads and checks the header patch at the start of the body (without the
// base: the lengths against the body and the target header; with `base_json`
// also against the base's JSON).
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

// A safetensors header of `header_bytes` (at least 8 + the patch's JSON)
// from the base's JSON and a checked patch: the length prefix, the shared
// prefix, the carried bytes, the shared suffix, then spaces (the padding of
// Viper's PadHeader and of safetensors writers) up to `header_bytes`.
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

void PutRecordHeader(std::byte* p, uint32_t index, Encoding enc, unsigned e, unsigned rice, uint64_t count,
                     uint64_t payload) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(index >> (8 * i));
  p[4] = static_cast<std::byte>(enc);
  p[5] = static_cast<std::byte>(e);
  p[6] = static_cast<std::byte>(rice);
  p[7] = std::byte{0};
  PutU64(p + 8, count);
  PutU64(p + 16, payload);
}

std::string Bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / 1048576.0);
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  }
  return buf;
}

}  // namespace

const char* ToString(Encoding encoding) {
  switch (encoding) {
    case Encoding::kUnchanged:
      return "unchanged";
    case Encoding::kSparseGaps:
      return "sparse-gaps";
    case Encoding::kDense:
      return "dense";
  }
  return "?";
}

std::string EncodeSummary::BriefReport() const {
  if (full) return "full v" + std::to_string(target_version) + " (" + Bytes(full_bytes) + "): " + reason;
  char pct[32];
  std::snprintf(pct, sizeof(pct), "%.2f%%", full_bytes ? 100.0 * delta_bytes / full_bytes : 0.0);
  return "delta v" + std::to_string(target_version) + " <- v" + std::to_string(base_version) + ": " +
         Bytes(delta_bytes) + " of " + Bytes(full_bytes) + " (" + pct + "), " + std::to_string(tensors_unchanged) +
         " unchanged, " + std::to_string(tensors_sparse) + " sparse, " + std::to_string(tensors_dense) +
         " dense tensors";
}

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

LinkChoice ChooseOverLink(const LinkCosts& c) {
  LinkChoice out;
  if (c.delta_bytes == 0 || c.delta_bytes >= c.image_bytes) {
    out.reason = "full: no delta smaller than the image";
    return out;
  }
  if (!(c.link_bytes_per_s > 0) || !std::isfinite(c.link_bytes_per_s)) {
    out.reason = "full: link not measured yet";
    return out;
  }
  out.full_s = static_cast<double>(c.image_bytes) / c.link_bytes_per_s;
  out.delta_s = std::max(0.0, c.encode_s) + static_cast<double>(c.delta_bytes) / c.link_bytes_per_s +
                std::max(0.0, c.apply_s);
  out.delta = out.delta_s < out.full_s;
  char buf[128];
  if (out.delta) {
    std::snprintf(buf, sizeof(buf), "delta: predicted %.3g s < full %.3g s", out.delta_s, out.full_s);
  } else {
    std::snprintf(buf, sizeof(buf), "full: predicted delta %.3g s >= full %.3g s", out.delta_s, out.full_s);
  }
  out.reason = buf;
  return out;
}

StatusOr<ImageId> Identify(const std::byte* image, uint64_t size) {
  VIPER_ASSIGN_OR_RETURN(Image parsed, ParseImage(image, size, "image"));
  return ImageId{parsed.state.metadata.version, parsed.checksum};
}

// (Over 80 lines: the one pass over the tensors and the record writing stay together.)
StatusOr<EncodeSummary> Encode(const std::byte* base, uint64_t base_size, const std::byte* target,
                               uint64_t target_size, std::byte* out, uint64_t out_capacity) {
  VIPER_ASSIGN_OR_RETURN(Image b, ParseImage(base, base_size, "delta base image"));
  VIPER_ASSIGN_OR_RETURN(Image t, ParseImage(target, target_size, "delta target image"));
  EncodeSummary summary;
  summary.full_bytes = target_size;
  summary.base_version = b.state.metadata.version;
  summary.target_version = t.state.metadata.version;
  static const char kNotSmaller[] = "the delta would not be smaller than the image's data section";
  auto go_full = [&](std::string reason) {
    summary.full = true;
    summary.reason = std::move(reason);
    summary.delta_bytes = 0;
    summary.header_patch_bytes = 0;
    return summary;
  };
  if (t.state.metadata.version <= b.state.metadata.version) {
    return go_full("version " + std::to_string(t.state.metadata.version) + " is not newer than the base's " +
                   std::to_string(b.state.metadata.version));
  }
  const std::string diff = TableDifference(b, base, t, target);
  if (!diff.empty()) return go_full("tensor table changed since the base (" + diff + ")");
  if (b.state.size() > UINT32_MAX) return go_full("more tensors than a delta indexes");
  // A delta must save on the tensor bytes, not on the header alone: it is
  // smaller than the target's data section (format 1's rule, delta with the
  // whole header < image, came to the same), whatever room the caller gave.
  // Else a dense step would become a delta a few KB under the image.
  const uint64_t header_bytes = t.info.data_offset;
  const uint64_t data_bytes = target_size - header_bytes;
  const uint64_t room = std::min(out_capacity, data_bytes > 0 ? data_bytes - 1 : 0);
  Writer w(out, room);
  const std::string_view base_json = TrimmedJson(base, b.info.data_offset);
  const std::string_view target_json = TrimmedJson(target, header_bytes);
  const HeaderPatch patch = DiffHeaders(base_json, target_json);
  summary.header_patch_bytes = patch.wire_bytes();
  if (!w.Fits(kFixedHeaderBytes + patch.wire_bytes())) return go_full(kNotSmaller);
  std::byte* fixed = w.Take(kFixedHeaderBytes);
  std::byte* patch_out = w.Take(patch.wire_bytes());
  PutU64(patch_out, patch.prefix);
  PutU64(patch_out + 8, patch.suffix);
  PutU64(patch_out + 16, patch.json_bytes);
  std::memcpy(patch_out + kHeaderPatchFixedBytes, target_json.data() + patch.prefix, patch.middle_bytes());

  // Phase 1: scan every tensor and choose its record; stop as soon as the
  // delta cannot be smaller than the image (nothing copied yet).
  struct Choice {
    Encoding encoding = Encoding::kUnchanged;
    unsigned rice = 0;
    uint64_t payload = 0;
    uint64_t gaps_offset = 0, values_offset = 0;  // sparse: in the scanner's buffers
  };
  const auto& tb = b.state.tensors();
  const auto& tt = t.state.tensors();
  std::vector<Choice> choices(tt.size());
  Scanner scanner;
  uint64_t total = kFixedHeaderBytes + patch.wire_bytes();
  summary.tensors.reserve(tt.size());
  for (std::size_t i = 0; i < tt.size(); ++i) {
    const Tensor& new_t = tt[i];
    const unsigned e = static_cast<unsigned>(DTypeSize(new_t.dtype));
    TensorReport report;
    report.name = new_t.name;
    report.elements = new_t.size_bytes / e;
    const bool complete = scanner.Scan(tb[i].data, new_t.data, new_t.size_bytes, e);
    report.changed_elements = scanner.changed();
    Choice& c = choices[i];
    if (complete && scanner.changed() == 0) {
      scanner.Discard();
      ++summary.tensors_unchanged;
      summary.tensors.push_back(std::move(report));
      continue;
    }
    c.encoding = Encoding::kDense;
    c.payload = new_t.size_bytes;
    if (complete) {
      // The Rice parameter near log2 of the mean gap, best of three by exact size.
      const uint64_t k = scanner.changed();
      const uint64_t mean_gap = (report.elements - k) / k;
      const unsigned log_gap = mean_gap == 0 ? 0 : 63 - static_cast<unsigned>(__builtin_clzll(mean_gap));
      const unsigned r0 = std::min(log_gap == 0 ? 0u : log_gap - 1, 54u);
      uint64_t bytes[3];
      RiceBytes3(scanner.gaps(scanner.gaps_offset()), k, r0, bytes);
      for (unsigned j = 0; j < 3; ++j) {
        if (bytes[j] + k * e < c.payload) c.encoding = Encoding::kSparseGaps, c.payload = bytes[j] + k * e, c.rice = r0 + j;
      }
    }
    if (c.encoding == Encoding::kSparseGaps) {
      c.gaps_offset = scanner.gaps_offset();
      c.values_offset = scanner.values_offset();
    } else {
      scanner.Discard();
    }
    total += kRecordHeaderBytes + c.payload;
    if (total > room) return go_full(kNotSmaller);
    report.encoding = c.encoding;
    report.encoded_bytes = kRecordHeaderBytes + c.payload;
    (c.encoding == Encoding::kDense ? summary.tensors_dense : summary.tensors_sparse)++;
    summary.tensors.push_back(std::move(report));
  }

  // Phase 2: write the records.
  uint64_t records = 0;
  std::vector<std::byte> scratch;
  for (std::size_t i = 0; i < tt.size(); ++i) {
    const Choice& c = choices[i];
    if (c.encoding == Encoding::kUnchanged) continue;
    const Tensor& new_t = tt[i];
    const unsigned e = static_cast<unsigned>(DTypeSize(new_t.dtype));
    const uint64_t count = c.encoding == Encoding::kDense ? new_t.size_bytes / e : summary.tensors[i].changed_elements;
    PutRecordHeader(w.Take(kRecordHeaderBytes), static_cast<uint32_t>(i), c.encoding, e, c.rice, count, c.payload);
    std::byte* p = w.Take(c.payload);
    ++records;
    if (c.encoding == Encoding::kDense) {
      std::memcpy(p, new_t.data, new_t.size_bytes);
      continue;
    }
    // Code the gaps; the new values were gathered by the scan.
    const uint64_t values_at = c.payload - count * e;
    // The bit writer stores whole words: straight into the delta when the
    // values behind the bits leave room for its last store, else (a few
    // changed elements) through a scratch copy.
    const bool direct = count * e >= 8;
    if (!direct) scratch.assign(values_at + 8, std::byte{0});
    BitWriter bits(direct ? p : scratch.data());
    ForEachGap(scanner.gaps(c.gaps_offset), count, [&](uint64_t gap) { bits.PutRice(gap, c.rice); });
    VIPER_CHECK(bits.Finish() == values_at);
    if (!direct) std::memcpy(p, scratch.data(), values_at);
    std::memcpy(p + values_at, scanner.values(c.values_offset), count * e);
  }
  const uint64_t body = w.used() - kFixedHeaderBytes;
  std::memcpy(fixed, kMagic, sizeof(kMagic));
  PutU64(fixed + 8, b.state.metadata.version);
  PutU64(fixed + 16, b.checksum);
  PutU64(fixed + 24, t.state.metadata.version);
  PutU64(fixed + 32, t.checksum);
  PutU64(fixed + 40, target_size);
  PutU64(fixed + 48, header_bytes);
  PutU64(fixed + 56, base_size);
  PutU64(fixed + 64, records);
  PutU64(fixed + 72, body);
  PutU64(fixed + 80, Xxh3_64(fixed + kFixedHeaderBytes, body));
  PutU64(fixed + 88, Xxh3_64(fixed, 88));
  summary.delta_bytes = w.used();
  return summary;
}

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

std::string Where(uint64_t r, uint32_t index, const Tensor& t) {
  return "delta record " + std::to_string(r) + " (tensor " + std::to_string(index) + " '" + t.name.substr(0, 64) +
         "')";
}

// Checks every record of the body (from `records_at`, after the header patch) against the
// base's tensors: indices ascending and in range, element sizes, counts,
// payload sizes, every position inside its tensor, the body used exactly.
StatusOr<std::vector<Record>> CheckRecords(const DeltaHeader& h, const std::byte* body, uint64_t records_at,
                                           const Image& base) {
  std::vector<Record> records;
  const std::byte* p = body + records_at;
  const std::byte* end = body + h.body_bytes;
  const auto& tensors = base.state.tensors();
  int64_t previous = -1;
  for (uint64_t r = 0; r < h.record_count; ++r) {
    if (static_cast<uint64_t>(end - p) < kRecordHeaderBytes) {
      return DataLossError("delta truncated: record " + std::to_string(r) + " of " + std::to_string(h.record_count) +
                           " has no room for its header");
    }
    Record rec;
    rec.index = GetU32(p);
    const uint8_t enc = static_cast<uint8_t>(p[4]);
    const unsigned e = static_cast<uint8_t>(p[5]);
    rec.rice = static_cast<uint8_t>(p[6]);
    const bool reserved_zero =
        p[7] == std::byte{0} && (rec.rice == 0 || (enc == static_cast<uint8_t>(Encoding::kSparseGaps) && rec.rice <= 56));
    rec.count = GetU64(p + 8);
    rec.payload_bytes = GetU64(p + 16);
    p += kRecordHeaderBytes;
    if (enc != static_cast<uint8_t>(Encoding::kSparseGaps) && enc != static_cast<uint8_t>(Encoding::kDense)) {
      return InvalidArgumentError("delta record " + std::to_string(r) + ": unknown encoding " + std::to_string(enc) +
                                  " (1 sparse-gaps, 3 dense)");
    }
    if (rec.index >= tensors.size()) {
      return InvalidArgumentError("delta record " + std::to_string(r) + " names tensor " + std::to_string(rec.index) +
                                  "; the base has " + std::to_string(tensors.size()));
    }
    if (static_cast<int64_t>(rec.index) <= previous) {
      return InvalidArgumentError("delta record " + std::to_string(r) + ": tensor " + std::to_string(rec.index) +
                                  " does not follow tensor " + std::to_string(previous) + " (records ascend)");
    }
    previous = rec.index;
    const Tensor& t = tensors[rec.index];
    const uint64_t te = DTypeSize(t.dtype);
    const uint64_t n = t.size_bytes / te;
    if (e != te || !reserved_zero) {
      return InvalidArgumentError(Where(r, rec.index, t) + ": element size " + std::to_string(e) + " (the tensor's is " +
                                  std::to_string(te) + "), Rice parameter " + std::to_string(rec.rice) +
                                  " (at most 56, only for sparse-gaps) or reserved byte not zero");
    }
    if (rec.payload_bytes > static_cast<uint64_t>(end - p)) {
      return DataLossError(Where(r, rec.index, t) + ": payload of " + std::to_string(rec.payload_bytes) +
                           " bytes, only " + std::to_string(end - p) + " left in the delta");
    }
    rec.payload = p;
    p += rec.payload_bytes;
    if (enc == static_cast<uint8_t>(Encoding::kDense)) {
      rec.encoding = Encoding::kDense;
      if (rec.count != n || rec.payload_bytes != t.size_bytes) {
        return InvalidArgumentError(Where(r, rec.index, t) + ": dense record of " + std::to_string(rec.count) +
                                    " elements / " + std::to_string(rec.payload_bytes) + " bytes; the tensor has " +
                                    std::to_string(n) + " / " + std::to_string(t.size_bytes));
      }
    } else {
      rec.encoding = Encoding::kSparseGaps;
      if (rec.count == 0 || rec.count > n || rec.count > rec.payload_bytes / e) {
        return InvalidArgumentError(Where(r, rec.index, t) + ": " + std::to_string(rec.count) +
                                    " changed elements in a tensor of " + std::to_string(n) + " with " +
                                    std::to_string(rec.payload_bytes) + " payload bytes");
      }
      const uint64_t positions_bytes = rec.payload_bytes - rec.count * e;
      const uint8_t* q = reinterpret_cast<const uint8_t*>(rec.payload);
      BitReader bits(q, positions_bytes);
      uint64_t next = 0;
      for (uint64_t j = 0; j < rec.count; ++j) {
        uint64_t gap = 0;
        if (!bits.GetRice(rec.rice, n - next, &gap)) {
          return InvalidArgumentError(Where(r, rec.index, t) + ": position " + std::to_string(j) +
                                      " is truncated or lies past the tensor's " + std::to_string(n) + " elements");
        }
        next += gap + 1;
      }
      if (!bits.RestIsPadding()) {
        return InvalidArgumentError(Where(r, rec.index, t) + ": position bits left after the last position");
      }
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
