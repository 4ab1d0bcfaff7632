#include "viper/transports/delta.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include "delta_internal.h"
#include "viper/core/checksum.h"

namespace viper {
namespace transports {
namespace delta {
using namespace internal;  // NOLINT: the format's byte helpers, image and header patch

namespace {

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


}  // namespace delta
}  // namespace transports
}  // namespace viper
