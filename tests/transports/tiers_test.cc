// The tier table (internal, tiers.cc): which tier a publisher sends with,
// which receive paths a subscriber keeps and in what order, which tier an
// announcement belongs to, and each tier's payload decoder.
#include <gtest/gtest.h>

#include <functional>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tier.h"
#include "tier_gpu.h"
#include "tier_host.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace viper {
namespace transports {
namespace internal {
namespace {

constexpr Tier kAllTiers[] = {Tier::kGpu, Tier::kHost, Tier::kPfs};
constexpr HostProtocol kAllProtocols[] = {HostProtocol::kTwoSided, HostProtocol::kOneSided, HostProtocol::kShm};
constexpr Notify kAllNotify[] = {Notify::kPush, Notify::kPoll};
constexpr Fanout kAllFanouts[] = {Fanout::kNode, Fanout::kDirect, Fanout::kTree};
constexpr Mode kAllModes[] = {Mode::kSync, Mode::kAsync};

// The sender the publisher picked before the table (its switch on the tier,
// then on the host protocol).
std::string SwitchTier(const Publisher::Options& o) {
  switch (o.tier) {
    case Tier::kGpu:
      return "gpu";
    case Tier::kPfs:
      return "pfs";
    case Tier::kHost:
      break;
  }
  return o.host_protocol == HostProtocol::kOneSided ? "host one-sided" : "host";
}

// The receive paths the subscriber made before the table, in its order: gpu
// (tier gpu), host (any subscriber with a control), one-sided (a control,
// tier host, protocol one-sided), pfs (tier pfs).
std::vector<std::string> ChainPaths(const Subscriber::Options& o, bool pushed) {
  std::vector<std::string> out;
  if (o.tier == Tier::kGpu) out.push_back("gpu");
  if (pushed) out.push_back("host");
  if (pushed && o.tier == Tier::kHost && o.host_protocol == HostProtocol::kOneSided) out.push_back("host one-sided");
  if (o.tier == Tier::kPfs) out.push_back("pfs");
  return out;
}

// The landing pool knows which image a buffer holds only until it hands the
// buffer out: the host delta path brings a buffer forward (copies only
// what the last delta changed into it) only when it is known to hold that
// delta's base and nobody holds it.
TEST(LandingPool, ABufferIsKnownToHoldAnImageUntilItIsHandedOut) {
  LandingPool pool;
  ASSERT_TRUE(pool.Preallocate(1 << 16, 2).ok());
  auto a = pool.Acquire(1 << 16);
  auto b = pool.Acquire(1 << 16);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_NE(a->get(), b->get());
  const LandingPool::Content v4{4, 0x44, 1000}, v5{5, 0x55, 1000};
  pool.Note((*a)->data(), v4);
  pool.Note((*b)->data() + 1, v5);  // not a buffer's start: nothing noted
  // Held (a reader or the served version): not handed out.
  EXPECT_EQ(pool.AcquireHolding(v4, 1000), nullptr);
  const AlignedBuffer* a_raw = a->get();
  a->reset();
  // Another image, too little room, or nothing known: no.
  EXPECT_EQ(pool.AcquireHolding(v5, 1000), nullptr);
  EXPECT_EQ(pool.AcquireHolding(LandingPool::Content{4, 0x45, 1000}, 1000), nullptr);
  EXPECT_EQ(pool.AcquireHolding(v4, (1 << 16) + 1), nullptr);
  EXPECT_EQ(pool.AcquireHolding(LandingPool::Content{}, 1000), nullptr);
  // A plain Acquire prefers a buffer holding nothing known: a freed b is
  // taken before a, which keeps v4.
  b->reset();
  auto c = pool.Acquire(1000);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->get(), a_raw);
  auto again = pool.AcquireHolding(v4, 1000);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again.get(), a_raw);
  // Handed out, it holds nothing known any more (its taker writes into it).
  again.reset();
  EXPECT_EQ(pool.AcquireHolding(v4, 1000), nullptr);
  // Noted again, then taken by a plain Acquire (the only free one): forgotten.
  pool.Note(a_raw->data(), v4);
  auto d = pool.Acquire(1000);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->get(), a_raw);
  d->reset();
  EXPECT_EQ(pool.AcquireHolding(v4, 1000), nullptr);
  // Retired, it is no longer the pool's.
  pool.Note(a_raw->data(), v4);
  auto e = pool.AcquireHolding(v4, 1000);
  ASSERT_NE(e, nullptr);
  pool.Note(e->data(), v4);
  pool.Retire(e);
  e.reset();
  EXPECT_EQ(pool.AcquireHolding(v4, 1000), nullptr);
}

TEST(TierTable, EveryAcceptedPublisherConfigurationGetsTheTierTheSwitchGaveIt) {
  int accepted = 0;
  for (Tier tier : kAllTiers) {
    for (HostProtocol protocol : kAllProtocols) {
      for (Notify notify : kAllNotify) {
        for (Fanout fanout : kAllFanouts) {
          for (Mode mode : kAllModes) {
            Publisher::Options o;
            o.tier = tier;
            o.host_protocol = protocol;
            o.notify = notify;
            o.fanout = fanout;
            o.mode = mode;
            o.pfs_dir = "/tmp/unused";
            std::string error;
            if (!o.IsValid(&error)) continue;
            ++accepted;
            const TierEntry* t = SenderTier(o);
            ASSERT_NE(t, nullptr) << ToString(tier) << " " << ToString(protocol);
            EXPECT_EQ(t->name, SwitchTier(o)) << ToString(tier) << " " << ToString(protocol);
            // The control was opened unless the tier is pfs with poll.
            EXPECT_EQ(t->needs_control(o), tier != Tier::kPfs || notify == Notify::kPush) << t->name;
            // Exactly one entry serves a valid configuration.
            int serving = 0;
            for (const TierEntry& e : Tiers()) serving += e.sends(o) ? 1 : 0;
            EXPECT_EQ(serving, 1) << t->name;
          }
        }
      }
    }
  }
  // gpu: push x 3 protocols x (node, direct) x 2 modes = 12; pfs: the same
  // with poll too = 24; host: push x 2 modes x (3 fan-outs for two-sided and
  // shm, 2 for one-sided, which cannot relay) = 16.
  EXPECT_EQ(accepted, 12 + 24 + 16);
}

TEST(TierTable, RefusedPublisherConfigurationsAreRefusedWithTheSameMessage) {
  struct Case {
    Tier tier;
    HostProtocol protocol;
    Notify notify;
    Fanout fanout;
    std::string pfs_dir;
    std::string message;
  };
  const Case cases[] = {
      {Tier::kHost, HostProtocol::kShm, Notify::kPoll, Fanout::kNode, "",
       "Publisher::Options::notify: poll needs tier pfs (host and gpu versions are pushed)"},
      {Tier::kGpu, HostProtocol::kShm, Notify::kPoll, Fanout::kNode, "",
       "Publisher::Options::notify: poll needs tier pfs (host and gpu versions are pushed)"},
      {Tier::kPfs, HostProtocol::kShm, Notify::kPush, Fanout::kNode, "",
       "Publisher::Options::pfs_dir: tier pfs needs a directory"},
      {Tier::kHost, HostProtocol::kOneSided, Notify::kPush, Fanout::kTree, "",
       "Publisher::Options::fanout: tree needs tier host with the two-sided or shm protocol"},
      {Tier::kPfs, HostProtocol::kShm, Notify::kPush, Fanout::kTree, "/tmp/unused",
       "Publisher::Options::fanout: tree needs tier host with the two-sided or shm protocol"},
      {Tier::kGpu, HostProtocol::kShm, Notify::kPush, Fanout::kTree, "",
       "Publisher::Options::fanout: tree needs tier host with the two-sided or shm protocol"},
  };
  for (const Case& c : cases) {
    Publisher::Options o;
    o.tier = c.tier;
    o.host_protocol = c.protocol;
    o.notify = c.notify;
    o.fanout = c.fanout;
    o.pfs_dir = c.pfs_dir;
    auto pub = Publisher::Create(o);
    ASSERT_FALSE(pub.ok()) << c.message;
    EXPECT_EQ(pub.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(pub.status().message(), c.message);
  }
}

TEST(TierTable, EverySubscriberKeepsTheReceivePathsTheChainGaveIt) {
  for (Tier tier : kAllTiers) {
    for (HostProtocol protocol : kAllProtocols) {
      for (Notify notify : kAllNotify) {
        Subscriber::Options o;
        o.tier = tier;
        o.host_protocol = protocol;
        o.notify = notify;
        o.pfs_dir = "/tmp/unused";
        std::string error;
        if (!o.IsValid(&error)) continue;
        const bool pushed = notify == Notify::kPush;
        std::vector<std::string> names;
        for (const TierEntry* t : ReceiverTiers(o, pushed)) names.push_back(t->name);
        EXPECT_EQ(names, ChainPaths(o, pushed)) << ToString(tier) << " " << ToString(protocol);
      }
    }
  }
  // The one-sided window is the only collective setup.
  for (const TierEntry& t : Tiers()) EXPECT_EQ(t.collective, std::string(t.name) == "host one-sided") << t.name;
}

TEST(TierTable, AnnouncementsBelongToTheTierThatSendsThem) {
  Announce a;
  a.kind = kAnnounceGpu;
  EXPECT_STREQ(AnnouncingTier(a)->name, "gpu");
  a.kind = kAnnouncePfs;
  EXPECT_STREQ(AnnouncingTier(a)->name, "pfs");
  EXPECT_FALSE(AnnouncingTier(a)->ready_handshake);  // a pfs notification waits for the ack only
  a.kind = kAnnounceHost;
  for (HostProtocol protocol : kAllProtocols) {
    a.protocol = static_cast<uint32_t>(protocol);
    EXPECT_STREQ(AnnouncingTier(a)->name, protocol == HostProtocol::kOneSided ? "host one-sided" : "host");
    EXPECT_TRUE(AnnouncingTier(a)->ready_handshake);
  }
  a.kind = kAnnounceBye;
  EXPECT_EQ(AnnouncingTier(a), nullptr);
  a.kind = 99;  // hostile or from a newer producer: no tier, the subscriber refuses it
  EXPECT_EQ(AnnouncingTier(a), nullptr);
}

// The entry of `name`.
const TierEntry& Entry(const std::string& name) {
  for (const TierEntry& t : Tiers()) {
    if (name == t.name) return t;
  }
  ADD_FAILURE() << "no tier " << name;
  return Tiers()[0];
}

// An announcement of `kind` (and `protocol`) as its tier's sender writes it.
Announce Valid(uint32_t kind, HostProtocol protocol = HostProtocol::kTwoSided) {
  Announce a;
  a.kind = kind;
  a.protocol = static_cast<uint32_t>(protocol);
  a.version = 7;
  a.image_bytes = 1 << 20;
  if (kind == kAnnounceHost && protocol != HostProtocol::kOneSided) {
    HostPayload p;
    p.header_bytes = 4096;
    p.data_chunks = 4;
    p.routed = 1;
    std::snprintf(p.shm_name, sizeof(p.shm_name), "/viper-1-0-r0-g1");
    SetTierPayload(p, &a);
  }
  if (kind == kAnnounceGpu) {
    GpuPayload p;
    p.header_bytes = 4096;
    p.chunk_bytes = 1 << 20;
    SetTierPayload(p, &a);
  }
  return a;
}

TEST(TierTable, EachDecoderAcceptsItsSendersPayloadAndRefusesBadSizes) {
  for (const TierEntry& t : Tiers()) {
    Announce a = t.name == std::string("gpu")              ? Valid(kAnnounceGpu)
                 : t.name == std::string("pfs")            ? Valid(kAnnouncePfs)
                 : t.name == std::string("host one-sided") ? Valid(kAnnounceHost, HostProtocol::kOneSided)
                                                           : Valid(kAnnounceHost);
    ASSERT_EQ(AnnouncingTier(a), &t);
    EXPECT_TRUE(t.check_payload(a).ok()) << t.name << ": " << t.check_payload(a).ToString();
    const uint32_t size = a.payload_bytes;
    // Oversized: one byte more than the tier's payload, and more than an
    // announcement holds (a hostile length must never be read past).
    for (uint32_t bad : {size + 1, kMaxTierPayloadBytes + 1, 0xffffffffu}) {
      a.payload_bytes = bad;
      const Status st = t.check_payload(a);
      EXPECT_EQ(st.code(), StatusCode::kDataLoss) << t.name << " payload_bytes " << bad;
      EXPECT_NE(st.message().find("version 7 (tier " + std::string(t.name) + "): its payload is " +
                                  std::to_string(bad) + " bytes, expected " + std::to_string(size)),
                std::string::npos)
          << st.ToString();
    }
    a.payload_bytes = kMaxTierPayloadBytes + 1;
    EXPECT_NE(t.check_payload(a).message().find("more than an announcement holds"), std::string::npos);
    if (size == 0) continue;
    // Truncated.
    a.payload_bytes = size - 1;
    const Status st = t.check_payload(a);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << t.name;
    EXPECT_NE(st.message().find("(truncated)"), std::string::npos) << st.ToString();
    a.payload_bytes = 0;
    EXPECT_FALSE(t.check_payload(a).ok()) << t.name;
  }
}

TEST(TierTable, DecodersRefuseFieldsTheirReceiversCouldNotUse) {
  const TierEntry& host = Entry("host");
  Announce a = Valid(kAnnounceHost);
  auto p = DecodeHostPayload(a);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->header_bytes, 4096u);
  EXPECT_EQ(p->data_chunks, 4u);
  EXPECT_EQ(p->routed, 1u);
  EXPECT_STREQ(p->shm_name, "/viper-1-0-r0-g1");

  HostPayload unterminated = *p;
  std::memset(unterminated.shm_name, 'x', sizeof(unterminated.shm_name));
  SetTierPayload(unterminated, &a);
  EXPECT_NE(host.check_payload(a).message().find("shm segment name is not terminated"), std::string::npos)
      << host.check_payload(a).ToString();

  HostPayload routed = *p;
  routed.routed = 2;
  SetTierPayload(routed, &a);
  EXPECT_NE(host.check_payload(a).message().find("routed is 2, expected 0 or 1"), std::string::npos)
      << host.check_payload(a).ToString();

  // A delta offer (tier_host_delta.h) must fit the image and be cut in
  // messages a receive can post (1 byte to 1 GiB each).
  HostPayload offer = *p;
  offer.delta_bytes = 1000;
  offer.delta_chunk_bytes = 512;
  offer.delta_base_version = 3;
  SetTierPayload(offer, &a);
  EXPECT_TRUE(host.check_payload(a).ok()) << host.check_payload(a).ToString();
  for (auto spoil : std::vector<std::function<void(HostPayload*)>>{
           [](HostPayload* q) { q->delta_chunk_bytes = 0; },
           [](HostPayload* q) { q->delta_chunk_bytes = (1ull << 30) + 1; },
           [&](HostPayload* q) { q->delta_bytes = a.image_bytes + 1; },
           [](HostPayload* q) { q->delta_shm = 3; },
           [](HostPayload* q) { q->delta_ranks[7] = 1; }}) {  // ranks only with delta_shm 2 (auto)
    HostPayload bad = offer;
    spoil(&bad);
    SetTierPayload(bad, &a);
    EXPECT_NE(host.check_payload(a).message().find("inconsistent delta offer"), std::string::npos)
        << host.check_payload(a).ToString();
  }

  // A pipeline cannot cut by 0 bytes (it would never end).
  const TierEntry& gpu = Entry("gpu");
  Announce g = Valid(kAnnounceGpu);
  GpuPayload q = *DecodeGpuPayload(g);
  q.chunk_bytes = 0;
  SetTierPayload(q, &g);
  EXPECT_NE(gpu.check_payload(g).message().find("chunk_bytes 0 is outside [1, 2^30]"), std::string::npos)
      << gpu.check_payload(g).ToString();
}

TEST(PublisherDeltaOption, NamesRoundTripAndOnIsRefusedWhereVersionsGoWhole) {
  for (DeltaMode m : {DeltaMode::kOff, DeltaMode::kAuto, DeltaMode::kOn})
    EXPECT_EQ(DeltaModeFromString(ToString(m)), m);
  EXPECT_FALSE(DeltaModeFromString("sometimes").has_value());
  Publisher::Options o;
  EXPECT_EQ(o.delta, DeltaMode::kAuto);  // the default
  std::string error;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.delta = DeltaMode::kOn;
  EXPECT_TRUE(o.IsValid(&error)) << error;  // host, shm
  o.host_protocol = HostProtocol::kOneSided;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("delta: on needs tier host (shm or two-sided), gpu or pfs"), std::string::npos)
      << error;
  o.delta = DeltaMode::kAuto;  // auto: whole versions there, no error
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.host_protocol = HostProtocol::kTwoSided;
  o.tier = Tier::kGpu;  // gpu: deltas to CUDA IPC consumers that hold the base (tier_gpu.cc)
  o.delta = DeltaMode::kOn;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.tier = Tier::kPfs;
  o.pfs_dir = "/tmp/x";
  o.delta = DeltaMode::kOn;
  o.pfs_layout = PfsStore::Layout::kTfServing;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("delta: on with tier pfs needs the flat layout"), std::string::npos) << error;
}

TEST(TierTable, RandomAnnouncementsAreDecodedOrRefusedNeverReadPastTheirEnd) {
  // 20,000 announcements of random kind, protocol, payload length (within
  // and far beyond the payload field) and bytes (fixed seed): each decoder
  // either accepts one whose length is exactly its payload's, or refuses it
  // with DataLoss; under ASan a read past the field would abort here.
  std::mt19937_64 rng(27);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    Announce a;
    a.kind = static_cast<uint32_t>(rng() % 6);
    a.protocol = static_cast<uint32_t>(rng() % 4);
    a.version = i;
    a.image_bytes = rng() % (1 << 24);
    const uint32_t lengths[] = {0, static_cast<uint32_t>(sizeof(HostPayload)),
                                static_cast<uint32_t>(sizeof(GpuPayload)),
                                static_cast<uint32_t>(rng() % (kMaxTierPayloadBytes + 1)),
                                static_cast<uint32_t>(rng())};
    a.payload_bytes = lengths[rng() % 5];
    for (std::byte& b : a.payload) b = static_cast<std::byte>(rng() % 4 == 0 ? rng() : 0);
    const TierEntry* t = AnnouncingTier(a);
    if (t == nullptr) continue;
    const Status st = t->check_payload(a);
    if (st.ok()) {
      ++accepted;
      EXPECT_LE(a.payload_bytes, kMaxTierPayloadBytes) << t->name;
    } else {
      ++refused;
      EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
    }
  }
  // Both outcomes occur (the lengths above include every tier's own).
  EXPECT_GT(accepted, 500);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace internal
}  // namespace transports
}  // namespace viper
