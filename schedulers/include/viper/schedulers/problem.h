// The scheduling problem of DESIGN.md §1: when should a training job publish a
// checkpoint to an inference service. These types are shared by the
// schedulers, the simulator and the live workflow; they hold no I/O.
//
// Time origin: t = 0 is the end of warm-up iteration W. The warm-up model
// (version 0) is servable from t = 0. Checkpoint k (1-based) of a schedule
// s_1 < ... < s_m in (W, N] starts at T_k = (s_k - W)*tau + (k-1)*sigma and
// is servable from A_k = T_k + delta. Version 0 has T_0 = 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/core/transfer.h"

namespace viper {
namespace schedulers {

// A schedule: strictly increasing iterations in (W, N] after which the
// producer checkpoints.
using Schedule = std::vector<int64_t>;

// Where the traffic is under the wall clock, in whole iterations: the last
// iteration an unstalled producer has finished `seconds` after the end of
// warm-up iteration W, on `elapsed` (Problem::elapsed_s's form: elapsed[i]
// = training seconds from the end of W to the end of W + i, N - W + 1
// entries) or, when `elapsed` is empty, a uniform `tau` seconds per
// iteration (the largest n with n x tau <= seconds, exact in floating
// point). In [W, N]. The simulator's judge charges each request the table
// at this iteration, and the offline replay measures online's validation
// sample there; the oracle plans on Problem::PositionAt, its fractional
// form (floor(PositionAt(s)) is this, but for a quotient s / tau that
// rounds onto a whole number on the uniform clock).
int64_t LastIterationBy(const std::vector<double>& elapsed, int64_t W, int64_t N, double tau, double seconds);

// How inference requests arrive after the warm-up.
enum class ArrivalProcess {
  kFixedRate,  // one request every interval_s, the first at t = 0
  kPoisson,    // exponential gaps with mean interval_s, from `seed`
  kTrace,      // recorded arrival times (seconds since the end of warm-up)
};
const char* ToString(ArrivalProcess process);
StatusOr<ArrivalProcess> ArrivalProcessFromString(const std::string& name);

// Where the serving window ends.
enum class WindowKind {
  kWhileTraining,  // serve while training runs: ends at the end of iteration N (stalls included)
  kRequestCount,   // a fixed number of requests (the Viper paper's setting)
  kEndTime,        // a fixed wall time end_time_s
};
const char* ToString(WindowKind kind);
StatusOr<WindowKind> WindowKindFromString(const std::string& name);

// Which clock the traffic's drift follows: where the traffic is, on a
// staleness table's traffic axis, when a request arrives. Only a staleness
// table reads it (on the diagonal a version is charged its own-time loss).
// kWall is the default: traffic drifts in the world, which does not wait for
// a checkpoint. Under kProducer a schedule can hold a fixed request window's
// traffic away from a drift by stalling before it (a bound no causal planner
// can reach), so it is kept for harnesses whose traffic follows the producer.
enum class TrafficClock {
  // The producer's iteration: the traffic waits while a checkpoint stalls
  // the producer.
  kProducer,
  // Wall time: the traffic is at the iteration an unstalled producer would
  // have reached (the log's own clock). The world does not wait for a
  // checkpoint, so stalling cannot hold the traffic back. The live trainer's
  // consumers drift their requests this way by default (viper run
  // --traffic-clock).
  kWall,
};
const char* ToString(TrafficClock clock);
StatusOr<TrafficClock> TrafficClockFromString(const std::string& name);

// How a new version is discovered by the consumer: viper::Notify of
// viper/core/transfer.h (push | poll), under the name the planners use.
using Notification = viper::Notify;
using viper::ToString;
inline StatusOr<Notification> NotificationFromString(const std::string& name) {
  return viper::NotifyFromString(name);
}

// The request model: arrivals and window.
struct RequestModel {
  // Arrival process.
  ArrivalProcess arrivals = ArrivalProcess::kFixedRate;
  // Fixed rate: seconds between requests; Poisson: mean seconds between requests. > 0.
  double interval_s = 1.0;
  // Poisson: seed of the arrival generator (deterministic per seed).
  uint64_t seed = 1;
  // Trace: arrival times in seconds since the end of warm-up, non-decreasing, >= 0.
  std::vector<double> trace_s;
  // Where the window ends.
  WindowKind window = WindowKind::kWhileTraining;
  // kRequestCount: number of requests served in the window (> 0).
  int64_t request_count = 0;
  // kEndTime: end of the window, seconds since the end of warm-up (> 0).
  double end_time_s = 0.0;
  // The clock the traffic's drift follows (staleness tables only).
  TrafficClock traffic_clock = TrafficClock::kWall;

  // Mean request rate (requests per second) used by the fluid model: 1 /
  // interval_s, or for a trace its count divided by its last arrival time.
  double RatePerSecond() const;
  bool IsValid(std::string* error) const;
};

// Per-checkpoint cost on one transport tier, as the scheduling model sees it.
struct CheckpointCost {
  // sigma: seconds the producer is blocked per checkpoint (>= 0).
  double stall_s = 0.0;
  // delta: seconds from the checkpoint's start until the version is servable
  // on the consumer (>= stall_s is typical but not required; >= 0). Viper's
  // Algorithm 1 reads t_p = stall_s and t_c = max(0, delay_s - stall_s).
  double delay_s = 0.0;
  // Seconds the producer is blocked to copy a model it keeps without
  // publishing it (>= 0): `online`'s regime ends (Plan::kept,
  // OnlinePlanner::Options::regime_ends); the judge charges each.
  double keep_copy_s = 0.0;
  // Seconds the producer is blocked to re-measure one model it does not
  // train (the served version or a kept one) on the validation sample of a
  // traffic state it has not measured that model on (>= 0): `online`'s
  // observations (Plan::pauses); the judge charges each. The scenario sets
  // it to the log's validation pause (ScenarioOptions::remeasure_s).
  double remeasure_s = 0.0;
  // Where those re-measurements run. false: on the training path, a pause
  // of the producer (Plan::pauses). true: beside training (a helper thread
  // or stream holding the models and today's validation sample): the
  // producer trains on, and the decision at that measurement waits for
  // them, so a checkpoint there starts remeasure_s per model later
  // (Plan::waits); what does not fit before the next measurement is a
  // pause there as on the path.
  bool remeasure_beside = false;

  bool IsValid(std::string* error) const;
};

// The same cost built from a tier's phases, each `latency + bytes/bandwidth`,
// plus notification. stall = snapshot (+ transfer when synchronous);
// delay = snapshot + transfer + discovery + load, where discovery is 0 for
// push and half the poll period for polling (the mean wait of a poller with a
// random phase).
struct TierCost {
  // Model size in bytes (> 0).
  double model_size_bytes = 1.0;
  // Snapshot (producer-side copy) latency, seconds, and bandwidth, bytes per second.
  double snapshot_latency_s = 0.0;
  double snapshot_bandwidth_bytes_per_s = 1e12;
  // Transfer to the consumer: latency, seconds, and bandwidth, bytes per second.
  double transfer_latency_s = 0.0;
  double transfer_bandwidth_bytes_per_s = 1e12;
  // Consumer load (into serving memory): latency, seconds, and bandwidth, bytes per second.
  double load_latency_s = 0.0;
  double load_bandwidth_bytes_per_s = 1e12;
  // A copy of the model the producer keeps in its own memory without
  // publishing it (a regime's end, for re-publishing), bytes per second;
  // the producer is blocked for it.
  double keep_copy_bandwidth_bytes_per_s = 1e12;
  // Synchronous mode blocks the producer for snapshot + transfer; async only for the snapshot.
  bool synchronous = true;
  // Push notification or polling.
  Notification notification = Notification::kPush;
  // Polling period in seconds (> 0 when polling).
  double poll_period_s = 1.0;

  bool IsValid(std::string* error) const;
  CheckpointCost ToCheckpointCost() const;
};

// Everything a scheduler needs except the loss curve.
struct Problem {
  // W: warm-up iterations; the consumer serves the model of iteration W first (>= 0).
  int64_t warmup_iterations = 0;
  // N: last training iteration (> W).
  int64_t total_iterations = 1;
  // tau: seconds per training iteration (> 0).
  double seconds_per_iteration = 1.0;
  // sigma and delta per checkpoint.
  CheckpointCost cost;
  // Request arrivals and window.
  RequestModel requests;
  // rho: loss added per second a version has been served since its checkpoint
  // started (loss += rho * (t - T_k)); >= 0, 0 = no drift.
  double drift_per_s = 0.0;
  // Cost units charged per second of training slowdown (added to CIL in the
  // objective); >= 0.
  double price_per_slowdown_s = 0.0;
  // Upper bound on total stall m * sigma, seconds; absent = unlimited.
  std::optional<double> slowdown_budget_s;
  // Minimum iterations between consecutive checkpoints (>= 1).
  int64_t min_spacing_iterations = 1;
  // The producer's own clock, when it is not uniform: elapsed_s[i] = seconds
  // from the end of the warm-up to the end of iteration W + i without stalls
  // (N - W + 1 entries, elapsed_s[0] = 0, non-decreasing); empty = uniform,
  // (s - W) x seconds_per_iteration. It is the log's future: only a bound
  // (the oracle) plans with it, on the clock the simulator replays.
  std::vector<double> elapsed_s;

  bool IsValid(std::string* error) const;
  // Status form of IsValid (InvalidArgument naming the field).
  Status Validate() const;

  // Training seconds from the end of the warm-up to the end of `iteration`
  // (in [W, N]), without stalls: the producer's clock (elapsed_s, or uniform).
  double Elapsed(int64_t iteration) const {
    if (elapsed_s.empty()) return static_cast<double>(iteration - warmup_iterations) * seconds_per_iteration;
    return elapsed_s[static_cast<size_t>(iteration - warmup_iterations)];
  }
  // The same at a fractional position p in [W, N] (linear within an iteration).
  double ElapsedAt(double p) const;
  // The inverse: the (fractional) iteration an unstalled producer has reached
  // `seconds` after the warm-up (W + seconds / tau when uniform; N at most
  // when the clock is given, past its end).
  double PositionAt(double seconds) const;
  // The traffic's iteration `seconds` after the warm-up under the wall
  // clock: the last iteration an unstalled producer has finished by then
  // (LastIterationBy on elapsed_s and tau).
  int64_t TrafficIterationAt(double seconds) const {
    return LastIterationBy(elapsed_s, warmup_iterations, total_iterations, seconds_per_iteration, seconds);
  }
  // Wall time of the start of checkpoint `index` (1-based) at `iteration`.
  double CheckpointStart(int64_t iteration, int64_t index) const {
    return Elapsed(iteration) + static_cast<double>(index - 1) * cost.stall_s;
  }
  // End of the serving window for a schedule with `checkpoints` checkpoints
  // (fluid model): training end for kWhileTraining, request_count/rate for
  // kRequestCount (for a trace: its request_count-th arrival), end_time_s.
  double WindowEnd(int64_t checkpoints) const;
  // The most checkpoints the slowdown budget allows (INT64_MAX when unlimited).
  int64_t MaxCheckpoints() const;
  // Whether `schedule` is sorted, strictly increasing, inside (W, N], and
  // respects min spacing and the budget; the message says what is wrong.
  Status CheckSchedule(const Schedule& schedule) const;
};

// Losses per iteration for iterations first..last (inclusive): the inference
// loss of a version checkpointed at iteration i is at(i).
class LossCurve {
 public:
  LossCurve() = default;
  LossCurve(int64_t first_iteration, std::vector<double> losses)
      : first_(first_iteration), losses_(std::move(losses)) {}

  int64_t first_iteration() const { return first_; }
  int64_t last_iteration() const { return first_ + static_cast<int64_t>(losses_.size()) - 1; }
  bool Covers(int64_t iteration) const { return iteration >= first_ && iteration <= last_iteration(); }
  double at(int64_t iteration) const { return losses_[static_cast<size_t>(iteration - first_)]; }
  const std::vector<double>& losses() const { return losses_; }
  size_t size() const { return losses_.size(); }

  // OK when the curve covers [W, N] of `problem` with finite, non-negative
  // losses; with `allow_diverged`, +inf (a diverged model) too, except at W
  // (version 0 is served from the start).
  Status CheckCovers(const Problem& problem, bool allow_diverged = false) const;
  // Iterations in [first, last] whose loss is +inf (a diverged model).
  int64_t DivergedIn(int64_t first, int64_t last) const;

 private:
  int64_t first_ = 0;
  std::vector<double> losses_;
};

}  // namespace schedulers
}  // namespace viper
