// viper run: the live workflow under mpirun. Rank 0 trains (or replays a
// log) and publishes at the planned iterations; ranks 1.. serve requests
// with the version they hold and record its real loss.
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli_util.h"
#include "commands.h"
#include "drift_options.h"
#include "finetune_options.h"
#include "run_report.h"
#include "viper/config.h"
#include "viper/core/units.h"
#include "viper/transports/mpi_session.h"
#include "viper/transports/private_dir.h"
#if VIPER_HAVE_MPI
#include "viper/workflow/live.h"
#include "viper/workflow/trainer_log.h"
#endif

namespace viper {
namespace cli {
#if !VIPER_HAVE_MPI
int RunRun(const std::vector<std::string>&) {
  std::cerr
      << "viper run: this build has no MPI (the live workflow runs under mpirun); rebuild with Open MPI\n";
  return kExitFailure;
}
#else
namespace {

// Set by SIGINT/SIGTERM; a signal handler can only reach a flag of static
// storage, so this is the one file-level variable of the command.
volatile std::sig_atomic_t g_stop_requested = 0;
extern "C" void OnStopSignal(int) { g_stop_requested = 1; }

}  // namespace

int RunRun(const std::vector<std::string>& args) {
  workflow::LiveRun::Options o;
  // Every default comes from LiveRun::Options (the strings are its enums').
  std::string workload = workflow::LiveRun::ToString(o.workload), transport = transports::ToString(o.tier),
              notify = transports::ToString(o.notify), mode = transports::ToString(o.mode),
              strategy = schedulers::ToString(o.strategy);
  std::string fanout = transports::ToString(o.fanout), host_protocol = transports::ToString(o.host_protocol);
  std::string delta = transports::ToString(o.delta);
  std::string keep_regime_ends = schedulers::ToString(o.regime_ends);
  std::string remeasure = "beside";
  std::string calm_decisions = o.calm_decisions ? "on" : "off";
  std::string partial_waits = o.partial_waits ? "on" : "off";
  std::string model_bytes = std::to_string(o.model_bytes), json_path, csv_path, trace_path, decisions_path;
  Warmup warmup = Warmup::Fraction(o.warmup_fraction);
  std::string hidden, freeze;
  std::string drift = "none", swap_classes = "0,6", prior_classes, staleness_out;
  for (int c : o.trainer.drift_prior_classes) prior_classes += (prior_classes.empty() ? "" : ",") + std::to_string(c);
  bool compare = false, quiet = false;
  po::options_description desc("Options");
  desc.add_options()("help,h", "show this help")(
      "workload", po::value(&workload)->default_value(workload),
      "trainer (real Fashion-MNIST MLP) | replay (a log's times and losses)")(
      "transport", po::value(&transport)->default_value(transport),
      "host (MPI) | pfs (files in --pfs-dir) | gpu (device memory: CUDA IPC on one node, else pinned host "
      "chunks over MPI; replay tensors live on GPU 0, trainer tensors are copied to it)")(
      "notify", po::value(&notify)->default_value(notify),
      "push (MPI message) | poll (consumers scan --pfs-dir; needs --transport pfs)")(
      "fanout", po::value(&fanout)->default_value(fanout),
      "host tier, several consumers: node (one send per other node, relayed there; direct on one node) | "
      "direct (the producer sends to each) | tree (consumers relay along a binary tree); with --host-protocol "
      "shm it applies to the consumers served over MPI")(
      "host-protocol", po::value(&host_protocol)->default_value(host_protocol),
      "host tier: shm (consumers on the producer's node copy each version out of shared memory, the others "
      "get it over MPI) | two-sided (every consumer over MPI)")(
      "mode", po::value(&mode)->default_value(mode),
      "sync (Publish waits for delivery) | async (snapshot, background send)")(
      "strategy", po::value(&strategy)->default_value(strategy),
      "epoch | viper-fixed | viper-greedy | fixed | optimal | online")(
      "drift-prior", po::value(&o.drift_prior)->default_value(o.drift_prior),
      "--strategy online: how much traffic drift to expect before any is measured, as the factor by which it "
      "raises a stale model's loss over the serving window, in [0, 1000] (1 = doubles it); each checkpoint's "
      "stall is priced as that much lag, so checkpoints whose gain does not pay for it are skipped, until a "
      "drift is measured on the served version's re-measurements; 0 = price only measured decay (viper plan "
      "--help)")(
      "wait-guard", po::value(&o.wait_guard)->default_value(o.wait_guard),
      "--strategy online: publish the candidate where the re-plan would wait once the served version's "
      "re-measured loss over the candidate's (less the gate's margin), summed over the validation gaps since "
      "the last publish in loss x seconds, passes this many stalls at the candidate's loss, in [0, 1000]; "
      "not on a ramp nor while an anticipated return holds; 0 = off (viper plan --help)")(
      "keep-versions", po::value(&o.keep_versions)->default_value(o.keep_versions),
      "--strategy online, --workload trainer: models kept for re-publishing, in [0, 1000] (0 = never "
      "re-publish): at each validation point the producer re-measures the kept models the planner asks for "
      "(the last ones it published, the last of each regime before a detected change) on today's validation "
      "sample, each once per traffic state, as planning time, and publishes one again when it beats both the "
      "candidate and the served version by the gate's margin (recurring domains). Memory: float32 copies of "
      "at most 2K + 1 models ((2K + 1) x the model's bytes: 0.8 MB each for --hidden 256)")(
      "remeasure", po::value(&remeasure)->default_value(remeasure),
      "--strategy online, --workload trainer: where the served and kept models are re-measured on today's "
      "validation sample. beside (the default) = on a helper thread while training goes on: the candidate is "
      "copied aside, the decision waits for the helper (at the latest until the next validation point; only as "
      "many new evaluations as fit in the last validation gap) and publishes that copy; pause = on the training "
      "path (planning time), the served version only where the gate needs it (viper simulate --help: "
      "--remeasure)")(
      "partial-waits", po::value(&partial_waits)->default_value(partial_waits),
      "--strategy online, --remeasure beside, --keep-versions > 0: on = a decision that waits for the helper "
      "waits only for the models that can win a switch (the served version, the predicted return's, each ended "
      "regime's, the warm-up's); the newest published versions are measured after it, their answers reach the "
      "planner before the next point (the default); off = it waits for every kept model (viper plan --help)")(
      "calm-decisions", po::value(&calm_decisions)->default_value(calm_decisions),
      "--strategy online, --remeasure beside: on = a calm validation point (its loss within twice the "
      "gate's margin of the point before, no switch seen yet, no return anticipated) decides at once, before "
      "the helper's re-measurements are in: nothing is copied aside, the answers reach the planner once the "
      "helper is done (the default); off = every point with fresh re-measurements waits for them (viper plan "
      "--help)")(
      "keep-regime-ends", po::value(&keep_regime_ends)->default_value(keep_regime_ends),
      "--strategy online with --keep-versions > 0: which models the producer copies, unpublished, so that the "
      "last of a regime before a detected change may be published again: predicted = at the validation point "
      "before a predicted switch (a recurring domain whose cycle is known), every = at every validation point "
      "(up to K more copies in memory), off = none (only the models it published are kept); each copy is a "
      "pause of the producer that the log's times carry")(
      "pfs-dir", po::value(&o.pfs_dir),
      "pfs tier: directory shared by all ranks (created 0700 when missing; refused when another user owns it "
      "or group/others may write into it; default: a private directory made for the run, removed at its end)")(
      "hmac-key-file", po::value(&o.hmac_key_file),
      "pfs tier: a key file only you can read (a regular file of 16 to 4096 bytes, yours, mode 0600 or "
      "stricter): each version file carries an HMAC-SHA256 under it and consumers serve only versions that "
      "verify under their key (one SHA-256 pass over each version). A consumer given another key serves "
      "nothing and the run fails")(
      "delta", po::value(&delta)->default_value(delta),
      "auto | on | off. Delta versions: only what changed since the version a consumer "
      "holds. host (shm, two-sided): the producer keeps the last version and sends a consumer that holds it "
      "a delta instead of the image (auto: over MPI only, when smaller; on: shared-memory consumers too); the "
      "consumer rebuilds it in a copy of its version and verifies the checksum before serving it; others get "
      "the full version. pfs: on writes each version after the first as a delta file when smaller "
      "(model-v<N>.delta; a full version every 9th; consumers rebuild from the version they hold or the "
      "chain); auto and off write full files. The producer keeps a copy of the previous version (one model "
      "of host memory). gpu: off or auto only")(
      "poll-period-s", po::value(&o.poll_period_s)->default_value(o.poll_period_s),
      "poll: seconds between directory scans, in (0, 86400]")("requests-per-s",
                                               po::value(&o.requests_per_s)->default_value(o.requests_per_s),
                                               "requests per second each consumer serves (fixed rate), in (0, 100000]")(
      "warmup", po::value(&warmup)->default_value(warmup, warmup.text),
      "warm-up, N|P%: ends at iteration N, or after P% of the run's iterations; tau for planning is the MEAN "
      "iteration time over the warm-up")(
      "epochs", po::value(&o.trainer.epochs)->default_value(o.trainer.epochs),
      "trainer: epochs over the training set")(
      "train-samples", po::value(&o.trainer.train_samples)->default_value(o.trainer.train_samples),
      "trainer: first N training images (0 = all 60,000)")(
      "max-iterations", po::value(&o.trainer.max_iterations)->default_value(o.trainer.max_iterations),
      "trainer: stop after N iterations (0 = no cap)")(
      "hidden", po::value(&hidden), "trainer: hidden widths, comma-separated (default 256)")(
      "init-model", po::value(&o.trainer.init_model_path), (std::string("trainer: ") + kInitModelHelp).c_str())(
      "freeze", po::value(&freeze), (std::string("trainer: ") + kFreezeHelp).c_str())(
      "batch-size", po::value(&o.trainer.batch_size)->default_value(o.trainer.batch_size),
      "trainer: samples per mini-batch")(
      "learning-rate", RealOption(&o.trainer.learning_rate),
      "trainer: peak learning rate")(
      "val-every", po::value(&o.trainer.val_every_iterations)->default_value(o.trainer.val_every_iterations),
      "trainer: validate every N iterations (the planner's curve)")(
      "val-samples", po::value(&o.trainer.val_samples)->default_value(o.trainer.val_samples),
      "trainer: validation subset the producer observes (images, the first of the Fashion-MNIST test split)")(
      "test-samples", po::value(&o.trainer.test_samples)->default_value(o.trainer.test_samples),
      "trainer: test subset the consumers' requests cycle over, four images a request (images, the next ones "
      "after the validation subset, disjoint from it; > 0, val + test <= 10000)")(
      "drift", po::value(&drift)->default_value(drift),
      "trainer; every kind drifts training and the traffic (the validation subset and the consumers' requests) "
      "alike: none | class-incremental (classes 0..K-1 first, then all 10; before the drift the traffic holds "
      "only classes 0..K-1) | label-swap (two labels exchanged from --drift-at-iteration on; back and forth "
      "with --drift-swap-period) | rotation (inputs rotated by an angle growing from 0 to "
      "--drift-rotation-degrees over --drift-duration iterations) | "
      "recurring (inputs rotated by --drift-rotation-degrees during alternate periods of --drift-period "
      "iterations: rotated, upright, rotated, ...; --drift-domains D > 2 rotates by 1, 2, ..., D-1 times it in "
      "turn, then upright) | prior-shift (the class prior moves from the data's own to "
      "one giving --drift-prior-mass to --drift-prior-classes over --drift-duration iterations; the traffic is "
      "resampled to it)")(
      "drift-at-iteration", po::value(&o.trainer.drift_at_iteration)->default_value(0),
      "trainer: first drifted iteration (iterations, >= 2 and <= the run's last; required with --drift)")(
      "drift-initial-classes", po::value(&o.trainer.drift_initial_classes)->default_value(o.trainer.drift_initial_classes),
      "class-incremental: classes seen before the drift (count, 1..9)")(
      "drift-swap-classes", po::value(&swap_classes)->default_value(swap_classes),
      "label-swap: the two classes whose labels are exchanged, A,B (0..9, distinct; default T-shirt/top and "
      "Shirt)")(
      "drift-swap-period",
      po::value(&o.trainer.drift_swap_period_iterations)
          ->default_value(o.trainer.drift_swap_period_iterations),
      "label-swap: undo and redo the swap every this many iterations from --drift-at-iteration (swapped, "
      "original, swapped, ...: several swaps whose labels come back); 0 = swapped once, for good")(
      "drift-rotation-degrees",
      po::value(&o.trainer.drift_rotation_degrees)->default_value(o.trainer.drift_rotation_degrees),
      "rotation: final angle; recurring: the angle of the rotated periods (degrees counter-clockwise, "
      "|angle| <= 360)")(
      "drift-duration",
      po::value(&o.trainer.drift_duration_iterations)->default_value(o.trainer.drift_duration_iterations),
      "rotation: iterations from --drift-at-iteration until the final angle; prior-shift: iterations over "
      "which the prior moves to its target (0 = at once)")(
      "drift-period",
      po::value(&o.trainer.drift_period_iterations)->default_value(o.trainer.drift_period_iterations),
      "recurring: length of each rotated or upright period, in iterations (>= 1)")(
      "drift-domains", po::value(&o.trainer.drift_domains)->default_value(o.trainer.drift_domains),
      "recurring: how many domains take turns, 2-8 (the upright one and rotations by 1, 2, ... times "
      "--drift-rotation-degrees)")(
      "drift-prior-classes", po::value(&prior_classes)->default_value(prior_classes),
      "prior-shift: the classes that gain weight, comma-separated (1 to 9 distinct classes in 0..9)")(
      "drift-prior-mass",
      RealOption(&o.trainer.drift_prior_mass),
      "prior-shift: the share of the target prior --drift-prior-classes hold together, in (0, 1]")(
      "staleness-table", po::value(&staleness_out),
      "trainer: write the run's staleness table (CSV version_iteration,traffic_iteration,val_loss,val_accuracy,"
      "test_loss,test_accuracy; gzip when it ends in .gz; rank 0). During the run the producer only keeps a "
      "float32 copy of the model at every validation point and (unbounded table) at every version it publishes "
      "(a memcpy of 4 bytes per parameter: 814,120 bytes for --hidden 256); after training, outside the timed "
      "window, it evaluates every kept version v on every later point t's drifted validation and test subsets "
      "(a published version also on its own), one row per (v, t). The diagonal is the run's val_loss and "
      "test_loss; --compare-simulation then judges with its test_loss")(
      "staleness-max-versions",
      po::value(&o.trainer.staleness_max_versions)->default_value(o.trainer.staleness_max_versions),
      "bound on the versions the staleness table keeps (0 = all; else >= 2), as viper train: over it the kept "
      "versions are thinned evenly, so memory is at most K x the model's bytes; versions thinned away during "
      "the run have no rows (the evaluation comes after it)")(
      "seed", po::value(&o.trainer.seed)->default_value(o.trainer.seed),
      "trainer: seed of weights and shuffling")(
      "log", po::value(&o.log_path),
      "replay: training log to replay (CSV/JSON lines, .gz ok, needs wall times)")(
      "model-bytes", po::value(&model_bytes)->default_value(model_bytes, model_bytes + " (" + FormatBytes(static_cast<double>(o.model_bytes)) + ")"),
      "replay: model size per version, e.g. 600M, 1.7G (host memory; at most 1/8 of this machine's memory: "
      "every rank holds copies)")(
      "replay-max-iterations", po::value(&o.replay_max_iterations)->default_value(o.replay_max_iterations),
      "replay: only iterations <= N (0 = all)")(
      "replay-time-scale", po::value(&o.replay_time_scale)->default_value(o.replay_time_scale),
      "replay: multiplies logged iteration times, in (0, 1000]")(
      "producer-timeout-s", po::value(&o.producer_timeout_s)->default_value(o.producer_timeout_s),
      "consumers: seconds of producer silence before giving up (exit 1), in (0, 86400]")(
      "consumer-timeout-s", po::value(&o.consumer_timeout_s)->default_value(o.consumer_timeout_s),
      "producer: seconds before an unresponsive consumer is dropped as lost (exit 3), in (0, 86400]")(
      "json", po::value(&json_path), "write the result as JSON to PATH (rank 0; '-' = stdout only JSON, the "
      "table goes to stderr); schema viper.run/1")(
      "requests-csv", po::value(&csv_path),
      "write every in-window request to PATH (rank 0): consumer, time_s (since the warm-up's end), version, "
      "iteration, loss, staleness_s, and with a traffic drift traffic_iteration (the producer iteration the "
      "consumer drifted the image to, its estimate) and true_iteration (the producer's iterations done then; "
      "both -1 without drift)")(
      "decisions-csv", po::value(&decisions_path),
      "--strategy online: write the producer's planner's decision at every validation point after the warm-up "
      "to PATH (rank 0): what it saw and what it chose, the columns of `viper simulate --decisions-csv`")(
      "trace", po::value(&trace_path),
      "write a Chrome trace (producer, transfer, notification, consumers) to PATH")(
      "compare-simulation", po::bool_switch(&compare),
      "simulate the same log, schedule and measured costs; print predicted vs measured. The simulator judges "
      "as the consumers measure: on the test subset (the producer keeps the versions and evaluates them after "
      "the run, as for --staleness-table), with drifting traffic on the run's staleness table (test_loss of "
      "each request's version and traffic iteration)")(
      "quiet", po::bool_switch(&quiet), "no progress lines on stderr");
  po::variables_map vm;
  const int parsed = ParseOrHelp(
      args, desc, &vm,
      "viper run [--workload trainer|replay] [--transport host|pfs] [options]   (under mpirun -np 2 or more)",
      "Runs the live workflow: rank 0 trains (or replays a log), fits the predictor on the warm-up, plans "
      "with\n"
      "--strategy and publishes at the planned iterations; ranks 1.. serve requests at --requests-per-s with "
      "the\n"
      "version they hold, charging each the real loss of that version (trainer: its mean loss on four\n"
      "consecutive images of the test subset, cycling, disjoint from the validation subset the planner sees;\n"
      "with --drift the subset is drifted as at the producer's current iteration, estimated by the consumer).\n"
      "Times are seconds since the end of warm-up.\n"
      "Exit codes: 0 ok; 1 failure (a lost producer, bad input); 2 bad usage (an option value: the message names\n"
      "it); 3 the run finished but lost consumers (Open MPI's orte_enable_recovery; the 'lost consumer(s)' line\n"
      "names them). Exit 3 is rank 0's status: Open MPI 4.1's mpirun returns 0 under orte_enable_recovery\n"
      "whatever its ranks return, so there read the line on stderr or the JSON's lost_consumers.");
  if (parsed == -1) return kExitOk;
  if (parsed != 0) return parsed;
  auto usage = [](const std::string& m) { return UsageError("run", m); };
  o.warmup_iterations = warmup.iterations;
  if (warmup.fraction > 0) o.warmup_fraction = warmup.fraction;
  for (const Status& st : {CheckReal("--poll-period-s", o.poll_period_s, 0, 86400, true),
                           CheckReal("--requests-per-s", o.requests_per_s, 0, 1e5, true),
                           CheckReal("--replay-time-scale", o.replay_time_scale, 0, 1000, true),
                           CheckReal("--producer-timeout-s", o.producer_timeout_s, 0, 86400, true),
                           CheckReal("--consumer-timeout-s", o.consumer_timeout_s, 0, 86400, true),
                           CheckInteger("--replay-max-iterations", o.replay_max_iterations, 0, kMaxIterations,
                                        "0 = all")}) {
    if (!st.ok()) return usage(st.message());
  }
  auto wl = workflow::LiveRun::WorkloadFromString(workload);
  if (!wl.ok()) return usage("--workload: " + wl.status().message());
  o.workload = *wl;
  auto tier = transports::TierFromString(transport);
  if (!tier) return usage("--transport: unknown tier '" + transport + "' (expected host, pfs or gpu)");
  o.tier = *tier;
  auto nt = transports::NotifyFromString(notify);
  if (!nt) return usage("--notify: expected push or poll, got '" + notify + "'");
  o.notify = *nt;
  auto fo = transports::FanoutFromString(fanout);
  if (!fo) return usage("--fanout: expected node, direct or tree, got '" + fanout + "'");
  o.fanout = *fo;
  auto dm = transports::DeltaModeFromString(delta);
  if (!dm) return usage("--delta: expected auto, on or off, got '" + delta + "'");
  o.delta = *dm;
  if (remeasure != "pause" && remeasure != "beside") {
    return usage("--remeasure: expected pause or beside, got '" + remeasure + "'");
  }
  o.remeasure_beside = remeasure == "beside";
  if (calm_decisions != "on" && calm_decisions != "off") {
    return usage("--calm-decisions: expected on or off, got '" + calm_decisions + "'");
  }
  o.calm_decisions = calm_decisions == "on";
  if (partial_waits != "on" && partial_waits != "off") {
    return usage("--partial-waits: expected on or off, got '" + partial_waits + "'");
  }
  o.partial_waits = partial_waits == "on";
  if (!schedulers::RegimeEndsFromString(keep_regime_ends, &o.regime_ends)) {
    return usage("--keep-regime-ends: expected off, predicted or every, got '" + keep_regime_ends + "'");
  }
  auto hp = transports::HostProtocolFromString(host_protocol);
  if (!hp || *hp == transports::HostProtocol::kOneSided) {
    return usage("--host-protocol: expected shm or two-sided, got '" + host_protocol + "'");
  }
  o.host_protocol = *hp;
  auto md = transports::ModeFromString(mode);
  if (!md) return usage("--mode: expected sync or async, got '" + mode + "'");
  o.mode = *md;
  auto sk = schedulers::StrategyKindFromString(strategy);
  if (!sk.ok()) return usage("--strategy: " + sk.status().message());
  o.strategy = *sk;
  if (!decisions_path.empty()) {
    if (o.strategy != schedulers::StrategyKind::kOnline) {
      return usage("--decisions-csv records the online planner's decisions: needs --strategy online, got " + strategy);
    }
    o.record_decisions = true;
  }
  auto mb = ParseBytes(model_bytes);
  if (!mb.ok()) return usage("--model-bytes " + mb.status().message());
  {
    // Each rank holds the model (staging, double buffer): refuse what cannot fit.
    const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
    if (memory > 0 && static_cast<double>(*mb) > memory / 8) {
      return usage("--model-bytes " + model_bytes + " is out of range: at most 1/8 of this machine's memory (" +
                   FormatBytes(memory / 8) + "), since every rank holds copies of the model");
    }
  }
  o.model_bytes = *mb;
  if (!hidden.empty()) {
    o.trainer.hidden_widths.clear();
    std::stringstream ss(hidden);
    std::string w;
    while (std::getline(ss, w, ',')) {
      char* end = nullptr;
      const long long v = std::strtoll(w.c_str(), &end, 10);
      if (w.empty() || *end != '\0' || v <= 0 || v > 1000000) {
        return usage("--hidden '" + w + "' is not a width: expected widths in [1, 1000000], e.g. 256 or 1024,1024");
      }
      o.trainer.hidden_widths.push_back(v);
    }
  }
  {
    auto dk = workflow::Trainer::DriftFromString(drift);
    if (!dk.ok()) return usage("--drift: " + dk.status().message());
    o.trainer.drift = *dk;
    using D = workflow::Trainer::Drift;
    auto given = [&](const char* name) { return vm.count(name) && !vm[name].defaulted(); };
    if (o.trainer.drift != D::kNone && o.workload != workflow::LiveRun::Workload::kTrainer) {
      return usage("--drift: needs --workload trainer (a replay's losses are replayed as recorded)");
    }
    if (o.trainer.drift != D::kNone && !given("drift-at-iteration")) {
      return usage("--drift-at-iteration: required with --drift " + drift + " (the first drifted iteration, >= 2)");
    }
    if (o.trainer.drift == D::kNone && given("drift-at-iteration")) {
      return usage("--drift-at-iteration: given without --drift");
    }
    const struct {
      const char* option;
      D applies_to, or_to;
    } specific[] = {{"drift-initial-classes", D::kClassIncremental, D::kClassIncremental},
                    {"drift-swap-classes", D::kLabelSwap, D::kLabelSwap},
                    {"drift-swap-period", D::kLabelSwap, D::kLabelSwap},
                    {"drift-rotation-degrees", D::kRotation, D::kRecurring},
                    {"drift-duration", D::kRotation, D::kPriorShift},
                    {"drift-period", D::kRecurring, D::kRecurring},
                    {"drift-domains", D::kRecurring, D::kRecurring},
                    {"drift-prior-classes", D::kPriorShift, D::kPriorShift},
                    {"drift-prior-mass", D::kPriorShift, D::kPriorShift}};
    for (const auto& f : specific) {
      if (given(f.option) && o.trainer.drift != f.applies_to && o.trainer.drift != f.or_to) {
        std::string kinds = workflow::Trainer::ToString(f.applies_to);
        if (f.or_to != f.applies_to) kinds += " or " + std::string(workflow::Trainer::ToString(f.or_to));
        return usage(std::string("--") + f.option + ": applies to --drift " + kinds + " only (got --drift " +
                     drift + ")");
      }
    }
    for (const Status& st : {ParseSwapClasses(swap_classes, &o.trainer), ParsePriorClasses(prior_classes, &o.trainer)}) {
      if (!st.ok()) return usage(st.message());
    }
    for (const char* f : {"init-model", "freeze"}) {
      if (given(f) && o.workload != workflow::LiveRun::Workload::kTrainer) {
        return usage(std::string("--") + f + ": needs --workload trainer (a replay has no parameters to start from or freeze)");
      }
    }
    if (Status st = ParseFreeze(freeze, &o.trainer); !st.ok()) return usage(st.message());
    // The run's own table: asked for, or needed by --compare-simulation to
    // judge on the consumers' test subset (trainer; a replay judges its log).
    if (given("staleness-max-versions") && staleness_out.empty() && !compare) {
      return usage("--staleness-max-versions: given without --staleness-table or --compare-simulation");
    }
    o.trainer.staleness_table =
        !staleness_out.empty() || (compare && o.workload == workflow::LiveRun::Workload::kTrainer);
  }
  // No --pfs-dir: a fresh private directory for this run (mkdtemp, 0700),
  // made by rank 0 once MPI is up and removed at the end (issue 26).
  const bool private_dir = o.tier == transports::Tier::kPfs && o.pfs_dir.empty();
  if (private_dir) o.pfs_dir = "(made for the run)";
  o.verbose = !quiet;
  std::string error;
  if (!o.IsValid(&error)) {
    if (NameFinetuneFlag("trainer.", &error)) return usage(error);
    // Name the command-line option rather than the field.
    static const std::pair<const char*, const char*> kFlags[] = {
        {"trainer.drift_at_iteration", "--drift-at-iteration"},
        {"trainer.drift_initial_classes", "--drift-initial-classes"},
        {"trainer.drift_swap_class_a", "--drift-swap-classes (A)"},
        {"trainer.drift_swap_class_b", "--drift-swap-classes (B)"},
        {"trainer.drift_swap_period_iterations", "--drift-swap-period"},
        {"trainer.drift_rotation_degrees", "--drift-rotation-degrees"},
        {"trainer.drift_duration_iterations", "--drift-duration"},
        {"trainer.drift_period_iterations", "--drift-period"},
        {"trainer.drift_domains", "--drift-domains"},
        {"trainer.drift_prior_classes", "--drift-prior-classes"},
        {"trainer.drift_prior_mass", "--drift-prior-mass"},
        {"trainer.staleness_max_versions", "--staleness-max-versions"},
        {"trainer.staleness_table", "--staleness-table"},
        {"trainer.val_samples + test_samples", "--val-samples + --test-samples"},
        {"trainer.val_samples", "--val-samples"},
        {"trainer.test_samples", "--test-samples"},
        {"trainer.drift", "--drift"},
        {"trainer.learning_rate", "--learning-rate"},
        {"trainer.batch_size", "--batch-size"},
        {"trainer.epochs", "--epochs"},
        {"trainer.max_iterations", "--max-iterations"},
        {"trainer.train_samples", "--train-samples"},
        {"trainer.hidden_widths", "--hidden"},
        {"trainer.val_every_iterations", "--val-every"},
        {"warmup_iterations", "--warmup"},
        {"warmup_fraction", "--warmup"},
        {"notify", "--notify"},
        {"hmac_key_file", "--hmac-key-file"},
        {"pfs_delta", "--delta"},
        {"delta", "--delta"},
        {"fanout", "--fanout"},
        {"strategy", "--strategy"},
        {"keep_versions", "--keep-versions"},
        {"drift_prior", "--drift-prior"},
        {"wait_guard", "--wait-guard"},
        {"poll_period_s", "--poll-period-s"},
        {"requests_per_s", "--requests-per-s"},
        {"model_bytes", "--model-bytes"},
        {"log_path", "--log"},
        {"replay_time_scale", "--replay-time-scale"}};
    for (const auto& [field, flag] : kFlags) {
      if (error.rfind(field, 0) == 0) {
        error = std::string(flag) + error.substr(std::strlen(field));
        break;
      }
    }
    return usage(error);
  }

  auto session = transports::MpiSession::Init(nullptr, nullptr);
  if (!session.ok()) return Fail("run", session.status());
  if ((*session)->size() < 2) {
    std::cerr << "viper run: needs at least 2 MPI ranks: mpirun -np 2 viper run ...\n";
    return kExitUsage;
  }
  const int rank = (*session)->rank();
  if (private_dir) {  // a given --pfs-dir is created (0700) and checked by the publisher
    auto made = transports::MpiSession::MakeSharedPrivateDirectory(
        std::filesystem::temp_directory_path().string(), "viper-run-" + std::to_string(::getuid()) + "-");
    if (!made.ok()) return Fail("run", made.status());
    o.pfs_dir = *made;
  }
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  o.should_stop = [] { return g_stop_requested != 0; };

  auto result = workflow::LiveRun::Run(o);
  if (private_dir && rank == 0) (void)transports::RemoveTree(o.pfs_dir);
  if (!result.ok()) {
    std::cerr << "viper run (rank " << rank << "): " << result.status().message() << "\n";
    // A lost peer can make MPI_Finalize wait forever: leave without it.
    std::fflush(nullptr);
    std::_Exit(kExitFailure);
  }
  // A dead rank makes MPI_Finalize wait forever: leave without it.
  auto leave = [&](int code) {
    if (result->peers_lost) {
      std::fflush(nullptr);
      std::_Exit(code);
    }
    return code;
  };
  if (rank != 0) return leave(kExitOk);
  const auto& s = *result;
  // --json -: stdout holds only the JSON document.
  FILE* const table = JsonToStdout(json_path) ? stderr : stdout;
  PrintRunSummary(s, table);
  std::fprintf(table, "%s\n", s.BriefReport().c_str());
  // Finished, but some consumers were lost: not a clean success.
  const int done_code = s.lost_consumers.empty() ? kExitOk : kExitLostConsumers;
  nlohmann::json j = RunSummaryJson(s);
  if (!o.trainer.init_model_path.empty()) j["init_model"] = o.trainer.init_model_path;
  if (!freeze.empty()) j["freeze"] = freeze;
  if (s.staleness) {
    j["staleness_table"] = {{"path", staleness_out.empty() ? nlohmann::json() : nlohmann::json(staleness_out)},
                            {"rows", s.staleness->records.size()},
                            {"versions_kept", s.staleness_versions_kept},
                            {"max_versions", o.trainer.staleness_max_versions},
                            {"bytes_kept_peak", s.staleness_bytes_peak},
                            {"keep_seconds", s.staleness_keep_s},
                            {"evaluate_seconds", s.staleness_evaluate_s}};
    std::fprintf(table, "staleness table: %zu rows, %lld versions kept (%.1f MB at most), copies %.3f s during "
                 "the run, evaluation %.2f s after it%s%s\n",
                 s.staleness->records.size(), static_cast<long long>(s.staleness_versions_kept),
                 static_cast<double>(s.staleness_bytes_peak) / 1e6, s.staleness_keep_s, s.staleness_evaluate_s,
                 staleness_out.empty() ? "" : " -> ", staleness_out.c_str());
  }
  if (!staleness_out.empty()) {
    if (!s.staleness) {
      std::cerr << "viper run: --staleness-table: the producer recorded no table\n";
      return leave(kExitFailure);
    }
    auto st = WriteStalenessTable(*s.staleness, staleness_out);
    if (!st.ok()) return leave(Fail("run", st.WithContext("--staleness-table")));
  }
  if (compare) {
    auto c = workflow::CompareWithSimulation(s, o);
    if (!c.ok()) {
      std::cerr << "viper run: --compare-simulation: " << c.status().message() << "\n";
    } else {
      std::fprintf(table, "\n%-28s %14s %14s\n", "", "simulated", "measured");
      std::fprintf(table, "%-28s %14.2f %14.2f  (%+.1f%%)\n", "CIL per consumer", c->predicted_cil_per_consumer,
                  c->measured_cil_per_consumer, c->cil_error * 100);
      std::fprintf(table, "%-28s %14.0f %14.0f\n", "requests per consumer", c->predicted_requests,
                  c->measured_requests_per_consumer);
      std::fprintf(table, "%-28s %14.2f %14.2f\n", "mean update latency ms",
                  c->predicted_update_latency_s.value_or(0) * 1e3,
                  c->measured_update_latency_s.value_or(0) * 1e3);
      std::fprintf(table, "simulator: %s\n", c->simulator_report.c_str());
      std::fprintf(table, "judge: %s on %s\n", c->judge.c_str(), c->truth_metric.c_str());
      j["simulation"] = {{"cil_per_consumer", c->predicted_cil_per_consumer},
                         {"measured_cil_per_consumer", c->measured_cil_per_consumer},
                         {"cil_error", c->cil_error},
                         {"requests", c->predicted_requests},
                         {"update_latency_s", c->predicted_update_latency_s.value_or(0)},
                         {"judge", c->judge},
                         {"truth_metric", c->truth_metric}};
    }
  }
  std::fflush(table);
  if (!json_path.empty()) {
    auto st = WriteJson(j, json_path, "run");
    if (!st.ok()) return leave(Fail("run", st));
  }
  if (!csv_path.empty()) {
    auto st = WriteText(csv_path, s.RequestCsv());
    if (!st.ok()) return leave(Fail("run", st));
  }
  if (!decisions_path.empty()) {
    auto st = WriteText(decisions_path, schedulers::DecisionsCsv(s.decisions));
    if (!st.ok()) return leave(Fail("run", st));
  }
  if (!trace_path.empty()) {
    auto st = WriteTrace(s.ChromeTrace(), trace_path, "run-trace");
    if (!st.ok()) return leave(Fail("run", st));
  }
  if (done_code == kExitLostConsumers) {
    std::cerr << "viper run: finished with " << s.lost_consumers.size()
              << " lost consumer(s); exit " << kExitLostConsumers << "\n";
  }
  return leave(done_code);
}
#endif  // VIPER_HAVE_MPI

}  // namespace cli
}  // namespace viper
