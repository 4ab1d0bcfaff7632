// The host tier's delta path, both halves (tier_host_delta.h). MPI builds
// only (mpi_stub.cc otherwise).
#include "tier_host_delta.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "keep_until_finalize.h"
#include "shm_segment.h"
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

Status HostDeltaOffer::Prepare(const StreamSource& src) {
  tried_ = offered_ = false;
  chunks_.clear();
  next_bytes_ = 0;
  if (options_.delta == DeltaMode::kOff || !keep_) return Status::Ok();
  const uint64_t image_bytes = src.header_bytes + src.data_bytes;
  next_version_ = src.version;
  header_bytes_ = src.header_bytes;
  VIPER_RETURN_IF_ERROR(Reserve(&next_, image_bytes));
  // The image: data copied and hashed block by block (from cache), then the header.
  Xxh3Hasher hasher;
  uint64_t at = src.header_bytes;
  for (const ByteRange& r : src.ranges) {
    CopyAndHash(next_.data() + at, r.data, r.size, &hasher);
    at += r.size;
  }
  if (at != image_bytes) return InternalError("stream ranges do not add up to the data section");
  digest_ = hasher.Digest();
  header_ = src.header(digest_);
  std::memcpy(next_.data(), header_.get(), src.header_bytes);
  next_bytes_ = image_bytes;
  if (base_bytes_ == 0) return Status::Ok();  // nothing to diff against yet
  // A buffer the last failed send may still read is kept; take a new one.
  if (!delta_ || delta_.use_count() > 1) delta_ = std::make_shared<AlignedBuffer>();
  VIPER_RETURN_IF_ERROR(Reserve(delta_.get(), next_bytes_));
  tried_ = true;
  auto encoded = delta::Encode(base_.data(), base_bytes_, next_.data(), next_bytes_, delta_->data(), next_bytes_);
  if (!encoded.ok()) {
    // Not a Viper image pair the codec can diff (it should always be): full.
    summary_ = delta::EncodeSummary{};
    summary_.full = true;
    summary_.reason = encoded.status().ToString();
    return Status::Ok();
  }
  summary_ = *encoded;
  offered_ = !summary_.full;
  if (offered_) AppendChunks(delta_->data(), summary_.delta_bytes, options_.chunk_bytes, &chunks_);
  return Status::Ok();
}

void HostDeltaOffer::Offer(HostPayload* p) const {
  if (!offered_) return;
  p->delta_bytes = summary_.delta_bytes;
  p->delta_chunk_bytes = options_.chunk_bytes;
  p->delta_base_version = base_version_;
  p->delta_base_checksum = base_checksum_;
  p->delta_shm = for_shm() ? 1 : 0;
}

bool HostDeltaOffer::Takes(const Ready& ready) const {
  return offered_ && ready.path == kPathDelta && ready.held_version == base_version_ &&
         ready.held_checksum == base_checksum_;
}

void HostDeltaOffer::Commit(bool other_node) {
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
  if (!tried_) return "";
  if (!offered_) return "full (" + summary_.BriefReport() + ")";
  return summary_.BriefReport() + " (to " + std::to_string(takers) + " consumer" + (takers == 1 ? "" : "s") + ")";
}

// ---------------------------------------------------------------- consumer

namespace {

class DeltaReceiver : public TierReceiver {
 public:
  DeltaReceiver(ConsumerControl* control, LandingPool* pool,
                std::function<std::shared_ptr<const ModelVersion>()> held)
      : control_(control), pool_(pool), held_(std::move(held)) {}

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
    if (same_node && p->delta_shm == 0) return false;
    base_ = std::move(held);
    return true;
  }

  StatusOr<Landed> Receive(const Announce& a) override;
  std::string Source(const Announce&) const override { return control_->ProducerName() + " (delta)"; }

 private:
  ConsumerControl* control_;
  LandingPool* pool_;
  std::function<std::shared_ptr<const ModelVersion>()> held_;
  std::shared_ptr<const ModelVersion> base_;  // what Takes matched
  std::shared_ptr<AlignedBuffer> delta_;      // received deltas land here
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
  // Room for the rebuilt image and, first, the copy of the held one.
  auto buffer = pool_->Acquire(std::max(a.image_bytes, base->size_bytes));
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

  std::vector<Chunk> chunks;
  AppendChunks(delta_->data(), p.delta_bytes, p.delta_chunk_bytes, &chunks);
  std::vector<ChunkedTransfer> transfers(1);
  transfers[0].peer = control_->producer();
  transfers[0].chunks = &chunks;
  RunChunked(control_->link().comm, 8, &transfers, control_->TransferDeadline(a));
  if (transfers[0].failed) {
    KeepUntilFinalize(delta_);  // a freed receive may still land in it
    delta_.reset();
    return AbortedError("delta of version " + std::to_string(a.version) + " (" + std::to_string(p.delta_bytes) +
                        " bytes) did not arrive within " + control_->WindowText(a) + " s");
  }
  // The back buffer: a copy of the image served, then the delta applied to it.
  std::byte* image = (*buffer)->data();
  std::memcpy(image, base->bytes, base->size_bytes);
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
  Landed landed;
  landed.buffer = *buffer;
  landed.size = applied->image_bytes;
  landed.moved_bytes = p.delta_bytes;
  landed.from_delta = true;
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
