// The closed loop's record of the staleness re-measurements
// (schedulers/README.md): the served version's and the kept models' losses
// on today's validation sample as they arrive (ObserveServed, ObserveKept,
// with the decay points they add), which models to keep (KeptVersions), and
// what the record shows when read: a jump of the served model or a fall of
// a kept one (a switch), whether the served model stayed across a change,
// the fixed models' own noise, a ramp still rising. Moved from
// online_staleness.cc unchanged (forty-sixth session), which keeps what the
// loop makes of it: the decay and lag a re-plan is priced with, and the
// choice and commit of a kept model.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "online_returns.h"
#include "viper/schedulers/online.h"

namespace viper {
namespace schedulers {
namespace {

Status CheckServedLoss(double loss) {
  if (!std::isfinite(loss) || loss < 0) {
    return InvalidArgumentError("the served version's loss must be finite and >= 0, got " + std::to_string(loss));
  }
  return Status::Ok();
}

}  // namespace

Status OnlinePlanner::ObserveServed(double loss) {
  VIPER_RETURN_IF_ERROR(CheckServedLoss(loss));
  served_loss_ = loss;
  ++summary_.served_measurements;
  RemeasuredNow().served = std::make_pair(served_model(), loss);
  // Kept by measurement (the one taken at this iteration), for AddSwitch.
  if (measured_now_ && *measured_now_ == last_iteration_ && measured_.size() > 0) {
    served_by_measurement_.resize(measured_.size(), std::numeric_limits<double>::quiet_NaN());
    served_by_measurement_.back() = loss;
  }
  // One (age, excess over `reference`) point, or the reference itself when
  // there is none yet; the latest decay_window points are kept.
  auto track = [&](std::optional<std::pair<int64_t, double>>* reference,
                   std::vector<std::pair<double, double>>* points) {
    if (!*reference) {
      *reference = std::make_pair(last_iteration_, loss);
      return;
    }
    const double age_s = static_cast<double>(last_iteration_ - (*reference)->first) * problem_.seconds_per_iteration;
    if (!(age_s > 0)) return;
    points->emplace_back(age_s, loss - (*reference)->second);
    if (points->size() > static_cast<size_t>(options_.decay_window)) points->erase(points->begin());
  };
  // The reference is the forecast level at the version's checkpoint (see
  // Commit); a version committed without a forecast is measured from its
  // first re-measurement. The regime's (the lag price's) is the same, or
  // the served level at the latest detected change when that is later.
  track(&served_reference_, &decay_points_);
  track(&regime_reference_, &regime_decay_points_);
  return Status::Ok();
}

bool OnlinePlanner::DecidesBeforeRemeasured() const {
  const size_t n = measured_.size();
  if (!options_.calm_decisions || options_.metric != ObservationKind::kValidation || n < 2 || !measured_now_ ||
      *measured_now_ != last_iteration_) {
    return false;
  }
  // Calm: no switch seen (before the first, nothing recurs: a kept model
  // rarely wins), nothing anticipated, and the candidate as the point
  // before measured it, within twice the gate's margin (a change usually
  // shows there first). The 186-case development pool: mean 12.15 ->
  // 11.66%, rotation 15.5 -> 13.4%, prior shift 5.6 -> 4.6%; without the
  // switch condition recurring went 39.3 -> 58.0% (bench/README.md,
  // "Sixty-fourth session").
  if (!returns_->switches().empty() || returns_->holding()) return false;
  const double now = measured_.losses[n - 1], before = measured_.losses[n - 2];
  return std::abs(now - before) <= 2.0 * GateMargin();
}

Status OnlinePlanner::ObserveServedLate(int64_t model, double loss) {
  if (model == served_model()) {
    VIPER_RETURN_IF_ERROR(ObserveServed(loss));
  } else if (measured_now_ && *measured_now_ == last_iteration_ && !taken_.empty() &&
             taken_.back() == last_iteration_ && ServedAt(last_iteration_) == model) {
    // Replaced by the publish at this measurement: its re-measurement here,
    // without the decay points of the version serving now.
    VIPER_RETURN_IF_ERROR(CheckServedLoss(loss));
    ++summary_.served_measurements;
    RemeasuredNow().served = std::make_pair(model, loss);
    served_by_measurement_.resize(measured_.size(), std::numeric_limits<double>::quiet_NaN());
    served_by_measurement_.back() = loss;
  } else {
    return ObserveKept(model, loss);
  }
  // The switch check of the decision (ShouldCheckpoint), which ran without
  // this answer; not where that decision recorded one already. Without it
  // a swap seen only on the served version went unrecorded: set 15's
  // r-swaps650 on pfs, 29.6 -> 122.2% over the oracle (bench/README.md,
  // "Sixty-fourth session").
  const bool recorded = !switches_seen_at_.empty() && switches_seen_at_.back().after == last_iteration_;
  if (!recorded && (ServedJumped(Noise()) || KeptFell())) AddSwitch(measured_.size() - 1);
  return Status::Ok();
}

bool OnlinePlanner::CopiesModelAt(int64_t iteration) const {
  if (options_.keep_versions <= 0 || options_.metric != ObservationKind::kValidation ||
      iteration <= problem_.warmup_iterations || (!copies_.empty() && copies_.back() >= iteration)) {
    return false;
  }
  switch (options_.regime_ends) {
    case RegimeEnds::kOff: return false;
    case RegimeEnds::kEvery: return true;
    case RegimeEnds::kPredicted: break;
  }
  // The measurement before a predicted switch: the next one is likely past
  // it, and the model here is the ending domain's best (bench/README.md,
  // "Fifty-sixth session": 1.5 gaps of lead).
  const double gap = MeasurementGap();
  const auto r = returns_->PredictedReturn(gap);
  if (!r) return false;
  const double traffic = TrafficAt(iteration);
  return r->change > traffic && r->change <= traffic + kRegimeEndCopyLead * gap;
}

std::vector<int64_t> OnlinePlanner::KeptVersions(size_t* waited_for) const {
  std::vector<int64_t> kept;
  if (waited_for) *waited_for = 0;
  if (options_.keep_versions <= 0) return kept;
  const int64_t served = served_model();
  auto add = [&](int64_t m) {
    if (m == served || static_cast<int>(kept.size()) >= options_.keep_versions || !Kept(m)) return;
    if (std::find(kept.begin(), kept.end(), m) == kept.end()) kept.push_back(m);
  };
  // The next return's model first; then, newest regime first, what each
  // ended regime served last and its last model (a domain that may come
  // back), the warm-up's; then the newest published models. Regimes come
  // before recent versions: a loop that publishes often would otherwise
  // keep only versions of the current domain.
  const std::vector<int64_t>& regime_models = returns_->regime_models();
  const std::vector<int64_t>& regime_better = returns_->regime_better();
  const auto predicted = returns_->PredictedReturn(MeasurementGap());
  if (predicted) {
    add(predicted->model);
    for (int64_t m : predicted->fallbacks) add(m);
  }
  const size_t predicted_count = kept.size();
  // Traffic that moves at every measurement (a ramp) makes every state new:
  // each kept model re-measured there is a producer pause (cost.remeasure_s:
  // the live producer's planning time, which the judge charges), and an
  // older model only falls further behind. Where re-measuring costs
  // anything, only a predicted return's models are re-measured then. On the
  // 522-case pool with the pauses charged: mean 28.26 -> 23.83%, rotation
  // 75.2 -> 44.5% (bench/README.md, "Sixty-second session").
  const size_t n = measured_.size();
  if (problem_.cost.remeasure_s > 0 && !predicted && n >= 3 && ServedMovedAt(n - 1) && ServedMovedAt(n - 2)) {
    if (waited_for) *waited_for = kept.size();
    return kept;
  }
  for (size_t q = std::max(regime_models.size(), regime_ends_.size()); q-- > 0;) {
    if (q < regime_better.size() && regime_better[q] >= 0) add(regime_better[q]);
    if (q < regime_models.size()) add(regime_models[q]);
    if (q < regime_ends_.size()) add(regime_ends_[q]);
  }
  add(problem_.warmup_iterations);
  // The newest published versions last: the serving domain's, which a
  // switch leaves as stale as the served one; a decision beside training
  // need not wait for them (Options::partial_waits).
  const size_t rivals = kept.size();
  std::vector<int64_t> newest(published_);
  std::sort(newest.begin(), newest.end(), std::greater<int64_t>());
  for (int64_t m : newest) add(m);
  // (Re-measuring free, nothing is waited for: all of them at once.)
  if (waited_for) *waited_for = options_.partial_waits && problem_.cost.remeasure_s > 0 ? rivals : kept.size();
  // Where nothing says an older domain may be back, the ended regimes'
  // models would measure as they did last time: the decision waits for a
  // predicted return's models only, and the others' answers follow it.
  if (waited_for && options_.partial_waits && problem_.cost.remeasure_s > 0 && !KeptModelsInPlay()) {
    *waited_for = predicted_count;
  }
  // A predicted return seen now: its model goes out whatever the kept
  // models answer (ChooseKeptModel's rule 5b, at the best level it
  // measured), so the decision waits for the served version's answer only.
  if (waited_for && options_.partial_waits && problem_.cost.remeasure_s > 0 && predicted_count > 0 &&
      PredictedReturnSeenNow()) {
    *waited_for = 0;
  }
  return kept;
}

bool OnlinePlanner::Kept(int64_t model) const {
  // The warm-up's model, published ones and the copies.
  return model == problem_.warmup_iterations || std::binary_search(copies_.begin(), copies_.end(), model) ||
         std::find(published_.begin(), published_.end(), model) != published_.end();
}

std::vector<std::pair<int64_t, double>> OnlinePlanner::BestLevelsKept(const std::vector<int64_t>& models) const {
  std::vector<std::pair<int64_t, double>> levels;
  for (int64_t m : models) {
    if (!Kept(m)) continue;
    double best = std::numeric_limits<double>::infinity();
    for (const Remeasurement& r : remeasured_) {
      const double l = r.LossOf(m);
      if (std::isfinite(l)) best = std::min(best, l);
    }
    if (std::isfinite(best)) levels.emplace_back(m, best);
  }
  return levels;
}

bool OnlinePlanner::PredictedReturnSeenNow() const {
  const size_t n = measured_.size();
  if (n < 2 || returns_->holding() || returns_->pending()) return false;
  // The served version jumped, and up: its domain is ending. (Down, the
  // served model's own domain is back; 5b publishes no other then, and the
  // kept models' answers are what records the switch: h14's q-recur40 on
  // pfs went 26.6 -> 40.5% over the oracle without this.)
  if (!ServedJumped(Noise())) return false;
  const auto latest_two = LatestTwoRemeasurements();
  if (!latest_two || !latest_two->first->served) return false;
  const auto& [served, loss] = *latest_two->first->served;
  if (!(loss > LossAt(*latest_two->second, served))) return false;
  const auto predicted = returns_->PredictedReturn(MeasurementGap());
  if (!predicted) return false;
  // Where AddSwitch would place the switch and what it confirms.
  const auto at = static_cast<int64_t>(measured_.iterations[n - 1]);
  const double traffic_at = TrafficAt(at);
  const double traffic_before = TrafficAt(static_cast<int64_t>(measured_.iterations[n - 2]));
  return internal::ReturnPredictor::Meets(*predicted, 0.5 * (traffic_before + traffic_at),
                                         0.5 * (traffic_at - traffic_before),
                                         traffic_at - static_cast<double>(at)) &&
         CheckpointRoomAt(at) && RepublishInTime(at);
}

bool OnlinePlanner::KeptModelsInPlay() const {
  const size_t n = measured_.size();
  if (n == 0) return true;
  // A return seen already: kept models are what serves the traffic's domains.
  if (returns_->cycle() != 0 || summary_.republished > 0) return true;
  // The traffic moved at this point (the served version's answer, which the
  // helper gives first), or a switch was seen at the point before (a switch
  // seen part-way, or a return the point before could not yet tell).
  if (ServedJumped(Noise()) || ServedMovedAt(n - 1)) return true;
  if (n >= 2 && !switches_seen_at_.empty() &&
      static_cast<double>(switches_seen_at_.back().after) >= measured_.iterations[n - 2]) {
    return true;
  }
  // A kept model that fell between its latest two re-measurements, the
  // latest at one of the last three points: the traffic moving toward the
  // domain it was trained on (set 19's v-swaps900 on host: its first return
  // came over two points, and was seen a point later without this).
  if (n < 3) return false;
  const double since = measured_.iterations[n - 3];
  const double fall = 2.0 * GateMargin();
  for (size_t r = remeasured_.size(); r-- > 0;) {
    const Remeasurement& latest = remeasured_[r];
    if (static_cast<double>(latest.iteration) < since) break;
    for (const auto& [model, loss] : latest.kept) {
      for (size_t q = r; q-- > 0;) {
        const double then = remeasured_[q].LossOf(model);
        if (!std::isfinite(then)) continue;
        if (then - loss > fall) return true;
        break;
      }
    }
  }
  return false;
}

bool OnlinePlanner::ServedMovedAt(size_t m) const {
  if (m == 0 || m >= served_by_measurement_.size() || m >= measured_.size()) return false;
  const double now = served_by_measurement_[m];
  if (!std::isfinite(now)) return false;
  // The model served at measurement m, against its own loss one measurement
  // earlier: re-measured there, or measured there as the producer's model
  // (published at it).
  const int64_t model = ServedAt(static_cast<int64_t>(measured_.iterations[m]));
  double before = RemeasuredAt(m - 1, model);
  if (!std::isfinite(before)) before = OwnLossAt(m - 1, model);
  return std::isfinite(before) && std::abs(now - before) > 2.0 * GateMargin();
}

Status OnlinePlanner::ObserveKept(int64_t model_iteration, double loss) {
  if (model_iteration < problem_.warmup_iterations || model_iteration > last_iteration_) {
    return InvalidArgumentError("kept model of iteration " + std::to_string(model_iteration) + " is not in [W, " +
                                std::to_string(last_iteration_) + "]");
  }
  if (!std::isfinite(loss) || loss < 0) return Status::Ok();  // a diverged model is never re-published
  RemeasuredNow().kept.emplace_back(model_iteration, loss);
  return Status::Ok();
}

double OnlinePlanner::Remeasurement::LossOf(int64_t model) const {
  if (served && served->first == model) return served->second;
  for (const auto& [m, l] : kept) {
    if (m == model) return l;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::optional<size_t> OnlinePlanner::MeasurementIndex(int64_t iteration) const {
  const double x = static_cast<double>(iteration);
  const auto it = std::lower_bound(measured_.iterations.begin(), measured_.iterations.end(), x);
  if (it == measured_.iterations.end() || *it != x) return std::nullopt;
  return static_cast<size_t>(it - measured_.iterations.begin());
}

double OnlinePlanner::LossAt(const Remeasurement& at, int64_t model) const {
  const double loss = at.LossOf(model);
  if (std::isfinite(loss)) return loss;
  const auto i = MeasurementIndex(at.iteration);
  return i ? OwnLossAt(*i, model) : loss;
}

OnlinePlanner::Remeasurement& OnlinePlanner::RemeasuredNow() {
  if (remeasured_.empty() || remeasured_.back().iteration != last_iteration_) {
    remeasured_.emplace_back();
    remeasured_.back().iteration = last_iteration_;
    if (remeasured_.size() > kRemeasurementsKept) remeasured_.pop_front();
  }
  return remeasured_.back();
}

std::optional<std::pair<const OnlinePlanner::Remeasurement*, const OnlinePlanner::Remeasurement*>>
OnlinePlanner::LatestTwoRemeasurements() const {
  const size_t n = remeasured_.size(), m = measured_.size();
  if (n < 2 || m < 2) return std::nullopt;
  const Remeasurement& now = remeasured_[n - 1];
  const Remeasurement& before = remeasured_[n - 2];
  if (now.iteration != last_iteration_ || before.iteration != static_cast<int64_t>(measured_.iterations[m - 2])) {
    return std::nullopt;
  }
  return std::make_pair(&now, &before);
}

bool OnlinePlanner::ServedJumped(double sigma) const {
  const auto latest_two = LatestTwoRemeasurements();
  if (!latest_two) return false;
  const Remeasurement& now = *latest_two->first;
  const Remeasurement& before = *latest_two->second;
  if (!now.served) return false;
  // The model serving now, as it measured at the measurement before: served
  // then too, kept and re-measured there (a re-publish went out between), or
  // the producer's own model of then, published at that measurement (on the
  // validation sample, which its re-measurements are on). Under the wall
  // clock the traffic may switch before a newly published model's first
  // re-measurement as served, and only that model's move shows it when the
  // producer's own is re-learning at both (set 1's h-recur60 pfs/req;
  // bench/README.md, "Thirty-eighth session").
  const double then = LossAt(before, now.served->first);
  if (!std::isfinite(then)) return false;
  // ServedStayedAcross's bounds, the other way round: a move of more than
  // half its level is a jump however noisy the regime measured (one that
  // held a transition measures a noise sd that hides a model of the other
  // domain tripling; bench/README.md, "Twenty-first session").
  const double latest = now.served->second;
  return std::fabs(latest - then) > std::min(JumpThreshold(sigma), 0.5 * std::max(then, latest));
}

double OnlinePlanner::FixedModelNoise(double fallback) const {
  // A fixed model re-measured twice differs only by the two samples' noise
  // (and the traffic's move between them, which the median ignores while
  // most pairs are within one domain).
  std::vector<double> d;
  for (size_t r = 1; r < remeasured_.size(); ++r) {
    const Remeasurement& before = remeasured_[r - 1];
    const Remeasurement& now = remeasured_[r];
    auto add = [&](int64_t model, double latest) {
      const double then = before.LossOf(model);
      if (std::isfinite(then) && std::isfinite(latest)) d.push_back(latest - then);
    };
    if (now.served) add(now.served->first, now.served->second);
    for (const auto& [model, latest] : now.kept) add(model, latest);
  }
  if (d.size() < 8) return fallback;
  const double center = internal::Median(d);
  for (double& x : d) x = std::fabs(x - center);
  // 1.4826 MAD is the sd of a normal difference; one re-measurement's is
  // that over sqrt(2).
  return 1.4826 * internal::Median(std::move(d)) / std::sqrt(2.0);
}

bool OnlinePlanner::KeptFell() const {
  const auto latest_two = LatestTwoRemeasurements();
  if (!latest_two) return false;
  const Remeasurement& now = *latest_two->first;
  const Remeasurement& before = *latest_two->second;
  for (const auto& [model, latest] : now.kept) {
    if (now.served && now.served->first == model) continue;
    const double then = before.LossOf(model);
    if (std::isfinite(then) && then - latest > 0.5 * then) return true;
  }
  return false;
}

std::optional<std::pair<int64_t, double>> OnlinePlanner::ReturningDomainModel(double sigma) const {
  const auto latest_two = LatestTwoRemeasurements();
  if (!latest_two) return std::nullopt;
  const Remeasurement& now = *latest_two->first;
  const Remeasurement& before = *latest_two->second;
  const int64_t served = served_model();
  const double served_then = before.LossOf(served);
  if (!now.served || now.served->first != served || !std::isfinite(served_then) ||
      !(now.served->second > served_then)) {
    return std::nullopt;
  }
  // The fixed models' noise (a median over the kept history) only once the
  // served model rose at all: this runs at every measurement.
  const double jump = JumpThreshold(std::min(sigma, FixedModelNoise(sigma)));
  if (!(now.served->second - served_then > jump)) return std::nullopt;
  // Of the models that fell, the one that measures lowest now: all of the
  // returning domain, on one sample. (The lowest any of them ever measured
  // picked set 13's warm-up model, lucky on the validation sample, and kept
  // the producer's later models of that domain out: no better on the pool.)
  std::optional<std::pair<int64_t, double>> pick;
  for (const auto& [model, latest] : now.kept) {
    if (model == served) continue;
    const double then = before.LossOf(model);
    if (!std::isfinite(then) || !(then - latest > std::max(jump, 0.1 * then))) continue;
    if (!pick || latest < pick->second) pick = std::make_pair(model, latest);
  }
  return pick;
}

bool OnlinePlanner::ServedStayedAcross(size_t begin, double sigma) const {
  const size_t now = measured_.size() - 1;
  if (begin == 0 || begin > now || now >= served_by_measurement_.size()) return false;
  const int64_t before = ServedAt(static_cast<int64_t>(measured_.iterations[begin - 1]));
  if (before == served_model()) {
    const double then = served_by_measurement_[begin - 1], latest = served_by_measurement_[now];
    if (!std::isfinite(then) || !std::isfinite(latest)) return false;
    return std::fabs(latest - then) <= JumpThreshold(sigma);
  }
  // A publish fell between (under the wall clock a fresh model goes out
  // while the producer's own data switch is still being detected): a model
  // re-measured at both measurements tells. A model of the other domain
  // moves by a multiple of its level at a switch, which a regime that held a
  // transition may measure as noise: a move of more than half its level is
  // a move too (bench/README.md, "Twenty-first session").
  for (int64_t model : {served_model(), before}) {
    const double then = RemeasuredAt(begin - 1, model), latest = RemeasuredAt(now, model);
    if (std::isfinite(then) && std::isfinite(latest)) {
      return std::fabs(latest - then) <= std::min(JumpThreshold(sigma), 0.5 * std::max(then, latest));
    }
  }
  return false;
}

double OnlinePlanner::RemeasuredAt(size_t m, int64_t model) const {
  const int64_t iteration = static_cast<int64_t>(measured_.iterations[m]);
  for (auto e = remeasured_.rbegin(); e != remeasured_.rend(); ++e) {
    if (e->iteration == iteration) return e->LossOf(model);
    if (e->iteration < iteration) break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

double OnlinePlanner::OwnLossAt(size_t m, int64_t model) const {
  if (model != static_cast<int64_t>(measured_.iterations[m]) || options_.metric != ObservationKind::kValidation) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return measured_.losses[m];
}

size_t OnlinePlanner::ReturnShownFrom(double gate_margin) const {
  // The served model's re-measurements at the latest consecutive
  // measurements, back to the first where another model served or it was
  // not re-measured; the k-th from the end is at measurement size - 1 - k.
  std::vector<double> served;
  for (size_t r = remeasured_.size(), m = measured_.size(); r-- > 0 && m-- > 0;) {
    const Remeasurement& e = remeasured_[r];
    if (!(e.served && e.served->first == served_model()) ||
        static_cast<int64_t>(measured_.iterations[m]) != e.iteration) {
      break;
    }
    served.push_back(e.served->second);
  }
  std::reverse(served.begin(), served.end());
  return measured_.size() - 1 - returns_->ShownFor(served, gate_margin);
}

double OnlinePlanner::JumpThreshold(double sigma) const { return options_.change_threshold * sigma * std::sqrt(2.0); }

bool OnlinePlanner::ServedStillRising() const {
  // Two rises: one is as likely a noisy pair as a ramp.
  const size_t n = remeasured_.size();
  if (n < 3) return false;
  for (size_t r = 0; r < 2; ++r) {
    const Remeasurement& now = remeasured_[n - 1 - r];
    const Remeasurement& before = remeasured_[n - 2 - r];
    if (!(now.served && before.served && now.served->first == before.served->first &&
          now.served->second - before.served->second > GateMargin())) {
      return false;
    }
  }
  return true;
}

const std::vector<std::pair<int64_t, double>>& OnlinePlanner::KeptAt(int64_t now) const {
  static const std::vector<std::pair<int64_t, double>> kNone;
  return !remeasured_.empty() && remeasured_.back().iteration == now ? remeasured_.back().kept : kNone;
}

OnlinePlanner::RecentRise OnlinePlanner::ReadRecentRise() const {
  constexpr size_t kGaps = 3;  // the gaps read (online.h)
  const size_t n = remeasured_.size();
  std::vector<double> gap_rises;  // per gap, the median over the fixed models
  double gap_s = 0;
  for (size_t r = n - 1; n >= 2 && r >= 1 && r + kGaps >= n; --r) {
    const Remeasurement& now = remeasured_[r];
    const Remeasurement& before = remeasured_[r - 1];
    const double dt = static_cast<double>(now.iteration - before.iteration) * problem_.seconds_per_iteration;
    if (!(dt > 0)) continue;
    std::vector<double> rates;
    auto rate = [&](int64_t model, double loss) {
      const double earlier = LossAt(before, model);
      if (std::isfinite(earlier)) rates.push_back((loss - earlier) / dt);
    };
    if (now.served) rate(now.served->first, now.served->second);
    for (const auto& [model, loss] : now.kept) rate(model, loss);
    if (rates.empty()) continue;
    gap_rises.push_back(internal::Median(rates));
    gap_s = std::max(gap_s, dt);
  }
  RecentRise read;
  if (gap_rises.size() < kGaps) return read;
  const auto [least, most] = std::minmax_element(gap_rises.begin(), gap_rises.end());
  const double threshold = 0.5 * GateMargin();
  if (*least * gap_s > threshold) read.per_s = *least;
  read.still = *most * gap_s <= threshold;
  return read;
}

}  // namespace schedulers
}  // namespace viper
