// The closed-loop planner's decisions as it recorded them
// (OnlinePlanner::Decision, OnlinePlannerOptions::record_decisions): one
// record per decision, the one field order of DecisionsCsv, `viper simulate
// --decisions-csv`, `viper run`'s decisions file and Python's
// Planner.decisions().
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace viper {
namespace schedulers {

// One decision, at a measurement after the warm-up: what the loop saw
// there and what it chose (OnlinePlannerOptions::record_decisions; DecisionsCsv).
// NaN where there was nothing to see (no re-measurement, no kept model,
// no prediction).
struct OnlineDecision {
  int64_t iteration = 0;  // the producer's
  double traffic = 0;     // the traffic's iteration then (TrafficAt; the iteration under the producer clock)
  double candidate_loss = 0;      // the producer's own model, measured now
  int64_t served_model = 0;       // the model serving (the warm-up's: W)
  double served_loss = 0;         // re-measured now (else its committed level)
  double noise_sd = 0;            // the regime's noise sd of one measurement
  double gate_margin = 0;         // what the candidate must beat the served model by
  bool plan_wants = false;        // the re-plan takes a checkpoint before the next measurement
  int64_t planned_checkpoint = -1;  // the re-plan's first checkpoint, a producer iteration (-1: it takes none)
  bool gated = false;             // ... and the gate refused it
  bool held_for_return = false;   // an anticipated return holds everything else
  bool held_on_ramp = false;      // a young ramp held it (Options::hold_young_ramps)
  bool held_for_switch = false;   // held until the producer trains through a switch (StallOutweighsGain)
  bool waited_too_long = false;   // published by the wait guard (Options::wait_guard) where the rest would wait
  bool publish = false;           // the decision: checkpoint now
  int64_t published_model = -1;   // the model it publishes (-1: none)
  const char* publish_kind = "";  // "fresh", "kept" (a re-publish), "ahead" (of a predicted return), or ""
  int64_t best_kept_model = -1;   // the best kept model re-measured now (-1: none)
  double best_kept_loss = 0;
  double decay_per_s = 0;       // the decay rate the re-plan charged every version
  double lag_price = 0;         // wall clock: the price per second of stall for its lag
  int64_t changes = 0;          // changes detected so far
  int64_t switches = 0;         // switches of a recurring domain recorded so far
  int64_t cycle = 0;            // regimes between a domain's visits (0: no return seen)
  double predicted_switch = 0;  // the next predicted return's switch, in traffic iterations
  double judge_traffic = std::numeric_limits<double>::quiet_NaN();  // where it was (offline replay only)
};

// Calls f(name, value) for each field of a decision, in the columns' order
// (the one schema of DecisionsCsv and Python's Planner.decisions()): value is
// an int64_t, a double (NaN: nothing to see), a bool, a std::string_view, or
// a std::optional<int64_t> model (nullopt: none).
template <typename F>
void ForEachDecisionField(const OnlineDecision& d, F&& f) {
  auto model = [](int64_t m) { return m >= 0 ? std::optional<int64_t>(m) : std::nullopt; };
  f("iteration", d.iteration);
  f("traffic_iteration", d.traffic);
  f("candidate_loss", d.candidate_loss);
  f("served_model", d.served_model);
  f("served_loss", d.served_loss);
  f("noise_sd", d.noise_sd);
  f("gate_margin", d.gate_margin);
  f("plan_wants", d.plan_wants);
  f("planned_checkpoint", model(d.planned_checkpoint));
  f("gated", d.gated);
  f("held_for_return", d.held_for_return);
  f("held_on_ramp", d.held_on_ramp);
  f("held_for_switch", d.held_for_switch);
  f("waited_too_long", d.waited_too_long);
  f("publish", d.publish);
  f("published_model", model(d.published_model));
  f("publish_kind", std::string_view(d.publish_kind));
  f("best_kept_model", model(d.best_kept_model));
  f("best_kept_loss", d.best_kept_loss);
  f("decay_per_s", d.decay_per_s);
  f("lag_price_per_s", d.lag_price);
  f("changes", d.changes);
  f("switches", d.switches);
  f("cycle", d.cycle);
  f("predicted_switch", d.predicted_switch);
  f("judge_traffic_iteration", d.judge_traffic);
}

// The decisions as CSV: a header of ForEachDecisionField's names
// (iteration,traffic_iteration,candidate_loss,served_model,served_loss,...),
// then one row each (booleans 0/1; an empty field where there was nothing:
// no kept model, no prediction, nothing published).
std::string DecisionsCsv(const std::vector<OnlineDecision>& decisions);

}  // namespace schedulers
}  // namespace viper
