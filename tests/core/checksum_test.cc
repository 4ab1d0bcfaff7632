// XXH3 implementations (core/src/xxh3_isa.h): each one this CPU runs gives
// libxxhash's digest, one-shot and streamed in uneven pieces.
#include "viper/core/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace viper {
namespace {

std::vector<unsigned char> RandomBytes(std::size_t n) {
  std::mt19937_64 rng(n + 7);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// Sizes around XXH3's internal boundaries (16, 128, 240 bytes, 64-byte
// stripes, 1 KiB blocks, its 256-byte streaming buffer) and a few large ones.
std::vector<std::size_t> Sizes() {
  std::vector<std::size_t> sizes;
  for (std::size_t n = 0; n <= 300; ++n) sizes.push_back(n);
  for (std::size_t n : {511u, 512u, 1023u, 1024u, 1025u, 4096u, 65537u, (1u << 20) + 3, 5u << 20}) {
    sizes.push_back(n);
  }
  return sizes;
}

TEST(Xxh3, BaselineIsAlwaysThereAndTheOneInUseIsRunnable) {
  const std::vector<std::string> names = Xxh3Implementations();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "baseline");
  EXPECT_NE(std::find(names.begin(), names.end(), std::string(Xxh3Implementation())), names.end());
}

TEST(Xxh3, EveryImplementationMatchesLibxxhashOneShotAndStreamed) {
  const std::vector<unsigned char> data = RandomBytes(5u << 20);
  std::mt19937_64 rng(42);
  for (const std::string& name : Xxh3Implementations()) {
    SCOPED_TRACE(name);
    for (std::size_t n : Sizes()) {
      const uint64_t want = XXH3_64bits(data.data(), n);
      Xxh3Hasher whole(name);
      whole.Update(data.data(), n);
      ASSERT_EQ(whole.Digest(), want) << n << " bytes in one update";
      Xxh3Hasher pieces(name);
      for (std::size_t off = 0; off < n;) {
        const std::size_t k = std::min<std::size_t>(n - off, 1 + rng() % 700);
        pieces.Update(data.data() + off, k);
        off += k;
      }
      ASSERT_EQ(pieces.Digest(), want) << n << " bytes in pieces";
    }
  }
  for (std::size_t n : Sizes()) ASSERT_EQ(Xxh3_64(data.data(), n), XXH3_64bits(data.data(), n)) << n;
  Xxh3Hasher in_use;
  in_use.Update(data.data(), data.size());
  EXPECT_EQ(in_use.Digest(), XXH3_64bits(data.data(), data.size()));
}

TEST(Xxh3DeathTest, AnImplementationThisCpuDoesNotRunIsAFatalError) {
  EXPECT_DEATH(Xxh3Hasher("avx9000"), "VIPER_CHECK failed");
}

}  // namespace
}  // namespace viper
