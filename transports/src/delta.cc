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
#include "delta_scan.h"
#include "staging.h"
#include "viper/core/checksum.h"

namespace viper {
namespace transports {
namespace delta {
using namespace internal;  // NOLINT: the format's byte helpers, image and header patch

namespace {

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
  bool started = false;  // between Start and Finish

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
      // Large payloads with streaming stores: the delta is sent from memory,
      // not read again here (ordinary stores would first read each line).
      if (new_t.size_bytes >= (1u << 20)) {
        transports::internal::StreamCopySequential(p, new_t.data, new_t.size_bytes);
      } else {
        std::memcpy(p, new_t.data, new_t.size_bytes);
      }
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
  // The last delta's scan buffers are kept: their pages are not faulted in again.
  Scanner scanner;
  if (state_ != nullptr) scanner = std::move(state_->scanner);
  scanner.Clear();
  state_.reset();
  VIPER_ASSIGN_OR_RETURN(Image b, ParseImage(base, base_size, "delta base image"));
  auto s = std::make_unique<State>();
  s->scanner = std::move(scanner);
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
  s->started = true;
  state_ = std::move(s);
  return Status::Ok();
}

void Encoder::Feed(const std::byte* data, uint64_t bytes) {
  VIPER_CHECK(state_ != nullptr && state_->started);  // Start first
  state_->Feed(data, bytes);
}

StatusOr<EncodeSummary> Encoder::Finish(const std::byte* target, uint64_t target_size, std::byte* out,
                                        uint64_t out_capacity) {
  if (state_ == nullptr || !state_->started) return FailedPreconditionError("delta encoder: Finish without Start");
  State* s = state_.get();
  s->started = false;  // kept for its buffers until the next Start
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
