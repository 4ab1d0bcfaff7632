// A discrete-event simulation of one producer, one transport tier and one
// consumer: producer iterations and checkpoint stalls, snapshot, transfer
// (async sends coalesce: a newer snapshot supersedes one not yet sent),
// discovery by push or polling, consumer load and atomic swap, and inference
// requests charged the TRUE loss of the version serving them: with a
// staleness table (schedulers/staleness.h) the loss of that version on the
// traffic as it is at the request's time, L(s_k, t), where t is the last
// iteration the producer has finished by then; without one the diagonal
// l(s_k), the loss the version had on the traffic of its own iteration.
//
// Time origin and notation follow schedulers/problem.h: t = 0 is the end of
// warm-up iteration W, when the warm-up model (version 0) starts serving.
// No I/O, no MPI, no GPU; each Simulator owns its event queue and clock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/schedulers/cil_model.h"
#include "viper/schedulers/problem.h"
#include "viper/schedulers/staleness.h"

namespace viper {
namespace simulator {

// What happened to one version (0 = the warm-up model).
struct VersionRecord {
  int64_t version = 0;
  int64_t iteration = 0;        // s_k (W for version 0)
  double checkpoint_s = 0.0;    // T_k: the producer starts the checkpoint
  double stall_end_s = 0.0;     // producer resumes training
  double snapshot_end_s = 0.0;  // snapshot taken (staging buffer filled)
  std::optional<double> transfer_start_s, transfer_end_s, discovered_s, load_start_s;
  std::optional<double> servable_s;  // swapped in on the consumer (absent: never)
  bool superseded = false;           // dropped for a newer version before being served
  int64_t requests = 0;              // requests it served
  // The iteration of the model it serves: `iteration`, or for a version that
  // re-publishes an older kept model (Options::published), that model's.
  int64_t model_iteration = 0;
  double loss = 0.0;                 // true loss of the version (before drift)
  // servable_s - checkpoint_s, when servable.
  std::optional<double> UpdateLatency() const;
};

struct RequestRecord {
  double time_s = 0.0;
  int64_t version = 0;
  int64_t traffic_iteration = 0;  // the producer's last finished iteration at time_s (the traffic's state)
  double loss = 0.0;  // charged loss (true loss + drift)
};

// The outcome of one run.
struct SimulationResult {
  double cil = 0.0;                 // sum of the charged losses of all requests (+inf when a diverged version served one)
  // Requests served by a diverged model (its loss +inf: a NaN/inf loss read
  // with --non-finite diverged); any makes cil +inf.
  int64_t diverged_requests = 0;
  int64_t requests = 0;
  int64_t checkpoints = 0;          // m
  double slowdown_s = 0.0;          // total producer stall (checkpoints, keep copies, pauses)
  int64_t keep_copies = 0;          // models copied without being published (Options::kept_at)
  double keep_copy_s = 0.0;         // the producer stall of each
  std::vector<double> keep_copy_start_s;  // when each began (the Chrome trace draws them)
  int64_t pauses = 0;                     // the producer's other pauses (Options::pauses)
  double pause_s = 0.0;                   // their total, seconds
  std::vector<std::pair<double, double>> pause_spans_s;  // each one's start and end (the Chrome trace)
  double wait_s = 0.0;  // what the checkpoints waited for re-measurements beside training (Options::waits)
  double training_end_s = 0.0;      // producer finishes iteration N
  double window_end_s = 0.0;
  std::optional<double> mean_staleness_s, p99_staleness_s;  // request time - T_k of its version
  std::optional<double> mean_update_latency_s;              // over versions that became servable
  int64_t superseded_versions = 0;
  int64_t unserved_versions = 0;    // servable only after the window ended, or never
  int64_t events = 0;               // events processed (requests included)
  // What each request was charged: "staleness table" (L(s_k, t)) or
  // "diagonal" (l(s_k): a stale version is charged its own-time loss).
  std::string judge = "diagonal";
  std::vector<VersionRecord> versions;
  std::vector<RequestRecord> request_log;  // only with Options::record_requests

  // "cil 3012.4 over 5000 requests, 12 checkpoints, slowdown 1.20 s, ..."
  std::string BriefReport() const;
  // Chrome trace-event JSON (open in Perfetto or chrome://tracing): producer,
  // transfer, notification and consumer tracks.
  std::string ChromeTrace() const;
  // Per-request CSV: time_s,version,iteration,traffic_iteration,loss (needs
  // record_requests); `iteration` is the served model's (model_iteration).
  std::string RequestCsv() const;
};

class Simulator {
 public:
  struct Options {
    // Producer, request and drift model: W, N, tau, requests, drift. The
    // checkpoint cost inside `problem` is ignored: `tier` gives the phases.
    schedulers::Problem problem;
    // The transport tier: snapshot, transfer, load (latency + bytes/bandwidth),
    // sync/async, push/poll.
    schedulers::TierCost tier;
    // Seconds of each iteration W+1..N (size N - W); empty = the constant
    // problem.seconds_per_iteration.
    std::vector<double> iteration_times_s;
    // Polling: the poller checks at poll_phase_s + j * poll_period_s (j >= 0);
    // in [0, poll_period_s).
    double poll_phase_s = 0.0;
    // Push: seconds from "transfer complete" to the consumer knowing (>= 0).
    double push_latency_s = 0.0;
    // Keep every request in SimulationResult::request_log (for the CSV).
    bool record_requests = false;
    // The judge's staleness surface (test_loss of a staleness table): each
    // request is charged L(its version's iteration, the traffic iteration at
    // its time). Null = the diagonal (the true curve). Must cover [W, N].
    std::shared_ptr<const schedulers::StalenessSurface> staleness;
    // The model each checkpoint publishes, one per schedule entry: its own
    // iteration, or an older one in [W, s_k) the producer kept (a re-publish:
    // it costs the same stall and delivery, and is charged that model's loss).
    // Empty = every checkpoint publishes the model of its own iteration.
    std::vector<int64_t> published;
    // Iterations (increasing, in (W, N]) at whose end the producer copies a
    // model it keeps without publishing it (schedulers::Plan::kept), each
    // blocking it model_size_bytes / tier.keep_copy_bandwidth_bytes_per_s;
    // a checkpoint at the same iteration starts after the copy.
    std::vector<int64_t> kept_at;
    // Other pauses of the producer, as (iteration, seconds) with increasing
    // iterations in (W, N] (schedulers::Plan::pauses: re-measuring models it
    // does not train), each at the end of its iteration after a keep copy
    // there and before a checkpoint there.
    std::vector<std::pair<int64_t, double>> pauses;
    // Decisions that waited for models re-measured beside training, as
    // (iteration, seconds) with increasing iterations in (W, N]
    // (schedulers::Plan::waits): a checkpoint at that iteration starts that
    // much later, publishing its iteration's model; the producer trains on.
    std::vector<std::pair<int64_t, double>> waits;

    bool IsValid(std::string* error) const;
  };

  explicit Simulator(Options options);

  // Simulates `schedule` (sorted, in (W, N]) with requests charged
  // `true_curve` (which must cover [W, N]).
  StatusOr<SimulationResult> Run(const schedulers::LossCurve& true_curve, const schedulers::Schedule& schedule);

 private:
  Options options_;
};

}  // namespace simulator
}  // namespace viper
