#include "viper/transports/delta.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "delta_internal.h"
#include "staging.h"
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
// values, found by one pass over both images; the pass may come in pieces
// (Begin, then Scan of consecutive ranges of the tensor).
class Scanner {
 public:
  // Starts a tensor of `bytes` bytes: its gaps and values go after those of
  // earlier tensors.
  void Begin(uint64_t bytes) {
    gap_mark_ = gap_used_;
    val_mark_ = val_used_;
    k_ = next_ = 0;
    tensor_bytes_ = bytes;
  }
  // Scans `bytes` bytes (whole elements of `e` bytes; a multiple of 64 unless
  // they end the tensor) of `a` (base) against `b` (target), the tensor's
  // elements from `first` on, appending the changed elements' gaps and new
  // values (gathered while the line is in cache). Returns false when it
  // stopped early because no sparse record can be smaller than dense; then
  // scan no more of the tensor and call Discard.
  bool Scan(const std::byte* a, const std::byte* b, uint64_t bytes, unsigned e, uint64_t first) {
    switch (e) {
      case 1:
        return ScanAs<1>(a, b, bytes, first);
      case 2:
        return ScanAs<2>(a, b, bytes, first);
      case 4:
        return ScanAs<4>(a, b, bytes, first);
      default:
        return ScanAs<8>(a, b, bytes, first);
    }
  }
  // Forgets what the tensor's scans appended (a dense or unchanged tensor).
  void Discard() {
    gap_used_ = gap_mark_;
    val_used_ = val_mark_;
  }

  uint64_t changed() const { return k_; }
  // Where the tensor's gaps and values start in the buffers.
  uint64_t gaps_offset() const { return gap_mark_; }
  uint64_t values_offset() const { return val_mark_; }
  const uint32_t* gaps(uint64_t offset) const { return gaps_.get() + offset; }
  const std::byte* values(uint64_t offset) const { return values_.get() + offset; }

 private:
  // (Over 80 lines: the scan's state lives in locals, in registers: the
  // values are stored through std::byte pointers, which may alias anything
  // in memory, so members would be reloaded after every element.)
  template <unsigned E>
  bool ScanAs(const std::byte* a, const std::byte* b, uint64_t bytes, uint64_t first) {
    uint32_t* g = gaps_.get() + gap_used_;
    uint32_t* g_end = gaps_.get() + gap_capacity_;
    std::byte* v = values_.get() + val_used_;
    std::byte* v_end = values_.get() + val_capacity_;
    uint64_t k = k_, next = next_;
    const uint64_t dense = tensor_bytes_;
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
    // One changed element (its index in the tensor); false when sparse can no longer win.
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
      std::memcpy(v, b + (index - first) * E, E);
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
    // The changed elements of a mask of lanes (bit i: element at + i).
    auto elements = [&](uint64_t mask, uint64_t at) {
      for (; mask != 0; mask &= mask - 1) {
        if (!record(at + static_cast<unsigned>(__builtin_ctzll(mask)))) return false;
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
      complete = elements(mask, first + w * (8 / E));
    }
    for (; complete && w < words; ++w) {
      const uint64_t x = Load64(a + 8 * w) ^ Load64(b + 8 * w);
      if (x == 0) continue;
      reserve((8 / E) * 3, 8);
      complete = elements(lanes(x), first + w * (8 / E));
    }
    // The last bytes % 8 bytes, a whole number of elements (E divides 8).
    for (uint64_t off = words * 8; complete && off < bytes; off += E) {
      if (std::memcmp(a + off, b + off, E) == 0) continue;
      reserve(3, E);
      complete = record(first + off / E);
    }
    gap_used_ = static_cast<uint64_t>(g - gaps_.get());
    val_used_ = static_cast<uint64_t>(v - values_.get());
    k_ = k;
    next_ = next;
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

  uint64_t k_ = 0, next_ = 0, tensor_bytes_ = 0;  // the tensor being scanned
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


namespace {

// What Encode chose for one tensor.
struct Choice {
  Encoding encoding = Encoding::kUnchanged;
  unsigned rice = 0;
  uint64_t payload = 0;
  uint64_t gaps_offset = 0, values_offset = 0;  // sparse: in the scanner's buffers
  uint64_t records = 0;                         // bytes of the records up to this one's, included
};

}  // namespace

// The scan's progress through the base's table, and what was chosen.
struct Encoder::State {
  const std::byte* base = nullptr;
  Image b;
  std::vector<uint64_t> begin;  // per tensor of the base, its data-section offset
  uint64_t data_bytes = 0;      // of the base's data section
  Scanner scanner;
  std::vector<Choice> choices;  // per tensor closed
  EncodeSummary summary;        // its tensors and counts, per tensor closed
  uint64_t fed = 0;             // data-section bytes fed
  bool open = false;            // choices.size() is being scanned
  bool stopped = false;         // and sparse can no longer win (the rest not scanned)
  std::byte carry[64];          // the fed bytes of a 64-byte block not yet scanned
  unsigned carry_bytes = 0;
  uint64_t carry_at = 0;  // tensor offset of carry[0]
  // Records beyond `limit` bytes cannot make a delta smaller than the image
  // (with Encode's header patch, or at least an empty one): nothing more is scanned.
  uint64_t limit = 0;
  bool hopeless = false;

  std::size_t tensors() const { return b.state.size(); }
  const Tensor& base_tensor(std::size_t i) const { return b.state.tensors()[i]; }
  // Scans `n` bytes at `p`, offset `at` of the open tensor.
  void ScanPiece(const std::byte* p, uint64_t n, uint64_t at);
  bool ScanBytes(const std::byte* b_bytes, uint64_t n, uint64_t at);
  // Chooses the open tensor's record.
  void Close();
  void Feed(const std::byte* data, uint64_t bytes);
  // The cheap checks of Encode before any scan: a newer version, the same
  // table, the header patch fitting. A summary saying "full" when one fails.
  std::optional<EncodeSummary> Check(const Image& t, const std::byte* target, uint64_t room, HeaderPatch* patch);
  StatusOr<EncodeSummary> Write(const Image& t, const std::byte* target, const HeaderPatch& patch, uint64_t room,
                                std::byte* out);
};

namespace {

const char kNotSmaller[] = "the delta would not be smaller than the image's data section";

// `summary` saying "full" for `reason`.
EncodeSummary GoFull(EncodeSummary summary, std::string reason) {
  summary.full = true;
  summary.reason = std::move(reason);
  summary.delta_bytes = 0;
  summary.header_patch_bytes = 0;
  return summary;
}

// Room for a delta of a `target_size`-byte image with `header_bytes` of header:
// smaller than the data section (it must save on tensor bytes, not on the
// header alone, else a dense step would become a delta a few KB under the
// image), and within the caller's buffer.
uint64_t Room(uint64_t target_size, uint64_t header_bytes, uint64_t out_capacity) {
  const uint64_t data_bytes = target_size - header_bytes;
  return std::min(out_capacity, data_bytes > 0 ? data_bytes - 1 : 0);
}

}  // namespace

bool Encoder::State::ScanBytes(const std::byte* b_bytes, uint64_t n, uint64_t at) {
  const Tensor& t = base_tensor(choices.size());
  const unsigned e = static_cast<unsigned>(DTypeSize(t.dtype));
  return scanner.Scan(t.data + at, b_bytes, n, e, at / e);
}

void Encoder::State::ScanPiece(const std::byte* p, uint64_t n, uint64_t at) {
  const uint64_t size = base_tensor(choices.size()).size_bytes;
  if (carry_bytes > 0) {
    // Complete the carried block first (or the tensor's last bytes).
    const uint64_t m = std::min<uint64_t>(n, 64 - carry_bytes);
    std::memcpy(carry + carry_bytes, p, m);
    carry_bytes += static_cast<unsigned>(m);
    p += m;
    n -= m;
    at += m;
    if (carry_bytes < 64 && at < size) return;
    stopped = !ScanBytes(carry, carry_bytes, carry_at);
    carry_bytes = 0;
    if (stopped || n == 0) return;
  }
  // Whole 64-byte blocks of the tensor (all of it at its end); the rest carried.
  const uint64_t whole = at + n == size ? n : n / 64 * 64;
  if (whole > 0 && !ScanBytes(p, whole, at)) {
    stopped = true;
    return;
  }
  carry_bytes = static_cast<unsigned>(n - whole);
  carry_at = at + whole;
  std::memcpy(carry, p + whole, carry_bytes);
}

// (Over 80 lines only with its comments: the choice between the three records.)
void Encoder::State::Close() {
  const std::size_t i = choices.size();
  const Tensor& t = base_tensor(i);
  const unsigned e = static_cast<unsigned>(DTypeSize(t.dtype));
  open = false;
  const bool complete = !stopped;
  TensorReport report;
  report.name = t.name;
  report.elements = t.size_bytes / e;
  report.changed_elements = scanner.changed();
  Choice c;
  c.records = i > 0 ? choices.back().records : 0;
  if (complete && scanner.changed() == 0) {
    scanner.Discard();
    ++summary.tensors_unchanged;
    summary.tensors.push_back(std::move(report));
    choices.push_back(c);
    return;
  }
  c.encoding = Encoding::kDense;
  c.payload = t.size_bytes;
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
  c.records += kRecordHeaderBytes + c.payload;
  report.encoding = c.encoding;
  report.encoded_bytes = kRecordHeaderBytes + c.payload;
  choices.push_back(c);
  if (c.records > limit) {
    // No delta can be smaller: Write says so, with the tensors up to this one reported.
    hopeless = true;
    return;
  }
  (c.encoding == Encoding::kDense ? summary.tensors_dense : summary.tensors_sparse)++;
  summary.tensors.push_back(std::move(report));
}

void Encoder::State::Feed(const std::byte* data, uint64_t bytes) {
  for (;;) {
    // Close the tensors that end here (zero-byte ones included) and open the next.
    while (!hopeless && choices.size() < tensors()) {
      const std::size_t i = choices.size();
      const uint64_t end = begin[i] + base_tensor(i).size_bytes;
      if (!open && fed >= begin[i]) {
        open = true;
        stopped = false;
        carry_bytes = 0;
        scanner.Begin(base_tensor(i).size_bytes);
      }
      if (!open || fed < end) break;
      Close();
    }
    if (bytes == 0) return;
    uint64_t n = bytes;
    if (hopeless || choices.size() == tensors()) {
      n = bytes;  // nothing more to scan: past the base's data, or no delta can win
    } else if (!open) {
      n = std::min(n, begin[choices.size()] - fed);  // not in a tensor (a safetensors image has no such bytes)
    } else {
      const std::size_t i = choices.size();
      n = std::min(n, begin[i] + base_tensor(i).size_bytes - fed);
      if (!stopped) ScanPiece(data, n, fed - begin[i]);
    }
    data += n;
    bytes -= n;
    fed += n;
  }
}

std::optional<EncodeSummary> Encoder::State::Check(const Image& t, const std::byte* target, uint64_t room,
                                                   HeaderPatch* patch) {
  EncodeSummary s;
  s.full_bytes = t.size;
  s.base_version = b.state.metadata.version;
  s.target_version = t.state.metadata.version;
  if (t.state.metadata.version <= b.state.metadata.version) {
    return GoFull(s, "version " + std::to_string(t.state.metadata.version) + " is not newer than the base's " +
                         std::to_string(b.state.metadata.version));
  }
  const std::string diff = TableDifference(b, base, t, target);
  if (!diff.empty()) return GoFull(s, "tensor table changed since the base (" + diff + ")");
  if (b.state.size() > UINT32_MAX) return GoFull(s, "more tensors than a delta indexes");
  *patch = DiffHeaders(TrimmedJson(base, b.info.data_offset), TrimmedJson(target, t.info.data_offset));
  s.header_patch_bytes = patch->wire_bytes();
  if (kFixedHeaderBytes + patch->wire_bytes() > room) return GoFull(s, kNotSmaller);
  return std::nullopt;
}

StatusOr<EncodeSummary> Encoder::State::Write(const Image& t, const std::byte* target, const HeaderPatch& patch,
                                              uint64_t room, std::byte* out) {
  Feed(nullptr, 0);  // closes the zero-byte tensors at the end
  if (fed < data_bytes || (!hopeless && choices.size() < tensors())) {
    return FailedPreconditionError("delta encoder: " + std::to_string(fed) + " of the image's " +
                                   std::to_string(data_bytes) + " data bytes were fed before Finish");
  }
  const uint64_t head = kFixedHeaderBytes + patch.wire_bytes();
  summary.full_bytes = t.size;
  summary.base_version = b.state.metadata.version;
  summary.target_version = t.state.metadata.version;
  summary.header_patch_bytes = patch.wire_bytes();
  // Not smaller: the tensors reported are those up to the first record past the room.
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (head + choices[i].records <= room) continue;
    EncodeSummary full = summary;
    full.tensors.resize(i);
    full.tensors_unchanged = full.tensors_sparse = full.tensors_dense = 0;
    for (const TensorReport& r : full.tensors) {
      (r.encoding == Encoding::kUnchanged  ? full.tensors_unchanged
       : r.encoding == Encoding::kDense    ? full.tensors_dense
                                           : full.tensors_sparse)++;
    }
    return GoFull(std::move(full), kNotSmaller);
  }
  if (hopeless) return GoFull(summary, kNotSmaller);
  Writer w(out, room);
  std::byte* fixed = w.Take(kFixedHeaderBytes);
  std::byte* patch_out = w.Take(patch.wire_bytes());
  PutU64(patch_out, patch.prefix);
  PutU64(patch_out + 8, patch.suffix);
  PutU64(patch_out + 16, patch.json_bytes);
  const std::string_view target_json = TrimmedJson(target, t.info.data_offset);
  std::memcpy(patch_out + kHeaderPatchFixedBytes, target_json.data() + patch.prefix, patch.middle_bytes());
  uint64_t records = 0;
  std::vector<std::byte> scratch;
  const auto& tt = t.state.tensors();
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
  PutU64(fixed + 40, t.size);
  PutU64(fixed + 48, t.info.data_offset);
  PutU64(fixed + 56, b.size);
  PutU64(fixed + 64, records);
  PutU64(fixed + 72, body);
  PutU64(fixed + 80, Xxh3_64(fixed + kFixedHeaderBytes, body));
  PutU64(fixed + 88, Xxh3_64(fixed, 88));
  summary.delta_bytes = w.used();
  return summary;
}

Encoder::Encoder() = default;
Encoder::~Encoder() = default;

Status Encoder::Start(const std::byte* base, uint64_t base_size) {
  state_.reset();
  VIPER_ASSIGN_OR_RETURN(Image b, ParseImage(base, base_size, "delta base image"));
  auto s = std::make_unique<State>();
  s->base = base;
  s->b = std::move(b);
  s->data_bytes = base_size - s->b.info.data_offset;
  for (const Tensor& t : s->b.state.tensors()) s->begin.push_back(Offset(s->b, base, t));
  s->choices.reserve(s->tensors());
  s->summary.tensors.reserve(s->tensors());
  // With the smallest header patch, the most the records may take.
  const uint64_t room = s->data_bytes > 0 ? s->data_bytes - 1 : 0;
  const uint64_t head = kFixedHeaderBytes + kHeaderPatchFixedBytes;
  s->limit = room > head ? room - head : 0;
  s->hopeless = room < head;
  state_ = std::move(s);
  return Status::Ok();
}

void Encoder::Feed(const std::byte* data, uint64_t bytes) {
  VIPER_CHECK(state_ != nullptr);  // Start first
  state_->Feed(data, bytes);
}

StatusOr<EncodeSummary> Encoder::Finish(const std::byte* target, uint64_t target_size, std::byte* out,
                                        uint64_t out_capacity) {
  if (state_ == nullptr) return FailedPreconditionError("delta encoder: Finish without Start");
  std::unique_ptr<State> s = std::move(state_);
  VIPER_ASSIGN_OR_RETURN(Image t, ParseImage(target, target_size, "delta target image"));
  const uint64_t room = Room(target_size, t.info.data_offset, out_capacity);
  HeaderPatch patch;
  if (auto full = s->Check(t, target, room, &patch)) return *full;
  return s->Write(t, target, patch, room, out);
}

StatusOr<EncodeSummary> Encode(const std::byte* base, uint64_t base_size, const std::byte* target,
                               uint64_t target_size, std::byte* out, uint64_t out_capacity) {
  Encoder encoder;
  VIPER_RETURN_IF_ERROR(encoder.Start(base, base_size));
  Encoder::State& s = *encoder.state_;
  VIPER_ASSIGN_OR_RETURN(Image t, ParseImage(target, target_size, "delta target image"));
  // The cheap checks before the scan, and the exact room for the records.
  const uint64_t room = Room(target_size, t.info.data_offset, out_capacity);
  HeaderPatch patch;
  if (auto full = s.Check(t, target, room, &patch)) return *full;
  s.limit = room - kFixedHeaderBytes - patch.wire_bytes();
  s.Feed(target + t.info.data_offset, target_size - t.info.data_offset);
  return s.Write(t, target, patch, room, out);
}

uint64_t CopyHashAndFeed(const std::vector<Span>& ranges, std::byte* dst, Encoder* encoder) {
  uint64_t total = 0;
  for (const Span& r : ranges) total += r.size;
  // Streaming stores from 8 MiB on, as staging.cc's snapshot (the image is
  // not read again soon; ordinary stores would first read each line).
  void (*copy)(std::byte*, const std::byte*, std::size_t) =
      total >= transports::internal::StagedVersion::kStreamCopyMinBytes
          ? transports::internal::StreamCopySequential
          : +[](std::byte* to, const std::byte* from, std::size_t n) { std::memcpy(to, from, n); };
  Xxh3Hasher hasher;
  for (const Span& r : ranges) {
    for (uint64_t off = 0; off < r.size; off += kFuseSliceBytes) {
      const uint64_t n = std::min(kFuseSliceBytes, r.size - off);
      const std::byte* slice = r.data + off;
      // The diff reads the slice and the base's (from memory); the copy and
      // the hash then read the slice from cache.
      if (encoder != nullptr) encoder->Feed(slice, n);
      copy(dst, slice, n);
      hasher.Update(slice, n);
      dst += n;
    }
  }
  return hasher.Digest();
}

}  // namespace delta
}  // namespace transports
}  // namespace viper
