#include "planning_options.h"

#include <filesystem>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "viper/core/units.h"
#include "viper/datasets/staleness_reader.h"
#include "viper/predictor/cost_model.h"

namespace viper {
namespace cli {

namespace {

// Program_options notifier: accepts "auto" or a loss metric name.
auto CheckMetric(const char* option, bool allow_test) {
  return [option, allow_test](const std::string& v) {
    if (v == "auto") return;
    auto m = predictor::LossMetricFromString(v);
    if (!m.ok() || (!allow_test && *m == predictor::LossMetric::kTestLoss)) {
      throw OptionValueError(std::string("--") + option + " " + v + ": expected auto, train_loss or val_loss" +
                             (allow_test ? " or test_loss" : " (test_loss is the served truth, never observed)"));
    }
  };
}

auto CheckOneOf(const char* option, std::vector<std::string> accepted) {
  return [option, accepted](const std::string& v) {
    for (const auto& a : accepted) {
      if (v == a) return;
    }
    std::string list;
    for (size_t i = 0; i < accepted.size(); ++i) list += (i ? (i + 1 == accepted.size() ? " or " : ", ") : "") + accepted[i];
    throw OptionValueError(std::string("--") + option + " " + v + ": expected " + list);
  };
}

}  // namespace

void AddPlanningOptions(po::options_description* desc, PlanningOptions* o) {
  schedulers::ScenarioOptions& sc = o->scenario;
  schedulers::Problem& pt = sc.problem_template;
  po::options_description plan("Planning");
  plan.add_options()
      ("warmup", po::value(&o->warmup)->default_value(o->warmup, o->warmup.text), "warm-up, N|P%: the warm-up ends at iteration N (as logged), or after P% of the logged iteration span (first + P/100 x (last - first), so a log starting at step 49 works); the predictor and the planners see only the log up to it")
      ("total-iterations", po::value(&sc.total_iterations)->default_value(sc.total_iterations), "N, the last training iteration (0 = the log's last)")
      ("metric", po::value(&o->metric)->default_value(o->metric)->notifier(CheckMetric("metric", false)), "what the planners observe: auto (val_loss when the warm-up has enough validation points to fit, else train_loss for the fit while online observes val_loss wherever the warm-up holds any), train_loss, val_loss (never test_loss)")
      ("truth-metric", po::value(&o->truth_metric)->default_value(o->truth_metric)->notifier(CheckMetric("truth-metric", true)), "what the schedules are judged on: auto (test_loss when the log has it: a sample disjoint from validation, standing for the inference traffic; else the planning metric, and the output says so), test_loss, val_loss, train_loss (the noisy per-batch loss: the output warns)")
      ("select", po::value(&o->select)->default_value(o->select)->notifier(CheckEnum<predictor::SelectionFromString>("select")), "predictor model selection: best-mse|validation|ensemble")
      ("seconds-per-iteration", po::value(&sc.seconds_per_iteration)->default_value(sc.seconds_per_iteration), "tau, seconds per training iteration as the planners see it, in [0, 1e6] (0 = the MEAN over the warm-up's wall times: wall-time span / iteration span; needed when the log has no wall time, e.g. Keras or Lightning)")
      ("seconds-per-epoch", po::value(&o->seconds_per_epoch)->default_value(o->seconds_per_epoch), "seconds per epoch, in [0, 1e9], for logs without wall time: tau = this / the log's iterations per epoch (an epoch-level log: see --iterations-per-epoch; 0 = unused)")
      ("min-spacing", po::value(&pt.min_spacing_iterations)->default_value(pt.min_spacing_iterations), "minimum iterations between checkpoints, >= 1");
  po::options_description req("Requests");
  req.add_options()
      ("arrivals", po::value(&o->arrivals)->default_value(o->arrivals)->notifier(CheckOneOf("arrivals", {"fixed", "poisson", "trace"})), "request arrivals: fixed|poisson|trace")
      ("request-interval-s", po::value(&sc.request_interval_s)->default_value(sc.request_interval_s), "seconds between requests, in [0, 1e9] (mean for poisson; 0 = tau, one request per iteration); the simulated window may hold at most 5e7 requests")
      ("requests", po::value(&o->requests)->default_value(o->requests), "serve exactly this many requests (the paper's fixed window), in [0, 5e7]; 0 = serve while training runs")
      ("request-trace", po::value(&o->request_trace), "file of request arrival times in seconds since the end of warm-up, one per line (implies --arrivals trace)")
      ("seed", po::value(&pt.requests.seed)->default_value(pt.requests.seed), "seed of the Poisson arrivals")
      ("traffic-clock", po::value(&o->traffic_clock)->default_value(o->traffic_clock)->notifier(CheckEnum<schedulers::TrafficClockFromString>("traffic-clock")), "with a staleness table, the clock the traffic's drift follows: wall (the default: the iteration an unstalled producer would have reached; the world does not wait for a checkpoint, so stalls cannot hold the traffic back) or producer (the producer's iteration: the traffic waits while a checkpoint stalls the producer, so a schedule that stalls before a drift keeps a fixed request window away from it)");
  po::options_description cost("Transport cost");
  cost.add_options()
      ("transport", po::value(&o->transport)->default_value(o->transport)->notifier(CheckEnum<TierFromString>("transport")), "tier preset: gpu|host|pfs (calibrated on the Viper paper's Polaris figures)")
      ("mode", po::value(&o->mode)->default_value(o->mode)->notifier(CheckOneOf("mode", {"sync", "async"})), "sync (producer blocked until delivered) or async (blocked for the snapshot only)")
      ("notify", po::value(&o->notify)->default_value(o->notify)->notifier(CheckEnum<schedulers::NotificationFromString>("notify")), "push (consumer told at once) or poll (consumer polls every --poll-period-s)")
      ("poll-period-s", po::value(&o->preset().poll_period_s)->default_value(o->preset().poll_period_s), "polling period, seconds in (0, 86400] (TF Serving's default is 1 s)")
      ("model-bytes", po::value(&o->model_bytes)->default_value(o->model_bytes), "model size in bytes, e.g. 600M (NT3.A), 1.7G (NT3.B), 4.7G (TC1); at most 1 PiB")
      ("cost-model", po::value(&o->cost_model), "measured cost samples (CSV tier,mode,phase,bytes,seconds or JSON) fitted per phase, instead of the preset")
      ("stall-s", po::value<double>()->notifier([o](double v) { o->stall_s = v; }), "direct producer stall sigma per checkpoint, seconds in [0, 1e6] (with --delay-s; default: from the tier)")
      ("delay-s", po::value<double>()->notifier([o](double v) { o->delay_s = v; }), "direct delivery delay delta per checkpoint, seconds in [0, 1e6] (with --stall-s)")
      ("staleness", po::value(&o->staleness)->default_value(o->staleness), "staleness table of the log's run (CSV or .csv.gz: version_iteration,traffic_iteration,val_loss,[val_accuracy,]test_loss[,test_accuracy]; README 'Staleness tables'): requests are charged its test_loss of (their version, the traffic at their time), the oracle is exact on it, and online re-measures the served version from its val_loss at each validation point. 'auto' = <log stem>.staleness.csv[.gz] beside the log when there is one; 'none' = the diagonal: a stale version is charged the loss it had on its own traffic")
      ("drift", po::value(&pt.drift_per_s)->default_value(pt.drift_per_s), "loss added per second a version has been served (rho), in [0, 1e6]")
      ("price-per-slowdown-s", po::value(&pt.price_per_slowdown_s)->default_value(pt.price_per_slowdown_s), "CIL units charged per second of training slowdown in the objective, in [0, 1e12]")
      ("slowdown-budget-s", po::value(&o->slowdown_budget_s)->default_value(o->slowdown_budget_s), "upper bound on total stall, seconds (a negative value = no bound)");
  po::options_description loop("Closed loop (the online strategy)");
  loop.add_options()
      ("gate-z", po::value(&sc.online.gate_z)->default_value(sc.online.gate_z), "publish only when the candidate's measured loss beats the served version's by more than this many noise sd (of a difference of two measurements), in [0, 100]; 0 = no gate")
      ("change-threshold", po::value(&sc.online.change_threshold)->default_value(sc.online.change_threshold), "Page-Hinkley alarm threshold, in noise sd, in (0, 1e6]: lower reacts faster to drift and re-fits more often")
      ("change-allowance", po::value(&sc.online.change_allowance)->default_value(sc.online.change_allowance), "Page-Hinkley allowance per measurement, in noise sd, in (0, 1e6]")
      ("min-fit-points", po::value(&sc.online.min_fit_points)->default_value(sc.online.min_fit_points), "measurements of a regime before its curve is fitted, in [3, 1000000] (fewer: a flat forecast at their median; a fit takes at least 5, so 3 and 4 wait for 5)")
      ("keep-versions", po::value(&sc.online.keep_versions)->default_value(sc.online.keep_versions), "online: models kept for re-publishing, in [0, 1000]: the last ones it published and the last of each regime before a detected change; with a staleness table each is re-measured at every validation point, and one that beats both the candidate and the served version by the gate's margin is published again (recurring domains); 0 = never re-publish")
      ("keep-regime-ends", po::value(&o->keep_regime_ends)->default_value(o->keep_regime_ends)->notifier(CheckOneOf("keep-regime-ends", {"off", "predicted", "every"})), "online, with --keep-versions > 0: which models the producer copies, unpublished, so that the last of a regime before a detected change can be published again: predicted = at the measurement before a predicted switch (once a recurring domain's cycle is known; about one copy per regime), every = at every validation point after the warm-up, off = none (only the warm-up's and published models are kept). Each copy blocks the producer model bytes / the device-local copy bandwidth (preset tiers: the gpu tier's snapshot, 8 ms for 600 MB; measured costs: none, a live log's times carry them), and the judge charges it")
      ("remeasure-s", po::value(&o->remeasure_s)->default_value(o->remeasure_s), "online, with a staleness table: seconds the producer pauses to re-measure one model it does not train (the served version, a kept one) on a traffic state it has not measured that model on; the judge charges each pause (a state measured before, e.g. calm traffic or a domain that came back, is read again for free, as the live producer does). auto = the log's validation pause (the median validation row's iteration time less the median iteration's; 0 where the log has no per-iteration wall times); 0 = free (the figures before the sixty-second session); at most 3600")
      ("remeasure", po::value(&o->remeasure)->default_value(o->remeasure)->notifier(CheckOneOf("remeasure", {"pause", "beside"})), "online, with a staleness table: where those re-measurements run, as viper run --remeasure. beside (the default since the sixty-third session) = on a helper beside training (a thread, a second stream): the producer trains on, the decision at that validation point waits for them (a checkpoint there starts that much later, of the model copied aside at the point: one keep copy, charged), only as many new evaluations as fit in the last validation gap at the pace measured then (the kept models left out are asked for at the next point), and what is not done by the next validation point is a pause there. pause = on the training path: the producer stops for each (the figures of the sixty-second session)")
      ("calm-decisions", po::value(&o->calm_decisions)->default_value(o->calm_decisions)->notifier(CheckOneOf("calm-decisions", {"on", "off"})), "online, with --remeasure beside: on (the default since the sixty-fourth session) = at a calm validation point (its loss within twice the gate's margin of the point before, no switch seen yet, no return anticipated) decide at once, before that point's re-measurements are in: nothing is copied aside and no decision waits; their answers reach the loop before the next point (a jump of the served version's is recorded as the switch that decision could not see). off = every point with fresh re-measurements waits for them. On the 522-case pool: mean 14.37 -> 13.62%, median 7.38 -> 6.63%, worse than epoch 38 -> 34 (bench/README.md, 'Sixty-fourth session')")
      ("partial-waits", po::value(&o->partial_waits)->default_value(o->partial_waits)->notifier(CheckOneOf("partial-waits", {"on", "off"})), "online, with --remeasure beside and --keep-versions > 0: on (the default since the sixty-fifth session) = at a validation point that is not calm, the decision waits only for the re-measurements that can win a switch (the served version's, the predicted return's models, each ended regime's and the warm-up's); the newest published versions, the serving domain's, which a switch leaves as stale as the served one, are measured after it and reach the loop before the next point. off = the decision waits for every kept model it asked for. On the 186-case development pool: mean 11.40 -> 10.82%, recurring 37.6 -> 34.3% (bench/README.md, 'Sixty-fifth session')")
      ("anticipate-returns", po::value(&o->anticipate_returns)->default_value(o->anticipate_returns)->notifier(CheckOneOf("anticipate-returns", {"on", "off"})), "online, with --keep-versions > 0: on = once a domain has come back (a kept model of an earlier regime won) and either only two changes have been detected (their interval is the spacing) or the last three are evenly spaced, publish the returning domain's model so that it arrives at the predicted next change (nothing else is published until the change is seen; a prediction that does not come true stops this until two new changes are seen); off = re-publish only after a change is seen")
      ("ramp-hold", po::value(&o->ramp_hold)->default_value(o->ramp_hold)->notifier(CheckOneOf("ramp-hold", {"on", "off"})), "online, under the wall traffic clock, with --staleness: on = while the traffic is on a young ramp, publish nothing (a ramp: some fixed model, served or kept, re-measured worse at each of its last two validation points or more, by twice the gate's margin, and none better at the last by three times that; young: the traffic has moved less since the rise began than one checkpoint's stall plus delivery, in iterations; only where that lag spans three validation gaps or more), since a version published then reaches the traffic no closer to it than the served one is and its stall leaves every later version further behind; off = publish as the re-plan and the gate decide")
      ("drift-prior", po::value(&sc.online.drift_prior)->default_value(sc.online.drift_prior), "online, under the wall traffic clock: how much traffic drift to expect before any is measured, as the factor by which it raises a stale model's loss over the serving window, in [0, 1000] (1 = doubles it; 3 = quadruples it). Each checkpoint's stall is then priced as that much lag (a drift that comes finds the producer behind by every stall taken before it), so checkpoints whose gain does not pay for it are skipped, until a change is detected or a decay measured (then the measured decay alone). Only with --staleness (the served version re-measured on today's traffic): without a table no drift can be seen, by online or by the diagonal judge, and the prior is not applied. 0 = price only measured decay: for traffic known not to drift. On 69 held-out runs whose traffic never drifts (414 cases) the default 3 has median regret 2.6% and 65 cases more than 1% worse than epoch, nearly all on the pfs tier with a fixed request count, where it publishes nothing; 0 has 1.7% and 1 (bench/README.md, 'Fortieth session')")
      ("wait-guard", po::value(&sc.online.wait_guard)->default_value(sc.online.wait_guard), "online, with --staleness: a rent-or-buy bound on the re-plan's waits, in [0, 1000]. Since the last publish, add up at each validation point the served version's re-measured loss over the candidate's (less the gate's margin) times the seconds since the point before; once that passes this many times a stall's seconds times the candidate's loss, publish the candidate even where the re-plan waits (not while the served version is still rising, nor while an anticipated return holds). 0 = off")
      ("replan-gap", RealOption(&sc.online.replan_gap), "online: relative gap to the optimum each re-plan is certified within, in [0, 0.01]; 0 = exact (slower on a fixed request window: about 1.5x at 1e5 iterations)");
  desc->add(plan).add(req).add(cost).add(loop);
}

// --remeasure-s: auto (-1: the log's validation pause) or seconds in [0, 3600].
static StatusOr<double> RemeasureSeconds(const std::string& text) {
  if (text == "auto") return -1.0;
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || !(s >= 0 && s <= 3600)) {
    return InvalidArgumentError("--remeasure-s '" + text + "': expected auto or seconds in [0, 3600]");
  }
  return s;
}

Status ValidatePlanningOptions(const PlanningOptions& o) {
  VIPER_RETURN_IF_ERROR(RemeasureSeconds(o.remeasure_s).status());
  if (o.staleness.empty()) return InvalidArgumentError("--staleness '': expected a file, auto or none");
  const schedulers::ScenarioOptions& sc = o.scenario;
  const schedulers::Problem& pt = sc.problem_template;
  VIPER_RETURN_IF_ERROR(CheckInteger("--total-iterations", sc.total_iterations, 0, kMaxPlannedIterations,
                                     "0 = the log's last; each iteration after the warm-up is a point of the planned curves"));
  VIPER_RETURN_IF_ERROR(CheckReal("--seconds-per-iteration", sc.seconds_per_iteration, 0, 1e6, false, "0 = measured from the log"));
  VIPER_RETURN_IF_ERROR(CheckReal("--seconds-per-epoch", o.seconds_per_epoch, 0, 1e9, false, "0 = unused"));
  if (sc.seconds_per_iteration > 0 && o.seconds_per_epoch > 0) {
    return InvalidArgumentError("--seconds-per-iteration and --seconds-per-epoch both set tau: give one");
  }
  VIPER_RETURN_IF_ERROR(CheckInteger("--min-spacing", pt.min_spacing_iterations, 1, kMaxIterations));
  VIPER_RETURN_IF_ERROR(CheckReal("--request-interval-s", sc.request_interval_s, 0, 1e9, false, "0 = one request per iteration"));
  VIPER_RETURN_IF_ERROR(CheckInteger("--requests", o.requests, 0, kMaxRequests, "0 = serve while training runs; the limit bounds the simulator's memory"));
  VIPER_RETURN_IF_ERROR(CheckReal("--poll-period-s", o.preset().poll_period_s, 0, 86400, true));
  auto bytes = ParseBytes(o.model_bytes);
  if (!bytes.ok()) return InvalidArgumentError("--model-bytes " + bytes.status().message());
  if (*bytes == 0 || static_cast<double>(*bytes) > kMaxModelBytes) {
    return InvalidArgumentError("--model-bytes " + o.model_bytes + " is out of range: expected a size in [1 B, 1 PiB]");
  }
  if (o.stall_s) VIPER_RETURN_IF_ERROR(CheckReal("--stall-s", *o.stall_s, 0, 1e6));
  if (o.delay_s) VIPER_RETURN_IF_ERROR(CheckReal("--delay-s", *o.delay_s, 0, 1e6));
  if (o.stall_s.has_value() != o.delay_s.has_value()) return InvalidArgumentError("--stall-s and --delay-s go together: give both or neither");
  VIPER_RETURN_IF_ERROR(CheckReal("--drift", pt.drift_per_s, 0, 1e6));
  VIPER_RETURN_IF_ERROR(CheckReal("--price-per-slowdown-s", pt.price_per_slowdown_s, 0, 1e12));
  VIPER_RETURN_IF_ERROR(CheckReal("--slowdown-budget-s", o.slowdown_budget_s, -kInf, 1e12, true, "a negative value = no bound"));
  VIPER_RETURN_IF_ERROR(CheckReal("--gate-z", sc.online.gate_z, 0, 100, false, "0 = no gate"));
  VIPER_RETURN_IF_ERROR(CheckReal("--change-threshold", sc.online.change_threshold, 0, 1e6, true));
  VIPER_RETURN_IF_ERROR(CheckReal("--change-allowance", sc.online.change_allowance, 0, 1e6, true));
  VIPER_RETURN_IF_ERROR(CheckInteger("--min-fit-points", sc.online.min_fit_points, 3, 1000000));
  VIPER_RETURN_IF_ERROR(CheckReal("--replan-gap", sc.online.replan_gap, 0, 1e-2, false, "0 = exact re-plans"));
  VIPER_RETURN_IF_ERROR(CheckInteger("--keep-versions", sc.online.keep_versions, 0, 1000, "0 = never re-publish"));
  VIPER_RETURN_IF_ERROR(CheckReal("--drift-prior", sc.online.drift_prior, 0, 1000, false, "0 = price only measured decay"));
  VIPER_RETURN_IF_ERROR(CheckReal("--wait-guard", sc.online.wait_guard, 0, 1000, false, "0 = off"));
  if (o.arrivals == "trace" && o.request_trace.empty()) {
    return InvalidArgumentError("--arrivals trace needs --request-trace FILE");
  }
  if (!o.request_trace.empty() && o.arrivals == "poisson") {
    return InvalidArgumentError("--request-trace gives the arrivals: it cannot go with --arrivals poisson");
  }
  // What the library would still refuse, named by option (online's fields).
  std::string error;
  if (!sc.online.IsValid(&error)) return InvalidArgumentError("closed-loop options: " + error);
  return Status::Ok();
}

namespace {

StatusOr<std::vector<double>> ReadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open request trace '" + path + "'");
  std::vector<double> t;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    char* end = nullptr;
    const double v = std::strtod(line.c_str(), &end);
    if (end == line.c_str() || !std::isfinite(v) || v < 0) {
      return InvalidArgumentError(path + ":" + std::to_string(n) + ": expected an arrival time in seconds >= 0, got '" +
                                  line + "'");
    }
    if (!t.empty() && v < t.back()) {
      return InvalidArgumentError(path + ":" + std::to_string(n) + ": arrival times must not decrease");
    }
    t.push_back(v);
  }
  if (t.empty()) return InvalidArgumentError(path + ": the request trace is empty");
  return t;
}

// TierCost from measured samples: async stall = snapshot; sync stall =
// snapshot + transfer, so for sync the whole stall is the snapshot phase and
// the transfer phase is zero.
StatusOr<schedulers::TierCost> TierFromSamples(const std::string& path, const std::string& tier,
                                                const std::string& mode, double bytes) {
  VIPER_ASSIGN_OR_RETURN(auto all, predictor::ReadCostSamples(path));
  // Fit only the phases the model uses, of this tier and mode (the file may
  // hold other tiers, and notify/update samples of a single size).
  std::vector<predictor::CostSample> samples;
  for (const auto& s : all) {
    if (s.tier == tier && s.mode == mode &&
        (s.phase == predictor::CostPhase::kStall || s.phase == predictor::CostPhase::kTransfer ||
         s.phase == predictor::CostPhase::kLoad)) {
      samples.push_back(s);
    }
  }
  if (samples.empty()) {
    return NotFoundError(path + " has no stall/transfer/load samples for tier '" + tier + "' in mode '" + mode + "'");
  }
  VIPER_ASSIGN_OR_RETURN(auto model, predictor::CostModel::Fit(samples, {}));
  VIPER_ASSIGN_OR_RETURN(auto stall, model.Get(tier, mode, predictor::CostPhase::kStall));
  VIPER_ASSIGN_OR_RETURN(auto load, model.Get(tier, mode, predictor::CostPhase::kLoad));
  schedulers::TierCost t;
  t.model_size_bytes = bytes;
  t.snapshot_latency_s = std::max(0.0, stall.latency_s);
  t.snapshot_bandwidth_bytes_per_s = stall.bandwidth_Bps;
  t.load_latency_s = std::max(0.0, load.latency_s);
  t.load_bandwidth_bytes_per_s = load.bandwidth_Bps;
  if (mode == "sync") {
    t.transfer_latency_s = 0.0;
    t.transfer_bandwidth_bytes_per_s = std::numeric_limits<double>::max();
  } else {
    VIPER_ASSIGN_OR_RETURN(auto transfer, model.Get(tier, mode, predictor::CostPhase::kTransfer));
    t.transfer_latency_s = std::max(0.0, transfer.latency_s);
    t.transfer_bandwidth_bytes_per_s = transfer.bandwidth_Bps;
  }
  t.synchronous = mode == "sync";
  return t;
}

// tau as the flags give it, and where it came from; 0 = the scenario
// measures it over the warm-up.
StatusOr<double> GivenTau(const TrainingLog& log, const PlanningOptions& o, std::string* source) {
  if (o.scenario.seconds_per_iteration > 0) {
    *source = "--seconds-per-iteration";
    return o.scenario.seconds_per_iteration;
  }
  if (o.seconds_per_epoch > 0) {
    const LogSummary all = Summarize(log);
    if (!all.iterations_per_epoch || !(*all.iterations_per_epoch > 0)) {
      return InvalidArgumentError("--seconds-per-epoch needs the iterations per epoch, and " + log.source +
                                  " has no epoch column to measure them: give --seconds-per-iteration instead");
    }
    *source = "--seconds-per-epoch / " + std::to_string(static_cast<int64_t>(*all.iterations_per_epoch)) +
              " iterations per epoch";
    return o.seconds_per_epoch / *all.iterations_per_epoch;
  }
  *source = "mean over the warm-up's wall times";
  return 0.0;
}

}  // namespace

nlohmann::json ReplayedPaceJson(const std::optional<schedulers::ReplayedPace>& pace) {
  if (!pace) return nlohmann::json();
  return {{"seconds_per_iteration", pace->seconds_per_iteration},
          {"over_tau", pace->over_tau},
          {"slow_share", pace->slow_share},
          {"irregular", schedulers::IrregularPace(*pace)}};
}

StatusOr<PlanningContext> BuildPlanningContext(const LogOptions& log_options, const PlanningOptions& o) {
  PlanningContext ctx;
  VIPER_ASSIGN_OR_RETURN(ctx.log, ReadLog(log_options));
  if (ctx.log.records.empty()) return InvalidArgumentError(ctx.log.source + ": the log has no rows");

  schedulers::ScenarioOptions so = o.scenario;
  const int64_t first = ctx.log.records.front().iteration, last = ctx.log.records.back().iteration;
  const int64_t W = o.warmup.Resolve(first, last);
  so.warmup_iterations = W;
  if (o.metric != "auto") {
    VIPER_ASSIGN_OR_RETURN(so.metric, predictor::LossMetricFromString(o.metric));
  }
  if (o.truth_metric != "auto") {
    VIPER_ASSIGN_OR_RETURN(so.truth_metric, predictor::LossMetricFromString(o.truth_metric));
  }
  VIPER_ASSIGN_OR_RETURN(so.predictor.selection, predictor::SelectionFromString(o.select));
  if (W < first || W >= (so.total_iterations > 0 ? so.total_iterations : last)) {
    return InvalidArgumentError("--warmup " + o.warmup.text + " ends at iteration " + std::to_string(W) + ", outside " +
                                ctx.log.source + "'s iterations " + std::to_string(first) + ".." + std::to_string(last) +
                                " (the warm-up must end at or after the first and before the last)");
  }
  {
    const int64_t N = so.total_iterations > 0 ? so.total_iterations : last;
    if (N - W > kMaxPlannedIterations) {
      return OutOfRangeError("the planned horizon N - W = " + std::to_string(N) + " - " + std::to_string(W) +
                             " iterations of " + ctx.log.source + " exceeds the limit of " +
                             std::to_string(kMaxPlannedIterations) +
                             " (each is a point of the planned curves): give --total-iterations or a later --warmup");
    }
  }
  VIPER_ASSIGN_OR_RETURN(so.seconds_per_iteration, GivenTau(ctx.log, o, &ctx.tau_source));

  // Cost: measured samples, a direct sigma/delta, or the preset the flags name.
  VIPER_ASSIGN_OR_RETURN(uint64_t bytes, ParseBytes(o.model_bytes));
  ctx.model_bytes = static_cast<double>(bytes);
  schedulers::PresetCost preset = o.preset();
  VIPER_ASSIGN_OR_RETURN(preset.tier, TierFromString(o.transport));
  VIPER_ASSIGN_OR_RETURN(preset.notification, schedulers::NotificationFromString(o.notify));
  preset.model_size_bytes = ctx.model_bytes;
  preset.synchronous = o.mode == "sync";
  if (!o.cost_model.empty()) {
    VIPER_ASSIGN_OR_RETURN(schedulers::TierCost fitted, TierFromSamples(o.cost_model, o.transport, o.mode, ctx.model_bytes));
    fitted.notification = preset.notification;
    fitted.poll_period_s = preset.poll_period_s;
    so.tier = fitted;
    ctx.cost_source = "measured (" + o.cost_model + ")";
  } else if (o.stall_s && o.delay_s) {
    so.tier = schedulers::MeasuredCost{*o.stall_s, *o.delay_s, preset.notification, preset.poll_period_s};
    ctx.cost_source = "direct (--stall-s/--delay-s)";
  } else {
    so.tier = preset;
    ctx.cost_source = std::string(ToString(preset.tier)) + " preset";
  }

  // Requests and budget (drift, price, spacing, seed are bound in place).
  schedulers::Problem& p = so.problem_template;
  if (!o.request_trace.empty()) {
    p.requests.arrivals = schedulers::ArrivalProcess::kTrace;
    VIPER_ASSIGN_OR_RETURN(p.requests.trace_s, ReadTrace(o.request_trace));
  } else if (o.arrivals == "poisson") {
    p.requests.arrivals = schedulers::ArrivalProcess::kPoisson;
  }
  VIPER_ASSIGN_OR_RETURN(p.requests.traffic_clock, schedulers::TrafficClockFromString(o.traffic_clock));
  so.online.anticipate_returns = o.anticipate_returns == "on";
  so.online.calm_decisions = o.calm_decisions == "on";
  so.online.partial_waits = o.partial_waits == "on";
  if (!schedulers::RegimeEndsFromString(o.keep_regime_ends, &so.online.regime_ends)) {
    return InvalidArgumentError("--keep-regime-ends '" + o.keep_regime_ends + "': expected off, predicted or every");
  }
  so.online.hold_young_ramps = o.ramp_hold == "on";
  VIPER_ASSIGN_OR_RETURN(so.remeasure_s, RemeasureSeconds(o.remeasure_s));
  so.remeasure_beside = o.remeasure == "beside";
  if (o.requests > 0) {
    p.requests.window = schedulers::WindowKind::kRequestCount;
    p.requests.request_count = o.requests;
  }
  if (o.slowdown_budget_s >= 0) p.slowdown_budget_s = o.slowdown_budget_s;

  std::string table_path = o.staleness == "auto" ? StalenessTableBeside(log_options.path)
                                                  : o.staleness == "none" ? std::string() : o.staleness;
  if (!table_path.empty()) {
    datasets::StalenessReader::Options table_options;
    VIPER_ASSIGN_OR_RETURN(table_options.non_finite, datasets::NonFinitePolicyFromString(log_options.non_finite));
    VIPER_ASSIGN_OR_RETURN(so.staleness, datasets::StalenessReader::ReadFile(table_path, table_options));
  }

  auto sc = schedulers::MakeScenario(ctx.log, so);
  // FailedPrecondition naming the log: tau was to be measured and cannot be.
  if (!sc.ok() && sc.status().code() == StatusCode::kFailedPrecondition &&
      sc.status().message().rfind(ctx.log.source + ":", 0) == 0) {
    return InvalidArgumentError(sc.status().message() +
                                "; give --seconds-per-iteration S, or --seconds-per-epoch S (with "
                                "--iterations-per-epoch for an epoch-level log)");
  }
  if (!sc.ok()) return sc.status();
  static_cast<schedulers::Scenario&>(ctx) = std::move(*sc);
  return ctx;
}

Status CheckSimulationSize(const PlanningContext& ctx, const schedulers::Schedule& schedule) {
  const schedulers::Problem& p = ctx.problem;
  double requests = 0;
  std::string why;
  const double rate = p.requests.RatePerSecond();
  switch (p.requests.window) {
    case schedulers::WindowKind::kRequestCount:
      requests = static_cast<double>(p.requests.request_count);
      why = "--requests " + std::to_string(p.requests.request_count);
      break;
    case schedulers::WindowKind::kEndTime:
      requests = p.requests.end_time_s * rate;
      break;
    case schedulers::WindowKind::kWhileTraining: {
      double train_s = 0;
      if (!ctx.iteration_times_s.empty()) {
        for (double t : ctx.iteration_times_s) train_s += t;
      } else {
        train_s = static_cast<double>(p.total_iterations - p.warmup_iterations) * p.seconds_per_iteration;
      }
      const double stall_s = static_cast<double>(schedule.size()) * p.cost.stall_s;
      requests = (train_s + stall_s) * rate;
      std::ostringstream os;
      os.precision(3);
      os << "a window of " << train_s + stall_s << " s (training " << train_s << " s plus " << schedule.size()
         << " checkpoints stalling " << p.cost.stall_s << " s each: --model-bytes, --transport, --stall-s) with one "
         << "request every " << 1 / rate << " s (--request-interval-s; its default 0 means one per iteration of "
         << "tau, " << ctx.tau_source << ")";
      why = os.str();
      break;
    }
  }
  if (p.requests.arrivals == schedulers::ArrivalProcess::kTrace) {
    requests = std::min(requests, static_cast<double>(p.requests.trace_s.size()));
  }
  if (!(requests <= static_cast<double>(kMaxRequests))) {
    std::ostringstream os;
    os.precision(3);
    os << "the simulation would serve about " << requests << " requests (" << why << "); the limit is "
       << kMaxRequests << " requests (about 16 bytes each): raise --request-interval-s, lower --requests or "
       << "--model-bytes";
    return Status(StatusCode::kOutOfRange, os.str());
  }
  return Status::Ok();
}

simulator::ScheduleCheck SimulationSizeCheck(const PlanningContext& ctx) {
  return [&ctx](const schedulers::Schedule& schedule) { return CheckSimulationSize(ctx, schedule); };
}

bool TruthIsTrainingLoss(const PlanningContext& ctx) {
  return ctx.truth_metric == predictor::LossMetric::kTrainLoss;
}

std::string StalenessTableBeside(const std::string& log_path) {
  namespace fs = std::filesystem;
  const fs::path p(log_path);
  std::string stem = p.filename().string();
  for (const char* ext : {".gz", ".csv", ".json", ".jsonl"}) {
    const std::string e = ext;
    if (stem.size() > e.size() && stem.compare(stem.size() - e.size(), e.size(), e) == 0) {
      stem.resize(stem.size() - e.size());
    }
  }
  for (const char* ext : {".staleness.csv.gz", ".staleness.csv"}) {
    const fs::path t = p.parent_path() / (stem + ext);
    std::error_code ec;
    if (fs::is_regular_file(t, ec)) return t.string();
  }
  return "";
}

std::string JudgeName(const PlanningContext& ctx) { return ctx.staleness_truth ? "staleness table" : "diagonal"; }

std::string ObservedMetrics(const PlanningContext& ctx) {
  std::string s = predictor::ToString(ctx.metric);
  if (ctx.online_metric != ctx.metric)
    s += std::string(" (online: ") + predictor::ToString(ctx.online_metric) + ")";
  return s;
}

std::string TruthNote(const PlanningContext& ctx) {
  std::string note;
  if (ctx.staleness_truth) {
    const bool wall = ctx.problem.requests.traffic_clock == schedulers::TrafficClock::kWall;
    note = "each request charged the staleness table's test_loss of (its version, the traffic at its time): " +
           ctx.staleness_source + "; the oracle is exact on it, online re-measures the served version from its val_loss\n" +
           (wall ? "traffic clock: wall (the traffic moves on while a checkpoint stalls the producer; --traffic-clock producer: it waits)\n"
                 : "traffic clock: producer (the traffic waits while a checkpoint stalls the producer)\n");
  } else {
    note = "no staleness table: a stale version is charged the loss it had on its own traffic (--staleness FILE "
           "charges L(version, traffic))\n";
  }
  if (ctx.separate_truth) {
    note += std::string("judged on ") + predictor::ToString(ctx.truth_metric) +
            " (a sample the planners never see); " + "planners observe " + ObservedMetrics(ctx);
  } else {
    const bool has_test = predictor::ExtractCurve(ctx.log, predictor::LossMetric::kTestLoss, true).ok();
    note += std::string("judged on ") + predictor::ToString(ctx.truth_metric) +
            ", the series the planners observe (" + ObservedMetrics(ctx) + "): " +
            (has_test ? "--truth-metric chose it over the log's test_loss"
                      : "the log has no separate truth column (test_loss)") +
            ",\nso a rule that selects on measured noise is rewarded for it";
  }
  if (ctx.log.diverged_values > 0) {
    const LogSummary s = Summarize(ctx.log);
    note += "\nthe run diverged: " + std::to_string(ctx.log.diverged_values) +
            " NaN/inf losses read as a diverged model (+inf), the first at iteration " +
            std::to_string(s.first_diverged_iteration.value_or(0)) +
            "; a request served by one is charged +inf (--non-finite reject refuses such a log)";
  }
  if (TruthIsTrainingLoss(ctx)) {
    note += "\nwarning: the truth is the per-batch TRAINING loss, a noisy stand-in for the loss served requests "
            "see;\nlog a held-out test_loss (or val_loss, --truth-metric val_loss) for a faithful judgement";
  }
  return note;
}

StatusOr<schedulers::Plan> PlanWith(const PlanningContext& ctx, schedulers::StrategyKind kind) {
  return schedulers::PlanStrategy(ctx, kind);
}

}  // namespace cli
}  // namespace viper
