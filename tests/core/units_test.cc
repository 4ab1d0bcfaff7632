// Tests of byte-size parsing and byte/duration formatting.
#include "viper/core/units.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace viper {
namespace {

using ::testing::HasSubstr;

uint64_t Bytes(const std::string& text) {
  auto v = ParseBytes(text);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status().ToString();
  return v.ok() ? *v : 0;
}

TEST(ParseBytesTest, PlainNumbers) {
  EXPECT_EQ(Bytes("4096"), 4096u);
  EXPECT_EQ(Bytes("0"), 0u);
  EXPECT_EQ(Bytes("10B"), 10u);
}

TEST(ParseBytesTest, DecimalSuffixesArePowersOf1000) {
  EXPECT_EQ(Bytes("1k"), 1000u);
  EXPECT_EQ(Bytes("600M"), 600'000'000u);
  EXPECT_EQ(Bytes("1.7G"), 1'700'000'000u);  // the NT3.B model size
  EXPECT_EQ(Bytes("2 GB"), 2'000'000'000u);  // spaces and a trailing B are allowed
  EXPECT_EQ(Bytes("3T"), 3'000'000'000'000u);
  EXPECT_EQ(Bytes("4.7gb"), 4'700'000'000u);  // case-insensitive
}

TEST(ParseBytesTest, BinarySuffixesArePowersOf1024) {
  EXPECT_EQ(Bytes("1KiB"), 1024u);
  EXPECT_EQ(Bytes("64MiB"), 64u * 1024 * 1024);
  EXPECT_EQ(Bytes("2Gi"), 2ull * 1024 * 1024 * 1024);
  EXPECT_EQ(Bytes("1TiB"), 1ull << 40);
}

TEST(ParseBytesTest, RejectsBadInput) {
  for (const char* bad : {"", "abc", "-5M", "12Q", "5MB!", "3iB", "1.5 mega", "nan", "inf"}) {
    auto v = ParseBytes(bad);
    EXPECT_FALSE(v.ok()) << "'" << bad << "' was accepted as " << (v.ok() ? *v : 0);
    if (!v.ok()) {
      EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_THAT(v.status().message(), HasSubstr(std::string("'") + bad + "'"));
    }
  }
}

TEST(ParseBytesTest, UnknownSuffixIsNamed) {
  auto v = ParseBytes("12Q");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("unknown size suffix 'Q'"));
}

TEST(FormatBytesTest, DecimalUnitsWithTwoDecimals) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(999), "999 B");
  EXPECT_EQ(FormatBytes(1000), "1.00 kB");
  EXPECT_EQ(FormatBytes(1234567), "1.23 MB");
  EXPECT_EQ(FormatBytes(600e6), "600.00 MB");
  EXPECT_EQ(FormatBytes(4.7e9), "4.70 GB");
  EXPECT_EQ(FormatBytes(2e12), "2.00 TB");
  EXPECT_EQ(FormatBytes(5e15), "5000.00 TB");  // TB is the largest unit
}

TEST(FormatSecondsTest, PicksTheUnit) {
  EXPECT_EQ(FormatSeconds(5e-9), "5 ns");
  EXPECT_EQ(FormatSeconds(0.000123), "123.0 us");
  EXPECT_EQ(FormatSeconds(0.0015), "1.50 ms");
  EXPECT_EQ(FormatSeconds(0.098), "98.00 ms");  // NT3.A GPU sync latency
  EXPECT_EQ(FormatSeconds(2.5), "2.50 s");
  EXPECT_EQ(FormatSeconds(-0.002), "-2.00 ms");  // sign kept, unit from the magnitude
}

// Percentages as the evaluate and simulate tables print them: fixed-point,
// and past a million percent in scientific notation, never 24 digits.
TEST(FormatPercentTest, FixedPointThenScientific) {
  EXPECT_EQ(FormatPercent(0.0297), "+2.97%");
  EXPECT_EQ(FormatPercent(-0.0463, 8), "   -4.63%");  // the number in 8 characters, then %
  EXPECT_EQ(FormatPercent(2.22e21), "+2.22e+23%");
  EXPECT_EQ(FormatPercent(std::numeric_limits<double>::infinity()), "+inf%");
}

}  // namespace
}  // namespace viper
