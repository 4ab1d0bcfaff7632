// The delta encoder in steps (delta::Encoder, delta::CopyHashAndFeed): the
// producer's snapshot pass feeds the new data section in slices and the
// delta must be exactly the bytes, and the summary exactly the one, that the
// one-shot Encode gives, whatever the slices split (a tensor, an element, a
// 64-byte block, the run between two changed elements whose gap becomes one
// Rice code).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "viper/core/checksum.h"
#include "viper/core/safetensors.h"
#include "delta_test_models.h"
#include "viper/transports/delta.h"

namespace viper {
namespace transports {
namespace {

using namespace testing;  // NOLINT: Bytes, Spec, Model, Change

Bytes Image(const std::vector<Spec>& tensors, uint64_t version) { return Model{tensors}.Image(version); }

// Odd element counts, every element size and a zero-element tensor: tensor
// ends fall off any word and block boundary.
std::vector<Spec> MakeModel(std::mt19937_64& rng, int64_t scale) {
  std::vector<Spec> m;
  m.push_back({"embed.weight", DType::kBF16, 7 * scale + 3, {}});
  m.push_back({"layer0.weight", DType::kF32, 5 * scale + 1, {}});
  m.push_back({"empty", DType::kF32, 0, {}});
  m.push_back({"layer0.bias", DType::kF32, 3, {}});
  m.push_back({"mask", DType::kU8, scale + 5, {}});
  m.push_back({"steps", DType::kI64, 9 + scale / 10, {}});
  m.push_back({"head.weight", DType::kBF16, 2 * scale + 7, {}});
  for (Spec& s : m) s.bytes = RandomBytes(rng, static_cast<std::size_t>(s.n) * DTypeSize(s.dtype));
  return m;
}

struct Result {
  delta::EncodeSummary summary;
  Bytes bytes;
};

Result OneShot(const Bytes& base, const Bytes& target, uint64_t capacity) {
  Result r;
  r.bytes.assign(capacity, std::byte{0});
  auto s = delta::Encode(base.data(), base.size(), target.data(), target.size(), r.bytes.data(), capacity);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return r;
  r.summary = *s;
  r.bytes.resize(s->delta_bytes);
  return r;
}

// The target's data section fed in slices whose sizes `next_slice` picks,
// to `reused` (an encoder kept from earlier deltas) or a new encoder.
template <typename F>
Result Sliced(const Bytes& base, const Bytes& target, uint64_t capacity, F&& next_slice,
              delta::Encoder* reused = nullptr) {
  Result r;
  delta::Encoder fresh;
  delta::Encoder& encoder = reused != nullptr ? *reused : fresh;
  EXPECT_TRUE(encoder.Start(base.data(), base.size()).ok());
  safetensors::ParseInfo info;
  EXPECT_TRUE(safetensors::Parse(nullptr, target.data(), target.size(), {}, &info).ok());
  for (uint64_t at = info.data_offset; at < target.size();) {
    const uint64_t n = std::min<uint64_t>(std::max<uint64_t>(next_slice(), 1), target.size() - at);
    encoder.Feed(target.data() + at, n);
    at += n;
  }
  r.bytes.assign(capacity, std::byte{0});
  auto s = encoder.Finish(target.data(), target.size(), r.bytes.data(), capacity);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return r;
  r.summary = *s;
  r.bytes.resize(s->delta_bytes);
  return r;
}

void ExpectSame(const Result& want, const Result& got, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.bytes, want.bytes);
  const delta::EncodeSummary& a = want.summary;
  const delta::EncodeSummary& b = got.summary;
  EXPECT_EQ(b.full, a.full);
  EXPECT_EQ(b.reason, a.reason);
  EXPECT_EQ(b.delta_bytes, a.delta_bytes);
  EXPECT_EQ(b.full_bytes, a.full_bytes);
  EXPECT_EQ(b.header_patch_bytes, a.header_patch_bytes);
  EXPECT_EQ(b.tensors_unchanged, a.tensors_unchanged);
  EXPECT_EQ(b.tensors_sparse, a.tensors_sparse);
  EXPECT_EQ(b.tensors_dense, a.tensors_dense);
  ASSERT_EQ(b.tensors.size(), a.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(b.tensors[i].name, a.tensors[i].name) << i;
    EXPECT_EQ(b.tensors[i].encoding, a.tensors[i].encoding) << i;
    EXPECT_EQ(b.tensors[i].changed_elements, a.tensors[i].changed_elements) << i;
    EXPECT_EQ(b.tensors[i].encoded_bytes, a.tensors[i].encoded_bytes) << i;
  }
}

// A delta that rebuilds `target` from `base`.
void ExpectRebuilds(const Bytes& base, const Result& d, const Bytes& target) {
  Bytes buffer(std::max(base.size(), target.size()) + 4096);
  std::memcpy(buffer.data(), base.data(), base.size());
  auto applied = delta::Apply(buffer.data(), base.size(), buffer.size(), d.bytes.data(), d.bytes.size());
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  buffer.resize(applied->image_bytes);
  EXPECT_TRUE(buffer == target);
}

// Random models and updates (frozen tensors, sparse BF16 steps, dense
// tensors, dense enough to stop the scan early, every tensor dense: full),
// each fed in fixed slices that split elements, blocks and tensors and in
// random ones, against room for the image and room for less than the delta.
TEST(DeltaEncoder, SlicedFeedsWriteExactlyTheBytesOfEncode) {
  std::mt19937_64 rng(27);
  const std::vector<uint64_t> fixed_slices = {1, 3, 7, 63, 64, 65, 100, 129, 4096 + 5, 1 << 20};
  int deltas = 0, fulls = 0, stopped = 0;
  delta::Encoder kept;  // one encoder for every round's random slices, as the host tier keeps one
  for (int round = 0; round < 24; ++round) {
    const int64_t scale = 300 + static_cast<int64_t>(rng() % 3000);
    std::vector<Spec> m = MakeModel(rng, scale);
    const Bytes v1 = Image(m, 5);
    switch (round % 6) {
      case 0:  // frozen backbone: the head trains
        Change(rng, &m.back(), 1.0);
        break;
      case 1:  // BF16 small steps
        Change(rng, &m[0], 0.02);
        Change(rng, &m.back(), 0.005);
        break;
      case 2:  // mixed densities, the scan stopped early on one tensor
        Change(rng, &m[0], 0.4);
        Change(rng, &m[1], 0.99);
        Change(rng, &m[4], 0.001);
        break;
      case 3:  // dense SGD: full
        for (Spec& s : m) Change(rng, &s, 1.0);
        break;
      case 4:  // nothing changed but the header
        break;
      default:  // random fractions per tensor
        for (Spec& s : m) Change(rng, &s, std::uniform_real_distribution<double>(0, 0.3)(rng));
        break;
    }
    const Bytes v2 = Image(m, 6 + round);
    for (const uint64_t capacity : {static_cast<uint64_t>(v2.size()), static_cast<uint64_t>(v2.size() / 50)}) {
      const Result want = OneShot(v1, v2, capacity);
      deltas += !want.summary.full;
      fulls += want.summary.full;
      for (const auto& t : want.summary.tensors) {
        stopped += t.encoding == delta::Encoding::kDense && t.changed_elements < t.elements;
      }
      if (!want.summary.full && capacity == v2.size()) ExpectRebuilds(v1, want, v2);
      const std::string what = "round " + std::to_string(round) + ", capacity " + std::to_string(capacity);
      for (const uint64_t slice : fixed_slices) {
        ExpectSame(want, Sliced(v1, v2, capacity, [&] { return slice; }), what + ", slices of " + std::to_string(slice));
      }
      std::uniform_int_distribution<uint64_t> size(1, 700);
      ExpectSame(want, Sliced(v1, v2, capacity, [&] { return size(rng); }, &kept), what + ", random slices");
    }
  }
  // The rounds reach every outcome: deltas, "full" by size and by room, tensors stopped early.
  EXPECT_GT(deltas, 10);
  EXPECT_GT(fulls, 10);
  EXPECT_GT(stopped, 3);
}

// The producer's pass: the copy is the data section, the digest its XXH3,
// and the delta Encode's, from ranges of any sizes.
// (~630 KB: several slices of kFuseSliceBytes, copied with memcpy; ~9.5 MB:
// with streaming stores, from 8 MiB on.)
class CopyHashAndFeedSizes : public ::testing::TestWithParam<int64_t> {};
INSTANTIATE_TEST_SUITE_P(SmallAndStreamed, CopyHashAndFeedSizes, ::testing::Values(40000, 600000));

TEST_P(CopyHashAndFeedSizes, CopyHashAndFeedCopiesHashesAndEncodes) {
  std::mt19937_64 rng(2027);
  std::vector<Spec> m = MakeModel(rng, GetParam());
  const Bytes v1 = Image(m, 1);
  Change(rng, &m[0], 0.02);
  Change(rng, &m[1], 0.3);
  Change(rng, &m.back(), 1.0);
  const Bytes v2 = Image(m, 2);
  safetensors::ParseInfo info;
  ASSERT_TRUE(safetensors::Parse(nullptr, v2.data(), v2.size(), {}, &info).ok());
  const uint64_t data_bytes = v2.size() - info.data_offset;
  // The live model as ranges: the tensors, cut anew at random places.
  std::vector<delta::Span> ranges;
  for (uint64_t at = 0; at < data_bytes;) {
    const uint64_t n = std::min<uint64_t>(1 + rng() % (data_bytes / 3), data_bytes - at);
    ranges.push_back({v2.data() + info.data_offset + at, n});
    at += n;
  }
  Bytes image(v2.size());
  std::memcpy(image.data(), v2.data(), info.data_offset);  // the header, written after the pass
  delta::Encoder encoder;
  ASSERT_TRUE(encoder.Start(v1.data(), v1.size()).ok());
  const uint64_t digest = delta::CopyHashAndFeed(ranges, image.data() + info.data_offset, &encoder);
  EXPECT_EQ(digest, Xxh3_64(v2.data() + info.data_offset, data_bytes));
  EXPECT_TRUE(image == v2);
  Result got;
  got.bytes.resize(v2.size());
  auto s = encoder.Finish(image.data(), image.size(), got.bytes.data(), got.bytes.size());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  got.summary = *s;
  got.bytes.resize(s->delta_bytes);
  const Result want = OneShot(v1, v2, v2.size());
  ASSERT_FALSE(want.summary.full) << want.summary.reason;
  ExpectSame(want, got, "CopyHashAndFeed");
  ExpectRebuilds(v1, got, v2);
  // Without an encoder: the copy and the digest alone.
  Bytes plain(data_bytes);
  EXPECT_EQ(delta::CopyHashAndFeed(ranges, plain.data(), nullptr), digest);
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), v2.begin() + static_cast<std::ptrdiff_t>(info.data_offset)));
}

TEST(DeltaEncoder, FinishBeforeTheWholeDataSectionIsAnError) {
  std::mt19937_64 rng(5);
  std::vector<Spec> m = MakeModel(rng, 100);
  const Bytes v1 = Image(m, 1);
  Change(rng, &m[0], 0.1);
  const Bytes v2 = Image(m, 2);
  safetensors::ParseInfo info;
  ASSERT_TRUE(safetensors::Parse(nullptr, v2.data(), v2.size(), {}, &info).ok());
  delta::Encoder encoder;
  ASSERT_TRUE(encoder.Start(v1.data(), v1.size()).ok());
  encoder.Feed(v2.data() + info.data_offset, (v2.size() - info.data_offset) / 2);
  Bytes out(v2.size());
  auto s = encoder.Finish(v2.data(), v2.size(), out.data(), out.size());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("were fed"), std::string::npos) << s.status().ToString();
  // Finish without Start, and a base that is not an image.
  auto again = encoder.Finish(v2.data(), v2.size(), out.data(), out.size());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  const Bytes junk(200, std::byte{7});
  EXPECT_EQ(encoder.Start(junk.data(), junk.size()).code(), StatusCode::kInvalidArgument);
}

// A new image with more data than the base (a grown tensor): the bytes past
// the base are not scanned, and Finish says "full" as Encode does.
TEST(DeltaEncoder, ALargerNewImageIsFullAsWithEncode) {
  std::mt19937_64 rng(9);
  std::vector<Spec> m = MakeModel(rng, 100);
  const Bytes v1 = Image(m, 1);
  m.back().n += 1000;
  m.back().bytes.resize(m.back().bytes.size() + 2000, std::byte{3});
  const Bytes v2 = Image(m, 2);
  const Result want = OneShot(v1, v2, v2.size());
  ASSERT_TRUE(want.summary.full);
  ExpectSame(want, Sliced(v1, v2, v2.size(), [] { return 77; }), "grown");
}

}  // namespace
}  // namespace transports
}  // namespace viper
