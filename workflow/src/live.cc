// The live workflow's entry point (LiveRun::Run: the clocks, then one role
// per rank), its options and its outputs. The roles: live_producer.cc and
// live_consumer.cc; the messages between them: live_exchange.cc; the
// workloads and loss oracles: live_workloads.cc.
#include "viper/workflow/live.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "live_exchange.h"
#include "live_roles.h"
#include "live_workloads.h"
#include "viper/schedulers/scenario.h"
#include "viper/simulator/compare.h"

namespace viper {
namespace workflow {
namespace {

bool Fail(std::string* error, const std::string& message) {
  if (error) *error = message;
  return false;
}

}  // namespace

const char* LiveRun::ToString(Workload workload) {
  return workload == Workload::kTrainer ? "trainer" : "replay";
}

StatusOr<LiveRun::Workload> LiveRun::WorkloadFromString(const std::string& name) {
  if (name == "trainer") return Workload::kTrainer;
  if (name == "replay") return Workload::kReplay;
  return InvalidArgumentError("unknown workload '" + name + "' (expected trainer or replay)");
}

Trainer::Options LiveRun::DefaultTrainerOptions() {
  Trainer::Options o;
  o.epochs = 10;
  return o;
}

bool LiveRun::Options::IsValid(std::string* error) const {
  if (strategy == schedulers::StrategyKind::kOracle) {
    return Fail(error, "strategy: oracle needs the future curve; a live run cannot use it");
  }
  if (notify == transports::Notify::kPoll && tier != transports::Tier::kPfs) {
    return Fail(error, "notify: poll needs tier pfs (consumers scan the PFS directory)");
  }
  if (tier == transports::Tier::kPfs && pfs_dir.empty())
    return Fail(error, "pfs_dir: required with tier pfs");
  if (fanout == transports::Fanout::kTree && tier != transports::Tier::kHost) {
    return Fail(error, "fanout: tree needs tier host (consumers relay MPI messages)");
  }
  if (host_protocol == transports::HostProtocol::kOneSided) {
    return Fail(error, "host_protocol: a live run takes shm or two-sided");
  }
  if (!hmac_key_file.empty() && tier != transports::Tier::kPfs) {
    return Fail(error, "hmac_key_file: needs tier pfs (only version files in a shared directory are signed; the "
                       "other tiers move versions inside the MPI job)");
  }
  if (pfs_delta && tier != transports::Tier::kPfs) {
    return Fail(error, "pfs_delta: needs tier pfs (only the pfs tier writes delta versions so far)");
  }
  if (delta == transports::DeltaMode::kOn && tier == transports::Tier::kGpu) {
    return Fail(error, "delta: on needs tier host (shm or two-sided) or pfs (gpu versions go whole)");
  }
  if (!(poll_period_s > 0)) return Fail(error, "poll_period_s must be > 0");
  if (!(requests_per_s > 0)) return Fail(error, "requests_per_s must be > 0");
  {
    // The planner's own bound.
    schedulers::OnlinePlanner::Options oo;
    oo.keep_versions = keep_versions;
    oo.drift_prior = drift_prior;
    oo.wait_guard = wait_guard;
    std::string why;
    if (!oo.IsValid(&why)) return Fail(error, why);
  }
  if (plan_cost) {
    std::string why;
    if (!plan_cost->IsValid(&why)) return Fail(error, "plan_cost: " + why);
  }
  if (warmup_iterations < 0) return Fail(error, "warmup_iterations must be >= 0");
  if (!(warmup_fraction > 0 && warmup_fraction < 1)) return Fail(error, "warmup_fraction must be in (0, 1)");
  if (workload == Workload::kReplay) {
    if (log_path.empty()) return Fail(error, "log_path: required with workload replay");
    if (model_bytes < 4) return Fail(error, "model_bytes must be >= 4");
    if (!(replay_time_scale > 0)) return Fail(error, "replay_time_scale must be > 0");
    if (replay_max_iterations < 0) return Fail(error, "replay_max_iterations must be >= 0");
  } else {
    if (!trainer.IsValid(error)) {
      if (error) *error = "trainer." + *error;
      return false;
    }
    if (trainer.test_samples <= 0) {
      return Fail(error, "trainer.test_samples must be > 0: the consumers answer requests from the test subset");
    }
    if (trainer.drift != Trainer::Drift::kNone) {
      // N as Trainer::Create will plan it (train_samples 0 = all 60,000 images).
      const int64_t pool = trainer.train_samples > 0 ? trainer.train_samples : kFashionMnistTrainImages;
      int64_t n = trainer.epochs * (pool / trainer.batch_size);
      if (trainer.max_iterations > 0) n = std::min(n, trainer.max_iterations);
      if (trainer.drift_at_iteration > n) {
        return Fail(error, "trainer.drift_at_iteration (" + std::to_string(trainer.drift_at_iteration) +
                               ") is after the run's last iteration (" + std::to_string(n) +
                               "): the drift would never happen");
      }
    }
  }
  if (workload == Workload::kReplay && trainer.staleness_table) {
    return Fail(error, "trainer.staleness_table: a replay has no model versions to evaluate (needs workload trainer)");
  }
  if (workload == Workload::kReplay && trainer.drift != Trainer::Drift::kNone) {
    return Fail(error, "trainer.drift: a replay has no trainer to drift (the log's losses are replayed as recorded)");
  }
  if (!(producer_timeout_s > 0)) return Fail(error, "producer_timeout_s must be > 0");
  if (!(consumer_timeout_s > 0)) return Fail(error, "consumer_timeout_s must be > 0");
  return true;
}

StatusOr<LiveRun::Summary> LiveRun::Run(const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("live run: " + error);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return FailedPreconditionError("live run: MPI is not initialised (use transports::MpiSession)");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2)
    return InvalidArgumentError("live run: needs at least 2 MPI ranks (rank 0 produces, the others serve)");
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const double base = internal::AlignClocks(comm, rank, size);
  auto result = rank == 0 ? internal::RunProducer(options, comm, size, base)
                          : internal::RunConsumer(options, comm, rank, base);
  // Not freed collectively: a lost peer would hang MPI_Comm_free.
  return result;
}

// ----------------------------------------------------------------------------
// Output.

std::string LiveRun::Summary::BriefReport() const {
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "%s over %s%s%s/%s/%s (%s): %zu versions to %d consumer(s), CIL %.1f (%.1f per consumer) over %lld "
      "requests, update latency %.2f ms, stall %.3f s (%.2f%% slowdown), %s",
      strategy.c_str(), tier.c_str(), tier == "host" ? " " : "", tier == "host" ? host_protocol.c_str() : "",
      mode.c_str(), notify.c_str(), workload.c_str(), versions.size(),
      consumers, cil, cil_per_consumer, static_cast<long long>(requests),
      mean_update_latency_s.value_or(0) * 1e3, total_stall_s, slowdown_fraction * 100, termination.c_str());
  std::string out = buf;
  if (republished > 0) out += ", " + std::to_string(republished) + " re-published a kept model";
  return out;
}

std::string LiveRun::Summary::RequestCsv() const {
  // traffic_iteration: the producer iteration the consumer drifted the
  // request's image to (its estimate); true_iteration: the producer's
  // iterations done then (both -1 when the traffic does not drift).
  std::string out = "consumer,time_s,version,iteration,loss,staleness_s,traffic_iteration,true_iteration\n";
  char buf[200];
  for (const auto& q : request_log) {
    std::snprintf(buf, sizeof(buf), "%d,%.6f,%llu,%lld,%.9g,%.6f,%lld,%lld\n", q.consumer, q.time_s,
                  static_cast<unsigned long long>(q.version), static_cast<long long>(q.iteration), q.loss,
                  q.staleness_s, static_cast<long long>(q.traffic_iteration), static_cast<long long>(q.true_iteration));
    out += buf;
  }
  return out;
}

std::string LiveRun::Summary::ChromeTrace() const {
  // Trace-event format, microseconds; pid 0 = producer side, pid r = consumer r.
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  char buf[320];
  auto add = [&](const char* name, int pid, int tid, double ts_s, double dur_s, const std::string& args) {
    std::snprintf(
        buf, sizeof(buf),
        "%s{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f,\"args\":{%s}}",
        first ? "" : ",\n", name, pid, tid, ts_s * 1e6, std::max(0.0, dur_s) * 1e6, args.c_str());
    out += buf;
    first = false;
  };
  auto meta = [&](int pid, int tid, const std::string& name) {
    std::snprintf(
        buf, sizeof(buf),
        "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
        first ? "" : ",\n", pid, tid, name.c_str());
    out += buf;
    first = false;
  };
  meta(0, 0, "producer");
  meta(0, 1, "transfer");
  meta(0, 2, "notification");
  add("train", 0, 0, 0, training_end_s, "");
  for (const auto& v : versions) {
    const std::string a =
        "\"version\":" + std::to_string(v.version) + ",\"iteration\":" + std::to_string(v.iteration);
    add("stall", 0, 0, v.checkpoint_s, v.stall_s, a);
    add("snapshot+transfer", 0, 1, v.checkpoint_s, v.snapshot_s + v.transfer_s, a);
    if (v.delivered_to > 0) {
      add("discovery+load", 0, 2, v.checkpoint_s + v.update_latency_s - v.discovery_s - v.load_s,
          v.discovery_s + v.load_s, a);
    }
  }
  // Consumer tracks: serving spans per version, from the request log.
  std::map<int, std::vector<const Request*>> by;
  for (const auto& q : request_log) by[q.consumer].push_back(&q);
  for (const auto& [rank, qs] : by) {
    meta(rank, 0, "consumer " + std::to_string(rank));
    size_t i = 0;
    while (i < qs.size()) {
      size_t j = i;
      while (j + 1 < qs.size() && qs[j + 1]->version == qs[i]->version) ++j;
      add(("serve v" + std::to_string(qs[i]->version)).c_str(), rank, 0, qs[i]->time_s,
          qs[j]->time_s - qs[i]->time_s, "\"requests\":" + std::to_string(j - i + 1));
      i = j + 1;
    }
  }
  out += "\n]}\n";
  return out;
}

std::string LiveSimulationComparison::BriefReport() const {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "CIL per consumer: simulated %.2f, measured %.2f (%+.1f%%); requests %.0f vs %.0f; judge %s on %s",
                predicted_cil_per_consumer, measured_cil_per_consumer, cil_error * 100, predicted_requests,
                measured_requests_per_consumer, judge.c_str(), truth_metric.c_str());
  return buf;
}

StatusOr<LiveSimulationComparison> CompareWithSimulation(const LiveRun::Summary& s,
                                                         const LiveRun::Options& o) {
  if (s.log.records.empty() || s.versions.empty())
    return FailedPreconditionError("no producer results to compare");
  schedulers::ScenarioOptions sco;
  sco.warmup_iterations = s.warmup_iterations;
  sco.total_iterations = s.iterations_done;
  sco.log_iteration_times = true;
  sco.request_interval_s = 1.0 / o.requests_per_s;
  // The metric as the run chose it: auto on the same warm-up (the fit's
  // metric and online's, Scenario::online_metric).
  // The consumers drifted their requests to the producer's estimated
  // iteration: judged on the producer's clock (the offline default is wall).
  sco.problem_template.requests.traffic_clock = schedulers::TrafficClock::kProducer;
  // Measured costs: mean stall of versions >= 1 (or version 0's), mean update latency.
  double stall = 0, n = 0;
  for (const auto& v : s.versions) {
    if (v.version > 0) {
      stall += v.stall_s;
      n += 1;
    }
  }
  stall = n > 0 ? stall / n : s.versions.front().stall_s;
  const double delay = std::max(stall, s.mean_update_latency_s.value_or(s.planned_delay_s));
  sco.tier = schedulers::MeasuredCost{stall, delay};
  // The log's wall times include the stalls; the simulator adds its own, so
  // take them out of the iteration times.
  TrainingLog log = s.log;
  double removed = 0;
  size_t vi = 1;
  for (auto& r : log.records) {
    while (vi < s.versions.size() && s.versions[vi].iteration < r.iteration) {
      removed += s.versions[vi].stall_s;
      ++vi;
    }
    if (r.wall_time_s) r.wall_time_s = *r.wall_time_s - removed;
  }
  log.source = "live run log";
  // The judge is what the consumers measure: the test subset (the log's test
  // column is the run's table's diagonal), and under drifting traffic each
  // request's (version, traffic iteration) pair of the table.
  const bool has_test = std::any_of(log.records.begin(), log.records.end(),
                                    [](const LogRecord& r) { return r.test_loss.has_value(); });
  if (has_test) sco.truth_metric = predictor::LossMetric::kTestLoss;
  if (s.staleness && internal::DriftChangesTraffic(o)) sco.staleness = *s.staleness;
  VIPER_ASSIGN_OR_RETURN(schedulers::Scenario sc, schedulers::MakeScenario(log, sco));
  if (!sc.truth) return FailedPreconditionError("the live log does not cover N");
  auto so = simulator::SimulatorOptionsFor(sc);
  // A re-published version is charged the older model's loss.
  if (s.republished > 0) so.published = s.published;
  // Decisions taken beside training published their point's model later.
  so.waits = s.remeasure_waits;
  // Its keep copies are not charged again: they paused the producer inside
  // the validation points, and the log's times carry them.
  simulator::Simulator sim(so);
  VIPER_ASSIGN_OR_RETURN(auto r, sim.Run(*sc.truth, s.schedule));
  LiveSimulationComparison c;
  const int reporting = s.consumers - static_cast<int>(s.lost_consumers.size());
  c.predicted_cil_per_consumer = r.cil;
  c.measured_cil_per_consumer = s.cil_per_consumer;
  c.cil_error = s.cil_per_consumer > 0 ? r.cil / s.cil_per_consumer - 1 : 0;
  c.predicted_requests = static_cast<double>(r.requests);
  c.measured_requests_per_consumer = reporting > 0 ? static_cast<double>(s.requests) / reporting : 0;
  c.predicted_update_latency_s = r.mean_update_latency_s;
  c.measured_update_latency_s = s.mean_update_latency_s;
  c.judge = r.judge;
  c.truth_metric = predictor::ToString(sc.truth_metric);
  c.simulator_report = r.BriefReport();
  return c;
}

}  // namespace workflow
}  // namespace viper
