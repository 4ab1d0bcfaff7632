// The staging buffer (transports/src/staging.h): the snapshot copy, streamed
// and split over threads, must give the same image as one memcpy per tensor.
#include "staging.h"  // internal

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "viper/core/checksum.h"
#include "viper/transports/publisher.h"

namespace viper {
namespace transports {
namespace {

// U8 tensors of the given sizes filled with bytes from `seed`.
ModelState MakeBytes(const std::vector<int64_t>& sizes, uint32_t seed) {
  ModelState m;
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    Tensor t = Tensor::Allocate("t" + std::to_string(i), DType::kU8, {sizes[i]});
    for (int64_t k = 0; k < sizes[i]; ++k) t.data[k] = static_cast<std::byte>(rng());
    EXPECT_TRUE(m.Add(std::move(t)).ok());
  }
  return m;
}

std::vector<std::byte> Concatenate(const ModelState& m) {
  std::vector<std::byte> out;
  for (const Tensor& t : m.tensors()) out.insert(out.end(), t.data, t.data + t.size_bytes);
  return out;
}

std::vector<std::byte> Image(const internal::StagedVersion& s) {
  return std::vector<std::byte>(s.image(), s.image() + s.image_bytes());
}

// Odd sizes, so no tensor boundary falls on a cut, and a zero-byte tensor;
// 18,635,604 bytes in all: enough for 4 threads at kMinBytesPerCopyThread each.
const std::vector<int64_t> kOddSizes = {5'000'011, 0, 1, 7'340'033, 3, 6'291'459, 4097};

TEST(StagedVersion, ThreadedSnapshotGivesTheSameImage) {
  ASSERT_GE(18'635'604u, 4 * internal::StagedVersion::kMinBytesPerCopyThread);
  for (uint32_t seed : {1u, 2u}) {  // the second round reuses the layout and the pool
    const ModelState m = MakeBytes(kOddSizes, seed);
    internal::StagedVersion one, four;
    ASSERT_TRUE(one.Snapshot(m, seed, 10, 3, 0, false, 1).ok());
    ASSERT_TRUE(one.Finalize().ok());
    ASSERT_TRUE(four.Snapshot(m, seed, 10, 3, 0, false, 4).ok());
    ASSERT_TRUE(four.Finalize().ok());
    EXPECT_EQ(Image(one), Image(four));
    EXPECT_EQ(one.checksum(), four.checksum());
    // Both hold exactly the tensors, back to back.
    const std::vector<std::byte> data = Concatenate(m);
    ASSERT_EQ(four.data_bytes(), data.size());
    EXPECT_EQ(0, std::memcmp(four.data(), data.data(), data.size()));
    EXPECT_EQ(four.checksum(), Xxh3_64(data.data(), data.size()));
  }
}

TEST(StagedVersion, ThreadCountCanChangeBetweenSnapshots) {
  const ModelState m = MakeBytes(kOddSizes, 7);
  const std::vector<std::byte> data = Concatenate(m);
  internal::StagedVersion s;
  for (int threads : {3, 1, 4, 2}) {
    if (s.data_bytes() > 0) std::memset(s.data(), 0, s.data_bytes());
    ASSERT_TRUE(s.Snapshot(m, 1, 1, 0, 0, false, threads).ok());
    EXPECT_EQ(0, std::memcmp(s.data(), data.data(), data.size())) << threads << " threads";
  }
}

TEST(StagedVersion, SmallSnapshotWithManyThreads) {
  // Below kMinBytesPerCopyThread the copy stays on the caller's thread.
  const ModelState m = MakeBytes({3, 0, 1000}, 5);
  internal::StagedVersion one, eight;
  ASSERT_TRUE(one.Snapshot(m, 1, 1, 0, 0, false, 1).ok());
  ASSERT_TRUE(one.Finalize().ok());
  ASSERT_TRUE(eight.Snapshot(m, 1, 1, 0, 0, false, 8).ok());
  ASSERT_TRUE(eight.Finalize().ok());
  EXPECT_EQ(Image(one), Image(eight));
}

// StreamCopy (pages interleaved) and StreamCopySequential (the delta's fused pass).
class StreamCopies : public ::testing::TestWithParam<void (*)(std::byte*, const std::byte*, std::size_t)> {};
INSTANTIATE_TEST_SUITE_P(Both, StreamCopies,
                         ::testing::Values(&internal::StreamCopy, &internal::StreamCopySequential));

TEST_P(StreamCopies, EveryAlignmentAndLengthCopiesExactly) {
  // Head (to a 64-byte boundary of dst), streamed body and tail: every
  // alignment of both ends, lengths across the 64- and 128-byte body steps
  // and the 32 KiB interleaved groups (8 spans of 4 KiB).
  const auto copy = GetParam();
  constexpr std::size_t kGroup = 32768;
  std::vector<std::byte> src(3 * kGroup + 4096 + 64), dst(3 * kGroup + 4096 + 128);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 131 + 7);
  for (std::size_t dst_off = 0; dst_off < 64; dst_off += 3) {
    for (std::size_t src_off = 0; src_off < 64; src_off += 5) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{63}, std::size_t{64},
                            std::size_t{65}, std::size_t{127}, std::size_t{128}, std::size_t{129}, std::size_t{255},
                            std::size_t{1000}, std::size_t{4096}, kGroup - 1, kGroup, kGroup + 129,
                            3 * kGroup + 4000}) {
        std::fill(dst.begin(), dst.end(), std::byte{0xee});
        copy(dst.data() + dst_off, src.data() + src_off, n);
        ASSERT_EQ(0, std::memcmp(dst.data() + dst_off, src.data() + src_off, n))
            << "dst+" << dst_off << " src+" << src_off << " n " << n;
        // Nothing around the range was written.
        for (std::size_t k = 0; k < dst.size(); ++k) {
          if (k < dst_off || k >= dst_off + n) {
            ASSERT_EQ(dst[k], std::byte{0xee}) << k;
          }
        }
      }
    }
  }
}

TEST(PlanCopy, PiecesTileTheDataInOrder) {
  const ModelState m = MakeBytes(kOddSizes, 3);
  const uint64_t total = Concatenate(m).size();
  std::vector<std::byte> dst(total);
  for (int jobs : {1, 2, 3, 4, 7}) {
    const auto plan = internal::PlanCopy(m, dst.data(), jobs);
    ASSERT_EQ(plan.size(), static_cast<std::size_t>(jobs));
    uint64_t at = 0;  // every byte once, in order, with matching source bytes
    std::size_t tensor = 0;
    uint64_t in_tensor = 0;
    for (int j = 0; j < jobs; ++j) {
      const uint64_t start = at;
      for (const internal::CopyPiece& p : plan[j]) {
        ASSERT_GT(p.bytes, 0u);
        ASSERT_EQ(p.dst, dst.data() + at);
        while (m.tensors()[tensor].size_bytes == in_tensor) {  // skips the zero-byte tensor
          ++tensor;
          in_tensor = 0;
        }
        ASSERT_EQ(p.src, m.tensors()[tensor].data + in_tensor);
        ASSERT_LE(in_tensor + p.bytes, m.tensors()[tensor].size_bytes);
        in_tensor += p.bytes;
        at += p.bytes;
      }
      // Ranges of about total / jobs, cut at kCopyCutBytes boundaries.
      if (j + 1 < jobs) {
        EXPECT_EQ(at % internal::kCopyCutBytes, 0u);
      }
      EXPECT_LE(at - start, total / jobs + internal::kCopyCutBytes);
    }
    EXPECT_EQ(at, total);
  }
}

TEST(PublisherOptions, SnapshotThreadsAreBounded) {
  Publisher::Options o;
  std::string error;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  EXPECT_EQ(o.snapshot_threads, 0);  // one per usable CPU, at most 4: 1 when bound to one core
  o.snapshot_threads = -1;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("snapshot_threads"), std::string::npos) << error;
  o.snapshot_threads = 4;
  EXPECT_TRUE(o.IsValid(&error)) << error;
}

}  // namespace
}  // namespace transports
}  // namespace viper
