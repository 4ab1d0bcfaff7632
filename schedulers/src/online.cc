#include "viper/schedulers/online.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <limits>
#include <utility>

#include "online_returns.h"

namespace viper {
namespace schedulers {
namespace {

using internal::Median;

// The j in (from, to] that splits v[from..to] into two runs of least total
// squared deviation from their means: the first index of the second level.
size_t BestSplit(const std::vector<double>& v, size_t from, size_t to) {
  size_t best = to;
  double best_cost = std::numeric_limits<double>::infinity();
  double s_all = 0, q_all = 0;
  for (size_t i = from; i <= to; ++i) {
    s_all += v[i];
    q_all += v[i] * v[i];
  }
  double s = 0, q = 0;
  for (size_t j = from + 1; j <= to; ++j) {
    s += v[j - 1];
    q += v[j - 1] * v[j - 1];
    const double n1 = static_cast<double>(j - from), n2 = static_cast<double>(to - j + 1);
    const double cost = (q - s * s / n1) + ((q_all - q) - (s_all - s) * (s_all - s) / n2);
    if (cost < best_cost) {
      best_cost = cost;
      best = j;
    }
  }
  return best;
}

class PredictorForecaster : public Forecaster {
 public:
  explicit PredictorForecaster(predictor::LearningCurvePredictor::Options options) : options_(std::move(options)) {}

  StatusOr<LossCurve> Forecast(const predictor::CurveData& observed, int64_t first, int64_t last) override {
    if (!predictor_) {
      VIPER_ASSIGN_OR_RETURN(auto p, predictor::LearningCurvePredictor::Fit(observed, options_));
      predictor_.emplace(std::move(p));
      fitted_points_ = observed.size();
    } else if (observed.size() > fitted_points_) {
      // On failure the predictor keeps its previous fit: forecasting goes on with it.
      if (predictor_->Refit(observed).ok()) fitted_points_ = observed.size();
    }
    std::vector<double> v = predictor_->PredictRange(first, last);
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) {
        return FailedPreconditionError("the fitted learning curve is not finite at iteration " +
                                       std::to_string(first + static_cast<int64_t>(i)));
      }
      v[i] = std::max(0.0, v[i]);
    }
    return LossCurve(first, std::move(v));
  }

 private:
  predictor::LearningCurvePredictor::Options options_;
  std::optional<predictor::LearningCurvePredictor> predictor_;
  size_t fitted_points_ = 0;
};

}  // namespace

std::unique_ptr<Forecaster> MakePredictorForecaster(const predictor::LearningCurvePredictor::Options& options) {
  return std::make_unique<PredictorForecaster>(options);
}

ForecasterFactory PredictorForecasterFactory(const predictor::LearningCurvePredictor::Options& options) {
  return [options]() { return MakePredictorForecaster(options); };
}

std::string OnlinePlanner::Summary::BriefReport(int64_t checkpoints) const {
  std::string s = "online: " + std::to_string(checkpoints) + " checkpoints, " + std::to_string(replans) +
                  " re-plans, " + std::to_string(refits) + (refits == 1 ? " fit, " : " fits, ") +
                  std::to_string(changes) + (changes == 1 ? " change" : " changes");
  if (!change_points.empty()) {
    s += " (at";
    for (size_t i = 0; i < change_points.size() && i < 6; ++i) s += " " + std::to_string(change_points[i]);
    if (change_points.size() > 6) s += " ...";
    s += ")";
  }
  s += ", " + std::to_string(gated) + " gated";
  if (served_measurements > 0) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), ", served version re-measured %lld times (decay up to %.3g/s)",
                  static_cast<long long>(served_measurements), max_decay_per_s);
    s += buf;
  }
  if (republished > 0) s += ", " + std::to_string(republished) + " re-published a kept version";
  if (anticipated > 0) s += " (" + std::to_string(anticipated) + " ahead of a predicted return)";
  if (anticipation_failed > 0) s += ", " + std::to_string(anticipation_failed) + " predicted returns did not come";
  if (ramp_holds > 0) s += ", " + std::to_string(ramp_holds) + " held on a young ramp";
  if (switch_holds > 0) {
    s += ", " + std::to_string(switch_holds) + " held until the producer trains through a switch";
  }
  if (wait_guards > 0) s += ", " + std::to_string(wait_guards) + " published after waiting too long";
  if (max_lag_price > 0) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), ", a stall's lag priced up to %.3g per second", max_lag_price);
    s += buf;
  }
  if (cost_updates > 0) s += ", cost re-measured " + std::to_string(cost_updates) + " times";
  if (pace_updates > 0) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), ", pace re-measured (%.3g ms per iteration at the end)", 1e3 * pace_s);
    s += buf;
  }
  if (diverged > 0) s += ", " + std::to_string(diverged) + " diverged measurements (never published)";
  return s;
}

OnlinePlanner::OnlinePlanner(Problem problem, ForecasterFactory forecasters, Options options)
    : problem_(std::move(problem)),
      forecasters_(std::move(forecasters)),
      options_(std::move(options)),
      returns_(std::make_unique<internal::ReturnPredictor>(options_.anticipate_returns &&
                                                            options_.keep_versions > 0)) {}
OnlinePlanner::OnlinePlanner(OnlinePlanner&&) noexcept = default;
OnlinePlanner& OnlinePlanner::operator=(OnlinePlanner&&) noexcept = default;
OnlinePlanner::~OnlinePlanner() = default;

bool OnlinePlanner::anticipating() const { return returns_->holding(); }

Status OnlinePlanner::Observe(int64_t iteration, double loss, ObservationKind kind) {
  if (iteration < last_iteration_) {
    return InvalidArgumentError("observation at iteration " + std::to_string(iteration) + " after iteration " +
                                std::to_string(last_iteration_) + ": observations must come in iteration order");
  }
  last_iteration_ = iteration;
  ++summary_.observations;
  if (kind != options_.metric) return Status::Ok();  // training losses next to a validation metric: counted only
  if (!std::isfinite(loss)) {
    // NaN or inf: the model diverged: no measurement to forecast or gate on, so no
    // checkpoint here (decisions are taken at measurements); a training
    // average that would hold it starts afresh.
    ++summary_.diverged;
    smoothing_.clear();
    if (measured_now_ && *measured_now_ == iteration) measured_now_.reset();
    return Status::Ok();
  }
  double value = loss;
  if (kind == ObservationKind::kTraining) {
    smoothing_.push_back(loss);
    if (static_cast<int>(smoothing_.size()) < options_.training_smoothing) return Status::Ok();
    value = 0;
    for (double x : smoothing_) value += x;
    value /= static_cast<double>(smoothing_.size());
    smoothing_.clear();
  }
  if (kind == ObservationKind::kValidation && CopiesModelAt(iteration)) copies_.push_back(iteration);
  const double x = static_cast<double>(iteration);
  if (!measured_.iterations.empty() && measured_.iterations.back() == x) {
    measured_.losses.back() = value;  // a repeated measurement replaces the earlier one
  } else {
    measured_.iterations.push_back(x);
    measured_.losses.push_back(value);
  }
  measured_now_ = iteration;
  const double W = static_cast<double>(problem_.warmup_iterations);
  const size_t n = measured_.size();
  if (x <= W) {
    served_loss_ = value;  // version 0 is the warm-up model
  } else if (n >= 2 && measured_.iterations[n - 2] < W && taken_.empty() &&
             summary_.served_measurements == 0) {
    // The warm-up model (iteration W) lies between the last measurement
    // before it and this first one after it: its level is read between the
    // two, not at the older one alone. On a falling curve the older one sits
    // above it by the progress made since, and a candidate a few iterations
    // past W passed for better by that much: held-out n-collapse pfs/train at
    // a 10% warm-up published the model two iterations after W on it and paid
    // a pfs stall for nothing (bench/README.md, "Thirty-first session"). A
    // re-measurement of the served version (ObserveServed) replaces it.
    const double a = measured_.iterations[n - 2];
    served_loss_ = measured_.losses[n - 2] + (W - a) / (x - a) * (value - measured_.losses[n - 2]);
  }
  return Status::Ok();
}

double OnlinePlanner::Noise() const {
  const size_t n = measured_.size();
  const size_t from = std::max(regime_begin_, n > static_cast<size_t>(options_.noise_window)
                                                  ? n - static_cast<size_t>(options_.noise_window)
                                                  : size_t{0});
  std::vector<double> level(measured_.losses.begin() + static_cast<std::ptrdiff_t>(from), measured_.losses.end());
  const double mid = std::max(std::fabs(Median(level)), 1e-12);
  if (n - from >= static_cast<size_t>(options_.min_noise_points)) {
    std::vector<double> d;
    for (size_t i = from + 1; i < n; ++i) d.push_back(measured_.losses[i] - measured_.losses[i - 1]);
    const double md = Median(d);
    for (double& x : d) x = std::fabs(x - md);
    const double sigma = 1.4826 * Median(d) / std::sqrt(2.0);
    return std::max(sigma, 1e-9 * mid);
  }
  if (previous_relative_noise_ > 0) return previous_relative_noise_ * mid;
  return 0.05 * mid;  // nothing to go by yet: 5% of the level
}

Status OnlinePlanner::EnsureForecast() {
  const size_t count = measured_.size() - regime_begin_;
  if (count < static_cast<size_t>(options_.min_fit_points)) return Fit();  // the flat placeholder
  if (forecast_ && fitted_points_ > 0 &&
      static_cast<double>(count) < options_.refit_growth * static_cast<double>(fitted_points_)) {
    return Status::Ok();
  }
  return Fit();
}

void OnlinePlanner::SetFlatForecast(double level) {
  const int64_t W = problem_.warmup_iterations, N = problem_.total_iterations;
  forecast_ = LossCurve(W, std::vector<double>(static_cast<size_t>(N - W + 1), std::max(0.0, level)));
}

Status OnlinePlanner::Fit() {
  const int64_t W = problem_.warmup_iterations, N = problem_.total_iterations;
  const size_t begin = regime_begin_, count = measured_.size() - regime_begin_;
  if (count < static_cast<size_t>(options_.min_fit_points)) {
    // Too few points since the change: flat at their median (never a decrease that is not there).
    SetFlatForecast(Median(std::vector<double>(measured_.losses.begin() + static_cast<std::ptrdiff_t>(begin),
                                               measured_.losses.end())));
    fitted_points_ = 0;
    return Status::Ok();
  }
  if (!forecaster_) {
    if (!forecasters_) return FailedPreconditionError("the online planner has no forecaster");
    forecaster_ = forecasters_();
  }
  // A regime after a change is fitted in its own coordinates: its first point
  // sits one measurement gap after the origin, as a run's first point does.
  int64_t shift = 0;
  if (begin > 0) {
    const double gap = measured_.iterations[begin] - measured_.iterations[begin - 1];
    shift = static_cast<int64_t>(measured_.iterations[begin] - std::max(1.0, gap));
  }
  predictor::CurveData pts;
  for (size_t i = begin; i < measured_.size(); ++i) {
    pts.iterations.push_back(measured_.iterations[i] - static_cast<double>(shift));
    pts.losses.push_back(measured_.losses[i]);
  }
  ++summary_.refits;
  fitted_points_ = count;
  auto curve = forecaster_->Forecast(pts, W - shift, N - shift);
  if (!curve.ok() || curve->size() != static_cast<size_t>(N - W + 1)) {
    // No usable fit: flat at the latest points' median until the next fit.
    SetFlatForecast(Median(std::vector<double>(
        measured_.losses.end() - std::min<std::ptrdiff_t>(5, static_cast<std::ptrdiff_t>(count)), measured_.losses.end())));
    return Status::Ok();
  }
  forecast_ = LossCurve(W, curve->losses());
  return Status::Ok();
}

StatusOr<bool> OnlinePlanner::Decide(int64_t now, double v) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t W = problem_.warmup_iterations;
  const size_t idx = measured_.size() - 1;
  // 1. Noise of the current regime (recomputed below if a change starts a new one).
  double sigma = Noise();
  PlaceSwitchSeenPartWay(idx);
  if (!own_clock_.empty()) PlaceSwitchesOnClock();
  // 2. Change detection on the standardised residual against the fitted
  // forecast (not against a young regime's flat placeholder).
  bool switched = false;
  if (forecast_ && fitted_points_ > 0 && idx > regime_begin_) {
    auto step = [&](PageHinkley* ph, size_t i) {
      const double r = (measured_.losses[i] - forecast_->at(static_cast<int64_t>(measured_.iterations[i]))) / sigma;
      const double up0 = ph->up, down0 = ph->down;
      ph->up = std::max(0.0, ph->up + r - options_.change_allowance);
      ph->down = std::max(0.0, ph->down - r - options_.change_allowance);
      if (up0 == 0 && ph->up > 0) ph->up_start = static_cast<int64_t>(i);
      if (down0 == 0 && ph->down > 0) ph->down_start = static_cast<int64_t>(i);
      return ph->up > options_.change_threshold || ph->down > options_.change_threshold;
    };
    if (step(&ph_, idx)) {
      const bool up = ph_.up > options_.change_threshold;
      const size_t from = static_cast<size_t>(
          std::max<int64_t>(static_cast<int64_t>(regime_begin_) + 1, up ? ph_.up_start : ph_.down_start));
      // A fit made on fewer points may just be stale: re-fit on the whole
      // regime and replay the test from where the alarm began. Only data
      // that the re-fitted curve cannot explain is a change.
      bool change = true;
      if (fitted_points_ < measured_.size() - regime_begin_) {
        VIPER_RETURN_IF_ERROR(Fit());
        if (fitted_points_ > 0) {
          PageHinkley replay;
          change = false;
          for (size_t i = from; i <= idx && !change; ++i) change = step(&replay, i);
          if (!change) ph_ = replay;
        }
      }
      if (change) {
        switched = true;
        std::vector<double> old(measured_.losses.begin() + static_cast<std::ptrdiff_t>(regime_begin_),
                                measured_.losses.begin() + static_cast<std::ptrdiff_t>(idx));
        // A regime that held a transition (the model re-learning after a
        // switch, a switch seen part-way) measures its own noise far above a
        // measurement's: the young regime takes the smallest relative noise
        // any ended regime showed.
        const double relative_noise = sigma / std::max(std::fabs(Median(old)), 1e-12);
        previous_relative_noise_ = previous_relative_noise_ > 0 ? std::min(previous_relative_noise_, relative_noise)
                                                                : relative_noise;
        // The change point: where the alarming sum left zero is only a bound;
        // the best two-level split of the values from there on places it.
        const double ended_from = measured_.iterations[regime_begin_];
        regime_begin_ = BestSplit(measured_.losses, from > 0 ? from - 1 : 0, idx);
        if (regime_begin_ > 0) {
          // The regime's end as kept: its latest copy at or before its last point.
          const auto last = static_cast<int64_t>(measured_.iterations[regime_begin_ - 1]);
          const auto c = std::upper_bound(copies_.begin(), copies_.end(), last);
          if (c != copies_.begin() && static_cast<double>(*(c - 1)) >= ended_from) regime_ends_.push_back(*(c - 1));
        }
        ph_ = PageHinkley();
        forecaster_.reset();
        forecast_.reset();
        fitted_points_ = 0;
        ++summary_.changes;
        summary_.change_points.push_back(static_cast<int64_t>(measured_.iterations[regime_begin_]));
        // A switch unless the served model stayed across the change (the
        // producer's own data moved, not the traffic), and no kept model
        // lost more than half its loss: one trained across the last switch
        // (a label swap's, on both labellings) can stay while the
        // returning domain's kept model falls. Read as the producer's own,
        // that swap back went unrecorded and the next return was predicted
        // a whole period on (h17's t-swaps500 on pfs with a request window,
        // 87.6% over the oracle; recorded, 39.0%; bench/README.md,
        // "Fifty-third session").
        if (!ServedStayedAcross(regime_begin_, sigma) || KeptFell()) AddSwitch(regime_begin_);
        sigma = Noise();  // of the new regime
        // The served version's excess across the change is a step, not a
        // rate at which a new version will decay: the wall clock's lag
        // price is measured afresh from the served level now (else a step
        // would price every later stall as if each new version lost that
        // much per second, and hold the fresh model back).
        regime_decay_points_.clear();
        regime_reference_.reset();
        if (served_loss_ && served_by_measurement_.size() == measured_.size() &&
            std::isfinite(served_by_measurement_.back())) {
          regime_reference_ = std::make_pair(now, *served_loss_);
        }
      }
    }
  }
  // A switch the producer's own loss may not show: the served model,
  // re-measured at this measurement and measured at the one before (served,
  // kept or the producer's own there), jumped by
  // more than the change threshold in noise sd of a difference. A recurring
  // domain the producer never forgets moves the old domain's served model,
  // not the candidate (bench/README.md, "Eighteenth session"). Nor may the
  // served model show it when it was trained across the last switch: then
  // a kept model of the returning domain does, losing more than half its
  // loss (set 17's t-swaps500 on host missed the swap back so, and counted
  // every later regime one off; bench/README.md, "Forty-fifth session").
  if (!switched && (ServedJumped(sigma) || KeptFell())) AddSwitch(idx);
  VIPER_RETURN_IF_ERROR(EnsureForecast());
  // 3. Re-plan from now (certified within replan_gap of the optimum), the
  // candidate at its measured loss.
  std::vector<double> curve = forecast_->losses();
  curve[static_cast<size_t>(now - W)] = v;
  PlanStart start;
  start.checkpoints_taken = static_cast<int64_t>(taken_.size());
  start.last_checkpoint = taken_.empty() ? W : taken_.back();
  start.earliest_iteration = now;
  start.served_loss = served_loss_;
  Problem problem = problem_;
  PriceStaleness(now, v, &problem, &start);
  ++summary_.replans;
  const int64_t gap =
      idx > 0
          ? std::max<int64_t>(1, static_cast<int64_t>(measured_.iterations[idx] - measured_.iterations[idx - 1]))
          : 1;
  // Whether the re-plan from now, with a candidate of `loss` now, takes a
  // checkpoint before the next measurement.
  auto plan_wants = [&](double loss, bool record) -> StatusOr<bool> {
    if (start.checkpoints_taken >= problem_.MaxCheckpoints()) {
      if (record) last_plan_.clear();
      return false;
    }
    curve[static_cast<size_t>(now - W)] = loss;
    VIPER_ASSIGN_OR_RETURN(
        Solution sol, SolveOptimal(problem, LossCurve(W, curve), start, SolveOptions{options_.replan_gap}));
    summary_.max_certified_gap = std::max(summary_.max_certified_gap, sol.certified_gap);
    const bool now_wanted = !sol.schedule.empty() && sol.schedule.front() < now + gap;
    if (record) last_plan_ = std::move(sol.schedule);
    return now_wanted;
  };
  VIPER_ASSIGN_OR_RETURN(bool want, plan_wants(v, true));
  const bool plan_wanted = want;
  // 4. Quality gate: better than the served version by more than the noise.
  bool gated = false;
  if (want && options_.gate_z > 0 && served_loss_ && !(v < *served_loss_ - MarginFor(sigma))) {
    ++summary_.gated;
    gated = true;
    want = false;
  }
  // An anticipated return is seen when a change is detected (AddSwitch) or
  // when the model it published measures better than at its publishing by
  // twice the gate's margin (the traffic came back to its domain), placed at
  // the first measurement since which it has (ReturnShownFrom). It holds
  // everything else until the traffic is past its switch; one that did not
  // come by its tolerance was a wrong prediction.
  if (returns_->ServedShowsReturn(served_loss_, MarginFor(sigma))) AddSwitch(ReturnShownFrom(MarginFor(sigma)));
  if (returns_->Settle(TrafficAt(now), MeasurementGap(), static_cast<double>(problem_.total_iterations))) {
    ++summary_.anticipation_failed;
  }
  const bool holding = returns_->holding();
  if (holding) want = false;
  held_for_switch_ = false;
  if (want && StallOutweighsGain(now, v)) {
    want = false;
    held_for_switch_ = true;
  }
  // 5-6. Re-publishing a kept model, or publishing one ahead of a predicted
  // return (online_staleness.cc).
  const auto kept_wants = [&](double loss) -> StatusOr<bool> {
    ++summary_.replans;
    return plan_wants(loss, false);
  };
  VIPER_ASSIGN_OR_RETURN(const bool kept, ChooseKeptModel(now, v, sigma, holding, want, kept_wants));
  if (kept) want = true;
  if (held_for_switch_) ++summary_.switch_holds;
  if (!kept && !holding && returns_->holding()) want = false;  // the served model became the anticipation (5-6)
  // 7. A young ramp under the wall clock: publish nothing yet (RampYounger).
  bool ramp_hold = false;
  const bool young_ramp = options_.hold_young_ramps && RampYounger(now);
  if (want && !returns_->pending() && young_ramp) {
    ++summary_.ramp_holds;
    want = false;
    ramp_hold = true;
  }
  // 8. The wait guard (Options::wait_guard): the traffic has paid more for
  // waiting than a checkpoint costs.
  waited_too_long_ = false;
  if (WaitedTooLong(now, v, sigma, gap, returns_->holding(), young_ramp) && !want) {
    want = true;
    waited_too_long_ = true;
    ++summary_.wait_guards;
    publishing_ = now;
    publishing_loss_.reset();
    returns_->DropPending();
  }
  decided_at_ = want ? now : -1;
  if (options_.record_decisions) {
    RecordDecision(now, v, sigma, problem, plan_wanted, gated, holding, ramp_hold, want);
  }
  summary_.plan_time_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return want;
}

StatusOr<bool> OnlinePlanner::ShouldCheckpoint(int64_t iteration) {
  std::string error;
  if (!options_.IsValid(&error)) return InvalidArgumentError("online planner options: " + error);
  VIPER_RETURN_IF_ERROR(problem_.Validate());
  if (iteration <= problem_.warmup_iterations || iteration > problem_.total_iterations) return false;
  if (!measured_now_ || *measured_now_ != iteration) return false;  // decisions are taken where the metric is measured
  return Decide(iteration, measured_.losses.back());
}

Status OnlinePlanner::Commit(int64_t iteration) {
  const int64_t last = taken_.empty() ? problem_.warmup_iterations : taken_.back();
  if (iteration <= last || iteration > problem_.total_iterations) {
    return InvalidArgumentError("checkpoint at iteration " + std::to_string(iteration) + " is not in (" +
                                std::to_string(last) + ", " + std::to_string(problem_.total_iterations) + "]");
  }
  taken_.push_back(iteration);
  waited_excess_s_ = 0;
  // How long this stall holds the producer, at the cost measured now (a
  // later SetCost does not re-price it); TrafficAt turns it into iterations.
  stalled_s_.push_back((stalled_s_.empty() ? 0.0 : stalled_s_.back()) + problem_.cost.stall_s);
  if (decided_at_ == iteration && publishing_ != iteration && publishing_loss_) {
    CommitKeptModel(iteration);  // online_staleness.cc
    decided_at_ = -1;
    return Status::Ok();
  }
  published_.push_back(iteration);
  decided_at_ = -1;
  returns_->DropPending();
  if (measured_now_ && *measured_now_ == iteration) {
    served_loss_ = measured_.losses.back();
  } else if (forecast_) {
    served_loss_ = forecast_->at(iteration);
  }
  served_committed_loss_ = served_loss_;
  // The level the new version's decay is measured from: the regime's
  // forecast at its iteration (a fitted level, not the measurement it was
  // committed on: that one passed the gate, so it is biased low by the noise
  // and every later re-measurement would look like decay). Without a
  // forecast, its first re-measurement (ObserveServed).
  served_reference_.reset();
  if (forecast_) served_reference_ = std::make_pair(iteration, forecast_->at(iteration));
  regime_reference_ = served_reference_;
  return Status::Ok();
}

int64_t OnlinePlanner::ServedAt(int64_t iteration) const {
  const auto it = std::lower_bound(taken_.begin(), taken_.end(), iteration);
  const size_t k = static_cast<size_t>(it - taken_.begin());
  return k == 0 ? problem_.warmup_iterations : published_[k - 1];
}

bool OnlinePlanner::WaitedTooLong(int64_t now, double v, double sigma, int64_t gap, bool holding,
                                  bool young_ramp) {
  // Rent or buy: each measurement gap the served model measured above the
  // candidate is rent the traffic paid for waiting; a checkpoint is the
  // purchase, priced as its stall's worth of requests at the candidate's
  // loss (those the stall adds at the window's end, or serves behind a
  // moving traffic). Paying wait_guard times that in rent before buying
  // bounds what a wrong wait costs against a publish at its start, whatever
  // the re-plan's model of the future says. Only on what the producer
  // measured now: the served model re-measured at this measurement.
  if (options_.wait_guard <= 0 || !served_loss_ || served_by_measurement_.size() != measured_.size() ||
      !std::isfinite(served_by_measurement_.back()) || ServedStillRising() || young_ramp) {
    return false;
  }
  const double excess = *served_loss_ - v - MarginFor(sigma);
  if (!(excess > 0)) return false;
  if (holding) return false;  // the anticipation serves the returning domain: no rent is owed to this candidate
  waited_excess_s_ += excess * static_cast<double>(gap) * problem_.seconds_per_iteration;
  return CheckpointRoomAt(now) && waited_excess_s_ > options_.wait_guard * problem_.cost.stall_s * std::max(v, 1e-9);
}

bool OnlinePlanner::CheckpointRoomAt(int64_t now) const {
  return static_cast<int64_t>(taken_.size()) < problem_.MaxCheckpoints() &&
         (taken_.empty() || now - taken_.back() >= problem_.min_spacing_iterations);
}

bool OnlinePlanner::RampYounger(int64_t now) const {
  const size_t n = remeasured_.size();
  if (n < 3 || remeasured_.back().iteration != now) return false;
  if (problem_.requests.traffic_clock != TrafficClock::kWall) return false;
  const double rise = 2.0 * GateMargin();
  // Every fixed model re-measured now: the served version and the kept ones.
  std::vector<std::pair<int64_t, double>> now_levels = remeasured_.back().kept;
  if (remeasured_.back().served) now_levels.insert(now_levels.begin(), *remeasured_.back().served);
  // A domain that comes back is no ramp: some fixed model got better, by
  // three rises (one would be the noise of one of several kept models).
  for (const auto& [model, last] : now_levels) {
    const double before = remeasured_[n - 2].LossOf(model);
    if (std::isfinite(before) && before - last > 3.0 * rise) return false;
  }
  // The earliest start of a rise, over every fixed model that has risen at
  // its last two re-measurements or more.
  double start = std::numeric_limits<double>::infinity();
  for (const auto& [model, last] : now_levels) {
    size_t b = n - 1;
    double here = last;
    while (b > 0) {
      const double before = remeasured_[b - 1].LossOf(model);
      if (!std::isfinite(before) || !(here - before > rise)) break;
      here = before;
      --b;
    }
    if (n - 1 - b >= 2) start = std::min(start, TrafficAt(remeasured_[b].iteration));
  }
  if (!std::isfinite(start)) return false;
  // Only where the lag spans three measurement gaps or more: where it spans
  // fewer, waiting a gap to see whether a rise goes on (a step the table's
  // interpolation spreads over two points reads as two rises) costs about
  // as much as a publish that arrives late.
  const double lag = DeliveryLag() + problem_.cost.stall_s / problem_.seconds_per_iteration;
  if (lag < 3.0 * MeasurementGap()) return false;
  return TrafficAt(now) - start < lag;
}

double OnlinePlanner::MeasurementGap() const {
  const size_t n = measured_.size();
  return n >= 2 ? measured_.iterations[n - 1] - measured_.iterations[n - 2] : 1.0;
}

double OnlinePlanner::MarginFor(double sigma) const { return options_.gate_z * sigma * std::sqrt(2.0); }

double OnlinePlanner::GateMargin() const {
  if (options_.gate_z <= 0 || measured_.size() == 0) return 0.0;
  return MarginFor(Noise());
}

Status OnlinePlanner::SetCost(const CheckpointCost& cost) {
  std::string error;
  if (!cost.IsValid(&error)) return InvalidArgumentError("the measured checkpoint cost: " + error);
  problem_.cost = cost;
  ++summary_.cost_updates;
  return Status::Ok();
}

}  // namespace schedulers
}  // namespace viper
