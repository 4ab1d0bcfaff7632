// The closed-loop planner's options (OnlinePlanner::Options; online.h says
// what the loop does with each): the planning metric, the quality gate, change
// detection, fitting, staleness (decay, kept models, anticipated returns,
// young ramps, the wall clock's drift prior) and recording.
#pragma once

#include <string>

namespace viper {
namespace schedulers {

// What an observation is.
enum class ObservationKind {
  kTraining,    // the training loss of one iteration's batch
  kValidation,  // the loss of the current model on the producer's validation sample
};

// Which models the producer copies (without publishing them) so that the
// last of a regime before a detected change can be published again. Each
// copy blocks the producer cost.keep_copy_s (Plan::kept; the judge charges
// it). The warm-up's and published models are kept in any case (their
// snapshots: no copy).
enum class RegimeEnds {
  kOff,        // no copy: a regime's end is never kept
  kPredicted,  // a copy at the measurement before a predicted switch (a
               // recurring domain whose cycle is known): ~1 per regime
  kEvery,      // a copy at every validation point after the warm-up (any may
               // be the last before a change)
};
const char* ToString(RegimeEnds r);
// "off", "predicted", "every"; false for anything else.
bool RegimeEndsFromString(const std::string& s, RegimeEnds* out);

struct OnlinePlannerOptions {
  // The planning metric: which observations are forecast, gated and
  // planned on. kValidation when validation losses are logged.
  ObservationKind metric = ObservationKind::kValidation;
  // Quality gate: a candidate is published only when its measured loss is
  // below the served version's by more than gate_z noise standard
  // deviations of a difference of two measurements; 0 = no gate.
  double gate_z = 0.5;
  // Page-Hinkley alarm threshold and per-point allowance, in noise
  // standard deviations (> 0).
  double change_threshold = 6.0;
  double change_allowance = 0.5;
  // Fewest points of a regime before the forecaster is fitted (>= 3);
  // fewer give a flat forecast at their median. The forecaster may need
  // more: until it fits, the forecast is flat at the latest points'
  // median (OnlineForecasters fits from max(5, this)).
  int min_fit_points = 8;
  // Re-fit when the regime's points have grown by this factor since the
  // last fit (> 1).
  double refit_growth = 1.5;
  // Latest measurements used for the noise estimate (>= 3), and fewest
  // before the regime's own estimate is trusted (>= 2).
  int noise_window = 32;
  int min_noise_points = 4;
  // Measurements averaged into one when the metric is the training loss
  // (one noisy batch per iteration); >= 1.
  int training_smoothing = 25;
  // Relative gap each re-plan may be certified at (SolveOptions): in
  // [0, 1e-2]; 0 = the exact certificate. A forecast is never that exact.
  double replan_gap = 1e-6;
  // Latest re-measurements of served versions the decay rate is fitted on
  // (>= 2).
  int decay_window = 8;
  // Published models kept for re-publishing (>= 0; 0 = never re-publish).
  int keep_versions = 8;
  // With keep_versions > 0: which regimes' ends are kept (RegimeEnds).
  RegimeEnds regime_ends = RegimeEnds::kPredicted;
  // Anticipate a recurring domain's return (needs keep_versions > 0). A
  // switch is a detected change, a re-publish after none was detected
  // (a regime too short to fit a curve to is never detected as a change,
  // but a kept model that wins while the served one measures worse than
  // when it was published shows the domain changed), or a jump of the
  // served model between two consecutive measurements of it (served at
  // both, or, when it went out between, kept or the producer's own at the
  // first) by more than change_threshold noise sd (a domain the producer
  // never forgets comes back without moving its own loss). Once a kept
  // model of two or more regimes back won a re-publish, or would have but
  // for arriving too late (a domain came back) and either only two
  // switches are known (their interval is the spacing) or the last three
  // are evenly spaced (within what their measurement gaps allow, or 5%),
  // the model that served the returning domain last time is published so
  // that it arrives at the predicted switch, and nothing else is published
  // until the switch is seen (a change detected, or the published model
  // re-measured better than when it was published by more than twice the
  // gate's margin). A prediction the data does not confirm stops
  // anticipation until two new switches are seen (three evenly spaced ones
  // from then on).
  bool anticipate_returns = true;
  // Under the wall traffic clock, with the served and kept models
  // re-measured: while the traffic is on a young ramp, publish nothing.
  // A ramp: some fixed model (served or kept) measured worse at each of
  // its last two re-measurements or more, by twice the gate's margin
  // each, and none measured better at the last one by three times that
  // (a domain coming back is a switch, not a ramp). Young: the traffic
  // has moved less since the rise began than a checkpoint's lag (its
  // stall plus its delivery, in iterations). Only where that lag spans
  // three measurement gaps or more. A version published then reaches the
  // traffic no closer to it than the served one is now, and its stall
  // leaves every later version further behind a traffic that keeps
  // moving; the re-plan cannot see that, since a ramp's decay is measured
  // only from three re-measurements after the change it starts. An
  // anticipated return is never held (bench/README.md, "Fifteenth
  // session").
  bool hold_young_ramps = true;
  // A rent-or-buy guard on the re-plan's waits (>= 0, at most 1000; 0 =
  // off). Since the last publish, the planner sums what the traffic paid for
  // waiting as the producer measures it: at each measurement, the served
  // model's re-measured loss over the candidate's, less the gate's margin,
  // times the seconds since the measurement before. Once that sum exceeds
  // wait_guard x a stall's seconds x the candidate's loss (what one more
  // checkpoint costs the requests served after it, roughly), the candidate
  // is published where the re-plan or a switch hold (StallOutweighsGain)
  // would wait. Not on a ramp (the served model still rising, or a young
  // ramp's hold: a fresh version falls behind the traffic too, and the
  // re-plan's spacing is the price of that), nor while an anticipated
  // return holds, nor where the gate refuses the candidate now. Only with
  // the served model re-measured (a staleness table offline, ObserveServed
  // live): on the diagonal nothing changes. The re-plan reads a step after
  // a change as a rate of decay and can push its next checkpoint on while
  // the served model measures several times the candidate's loss (set 14's
  // q-swaps800 on pfs, from the swap at 1102 to the next one: 1.65 against
  // 0.40-0.45). 522 wall cases: mean 11.65 -> 11.30%, 14 better, 4 worse,
  // worst 121.4 -> 110.0% (bench/README.md, "Fifty-eighth session").
  double wait_guard = 4.0;
  // Re-measuring beside training (cost.remeasure_beside): at a calm
  // validation point (DecidesBeforeRemeasured: its loss within twice the
  // gate's margin of the point before, no switch seen yet, no return
  // anticipated) the decision goes out at once, on what the loop knew
  // before the point's re-measurements; the served and kept models'
  // answers reach it before the next point's, attributed to their point
  // (the served version's through ObserveServedLate, which records the
  // switch a jump there shows). Nothing is copied aside there and no
  // decision waits. On the 522-case pool mean 14.37 -> 13.62%, median
  // 7.38 -> 6.63%, worse than epoch 38 -> 34 (303 better, 60 worse);
  // held-out sets 18-19 14.49 -> 13.85% (bench/README.md, "Sixty-fourth
  // session").
  bool calm_decisions = true;
  // Re-measuring beside training, at a validation point that is not calm:
  // the decision waits only for the answers that can win a switch (the
  // served version's, then KeptVersions' first ones: the predicted
  // return's models, each ended regime's, the warm-up's); the newest
  // published versions of the serving domain follow on the helper and
  // reach the loop before the next point, as a calm point's do. A switch
  // leaves those as stale as the served version. On the 186-case
  // development pool mean 11.40 -> 10.82% (49 better, 1 worse),
  // recurring 37.6 -> 34.3% (bench/README.md, "Sixty-fifth session").
  // Where nothing says an older domain is back (OnlinePlanner::
  // KeptModelsInPlay), only a predicted return's models are waited for
  // (sixty-seventh session).
  bool partial_waits = true;
  // SetPace changes the pace the re-plans use only when the measured one
  // differs from it by more than this fraction (>= 0): a pace that moves by
  // a few percent is noise to plan on (under the wall clock it shifts where
  // the traffic is against a recurring domain's switches and flips
  // decisions), one that doubles is not.
  double pace_tolerance = 0.1;
  // A prior over traffic drift, for the wall clock's lag price (>= 0, at
  // most 1000; 0 = none). Under TrafficClock::kWall every stall leaves each
  // later version further behind the traffic, and the price of that lag is
  // the served versions' decay; before a drift no decay is measured, so a
  // checkpoint taken then is free of lag, and a drift that follows finds the
  // producer behind by every stall (bench/README.md, "Twelfth session").
  // With a prior, until a change is detected or a decay measured, the decay
  // priced is drift_prior x the candidate's measured loss per serving
  // window (1: the traffic is expected to double a stale model's loss over
  // the window), so checkpoints whose gain does not pay for that lag are not
  // taken; from then on the measured decay alone, except over a settled
  // step: after a detected change, while the served model is from before
  // it and not still rising, its excess is a step, not a rate, and the
  // prior prices the lag again (bench/README.md, "Seventeenth session").
  // It applies only once the served version has been re-measured
  // (ObserveServed: a staleness table, a live producer, Python's
  // observe_served): without re-measurements neither the planner nor the
  // diagonal judge can see a drift, and the prior would only cost
  // checkpoints. Default 3 since the thirty-seventh session (1.5 from the
  // fourteenth; bench/README.md, "Thirty-seventh session": on 540 wall
  // cases of the shipped logs and twelve sets, mean regret 14.1 -> 12.9%,
  // cases worse than epoch 27 -> 24; on 156 cases of four sets the sweep
  // had not seen, one of them a fresh draw, 13.6 -> 12.4%; calm runs pay
  // a few tenths of a point, nodrift mean 2.0 -> 2.3%). It changes
  // nothing under TrafficClock::kProducer.
  double drift_prior = 3.0;
  // Record one Decision per decision taken (decisions()): what the loop
  // saw and chose at each measurement after the warm-up. Off by default
  // (a few hundred bytes per measurement).
  bool record_decisions = false;

  bool IsValid(std::string* error) const;
};

}  // namespace schedulers
}  // namespace viper
