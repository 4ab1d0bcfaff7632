// The delta codec (transports/src/delta.cc): round trips on the update
// shapes the issue names, the whole-version fallback, and every way a delta
// or its base can be wrong: each must be an error, never an image to serve.
#include "viper/transports/delta.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "viper/core/checksum.h"
#include "viper/core/safetensors.h"
#include "viper/transports/aligned_buffer.h"
#include "delta_test_models.h"
#include "staging.h"  // internal: PadHeader, the staged images' header padding

namespace viper {
namespace transports {
namespace {

using namespace testing;  // NOLINT: Bytes, Spec, Model, RandomBytes, Change

// Odd element counts and every element size: tensor ends fall off any word boundary.
Model MakeModel(std::mt19937_64& rng, int64_t scale = 1000) {
  Model m;
  m.tensors.push_back({"embed.weight", DType::kBF16, 7 * scale + 3, {}});
  m.tensors.push_back({"layer0.weight", DType::kF32, 5 * scale + 1, {}});
  m.tensors.push_back({"layer0.bias", DType::kF32, 3, {}});
  m.tensors.push_back({"mask", DType::kU8, scale + 5, {}});
  m.tensors.push_back({"steps", DType::kI64, 9, {}});
  m.tensors.push_back({"head.weight", DType::kBF16, 2 * scale + 7, {}});
  for (Spec& s : m.tensors) s.bytes = RandomBytes(rng, static_cast<std::size_t>(s.n) * DTypeSize(s.dtype));
  return m;
}

struct Encoded {
  delta::EncodeSummary summary;
  Bytes bytes;
};
Encoded Encode(const Bytes& base, const Bytes& target) {
  Encoded out;
  out.bytes.resize(target.size());
  auto s = delta::Encode(base.data(), base.size(), target.data(), target.size(), out.bytes.data(), out.bytes.size());
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  out.summary = *s;
  out.bytes.resize(s->delta_bytes);
  return out;
}

// Applies `d` to a copy of `base` (a back buffer with room to spare).
StatusOr<Bytes> ApplyToCopy(const Bytes& base, const Bytes& d, uint64_t room = 4096) {
  Bytes buffer(base.size() + room);
  std::memcpy(buffer.data(), base.data(), base.size());
  auto applied = delta::Apply(buffer.data(), base.size(), buffer.size(), d.data(), d.size());
  if (!applied.ok()) return applied.status();
  buffer.resize(applied->image_bytes);
  return buffer;
}

// Applying `d` to `base` gives exactly `target`.
void ExpectRebuilds(const Bytes& base, const Bytes& d, const Bytes& target) {
  auto rebuilt = ApplyToCopy(base, d);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().ToString();
  EXPECT_EQ(*rebuilt, target);
}

// Recomputes both checksums of a delta after a deliberate edit, so that the
// edit reaches the record checks (a hostile writer can do the same).
void Reseal(Bytes* d) {
  const uint64_t body = Xxh3_64(d->data() + delta::kFixedHeaderBytes, d->size() - delta::kFixedHeaderBytes);
  for (int i = 0; i < 8; ++i) (*d)[80 + i] = static_cast<std::byte>(body >> (8 * i));
  const uint64_t head = Xxh3_64(d->data(), 88);
  for (int i = 0; i < 8; ++i) (*d)[88 + i] = static_cast<std::byte>(head >> (8 * i));
}

TEST(Delta, FrozenBackboneSendsOnlyTheTrainedTensors) {
  std::mt19937_64 rng(1);
  Model m = MakeModel(rng);
  const Bytes v1 = m.Image(1);
  Change(rng, &m.tensors[5], 1.0);  // the head trains, everything else is frozen
  const Bytes v2 = m.Image(2);
  Encoded d = Encode(v1, v2);
  ASSERT_FALSE(d.summary.full) << d.summary.reason;
  EXPECT_EQ(d.summary.tensors_unchanged, 5u);
  EXPECT_EQ(d.summary.tensors_dense + d.summary.tensors_sparse, 1u);
  // The head (2007 BF16 elements, all changed) is the only payload: dense.
  EXPECT_EQ(d.summary.tensors[5].encoding, delta::Encoding::kDense);
  EXPECT_LT(d.bytes.size(), v2.size() / 4);
  ExpectRebuilds(v1, d.bytes, v2);
}

// `image` as the staging path writes it: the header padded with spaces to
// AlignedBuffer::kAlignmentBytes (PadHeader), for O_DIRECT.
Bytes Padded(const Bytes& image) {
  const uint64_t header = 8 + [&] {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(image[i]) << (8 * i);
    return n;
  }();
  const std::string padded = internal::PadHeader(std::string(reinterpret_cast<const char*>(image.data()), header),
                                                 AlignedBuffer::kAlignmentBytes);
  Bytes out(padded.size() + image.size() - header);
  std::memcpy(out.data(), padded.data(), padded.size());
  std::memcpy(out.data() + padded.size(), image.data() + header, image.size() - header);
  return out;
}

TEST(Delta, FrozenBackboneHeaderIsASmallPatchOfTheBase) {
  // Issue 27: a delta used to carry the target's 4,096-byte padded header
  // whole. Between two versions only viper.version, viper.checksum,
  // viper.header_checksum and the iteration differ: the patch carries those
  // bytes, the rebuilt header is the padded one bit for bit.
  std::mt19937_64 rng(13);
  Model m = MakeModel(rng);
  const Bytes v1 = Padded(m.Image(41));
  Change(rng, &m.tensors[5], 1.0);
  const Bytes v2 = Padded(m.Image(42));
  auto id = delta::Identify(v2.data(), v2.size());  // still a valid image
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  Encoded d = Encode(v1, v2);
  ASSERT_FALSE(d.summary.full) << d.summary.reason;
  // 24 + the JSON from viper.checksum to the iteration (168 bytes here), of a 4,096-byte header.
  EXPECT_LE(d.summary.header_patch_bytes, 256u) << "the header part of the delta";
  const uint64_t head = m.tensors[5].bytes.size();
  EXPECT_LE(d.bytes.size(), delta::kFixedHeaderBytes + 256 + delta::kRecordHeaderBytes + head);
  auto contents = delta::ReadContents(d.bytes.data(), d.bytes.size());
  ASSERT_TRUE(contents.ok()) << contents.status().ToString();
  EXPECT_EQ(contents->header_patch_bytes, d.summary.header_patch_bytes);
  EXPECT_GT(contents->header_shared_bytes, 0u);
  EXPECT_EQ(contents->header.target_header_bytes, 4096u);
  ExpectRebuilds(v1, d.bytes, v2);
  // An unpadded base and a padded target (and the reverse): the padding is rebuilt, not shared.
  ExpectRebuilds(Padded(m.Image(41)), Encode(Padded(m.Image(41)), m.Image(43)).bytes, m.Image(43));
  ExpectRebuilds(m.Image(41), Encode(m.Image(41), Padded(m.Image(43))).bytes, Padded(m.Image(43)));
}

TEST(Delta, FormatOneIsRefusedByName) {
  std::mt19937_64 rng(14);
  Model m = MakeModel(rng);
  const Bytes v1 = m.Image(1), v2 = m.Image(2);
  Encoded d = Encode(v1, v2);
  Bytes old = d.bytes;
  std::memcpy(old.data(), delta::kMagicVersion1, sizeof(delta::kMagicVersion1));
  Reseal(&old);
  auto r = ApplyToCopy(v1, old);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("VIPERDL1"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("full version"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(delta::ReadContents(old.data(), old.size()).ok());
}

TEST(Delta, HostileHeaderPatchesAreRefused) {
  std::mt19937_64 rng(15);
  Model m = MakeModel(rng, 100);
  const Bytes v1 = Padded(m.Image(1));
  Change(rng, &m.tensors[0], 0.05);
  const Bytes v2 = Padded(m.Image(2));
  Encoded d = Encode(v1, v2);
  ASSERT_FALSE(d.summary.full);
  constexpr std::size_t kPatch = delta::kFixedHeaderBytes;
  auto with = [&](std::size_t at, uint64_t value) {
    Bytes bad = d.bytes;
    for (int i = 0; i < 8; ++i) bad[at + i] = static_cast<std::byte>(value >> (8 * i));
    Reseal(&bad);
    auto r = ApplyToCopy(v1, bad);
    EXPECT_FALSE(r.ok()) << "patch field at " << at << " = " << value;
    (void)delta::ReadContents(bad.data(), bad.size());  // must not crash or allocate the claimed sizes
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(with(kPatch, 1ull << 60).find("header patch"), std::string::npos);       // prefix
  EXPECT_NE(with(kPatch + 8, 1ull << 60).find("header patch"), std::string::npos);   // suffix
  EXPECT_NE(with(kPatch + 16, 1ull << 60).find("header patch"), std::string::npos);  // JSON bytes
  EXPECT_NE(with(kPatch + 16, 4000).find("header patch"), std::string::npos);        // fits, but not in the body
  // A prefix past the base's JSON (the target's is longer than 4,000 bytes of padding allow).
  Bytes big = d.bytes;
  const uint64_t json = 4088;
  for (int i = 0; i < 8; ++i) big[kPatch + i] = static_cast<std::byte>(json >> (8 * i));
  for (int i = 0; i < 8; ++i) big[kPatch + 8 + i] = std::byte{0};
  for (int i = 0; i < 8; ++i) big[kPatch + 16 + i] = static_cast<std::byte>(json >> (8 * i));
  Reseal(&big);
  auto r = ApplyToCopy(v1, big);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("base JSON"), std::string::npos) << r.status().ToString();
}

TEST(Delta, Bf16SmallStepIsSparseGaps) {
  std::mt19937_64 rng(2);
  Model m = MakeModel(rng, 20000);
  const Bytes v1 = m.Image(1);
  Change(rng, &m.tensors[0], 0.01);  // 1% of the BF16 embedding moved by an ULP or more
  Change(rng, &m.tensors[5], 0.02);
  const Bytes v2 = m.Image(2);
  Encoded d = Encode(v1, v2);
  ASSERT_FALSE(d.summary.full) << d.summary.reason;
  EXPECT_EQ(d.summary.tensors[0].encoding, delta::Encoding::kSparseGaps);
  EXPECT_EQ(d.summary.tensors[5].encoding, delta::Encoding::kSparseGaps);
  // Gaps average 100 elements: Rice-coded in about log2(100) + 2 = 8.6 bits
  // (the entropy is 8.1), plus the 2 value bytes of each changed element.
  const auto& r = d.summary.tensors[0];
  EXPECT_LE(r.encoded_bytes, delta::kRecordHeaderBytes + r.changed_elements * 31 / 10);
  ExpectRebuilds(v1, d.bytes, v2);
}

TEST(Delta, HalfChangedIsNeverLargerThanABitmap) {
  std::mt19937_64 rng(3);
  Model m = MakeModel(rng, 5000);
  const Bytes v1 = m.Image(4);
  // 40% of an F32 tensor: Rice with parameter 0 is the bitmap up to the
  // last changed element, so the positions cost at most n/8 bytes.
  Change(rng, &m.tensors[1], 0.4);
  const Bytes v2 = m.Image(5);
  Encoded d = Encode(v1, v2);
  ASSERT_FALSE(d.summary.full) << d.summary.reason;
  const auto& r = d.summary.tensors[1];
  EXPECT_EQ(r.encoding, delta::Encoding::kSparseGaps);
  EXPECT_LE(r.encoded_bytes, delta::kRecordHeaderBytes + (r.elements + 7) / 8 + 4 * r.changed_elements);
  ExpectRebuilds(v1, d.bytes, v2);
}

TEST(Delta, DenseFp32FallsBackToFull) {
  std::mt19937_64 rng(4);
  Model m = MakeModel(rng);
  const Bytes v1 = m.Image(1);
  for (Spec& s : m.tensors) Change(rng, &s, 1.0);  // SGD moves every FP32 weight
  const Bytes v2 = m.Image(2);
  Encoded d = Encode(v1, v2);
  EXPECT_TRUE(d.summary.full);
  EXPECT_EQ(d.summary.BytesMoved(), v2.size());
  EXPECT_NE(d.summary.BriefReport().find("full v2"), std::string::npos) << d.summary.BriefReport();
}

TEST(Delta, ChangedTableFallsBackToFull) {
  std::mt19937_64 rng(5);
  Model m = MakeModel(rng);
  const Bytes v1 = m.Image(1);
  m.tensors[2].name = "layer0.bias2";
  Encoded d = Encode(v1, m.Image(2));
  EXPECT_TRUE(d.summary.full);
  EXPECT_NE(d.summary.reason.find("tensor table"), std::string::npos) << d.summary.reason;
}

TEST(Delta, UnchangedVersionIsHeaderOnly) {
  std::mt19937_64 rng(6);
  Model m = MakeModel(rng);
  const Bytes v1 = m.Image(1), v2 = m.Image(2);
  Encoded d = Encode(v1, v2);
  ASSERT_FALSE(d.summary.full);
  EXPECT_EQ(d.summary.tensors_unchanged, m.tensors.size());
  ExpectRebuilds(v1, d.bytes, v2);
}

TEST(Delta, HeaderThatGrowsMovesTheData) {
  std::mt19937_64 rng(7);
  Model m = MakeModel(rng);
  const Bytes v1 = m.Image(9);
  Change(rng, &m.tensors[3], 0.05);
  // A 20-digit version (and iteration) lengthens the JSON past the next 8-byte pad.
  const Bytes v2 = m.Image(1844674407370955161ull);
  ASSERT_NE(v1.size(), v2.size());
  Encoded d = Encode(v1, v2);
  ASSERT_FALSE(d.summary.full);
  ExpectRebuilds(v1, d.bytes, v2);
  // Without room for the larger image: OutOfRange, nothing written.
  Bytes tight = v1;
  auto refused = delta::Apply(tight.data(), v1.size(), v1.size(), d.bytes.data(), d.bytes.size());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfRange) << refused.status().ToString();
  EXPECT_EQ(tight, v1);
}

TEST(Delta, WrongBaseIsRefusedAndLeavesTheBufferAlone) {
  std::mt19937_64 rng(8);
  Model m = MakeModel(rng);
  const Bytes v1 = m.Image(1);
  Change(rng, &m.tensors[1], 0.1);
  const Bytes v2 = m.Image(2);
  Change(rng, &m.tensors[1], 0.1);
  const Bytes v3 = m.Image(3);
  Encoded d = Encode(v2, v3);
  ASSERT_FALSE(d.summary.full);
  // The consumer holds v1, not v2: the version differs.
  Bytes buffer = v1;
  buffer.resize(v1.size() + 64);
  auto r = delta::Apply(buffer.data(), v1.size(), buffer.size(), d.bytes.data(), d.bytes.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("version 2"), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(std::equal(v1.begin(), v1.end(), buffer.begin()));
  // Same version number, other bytes (another producer's v2): the checksum differs.
  Model other = MakeModel(rng);
  const Bytes foreign = other.Image(2);
  auto r2 = ApplyToCopy(foreign, d.bytes);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kFailedPrecondition) << r2.status().ToString();
  // Not an image at all.
  Bytes junk(v2.size(), std::byte{7});
  auto r3 = ApplyToCopy(junk, d.bytes);
  ASSERT_FALSE(r3.ok());
  EXPECT_EQ(r3.status().code(), StatusCode::kFailedPrecondition);
}

TEST(Delta, DamagedBaseIsCaughtByTheRebuiltChecksum) {
  std::mt19937_64 rng(9);
  Model m = MakeModel(rng);
  const Bytes v1 = m.Image(1);
  Change(rng, &m.tensors[0], 0.02);
  const Bytes v2 = m.Image(2);
  Encoded d = Encode(v1, v2);
  // The back buffer's header still says v1 with v1's checksum, but a byte of
  // an unchanged tensor rotted: only the rebuilt image's checksum can see it.
  Bytes rotten = v1;
  rotten[rotten.size() - 20] ^= std::byte{1};
  auto r = ApplyToCopy(rotten, d.bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
}

// A small delta with sparse records of two sizes and a dense one.
struct Mixed {
  Bytes v1, v2;
  Encoded d;
};
Mixed MixedDelta(uint64_t seed, int64_t scale) {
  std::mt19937_64 rng(seed);
  Model m = MakeModel(rng, scale);
  Mixed x;
  x.v1 = m.Image(1);
  Change(rng, &m.tensors[0], 0.05);
  Change(rng, &m.tensors[1], 0.6);
  Change(rng, &m.tensors[4], 1.0);
  x.v2 = m.Image(2);
  x.d = Encode(x.v1, x.v2);
  return x;
}

TEST(Delta, EveryFlippedByteAndEveryTruncationIsAnError) {
  const auto [v1, v2, d] = MixedDelta(10, 200);
  ASSERT_FALSE(d.summary.full);
  ASSERT_GT(d.summary.tensors_sparse, 0u);
  ASSERT_GT(d.summary.tensors_dense, 0u);
  for (std::size_t i = 0; i < d.bytes.size(); ++i) {
    Bytes bad = d.bytes;
    bad[i] ^= std::byte{0x10};
    EXPECT_FALSE(ApplyToCopy(v1, bad).ok()) << "flipped byte " << i;
  }
  for (std::size_t n = 0; n < d.bytes.size(); n += (n < 200 ? 1 : 37)) {
    Bytes cut(d.bytes.begin(), d.bytes.begin() + n);
    EXPECT_FALSE(ApplyToCopy(v1, cut).ok()) << "cut at " << n;
  }
}

TEST(Delta, ResealedEditsAreCaughtByTheChecksOrTheRebuiltChecksum) {
  // A hostile delta with consistent checksums: every single-byte edit must
  // be refused by the record checks or, where it only changes a value or the
  // target header, by the rebuilt image's own checksums.
  const auto [v1, v2, d] = MixedDelta(11, 100);
  ASSERT_FALSE(d.summary.full);
  for (std::size_t i = 0; i < d.bytes.size(); ++i) {
    if (i >= 80 && i < 96) continue;  // the checksums themselves
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      Bytes bad = d.bytes;
      bad[i] ^= static_cast<std::byte>(x);
      Reseal(&bad);
      auto r = ApplyToCopy(v1, bad);
      // Fields a reader may not check (the base's size and checksum are
      // checked; header padding is not meaning): whatever is served equals v2.
      if (r.ok()) {
        EXPECT_EQ(*r, v2) << "byte " << i << " ^ " << int(x) << " served a different image";
      }
    }
  }
}

TEST(Delta, HostileRecordsNameTheField) {
  std::mt19937_64 rng(12);
  Model m = MakeModel(rng, 100);
  const Bytes v1 = m.Image(1);
  Change(rng, &m.tensors[0], 0.05);
  const Bytes v2 = m.Image(2);
  Encoded d = Encode(v1, v2);
  ASSERT_EQ(d.summary.tensors[0].encoding, delta::Encoding::kSparseGaps);
  auto h = delta::ReadHeader(d.bytes.data(), d.bytes.size());
  ASSERT_TRUE(h.ok());
  auto contents = delta::ReadContents(d.bytes.data(), d.bytes.size());
  ASSERT_TRUE(contents.ok()) << contents.status().ToString();
  const std::size_t rec = delta::kFixedHeaderBytes + contents->header_patch_bytes;
  auto with = [&](std::size_t at, uint64_t value, int width) {
    Bytes bad = d.bytes;
    for (int i = 0; i < width; ++i) bad[at + i] = static_cast<std::byte>(value >> (8 * i));
    Reseal(&bad);
    auto r = ApplyToCopy(v1, bad);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(with(rec, 99, 4).find("names tensor 99"), std::string::npos);
  EXPECT_NE(with(rec + 4, 7, 1).find("unknown encoding 7"), std::string::npos);
  EXPECT_NE(with(rec + 5, 4, 1).find("element size 4"), std::string::npos);
  EXPECT_NE(with(rec + 8, 1ull << 40, 8).find("changed elements"), std::string::npos);
  EXPECT_NE(with(rec + 16, 1ull << 62, 8).find("only"), std::string::npos);  // payload past the end: no allocation
  EXPECT_NE(with(rec + 24, 0xff, 1).find("position"), std::string::npos);   // a varint gap past the tensor
  EXPECT_NE(with(64, 1000, 8).find("record"), std::string::npos);          // record count
  EXPECT_NE(with(40, 1ull << 50, 8).find("image has"), std::string::npos);  // declared image size
  EXPECT_NE(with(24, 0, 8).find("goes forward"), std::string::npos);       // target before base
}

// A producer with several consumers over thousands of versions: random
// changed fractions per tensor, consumers that drop out or restart (their
// base is unknown: a full version), corrupted deltas in flight (refused; the
// consumer's buffer is then unknown too). Every served image must be the
// full version bit for bit.
TEST(Delta, RandomisedVersionsServeOnlyExactImages) {
  constexpr int kVersions = 3000;
  constexpr int kConsumers = 3;
  std::mt19937_64 rng(27);
  Model m = MakeModel(rng, 60);
  struct Consumer {
    Bytes buffer;       // the back buffer
    uint64_t held = 0;  // version it holds; 0 = none known
  };
  std::vector<Consumer> consumers(kConsumers);
  std::vector<Bytes> images(1);  // images[v]
  int deltas = 0, fulls = 0, corrupted = 0, refused = 0;
  std::uniform_real_distribution<double> unit(0, 1);
  for (uint64_t v = 1; v <= kVersions; ++v) {
    for (Spec& s : m.tensors) {
      const double u = unit(rng);
      Change(rng, &s, u < 0.4 ? 0.0 : u < 0.8 ? 0.03 * unit(rng) : u < 0.95 ? unit(rng) : 1.0);
    }
    images.push_back(m.Image(v));
    const Bytes& target = images[v];
    for (Consumer& c : consumers) {
      if (unit(rng) < 0.05) c.held = 0;  // dropped or restarted: the producer no longer knows its base
      if (unit(rng) < 0.1) continue;     // misses this version (busy); keeps its base
      bool served = false;
      if (c.held != 0) {
        Encoded d = Encode(images[c.held], target);
        if (!d.summary.full) {
          Bytes wire = d.bytes;
          const bool corrupt = unit(rng) < 0.05;
          if (corrupt) {
            ++corrupted;
            std::size_t at = rng() % wire.size();
            if (at >= 80 && at < 96) at -= 80;  // not the checksums a reseal rewrites
            wire[at] ^= static_cast<std::byte>(1 + rng() % 255);
            if (unit(rng) < 0.5) Reseal(&wire);
          }
          c.buffer.resize(std::max(c.buffer.size(), target.size() + 64));
          auto r = delta::Apply(c.buffer.data(), images[c.held].size(), c.buffer.size(), wire.data(), wire.size());
          if (r.ok()) {
            ASSERT_EQ(r->image_bytes, target.size());
            ASSERT_EQ(std::memcmp(c.buffer.data(), target.data(), target.size()), 0) << "version " << v;
            ++deltas;
            served = true;
          } else {
            ASSERT_TRUE(corrupt) << "v" << v << ": an intact delta was refused: " << r.status().ToString();
            ++refused;
            c.held = 0;  // the buffer was rewritten: not a base any more
          }
        }
      }
      if (!served) {
        c.buffer = target;  // a full version
        ++fulls;
      }
      c.held = v;
    }
  }
  EXPECT_GT(deltas, kVersions);
  EXPECT_GT(fulls, 100);
  EXPECT_GT(corrupted, 100);
  // A corruption Apply accepted would have served a different image (asserted above);
  // a flip that leaves the image unchanged (padding) cannot happen: every byte is covered.
  EXPECT_EQ(refused, corrupted);
}

// The host tier's delta auto, per consumer: a delta only where its predicted
// time (encode + delta bytes over the measured link + apply) is below the
// full image's over that link.
TEST(DeltaChoice, FastLinkGetsTheFullVersionSlowLinkTheDelta) {
  delta::LinkCosts c;
  c.image_bytes = 600'000'000;
  c.delta_bytes = 12'000'000;  // 2%
  c.encode_s = 0.15;
  c.apply_s = 0.25;
  // Shared memory, 10 GB/s: full 0.06 s against 0.4 s of diff and apply.
  c.link_bytes_per_s = 10e9;
  delta::LinkChoice fast = delta::ChooseOverLink(c);
  EXPECT_FALSE(fast.delta) << fast.reason;
  EXPECT_NEAR(fast.full_s, 0.06, 1e-9);
  EXPECT_NEAR(fast.delta_s, 0.15 + 0.0012 + 0.25, 1e-9);
  EXPECT_EQ(fast.reason, "full: predicted delta 0.401 s >= full 0.06 s");
  // 1 GB/s: full 0.6 s, delta 0.412 s.
  c.link_bytes_per_s = 1e9;
  delta::LinkChoice gigabit = delta::ChooseOverLink(c);
  EXPECT_TRUE(gigabit.delta) << gigabit.reason;
  EXPECT_EQ(gigabit.reason, "delta: predicted 0.412 s < full 0.6 s");
  // 100 MB/s: full 6 s, delta 0.52 s.
  c.link_bytes_per_s = 100e6;
  delta::LinkChoice slow = delta::ChooseOverLink(c);
  EXPECT_TRUE(slow.delta) << slow.reason;
  EXPECT_NEAR(slow.full_s, 6.0, 1e-9);
  EXPECT_NEAR(slow.delta_s, 0.52, 1e-9);
  // The break-even: a link where the delta's costs equal the full send's is full.
  c.link_bytes_per_s = static_cast<double>(c.image_bytes - c.delta_bytes) / (c.encode_s + c.apply_s);
  EXPECT_FALSE(delta::ChooseOverLink(c).delta);
  c.link_bytes_per_s *= 0.99;
  EXPECT_TRUE(delta::ChooseOverLink(c).delta);
}

TEST(DeltaChoice, UnmeasuredLinkOrNoDeltaIsFull) {
  delta::LinkCosts c;
  c.image_bytes = 1 << 20;
  c.delta_bytes = 1000;
  c.link_bytes_per_s = 0;  // the first version to a consumer: not measured
  delta::LinkChoice unknown = delta::ChooseOverLink(c);
  EXPECT_FALSE(unknown.delta);
  EXPECT_EQ(unknown.reason, "full: link not measured yet");
  c.link_bytes_per_s = -1;
  EXPECT_FALSE(delta::ChooseOverLink(c).delta);
  c.link_bytes_per_s = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(delta::ChooseOverLink(c).delta);
  c.link_bytes_per_s = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(delta::ChooseOverLink(c).delta);
  // A very slow link, but no delta (or one as large as the image): full.
  c.link_bytes_per_s = 1e3;
  c.delta_bytes = 0;
  EXPECT_FALSE(delta::ChooseOverLink(c).delta);
  c.delta_bytes = c.image_bytes;
  delta::LinkChoice none = delta::ChooseOverLink(c);
  EXPECT_FALSE(none.delta);
  EXPECT_EQ(none.reason, "full: no delta smaller than the image");
  c.delta_bytes = 1000;
  EXPECT_TRUE(delta::ChooseOverLink(c).delta);
}

}  // namespace
}  // namespace transports
}  // namespace viper
