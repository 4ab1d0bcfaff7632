// The median of a sample, for the planners, the cost model and the CLI's
// summaries (one definition; the predictor's running-median noise estimate
// and the benchmarks take the upper middle value instead, on purpose or at
// sizes where it does not matter, and keep their own).
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace viper {

// The middle value, or the mean of the two middle values of an even count;
// `if_empty` for an empty sample (NaN unless the caller says otherwise).
// Takes the sample by value and partially sorts the copy: O(n).
inline double Median(std::vector<double> v, double if_empty = std::numeric_limits<double>::quiet_NaN()) {
  if (v.empty()) return if_empty;
  const auto h = static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), v.begin() + h, v.end());
  const double upper = v[static_cast<std::size_t>(h)];
  if (v.size() % 2 == 1) return upper;
  return 0.5 * (upper + *std::max_element(v.begin(), v.begin() + h));
}

}  // namespace viper
