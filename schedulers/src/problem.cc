#include "viper/schedulers/problem.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace viper {
namespace schedulers {
namespace {

bool Fail(std::string* error, const std::string& message) {
  if (error) *error = message;
  return false;
}

bool FiniteNonNegative(double v) { return std::isfinite(v) && v >= 0.0; }
bool FinitePositive(double v) { return std::isfinite(v) && v > 0.0; }

}  // namespace

const char* ToString(ArrivalProcess process) {
  switch (process) {
    case ArrivalProcess::kFixedRate: return "fixed-rate";
    case ArrivalProcess::kPoisson: return "poisson";
    case ArrivalProcess::kTrace: return "trace";
  }
  return "?";
}

StatusOr<ArrivalProcess> ArrivalProcessFromString(const std::string& name) {
  for (ArrivalProcess p : {ArrivalProcess::kFixedRate, ArrivalProcess::kPoisson, ArrivalProcess::kTrace}) {
    if (name == ToString(p)) return p;
  }
  return InvalidArgumentError("unknown arrival process '" + name + "' (expected fixed-rate, poisson or trace)");
}

const char* ToString(WindowKind kind) {
  switch (kind) {
    case WindowKind::kWhileTraining: return "while-training";
    case WindowKind::kRequestCount: return "request-count";
    case WindowKind::kEndTime: return "end-time";
  }
  return "?";
}

StatusOr<WindowKind> WindowKindFromString(const std::string& name) {
  for (WindowKind k : {WindowKind::kWhileTraining, WindowKind::kRequestCount, WindowKind::kEndTime}) {
    if (name == ToString(k)) return k;
  }
  return InvalidArgumentError("unknown window '" + name +
                              "' (expected while-training, request-count or end-time)");
}

const char* ToString(TrafficClock clock) {
  switch (clock) {
    case TrafficClock::kProducer: return "producer";
    case TrafficClock::kWall: return "wall";
  }
  return "?";
}

StatusOr<TrafficClock> TrafficClockFromString(const std::string& name) {
  for (TrafficClock c : {TrafficClock::kProducer, TrafficClock::kWall}) {
    if (name == ToString(c)) return c;
  }
  return InvalidArgumentError("unknown traffic clock '" + name + "' (expected producer or wall)");
}

double RequestModel::RatePerSecond() const {
  if (arrivals == ArrivalProcess::kTrace) {
    if (trace_s.empty() || !(trace_s.back() > 0.0)) return 0.0;
    return static_cast<double>(trace_s.size()) / trace_s.back();
  }
  return 1.0 / interval_s;
}

bool RequestModel::IsValid(std::string* error) const {
  if (arrivals != ArrivalProcess::kTrace && !FinitePositive(interval_s)) {
    return Fail(error, "requests.interval_s must be a positive number of seconds");
  }
  if (arrivals == ArrivalProcess::kTrace) {
    if (trace_s.empty()) return Fail(error, "requests.trace_s is empty (a trace needs arrival times)");
    for (size_t i = 0; i < trace_s.size(); ++i) {
      if (!FiniteNonNegative(trace_s[i]) || (i > 0 && trace_s[i] < trace_s[i - 1])) {
        return Fail(error, "requests.trace_s[" + std::to_string(i) +
                               "] must be finite, >= 0 and not before the previous arrival");
      }
    }
    if (!(trace_s.back() > 0.0)) return Fail(error, "requests.trace_s must end after t = 0");
  }
  if (window == WindowKind::kRequestCount) {
    if (request_count <= 0) return Fail(error, "requests.request_count must be > 0 for a request-count window");
    if (arrivals == ArrivalProcess::kTrace && request_count > static_cast<int64_t>(trace_s.size())) {
      return Fail(error, "requests.request_count exceeds the trace's " + std::to_string(trace_s.size()) +
                             " arrivals");
    }
  }
  if (window == WindowKind::kEndTime && !FinitePositive(end_time_s)) {
    return Fail(error, "requests.end_time_s must be a positive number of seconds for an end-time window");
  }
  return true;
}

bool CheckpointCost::IsValid(std::string* error) const {
  if (!FiniteNonNegative(stall_s)) return Fail(error, "cost.stall_s must be >= 0 seconds");
  if (!FiniteNonNegative(delay_s)) return Fail(error, "cost.delay_s must be >= 0 seconds");
  if (!FiniteNonNegative(keep_copy_s)) return Fail(error, "cost.keep_copy_s must be >= 0 seconds");
  if (!FiniteNonNegative(remeasure_s)) return Fail(error, "cost.remeasure_s must be >= 0 seconds");
  return true;
}

bool TierCost::IsValid(std::string* error) const {
  if (!FinitePositive(model_size_bytes)) return Fail(error, "model_size_bytes must be > 0");
  if (!FiniteNonNegative(snapshot_latency_s)) return Fail(error, "snapshot_latency_s must be >= 0");
  if (!FinitePositive(snapshot_bandwidth_bytes_per_s)) return Fail(error, "snapshot_bandwidth_bytes_per_s must be > 0");
  if (!FiniteNonNegative(transfer_latency_s)) return Fail(error, "transfer_latency_s must be >= 0");
  if (!FinitePositive(transfer_bandwidth_bytes_per_s)) return Fail(error, "transfer_bandwidth_bytes_per_s must be > 0");
  if (!FiniteNonNegative(load_latency_s)) return Fail(error, "load_latency_s must be >= 0");
  if (!FinitePositive(load_bandwidth_bytes_per_s)) return Fail(error, "load_bandwidth_bytes_per_s must be > 0");
  if (!FinitePositive(keep_copy_bandwidth_bytes_per_s)) {
    return Fail(error, "keep_copy_bandwidth_bytes_per_s must be > 0");
  }
  if (notification == Notification::kPoll && !FinitePositive(poll_period_s)) {
    return Fail(error, "poll_period_s must be > 0 when polling");
  }
  return true;
}

CheckpointCost TierCost::ToCheckpointCost() const {
  const double snapshot = snapshot_latency_s + model_size_bytes / snapshot_bandwidth_bytes_per_s;
  const double transfer = transfer_latency_s + model_size_bytes / transfer_bandwidth_bytes_per_s;
  const double load = load_latency_s + model_size_bytes / load_bandwidth_bytes_per_s;
  const double discovery = notification == Notification::kPoll ? 0.5 * poll_period_s : 0.0;
  CheckpointCost c;
  c.stall_s = synchronous ? snapshot + transfer : snapshot;
  c.delay_s = snapshot + transfer + discovery + load;
  c.keep_copy_s = model_size_bytes / keep_copy_bandwidth_bytes_per_s;
  return c;
}

bool Problem::IsValid(std::string* error) const {
  if (warmup_iterations < 0) return Fail(error, "warmup_iterations must be >= 0");
  if (total_iterations <= warmup_iterations) {
    return Fail(error, "total_iterations (" + std::to_string(total_iterations) +
                           ") must be greater than warmup_iterations (" + std::to_string(warmup_iterations) + ")");
  }
  if (!FinitePositive(seconds_per_iteration)) return Fail(error, "seconds_per_iteration must be > 0");
  if (!cost.IsValid(error)) return false;
  if (!requests.IsValid(error)) return false;
  if (!FiniteNonNegative(drift_per_s)) return Fail(error, "drift_per_s must be >= 0");
  if (!FiniteNonNegative(price_per_slowdown_s)) return Fail(error, "price_per_slowdown_s must be >= 0");
  if (slowdown_budget_s && !FiniteNonNegative(*slowdown_budget_s)) {
    return Fail(error, "slowdown_budget_s must be >= 0 seconds");
  }
  if (min_spacing_iterations < 1) return Fail(error, "min_spacing_iterations must be >= 1");
  if (!elapsed_s.empty()) {
    if (static_cast<int64_t>(elapsed_s.size()) != total_iterations - warmup_iterations + 1) {
      return Fail(error, "elapsed_s has " + std::to_string(elapsed_s.size()) + " entries, not N - W + 1 = " +
                             std::to_string(total_iterations - warmup_iterations + 1));
    }
    if (elapsed_s[0] != 0.0) return Fail(error, "elapsed_s[0] must be 0");
    for (size_t i = 1; i < elapsed_s.size(); ++i) {
      if (!(std::isfinite(elapsed_s[i]) && elapsed_s[i] >= elapsed_s[i - 1])) {
        return Fail(error, "elapsed_s[" + std::to_string(i) + "] must be finite and >= the entry before");
      }
    }
  }
  return true;
}

double Problem::ElapsedAt(double p) const {
  const double W = static_cast<double>(warmup_iterations);
  if (elapsed_s.empty()) return (p - W) * seconds_per_iteration;
  const double x = std::min(std::max(p - W, 0.0), static_cast<double>(elapsed_s.size() - 1));
  const size_t i = static_cast<size_t>(std::floor(x));
  if (i + 1 >= elapsed_s.size()) return elapsed_s.back();
  return elapsed_s[i] + (x - static_cast<double>(i)) * (elapsed_s[i + 1] - elapsed_s[i]);
}

int64_t LastIterationBy(const std::vector<double>& elapsed, int64_t W, int64_t N, double tau, double seconds) {
  if (std::isnan(seconds) || N <= W) return W;
  const int64_t span = N - W;
  if (elapsed.empty()) {
    if (!(tau > 0) || !(seconds > 0)) return W;
    const double guess = std::floor(seconds / tau);
    if (!(guess < static_cast<double>(span))) return N;
    // The quotient may be off by one from the products the clock is made
    // of: settle on the largest n whose n x tau is still <= seconds.
    int64_t n = static_cast<int64_t>(guess);
    while (n < span && static_cast<double>(n + 1) * tau <= seconds) ++n;
    while (n > 0 && static_cast<double>(n) * tau > seconds) --n;
    return W + n;
  }
  // The entries finished by then: elapsed[0] = 0 is W itself.
  const auto done = std::upper_bound(elapsed.begin(), elapsed.end(), seconds) - elapsed.begin();
  return std::clamp<int64_t>(W + static_cast<int64_t>(done) - 1, W, N);
}

double Problem::PositionAt(double seconds) const {
  const double W = static_cast<double>(warmup_iterations);
  if (elapsed_s.empty()) return W + seconds / seconds_per_iteration;
  if (seconds <= 0) return W;
  if (seconds >= elapsed_s.back()) return static_cast<double>(total_iterations);
  // The first entry past `seconds`: the iteration under way then.
  const size_t j = static_cast<size_t>(std::upper_bound(elapsed_s.begin(), elapsed_s.end(), seconds) - elapsed_s.begin());
  const double t0 = elapsed_s[j - 1], t1 = elapsed_s[j];
  const double frac = t1 > t0 ? (seconds - t0) / (t1 - t0) : 1.0;
  return W + static_cast<double>(j - 1) + frac;
}

Status Problem::Validate() const {
  std::string error;
  if (!IsValid(&error)) return InvalidArgumentError(error);
  return Status::Ok();
}

double Problem::WindowEnd(int64_t checkpoints) const {
  switch (requests.window) {
    case WindowKind::kWhileTraining:
      return Elapsed(total_iterations) + static_cast<double>(checkpoints) * cost.stall_s;
    case WindowKind::kRequestCount:
      return static_cast<double>(requests.request_count) / requests.RatePerSecond();
    case WindowKind::kEndTime:
      return requests.end_time_s;
  }
  return 0.0;
}

int64_t Problem::MaxCheckpoints() const {
  if (!slowdown_budget_s || cost.stall_s <= 0.0) return std::numeric_limits<int64_t>::max();
  // A tiny relative slack so that a budget of exactly m * sigma admits m.
  const double m = std::floor(*slowdown_budget_s / cost.stall_s * (1.0 + 1e-12));
  return static_cast<int64_t>(m);
}

Status Problem::CheckSchedule(const Schedule& schedule) const {
  for (size_t k = 0; k < schedule.size(); ++k) {
    const int64_t s = schedule[k];
    if (s <= warmup_iterations || s > total_iterations) {
      return InvalidArgumentError("schedule[" + std::to_string(k) + "] = " + std::to_string(s) + " is outside (" +
                                  std::to_string(warmup_iterations) + ", " + std::to_string(total_iterations) +
                                  "]");
    }
    if (k > 0 && s <= schedule[k - 1]) {
      return InvalidArgumentError("schedule[" + std::to_string(k) + "] = " + std::to_string(s) +
                                  " is not after the previous checkpoint");
    }
    if (k > 0 && s - schedule[k - 1] < min_spacing_iterations) {
      return InvalidArgumentError("schedule[" + std::to_string(k) + "] is closer than min_spacing_iterations (" +
                                  std::to_string(min_spacing_iterations) + ") to the previous checkpoint");
    }
  }
  if (static_cast<int64_t>(schedule.size()) > MaxCheckpoints()) {
    return InvalidArgumentError(std::to_string(schedule.size()) + " checkpoints exceed slowdown_budget_s");
  }
  return Status::Ok();
}

int64_t LossCurve::DivergedIn(int64_t first, int64_t last) const {
  int64_t n = 0;
  for (int64_t i = std::max(first, first_); i <= std::min(last, last_iteration()); ++i) n += std::isinf(at(i)) ? 1 : 0;
  return n;
}

Status LossCurve::CheckCovers(const Problem& problem, bool allow_diverged) const {
  if (losses_.empty() || !Covers(problem.warmup_iterations) || !Covers(problem.total_iterations)) {
    std::ostringstream os;
    os << "loss curve covers iterations " << first_ << ".." << last_iteration() << " but the problem needs "
       << problem.warmup_iterations << ".." << problem.total_iterations;
    return InvalidArgumentError(os.str());
  }
  for (int64_t i = problem.warmup_iterations; i <= problem.total_iterations; ++i) {
    const double l = at(i);
    if (allow_diverged && l == std::numeric_limits<double>::infinity() && i > problem.warmup_iterations) continue;
    if (!std::isfinite(l) || l < 0.0) {
      return InvalidArgumentError("loss at iteration " + std::to_string(i) + " is " + std::to_string(l) +
                                  " (losses must be finite and >= 0)");
    }
  }
  return Status::Ok();
}

}  // namespace schedulers
}  // namespace viper
