// The streaming hashers (internal): whatever the slicing or threading, the
// digest is XXH3-64 of the concatenated bytes.
#include "stream_hash.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <thread>
#include <vector>

#include "viper/core/checksum.h"

namespace viper {
namespace transports {
namespace internal {
namespace {

TEST(SliceHasher, InlineAndThreadedDigestsEqualOneXxh3OfTheConcatenation) {
  std::vector<std::byte> a(3 << 20), b(5), c(1234567);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::byte>(i * 7);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i + 1);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<std::byte>(i ^ 0x5a);
  std::vector<std::byte> all(a);
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());
  const uint64_t want = Xxh3_64(all.data(), all.size());
  const std::vector<ByteRange> ranges = {{a.data(), a.size()}, {b.data(), 0}, {b.data(), b.size()},
                                         {c.data(), c.size()}};
  for (bool threaded : {false, true}) {
    SliceHasher h(ranges, threaded);
    int steps = 0;
    while (!h.done()) {
      if (!h.Step(100000)) std::this_thread::yield();
      ++steps;
    }
    EXPECT_EQ(h.Digest(), want) << (threaded ? "threaded" : "inline");
    if (!threaded) {
      EXPECT_GT(steps, 40);  // in slices, not at once
    }
  }
  SliceHasher empty({}, true);
  EXPECT_TRUE(empty.done());
  EXPECT_EQ(empty.Digest(), Xxh3_64(nullptr, 0));
}

TEST(SliceHasher, DestroyedMidwayStopsTheWorker) {
  std::vector<std::byte> big(64 << 20);
  SliceHasher h({{big.data(), big.size()}}, true);
  // Leaving scope joins the worker without hashing everything; must not hang.
}

TEST(LandingHasher, ThreadedDigestFollowsWhatLanded) {
  std::vector<std::byte> data(2 << 20);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 31);
  for (bool threaded : {false, true}) {
    LandingHasher h(data.data(), threaded);
    for (uint64_t end = 100000; end < data.size(); end += 100000) h.Landed(end);
    h.Landed(data.size());
    EXPECT_EQ(h.Finish(), Xxh3_64(data.data(), data.size())) << (threaded ? "threaded" : "inline");
  }
}

}  // namespace
}  // namespace internal
}  // namespace transports
}  // namespace viper
