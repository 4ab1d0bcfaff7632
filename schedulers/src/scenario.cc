#include "viper/schedulers/scenario.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <tuple>

#include "viper/schedulers/presets.h"

namespace viper {
namespace schedulers {
namespace {

// Seconds per iteration measured over the warm-up (the rows up to iteration
// W): the MEAN of its wall-time steps, not the median, since validation and
// epoch-boundary pauses are part of the training time the serving window and
// the checkpoint times see. FailedPrecondition naming the log when it has no
// wall-time column or fewer than two timed rows by W.
StatusOr<double> WarmupSecondsPerIteration(const TrainingLog& log, int64_t W) {
  TrainingLog warm;
  for (const auto& r : log.records) {
    if (r.iteration > W) break;
    warm.records.push_back(r);
  }
  const LogSummary ws = Summarize(warm);
  if (ws.seconds_per_iteration && *ws.seconds_per_iteration > 0) return *ws.seconds_per_iteration;
  bool any_time = false;
  for (const auto& r : log.records) any_time = any_time || r.wall_time_s.has_value();
  return FailedPreconditionError(log.source + (any_time ? ": fewer than two timed rows up to the end of the warm-up "
                                                          "(iteration " + std::to_string(W) +
                                                              "), so seconds per iteration cannot be measured"
                                                        : ": the log has no wall-time column (Keras and Lightning "
                                                          "logs never do)"));
}

// The shortest warm-up that holds `need` points of `curve`, in words ("to
// iteration 123 (25% of the log)"); empty when the whole curve is shorter.
std::string WarmupFor(const predictor::CurveData& curve, size_t need, int64_t first, int64_t last) {
  if (curve.size() < need) return "";
  const double it = curve.iterations[need - 1];
  const double pct =
      last > first ? std::ceil(100.0 * (it - static_cast<double>(first)) / static_cast<double>(last - first)) : 100;
  std::ostringstream os;
  os << "to iteration " << static_cast<int64_t>(it);
  if (pct < 100) os << " (" << std::max(1.0, pct) << "% of the log)";
  return os.str();
}

}  // namespace

TierCost ToTierCost(const CostSource& source) {
  if (const auto* p = std::get_if<PresetCost>(&source)) {
    return PresetTierCost(p->tier, p->model_size_bytes, p->synchronous, p->notification, p->poll_period_s);
  }
  if (const auto* m = std::get_if<MeasuredCost>(&source)) {
    constexpr double kUnbounded = std::numeric_limits<double>::max();
    TierCost t;
    t.model_size_bytes = 1.0;
    t.snapshot_latency_s = m->stall_s;
    t.transfer_latency_s = 0.0;
    t.load_latency_s = std::max(0.0, m->delay_s - m->stall_s);
    t.snapshot_bandwidth_bytes_per_s = t.transfer_bandwidth_bytes_per_s = t.load_bandwidth_bytes_per_s = kUnbounded;
    // A live run's log carries its keep copies in the iterations' times.
    t.keep_copy_bandwidth_bytes_per_s = kUnbounded;
    t.synchronous = false;
    t.notification = m->notification;
    t.poll_period_s = m->poll_period_s;
    return t;
  }
  return std::get<TierCost>(source);
}

bool ScenarioOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (warmup_iterations < 0) return fail("warmup_iterations must be >= 0");
  if (warmup_iterations == 0 && !(warmup_fraction > 0 && warmup_fraction < 1)) {
    return fail("warmup_fraction must be in (0, 1), got " + std::to_string(warmup_fraction));
  }
  if (total_iterations < 0) return fail("total_iterations must be >= 0");
  if (!(seconds_per_iteration >= 0) || !std::isfinite(seconds_per_iteration)) {
    return fail("seconds_per_iteration must be >= 0 (0 = from the log)");
  }
  if (!(request_interval_s >= 0) || !std::isfinite(request_interval_s)) {
    return fail("request_interval_s must be >= 0 (0 = one request per iteration), got " +
                std::to_string(request_interval_s));
  }
  if (!predictor.IsValid(error)) return false;
  if (const auto* m = std::get_if<MeasuredCost>(&tier)) {
    if (!(m->stall_s >= 0) || !std::isfinite(m->stall_s)) return fail("tier: stall_s must be >= 0 seconds");
    if (!(m->delay_s >= 0) || !std::isfinite(m->delay_s)) return fail("tier: delay_s must be >= 0 seconds");
  }
  if (!ToTierCost(tier).IsValid(error)) return false;
  if (!online.IsValid(error)) return false;
  if (!std::isfinite(remeasure_s))
    return fail("remeasure_s must be a number of seconds (negative = the log's)");
  return true;
}

double ValidationPauseSeconds(const TrainingLog& log) {
  std::vector<double> plain, validating;
  for (size_t j = 1; j < log.records.size(); ++j) {
    const LogRecord& a = log.records[j - 1];
    const LogRecord& b = log.records[j];
    if (b.iteration != a.iteration + 1 || !a.wall_time_s || !b.wall_time_s) continue;
    const double dt = *b.wall_time_s - *a.wall_time_s;
    if (!std::isfinite(dt) || dt < 0) continue;
    (b.val_loss ? validating : plain).push_back(dt);
  }
  if (plain.empty() || validating.empty()) return 0.0;
  auto median = [](std::vector<double>& v) {
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
  };
  return std::max(0.0, median(validating) - median(plain));
}

namespace {

// The table's surfaces, checked against the log: it must cover [W, N], and
// its diagonal must be the log's own measurements where both have them (a
// table of another run would judge on someone else's model).
Status AttachStaleness(const TrainingLog& log, const StalenessTable& table, Scenario* sc) {
  const int64_t W = sc->problem.warmup_iterations, N = sc->problem.total_iterations;
  VIPER_ASSIGN_OR_RETURN(auto truth, StalenessSurface::Make(table, StalenessSample::kTest));
  VIPER_ASSIGN_OR_RETURN(auto observed, StalenessSurface::Make(table, StalenessSample::kValidation));
  VIPER_RETURN_IF_ERROR(truth.CheckCovers(W, N));
  size_t r = 0;
  for (const auto& row : table.records) {
    if (row.version_iteration != row.traffic_iteration) continue;
    while (r < log.records.size() && log.records[r].iteration < row.version_iteration) ++r;
    if (r == log.records.size()) break;
    const LogRecord& rec = log.records[r];
    if (rec.iteration != row.version_iteration) continue;
    auto differs = [](std::optional<double> a, double b) {
      return a && std::fabs(*a - b) > 1e-5 * std::max(1.0, std::fabs(b));
    };
    for (auto [name, logged, tabled] : {std::tuple{"val_loss", rec.val_loss, row.val_loss},
                                        std::tuple{"test_loss", rec.test_loss, row.test_loss}}) {
      if (differs(logged, tabled)) {
        char buf[160];
        std::snprintf(buf, sizeof(buf), "at iteration %lld the log's %s is %.9g but the table's diagonal says %.9g",
                      static_cast<long long>(rec.iteration), name, *logged, tabled);
        return InvalidArgumentError(table.source + " is not a staleness table of " + log.source + ": " + buf +
                                    " (the diagonal v = t must be the log's own measurement)");
      }
    }
  }
  sc->staleness_truth = std::make_shared<const StalenessSurface>(std::move(truth));
  sc->staleness_observed = std::make_shared<const StalenessSurface>(std::move(observed));
  sc->staleness_source = table.source;
  return Status::Ok();
}

}  // namespace

StatusOr<Scenario> MakeScenario(const TrainingLog& log, const ScenarioOptions& o) {
  std::string error;
  if (!o.IsValid(&error)) return InvalidArgumentError("scenario options: " + error);
  if (log.records.empty()) return InvalidArgumentError(log.source + ": the log is empty");
  Scenario sc;
  sc.source = log.source;
  sc.predictor_options = o.predictor;
  sc.online = o.online;
  const int64_t first = log.records.front().iteration;
  const int64_t last = log.records.back().iteration;

  int64_t W = o.warmup_iterations;
  if (W <= 0) W = first + static_cast<int64_t>(std::llround(o.warmup_fraction * static_cast<double>(last - first)));
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
  // `online` observes it when the warm-up holds any (Scenario::online_metric).
  std::optional<predictor::CurveData> online_val;
  if (o.metric) {
    sc.metric = *o.metric;
  } else {
    auto val = predictor::ExtractCurve(log, predictor::LossMetric::kValLoss, /*keep_diverged=*/true);
    const size_t in_warmup = val.ok() ? val->Prefix(static_cast<double>(W)).size() : 0;
    const bool enough = static_cast<int>(in_warmup) >= o.predictor.min_points;
    // An evaluation-only log (no training loss at all) plans on its validation series.
    sc.metric = enough || log.TrainLossPoints() == 0 ? predictor::LossMetric::kValLoss
                                                     : predictor::LossMetric::kTrainLoss;
    if (sc.metric == predictor::LossMetric::kTrainLoss && in_warmup > 0) online_val = std::move(*val);
  }
  if (sc.metric == predictor::LossMetric::kTestLoss) {
    return InvalidArgumentError("the planning metric cannot be test_loss: that is the served truth the schedules "
                                "are judged on (planners observe train_loss or val_loss)");
  }
  // A diverged model's loss stays +inf (LogReader's --non-finite diverged):
  // the judge charges it, `online` observes it and never publishes it; the
  // warm-up the predictor fits must be free of it.
  VIPER_ASSIGN_OR_RETURN(sc.points, predictor::ExtractCurve(log, sc.metric, /*keep_diverged=*/true));
  // The truth: test_loss when the log has it, else the planning metric.
  if (o.truth_metric) {
    sc.truth_metric = *o.truth_metric;
  } else {
    sc.truth_metric = predictor::ExtractCurve(log, predictor::LossMetric::kTestLoss, true).ok()
                          ? predictor::LossMetric::kTestLoss
                          : sc.metric;
  }
  sc.separate_truth = sc.truth_metric != sc.metric;
  sc.online_metric = online_val ? predictor::LossMetric::kValLoss : sc.metric;
  if (online_val) sc.online_points = std::move(*online_val);
  sc.observed = sc.points.Prefix(static_cast<double>(W));
  for (size_t i = 0; i < sc.observed.size(); ++i) {
    if (std::isinf(sc.observed.losses[i])) {
      return InvalidArgumentError(log.source + ": the run diverged during the warm-up: its " +
                                  predictor::ToString(sc.metric) + " is not finite at iteration " +
                                  std::to_string(static_cast<int64_t>(sc.observed.iterations[i])) +
                                  " (the warm-up ends at " + std::to_string(W) +
                                  "); there is no model to plan from: give a warm-up that ends before it");
    }
  }
  if (static_cast<int>(sc.observed.size()) < o.predictor.min_points) {
    const size_t need = static_cast<size_t>(o.predictor.min_points);
    const std::string longer = WarmupFor(sc.points, need, first, last);
    return InvalidArgumentError(
        "the warm-up (up to iteration " + std::to_string(W) + ") of " + log.source + " holds " +
        std::to_string(sc.observed.size()) + " " + predictor::ToString(sc.metric) +
        " points; fitting the learning curve needs at least " + std::to_string(need) +
        (longer.empty() ? " and the whole log has only " + std::to_string(sc.points.size())
                        : ": give a longer warm-up (" + longer + ")") +
        (Summarize(log).epochs && sc.points.size() < 4 * need
             ? "; an epoch-level log has one point per epoch, so it needs at least " + std::to_string(need) +
                   " epochs in the warm-up"
             : ""));
  }

  // Iteration time: the MEAN over the warm-up, not the median: validation and
  // epoch-boundary pauses are part of the training time the serving window
  // and the checkpoint times see. Only the warm-up: the planners must not
  // learn from later rows.
  const LogSummary summary = Summarize(log);
  double tau = o.seconds_per_iteration;
  if (tau <= 0) {
    VIPER_ASSIGN_OR_RETURN(tau, WarmupSecondsPerIteration(log, W));
  }
  sc.iterations_per_epoch = summary.iterations_per_epoch ? static_cast<int64_t>(*summary.iterations_per_epoch) : 0;

  // Per-iteration times W+1..N from the log's wall times (spread evenly
  // between logged rows), when the log covers N.
  if (o.log_iteration_times && o.seconds_per_iteration <= 0 && N <= last) {
    std::vector<std::pair<int64_t, double>> wt;
    for (const auto& r : log.records) {
      if (r.wall_time_s) wt.emplace_back(r.iteration, *r.wall_time_s);
    }
    if (wt.size() >= 2 && wt.front().first <= W) {
      sc.iteration_times_s.assign(static_cast<size_t>(N - W), tau);
      for (size_t j = 1; j < wt.size(); ++j) {
        const auto [i0, t0] = wt[j - 1];
        const auto [i1, t1] = wt[j];
        const double each = (t1 - t0) / static_cast<double>(i1 - i0);
        if (!(each >= 0)) continue;
        for (int64_t i = std::max(i0 + 1, W + 1); i <= std::min(i1, N); ++i) {
          sc.iteration_times_s[static_cast<size_t>(i - W - 1)] = each;
        }
      }
    }
  }

  sc.tier = ToTierCost(o.tier);
  Problem& p = sc.problem;
  p = o.problem_template;
  p.warmup_iterations = W;
  p.total_iterations = N;
  p.seconds_per_iteration = tau;
  p.cost = sc.tier.ToCheckpointCost();
  p.cost.remeasure_s = o.remeasure_s >= 0 ? o.remeasure_s : ValidationPauseSeconds(log);
  p.cost.remeasure_beside = o.remeasure_beside;
  p.requests.interval_s = o.request_interval_s > 0 ? o.request_interval_s : tau;
  VIPER_RETURN_IF_ERROR(p.Validate());

  if (N <= last) {
    if (sc.separate_truth) {
      VIPER_ASSIGN_OR_RETURN(auto truth_points, predictor::ExtractCurve(log, sc.truth_metric, true));
      VIPER_ASSIGN_OR_RETURN(sc.truth, InterpolateCurve(truth_points, W, N));
    } else {
      VIPER_ASSIGN_OR_RETURN(sc.truth, InterpolateCurve(sc.points, W, N));
    }
  }
  if (sc.truth && std::isinf(sc.truth->at(W))) {
    return InvalidArgumentError(log.source + ": the model at the end of the warm-up (iteration " + std::to_string(W) +
                                ") diverged: its " + predictor::ToString(sc.truth_metric) +
                                " is not finite, so no version could be served: give a shorter warm-up");
  }
  if (o.staleness) VIPER_RETURN_IF_ERROR(AttachStaleness(log, *o.staleness, &sc));
  VIPER_ASSIGN_OR_RETURN(auto fit, predictor::LearningCurvePredictor::Fit(sc.observed, o.predictor));
  sc.predictor_report = fit.summary().BriefReport();
  std::vector<double> pred = fit.PredictRange(W, N);
  for (double& v : pred) {
    if (!std::isfinite(v) || v < 0) v = 0;
  }
  sc.predicted = LossCurve(W, std::move(pred));
  return sc;
}

std::vector<double> TruthElapsed(const Scenario& sc) {
  std::vector<double> e;
  if (sc.iteration_times_s.empty()) return e;
  e.reserve(sc.iteration_times_s.size() + 1);
  e.push_back(0.0);
  for (double t : sc.iteration_times_s) e.push_back(e.back() + t);
  return e;
}

std::optional<ReplayedPace> MeasureReplayedPace(const Scenario& sc) {
  const std::vector<double>& t = sc.iteration_times_s;
  if (t.empty() || !(sc.problem.seconds_per_iteration > 0)) return std::nullopt;
  double total = 0;
  for (double x : t) total += x;
  if (!(total > 0)) return std::nullopt;
  std::vector<double> sorted = t;
  const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), mid, sorted.end());
  const double slow = 10.0 * *mid;
  double slow_total = 0;
  for (double x : t) {
    if (x > slow) slow_total += x;
  }
  ReplayedPace pace;
  pace.seconds_per_iteration = total / static_cast<double>(t.size());
  pace.over_tau = pace.seconds_per_iteration / sc.problem.seconds_per_iteration;
  pace.slow_share = slow_total / total;
  return pace;
}

bool IrregularPace(const ReplayedPace& pace) {
  return pace.over_tau > 1.5 || pace.over_tau < 2.0 / 3.0 || pace.slow_share > 0.5;
}

std::string DescribeReplayedPace(const ReplayedPace& pace) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "replayed clock after the warm-up: %.4g s/iteration, %.2fx tau; %.0f%% of it in iterations over 10x "
                "the median one",
                pace.seconds_per_iteration, pace.over_tau, 100.0 * pace.slow_share);
  std::string s = buf;
  if (IrregularPace(pace)) {
    s += " (an irregular pace, e.g. a loaded machine: the strategies plan on tau, online on the pace it has "
         "measured so far, the judge replays these times, and under the wall clock the traffic moves on through "
         "every slow stretch)";
  }
  return s;
}

ObservationKind OnlineObservationKind(const Scenario& sc) {
  return sc.online_metric == predictor::LossMetric::kTrainLoss ? ObservationKind::kTraining
                                                               : ObservationKind::kValidation;
}

const predictor::CurveData& OnlinePoints(const Scenario& sc) {
  return sc.online_metric == sc.metric ? sc.points : sc.online_points;
}

ForecasterFactory OnlineForecasters(const Scenario& sc, const OnlinePlanner::Options& online) {
  predictor::LearningCurvePredictor::Options o = sc.predictor_options;
  o.min_points = std::max(5, std::min(o.min_points, online.min_fit_points));
  return PredictorForecasterFactory(o);
}

Problem BoundProblem(const Scenario& sc) {
  Problem p = sc.problem;
  p.elapsed_s = TruthElapsed(sc);
  return p;
}

StatusOr<Plan> PlanStrategy(const Scenario& sc, StrategyKind kind) {
  StrategyOptions so;
  so.iterations_per_epoch = sc.iterations_per_epoch;
  if (kind == StrategyKind::kOnline) so.forecasters = OnlineForecasters(sc, sc.online);
  so.online = sc.online;
  if (kind == StrategyKind::kEpoch && so.iterations_per_epoch <= 0) {
    return InvalidArgumentError("the epoch strategy needs epochs in the log (" + sc.source + " has no epoch column)");
  }
  VIPER_ASSIGN_OR_RETURN(auto strategy, MakeStrategy(kind, so));
  PlanningInput input;
  input.problem = sc.problem;
  input.predicted = sc.predicted;
  // online observes what a live producer measures (Scenario::online_metric);
  // the static strategies only read the warm-up's points (Viper's greedy).
  const bool online = kind == StrategyKind::kOnline;
  input.observed = online ? OnlinePoints(sc) : sc.points;
  input.observed_kind = online                                           ? OnlineObservationKind(sc)
                        : sc.metric == predictor::LossMetric::kTrainLoss ? ObservationKind::kTraining
                                                                         : ObservationKind::kValidation;
  input.truth = sc.truth;
  input.truth_staleness = sc.staleness_truth;
  input.truth_elapsed_s = TruthElapsed(sc);
  if (input.observed_kind == ObservationKind::kValidation) input.observed_staleness = sc.staleness_observed;
  return strategy->MakePlan(input);
}

}  // namespace schedulers
}  // namespace viper
