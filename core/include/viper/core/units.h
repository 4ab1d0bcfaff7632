// Units: parsing and printing byte sizes and durations the way users type them.
#pragma once

#include <cstdint>
#include <string>

#include "viper/core/status.h"

namespace viper {

// "1.7G", "600M", "64MiB", "4096", "2 GB": decimal suffixes (k, M, G, T) are
// powers of 1000, binary ones (KiB, MiB, GiB, TiB) powers of 1024; a trailing
// "B" is optional.
StatusOr<uint64_t> ParseBytes(const std::string& text);
// 1234567 -> "1.23 MB".
std::string FormatBytes(double bytes);
// 0.000123 -> "123 us", 2.5 -> "2.50 s".
std::string FormatSeconds(double seconds);
// A fraction as a signed percentage, the number right-aligned in `width`
// characters, then "%":
// 0.0297 -> "+2.97%"; past a million percent in scientific notation
// (2.2e21 -> "+2.20e+23%"), never a 24-digit number; "+inf%" for infinity.
std::string FormatPercent(double fraction, int width = 0);

}  // namespace viper
