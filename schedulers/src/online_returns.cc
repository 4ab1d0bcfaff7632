#include "online_returns.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "viper/core/median.h"

namespace viper {
namespace schedulers {
namespace internal {
double Median(std::vector<double> v) { return viper::Median(std::move(v), 0.0); }

ReturnPredictor::SwitchSeen ReturnPredictor::AddSwitch(int64_t at, double traffic_before, double traffic_at,
                                                       int64_t served_at, double measurement_gap,
                                                       int64_t better, bool distinct, bool at_learned,
                                                       int64_t alike) {
  // Where the switch fell in traffic iterations: somewhere between the last
  // measurement before it and the first after it.
  const double middle = 0.5 * (traffic_before + traffic_at), halfwidth = 0.5 * (traffic_at - traffic_before);
  // The traffic's lead over the producer when it was seen (kLeadShare).
  const double lead = std::max(0.0, traffic_at - static_cast<double>(at));
  // Whether it can be the active, unconfirmed anticipation's switch: its
  // interval meets the prediction's tolerance. Under the wall clock a stall
  // moves the traffic on while the producer waits: a switch seen part-way
  // falls in a gap as wide as the stall, and a return that follows one
  // anticipated (published a stall's traffic before it) comes a few
  // measurements after the last switch in the producer's iterations but a
  // whole stay later in the traffic's (bench/README.md, "Twentieth session").
  const bool within = active_ && Meets(*active_, middle, halfwidth, lead);
  const bool meets_prediction = within && !active_->confirmed;
  // One switch seen twice (a re-publish, then the slower change detector, or
  // the other way round) within four measurement gaps is one; not when it is
  // the predicted return. The gaps are counted in the traffic's iterations,
  // from the end of the last switch's interval: under the wall clock a
  // stall moves the traffic on between two measurements, and a switch a
  // stall's traffic after the last one is another switch.
  if (!meets_prediction && !distinct && !switches_.empty() &&
      traffic_at - (switches_.back().middle + switches_.back().halfwidth) <= 4.0 * measurement_gap) {
    return SwitchSeen::kRepeated;
  }
  // The regime that ended was served by the model an anticipation replaced,
  // not by the returning domain's model published ahead of the switch.
  regime_models_.push_back(active_ ? pre_anticipation_model_ : served_at);
  regime_better_.push_back(better);
  regime_alike_.push_back(better >= 0 ? -1 : alike);
  switches_.push_back(Switch{at, middle, halfwidth, lead, at_learned});
  republished_in_regime_ = false;
  if (!active_) return SwitchSeen::kRecorded;
  if (within) {
    active_->confirmed = true;  // holds on until the traffic is past it (Settle)
    active_->seen_at = traffic_at;
    return SwitchSeen::kConfirmed;
  }
  pattern_from_ = switches_.size() - 1;
  active_.reset();
  return SwitchSeen::kRefuted;
}

bool ReturnPredictor::Meets(const Return& r, double middle, double halfwidth, double lead) {
  // The estimate's error grows with the traffic's lead over the producer (kLeadShare).
  return std::fabs(middle - r.change) <= r.tolerance + halfwidth + kLeadShare * std::max(0.0, lead);
}

void ReturnPredictor::PlaceSwitch(size_t i, double middle, double halfwidth) {
  if (i >= switches_.size()) return;
  switches_[i].middle = middle;
  switches_[i].halfwidth = halfwidth;
}

size_t ReturnPredictor::RegimeOf(int64_t model) const {
  // A model is of the domain it was trained on. The producer trains through
  // iteration m on the data of iteration m, and the traffic reaches a
  // switch no later than the producer does (under the wall clock it leads),
  // so a model up to the first measurement after the switch, or before the
  // switch's place in the traffic (its middle), was trained before it:
  // counted with the switch's `at` alone, the model measured at the switch
  // was the new regime's, and its re-publish at the return showed no cycle
  // (bench/README.md, "Thirty-second session"). But where the traffic did
  // not lead the producer by half a measurement gap (before any stall, or
  // on a fast tier) the producer trained past the switch's middle before
  // `at`, and a model that learns a domain within a gap (a label swap on
  // the MLP) measured there better than the ending domain's: it is the new
  // regime's. Counted before it, the swap's first model re-published at the
  // second swap back read as three regimes back, and the cycle of two
  // labellings as 3 (h12's n-swaps500 pfs/train, 104.7% over the oracle;
  // 83.1% with the model's measurement read; bench/README.md,
  // "Fifty-ninth session").
  return static_cast<size_t>(std::upper_bound(switches_.begin(), switches_.end(), model,
                                              [](int64_t m, const Switch& w) {
                                                const bool before_at =
                                                    m < w.at || (m == w.at && !w.at_learned);
                                                return before_at || static_cast<double>(m) < w.middle;
                                              }) -
                             switches_.begin());
}

bool ReturnPredictor::SameDomain(int64_t a, int64_t b) const {
  const size_t ra = RegimeOf(a), rb = RegimeOf(b), apart = ra > rb ? ra - rb : rb - ra;
  return cycle_ > 0 && apart % cycle_ == 0;
}

void ReturnPredictor::NoteRepublish(int64_t model) {
  if (republished_in_regime_) return;
  const size_t from = RegimeOf(model), now_regime = switches_.size();
  if (now_regime < from + 2) return;
  cycle_ = now_regime - from;
  republished_in_regime_ = true;
}

std::optional<ReturnPredictor::Return> ReturnPredictor::PredictedReturn(double measurement_gap) const {
  if (!enabled_ || cycle_ < 2) return std::nullopt;
  const size_t n = switches_.size();
  if (n < pattern_from_ + 2) return std::nullopt;
  // The spacing: from the last two switches while only two are known since
  // the last refuted prediction (a domain has come back, so the traffic
  // recurs; a wrong guess is refuted and costs one stay), else from the last
  // three, which must be evenly spaced: their intervals agree within what
  // the switches' half-widths and the errors of their estimated positions
  // (kLeadShare of each one's lead) allow, or 5%. Without the leads, on
  // pfs under the wall clock a recurring pattern's switches, placed 100-140
  // iterations short at leads of 700-900, often looked uneven and the next
  // return went unpredicted (bench/README.md, "Twenty-ninth session").
  const bool two = n == pattern_from_ + 2;
  const Switch* w = &switches_[n - (two ? 2 : 3)];
  const double i1 = w[1].middle - w[0].middle, i2 = two ? i1 : w[2].middle - w[1].middle;
  const double u[3] = {w[0].halfwidth, w[1].halfwidth, two ? w[1].halfwidth : w[2].halfwidth};
  const double e[3] = {kLeadShare * w[0].lead, kLeadShare * w[1].lead, kLeadShare * (two ? w[1].lead : w[2].lead)};
  const double allowed = u[0] + 2 * u[1] + u[2] + e[0] + 2 * e[1] + e[2];
  if (!(i1 > 0 && i2 > 0) || std::fabs(i1 - i2) > std::max(0.05 * std::max(i1, i2), allowed)) return std::nullopt;
  // The upcoming regime's domain is the one `cycle_` regimes before it.
  const size_t upcoming = n + 1;
  if (upcoming < cycle_ || upcoming - cycle_ >= regime_models_.size()) return std::nullopt;
  Return r;
  r.change = switches_.back().middle + (two ? i1 : 0.5 * (i1 + i2));
  // The domain's best model at its last visit's end: the producer's own
  // when it measured better than the served one there (trained on that
  // domain for the whole visit), else the served one.
  const size_t q = upcoming - cycle_;
  r.model = regime_better_[q] >= 0 ? regime_better_[q] : regime_models_[q];
  // The visit's own last model, where it measured as well as the served
  // one there: tried first when `model` is not kept, and re-measured with
  // it, so that PublishAhead can weigh the two on the ending traffic.
  if (regime_alike_[q] >= 0 && regime_alike_[q] != r.model) {
    r.alike = regime_alike_[q];
    r.fallbacks.push_back(r.alike);
  }
  // Its other models, for when that one was not kept: the model served at
  // that visit, then each earlier visit's, newest first. A visit the lag
  // outlasts leaves no model of its own: the producer's best there was
  // never copied (nothing knew the domain would come back when it was the
  // producer's), and what served it was the other domain's model, or the
  // one a publish sent too late. The domain's model from the visit before
  // is kept (published then) and serves it better than the wrong domain's:
  // without it no anticipation went out, and on pfs every return after the
  // first was served the ending domain's model (h16's s-recur55 pfs/req
  // 110.0 -> 64.6%, h10's k-recur70 pfs/req 104.1 -> 51.3%;
  // bench/README.md, "Sixtieth session").
  // A visit's served model is the domain's only where nothing measured
  // better there or it was trained in a regime the cycle puts in that
  // domain (RegimeOf): the model a lag left serving a visit is the other
  // domain's, and published for the return it serves the wrong domain
  // again. (Read from the cycle, a multiple of the true one, 4 for two
  // domains, puts the domain's own models in another: set 17's t-swaps500
  // on host, 1.39 -> 1.45 x the oracle. Read instead from the producer's
  // own model measuring better by the gate's margin, it missed where the
  // producer was still re-learning the domain at the visit's end: h10's
  // k-recur70 pfs/req gained nothing.)
  auto of_domain = [&](size_t p, int64_t m) {
    const size_t trained = RegimeOf(m);
    return regime_better_[p] < 0 || (trained <= q && (q - trained) % cycle_ == 0);
  };
  for (size_t p = q + cycle_; p >= cycle_;) {
    p -= cycle_;
    for (int64_t m : {regime_better_[p], of_domain(p, regime_models_[p]) ? regime_models_[p] : int64_t{-1}}) {
      if (m >= 0 && m != r.model &&
          std::find(r.fallbacks.begin(), r.fallbacks.end(), m) == r.fallbacks.end()) {
        r.fallbacks.push_back(m);
      }
    }
  }
  r.tolerance = std::max(0.05 * i2, 2.0 * std::max({u[0], u[1], u[2]}) + measurement_gap);
  return r;
}

std::optional<std::pair<int64_t, double>> ReturnPredictor::PublishAhead(
    double traffic, double delivery_lag, double horizon, int64_t served_model,
    const std::vector<std::pair<int64_t, double>>& kept_now, double measurement_gap, double late_share) {
  auto r = PredictedReturn(measurement_gap);
  if (!r || r->model == served_model || !(traffic < r->change) || !(r->change <= horizon))
    return std::nullopt;
  if (!LandsAtReturn(*r, traffic + delivery_lag, measurement_gap, late_share)) return std::nullopt;
  auto kept = FirstKept(r->model, r->fallbacks, served_model, kept_now);
  if (!kept) return std::nullopt;
  // Ahead of its switch the return's model serves the end of the ending
  // domain's stay first. Of two models that measured alike on the returning
  // domain, the one that measures better on today's (ending) traffic serves
  // that stretch better: the newer, trained through a stay of the other
  // domain too. Live, two recurring domains: the second return's model was
  // the pre-drift 600 where the stay's own 1750 measured the same on its
  // domain; 1750 served the ending stay at 0.64 per request against 0.88,
  // and the run 0.944 -> 0.912 per request (three runs each;
  // workflow/README.md, "Sixty-sixth session").
  if (r->alike >= 0 && kept->first == r->model) {
    const auto alike = std::find_if(kept_now.begin(), kept_now.end(),
                                    [&](const auto& e) { return e.first == r->alike; });
    if (alike != kept_now.end() && alike->second < kept->second) kept = *alike;
  }
  r->model = kept->first;
  pending_ = r;
  return kept;
}

std::optional<std::pair<int64_t, double>> ReturnPredictor::FirstKept(
    int64_t model, const std::vector<int64_t>& fallbacks, int64_t served_model,
    const std::vector<std::pair<int64_t, double>>& kept_now) {
  // The first of the domain's models that serves or is kept: one that
  // serves already needs no anticipation (an older visit's model published
  // in its place cost a stall for the same domain: h17's t-swaps500
  // pfs/train 39.4 -> 51.7%).
  std::vector<int64_t> models{model};
  models.insert(models.end(), fallbacks.begin(), fallbacks.end());
  for (int64_t m : models) {
    if (m == served_model) return std::nullopt;
    if (m < 0) continue;
    const auto k =
        std::find_if(kept_now.begin(), kept_now.end(), [&](const auto& e) { return e.first == m; });
    if (k != kept_now.end()) return *k;
  }
  return std::nullopt;
}

bool ReturnPredictor::LandsAtReturn(const Return& r, double arrival, double measurement_gap,
                                    double late_share) const {
  // From the measurement whose delivery lands nearest the middle of the gap
  // before the predicted switch (the switch happened somewhere in it), and
  // no later than late_share of the spacing after it.
  return arrival >= r.change - 0.5 * measurement_gap &&
         !(arrival - r.change > late_share * (r.change - switches_.back().middle));
}

bool ReturnPredictor::AdoptServed(double traffic, double delivery_lag, double horizon, int64_t served_model,
                                  double served_loss, double measurement_gap, double late_share) {
  if (active_ || pending_) return false;
  auto r = PredictedReturn(measurement_gap);
  if (!r || !(traffic < r->change) || !(r->change <= horizon)) return false;
  // The prediction's model or one of its fallbacks: PublishAhead stops at a
  // served fallback, and unadopted it held nothing, so a fresh model of the
  // ending domain went out and served past the switch (h12's n-swaps500
  // pfs/train 83.1 -> 43.6%; bench/README.md, "Sixtieth session").
  if (r->model != served_model) {
    if (std::find(r->fallbacks.begin(), r->fallbacks.end(), served_model) == r->fallbacks.end()) return false;
    r->model = served_model;
  }
  if (!LandsAtReturn(*r, traffic + delivery_lag, measurement_gap, late_share)) return false;
  active_ = r;
  active_->loss = served_loss;
  pre_anticipation_model_ = served_model;
  return true;
}

double ReturnPredictor::PositionError() const {
  const size_t n = switches_.size();
  double error = 0;
  for (size_t i = n >= 2 ? n - 2 : 0; i < n; ++i) error += kLeadShare * std::max(0.0, switches_[i].lead);
  return error;
}

std::optional<double> ReturnPredictor::SwitchSpacing() const {
  if (switches_.size() < 2) return std::nullopt;
  std::vector<double> spacing;
  for (size_t i = 1; i < switches_.size(); ++i) spacing.push_back(switches_[i].middle - switches_[i - 1].middle);
  const double median = Median(std::move(spacing));
  if (!(median > 0)) return std::nullopt;
  return median;
}

void ReturnPredictor::Activate(double loss, int64_t replaced_model) {
  active_ = pending_;
  active_->loss = loss;
  pre_anticipation_model_ = replaced_model;
  pending_.reset();
}

bool ReturnPredictor::ServedShowsReturn(std::optional<double> served_loss, double gate_margin) const {
  return active_ && !active_->confirmed && served_loss && *served_loss < active_->loss - 2.0 * gate_margin;
}

size_t ReturnPredictor::ShownFor(const std::vector<double>& served, double gate_margin) const {
  size_t shown = 0;
  for (size_t i = served.size(); i-- > 1 && ServedShowsReturn(served[i - 1], gate_margin);) ++shown;
  return shown;
}

bool ReturnPredictor::Settle(double traffic, double measurement_gap, double horizon) {
  if (!active_) return false;
  // The traffic has reached the run's end: a switch predicted within the
  // tolerance of it can no longer be seen, and a hold waiting for one would
  // keep the returning domain's model serving the traffic that stayed
  // (h16's s-recur55 pfs/train held it at 3.77 for the last 800 iterations
  // against a candidate at 0.45). Not counted as a failure: the run ended
  // before it could be judged.
  if (traffic >= horizon) {
    active_.reset();
    return false;
  }
  // A confirmed switch holds until the traffic is past the predicted
  // switch's middle by half a measurement gap and one measurement past where
  // it was seen (a switch seen part-way, as it happens under the wall clock,
  // is still under way: the old domain's model may still measure better there).
  if (active_->confirmed) {
    if (traffic >= active_->change + 0.5 * measurement_gap && traffic > active_->seen_at) active_.reset();
    return false;
  }
  if (traffic > active_->change + active_->tolerance) {
    pattern_from_ = switches_.size();
    active_.reset();
    return true;
  }
  return false;
}

}  // namespace internal
}  // namespace schedulers
}  // namespace viper
