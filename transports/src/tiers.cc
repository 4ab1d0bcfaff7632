// The tier table (tier.h) and what the tiers share: TierSender's defaults
// and the subscriber's landing buffers.
//
// How to add a tier: write tier_<name>.{h,cc} (its TierSender, its
// TierReceivers, its payload struct and decoder, and a stub where it needs
// hardware or a library CMake may not find), then add its entry below, where
// its receive paths belong in the fastest-first order. Nothing else names it.
#include <algorithm>

#include "tier.h"
#include "tier_gpu.h"
#include "tier_host.h"
#include "tier_onesided.h"
#include "tier_pfs.h"

namespace viper {
namespace transports {
namespace internal {

namespace {

bool IsOneSided(uint32_t protocol) { return protocol == static_cast<uint32_t>(HostProtocol::kOneSided); }

// Fastest receive paths first.
const std::vector<TierEntry> kTiers = {
    {
        /*name=*/"gpu",
        /*sends=*/[](const Publisher::Options& o) { return o.tier == Tier::kGpu; },
        /*needs_control=*/[](const Publisher::Options&) { return true; },
        /*receives=*/[](const Subscriber::Options& o, bool) { return o.tier == Tier::kGpu; },
        /*collective=*/false,
        /*announced=*/[](const Announce& a) { return a.kind == kAnnounceGpu; },
        /*ready_handshake=*/true,
        /*check_payload=*/[](const Announce& a) { return DecodeGpuPayload(a).status(); },
        /*make_sender=*/MakeGpuSender,
        /*make_receivers=*/MakeGpuReceivers,
    },
    {
        // Every subscriber with a control keeps these paths, whatever its tier.
        /*name=*/"host",
        /*sends=*/[](const Publisher::Options& o) {
          return o.tier == Tier::kHost && o.host_protocol != HostProtocol::kOneSided;
        },
        /*needs_control=*/[](const Publisher::Options&) { return true; },
        /*receives=*/[](const Subscriber::Options&, bool pushed) { return pushed; },
        /*collective=*/false,
        /*announced=*/[](const Announce& a) { return a.kind == kAnnounceHost && !IsOneSided(a.protocol); },
        /*ready_handshake=*/true,
        /*check_payload=*/[](const Announce& a) { return DecodeHostPayload(a).status(); },
        /*make_sender=*/MakeHostSender,
        /*make_receivers=*/MakeHostReceivers,
    },
    {
        /*name=*/"host one-sided",
        /*sends=*/[](const Publisher::Options& o) {
          return o.tier == Tier::kHost && o.host_protocol == HostProtocol::kOneSided;
        },
        /*needs_control=*/[](const Publisher::Options&) { return true; },
        /*receives=*/[](const Subscriber::Options& o, bool pushed) {
          return pushed && o.tier == Tier::kHost && o.host_protocol == HostProtocol::kOneSided;
        },
        /*collective=*/true,
        /*announced=*/[](const Announce& a) { return a.kind == kAnnounceHost && IsOneSided(a.protocol); },
        /*ready_handshake=*/true,
        /*check_payload=*/CheckOneSidedPayload,
        /*make_sender=*/MakeOneSidedSender,
        /*make_receivers=*/MakeOneSidedReceivers,
    },
    {
        /*name=*/"pfs",
        /*sends=*/[](const Publisher::Options& o) { return o.tier == Tier::kPfs; },
        /*needs_control=*/[](const Publisher::Options& o) { return o.notify == Notify::kPush; },
        /*receives=*/[](const Subscriber::Options& o, bool) { return o.tier == Tier::kPfs; },
        /*collective=*/false,
        /*announced=*/[](const Announce& a) { return a.kind == kAnnouncePfs; },
        /*ready_handshake=*/false,
        /*check_payload=*/CheckPfsPayload,
        /*make_sender=*/MakePfsSender,
        /*make_receivers=*/MakePfsReceivers,
    },
};

}  // namespace

const std::vector<TierEntry>& Tiers() { return kTiers; }

const TierEntry* SenderTier(const Publisher::Options& options) {
  for (const TierEntry& t : kTiers) {
    if (t.sends(options)) return &t;
  }
  return nullptr;
}

std::vector<const TierEntry*> ReceiverTiers(const Subscriber::Options& options, bool pushed) {
  std::vector<const TierEntry*> out;
  for (const TierEntry& t : kTiers) {
    if (t.receives(options, pushed)) out.push_back(&t);
  }
  return out;
}

const TierEntry* AnnouncingTier(const Announce& a) {
  for (const TierEntry& t : kTiers) {
    if (t.announced(a)) return &t;
  }
  return nullptr;
}

Status TierSender::Send(const StagedVersion&, double, SendOutcome*) {
  return InternalError("this tier sends streams, not staged images");
}

Status TierSender::Send(const StreamSource&, double, SendOutcome*) {
  return InternalError("this tier sends staged images, not streams");
}

Status LandingPool::Preallocate(uint64_t bytes, int count) {
  for (int i = 0; i < count; ++i) {
    VIPER_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(bytes));
    pool_.push_back({std::make_shared<AlignedBuffer>(std::move(b)), Content{}});
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<AlignedBuffer>> LandingPool::Acquire(uint64_t bytes) {
  Entry* pick = nullptr;
  for (Entry& e : pool_) {
    if (e.buffer.use_count() != 1 || e.buffer->capacity() < bytes) continue;
    if (pick == nullptr || (pick->content.known() && !e.content.known())) pick = &e;
  }
  if (pick != nullptr) {
    pick->content = Content{};
    pick->buffer->SetReadOnly(false);  // a served version's, nobody holds it any more
    return pick->buffer;
  }
  VIPER_ASSIGN_OR_RETURN(AlignedBuffer fresh, AlignedBuffer::Allocate(bytes));
  // Keep at most three buffers: front, back, and one a slow reader may hold.
  pool_.erase(std::remove_if(pool_.begin(), pool_.end(), [](const Entry& e) { return e.buffer.use_count() == 1; }),
              pool_.end());
  pool_.push_back({std::make_shared<AlignedBuffer>(std::move(fresh)), Content{}});
  return pool_.back().buffer;
}

std::shared_ptr<AlignedBuffer> LandingPool::AcquireHolding(const Content& content, uint64_t bytes) {
  if (!content.known()) return nullptr;
  for (Entry& e : pool_) {
    if (!(e.content == content) || e.buffer.use_count() != 1 || e.buffer->capacity() < bytes) continue;
    e.content = Content{};
    e.buffer->SetReadOnly(false);
    return e.buffer;
  }
  return nullptr;
}

void LandingPool::Note(const std::byte* data, const Content& content) {
  for (Entry& e : pool_) {
    if (e.buffer->data() == data && e.buffer->capacity() >= content.size) e.content = content;
  }
}

void LandingPool::Retire(const std::shared_ptr<AlignedBuffer>& buffer) {
  pool_.erase(std::remove_if(pool_.begin(), pool_.end(), [&](const Entry& e) { return e.buffer == buffer; }),
              pool_.end());
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
