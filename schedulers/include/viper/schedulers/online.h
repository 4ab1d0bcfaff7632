// The closed-loop planner (DESIGN.md §1 "Closed loop"): it consumes every
// observation as it arrives, re-plans exactly from "now" at every measurement
// of the planning metric, detects regime changes and re-fits on the points
// since the change, and publishes a candidate only when its measured loss is
// better than the served version's by more than the measurement noise.
//
// It reads nothing but what it is given through Observe(), in iteration
// order, so it cannot peek: the simulator and the live producer drive the
// same object the same way (Observe ... ShouldCheckpoint ... Commit).
//
// One decision, at a measurement point t with measured loss v:
//  1. noise: sigma = 1.4826 x MAD of the differences between consecutive
//     measurements of the current regime, / sqrt(2) (the spread of one
//     measurement around a slowly moving level); with fewer than
//     min_noise_points of them, the smallest relative noise of any ended
//     regime times the current level (a regime that held a transition, a
//     model re-learning after a switch, measures its own far too high).
//  2. change detection: a two-sided Page-Hinkley test on the standardised
//     residual (v - forecast(t)) / sigma against the regime's fitted curve.
//     On an alarm the curve is first re-fitted on all the regime's points and
//     the test replayed from where the alarm began: a stale fit is not a
//     change. If the re-fitted curve still alarms, a new regime starts at the
//     best two-level split of the values since, and the forecaster is
//     re-fitted on that regime's points only. With fewer than
//     min_fit_points of them the forecast is flat at their median, so a curve
//     that turned flat or upward is never extrapolated downward.
//  3. re-plan: SolveOptimal on the forecast from PlanStart{checkpoints taken,
//     last checkpoint, earliest = t, served_loss = the served version's
//     measured loss}, with the candidate's own measured v at t. The plan wants
//     a checkpoint now when its first one falls before the next measurement.
//  4. gate: it publishes only if v < served - gate_z x sigma x sqrt(2).
// Staleness. When the served version is re-measured on today's validation
// sample (ObserveServed: a live producer re-validates it; offline, the
// staleness table's val_loss of (served version, now) and nothing later),
// `served` is that re-measurement, so a version from before a concept change
// is compared with the candidate as it is now, not as it was. The served
// versions' decay is estimated from their re-measurements: the excess over
// the regime's forecast level at each one's checkpoint against the seconds
// since (not over the measurement it was committed on, which passed the gate
// and so is biased low by the noise; and not over its first re-measurement,
// which a version replaced at the next measurement never gets past, so a
// fast drift that makes the planner publish often went unseen), a line
// through the origin over the latest decay_window re-measurements (kept only
// when their mean excess exceeds the gate's margin and the slope is a
// standard error above zero, so noise is no decay).
// A step after a change shows as a steep rate while it is recent; a gradual
// drift as a steady one; no drift as none. The re-plan charges every version
// that rate (the solver's linear drift term, loss + rate x age), the served
// one from its re-measured level now.
// Re-publishing (recurring domains). The producer keeps the last
// keep_versions models it published or copied last before a detected
// change (regime_ends: a copy where a switch is predicted next, or at every
// validation point; the copies are Plan::kept, each a producer stall the
// judge charges), and the warm-up's; when they are
// re-measured on today's validation sample (ObserveKept; offline, the
// table's val_loss of (kept version, now)) and one measures better than both
// the candidate and the served version by the gate's margin plus
// sqrt(2 ln (K + 1)) noise sd of a difference (the best of K noisy
// measurements is biased low by about that), the decision is to publish that
// kept model (publishing()), at the cost of a checkpoint.
// Re-fitting is geometric (when the regime's points have grown by
// refit_growth since the last fit), so a regime of n points costs O(log n)
// fits; the forecast curve is computed once per fit and reused by every
// re-plan.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"
#include "viper/schedulers/online_decisions.h"
#include "viper/schedulers/online_options.h"
#include "viper/schedulers/problem.h"
#include "viper/schedulers/solvers.h"

namespace viper {
namespace schedulers {
namespace internal {
class ReturnPredictor;  // online_returns.h: anticipating a recurring domain's return
}  // namespace internal

// Forecasts the loss curve from the losses observed so far.
class Forecaster {
 public:
  virtual ~Forecaster() = default;
  // Predicted losses for every iteration in [first, last] (finite, >= 0),
  // from the points of `observed` (iterations increasing).
  virtual StatusOr<LossCurve> Forecast(const predictor::CurveData& observed, int64_t first, int64_t last) = 0;
};

// Makes a fresh forecaster (one per regime: a fit must not carry over a change).
using ForecasterFactory = std::function<std::unique_ptr<Forecaster>()>;

// A Forecaster backed by predictor::LearningCurvePredictor: Fit on the first
// call, Refit (warm-started) when more points are observed.
std::unique_ptr<Forecaster> MakePredictorForecaster(const predictor::LearningCurvePredictor::Options& options);
ForecasterFactory PredictorForecasterFactory(const predictor::LearningCurvePredictor::Options& options);

class OnlinePlanner {
 public:
  // OnlinePlannerOptions (online_options.h): what the loop may do and how.
  using Options = OnlinePlannerOptions;
  // OnlineDecision (online_decisions.h): one decision, recorded.
  using Decision = OnlineDecision;

  // What the planner has done, for reports.
  struct Summary {
    int64_t observations = 0;  // Observe() calls
    int64_t replans = 0;       // re-plans (SolveOptimal, certified within replan_gap)
    int64_t refits = 0;        // forecaster fits
    int64_t changes = 0;       // regime changes detected
    int64_t gated = 0;         // candidates refused by the quality gate
    std::vector<int64_t> change_points;  // first iteration of each new regime
    double plan_time_s = 0;    // wall time spent re-planning and fitting (informational)
    double max_certified_gap = 0;  // largest relative gap a re-plan was certified at (<= replan_gap)
    int64_t served_measurements = 0;  // ObserveServed() calls
    double max_decay_per_s = 0;       // the largest decay rate a re-plan used (loss per second)
    // Wall traffic clock: the largest price per second of stall a re-plan
    // added for the lag a stall leaves (decay x requests left).
    double max_lag_price = 0;
    double lag_price = 0;             // the same, added by the latest re-plan (0: none)
    int64_t cost_updates = 0;         // SetCost() calls
    int64_t pace_updates = 0;         // SetPace() calls that changed the pace planned on
    double pace_s = 0;                // the pace planned on at the end (0: the warm-up's tau throughout)
    int64_t diverged = 0;             // non-finite measurements of the metric (a diverged model, never published)
    int64_t republished = 0;          // checkpoints that re-published a kept model
    int64_t anticipated = 0;          // of those, published ahead of a predicted domain return
    int64_t anticipation_failed = 0;  // predicted returns that did not come (within two measurement gaps)
    int64_t ramp_holds = 0;           // publishes held back on a young ramp (Options::hold_young_ramps)
    int64_t switch_holds = 0;         // measurements where a publish was held until the producer trains
                                      // through the traffic's latest switch (StallOutweighsGain)
    int64_t wait_guards = 0;          // publishes the wait guard made where the rest would wait (Options::wait_guard)

    // "online: 12 checkpoints, 94 re-plans, 5 fits, 1 change (at 1550), 3 gated".
    std::string BriefReport(int64_t checkpoints) const;
  };

  // `forecasters` makes one forecaster per regime.
  OnlinePlanner(Problem problem, ForecasterFactory forecasters, Options options);
  OnlinePlanner(Problem problem, ForecasterFactory forecasters) : OnlinePlanner(std::move(problem), std::move(forecasters), Options()) {}
  // Movable, not copyable (defined where internal::ReturnPredictor is complete).
  OnlinePlanner(OnlinePlanner&&) noexcept;
  OnlinePlanner& operator=(OnlinePlanner&&) noexcept;
  ~OnlinePlanner();

  // One observation, in iteration order (several per iteration allowed:
  // the training loss, then the validation loss). InvalidArgument when the
  // iteration goes back. A NaN or infinite loss of the metric is a diverged
  // model: no checkpoint is taken at that measurement, and it enters neither
  // the forecast nor the noise estimate (Summary::diverged counts them).
  Status Observe(int64_t iteration, double loss, ObservationKind kind);
  // Whether to checkpoint after `iteration` (called once per iteration after
  // its observations, iterations increasing). False during the warm-up.
  StatusOr<bool> ShouldCheckpoint(int64_t iteration);
  // Records a checkpoint taken after `iteration` (after the last one, inside
  // (W, N]); its measured loss becomes the served version's. When the
  // decision at `iteration` chose a kept model, that model is what it
  // publishes (publishing()).
  Status Commit(int64_t iteration);
  // The models it keeps and wants re-measured now (KeptVersions, newest
  // first; never the served one): their iterations. `waited_for` (when
  // given): how many of the first ones a decision beside training waits
  // for (Options::partial_waits: the predicted return's, each ended
  // regime's and the warm-up's; all of them without partial waits); the
  // rest are given after the decision, before the next observation.
  std::vector<int64_t> KeptVersions(size_t* waited_for = nullptr) const;
  // The validation points (after the warm-up) whose model the producer is
  // to copy and keep unpublished (Options::regime_ends), increasing: decided
  // in Observe, so a producer copies at `iteration` when copies().back() is
  // it (CopyAt). Plan::kept; each blocks the producer cost.keep_copy_s.
  const std::vector<int64_t>& copies() const { return copies_; }
  bool CopyAt(int64_t iteration) const { return !copies_.empty() && copies_.back() == iteration; }
  // A kept model re-measured now (at the last observed iteration) on the
  // current validation sample. Non-finite: a diverged model, ignored.
  Status ObserveKept(int64_t model_iteration, double loss);
  // The model the last positive decision publishes: its iteration (the
  // decision's own for a fresh model, older for a re-publish).
  int64_t publishing() const { return publishing_; }
  // Whether a model published ahead of a predicted return is waiting for
  // the switch: the served version should be re-measured at every
  // measurement until then (ObserveServed), which is how the switch is seen
  // when no change is detected.
  bool anticipating() const;
  // The traffic's iteration when the producer is at `iteration` (after the
  // warm-up): the same, or under the wall clock where the traffic has got to
  // while the producer stalled for the checkpoints taken before it (at most
  // N): the seconds stalled before it, at the pace in use then. The
  // traffic's lead is the iterations an unstalled producer runs in those
  // seconds, which are still ahead of this one, so all of them go at the
  // latest pace, not each stall's at the pace of its own time (on held-out
  // sets 8-15 the position the judge replays is 19% closer on host and 29%
  // on pfs; bench/README.md, "Twenty-fifth session"). With ObserveClock a
  // past position is read off the producer's clock once it has got there
  // (fractional, as PositionAt; a lead the clock covers in part goes on at
  // the latest pace), unless the lead is under a measurement gap
  // (bench/README.md, "Twenty-seventh session"; online_position.cc). The
  // pauses reported before it (ObservePause: re-measuring) count as
  // stalls do (on the 522-case pool with them charged, mean 23.83 ->
  // 22.42%: bench/README.md, "Sixty-second session").
  double TrafficAt(int64_t iteration) const;
  // The producer's own clock: the training seconds from the end of the
  // warm-up to the end of `iteration` (no stalls; a live producer sums its
  // iterations' times), reported for every iteration after W in order, up
  // to the one it observes next. Under the wall clock the traffic's lead at
  // a past iteration is then a known stretch of this clock, no longer an
  // estimate at the pace, and the switches seen are placed anew on it
  // (TrafficAt). An iteration already reported is ignored. InvalidArgument
  // for seconds that are not finite or run backwards, an iteration that is
  // not the next one, or one before W; holds one double per iteration.
  Status ObserveClock(int64_t iteration, double elapsed_s);
  // The producer paused `seconds` after its measurement at the last observed
  // iteration to re-measure models (Plan::pauses): under the wall clock the
  // traffic moved on meanwhile (TrafficAt counts it).
  Status ObservePause(double seconds);
  // The model each checkpoint published (parallel to taken()), and the one
  // served now (W before any checkpoint).
  const std::vector<int64_t>& published() const { return published_; }
  int64_t served_model() const { return published_.empty() ? problem_.warmup_iterations : published_.back(); }
  // The served version re-measured now (at the last observed iteration) on
  // the current validation sample (a live producer that re-validates it
  // after its data changed; offline, the staleness table's val_loss).
  Status ObserveServed(double loss);
  // Right after a validation point's Observe: whether its decision may go
  // out before its re-measurements are in (Options::calm_decisions). They
  // are then given (ObserveServed, ObserveKept) before the next
  // observation, the served version's through ObserveServedLate.
  bool DecidesBeforeRemeasured() const;
  // The served version's re-measurement at the latest measurement, arriving
  // after that measurement's decision (a calm one): as ObserveServed, or,
  // where the publish there replaced `model`, as that measurement's served
  // re-measurement; a jump it shows is the switch the decision could not
  // see. A model not served there: as ObserveKept.
  Status ObserveServedLate(int64_t model, double loss);
  // The cost of the next checkpoint as measured (a live producer after each
  // version: with delta updates a version's stall and update latency follow
  // the bytes it moves, not the model's size). Later re-plans charge it to
  // every future checkpoint. InvalidArgument for a cost that is not valid.
  Status SetCost(const CheckpointCost& cost);
  // The producer's pace as measured (seconds per training iteration over its
  // latest iterations; a live producer times its own): later re-plans plan
  // the time left, the lag of a stall and the traffic's position on it
  // instead of the warm-up's tau. A run whose pace changes after its warm-up
  // (a shared machine, evaluations, a slower data loader) was planned as if
  // it had ended sooner or later than it does. Taken only when it differs
  // from the pace in use by more than Options::pace_tolerance.
  // InvalidArgument unless finite and > 0.
  Status SetPace(double seconds_per_iteration);
  // The served versions' decay rate now, loss per second (0: none
  // measured): the larger of the served versions' excess over their age
  // (the slope through the origin) and the fixed models' recent rise
  // (ReadRecentRise).
  double DecayPerSecond() const;

  const Problem& problem() const { return problem_; }
  const Options& options() const { return options_; }
  const Schedule& taken() const { return taken_; }
  const Summary& summary() const { return summary_; }
  // Every decision, in order (empty unless Options::record_decisions).
  const std::vector<Decision>& decisions() const { return decisions_; }
  // The remaining plan of the last re-plan (iterations after its "now").
  const Schedule& last_plan() const { return last_plan_; }
  // The served version's measured loss (absent before any measurement).
  std::optional<double> served_loss() const { return served_loss_; }
  // How much better than served_loss() a candidate must measure to pass the
  // gate now (gate_z x noise x sqrt 2; 0 without a gate).
  double GateMargin() const;

 private:
  struct PageHinkley {
    double up = 0, down = 0;
    int64_t up_start = 0, down_start = 0;
  };
  double Noise() const;
  // Fits when the regime's points have grown enough (flat below min_fit_points).
  Status EnsureForecast();
  // Fits the current regime now (flat below min_fit_points).
  Status Fit();
  // A forecast that stays at `level` (>= 0) over [W, N].
  void SetFlatForecast(double level);
  // The gate's margin for a noise sd `sigma`: gate_z x sigma x sqrt 2.
  double MarginFor(double sigma) const;
  StatusOr<bool> Decide(int64_t now, double measured);
  // Decide's step 3, staleness (online_staleness.cc): the measured decay into
  // the re-plan's drift term (the served version's start level rebased to
  // its checkpoint) and, under the wall clock, the price of a stall's lag.
  void PriceStaleness(int64_t now, double measured, Problem* problem, PlanStart* start);
  // Decide's steps 5-6 (online_staleness.cc): whether to publish a kept model
  // now, a re-publish or one ahead of a predicted return (publishing() is
  // set to the decision's own model otherwise). `holding`: an anticipation
  // holds every other publish. `fresh_wanted`: the decision's own model
  // passed the gate and the holds. `plan_wants(loss)`: whether the re-plan,
  // with a candidate of that loss now, checkpoints now (a reactive
  // re-publish pays the same stall and lag as a fresh one).
  StatusOr<bool> ChooseKeptModel(int64_t now, double measured, double sigma, bool holding, bool fresh_wanted,
                                 const std::function<StatusOr<bool>(double)>& plan_wants);
  // The model published last before `iteration` (W before any).
  int64_t ServedAt(int64_t iteration) const;
  // The slope through the origin of (age, excess) `points`, when it stands
  // out of the noise (0 otherwise).
  double DecayPerSecond(const std::vector<std::pair<double, double>>& points) const;
  // Whether the traffic is on a young ramp now (Options::hold_young_ramps):
  // only under the wall clock, from remeasured_.
  bool RampYounger(int64_t now) const;
  // The spacing of the last two measurements (1 before two).
  double MeasurementGap() const;
  // How far the traffic moves (iterations) between a checkpoint and its
  // version reaching the consumers, at the cost and pace planned on.
  double DeliveryLag() const;
  // Whether a publish (the producer's own model or a kept one's re-publish)
  // of a model measuring `loss` now is held: the traffic has shown a switch
  // the producer has not yet trained through, and the stall costs more than
  // the model gains until the producer's recovered models can replace it
  // (online_staleness.cc).
  bool StallOutweighsGain(int64_t now, double loss) const;
  // A switch of the traffic's domain whose first measurement after it is
  // index `begin` of measured_, handed to returns_ with its traffic position
  // and the model served then (counts a prediction it refutes).
  void AddSwitch(size_t begin);
  // At the measurement after a switch's first one: where a move seen
  // part-way there began (bench/README.md, "Twenty-third session").
  void PlaceSwitchSeenPartWay(size_t idx);
  // Whether a fixed model (served or kept now) re-measured across the last
  // switch handed to returns_ moved one way there and back since, both
  // beyond the jump threshold, by measurement `begin`: the traffic changed
  // domain again, another switch however soon (AddSwitch).
  bool ReversedSinceLastSwitch(size_t begin) const;
  // Whether the producer's own model at measurement `begin` (a switch's
  // first) measured better there than the model serving the ending domain
  // by the gate's margin: it had learned the new domain (AddSwitch).
  bool LearnedAt(size_t begin) const;
  // The model serving the ending domain, re-measured at measurement `m`:
  // the one an active anticipation replaced (the served one is then the
  // coming domain's), else the served one (NaN where not re-measured).
  double EndingDomainLossAt(size_t m) const;
  // Where each switch handed to returns_ was seen (parallel to its
  // switches()): the measurements before and after it and the fraction of
  // the move seen (PlaceSwitchSeenPartWay; -1: its gap's middle).
  struct SwitchSeenAt {
    int64_t before = 0, after = 0;
    double part_way = -1;
  };
  // Every switch seen placed again at the traffic positions TrafficAt gives
  // now, which the producer's clock has since made exact (ObserveClock).
  void PlaceSwitchesOnClock();
  // Switch i (of switches_seen_at_) placed at SwitchPlace's middle and
  // half-width, handed to the return predictor.
  void PlaceSwitchOnClock(size_t i);
  // A switch's middle and half-width between the traffic positions of the
  // measurements before and after it, a fraction `part_way` of the move
  // seen at the later one (-1: the gap's middle).
  std::pair<double, double> SwitchPlace(const SwitchSeenAt& seen) const;
  // Commit's re-publish: the kept model `publishing_` serves from checkpoint
  // `iteration`, at its level measured now (an anticipation activated, or a
  // switch and the cycle noted).
  void CommitKeptModel(int64_t iteration);

  Problem problem_;
  ForecasterFactory forecasters_;
  Options options_;
  Summary summary_;
  std::vector<Decision> decisions_;
  Schedule taken_, last_plan_;
  // The seconds the producer has stalled for taken_[0..k], each at the
  // cost measured when it was taken.
  std::vector<double> stalled_s_;
  // ObservePause: (iteration, the pauses' seconds up to it), increasing.
  std::vector<std::pair<int64_t, double>> paused_s_;
  // The pauses' seconds at iterations before `iteration`.
  double PausedBefore(int64_t iteration) const;
  // The pace in use from each iteration on (SetPace; tau before the first).
  std::vector<std::pair<int64_t, double>> paces_;
  int64_t last_iteration_ = 0;
  // Measurements of the planning metric (smoothed when it is the training loss).
  predictor::CurveData measured_;
  std::optional<int64_t> measured_now_;  // iteration of a measurement taken at the current iteration
  std::vector<double> smoothing_;        // training losses not yet averaged into a measurement
  size_t regime_begin_ = 0;              // index in measured_ of the current regime's first point
  double previous_relative_noise_ = 0;   // the smallest noise / level of an ended regime
  PageHinkley ph_;
  std::unique_ptr<Forecaster> forecaster_;
  std::optional<LossCurve> forecast_;    // over [W, N], from the current regime's fit
  size_t fitted_points_ = 0;             // regime points at the last fit (0 = flat forecast)
  std::optional<double> served_loss_;
  // The served version's loss when it was committed (absent for the warm-up's).
  std::optional<double> served_committed_loss_;
  // The served version's re-measurement at each measurement of measured_
  // (NaN where none was taken).
  std::vector<double> served_by_measurement_;
  // The last switch handed to returns_: (its first measurement's index in
  // measured_, its index in returns_->switches()), until the measurement
  // after it has placed it.
  std::optional<std::pair<size_t, size_t>> switch_to_place_;
  std::vector<SwitchSeenAt> switches_seen_at_;
  // ObserveClock: own_clock_[i] = seconds to the end of W + i (empty: none).
  std::vector<double> own_clock_;
  // A predicted return seen before its model was published ahead: the
  // iteration it was seen at, the model and its fallbacks.
  struct SeenReturn {
    int64_t at = 0, model = -1;
    std::vector<int64_t> fallbacks;
  };
  std::optional<SeenReturn> seen_return_;
  // This measurement's decision held a publish (StallOutweighsGain).
  bool held_for_switch_ = false;
  // The wait guard's sum since the last publish (Options::wait_guard): the
  // served model's re-measured excess over the candidate, less the gate's
  // margin, times the seconds each measurement gap took (loss x seconds).
  double waited_excess_s_ = 0;
  // This measurement's decision was the wait guard's.
  bool waited_too_long_ = false;
  // young_ramp: RampYounger(now) under hold_young_ramps, as Decide read it.
  bool WaitedTooLong(int64_t now, double v, double sigma, int64_t gap, bool holding, bool young_ramp);
  // Room for one more checkpoint now: under MaxCheckpoints, min_spacing after the last.
  bool CheckpointRoomAt(int64_t now) const;
  // A re-publish's gap and delivery lag within `share` of a stay (true
  // before any switch); in time (rules 5, 5b): within kReactiveLagShare, or
  // the traffic at the run's end.
  bool RepublishLandsWithin(double share) const;
  bool RepublishInTime(int64_t now) const;
  // (iteration, level) the served version's decay is measured from: the
  // forecast at its checkpoint, else its first re-measurement.
  std::optional<std::pair<int64_t, double>> served_reference_;
  // (seconds since the served version's reference, excess over it) of the
  // latest re-measurements, oldest first.
  std::vector<std::pair<double, double>> decay_points_;
  // The same since the current regime began (the latest detected change) or
  // since the served version's checkpoint, whichever is later: a change's
  // step is not in it. The wall clock's lag price reads this one.
  std::optional<std::pair<int64_t, double>> regime_reference_;
  std::vector<std::pair<double, double>> regime_decay_points_;
  // The first measurement of the present stretch at which the lag price read
  // a measured rate (-1: it reads none now); PriceStaleness's horizon.
  int64_t measured_rate_since_ = -1;
  std::vector<int64_t> published_;
  std::vector<int64_t> copies_;  // copies()
  // The last model of each regime before a detected change (kept too:
  // the domain it was trained on may come back): the latest copy inside the
  // regime at or before its last measurement (none without one).
  std::vector<int64_t> regime_ends_;
  // What was re-measured at one iteration on that moment's validation
  // sample: the served version (ObserveServed) and the kept models
  // (ObserveKept, finite losses only), in whichever order they came.
  struct Remeasurement {
    int64_t iteration = 0;
    std::optional<std::pair<int64_t, double>> served;  // (model, loss)
    std::vector<std::pair<int64_t, double>> kept;      // (model, loss)
    // The loss of `model` here (served or kept), NaN where it was not re-measured.
    double LossOf(int64_t model) const;
  };
  // The latest re-measurements, oldest first, at most kRemeasurementsKept
  // (RampYounger reads the history; ChooseKeptModel the current one).
  static constexpr size_t kRemeasurementsKept = 64;
  // RegimeEnds::kPredicted copies the model where a switch is predicted
  // within this many measurement gaps of traffic.
  static constexpr double kRegimeEndCopyLead = 1.5;
  // Whether the model measured at `iteration` is to be copied (copies()).
  bool CopiesModelAt(int64_t iteration) const;
  std::deque<Remeasurement> remeasured_;
  // The kept models re-measured at `now` (empty where none were).
  const std::vector<std::pair<int64_t, double>>& KeptAt(int64_t now) const;
  // The index in measured_ of the measurement at `iteration` (none where
  // there is none; measured_ is increasing: a binary search).
  std::optional<size_t> MeasurementIndex(int64_t iteration) const;
  // `model`'s loss at re-measurement `at`: re-measured there, or, published
  // at that very measurement, the producer's own measurement of it there
  // (with a validation metric only: the re-measurements are on the
  // validation sample). NaN otherwise.
  double LossAt(const Remeasurement& at, int64_t model) const;
  // The record of the current iteration, begun if there is none yet.
  Remeasurement& RemeasuredNow();
  // Whether the served model's latest two re-measurements each rose above
  // the one before by more than the gate's margin, the same model all three
  // times (PriceStaleness: a ramp, not a settled step).
  bool ServedStillRising() const;
  // What the fixed models' recent re-measurements say. Over each of the
  // latest three measurement gaps, the median of every fixed model's change
  // per second between its re-measurements at the gap's two ends (the
  // served model, the kept ones, and a model published at the earlier end
  // from its own measurement there).
  struct RecentRise {
    // How fast the fixed models lose on the traffic now, loss per second:
    // the least of the three medians, 0 unless that exceeds half the gate's
    // margin per gap. A ramp shows here once three gaps have each seen it
    // rise; a step that one or two gaps saw does not (class-incremental
    // traffic whose new classes arrive over two gaps read as a rate at
    // their median, and its step was priced as a ramp: bench/README.md,
    // "Fifty-first session").
    double per_s = 0;
    // Whether the traffic has stopped moving away from them: none of the
    // three medians rose by half the gate's margin (a ramp that has ended,
    // a step that has settled; "Fifty-second session"). False until three
    // gaps were read.
    bool still = false;
  };
  RecentRise ReadRecentRise() const;
  // The re-measurements at the current measurement and at the one before
  // (latest first), when both were taken; ServedJumped and KeptFell compare them.
  std::optional<std::pair<const Remeasurement*, const Remeasurement*>> LatestTwoRemeasurements() const;
  // Whether the served model, re-measured at the current measurement and
  // measured at the one before (served then too, kept and re-measured there,
  // or the producer's own model published there), moved by more than
  // change_threshold noise sd (`sigma`) of a difference, or by more than half
  // its level: a switch of the traffic's domain (Decide).
  bool ServedJumped(double sigma) const;
  // Whether a kept model other than the served one, re-measured at the
  // current measurement and at the one before, lost more than half its loss
  // between them: the traffic moved toward the domain it was trained on (a
  // switch that a served model trained across it barely shows).
  bool KeptFell() const;
  // The kept model to publish when the served model rose, between the
  // latest two re-measurements, by more than the jump threshold (the fixed
  // models' noise, `sigma` at most) and kept models fell by more than it
  // and by more than a tenth of their loss: the traffic is moving to the
  // domain they were trained on. Of those, the one that measures lowest
  // now, with that loss; none otherwise (ChooseKeptModel).
  std::optional<std::pair<int64_t, double>> ReturningDomainModel(double sigma) const;
  // The noise sd of one fixed model's re-measurement: robustly (MAD) from
  // the differences between consecutive re-measurements of the same model
  // (served or kept) over the latest kRemeasurementsKept; `fallback` while
  // there are fewer than eight.
  double FixedModelNoise(double fallback) const;
  // Whether the served model stayed put from measurement `begin - 1` to the
  // current one: a change the detector places at `begin` is then the
  // producer's own (a model re-learning after a switch seen earlier, or, under
  // the wall clock, the producer's training data switching after the
  // traffic's did), not the traffic's. One model served throughout: it moved
  // by no more than ServedJumped's threshold. A publish fell between: the
  // newly served model (kept, re-measured before) or the one it replaced
  // (kept, re-measured now), re-measured at both, moved by no more than that
  // threshold and by no more than half its level.
  bool ServedStayedAcross(size_t begin, double sigma) const;
  // Appends the decision just taken to decisions_ (Options::record_decisions).
  void RecordDecision(int64_t now, double v, double sigma, const Problem& planned, bool plan_wanted, bool gated,
                      bool holding, bool ramp_hold, bool publish);
  // The loss of `model` re-measured at measurement `m` of measured_ (served
  // or kept; NaN where it was not, or that record is no longer kept).
  double RemeasuredAt(size_t m, int64_t model) const;
  // Whether the model served at measurement `m` of measured_ moved there,
  // re-measured, by more than twice the gate's margin from its loss at the
  // measurement before (KeptVersions: traffic on a ramp).
  bool ServedMovedAt(size_t m) const;
  // Whether a decision beside training waits for the ended regimes' kept
  // models (KeptVersions' partial waits), read once the served version's
  // answer is in: a return was seen already, the served version jumped or
  // moved at this point, a switch was seen at the point before, or a kept
  // model fell between its latest two re-measurements (the latest at one of
  // the last three points). Otherwise nothing says an older domain is back:
  // a kept model measures as it did, and only a predicted return's models
  // are waited for. Development pool (186 cases) 10.78 -> 10.65% (43
  // better, 1 worse); held-out sets 18-19 15.85 -> 15.79% (19 better, 1
  // worse; bench/README.md, "Sixty-seventh session").
  bool KeptModelsInPlay() const;
  // A predicted return seen at this point (the served answer jumped up where
  // the prediction placed its switch, room, in time): rule 5b publishes its
  // model whatever the kept models answer, so a decision beside training
  // waits for the served answer only (bench/README.md, "Sixty-eighth session").
  bool PredictedReturnSeenNow() const;
  // Kept: the warm-up's model, a published one or a copy.
  bool Kept(int64_t model) const;
  // Of `models`, the kept ones at the lowest loss each measured (its own
  // domain's level); 5b's return model where its answer follows.
  std::vector<std::pair<int64_t, double>> BestLevelsKept(const std::vector<int64_t>& models) const;
  // The producer's own model at measurement `m`, as measured there (on the
  // validation sample, which re-measurements are on): `model`'s loss when
  // it is that measurement's model, NaN otherwise (LossAt's fallback, by
  // measurement index).
  double OwnLossAt(size_t m, int64_t model) const;
  // The measurement (index into measured_) from which the served model has
  // shown the active anticipation's return without a break, the current one
  // at the latest (ReturnPredictor::ShownFor over its re-measurements at
  // consecutive measurements).
  size_t ReturnShownFrom(double gate_margin) const;
  // Both read this: change_threshold noise sd (`sigma`) of a difference of
  // two measurements.
  double JumpThreshold(double sigma) const;
  int64_t publishing_ = 0;  // the model the last positive decision publishes
  // Whether a re-publish of that model may say how many regimes back its
  // domain was (ReturnPredictor::NoteRepublish; ChooseKeptModel).
  bool publishing_shows_cycle_ = true;
  int64_t decided_at_ = -1;
  std::optional<double> publishing_loss_;  // its measured loss, for a re-publish
  // Anticipating returns (Options::anticipate_returns): the switches seen, each ended regime's
  // served model, the pending / active anticipation. It is told what it needs of the planner at
  // each call (traffic position, measurement gap, served and kept models, the gate's margin).
  std::unique_ptr<internal::ReturnPredictor> returns_;
};

}  // namespace schedulers
}  // namespace viper
