// Where the closed loop records a switch of the traffic's domain and places
// it in traffic iterations (schedulers/README.md): AddSwitch (the
// ending domain's best model, the switch handed to internal::ReturnPredictor,
// a predicted return it confirms), SwitchPlace and PlaceSwitchesOnClock (a
// switch's middle and half-width on the traffic's clock), and
// PlaceSwitchSeenPartWay (a switch seen part-way placed where its move
// began). Moved from online_staleness.cc unchanged (thirty-fourth session);
// the staleness re-measurements and the kept-model choice stay there.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "online_returns.h"
#include "viper/schedulers/online.h"

namespace viper {
namespace schedulers {
namespace {

// A served model's move at a switch's first measurement counts as seen
// part-way when it is between this share of the whole move and one less it,
// or closer to either end where the fixed models' noise tells that much
// (PlaceSwitchSeenPartWay; set before any evaluation, not tuned).
constexpr double kPartWay = 0.05;

}  // namespace

void OnlinePlanner::AddSwitch(size_t begin) {
  // The measurement right after a switch seen part-way (PlaceSwitchSeenPartWay
  // placed it from the move the model serving then made on to here) sees
  // the rest of that switch, not another, unless a model moved back since
  // (ReversedSinceLastSwitch). A model published at that switch's first
  // measurement measured a blend there and jumps here (ServedJumped); with a
  // stall between, the traffic moved more than the four gaps within which a
  // switch is the last one seen again, and the rest was counted as a switch
  // of its own: every later regime one off, each return predicted to the
  // wrong domain (set 14's q-swaps800 on pfs, the warm-up model published
  // ahead at 2318 part-way into the swap at 2700: 1.51 x the oracle; 1.19 x
  // read as one; bench/README.md, "Sixtieth session").
  if (!switches_seen_at_.empty() && switches_seen_at_.back().part_way >= 0) {
    const auto seen = MeasurementIndex(switches_seen_at_.back().after);
    if (seen && *seen + 1 == begin && !ReversedSinceLastSwitch(begin)) return;
  }
  const int64_t at = static_cast<int64_t>(measured_.iterations[begin]);
  const double traffic_at = TrafficAt(at);
  const double traffic_before =
      begin > 0 ? TrafficAt(static_cast<int64_t>(measured_.iterations[begin - 1])) : traffic_at;
  // The ending regime's own last model, when it measured better than the
  // model serving that regime at that last measurement (both on that
  // moment's sample). An anticipation serves the coming domain's model ahead
  // of the switch: the ending domain's is the one it replaced, re-measured
  // there as kept (a model of the coming domain measures badly on the ending
  // one, and the producer's own, whatever domain it was trained on, would
  // pass for that domain's best; bench/README.md, "Twenty-first session").
  int64_t better = -1, alike = -1;
  if (begin > 0 && begin - 1 < served_by_measurement_.size()) {
    const int64_t replaced = returns_->replaced_model();
    const double served_then = EndingDomainLossAt(begin - 1);
    size_t last = begin - 1;
    // That measurement may be part-way into the next domain already: the
    // model serving then jumped there from the one before it (the jump
    // threshold at the smallest relative noise an ended regime showed). Two
    // wrong models compare there, and the less wrong, trained on the next
    // domain, passed for the ending one's best (set 1's h-recur60 pfs/train;
    // bench/README.md, "Thirtieth session"). The one before decides.
    auto served_model_at = [&](size_t m) { return ServedAt(static_cast<int64_t>(measured_.iterations[m])); };
    const double before =
        begin >= 2 ? EndingDomainLossAt(begin - 2) : std::numeric_limits<double>::quiet_NaN();
    if (std::isfinite(served_then) && std::isfinite(before) &&
        (replaced >= 0 || served_model_at(begin - 2) == served_model_at(begin - 1))) {
      const double sd =
          previous_relative_noise_ > 0 ? std::min(Noise(), previous_relative_noise_ * before) : Noise();
      if (served_then - before > JumpThreshold(sd)) last = begin - 2;
    }
    const double then = EndingDomainLossAt(last);
    if (std::isfinite(then) && measured_.losses[last] < then) {
      better = static_cast<int64_t>(measured_.iterations[last]);
    } else if (std::isfinite(then) && measured_.losses[last] < then + GateMargin()) {
      // As good within the gate's margin: the return may weigh it on the
      // traffic it will serve first (ReturnPredictor::Return::alike).
      alike = static_cast<int64_t>(measured_.iterations[last]);
    }
  }
  // A predicted return not yet published ahead (its switch came before a
  // measurement whose delivery would land in time): this switch, when it
  // meets the prediction's tolerance, is that return.
  std::optional<internal::ReturnPredictor::Return> predicted;
  if (!returns_->holding() && !returns_->pending()) predicted = returns_->PredictedReturn(MeasurementGap());
  // Within four measurement gaps of the last switch a switch is that one seen
  // again, unless a fixed model moved there and back since: the traffic
  // changed domain again (set 23's z-recur3d45f on host, three domains and
  // a stall's traffic between two measurements: read as one, the regimes
  // were counted one short, the cycle learned as 2 and kept; 92.6 -> 61.8%;
  // bench/README.md, "Forty-eighth session").
  const bool distinct = ReversedSinceLastSwitch(begin);
  const auto seen = returns_->AddSwitch(at, traffic_before, traffic_at, ServedAt(at), MeasurementGap(),
                                        better, distinct, LearnedAt(begin), alike);
  if (predicted && seen == internal::ReturnPredictor::SwitchSeen::kRecorded &&
      internal::ReturnPredictor::Meets(*predicted, 0.5 * (traffic_before + traffic_at),
                                       0.5 * (traffic_at - traffic_before),
                                       traffic_at - static_cast<double>(at))) {
    seen_return_ = SeenReturn{last_iteration_, predicted->model, predicted->fallbacks};
  }
  if (seen == internal::ReturnPredictor::SwitchSeen::kRefuted) ++summary_.anticipation_failed;
  if (seen != internal::ReturnPredictor::SwitchSeen::kRepeated) {
    switches_seen_at_.push_back(
        SwitchSeenAt{begin > 0 ? static_cast<int64_t>(measured_.iterations[begin - 1]) : at, at, -1});
    if (begin > 0) switch_to_place_ = std::make_pair(begin, returns_->switches().size() - 1);
  }
}

double OnlinePlanner::EndingDomainLossAt(size_t m) const {
  const int64_t replaced = returns_->replaced_model();
  return replaced >= 0 ? RemeasuredAt(m, replaced) : served_by_measurement_[m];
}

bool OnlinePlanner::LearnedAt(size_t begin) const {
  // The producer's own model at a switch's first measurement, against the
  // model serving the ending domain re-measured there: better by the gate's
  // margin, it had learned the new domain (ReturnPredictor::RegimeOf). Not
  // re-measured there, nothing says so.
  if (begin >= served_by_measurement_.size() || begin >= measured_.size()) return false;
  const double ending = EndingDomainLossAt(begin);
  return std::isfinite(ending) && measured_.losses[begin] < ending - MarginFor(Noise());
}

bool OnlinePlanner::ReversedSinceLastSwitch(size_t begin) const {
  // The last switch's measurements before and after it, and `begin`: a model
  // re-measured at all three that moved across the switch and back since,
  // each move beyond ServedJumped's threshold (change_threshold noise sd of
  // a difference, or half its level). A switch seen part-way and then whole
  // moves the models on the same way; one seen twice (a re-publish, then the
  // change detector) does not move them again.
  if (switches_seen_at_.empty() || begin == 0) return false;
  const SwitchSeenAt& last = switches_seen_at_.back();
  const auto b = MeasurementIndex(last.before), a = MeasurementIndex(last.after);
  if (!b || !a || *a <= *b || *a >= begin) return false;
  const double sigma = Noise();
  auto moved = [&](double from, double to) {
    return std::fabs(to - from) > std::min(JumpThreshold(sigma), 0.5 * std::max(from, to));
  };
  std::vector<int64_t> models;
  if (const auto* e = remeasured_.empty() ? nullptr : &remeasured_.back()) {
    if (e->served) models.push_back(e->served->first);
    for (const auto& [m, l] : e->kept) models.push_back(m);
  }
  for (int64_t m : models) {
    const double x0 = RemeasuredAt(*b, m), x1 = RemeasuredAt(*a, m), x2 = RemeasuredAt(begin, m);
    if (!(std::isfinite(x0) && std::isfinite(x1) && std::isfinite(x2))) continue;
    if (moved(x0, x1) && moved(x1, x2) && (x1 - x0) * (x2 - x1) < 0) return true;
  }
  return false;
}

std::pair<double, double> OnlinePlanner::SwitchPlace(const SwitchSeenAt& seen) const {
  const double before = TrafficAt(seen.before), after = TrafficAt(seen.after);
  if (seen.part_way < 0) return {0.5 * (before + after), 0.5 * (after - before)};
  const double gap = static_cast<double>(seen.after - seen.before), f = seen.part_way;
  return {after - f * gap + 0.5 * gap, 0.5 * std::min(gap, after - before)};
}

void OnlinePlanner::PlaceSwitchesOnClock() {
  const size_t n = std::min(returns_->switches().size(), switches_seen_at_.size());
  for (size_t i = 0; i < n; ++i) PlaceSwitchOnClock(i);
}

void OnlinePlanner::PlaceSwitchOnClock(size_t i) {
  const auto [middle, halfwidth] = SwitchPlace(switches_seen_at_[i]);
  returns_->PlaceSwitch(i, middle, halfwidth);
}

void OnlinePlanner::PlaceSwitchSeenPartWay(size_t idx) {
  if (!switch_to_place_ || idx <= switch_to_place_->first) return;
  const auto [begin, index] = *switch_to_place_;
  switch_to_place_.reset();
  if (idx != begin + 1 || index + 1 != returns_->switches().size()) return;
  // The traffic between two of a table's rows is a blend of the two (the
  // judge interpolates; a validation sample drawn across a switch is a
  // mix): the first measurement after a switch may show only part of the
  // move, the next one all of it. The model that served when the switch
  // was seen, re-measured before it (a), there (x) and now (y), moved the
  // fraction f = (x - a) / (y - a) of its way there: the move began f of a
  // measurement gap (the table's rows are the measurements) before it, and
  // its middle (where the blend crosses) is half a gap after that. Seen
  // less than halfway (f < 1/2), that middle lies past the measurement that
  // saw it: the blend runs on into the next gap. Kept within the gap it was
  // seen in (the twenty-third to forty-ninth sessions), such a switch was
  // placed up to half a gap early, and the switches predicted from it with
  // it: on h10's k-recur70 (back every 450 iterations, gpu) the
  // anticipations landed 25-50 iterations early, +26.3% over the oracle;
  // placed at the blend's middle, +15.4% (bench/README.md, "Fiftieth
  // session"). A switch seen whole (f near 1) or not yet (f near 0) keeps
  // its gap's middle. Placing a switch seen
  // part-way at its gap's middle put it up to half a gap early, twice that
  // in a spacing from two switches (bench/README.md, "Twenty-third session").
  //
  // Published at the measurement before the switch, that model was the
  // producer's own there: measured, not re-measured, on that moment's
  // sample, and its measurement is `a` (OwnLossAt). Without it no switch
  // seen right after a fresh publish was placed part-way: on h13's
  // p-recur65 (gpu) the second switch sat at its gap's middle, 40
  // iterations early, the next return was predicted that much early and
  // its anticipation served the other domain's model there, +29.7% over
  // the oracle; placed part-way, +23.9% (bench/README.md, "Fifty-third
  // session").
  const int64_t model = ServedAt(static_cast<int64_t>(measured_.iterations[begin]));
  double a = RemeasuredAt(begin - 1, model);
  if (!std::isfinite(a)) a = OwnLossAt(begin - 1, model);
  const double x = RemeasuredAt(begin, model), y = RemeasuredAt(idx, model);
  if (!(std::isfinite(a) && std::isfinite(x) && std::isfinite(y)) || !(std::fabs(y - a) > 0)) return;
  const double f = (x - a) / (y - a);
  // How far from 0 and 1 f must be: twice its noise sd (a fixed model's
  // re-measurement noise in two of its three readings, over the whole
  // move), at most kPartWay. A stall between the two measurements widens
  // the traffic's gap past the table's row spacing, and a switch seen
  // nearly whole there (f 0.98) placed at that gap's middle sat 40
  // iterations early (h10's k-swaps600 on pfs: its next return predicted
  // 80 early, 46.1% over the oracle; placed part-way, 43.0%;
  // bench/README.md, "Fifty-third session"). On a fixed sample the noise
  // is nil: f strictly between 0 and 1 is part-way.
  const double sd = std::sqrt(2.0) * FixedModelNoise(Noise()) / std::fabs(y - a);
  const double part_way = std::min(kPartWay, 2.0 * sd);
  if (!(f > part_way && f < 1.0 - part_way)) return;
  if (index >= switches_seen_at_.size()) return;
  switches_seen_at_[index].part_way = f;
  PlaceSwitchOnClock(index);
}

}  // namespace schedulers
}  // namespace viper
