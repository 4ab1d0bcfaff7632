// Where the traffic is, for the closed-loop planner: the producer's pace and
// its own clock (SetPace, ObserveClock) and the traffic's iteration they give
// (TrafficAt; schedulers/README.md, bench/README.md "Twenty-fifth
// session" and "Twenty-seventh session").
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>

#include "viper/schedulers/online.h"

namespace viper {
namespace schedulers {

Status OnlinePlanner::SetPace(double seconds_per_iteration) {
  if (!std::isfinite(seconds_per_iteration) || !(seconds_per_iteration > 0)) {
    return InvalidArgumentError("the measured pace must be finite and > 0 seconds per iteration, got " +
                                std::to_string(seconds_per_iteration));
  }
  const double in_use = problem_.seconds_per_iteration;
  if (std::fabs(seconds_per_iteration - in_use) <= options_.pace_tolerance * in_use) return Status::Ok();
  ++summary_.pace_updates;
  // From the next observation on (a live producer measures its pace before
  // it reports that iteration); earlier positions keep the pace they had.
  if (paces_.empty()) paces_.emplace_back(std::numeric_limits<int64_t>::min(), in_use);
  paces_.emplace_back(last_iteration_ + 1, seconds_per_iteration);
  problem_.seconds_per_iteration = seconds_per_iteration;
  summary_.pace_s = seconds_per_iteration;
  return Status::Ok();
}

Status OnlinePlanner::ObserveClock(int64_t iteration, double elapsed_s) {
  const int64_t W = problem_.warmup_iterations;
  if (iteration < W || iteration > problem_.total_iterations) {
    return InvalidArgumentError("the producer's clock at iteration " + std::to_string(iteration) + ": not in [" +
                                std::to_string(W) + ", " + std::to_string(problem_.total_iterations) + "]");
  }
  if (own_clock_.empty()) own_clock_.push_back(0.0);  // the end of the warm-up
  const int64_t next = W + static_cast<int64_t>(own_clock_.size());
  if (iteration < next) return Status::Ok();
  if (iteration > next) {
    return InvalidArgumentError("the producer's clock at iteration " + std::to_string(iteration) +
                                ": iteration " + std::to_string(next) + " comes first");
  }
  if (!std::isfinite(elapsed_s) || elapsed_s < own_clock_.back()) {
    return InvalidArgumentError("the producer's clock at iteration " + std::to_string(iteration) + ": " +
                                std::to_string(elapsed_s) + " s, expected finite and >= " +
                                std::to_string(own_clock_.back()) + " s (the iteration before)");
  }
  own_clock_.push_back(elapsed_s);
  return Status::Ok();
}

Status OnlinePlanner::ObservePause(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) {
    return InvalidArgumentError("a pause must last a finite number of seconds >= 0, got " +
                                std::to_string(seconds));
  }
  if (seconds == 0) return Status::Ok();
  const double before = paused_s_.empty() ? 0.0 : paused_s_.back().second;
  if (!paused_s_.empty() && paused_s_.back().first == last_iteration_) {
    paused_s_.back().second += seconds;
  } else {
    paused_s_.emplace_back(last_iteration_, before + seconds);
  }
  return Status::Ok();
}

double OnlinePlanner::PausedBefore(int64_t iteration) const {
  const auto it = std::lower_bound(paused_s_.begin(), paused_s_.end(), iteration,
                                   [](const auto& p, int64_t i) { return p.first < i; });
  return it == paused_s_.begin() ? 0.0 : std::prev(it)->second;
}

double OnlinePlanner::TrafficAt(int64_t iteration) const {
  double traffic = static_cast<double>(iteration);
  if (problem_.requests.traffic_clock == TrafficClock::kWall && iteration > problem_.warmup_iterations) {
    const auto stalls = std::lower_bound(taken_.begin(), taken_.end(), iteration) - taken_.begin();
    const int64_t W = problem_.warmup_iterations;
    const int64_t known = W + static_cast<int64_t>(own_clock_.size()) - 1;  // the clock's last iteration
    const double paused = PausedBefore(iteration);
    if ((stalls > 0 || paused > 0) && !own_clock_.empty() && iteration <= known) {
      const double stalled = (stalls > 0 ? stalled_s_[static_cast<size_t>(stalls - 1)] : 0.0) + paused,
                   tau = problem_.seconds_per_iteration;
      // A past position the producer's clock has reached is a reading. Not
      // where the lead is under a measurement gap: the estimate is within
      // the gap a switch is seen in there, and a reading beside the current
      // estimate (which stays one) moved the gpu tier both ways
      // (bench/README.md, "Twenty-seventh session").
      if (stalled / tau >= MeasurementGap()) {
        const double at = own_clock_[static_cast<size_t>(iteration - W)] + stalled;
        if (at > own_clock_.back()) {
          return std::min(static_cast<double>(problem_.total_iterations),
                          static_cast<double>(known) + (at - own_clock_.back()) / tau);
        }
        // Where the producer itself was `at` seconds in (PositionAt's reading).
        const size_t j = static_cast<size_t>(std::upper_bound(own_clock_.begin(), own_clock_.end(), at) -
                                             own_clock_.begin());
        if (j >= own_clock_.size()) return static_cast<double>(known);
        const double t0 = own_clock_[j - 1], t1 = own_clock_[j];
        return static_cast<double>(W) + static_cast<double>(j - 1) + (t1 > t0 ? (at - t0) / (t1 - t0) : 1.0);
      }
    }
    if (stalls > 0 || paused > 0) {
      double pace = problem_.seconds_per_iteration;
      const auto in_use = std::upper_bound(paces_.begin(), paces_.end(), iteration,
                                           [](int64_t it, const auto& p) { return it < p.first; });
      if (in_use != paces_.begin()) pace = std::prev(in_use)->second;
      traffic = std::min(
          static_cast<double>(problem_.total_iterations),
          traffic + ((stalls > 0 ? stalled_s_[static_cast<size_t>(stalls - 1)] : 0.0) + paused) / pace);
    }
  }
  return traffic;
}

}  // namespace schedulers
}  // namespace viper
