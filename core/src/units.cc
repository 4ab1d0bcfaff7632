#include "viper/core/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace viper {

StatusOr<uint64_t> ParseBytes(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  double value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(value) || value < 0) {
    return InvalidArgumentError("'" + text + "' is not a byte size (expected e.g. 600M, 1.7G, 64MiB)");
  }
  std::string suffix;
  for (const char* p = end; *p; ++p) {
    if (!std::isspace(static_cast<unsigned char>(*p))) suffix += *p;
  }
  double scale = 1;
  std::string s = suffix;
  if (!s.empty() && (s.back() == 'B' || s.back() == 'b')) s.pop_back();
  bool binary = false;
  if (!s.empty() && (s.back() == 'i' || s.back() == 'I')) {
    binary = true;
    s.pop_back();
  }
  if (s.size() > 1) return InvalidArgumentError("'" + text + "': unknown size suffix '" + suffix + "'");
  if (!s.empty()) {
    const double base = binary ? 1024.0 : 1000.0;
    switch (std::toupper(static_cast<unsigned char>(s[0]))) {
      case 'K': scale = base; break;
      case 'M': scale = base * base; break;
      case 'G': scale = base * base * base; break;
      case 'T': scale = base * base * base * base; break;
      default: return InvalidArgumentError("'" + text + "': unknown size suffix '" + suffix + "'");
    }
  } else if (binary) {
    return InvalidArgumentError("'" + text + "': unknown size suffix '" + suffix + "'");
  }
  // Range-check before the cast: 1e30 would be undefined behaviour.
  if (!(value * scale < 9.2e18)) return OutOfRangeError("'" + text + "' is too large a byte size (at most 8 EiB)");
  return static_cast<uint64_t>(std::llround(value * scale));
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (std::fabs(bytes) >= 1000.0 && u < 4) {
    bytes /= 1000.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string FormatSeconds(double seconds) {
  char buf[32];
  const double a = std::fabs(seconds);
  if (a < 1e-6) std::snprintf(buf, sizeof(buf), "%.0f ns", seconds * 1e9);
  else if (a < 1e-3) std::snprintf(buf, sizeof(buf), "%.1f us", seconds * 1e6);
  else if (a < 1.0) std::snprintf(buf, sizeof(buf), "%.2f ms", seconds * 1e3);
  else std::snprintf(buf, sizeof(buf), "%.2f s", seconds);
  return buf;
}

std::string FormatPercent(double fraction, int width) {
  char buf[64];
  const double x = 100 * fraction;
  if (std::isfinite(x) && std::fabs(x) >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%+*.2e%%", width, x);
  } else {
    std::snprintf(buf, sizeof(buf), "%+*.2f%%", width, x);
  }
  return buf;
}

}  // namespace viper
