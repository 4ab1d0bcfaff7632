// The host tier's delta path, both halves (tier_host_delta.h). MPI builds
// only (mpi_stub.cc otherwise).
#include "tier_host_delta.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "back_buffer.h"
#include "host_stream.h"
#include "keep_until_finalize.h"
#include "viper/core/checksum.h"
#include "viper/core/log.h"

namespace viper {
namespace transports {
namespace internal {

// ---------------------------------------------------------------- producer

namespace {

// `*buffer` with room for `bytes` (contents not kept).
Status Reserve(AlignedBuffer* buffer, uint64_t bytes) {
  if (buffer->capacity() >= bytes) return Status::Ok();
  VIPER_ASSIGN_OR_RETURN(*buffer, AlignedBuffer::Allocate(bytes));
  return Status::Ok();
}

}  // namespace

Status HostDeltaOffer::Prepare(const StreamSource& src, const char* producer_host) {
  tried_ = offered_ = false;
  chunks_.clear();
  skipped_.clear();
  next_bytes_ = 0;
  host_ = producer_host;
  ++sends_;
  if (options_.delta == DeltaMode::kOff || !keep_) return Status::Ok();
  const bool automatic = options_.delta == DeltaMode::kAuto;
  if (automatic && rest_ > 0) {
    // No consumer gained at the last measurement: neither the image copy
    // nor the diff until the next one (choices_ keeps its reasons).
    --rest_;
    skipped_ = "auto, no diff until version " + std::to_string(src.version + rest_ + 2);
    return Status::Ok();
  }
  choices_.clear();
  const uint64_t image_bytes = src.header_bytes + src.data_bytes;
  next_version_ = src.version;
  header_bytes_ = src.header_bytes;
  VIPER_RETURN_IF_ERROR(Reserve(&next_, image_bytes));
  // Diff this version? Decided before the copy, which the diff rides on.
  bool diff = base_bytes_ > 0;  // else nothing to diff against yet
  if (diff && automatic && !measure_) {
    // Worth a diff? Predicted from the last delta's size and the measured
    // encode rate (before any: a tiny delta, a free encode, so that a
    // measured link gets one try).
    const uint64_t predicted = delta_fraction_ > 0 ? static_cast<uint64_t>(delta_fraction_ * image_bytes) : 1;
    if (!ChooseLinks(image_bytes, std::max<uint64_t>(predicted, 1), encode_s_per_byte_ * image_bytes)) {
      Rest();
      skipped_ = "auto, not diffed";
      diff = false;
    }
  }
  if (diff) {
    const Status started = encoder_.Start(base_.data(), base_bytes_);
    if (!started.ok()) return NotEncoded(started);  // the base is ours: it should always parse
  }
  // The image: the data copied, hashed and (with a diff) diffed against the
  // base a slice at a time, while each slice is in cache (one pass: the
  // model and the base read once, the image written once); then the header.
  std::vector<delta::Span> spans;
  uint64_t at = 0;
  for (const ByteRange& r : src.ranges) {
    spans.push_back({r.data, r.size});
    at += r.size;
  }
  if (at != src.data_bytes) return InternalError("stream ranges do not add up to the data section");
  const double t0 = MonotonicSeconds();
  digest_ = delta::CopyHashAndFeed(spans, next_.data() + src.header_bytes, diff ? &encoder_ : nullptr);
  const double pass_s = MonotonicSeconds() - t0;
  header_ = src.header(digest_);
  std::memcpy(next_.data(), header_.get(), src.header_bytes);
  next_bytes_ = image_bytes;
  const double per_byte_pass = pass_s / static_cast<double>(std::max<uint64_t>(image_bytes, 1));
  if (!diff) {
    // The copy + hash alone: what a diff's pass costs beyond it is the diff's.
    copy_s_per_byte_ = copy_s_per_byte_ > 0 ? 0.5 * (copy_s_per_byte_ + per_byte_pass) : per_byte_pass;
    return Status::Ok();
  }
  measure_ = false;
  // A buffer the last failed send may still read is kept; take a new one.
  if (!delta_ || delta_.use_count() > 1) delta_ = std::make_shared<AlignedBuffer>();
  VIPER_RETURN_IF_ERROR(Reserve(delta_.get(), next_bytes_));
  tried_ = true;
  const double t1 = MonotonicSeconds();
  auto encoded = encoder_.Finish(next_.data(), next_bytes_, delta_->data(), next_bytes_);
  // The diff + encode: the fused pass beyond a plain copy + hash (as measured
  // on versions not diffed; before one, the whole pass), and the records.
  const double encode_s =
      std::max(0.0, pass_s - copy_s_per_byte_ * static_cast<double>(image_bytes)) + MonotonicSeconds() - t1;
  if (!encoded.ok()) return NotEncoded(encoded.status());
  summary_ = *encoded;
  const double per_byte = encode_s / static_cast<double>(next_bytes_);
  encode_s_per_byte_ = encode_s_per_byte_ > 0 ? 0.5 * (encode_s_per_byte_ + per_byte) : per_byte;
  delta_fraction_ =
      summary_.full ? 1.0 : static_cast<double>(summary_.delta_bytes) / static_cast<double>(next_bytes_);
  offered_ = !summary_.full;
  // Auto: offered to the consumers on other nodes predicted to gain, with
  // this version's delta size and encode time.
  if (offered_ && automatic) {
    offered_ = ChooseLinks(next_bytes_, summary_.delta_bytes, encode_s);
    if (!offered_) Rest();
  }
  if (!offered_ && !automatic) choices_.clear();
  if (offered_) AppendChunks(delta_->data(), summary_.delta_bytes, options_.chunk_bytes, &chunks_);
  return Status::Ok();
}

Status HostDeltaOffer::NotEncoded(const Status& why) {
  // Not a Viper image pair the codec can diff (it should always be): full.
  tried_ = true;
  summary_ = delta::EncodeSummary{};
  summary_.full = true;
  summary_.reason = why.ToString();
  choices_.clear();
  return Status::Ok();
}

void HostDeltaOffer::Rest() {
  // Every 8 versions: 6 without the image copy, one copied (the base), one
  // diffed whatever the prediction (the encode rate and the delta's size
  // re-measured).
  rest_ = 6;
  measure_ = true;
}

bool HostDeltaOffer::ChooseLinks(uint64_t image_bytes, uint64_t delta_bytes, double encode_s) {
  choices_.clear();
  bool any = false;
  for (const auto& [rank, link] : links_) {
    if (!link.other_node) continue;
    delta::LinkChoice& choice = choices_[rank];
    if (rank >= kMaxAutoRank) {
      choice.reason = "full: auto offers deltas to ranks below " + std::to_string(kMaxAutoRank);
      continue;
    }
    delta::LinkCosts costs;
    costs.image_bytes = image_bytes;
    costs.delta_bytes = delta_bytes;
    costs.encode_s = encode_s;
    // The consumer's copy + apply + verify, as measured; before that, as
    // long as the producer's diff (a pass over two images each).
    costs.apply_s =
        link.apply_s_per_byte > 0 ? link.apply_s_per_byte * static_cast<double>(image_bytes) : encode_s;
    costs.link_bytes_per_s = link.bytes_per_s;
    choice = delta::ChooseOverLink(costs);
    any |= choice.delta;
  }
  return any;
}

void HostDeltaOffer::Offer(HostPayload* p) const {
  if (!offered_) return;
  p->delta_bytes = summary_.delta_bytes;
  p->delta_chunk_bytes = options_.chunk_bytes;
  p->delta_base_version = base_version_;
  p->delta_base_checksum = base_checksum_;
  p->delta_shm = for_shm() ? 1 : 0;
  if (options_.delta != DeltaMode::kAuto) return;
  p->delta_shm = 2;
  for (const auto& [rank, choice] : choices_) {
    if (choice.delta && rank >= 0 && rank < kMaxAutoRank) p->delta_ranks[rank / 64] |= 1ull << (rank % 64);
  }
}

bool HostDeltaOffer::Takes(int rank, const Ready& ready) const {
  if (!offered_ || ready.path != kPathDelta || ready.held_version != base_version_ ||
      ready.held_checksum != base_checksum_)
    return false;
  if (options_.delta != DeltaMode::kAuto) return true;
  const auto it = choices_.find(rank);
  return it != choices_.end() && it->second.delta;
}

void HostDeltaOffer::Measure(int rank, const Ready& ready, uint64_t bytes, double seconds, bool took,
                             double load_s) {
  if (options_.delta != DeltaMode::kAuto) return;
  Link& link = links_[rank];
  link.seen = sends_;
  link.other_node = host_ != nullptr && strncmp(ready.host, host_, sizeof(ready.host)) != 0;
  // Throughput from transfers long enough not to be latency alone.
  if (seconds > 0 && bytes >= (1u << 20)) {
    const double rate = static_cast<double>(bytes) / seconds;
    link.bytes_per_s = link.bytes_per_s > 0 ? 0.5 * (link.bytes_per_s + rate) : rate;
  }
  // The consumer's copy + apply + verify: its load time less the delta's transfer.
  if (took && load_s > 0 && link.bytes_per_s > 0 && next_bytes_ > 0) {
    const double apply_s = load_s - static_cast<double>(summary_.delta_bytes) / link.bytes_per_s;
    if (apply_s > 0) {
      const double per_byte = apply_s / static_cast<double>(next_bytes_);
      link.apply_s_per_byte = link.apply_s_per_byte > 0 ? 0.5 * (link.apply_s_per_byte + per_byte) : per_byte;
    }
  }
}

std::string HostDeltaOffer::Reason(int rank, bool took) const {
  if (options_.delta == DeltaMode::kOff) return "";
  const std::string base = "version " + std::to_string(base_version_);
  if (options_.delta == DeltaMode::kOn) {
    if (took) return "delta: on";
    if (offered_) return "full: it does not hold " + base;
    return tried_ ? "full: " + summary_.reason : "full: no base kept yet";
  }
  const auto link = links_.find(rank);
  if (link != links_.end() && !link->second.other_node) return "full: on the producer's node (shared memory)";
  const auto choice = choices_.find(rank);
  if (choice != choices_.end()) {
    if (!skipped_.empty()) return "full: " + skipped_ + " (" + choice->second.reason + ")";
    if (took || !choice->second.delta) return choice->second.reason;
    return "full: it does not hold " + base;
  }
  if (!skipped_.empty()) return "full: " + skipped_;
  if (link == links_.end() || link->second.bytes_per_s <= 0) return "full: link not measured yet";
  if (tried_ && summary_.full) return "full: " + summary_.reason;
  return "full: no base kept yet";
}

void HostDeltaOffer::Commit(bool other_node) {
  // Consumers that did not answer this version are no longer served.
  for (auto it = links_.begin(); it != links_.end();) {
    it = it->second.seen == sends_ ? std::next(it) : links_.erase(it);
  }
  keep_ = options_.delta == DeltaMode::kOn || other_node;
  if (!keep_ || next_bytes_ == 0) {
    base_bytes_ = 0;  // no base: the next version is full for everyone
    return;
  }
  std::swap(base_, next_);
  base_bytes_ = next_bytes_;
  base_version_ = next_version_;
  base_checksum_ = digest_;
  next_bytes_ = 0;
}

std::string HostDeltaOffer::Encoding(int takers) const {
  if (!tried_) return skipped_.empty() ? "" : "full (" + skipped_ + ")";
  if (!offered_) {
    if (summary_.full) return "full (" + summary_.BriefReport() + ")";
    return "full (auto: no consumer on another node is predicted to gain; " + summary_.BriefReport() + ")";
  }
  return summary_.BriefReport() + " (to " + std::to_string(takers) + " consumer" + (takers == 1 ? "" : "s") + ")";
}

// ---------------------------------------------------------------- consumer

namespace {

class DeltaReceiver : public TierReceiver {
 public:
  DeltaReceiver(ConsumerControl* control, LandingPool* pool,
                std::function<std::shared_ptr<const ModelVersion>()> held)
      : control_(control), held_(std::move(held)), back_(pool) {}

  // Offered against the version this consumer serves; on the producer's
  // node with the segment offered, only when the producer offers it there.
  bool Takes(const Announce& a) override {
    base_.reset();
    if (a.kind != kAnnounceHost || !held_) return false;
    const auto p = DecodeHostPayload(a);
    if (!p.ok() || p->delta_bytes == 0) return false;
    std::shared_ptr<const ModelVersion> held = held_();
    const ModelVersion* h = HeldImage(held);
    if (h == nullptr || h->state.metadata.version != p->delta_base_version ||
        h->checksum != p->delta_base_checksum)
      return false;
    // On the producer's node the link is shared memory (the shm segment, or
    // MPI's own shared-memory transport for two-sided), as fast as the
    // apply: the full version unless the producer offers the delta there too.
    const bool same_node = strncmp(a.host, control_->host(), sizeof(a.host)) == 0;
    if (same_node && p->delta_shm != 1) return false;
    // Auto: only the consumers the producer chose (by its measured rates).
    const int me = control_->rank();
    if (p->delta_shm == 2 && (me < 0 || me >= HostDeltaOffer::kMaxAutoRank ||
                              (p->delta_ranks[me / 64] & (1ull << (me % 64))) == 0))
      return false;
    base_ = std::move(held);
    return true;
  }

  StatusOr<Landed> Receive(const Announce& a) override;
  std::string Source(const Announce&) const override { return control_->ProducerName() + " (delta)"; }

 private:
  ConsumerControl* control_;
  std::function<std::shared_ptr<const ModelVersion>()> held_;
  std::shared_ptr<const ModelVersion> base_;  // what Takes matched
  std::shared_ptr<AlignedBuffer> delta_;      // received deltas land here
  BackBuffer back_;                           // the landing buffer brought forward
};

StatusOr<Landed> DeltaReceiver::Receive(const Announce& a) {
  const double t0 = MonotonicSeconds();
  const std::shared_ptr<const ModelVersion> base = std::move(base_);
  if (base == nullptr) return InternalError("the delta path received an announcement it did not take");
  const auto decoded = DecodeHostPayload(a);  // Takes decoded it already
  const HostPayload p = decoded.ok() ? *decoded : HostPayload{};
  Ready ready = control_->ReadyFor(a);
  ready.path = kPathDelta;
  ready.held_version = base->state.metadata.version;
  ready.held_checksum = base->checksum;
  // Room for the rebuilt image and, first, the held one: the back buffer
  // to bring forward, or any buffer to copy it into.
  bool forward = false;
  auto buffer =
      back_.Acquire(*base, std::max(a.image_bytes, base->size_bytes), /*may_forward=*/true, &forward);
  if (buffer.ok() && (!delta_ || delta_.use_count() > 1)) delta_ = std::make_shared<AlignedBuffer>();
  if (buffer.ok() && delta_->capacity() < p.delta_bytes) {
    auto fresh = AlignedBuffer::Allocate(p.delta_bytes);
    if (fresh.ok()) {
      *delta_ = std::move(*fresh);
    } else {
      buffer = fresh.status();
    }
  }
  ready.accept = buffer.ok() ? 1 : 0;
  VIPER_RETURN_IF_ERROR(control_->SendReady(a, ready));
  if (!buffer.ok()) return buffer.status();

  // From the producer, or from a relay (routed): a taker that is a relay
  // forwards each message to its children (takers too: they hold the same
  // base) as it lands, before it applies; each child verifies its rebuilt
  // image itself.
  VIPER_ASSIGN_OR_RETURN(const StreamLeg leg, StreamLeg::Open(control_, a, p.routed != 0));
  std::vector<Chunk> chunks;
  AppendChunks(delta_->data(), p.delta_bytes, p.delta_chunk_bytes, &chunks);
  bool forward_failed = false;
  const bool received = leg.Run(a.version, {}, chunks, {}, &forward_failed);
  if (!received || forward_failed) {
    KeepUntilFinalize(delta_);  // a freed receive may still land in it, a freed send still read it
    if (!received) delta_.reset();
  }
  if (!received) {
    return leg.Lost("delta of version " + std::to_string(a.version) + " (" + std::to_string(p.delta_bytes) +
                    " bytes) did not arrive " + leg.in_time());
  }
  // The back buffer: the image served, then the delta applied to it. When
  // the back buffer holds the version before the served one, only what the
  // last delta changed (the header and the tensors it had records for) is
  // copied; else the whole image. Apply hashes the whole rebuilt image: a
  // back buffer that did not hold what the pool said is never served.
  std::byte* image = (*buffer)->data();
  const uint64_t copied = back_.BringForward(forward, *base, image);
  auto applied = delta::Apply(image, base->size_bytes, (*buffer)->capacity(), delta_->data(), p.delta_bytes);
  const std::string what = "delta of version " + std::to_string(a.version) + " against version " +
                           std::to_string(base->state.metadata.version);
  if (!applied.ok()) return applied.status().WithContext(what);
  if (applied->image_bytes != a.image_bytes || !applied->info.data_verified) {
    return DataLossError(what + ": rebuilt " + std::to_string(applied->image_bytes) + " bytes, announced " +
                         std::to_string(a.image_bytes) + (applied->info.data_verified ? "" : ", data not verified"));
  }
  auto header = delta::ReadHeader(delta_->data(), p.delta_bytes);
  if (!header.ok()) return header.status().WithContext(what);
  // What this delta wrote, for the next one (record headers only: Apply
  // checked the delta whole).
  auto contents = delta::ReadContents(delta_->data(), p.delta_bytes);
  back_.Remember(
      *base, {a.version, header->target_checksum, applied->image_bytes},
      contents.ok() ? RangesWritten(*applied, image, base->size_bytes, contents->records) : std::nullopt);
  Landed landed;
  landed.buffer = *buffer;
  landed.size = applied->image_bytes;
  landed.moved_bytes = p.delta_bytes;
  landed.from_delta = true;
  landed.brought_forward = forward;
  landed.copied_bytes = copied;
  landed.source = Source(a);
  landed.receive_s = MonotonicSeconds() - t0;
  // Apply hashed the rebuilt data against the header's viper.checksum:
  // verify-and-swap checks the header against it without hashing again.
  landed.streamed = true;
  landed.data_offset = applied->info.data_offset;
  landed.checksum = header->target_checksum;
  return landed;
}

}  // namespace

std::unique_ptr<TierReceiver> MakeHostDeltaReceiver(const ReceiverSetup& setup) {
  return std::make_unique<DeltaReceiver>(setup.control, setup.pool, setup.held);
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
