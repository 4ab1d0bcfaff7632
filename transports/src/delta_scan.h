// Internal to the delta encoder (delta.cc), not installed: the one pass
// that finds a tensor's changed elements (Scanner, resumable slice by slice
// for the fused snapshot pass) and the Golomb-Rice coding of their gaps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "delta_internal.h"

namespace viper {
namespace transports {
namespace delta {
namespace internal {

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

// How far ahead of the block being compared the scan prefetches both images
// (128 MiB, min of 9 on the loaded 2-core VM, fused pass / memcpy: none 2.0
// unchanged, 3.6 BF16 2%; 512 bytes 1.4-1.5, 2.9-3.6; 2048 1.5-1.65, 2.7-2.9;
// 4096 1.4-1.5, 2.7-3.0). A prefetch past the end of a buffer does not fault.
constexpr uint64_t kPrefetchBytes = 2048;

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
inline void RiceBytes3(const uint32_t* p, uint64_t k, unsigned r0, uint64_t out[3]) {
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
  // Forgets every tensor's gaps and values (the buffers are kept).
  void Clear() { gap_used_ = gap_mark_ = val_used_ = val_mark_ = k_ = next_ = 0; }
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
    // Bits 0, E, 2E, ...: an element's first byte in a 64-bit byte mask.
    constexpr uint64_t kFirstBytes = E == 1 ? ~0ull : E == 2 ? 0x5555555555555555ull : E == 4 ? 0x1111111111111111ull
                                                                                          : 0x0101010101010101ull;
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
#if defined(__SSE2__)
      // Keep loads in flight past the mispredicted branches of changed blocks.
      __builtin_prefetch(pa + kPrefetchBytes);
      __builtin_prefetch(pb + kPrefetchBytes);
      // One bit per equal byte from four 16-byte compares, then the changed
      // bytes walked an element at a time (fewer instructions per block than
      // the lane masks below, and no spill of eight words).
      uint64_t same = 0;
      for (int i = 0; i < 4; ++i) {
        const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pa) + i);
        const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pb) + i);
        same |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(va, vb)))) << (16 * i);
      }
      if (same == ~0ull) continue;
      reserve(8 * (8 / E) * 3, 64);
      const uint64_t at = first + w * (8 / E);
      // One bit per changed element, at its first byte.
      uint64_t changed = ~same;
      for (unsigned shift = 1; shift < E; shift <<= 1) changed |= changed >> shift;
      changed &= kFirstBytes;
      // The usual block (up to four changed elements, no wide gap, far from
      // either stop of `record`: with four more, k * E + k / 8 stays below
      // dense and k * (8E + 1) < next * 8E for each, since next > at)
      // without a branch per element: four gaps and values written whatever
      // the count, which then advances the buffers.
      uint64_t beyond4 = changed;
      for (int j = 0; j < 4; ++j) beyond4 &= beyond4 - 1;
      const uint64_t k4 = k + 4;
      if (beyond4 == 0 && at + 64 - next < kWideGap && k4 * E + (k4 + 7) / 8 < dense &&
          k4 * (8 * E + 1) < (at + 1) * 8 * E) {
        uint64_t c = changed;
        uint64_t last = next;
        unsigned n = 0;
        for (unsigned j = 0; j < 4; ++j) {
          // An empty slot reads the block's last element (written, not kept).
          const uint64_t index = at + static_cast<unsigned>(__builtin_ctzll(c | (1ull << 63))) / E;
          g[j] = static_cast<uint32_t>(index - last);
          std::memcpy(v + j * E, b + (index - first) * E, E);
          const bool real = c != 0;
          last = real ? index + 1 : last;
          n += real;
          c &= c - 1;
        }
        g += n;
        v += n * E;
        k += n;
        next = last;
        continue;
      }
      for (; changed != 0; changed &= changed - 1) {
        if (!record(at + static_cast<unsigned>(__builtin_ctzll(changed)) / E)) {
          complete = false;
          break;
        }
      }
      continue;
#endif
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

}  // namespace internal
}  // namespace delta
}  // namespace transports
}  // namespace viper
