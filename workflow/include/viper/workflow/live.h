// The live workflow (`viper run`): rank 0 of MPI_COMM_WORLD is the producer,
// every other rank a consumer. The producer runs a workload (the real
// Fashion-MNIST trainer, or a replay of a training log with model tensors of
// a chosen size), fits the predictor on the warm-up, plans with a strategy
// (or re-plans online) and publishes at the planned iterations through
// transports::Publisher. Consumers serve requests at a fixed rate from the
// moment the warm-up model (version 0) arrives; each request is charged the
// real loss of the version it was served by (trainer: the served version
// evaluated on kTestImagesPerRequest images of the trainer's TEST subset, disjoint from the
// validation subset the producer plans on, drifted as the producer's stream
// is at the request's time; replay: the logged loss of the served version's
// iteration). At the end the consumers send their request records to the
// producer, which assembles the Summary.
//
// Times in the Summary are seconds since the end of warm-up iteration W on
// the producer (DESIGN.md §1), on clocks aligned by a barrier at start.
// MPI must be initialised with MPI_THREAD_MULTIPLE (transports::MpiSession)
// before Run; MPI types stay inside live.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/core/training_log.h"
#include "viper/schedulers/online.h"
#include "viper/schedulers/problem.h"
#include "viper/schedulers/strategy.h"
#include "viper/transports/publisher.h"
#include "viper/transports/types.h"
#include "viper/workflow/trainer.h"

namespace viper {
namespace workflow {

// Trainer workload: the test images one request is answered on (its loss is
// their mean), consecutive in the consumer's cycle over the test subset. With
// one image a run's 1,500-1,700 requests read the same first third of the
// subset in every run, a fixed sample whose mean the staleness table (the
// whole subset) does not have: rotation runs measured 4-8% above their
// simulation, every run. With four a run covers the subset
// (workflow/README.md, "Sixty-sixth session").
inline constexpr int64_t kTestImagesPerRequest = 4;

class LiveRun {
 public:
  enum class Workload {
    kTrainer,  // the real Fashion-MNIST trainer on the producer
    kReplay,   // a log's iteration times and losses with model tensors of model_bytes
  };
  static const char* ToString(Workload workload);  // "trainer", "replay"
  static StatusOr<Workload> WorkloadFromString(const std::string& name);

  // The trainer a default live run uses: Trainer's defaults with 10 epochs
  // (9,370 iterations over the 60,000 images, about a minute on 2 cores).
  static Trainer::Options DefaultTrainerOptions();

  struct Options {
    // What the producer runs.
    Workload workload = Workload::kTrainer;
    // Transport tier, send mode and notification (poll needs tier pfs).
    transports::Tier tier = transports::Tier::kHost;
    transports::Mode mode = transports::Mode::kAsync;
    transports::Notify notify = transports::Notify::kPush;
    // host tier: how a version reaches several consumers (node, direct, tree).
    transports::Fanout fanout = transports::Fanout::kNode;
    // host tier: shm (consumers on the producer's node copy from shared
    // memory; the others over MPI) or two-sided (all over MPI). one-sided is
    // refused here (its windows need sizing on every consumer).
    transports::HostProtocol host_protocol = transports::HostProtocol::kShm;
    // Schedule strategy (oracle is refused: it needs the future).
    schedulers::StrategyKind strategy = schedulers::StrategyKind::kOptimal;
    // Strategy online, trainer workload: models kept for re-publishing
    // (schedulers::OnlinePlanner::Options::keep_versions; >= 0, 0 = never
    // re-publish). At each validation point the producer re-measures the
    // kept models the planner asks for (OnlinePlanner::KeptVersions) on
    // today's validation sample (each once per traffic state; counted as
    // planning time) and, when the planner decides so, publishes one of them
    // again. Memory: float32 copies, at most 2 x keep_versions + 1 models
    // (the planner's, the last keep_versions validation points' that may
    // become a regime's end, the served one): (2K + 1) x model bytes.
    int keep_versions = schedulers::OnlinePlanner::Options().keep_versions;
    // Strategy online, trainer workload: re-measure the served and kept
    // models on a helper thread beside training instead of pausing it
    // (schedulers::CheckpointCost::remeasure_beside). At a validation
    // point the candidate is copied aside, the helper measures the models
    // not measured on today's traffic before, and training goes on; the
    // decision is taken when the helper is done (at the latest at the next
    // validation point, where the producer waits for it) and publishes the
    // model copied aside. Summary::remeasure_waits says how long each
    // decision waited. The default since the sixty-third session (live,
    // loss per request 10-22% lower on recurring domains, 1% on a
    // rotation; workflow/README.md); false = on the path (planning time).
    bool remeasure_beside = true;
    // With keep_versions > 0: which regimes' ends the producer copies
    // (schedulers::RegimeEnds: where a switch is predicted next, at every
    // validation point, or none: only published models are kept).
    schedulers::RegimeEnds regime_ends = schedulers::OnlinePlanner::Options().regime_ends;
    // Strategy online: the prior over traffic drift its lag price uses
    // (schedulers::OnlinePlanner::Options::drift_prior; [0, 1000], 0 = none).
    double drift_prior = schedulers::OnlinePlanner::Options().drift_prior;
    // Strategy online: the rent-or-buy bound on the re-plan's waits
    // (schedulers::OnlinePlanner::Options::wait_guard; [0, 1000], 0 = off).
    double wait_guard = schedulers::OnlinePlanner::Options().wait_guard;
    // With remeasure_beside: a calm validation point decides before its
    // re-measurements, nothing copied aside
    // (schedulers::OnlinePlanner::Options::calm_decisions).
    bool calm_decisions = schedulers::OnlinePlanner::Options().calm_decisions;
    // With remeasure_beside: a decision waits only for the kept models that
    // can win a switch; the newest published versions' answers follow it
    // (schedulers::OnlinePlanner::Options::partial_waits).
    bool partial_waits = schedulers::OnlinePlanner::Options().partial_waits;
    // Strategy online: keep every decision the producer's planner takes
    // (Summary::decisions; schedulers::OnlinePlanner::Options::record_decisions).
    bool record_decisions = false;
    // The checkpoint cost the first plan uses (sigma and delta, seconds):
    // absent = version 0's as measured (the default). Given, the plan does
    // not depend on how long version 0 took on a loaded machine (tests, or
    // a cost known from an earlier run); the closed loop still re-plans with
    // later versions' measured costs when they move fewer bytes (deltas).
    std::optional<schedulers::CheckpointCost> plan_cost;
    // pfs tier: directory where each version lands as a .safetensors file (required for pfs).
    std::string pfs_dir;
    // pfs tier: a key file only this user can read (transports::Publisher::
    // Options::hmac_key_file): every version file carries an HMAC-SHA256
    // under it and the consumers serve only versions that verify under
    // theirs. Empty = none. Other tiers refuse it: their versions travel
    // over MPI or shared memory inside the job and never sit in a shared
    // directory where another writer could plant one.
    std::string hmac_key_file;
    // pfs tier: write each version after the first as a delta against the
    // previous one when that is smaller (transports::Publisher::Options::
    // pfs_delta; consumers rebuild and verify it). The report's encoding
    // column says what each version was written as.
    bool pfs_delta = false;
    // Delta versions (transports::DeltaMode, Publisher::Options::delta):
    // auto (a consumer holding the last version gets a delta over MPI;
    // shared-memory consumers and pfs get full versions), on (deltas on
    // shm and pfs too; pfs: as pfs_delta), off. host (shm, two-sided) and
    // pfs; the gpu tier refuses on.
    transports::DeltaMode delta = transports::DeltaMode::kAuto;
    // poll: seconds between directory scans on the consumers.
    double poll_period_s = 1.0;
    // Requests per second each consumer serves (fixed rate, first at version 0's arrival).
    double requests_per_s = 200;
    // Warm-up W in iterations; 0 = warmup_fraction of the run's iterations.
    int64_t warmup_iterations = 0;
    // Warm-up as a fraction of the run, in (0, 1), when warmup_iterations is 0.
    double warmup_fraction = 0.2;
    // Trainer workload: the trainer (N = its planned iterations). The
    // consumers' requests cycle over the trainer's test subset (test images
    // [val_samples, val_samples + test_samples), disjoint from the validation
    // subset the producer observes), each consumer from its own offset. With
    // a drift (every kind drifts the traffic) each request is served from the
    // test subset as DriftedSamples has it at the producer's estimated
    // current iteration (Request::traffic_iteration; the traffic follows the
    // producer's clock here, schedulers::TrafficClock::kProducer, and the
    // comparison with the simulation is judged on it): request j gets the
    // kTestImagesPerRequest images from (j x kTestImagesPerRequest + offset)
    // mod |drifted subset| of it, and their mean loss, so over the subset a
    // version's requests average the staleness table's
    // test_loss(version, traffic).
    // The producer does not evaluate the test subset during the run
    // (log_test is ignored: the consumers measure the truth).
    // trainer.staleness_table (and staleness_max_versions): the producer
    // keeps a float32 copy of the model at every validation point and, with
    // staleness_max_versions 0, of every version it publishes
    // (Trainer::KeepCurrentVersion) during the run, and evaluates every pair
    // after training (Trainer's deferred table, staleness_deferred is set
    // here), off the timed window: Summary::staleness, and the log's test
    // columns from its diagonal. Every published version is then a row of
    // its own, never interpolated between validation points.
    Trainer::Options trainer = DefaultTrainerOptions();
    // Replay workload: the log (CSV/JSON lines, .gz ok; needs wall times).
    std::string log_path;
    // Replay: bytes of model tensors published per version (host memory).
    uint64_t model_bytes = 64ull << 20;
    // Replay: use only iterations <= this (0 = the whole log).
    int64_t replay_max_iterations = 0;
    // Replay: multiplies the logged iteration times (0.5 = twice as fast).
    double replay_time_scale = 1.0;
    // Consumers: seconds without a message from the producer before it is
    // declared lost (they keep serving the last good version until then,
    // then stop and Run fails). Must exceed the warm-up and the longest gap
    // between checkpoints.
    double producer_timeout_s = 120;
    // Producer: seconds a consumer may not answer before it is dropped as lost.
    double consumer_timeout_s = 30;
    // Polled between iterations and requests; true = stop cleanly (Ctrl-C).
    std::function<bool()> should_stop;
    // Print progress lines to stderr on the producer.
    bool verbose = true;

    bool IsValid(std::string* error) const;
  };

  // One published version, as the producer and the consumers saw it.
  struct VersionStats {
    uint64_t version = 0;
    int64_t iteration = 0;
    // The model it carries: `iteration`'s, or an older kept model's (a re-publish).
    int64_t model_iteration = 0;
    double checkpoint_s = 0;      // T_k: Publish called (version 0: 0)
    double stall_s = 0;           // Publish blocked training
    double snapshot_s = 0;        // copy into the staging buffer
    double transfer_s = 0;        // bytes moving to all consumers / the file
    double notify_s = 0;          // push messages after a pfs write
    double load_s = 0;            // consumer receive + verify, mean over consumers
    double discovery_s = 0;       // update latency - snapshot - transfer - load (>= 0), mean
    double update_latency_s = 0;  // servable on a consumer - T_k, mean over consumers that got it
    double max_update_latency_s = 0;
    int delivered_to = 0;     // consumers that swapped it in
    bool superseded = false;  // async: replaced before being sent
    int64_t requests = 0;     // requests it served (all consumers, in the window)
    double loss_sum = 0;      // their summed loss
    uint64_t bytes = 0;       // serialized size
    // What the tier wrote (pfs: the file's bytes; a delta is smaller than
    // `bytes`) and how ("full", "delta of version N"); 0 / empty where the
    // tier does not say.
    uint64_t written_bytes = 0;
    std::string encoding;
  };

  struct Request {
    int consumer = 0;        // rank
    double time_s = 0;       // served at
    uint64_t version = 0;    // served by
    // That version's iteration (its checkpoint's; a re-published version
    // carries an older model: VersionStats::model_iteration).
    int64_t iteration = 0;
    double loss = 0;         // real loss charged
    double staleness_s = 0;  // time_s - checkpoint_s of the version
    // Trainer with a drift: the producer iteration whose drift state the
    // request's image was given, as the consumer estimated it
    // (the producer announces its iteration and time every 10 ms after
    // warm-up; the consumer adds the time since the last announcement over
    // tau between the last two). -1 when the traffic does not drift.
    int64_t traffic_iteration = -1;
    // Producer's iterations done at time_s (from its own timeline; -1 as above).
    int64_t true_iteration = -1;
  };

  struct Summary {
    std::string termination;  // "completed", "interrupted", "failed"
    std::string message;      // why, when not completed; lost consumers
    std::string workload, tier, mode, notify, fanout, host_protocol, strategy;
    int consumers = 0;                // ranks started as consumers
    std::vector<int> lost_consumers;  // dropped mid-run (no records from them)
    // Some rank was lost (producer: any consumer; consumers: as the producer
    // told them): MPI_Finalize would wait for it, so the caller should exit
    // without finalising.
    bool peers_lost = false;
    int64_t warmup_iterations = 0;  // W
    int64_t total_iterations = 0;   // N planned
    int64_t iterations_done = 0;
    double seconds_per_iteration = 0;     // measured over the warm-up (planning's tau)
    double planned_stall_s = 0;           // sigma used by the planner (from version 0)
    double planned_delay_s = 0;           // delta used by the planner (from version 0)
    std::string metric;                   // "val_loss" or "train_loss": the planner's curve
    std::string online_metric;            // what online observes (Scenario::online_metric); "" for others
    std::string plan_report;              // the strategy's BriefReport (online: last re-plan)
    double planning_s = 0;                // seconds spent fitting/planning after warm-up (on the producer)
    schedulers::Schedule schedule;        // iterations actually published (after W)
    // The model each checkpoint published, parallel to `schedule`: its own
    // iteration, or an older kept model's (a re-publish: `republished` of them).
    std::vector<int64_t> published;
    int64_t republished = 0;
    // Options::record_decisions: the planner's decision at every measurement
    // after the warm-up (schedulers::DecisionsCsv writes them).
    std::vector<schedulers::OnlinePlanner::Decision> decisions;
    // Options::keep_versions where the run re-published (online on the
    // validation loss, trainer workload), else 0.
    int keep_versions = 0;
    // Re-publishing: kept models re-measured (evaluated; answered from an
    // earlier measurement on equal traffic), the most copies held at once
    // (the served one included) and their bytes.
    int64_t kept_evaluations = 0;
    int64_t kept_reused = 0;
    // Options::remeasure_beside: each decision that waited for the helper,
    // (its validation point's iteration, seconds from the helper's start to
    // the decision); the simulation of the run delays a checkpoint there by
    // as much (simulator::Simulator::Options::waits).
    bool remeasure_beside = false;
    std::vector<std::pair<int64_t, double>> remeasure_waits;
    // Options::calm_decisions: the validation points decided before the
    // helper's re-measurements on them were in (none waited).
    int64_t calm_points = 0;
    // Options::partial_waits: the decisions after which the helper measured
    // the kept models they did not wait for (their answers followed).
    int64_t followed_points = 0;
    int64_t kept_peak = 0;
    uint64_t kept_peak_bytes = 0;
    // Where re-publishing: Options::regime_ends, and the validation points
    // where the producer copied its model unpublished for a possible
    // re-publish (OnlinePlanner::copies(): a regime's end).
    std::string regime_ends;
    std::vector<int64_t> copies;
    double training_end_s = 0;            // end of iteration N (window end)
    double total_stall_s = 0;             // sum of Publish stalls after warm-up
    double no_checkpoint_training_s = 0;  // training_end_s - total_stall_s - planning_s
    double slowdown_fraction = 0;         // total_stall_s / no_checkpoint_training_s
    double cil = 0;                       // sum of request losses, all consumers
    double cil_per_consumer = 0;          // cil / consumers that reported
    int64_t requests = 0;
    std::optional<double> mean_staleness_s;
    // Drifting traffic: mean (estimated - true) and mean |estimated - true|
    // producer iteration over the in-window requests.
    std::optional<double> traffic_iteration_bias, traffic_iteration_mae;
    std::optional<double> mean_update_latency_s;  // versions >= 1
    bool every_version_delivered = false;         // every sent version reached every live consumer
    std::vector<VersionStats> versions;
    std::vector<Request> request_log;  // in-window requests, by consumer then time
    TrainingLog log;                   // the producer's iterations (trainer: real losses)
    // Options::trainer.staleness_table: the run's own table (source "viper
    // run"), evaluated after training from the kept versions; the log's
    // test_loss/test_accuracy are its diagonal. What it cost: seconds copying
    // versions during the run (on the producer's training path), seconds
    // evaluating after it, the copies' bytes at most, and the versions kept.
    std::optional<StalenessTable> staleness;
    double staleness_keep_s = 0;
    double staleness_evaluate_s = 0;
    uint64_t staleness_bytes_peak = 0;
    int64_t staleness_versions_kept = 0;

    // "optimal over host/async/push: 12 versions, CIL 512.3 (256.1 per consumer) ..."
    std::string BriefReport() const;
    // consumer,time_s,version,iteration,loss,staleness_s
    std::string RequestCsv() const;
    // Chrome trace-event JSON: producer, transfer, notification, consumer tracks.
    std::string ChromeTrace() const;
  };

  // Runs the role of this rank; collective over MPI_COMM_WORLD (>= 2 ranks).
  // On the producer the Summary is complete; on consumers it holds their own
  // requests only. Fails on bad options, a failed workload, or (consumers) a
  // lost producer.
  static StatusOr<Summary> Run(const Options& options);
};

// The simulator run on the same log prefix, schedule and measured costs.
struct LiveSimulationComparison {
  double predicted_cil_per_consumer = 0;
  double measured_cil_per_consumer = 0;
  double cil_error = 0;  // predicted / measured - 1
  double predicted_requests = 0;
  double measured_requests_per_consumer = 0;
  std::optional<double> predicted_update_latency_s, measured_update_latency_s;
  // What the simulator charged each request: "staleness table" (the run's
  // table's test_loss at the request's version and traffic iteration) or
  // "diagonal" (the version's own loss on `truth_metric`).
  std::string judge;
  std::string truth_metric;  // "test_loss" (the consumers' subset), else the planning metric
  std::string simulator_report;
  std::string BriefReport() const;
};

// Needs the producer's Summary. The simulator judges as the consumers
// measure: with a drifting traffic and the run's staleness table, each
// request is charged the table's test_loss(version, traffic iteration);
// otherwise the version's test loss (the log's test column, the table's
// diagonal) when the run has it, else the planning metric. tau: the log's
// per-iteration wall times; the tier: the measured mean stall and update
// latency.
StatusOr<LiveSimulationComparison> CompareWithSimulation(const LiveRun::Summary& summary,
                                                         const LiveRun::Options& options);

}  // namespace workflow
}  // namespace viper
