#include "viper/simulator/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

namespace viper {
namespace simulator {
namespace {

using schedulers::LossCurve;
using schedulers::Notification;
using schedulers::Schedule;
using schedulers::WindowKind;

enum class EventType { kCheckpoint, kSnapshotDone, kTransferDone, kDiscovered, kPollTick, kLoadDone };

struct Event {
  double time_s;
  uint64_t seq;  // FIFO among equal times: deterministic order
  EventType type;
  int64_t version;
  bool operator>(const Event& o) const { return time_s != o.time_s ? time_s > o.time_s : seq > o.seq; }
};

bool Fail(std::string* error, const std::string& message) {
  if (error) *error = message;
  return false;
}

// The event engine of one run. Owns its clock and queue (no globals).
class Engine {
 public:
  Engine(const Simulator::Options& options, const LossCurve& curve, const Schedule& schedule)
      : o_(options), curve_(curve), schedule_(schedule) {
    const auto& p = o_.problem;
    const auto& tier = o_.tier;
    const double bytes = tier.model_size_bytes;
    snapshot_s_ = tier.snapshot_latency_s + bytes / tier.snapshot_bandwidth_bytes_per_s;
    transfer_s_ = tier.transfer_latency_s + bytes / tier.transfer_bandwidth_bytes_per_s;
    load_s_ = tier.load_latency_s + bytes / tier.load_bandwidth_bytes_per_s;
    stall_s_ = tier.synchronous ? snapshot_s_ + transfer_s_ : snapshot_s_;
    keep_s_ = bytes / tier.keep_copy_bandwidth_bytes_per_s;
    pause_prefix_s_.assign(o_.pauses.size() + 1, 0.0);
    for (size_t i = 0; i < o_.pauses.size(); ++i)
      pause_prefix_s_[i + 1] = pause_prefix_s_[i] + o_.pauses[i].second;
    if (!o_.iteration_times_s.empty()) {
      prefix_s_.assign(o_.iteration_times_s.size() + 1, 0.0);
      for (size_t i = 0; i < o_.iteration_times_s.size(); ++i) {
        prefix_s_[i + 1] = prefix_s_[i] + o_.iteration_times_s[i];
      }
    }
    (void)p;
  }

  SimulationResult Run() {
    const auto& p = o_.problem;
    const int64_t m = static_cast<int64_t>(schedule_.size());
    r_.checkpoints = m;
    r_.versions.resize(static_cast<size_t>(m + 1));
    VersionRecord& v0 = r_.versions[0];
    v0.version = 0;
    v0.iteration = v0.model_iteration = p.warmup_iterations;
    v0.loss = curve_.at(p.warmup_iterations);
    v0.servable_s = 0.0;
    for (int64_t k = 1; k <= m; ++k) {
      VersionRecord& v = r_.versions[static_cast<size_t>(k)];
      v.version = k;
      v.iteration = schedule_[static_cast<size_t>(k - 1)];
      v.model_iteration = o_.published.empty() ? v.iteration : o_.published[static_cast<size_t>(k - 1)];
      v.loss = curve_.at(v.model_iteration);
      // The producer timeline is closed-form: training time up to s_k plus
      // the stalls of the k-1 earlier checkpoints (every stall lasts stall_s_)
      // and of the keep copies and pauses up to s_k.
      v.checkpoint_s = TrainingTime(v.iteration) + static_cast<double>(k - 1) * stall_s_ + KeepStall(v.iteration, true);
      // A decision that waited for re-measurements beside training: the
      // producer trained on; the checkpoint (of the model copied aside)
      // starts when the decision came.
      const auto w = std::lower_bound(o_.waits.begin(), o_.waits.end(), v.iteration,
                                      [](const std::pair<int64_t, double>& e, int64_t it) { return e.first < it; });
      if (w != o_.waits.end() && w->first == v.iteration) {
        v.checkpoint_s += w->second;
        r_.wait_s += w->second;
      }
    }
    // A decision that waited past the next checkpoint's start (a live run
    // whose helper overran) went out before it: versions leave in order.
    for (int64_t k = m - 1; k >= 1; --k) {
      V(k).checkpoint_s = std::min(V(k).checkpoint_s, V(k + 1).checkpoint_s);
    }
    for (int64_t k = 1; k <= m; ++k) {
      V(k).stall_end_s = V(k).checkpoint_s + stall_s_;
      Push(V(k).checkpoint_s, EventType::kCheckpoint, k);
    }
    r_.keep_copies = static_cast<int64_t>(o_.kept_at.size());
    r_.keep_copy_s = keep_s_;
    for (int64_t c : o_.kept_at) {
      const auto before = std::lower_bound(schedule_.begin(), schedule_.end(), c) - schedule_.begin();
      r_.keep_copy_start_s.push_back(TrainingTime(c) + static_cast<double>(before) * stall_s_ + KeepStall(c, false));
    }
    r_.pauses = static_cast<int64_t>(o_.pauses.size());
    r_.pause_s = pause_prefix_s_.back();
    for (const auto& [c, s] : o_.pauses) {
      const auto before = std::lower_bound(schedule_.begin(), schedule_.end(), c) - schedule_.begin();
      // After the iteration's keep copy, before its checkpoint.
      const double a = TrainingTime(c) + static_cast<double>(before) * stall_s_ + KeepStall(c, false) +
                       (std::binary_search(o_.kept_at.begin(), o_.kept_at.end(), c) ? keep_s_ : 0.0);
      r_.pause_spans_s.emplace_back(a, a + s);
    }
    r_.slowdown_s =
        static_cast<double>(m) * stall_s_ + static_cast<double>(r_.keep_copies) * keep_s_ + r_.pause_s;
    r_.training_end_s = TrainingTime(p.total_iterations) + r_.slowdown_s;

    while (!queue_.empty()) {
      const Event e = queue_.top();
      queue_.pop();
      ++r_.events;
      Handle(e);
    }
    ServeRequests();
    return std::move(r_);
  }

 private:
  double TrainingTime(int64_t iteration) const {
    const int64_t n = iteration - o_.problem.warmup_iterations;
    if (prefix_s_.empty()) return static_cast<double>(n) * o_.problem.seconds_per_iteration;
    return prefix_s_[static_cast<size_t>(n)];
  }

  // The stalls of the keep copies and the pauses at iterations before
  // `iteration` (and at it when `at_too`: they come after the iteration,
  // before a checkpoint there).
  double KeepStall(int64_t iteration, bool at_too) const {
    const auto& k = o_.kept_at;
    const auto end = at_too ? std::upper_bound(k.begin(), k.end(), iteration)
                            : std::lower_bound(k.begin(), k.end(), iteration);
    const auto& q = o_.pauses;
    const auto by = [](const std::pair<int64_t, double>& e, int64_t it) { return e.first < it; };
    auto pe = std::lower_bound(q.begin(), q.end(), iteration, by);
    if (at_too && pe != q.end() && pe->first == iteration) ++pe;
    return static_cast<double>(end - k.begin()) * keep_s_ +
           pause_prefix_s_[static_cast<size_t>(pe - q.begin())];
  }

  void Push(double t, EventType type, int64_t version) { queue_.push(Event{t, seq_++, type, version}); }

  VersionRecord& V(int64_t k) { return r_.versions[static_cast<size_t>(k)]; }

  void Handle(const Event& e) {
    const double now = e.time_s;
    switch (e.type) {
      case EventType::kCheckpoint:
        Push(now + snapshot_s_, EventType::kSnapshotDone, e.version);
        break;
      case EventType::kSnapshotDone:
        V(e.version).snapshot_end_s = now;
        if (!sending_) {
          StartTransfer(e.version, now);
        } else {
          // Only the newest snapshot matters: it replaces one not yet sent.
          if (pending_send_ >= 0) Supersede(pending_send_);
          pending_send_ = e.version;
        }
        break;
      case EventType::kTransferDone:
        V(e.version).transfer_end_s = now;
        sending_ = false;
        if (pending_send_ >= 0) {
          const int64_t next = pending_send_;
          pending_send_ = -1;
          StartTransfer(next, now);
        }
        if (o_.tier.notification == Notification::kPush) {
          Push(now + o_.push_latency_s, EventType::kDiscovered, e.version);
        } else {
          complete_ = std::max(complete_, e.version);
          const double tick = NextPollTick(now);
          if (tick > last_tick_scheduled_) {
            last_tick_scheduled_ = tick;
            Push(tick, EventType::kPollTick, -1);
          }
        }
        break;
      case EventType::kPollTick: {
        // The poller sees every complete version and takes the newest;
        // older complete ones it never loads.
        if (complete_ > discovered_) {
          for (int64_t k = discovered_ + 1; k < complete_; ++k) {
            if (!V(k).superseded) Supersede(k);
          }
          discovered_ = complete_;
          Discover(complete_, now);
        }
        break;
      }
      case EventType::kDiscovered:
        discovered_ = std::max(discovered_, e.version);
        Discover(e.version, now);
        break;
      case EventType::kLoadDone:
        V(e.version).servable_s = now;  // atomic swap
        loading_ = false;
        if (pending_load_ >= 0) {
          const int64_t next = pending_load_;
          pending_load_ = -1;
          StartLoad(next, now);
        }
        break;
    }
  }

  double NextPollTick(double now) const {
    const double period = o_.tier.poll_period_s;
    const double j = std::ceil((now - o_.poll_phase_s) / period);
    return o_.poll_phase_s + std::max(0.0, j) * period;
  }

  void StartTransfer(int64_t k, double now) {
    sending_ = true;
    V(k).transfer_start_s = now;
    Push(now + transfer_s_, EventType::kTransferDone, k);
  }

  void Discover(int64_t k, double now) {
    V(k).discovered_s = now;
    if (!loading_) {
      StartLoad(k, now);
    } else {
      if (pending_load_ >= 0) Supersede(pending_load_);
      pending_load_ = k;
    }
  }

  void StartLoad(int64_t k, double now) {
    loading_ = true;
    V(k).load_start_s = now;
    Push(now + load_s_, EventType::kLoadDone, k);
  }

  void Supersede(int64_t k) {
    V(k).superseded = true;
    ++r_.superseded_versions;
  }

  // The traffic's iteration at time t (>= `from`, the last answer: requests
  // come in time order). Producer clock: the producer's last finished
  // iteration, where iteration i ends at its training time plus the stalls of
  // the checkpoints taken before it. Wall clock: the last iteration an
  // unstalled producer would have finished (its training time alone;
  // schedulers::LastIterationBy, which the offline replay shares).
  int64_t TrafficIteration(double t, int64_t from) const {
    const auto& p = o_.problem;
    int64_t i = std::max(from, p.warmup_iterations);
    if (p.requests.traffic_clock == schedulers::TrafficClock::kWall) {
      return std::max(i, schedulers::LastIterationBy(prefix_s_, p.warmup_iterations, p.total_iterations,
                                                     p.seconds_per_iteration, t));
    }
    auto end_of = [&](int64_t k) {
      const auto before = std::lower_bound(schedule_.begin(), schedule_.end(), k) - schedule_.begin();
      return TrainingTime(k) + static_cast<double>(before) * stall_s_ + KeepStall(k, false);
    };
    while (i < p.total_iterations && end_of(i + 1) <= t) ++i;
    return i;
  }

  void ServeRequests() {
    const auto& p = o_.problem;
    const int64_t m = r_.checkpoints;
    if (p.requests.window == WindowKind::kWhileTraining) {
      r_.window_end_s = r_.training_end_s;
    } else {
      r_.window_end_s = p.WindowEnd(m);
    }
    // Versions in the order they became servable (FIFO pipeline: increasing).
    std::vector<int64_t> order;
    order.push_back(0);
    for (int64_t k = 1; k <= m; ++k) {
      // A count-based window with random arrivals can run past window_end_s:
      // every servable version serves the requests that arrive after it.
      if (V(k).servable_s) order.push_back(k);
      if (!V(k).servable_s || *V(k).servable_s >= r_.window_end_s) ++r_.unserved_versions;
    }
    const std::vector<double> arrivals = schedulers::ArrivalTimes(p.requests, r_.window_end_s);
    std::vector<double> staleness;
    staleness.reserve(arrivals.size());
    if (o_.record_requests) r_.request_log.reserve(arrivals.size());
    const double rho = p.drift_per_s;
    const schedulers::StalenessSurface* surface = o_.staleness.get();
    r_.judge = surface ? "staleness table" : "diagonal";
    size_t idx = 0;
    int64_t traffic = p.warmup_iterations;
    for (double t : arrivals) {
      while (idx + 1 < order.size() && *V(order[idx + 1]).servable_s <= t) ++idx;
      VersionRecord& v = V(order[idx]);
      const double age = t - v.checkpoint_s;
      traffic = std::max(TrafficIteration(t, traffic), v.iteration);
      double own = v.loss;
      if (surface) {
        // Run() checked that the surface covers [W, N], so this cannot fail.
        auto l = surface->At(v.model_iteration, static_cast<double>(traffic));
        own = l.ok() ? *l : std::numeric_limits<double>::quiet_NaN();
      }
      const double loss = own + rho * age;
      if (std::isinf(loss)) ++r_.diverged_requests;
      r_.cil += loss;
      ++v.requests;
      staleness.push_back(age);
      if (o_.record_requests) r_.request_log.push_back(RequestRecord{t, v.version, traffic, loss});
    }
    r_.requests = static_cast<int64_t>(arrivals.size());
    r_.events += r_.requests;
    if (!staleness.empty()) {
      double sum = 0.0;
      for (double s : staleness) sum += s;
      r_.mean_staleness_s = sum / static_cast<double>(staleness.size());
      const size_t q = std::min(staleness.size() - 1, static_cast<size_t>(std::ceil(0.99 * staleness.size())) - 1);
      std::nth_element(staleness.begin(), staleness.begin() + static_cast<std::ptrdiff_t>(q), staleness.end());
      r_.p99_staleness_s = staleness[q];
    }
    double latency_sum = 0.0;
    int64_t latency_n = 0;
    for (int64_t k = 1; k <= m; ++k) {
      if (auto l = V(k).UpdateLatency()) {
        latency_sum += *l;
        ++latency_n;
      }
    }
    if (latency_n) r_.mean_update_latency_s = latency_sum / static_cast<double>(latency_n);
  }

  const Simulator::Options& o_;
  const LossCurve& curve_;
  const Schedule& schedule_;
  double snapshot_s_ = 0, transfer_s_ = 0, load_s_ = 0, stall_s_ = 0, keep_s_ = 0;
  std::vector<double> pause_prefix_s_;  // pause_prefix_s_[i]: the first i pauses' seconds
  std::vector<double> prefix_s_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  uint64_t seq_ = 0;
  bool sending_ = false, loading_ = false;
  int64_t pending_send_ = -1, pending_load_ = -1;
  int64_t complete_ = 0, discovered_ = 0;
  double last_tick_scheduled_ = -std::numeric_limits<double>::infinity();
  SimulationResult r_;
};

}  // namespace

std::optional<double> VersionRecord::UpdateLatency() const {
  if (!servable_s || version == 0) return std::nullopt;
  return *servable_s - checkpoint_s;
}

bool Simulator::Options::IsValid(std::string* error) const {
  schedulers::Problem p = problem;
  p.cost = tier.ToCheckpointCost();
  if (!p.IsValid(error)) return false;
  if (!tier.IsValid(error)) return false;
  if (!iteration_times_s.empty()) {
    const int64_t n = problem.total_iterations - problem.warmup_iterations;
    if (static_cast<int64_t>(iteration_times_s.size()) != n) {
      return Fail(error, "iteration_times_s has " + std::to_string(iteration_times_s.size()) +
                             " entries but iterations W+1..N are " + std::to_string(n));
    }
    for (size_t i = 0; i < iteration_times_s.size(); ++i) {
      if (!(iteration_times_s[i] >= 0.0) || !std::isfinite(iteration_times_s[i])) {
        return Fail(error, "iteration_times_s[" + std::to_string(i) + "] must be finite and >= 0");
      }
    }
  }
  if (tier.notification == Notification::kPoll &&
      !(poll_phase_s >= 0.0 && poll_phase_s < tier.poll_period_s)) {
    return Fail(error, "poll_phase_s must be in [0, poll_period_s)");
  }
  if (!(push_latency_s >= 0.0) || !std::isfinite(push_latency_s)) return Fail(error, "push_latency_s must be >= 0");
  for (size_t i = 0; i < kept_at.size(); ++i) {
    if (kept_at[i] <= problem.warmup_iterations || kept_at[i] > problem.total_iterations ||
        (i > 0 && kept_at[i] <= kept_at[i - 1])) {
      return Fail(error, "kept_at[" + std::to_string(i) + "] = " + std::to_string(kept_at[i]) +
                             " is not increasing inside (W, N]");
    }
  }
  for (size_t i = 0; i < pauses.size(); ++i) {
    const auto [at, s] = pauses[i];
    if (at <= problem.warmup_iterations || at > problem.total_iterations ||
        (i > 0 && at <= pauses[i - 1].first)) {
      return Fail(error, "pauses[" + std::to_string(i) + "] at iteration " + std::to_string(at) +
                             " is not increasing inside (W, N]");
    }
    if (!(s >= 0.0) || !std::isfinite(s)) {
      return Fail(error, "pauses[" + std::to_string(i) + "] must last a finite number of seconds >= 0");
    }
  }
  for (size_t i = 0; i < waits.size(); ++i) {
    const auto [at, s] = waits[i];
    if (at <= problem.warmup_iterations || at > problem.total_iterations || (i > 0 && at <= waits[i - 1].first)) {
      return Fail(error, "waits[" + std::to_string(i) + "] at iteration " + std::to_string(at) +
                             " is not increasing inside (W, N]");
    }
    if (!(s >= 0.0) || !std::isfinite(s)) {
      return Fail(error, "waits[" + std::to_string(i) + "] must last a finite number of seconds >= 0");
    }
  }
  return true;
}

Simulator::Simulator(Options options) : options_(std::move(options)) {}

StatusOr<SimulationResult> Simulator::Run(const LossCurve& true_curve, const Schedule& schedule) {
  std::string error;
  if (!options_.IsValid(&error)) return InvalidArgumentError("simulator options: " + error);
  schedulers::Problem p = options_.problem;
  p.cost = options_.tier.ToCheckpointCost();
  p.slowdown_budget_s.reset();  // baselines that ignore the budget can still be judged
  p.min_spacing_iterations = 1;
  VIPER_RETURN_IF_ERROR(p.CheckSchedule(schedule).WithContext("schedule"));
  // +inf is a diverged model, charged as such (never at W: version 0 serves first).
  VIPER_RETURN_IF_ERROR(true_curve.CheckCovers(p, /*allow_diverged=*/true).WithContext("true loss curve"));
  if (options_.staleness) {
    VIPER_RETURN_IF_ERROR(options_.staleness->CheckCovers(p.warmup_iterations, p.total_iterations));
  }
  if (!options_.published.empty()) {
    if (options_.published.size() != schedule.size()) {
      return InvalidArgumentError("published has " + std::to_string(options_.published.size()) +
                                  " entries but the schedule has " + std::to_string(schedule.size()) + " checkpoints");
    }
    for (size_t k = 0; k < schedule.size(); ++k) {
      const int64_t u = options_.published[k];
      if (u < p.warmup_iterations || u > schedule[k]) {
        return InvalidArgumentError("published[" + std::to_string(k) + "] = " + std::to_string(u) +
                                    ": a checkpoint at iteration " + std::to_string(schedule[k]) +
                                    " can publish a model of an iteration in [W = " +
                                    std::to_string(p.warmup_iterations) + ", " + std::to_string(schedule[k]) + "]");
      }
    }
  }
  Engine engine(options_, true_curve, schedule);
  return engine.Run();
}

std::string SimulationResult::BriefReport() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "cil %.6g over %lld requests, %lld checkpoints, slowdown %.3f s, staleness %.3f s",
                cil, static_cast<long long>(requests), static_cast<long long>(checkpoints), slowdown_s,
                mean_staleness_s.value_or(0.0));
  std::string s = buf;
  if (keep_copies > 0) {
    std::snprintf(buf, sizeof(buf), " (%lld keep copies of %.3g s)", static_cast<long long>(keep_copies), keep_copy_s);
    s += buf;
  }
  if (pauses > 0) {
    std::snprintf(buf, sizeof(buf), " (%lld re-measuring pauses, %.3g s in all)",
                  static_cast<long long>(pauses), pause_s);
    s += buf;
  }
  if (diverged_requests > 0) {
    s += ", " + std::to_string(diverged_requests) + " requests served by a diverged model";
  }
  return s;
}

std::string SimulationResult::ChromeTrace() const {
  using nlohmann::json;
  json events = json::array();
  auto us = [](double s) { return s * 1e6; };
  const int kProducer = 1, kTransfer = 2, kNotify = 3, kConsumer = 4;
  for (auto [tid, name] : {std::pair{kProducer, "producer"}, std::pair{kTransfer, "transfer"},
                           std::pair{kNotify, "notification"}, std::pair{kConsumer, "consumer"}}) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", name}}}});
  }
  auto span = [&](int tid, const std::string& name, double a, double b, json args = json::object()) {
    events.push_back({{"name", name}, {"ph", "X"}, {"pid", 1}, {"tid", tid}, {"ts", us(a)}, {"dur", us(b - a)},
                      {"args", args}});
  };
  double train_from = 0.0;
  for (size_t k = 1; k < versions.size(); ++k) {
    const VersionRecord& v = versions[k];
    const std::string tag = "v" + std::to_string(v.version);
    span(kProducer, "train", train_from, v.checkpoint_s);
    span(kProducer, "checkpoint " + tag, v.checkpoint_s, v.stall_end_s, {{"iteration", v.iteration}});
    train_from = v.stall_end_s;
    if (v.transfer_start_s && v.transfer_end_s) span(kTransfer, "send " + tag, *v.transfer_start_s, *v.transfer_end_s);
    if (v.discovered_s) {
      events.push_back({{"name", "discovered " + tag}, {"ph", "i"}, {"s", "t"}, {"pid", 1}, {"tid", kNotify},
                        {"ts", us(*v.discovered_s)}});
    }
    if (v.load_start_s && v.servable_s) span(kConsumer, "load " + tag, *v.load_start_s, *v.servable_s);
    if (v.superseded) {
      events.push_back({{"name", "superseded " + tag}, {"ph", "i"}, {"s", "t"}, {"pid", 1}, {"tid", kTransfer},
                        {"ts", us(v.snapshot_end_s)}});
    }
  }
  span(kProducer, "train", train_from, training_end_s);
  // Keep copies lie inside the train spans above (nested on the same track).
  for (double a : keep_copy_start_s) span(kProducer, "keep copy", a, a + keep_copy_s);
  for (const auto& [a, b] : pause_spans_s) span(kProducer, "re-measure", a, b);
  // Serving spans: each servable version until the next one.
  std::vector<const VersionRecord*> served;
  for (const auto& v : versions) {
    if (v.servable_s && *v.servable_s < window_end_s) served.push_back(&v);
  }
  for (size_t i = 0; i < served.size(); ++i) {
    const double a = *served[i]->servable_s;
    const double b = i + 1 < served.size() ? *served[i + 1]->servable_s : window_end_s;
    span(kConsumer, "serving v" + std::to_string(served[i]->version), a, b,
         {{"requests", served[i]->requests}, {"loss", served[i]->loss}});
  }
  json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return trace.dump();
}

std::string SimulationResult::RequestCsv() const {
  std::ostringstream out;
  out << "time_s,version,iteration,traffic_iteration,loss\n";
  char buf[160];
  for (const auto& r : request_log) {
    std::snprintf(buf, sizeof(buf), "%.9g,%lld,%lld,%lld,%.9g\n", r.time_s, static_cast<long long>(r.version),
                  static_cast<long long>(versions[static_cast<size_t>(r.version)].model_iteration),
                  static_cast<long long>(r.traffic_iteration), r.loss);
    out << buf;
  }
  return out.str();
}

}  // namespace simulator
}  // namespace viper
