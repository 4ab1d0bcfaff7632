// The shm protocol's segment and its copy-and-hash loop (internal), without
// MPI: a segment is reserved, mapped by name, and gone from /dev/shm once
// unlinked; copying in blocks hashes exactly the bytes copied.
#include "shm_segment.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "viper/core/checksum.h"

namespace viper {
namespace transports {
namespace internal {
namespace {

std::string UniqueName(const char* what) {
  return "/viper-test-" + std::to_string(::getpid()) + "-" + what;
}

TEST(ShmSegment, ConsumerMapsWhatTheProducerWroteAndTheNameGoesOnUnlink) {
  const std::string name = UniqueName("map");
  auto producer = ShmSegment::Create(name, 1 << 20);
  ASSERT_TRUE(producer.ok()) << producer.status().ToString();
  (*producer)->control()->version.store(7);
  (*producer)->control()->data_bytes.store(3);
  std::memcpy((*producer)->payload(), "abc", 3);
  std::memset((*producer)->payload() + (1 << 20) - 1, 0x5a, 1);  // the last byte is reserved and writable

  // A second creator of the same name is refused, not handed the segment.
  EXPECT_FALSE(ShmSegment::Create(name, 4096).ok());
  // More than the producer made is refused, naming the segment.
  auto too_big = ShmSegment::Open(name, 2 << 20);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find(name), std::string::npos) << too_big.status().ToString();

  auto consumer = ShmSegment::Open(name, 1 << 20);
  ASSERT_TRUE(consumer.ok()) << consumer.status().ToString();
  EXPECT_EQ((*consumer)->control()->version.load(), 7u);
  EXPECT_EQ((*consumer)->control()->data_bytes.load(), 3u);
  EXPECT_EQ(std::memcmp((*consumer)->payload(), "abc", 3), 0);
  EXPECT_EQ(std::to_integer<int>((*consumer)->payload()[(1 << 20) - 1]), 0x5a);

  (*producer)->Unlink();
  EXPECT_NE(::access(("/dev/shm" + name).c_str(), F_OK), 0) << "still linked";
  EXPECT_FALSE(ShmSegment::Open(name, 1 << 20).ok());
  // The mapping outlives the name, both ways.
  (*producer)->control()->data_bytes.store(4);
  EXPECT_EQ((*consumer)->control()->data_bytes.load(), 4u);
}

TEST(ShmSegment, ProducerThatGoesAwayTakesItsNameWithIt) {
  const std::string name = UniqueName("gone");
  {
    auto producer = ShmSegment::Create(name, 4096);
    ASSERT_TRUE(producer.ok()) << producer.status().ToString();
    EXPECT_EQ(::access(("/dev/shm" + name).c_str(), F_OK), 0);
  }
  EXPECT_NE(::access(("/dev/shm" + name).c_str(), F_OK), 0);
}

TEST(ShmSegment, SegmentLargerThanDevShmIsAnErrorNotACrash) {
  // 1 PiB cannot be reserved: Create says so (naming /dev/shm) and leaves
  // no name behind, instead of a SIGBUS on the first store past the room.
  const std::string name = UniqueName("huge");
  auto huge = ShmSegment::Create(name, 1ull << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("/dev/shm"), std::string::npos) << huge.status().ToString();
  EXPECT_NE(::access(("/dev/shm" + name).c_str(), F_OK), 0);
}

TEST(ShmSegment, ForeignSegmentIsRefused) {
  const std::string name = UniqueName("foreign");
  auto producer = ShmSegment::Create(name, 4096);
  ASSERT_TRUE(producer.ok());
  (*producer)->control()->magic = 42;  // not written by a Viper producer
  auto opened = ShmSegment::Open(name, 4096);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kDataLoss);
}

TEST(CopyAndHash, CopiesAndHashesExactlyTheBytesAcrossBlockBoundaries) {
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, kCopyHashBlockBytes - 1, kCopyHashBlockBytes,
                           3 * kCopyHashBlockBytes + 17}) {
    std::vector<std::byte> src(size), dst(size + 1, std::byte{0x77});
    for (std::size_t i = 0; i < size; ++i) src[i] = static_cast<std::byte>(i * 13 + 1);
    // In two calls, as a consumer does when the producer's progress moves on.
    Xxh3Hasher h;
    const std::size_t half = size / 3;
    CopyAndHash(dst.data(), src.data(), half, &h);
    CopyAndHash(dst.data() + half, src.data() + half, size - half, &h);
    EXPECT_EQ(h.Digest(), Xxh3_64(src.data(), size)) << size;
    // std::equal, not memcmp: at size 0 src.data() may be null, and memcmp
    // with a null pointer is undefined even for 0 bytes (UBSan's nonnull check).
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << size;
    EXPECT_EQ(dst[size], std::byte{0x77}) << "wrote past the end at " << size;
  }
}

}  // namespace
}  // namespace internal
}  // namespace transports
}  // namespace viper
