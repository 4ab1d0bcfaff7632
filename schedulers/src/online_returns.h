// Anticipating a recurring domain's return, for the closed-loop planner
// (OnlinePlanner::Options::anticipate_returns; schedulers/README.md).
//
// A switch is a change of the traffic's domain the planner has seen: a
// detected regime change, a re-publish of a kept model of another regime
// after none was detected, while the served model measures worse than when it
// was published, or a jump of the served model between two re-measurements
// (the planner decides; AddSwitch records). The predictor keeps the switches (where each fell,
// in traffic iterations, and how wide the gap it fell in was), the model that
// served each ended regime, and how many regimes back a domain came from
// when a kept model won a re-publish (the cycle). Once a domain came back
// (two or more regimes back) and two switches are known (their interval is
// the spacing) or the last three are evenly spaced,
// it predicts the next return: where it falls and the model to serve after
// it. The planner publishes that model ahead of it (PublishAhead, then
// Activate at the checkpoint), or, when the served model is that model
// already, holds it (AdoptServed), and publishes nothing else until the
// switch is seen (holding()); a prediction the data does not confirm stops
// predictions until two new switches are seen.
//
// It reads nothing of the planner: the traffic position, the measurement
// gap, the served model, the kept models re-measured now and the gate's
// margin are passed in by the planner at each call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace viper {
namespace schedulers {
namespace internal {

// A switch's traffic position is the planner's estimate (TrafficAt): under
// the wall clock, the stalled seconds converted at the pace measured so far.
// Its error grows with that lead: 14-20% of it at three switches of set 1's
// h-recur60 pfs/train, which placed a switch 175 traffic iterations before
// the predicted one, 5 past the tolerance, refuted a right prediction and
// left the next switch unpredicted. A switch meets a prediction within this
// share of its lead more (bench/README.md, "Twenty-ninth session"); the
// planner reads the traffic's end with the same allowance.
inline constexpr double kLeadShare = 0.1;

// viper::Median (viper/core/median.h) with 0 for an empty sample, which the
// return predictor and the planner's noise estimate rely on.
double Median(std::vector<double> v);

class ReturnPredictor {
 public:
  // A predicted return of a recurring domain.
  struct Return {
    double change = 0;       // the predicted switch's middle (traffic iterations)
    int64_t model = 0;       // the model to serve after it
    // The returning domain's other models, tried in this order when `model`
    // is not kept: the model served at its last visit, then each earlier
    // visit's (its better model, the served one), newest visit first.
    std::vector<int64_t> fallbacks;
    double tolerance = 0;    // how far from `change` a switch confirms it
    bool confirmed = false;  // a switch was seen within the tolerance
    double loss = 0;         // the model's measured loss when it was published (the old domain's)
    double seen_at = 0;      // the traffic's iteration at that switch
    // The visit's own last model where it measured as well as `model` on the
    // domain (within the gate's margin; AddSwitch's `alike`; -1: none). It
    // is also the first of the fallbacks. Published ahead of the switch, a
    // return's model serves the ending domain's traffic first: PublishAhead
    // takes this one where it measures better there now.
    int64_t alike = -1;
  };
  // One switch: the iteration of the first measurement after it, and its
  // middle and half-width in traffic iterations (between the traffic of the
  // last measurement before it and of the first after it), and the traffic's
  // lead over the producer when it was seen (traffic - at; the estimated
  // position's error grows with it, kLeadShare); `at_learned` whether the
  // producer's model at `at` had learned the new domain there (AddSwitch).
  struct Switch {
    int64_t at = 0;
    double middle = 0, halfwidth = 0;
    double lead = 0;
    bool at_learned = false;
  };
  // What AddSwitch made of a switch.
  enum class SwitchSeen {
    kRepeated,   // within four measurement gaps of traffic after the last one, not the predicted return and not
                 // `distinct`: the same switch, ignored
    kRecorded,   // a new switch, no anticipation waiting for it
    kConfirmed,  // a new switch whose interval meets the active anticipation's tolerance
    kRefuted,    // a new switch outside it: the prediction failed
  };

  // `enabled` false: never predicts (switches are still recorded: the
  // planner keeps each ended regime's served model for re-publishing).
  explicit ReturnPredictor(bool enabled) : enabled_(enabled) {}

  // Records a switch whose first measurement after it is at iteration `at`
  // (traffic `traffic_at`), the last measurement before it at traffic
  // `traffic_before` (= traffic_at without one); `served_at` is the model
  // served at `at`, `measurement_gap` the spacing of the latest measurements;
  // `better` (-1: none) the producer's own model at the last measurement
  // before the switch when it measured better than the served one there:
  // the ending domain's best model, which a return publishes first.
  // `distinct`: the planner saw the traffic change domain again since the
  // last switch (OnlinePlanner::ReversedSinceLastSwitch), so this is another
  // switch however close to the last one (kRepeated never applies).
  // `at_learned`: the producer's own model at `at` measured there better
  // than the model serving the ending domain by the gate's margin (the
  // planner decides): it had learned the new domain, so it is the new
  // regime's (RegimeOf).
  // `alike` (-1: none): that last model when it measured no better than
  // the served one but within the gate's margin of it (Return::alike).
  // Confirms or refutes the active anticipation: a switch within its
  // tolerance, the switch's half-width and a tenth of the traffic's lead
  // over the producer (traffic_at - at, the estimated position's error
  // growing with it) confirms it.
  SwitchSeen AddSwitch(int64_t at, double traffic_before, double traffic_at, int64_t served_at,
                       double measurement_gap, int64_t better = -1, bool distinct = false,
                       bool at_learned = false, int64_t alike = -1);
  // The regime of the data a model was trained on (0 before the first
  // switch): a model up to a switch's first measurement `at`, or before its
  // middle in the traffic, is of the regime before it; the model at `at`
  // itself is the new regime's when it had learned the new domain there
  // (Switch::at_learned) and was made past the switch's middle.
  size_t RegimeOf(int64_t model) const;
  // Whether two models were trained on one domain by the cycle learned:
  // regimes a multiple of it apart, the same regime included (false while
  // no cycle is known).
  bool SameDomain(int64_t a, int64_t b) const;
  // A kept model won a re-publish (or would have, but for arriving too
  // late): the first such of a regime from two or more regimes back says
  // how many regimes back its domain was (the cycle). A model of the regime
  // just ended says nothing: it wins where the traffic is part-way through
  // the switch back, a blend its early, least-adapted models measure best
  // on, and it must not hide the older domain's model that wins a
  // measurement later (bench/README.md, "Twenty-third session").
  void NoteRepublish(int64_t model);

  // Whether a switch (its middle and half-width, seen `lead` traffic
  // iterations ahead of the producer) falls where return `r` predicted it:
  // within its tolerance, the half-width and kLeadShare of the lead.
  static bool Meets(const Return& r, double middle, double halfwidth, double lead);

  // The next return, or nullopt when the evidence (a domain came back, the
  // last two switches since the last refuted prediction, or the last three
  // evenly spaced: within 5%, or what their half-widths and kLeadShare of
  // their leads allow) is
  // not there or the model that served the returning domain is unknown.
  std::optional<Return> PredictedReturn(double measurement_gap) const;

  // At a measurement where the planner may publish and is not holding: the
  // kept model (and its loss measured now, from `kept_now`) to publish now so
  // that it arrives, `delivery_lag` traffic iterations after `traffic`, at
  // the predicted switch (from half a measurement gap before its middle);
  // nullopt when there is no prediction, it is past or beyond `horizon`, the
  // model serves already, neither it nor a fallback was re-measured now,
  // it is too early, or it would arrive after the predicted switch by more
  // than `late_share` of the spacing (a delivery lag as long as a stay: it
  // would serve its domain for little of it, then the wrong one after the
  // next switch). A model returned becomes the pending anticipation.
  std::optional<std::pair<int64_t, double>> PublishAhead(
      double traffic, double delivery_lag, double horizon, int64_t served_model,
      const std::vector<std::pair<int64_t, double>>& kept_now, double measurement_gap, double late_share = 1.0);
  // Of a returning domain's `model` and its `fallbacks`, in that order, the
  // first re-measured now (in `kept_now`, with its loss there); nullopt
  // when none is, or when `served_model` comes first (the domain's model
  // serves already). PublishAhead's choice, and the planner's for a
  // predicted return seen before its model went out.
  static std::optional<std::pair<int64_t, double>> FirstKept(
      int64_t model, const std::vector<int64_t>& fallbacks, int64_t served_model,
      const std::vector<std::pair<int64_t, double>>& kept_now);
  // Whether the served model is already the predicted return's model (or
  // one of its fallbacks) and a publish now would land at the predicted
  // switch (PublishAhead's window): the served model then becomes the
  // active anticipation, measuring
  // `served_loss` now (it holds every other publish until its switch).
  bool AdoptServed(double traffic, double delivery_lag, double horizon, int64_t served_model, double served_loss,
                   double measurement_gap, double late_share);
  // Whether a pending anticipation (PublishAhead) awaits its checkpoint.
  bool pending() const { return pending_.has_value(); }
  // Forgets the pending anticipation (a new decision, or a checkpoint that
  // did not publish it).
  void DropPending() { pending_.reset(); }
  // The pending anticipation was published, its model measuring `loss`, in
  // place of `replaced_model`: it becomes active.
  void Activate(double loss, int64_t replaced_model);

  // Whether the served model's re-measurement `served_loss` shows the active,
  // unconfirmed anticipation's switch: better than at its publishing by twice
  // the gate's margin `gate_margin` (the traffic came back to its domain).
  bool ServedShowsReturn(std::optional<double> served_loss, double gate_margin) const;
  // For how many measurements before the latest the served model has shown
  // it without a break (0: only at the latest), by today's margin: `served`
  // is one model's re-measurements at consecutive measurements, oldest
  // first, the latest last. The switch fell before the first of them: a
  // return already under way when its model arrived shows from its first
  // re-measurement, and the test may pass only later, when the margin
  // shrinks (bench/README.md, "Twentieth session").
  size_t ShownFor(const std::vector<double>& served, double gate_margin) const;
  // Ends the active anticipation once the traffic is past its switch (when
  // confirmed: by half a measurement gap, and past where it was seen) or
  // past its tolerance (not confirmed: a failed prediction, which stops
  // predictions until two new switches; returns true). Traffic at `horizon`
  // (the run's last iteration N, where the traffic's position stops) ends
  // it either way, not as a failure: no later switch can come to confirm,
  // refute or settle it.
  bool Settle(double traffic, double measurement_gap, double horizon);
  // Whether an active anticipation holds every other publish.
  bool holding() const { return active_.has_value(); }
  // The model the active anticipation replaced: the one that serves the
  // ending domain while the returning domain's model is published ahead of
  // the switch (-1: no anticipation is active).
  int64_t replaced_model() const { return active_ ? pre_anticipation_model_ : -1; }

  // Regimes between a domain and its return (0: no return seen yet).
  size_t cycle() const { return cycle_; }
  // How far the predicted switch may be off for the estimated positions
  // of the two latest switches it is placed from (kLeadShare of each one's
  // lead over the producer; 0 before any switch).
  double PositionError() const;
  // The median spacing of the switches seen (traffic iterations); nullopt
  // before two.
  std::optional<double> SwitchSpacing() const;

  const std::vector<Switch>& switches() const { return switches_; }
  // Places switch `i` anew (a measurement after it showed where in its gap
  // it fell: OnlinePlanner::PlaceSwitchSeenPartWay).
  void PlaceSwitch(size_t i, double middle, double halfwidth);
  // The model that served each ended regime (parallel to switches()).
  const std::vector<int64_t>& regime_models() const { return regime_models_; }
  // Each ended regime's own better model (AddSwitch's `better`; -1: none).
  const std::vector<int64_t>& regime_better() const { return regime_better_; }
  // Each ended regime's own last model as good as the served one (AddSwitch's `alike`; -1: none).
  const std::vector<int64_t>& regime_alike() const { return regime_alike_; }

 private:
  // Whether a publish arriving at traffic `arrival` lands at return `r`:
  // PublishAhead's window, which AdoptServed shares.
  bool LandsAtReturn(const Return& r, double arrival, double measurement_gap, double late_share) const;

  bool enabled_;
  std::vector<Switch> switches_;
  std::vector<int64_t> regime_models_;
  std::vector<int64_t> regime_better_;  // parallel: AddSwitch's `better` (-1: the served one was best)
  std::vector<int64_t> regime_alike_;   // parallel: AddSwitch's `alike`
  size_t cycle_ = 0;         // regimes between a domain and its return (0: none seen)
  size_t pattern_from_ = 0;  // the first switch the spacing is judged from
  bool republished_in_regime_ = false;  // the current regime's cycle was noted
  std::optional<Return> pending_;        // decided, not yet committed
  std::optional<Return> active_;         // committed, waiting for its switch
  int64_t pre_anticipation_model_ = -1;  // the model the active one replaced
};

}  // namespace internal
}  // namespace schedulers
}  // namespace viper
