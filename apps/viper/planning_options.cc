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
      ("metric", po::value(&o->metric)->default_value(o->metric), "inference-loss proxy: auto (val_loss when the warm-up has enough validation points, else train_loss), train_loss, val_loss")
      ("select", po::value(&o->select)->default_value(o->select)->notifier(CheckEnum<predictor::SelectionFromString>("select")), "predictor model selection: best-mse|validation|ensemble")
      ("seconds-per-iteration", po::value(&o->seconds_per_iteration)->default_value(o->seconds_per_iteration), "tau in seconds (0 = median from the log's wall times)")
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
  desc->add(plan).add(req).add(cost);
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
  VIPER_ASSIGN_OR_RETURN(auto samples, predictor::ReadCostSamples(path));
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
  const TrainingLog& log = ctx.log;
  const int64_t first = log.records.front().iteration;
  const int64_t last = log.records.back().iteration;

  // Warm-up and horizon.
  int64_t W = o.warmup;
  if (W <= 0) {
    if (!(o.warmup_fraction > 0 && o.warmup_fraction < 1)) {
      return InvalidArgumentError("--warmup-fraction must be in (0, 1), got " + std::to_string(o.warmup_fraction));
    }
    W = first + static_cast<int64_t>(std::llround(o.warmup_fraction * static_cast<double>(last - first)));
  }
  const int64_t N = o.total_iterations > 0 ? o.total_iterations : last;
  if (W >= N) {
    return InvalidArgumentError("the warm-up (" + std::to_string(W) + " iterations) must end before the last iteration N = " +
                                std::to_string(N) + " (" + log.source + " runs " + std::to_string(first) + ".." +
                                std::to_string(last) + ")");
  }
  if (W < first) {
    return InvalidArgumentError("the warm-up (" + std::to_string(W) + ") ends before the log's first iteration " +
                                std::to_string(first));
  }

  // Metric: validation loss when the warm-up holds enough validation points.
  ctx.predictor_options.selection = predictor::SelectionFromString(o.select).value();
  if (o.metric == "auto") {
    auto val = predictor::ExtractCurve(log, predictor::LossMetric::kValLoss);
    const bool enough = val.ok() && static_cast<int>(val->Prefix(static_cast<double>(W)).size()) >=
                                        ctx.predictor_options.min_points;
    ctx.metric = enough ? predictor::LossMetric::kValLoss : predictor::LossMetric::kTrainLoss;
  } else {
    VIPER_ASSIGN_OR_RETURN(ctx.metric, predictor::LossMetricFromString(o.metric));
  }
  VIPER_ASSIGN_OR_RETURN(ctx.points, predictor::ExtractCurve(log, ctx.metric));
  ctx.observed = ctx.points.Prefix(static_cast<double>(W));
  if (static_cast<int>(ctx.observed.size()) < ctx.predictor_options.min_points) {
    return InvalidArgumentError("the warm-up up to iteration " + std::to_string(W) + " holds " +
                                std::to_string(ctx.observed.size()) + " " + predictor::ToString(ctx.metric) +
                                " points; the predictor needs at least " +
                                std::to_string(ctx.predictor_options.min_points) + " (use a longer --warmup)");
  }

  // Iteration time: the MEAN over the log (wall-time span / iteration span),
  // not the median: validation and epoch-boundary pauses are part of the
  // training time the serving window and the checkpoint times see.
  const LogSummary summary = Summarize(log);
  double tau = o.seconds_per_iteration;
  if (tau <= 0) {
    if (summary.seconds_per_iteration && *summary.seconds_per_iteration > 0) {
      tau = *summary.seconds_per_iteration;
    } else {
      return InvalidArgumentError("cannot measure seconds per iteration from " + log.source +
                                  " (no wall-time column); pass --seconds-per-iteration");
    }
  }
  ctx.iterations_per_epoch = summary.iterations_per_epoch ? static_cast<int64_t>(*summary.iterations_per_epoch) : 0;

  // Per-iteration times W+1..N from the log's wall times, when it covers N.
  if (o.seconds_per_iteration <= 0 && N <= last) {
    std::vector<std::pair<int64_t, double>> wt;
    for (const auto& r : log.records) {
      if (r.wall_time_s) wt.emplace_back(r.iteration, *r.wall_time_s);
    }
    if (wt.size() >= 2 && wt.front().first <= W) {
      ctx.iteration_times_s.assign(static_cast<size_t>(N - W), tau);
      for (size_t j = 1; j < wt.size(); ++j) {
        const auto [i0, t0] = wt[j - 1];
        const auto [i1, t1] = wt[j];
        const double each = (t1 - t0) / static_cast<double>(i1 - i0);
        if (!(each >= 0)) continue;
        for (int64_t i = std::max(i0 + 1, W + 1); i <= std::min(i1, N); ++i) {
          ctx.iteration_times_s[static_cast<size_t>(i - W - 1)] = each;
        }
      }
    }
  }

  // Cost.
  VIPER_ASSIGN_OR_RETURN(uint64_t bytes, ParseBytes(o.model_bytes));
  ctx.model_bytes = static_cast<double>(bytes);
  if (bytes == 0) return InvalidArgumentError("--model-bytes must be > 0");
  if (o.mode != "sync" && o.mode != "async") {
    return InvalidArgumentError("--mode must be sync or async, got '" + o.mode + "'");
  }
  VIPER_ASSIGN_OR_RETURN(simulator::Tier tier, simulator::TierFromString(o.transport));
  VIPER_ASSIGN_OR_RETURN(schedulers::Notification notify, schedulers::NotificationFromString(o.notify));
  if ((o.stall_s >= 0) != (o.delay_s >= 0)) {
    return InvalidArgumentError("--stall-s and --delay-s go together");
  }
  if (!o.cost_model.empty()) {
    VIPER_ASSIGN_OR_RETURN(ctx.tier, TierFromSamples(o.cost_model, o.transport, o.mode, ctx.model_bytes));
    ctx.cost_source = "measured (" + o.cost_model + ")";
  } else if (o.stall_s >= 0) {
    // Direct sigma/delta: a synchronous tier whose stall is the snapshot and
    // whose delay adds the rest as load.
    ctx.tier.model_size_bytes = 1.0;
    ctx.tier.snapshot_latency_s = o.stall_s;
    ctx.tier.transfer_latency_s = 0.0;
    ctx.tier.transfer_bandwidth_bytes_per_s = std::numeric_limits<double>::max();
    ctx.tier.load_latency_s = std::max(0.0, o.delay_s - o.stall_s);
    ctx.tier.snapshot_bandwidth_bytes_per_s = ctx.tier.load_bandwidth_bytes_per_s =
        std::numeric_limits<double>::max();
    ctx.tier.synchronous = false;
    ctx.cost_source = "direct (--stall-s/--delay-s)";
  } else {
    ctx.tier = simulator::PresetTierCost(tier, ctx.model_bytes, o.mode == "sync", notify, o.poll_period_s);
    ctx.cost_source = std::string(simulator::ToString(tier)) + " preset";
  }
  ctx.tier.notification = notify;
  ctx.tier.poll_period_s = o.poll_period_s;

  // Problem.
  schedulers::Problem& p = ctx.problem;
  p.warmup_iterations = W;
  p.total_iterations = N;
  p.seconds_per_iteration = tau;
  p.cost = ctx.tier.ToCheckpointCost();
  p.requests.interval_s = o.request_interval_s > 0 ? o.request_interval_s : tau;
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
  VIPER_RETURN_IF_ERROR(p.Validate());

  // Truth (where the log covers N) and the prediction from the warm-up.
  if (N <= last) {
    VIPER_ASSIGN_OR_RETURN(ctx.truth, schedulers::InterpolateCurve(ctx.points, W, N));
  }
  VIPER_ASSIGN_OR_RETURN(auto fit, predictor::LearningCurvePredictor::Fit(ctx.observed, ctx.predictor_options));
  ctx.predictor_report = fit.summary().BriefReport();
  std::vector<double> pred = fit.PredictRange(W, N);
  for (double& v : pred) {
    if (!std::isfinite(v) || v < 0) v = 0;
  }
  ctx.predicted = schedulers::LossCurve(W, std::move(pred));
  return ctx;
}

StatusOr<schedulers::Plan> PlanWith(const PlanningContext& ctx, schedulers::StrategyKind kind) {
  schedulers::StrategyOptions so;
  so.iterations_per_epoch = ctx.iterations_per_epoch;
  if (kind == schedulers::StrategyKind::kOnline) {
    so.forecaster = schedulers::MakePredictorForecaster(ctx.predictor_options);
  }
  if (kind == schedulers::StrategyKind::kEpoch && so.iterations_per_epoch <= 0) {
    return InvalidArgumentError("the epoch strategy needs epochs in the log (" + ctx.log.source +
                                " has no epoch column)");
  }
  VIPER_ASSIGN_OR_RETURN(auto strategy, schedulers::MakeStrategy(kind, so));
  schedulers::PlanningInput input;
  input.problem = ctx.problem;
  input.predicted = ctx.predicted;
  input.observed = ctx.points;
  input.truth = ctx.truth;
  return strategy->MakePlan(input);
}

}  // namespace cli
}  // namespace viper
