#include "planning_options.h"

#include <cmath>
#include <fstream>
#include <limits>

#include "viper/core/units.h"
#include "viper/predictor/cost_model.h"
#include "viper/simulator/presets.h"

namespace viper {
namespace cli {

void AddPlanningOptions(po::options_description* desc, PlanningOptions* o) {
  po::options_description plan("Planning");
  plan.add_options()
      ("warmup", po::value(&o->warmup)->default_value(o->warmup), "warm-up W in iterations: the predictor and the planners see only the log up to W (0 = use --warmup-fraction)")
      ("warmup-fraction", po::value(&o->warmup_fraction)->default_value(o->warmup_fraction), "warm-up as a fraction of the log's iterations, when --warmup is 0")
      ("total-iterations", po::value(&o->total_iterations)->default_value(o->total_iterations), "N, the last training iteration (0 = the log's last)")
      ("metric", po::value(&o->metric)->default_value(o->metric), "what the planners observe: auto (val_loss when the warm-up has enough validation points, else train_loss), train_loss, val_loss (never test_loss)")
      ("truth-metric", po::value(&o->truth_metric)->default_value(o->truth_metric), "what the schedules are judged on: auto (test_loss when the log has it: a sample disjoint from validation, standing for the inference traffic; else the planning metric, and the output says so), test_loss, val_loss, train_loss")
      ("select", po::value(&o->select)->default_value(o->select)->notifier(CheckEnum<predictor::SelectionFromString>("select")), "predictor model selection: best-mse|validation|ensemble")
      ("seconds-per-iteration", po::value(&o->seconds_per_iteration)->default_value(o->seconds_per_iteration), "tau in seconds as the planners see it (0 = the mean over the warm-up's wall times; the simulator replays the log's own times)")
      ("min-spacing", po::value(&o->min_spacing)->default_value(o->min_spacing), "minimum iterations between checkpoints");
  po::options_description req("Requests");
  req.add_options()
      ("arrivals", po::value(&o->arrivals)->default_value(o->arrivals), "request arrivals: fixed|poisson|trace")
      ("request-interval-s", po::value(&o->request_interval_s)->default_value(o->request_interval_s), "seconds between requests (mean for poisson; 0 = tau, one request per iteration)")
      ("requests", po::value(&o->requests)->default_value(o->requests), "serve exactly this many requests (the paper's fixed window); 0 = serve while training runs")
      ("request-trace", po::value(&o->request_trace), "file of request arrival times in seconds since the end of warm-up, one per line (implies --arrivals trace)")
      ("seed", po::value(&o->seed)->default_value(o->seed), "seed of the Poisson arrivals");
  po::options_description cost("Transport cost");
  cost.add_options()
      ("transport", po::value(&o->transport)->default_value(o->transport)->notifier(CheckEnum<simulator::TierFromString>("transport")), "tier preset: gpu|host|pfs (calibrated on the Viper paper's Polaris figures)")
      ("mode", po::value(&o->mode)->default_value(o->mode), "sync (producer blocked until delivered) or async (blocked for the snapshot only)")
      ("notify", po::value(&o->notify)->default_value(o->notify)->notifier(CheckEnum<schedulers::NotificationFromString>("notify")), "push (consumer told at once) or poll (consumer polls every --poll-period-s)")
      ("poll-period-s", po::value(&o->poll_period_s)->default_value(o->poll_period_s), "polling period in seconds (TF Serving's default is 1 s)")
      ("model-bytes", po::value(&o->model_bytes)->default_value(o->model_bytes), "model size, e.g. 600M (NT3.A), 1.7G (NT3.B), 4.7G (TC1)")
      ("cost-model", po::value(&o->cost_model), "measured cost samples (CSV tier,mode,phase,bytes,seconds or JSON) fitted per phase, instead of the preset")
      ("stall-s", po::value(&o->stall_s), "direct producer stall sigma per checkpoint, seconds (with --delay-s)")
      ("delay-s", po::value(&o->delay_s), "direct delivery delay delta per checkpoint, seconds (with --stall-s)")
      ("drift", po::value(&o->drift)->default_value(o->drift), "loss added per second a version has been served (rho)")
      ("price-per-slowdown-s", po::value(&o->price_per_slowdown_s)->default_value(o->price_per_slowdown_s), "CIL units charged per second of training slowdown in the objective")
      ("slowdown-budget-s", po::value(&o->slowdown_budget_s)->default_value(o->slowdown_budget_s), "upper bound on total stall, seconds (< 0 = none)");
  po::options_description loop("Closed loop (the online strategy)");
  loop.add_options()
      ("gate-z", po::value(&o->online.gate_z)->default_value(o->online.gate_z), "publish only when the candidate's measured loss beats the served version's by more than this many noise sd (of a difference of two measurements); 0 = no gate")
      ("change-threshold", po::value(&o->online.change_threshold)->default_value(o->online.change_threshold), "Page-Hinkley alarm threshold, in noise sd: lower reacts faster to drift and re-fits more often")
      ("change-allowance", po::value(&o->online.change_allowance)->default_value(o->online.change_allowance), "Page-Hinkley allowance per measurement, in noise sd")
      ("min-fit-points", po::value(&o->online.min_fit_points)->default_value(o->online.min_fit_points), "measurements of a regime before its curve is fitted (fewer: a flat forecast at their median)");
  desc->add(plan).add(req).add(cost).add(loop);
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

}  // namespace

StatusOr<PlanningContext> BuildPlanningContext(const LogOptions& log_options, const PlanningOptions& o) {
  PlanningContext ctx;
  VIPER_ASSIGN_OR_RETURN(ctx.log, ReadLog(log_options));

  schedulers::ScenarioOptions so;
  so.warmup_iterations = o.warmup;
  so.warmup_fraction = o.warmup_fraction;
  so.total_iterations = o.total_iterations;
  if (o.metric != "auto") {
    VIPER_ASSIGN_OR_RETURN(so.metric, predictor::LossMetricFromString(o.metric));
  }
  if (o.truth_metric != "auto") {
    VIPER_ASSIGN_OR_RETURN(so.truth_metric, predictor::LossMetricFromString(o.truth_metric));
  }
  VIPER_ASSIGN_OR_RETURN(so.predictor.selection, predictor::SelectionFromString(o.select));
  so.seconds_per_iteration = o.seconds_per_iteration;

  // Cost.
  VIPER_ASSIGN_OR_RETURN(uint64_t bytes, ParseBytes(o.model_bytes));
  if (bytes == 0) return InvalidArgumentError("--model-bytes must be > 0");
  ctx.model_bytes = static_cast<double>(bytes);
  if (o.mode != "sync" && o.mode != "async") {
    return InvalidArgumentError("--mode must be sync or async, got '" + o.mode + "'");
  }
  VIPER_ASSIGN_OR_RETURN(simulator::Tier tier, simulator::TierFromString(o.transport));
  VIPER_ASSIGN_OR_RETURN(schedulers::Notification notify, schedulers::NotificationFromString(o.notify));
  if ((o.stall_s >= 0) != (o.delay_s >= 0)) return InvalidArgumentError("--stall-s and --delay-s go together");
  if (!o.cost_model.empty()) {
    VIPER_ASSIGN_OR_RETURN(so.tier, TierFromSamples(o.cost_model, o.transport, o.mode, ctx.model_bytes));
    ctx.cost_source = "measured (" + o.cost_model + ")";
  } else if (o.stall_s >= 0) {
    // Direct sigma/delta: the stall is the snapshot, the rest of the delay the load.
    so.tier.model_size_bytes = 1.0;
    so.tier.snapshot_latency_s = o.stall_s;
    so.tier.transfer_latency_s = 0.0;
    so.tier.load_latency_s = std::max(0.0, o.delay_s - o.stall_s);
    so.tier.snapshot_bandwidth_bytes_per_s = so.tier.transfer_bandwidth_bytes_per_s =
        so.tier.load_bandwidth_bytes_per_s = std::numeric_limits<double>::max();
    so.tier.synchronous = false;
    ctx.cost_source = "direct (--stall-s/--delay-s)";
  } else {
    so.tier = simulator::PresetTierCost(tier, ctx.model_bytes, o.mode == "sync", notify, o.poll_period_s);
    ctx.cost_source = std::string(simulator::ToString(tier)) + " preset";
  }
  so.tier.notification = notify;
  so.tier.poll_period_s = o.poll_period_s;

  // Requests, drift, price, budget, spacing.
  schedulers::Problem& p = so.problem_template;
  so.request_interval_s = o.request_interval_s;  // 0 = tau, resolved by MakeScenario
  p.requests.seed = o.seed;
  if (!o.request_trace.empty() || o.arrivals == "trace") {
    if (o.request_trace.empty()) return InvalidArgumentError("--arrivals trace needs --request-trace FILE");
    p.requests.arrivals = schedulers::ArrivalProcess::kTrace;
    VIPER_ASSIGN_OR_RETURN(p.requests.trace_s, ReadTrace(o.request_trace));
  } else if (o.arrivals == "poisson") {
    p.requests.arrivals = schedulers::ArrivalProcess::kPoisson;
  } else if (o.arrivals != "fixed") {
    return InvalidArgumentError("--arrivals must be fixed, poisson or trace, got '" + o.arrivals + "'");
  }
  if (o.requests > 0) {
    p.requests.window = schedulers::WindowKind::kRequestCount;
    p.requests.request_count = o.requests;
  }
  p.drift_per_s = o.drift;
  p.price_per_slowdown_s = o.price_per_slowdown_s;
  if (o.slowdown_budget_s >= 0) p.slowdown_budget_s = o.slowdown_budget_s;
  p.min_spacing_iterations = o.min_spacing;
  so.online = o.online;

  VIPER_ASSIGN_OR_RETURN(schedulers::Scenario sc, schedulers::MakeScenario(ctx.log, so));
  static_cast<schedulers::Scenario&>(ctx) = std::move(sc);
  return ctx;
}

StatusOr<schedulers::Plan> PlanWith(const PlanningContext& ctx, schedulers::StrategyKind kind) {
  return schedulers::PlanStrategy(ctx, kind);
}

}  // namespace cli
}  // namespace viper
