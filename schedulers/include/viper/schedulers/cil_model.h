// The CIL model: cumulative inference loss of a schedule, counted three ways.
//
//  - kFluid: DESIGN.md's continuous model. Version k is served on
//    [A_k, A_{k+1}) clipped to the window [0, R]; its cost is
//    rate * integral of (l(s_k) + rho*(t - T_k)) dt. This is the objective the
//    `fixed` and `optimal` strategies minimise exactly.
//  - kDiscrete: every request is counted at its arrival time t (fixed rate,
//    Poisson with a seed, or a trace) and charged l(s_k) + rho*(t - T_k) of
//    the newest version with A_k <= t. For a fixed rate the count of version
//    k differs from the fluid rate*length by less than one request, so
//    |discrete - fluid| <= sum over served versions of the largest cost of a
//    request of that version (<= (m + 1) * max cost): the bound per checkpoint.
//  - kViper: the Viper paper's Algorithm 1, reproduced: the version replaced
//    by a checkpoint `inter` iterations after the previous one serves
//    floor((inter*tau + t_p [+ t_c for the first version]) / t_infer)
//    requests, capped at those left; the last version takes what is left of
//    M requests. t_p = stall_s, t_c = max(0, delay_s - stall_s),
//    t_infer = interval_s. No drift (the paper has none).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/schedulers/problem.h"

namespace viper {
namespace schedulers {

enum class CountingMode { kFluid, kDiscrete, kViper };
const char* ToString(CountingMode mode);
StatusOr<CountingMode> CountingModeFromString(const std::string& name);

// The breakdown of one schedule's cost.
struct Evaluation {
  CountingMode mode = CountingMode::kFluid;
  // Cumulative inference loss over the window.
  double cil = 0.0;
  // cil + price_per_slowdown_s * slowdown_s: what `optimal` minimises (fluid).
  double objective = 0.0;
  // m: checkpoints in the schedule.
  int64_t checkpoints = 0;
  // m * sigma, seconds.
  double slowdown_s = 0.0;
  // End of the window R, seconds since the end of warm-up.
  double window_end_s = 0.0;
  // Requests served (fluid: rate * R; fractional).
  double requests = 0.0;
  // Requests served by version 0..m (fluid: fractional). Versions that never
  // become servable inside the window get 0.
  std::vector<double> requests_per_version;
  // Mean over requests of (arrival time - T_k of the serving version),
  // seconds; absent in kViper mode (Algorithm 1 has no timeline) or without requests.
  std::optional<double> mean_staleness_s;
  // Versions that became servable only after the window ended.
  int64_t unserved_versions = 0;

  // "cil 3012.4 (fluid), 12 checkpoints, slowdown 1.20 s, staleness 3.1 s".
  std::string BriefReport() const;
};

// Evaluates `schedule` on `curve` (which must cover [W, N]; a diverged
// model's +inf is charged to the requests it serves, so the CIL is +inf). Fails with
// InvalidArgument on a bad problem, curve or schedule (unsorted, outside
// (W, N]); min spacing and the budget are not enforced here, so baselines that
// ignore them can still be judged.
StatusOr<Evaluation> Evaluate(const Problem& problem, const LossCurve& curve, const Schedule& schedule,
                              CountingMode mode);

// Request arrival times in [0, R) for a window end R (kDiscrete's arrivals):
// fixed rate q*interval_s; Poisson from the seed; the trace. For
// kRequestCount at most request_count of them.
std::vector<double> ArrivalTimes(const RequestModel& requests, double window_end_s);

// Fluid cost of one version with loss `loss` checkpointed at T (seconds),
// served on [a, b]: rate * (loss*(b - a) + rho/2*((b - T)^2 - (a - T)^2)).
double FluidVersionCost(double rate, double loss, double drift_per_s, double checkpoint_start_s, double a,
                        double b);

}  // namespace schedulers
}  // namespace viper
