// OnlinePlannerOptions::IsValid: the options' ranges (online_options.h).
#include "viper/schedulers/online_options.h"

#include <cmath>
#include <string>

namespace viper {
namespace schedulers {

bool OnlinePlannerOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (!(gate_z >= 0) || !std::isfinite(gate_z))
    return fail("gate_z must be >= 0, got " + std::to_string(gate_z));
  if (!(change_threshold > 0) || !std::isfinite(change_threshold)) {
    return fail("change_threshold must be > 0, got " + std::to_string(change_threshold));
  }
  if (!(change_allowance >= 0) || !std::isfinite(change_allowance)) {
    return fail("change_allowance must be >= 0, got " + std::to_string(change_allowance));
  }
  if (min_fit_points < 3) return fail("min_fit_points must be >= 3, got " + std::to_string(min_fit_points));
  if (!(refit_growth > 1) || !std::isfinite(refit_growth)) {
    return fail("refit_growth must be > 1, got " + std::to_string(refit_growth));
  }
  if (noise_window < 3) return fail("noise_window must be >= 3, got " + std::to_string(noise_window));
  if (min_noise_points < 2)
    return fail("min_noise_points must be >= 2, got " + std::to_string(min_noise_points));
  if (training_smoothing < 1)
    return fail("training_smoothing must be >= 1, got " + std::to_string(training_smoothing));
  if (!(replan_gap >= 0 && replan_gap <= 1e-2)) {
    return fail("replan_gap must be in [0, 0.01], got " + std::to_string(replan_gap));
  }
  if (decay_window < 2) return fail("decay_window must be >= 2, got " + std::to_string(decay_window));
  if (!(wait_guard >= 0 && wait_guard <= 1000)) {
    return fail("wait_guard must be in [0, 1000], got " + std::to_string(wait_guard));
  }
  if (!(pace_tolerance >= 0) || !std::isfinite(pace_tolerance)) {
    return fail("pace_tolerance must be >= 0, got " + std::to_string(pace_tolerance));
  }
  if (!(drift_prior >= 0 && drift_prior <= 1000)) {
    return fail("drift_prior must be in [0, 1000], got " + std::to_string(drift_prior));
  }
  if (keep_versions < 0 || keep_versions > 1000) {
    return fail("keep_versions must be in [0, 1000], got " + std::to_string(keep_versions));
  }
  return true;
}

const char* ToString(RegimeEnds r) {
  switch (r) {
    case RegimeEnds::kOff: return "off";
    case RegimeEnds::kPredicted: return "predicted";
    case RegimeEnds::kEvery: return "every";
  }
  return "?";
}

bool RegimeEndsFromString(const std::string& s, RegimeEnds* out) {
  for (RegimeEnds r : {RegimeEnds::kOff, RegimeEnds::kPredicted, RegimeEnds::kEvery}) {
    if (s == ToString(r)) {
      *out = r;
      return true;
    }
  }
  return false;
}

}  // namespace schedulers
}  // namespace viper
