#include "viper/schedulers/strategy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

namespace viper {
namespace schedulers {

const char* ToString(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::kEpoch: return "epoch";
    case StrategyKind::kViperFixed: return "viper-fixed";
    case StrategyKind::kViperGreedy: return "viper-greedy";
    case StrategyKind::kFixed: return "fixed";
    case StrategyKind::kOptimal: return "optimal";
    case StrategyKind::kOnline: return "online";
    case StrategyKind::kOracle: return "oracle";
  }
  return "?";
}

std::vector<StrategyKind> AllStrategyKinds() {
  return {StrategyKind::kEpoch, StrategyKind::kViperFixed, StrategyKind::kViperGreedy, StrategyKind::kFixed,
          StrategyKind::kOptimal, StrategyKind::kOnline, StrategyKind::kOracle};
}

StatusOr<StrategyKind> StrategyKindFromString(const std::string& name) {
  for (StrategyKind k : AllStrategyKinds()) {
    if (name == ToString(k)) return k;
  }
  return InvalidArgumentError("unknown strategy '" + name +
                              "' (expected epoch, viper-fixed, viper-greedy, fixed, optimal, online or oracle)");
}

StatusOr<std::vector<StrategyKind>> ParseStrategyKinds(const std::string& list) {
  if (list == "all") return AllStrategyKinds();
  std::vector<StrategyKind> kinds;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    VIPER_ASSIGN_OR_RETURN(StrategyKind k, StrategyKindFromString(item));
    kinds.push_back(k);
  }
  if (kinds.empty()) return InvalidArgumentError("empty strategy list");
  return kinds;
}

std::string PlanSummary::BriefReport() const {
  char buf[320];
  std::snprintf(buf, sizeof(buf), "%s: %lld checkpoints, predicted CIL %.6g, slowdown %.4g s (%s", ToString(strategy),
                static_cast<long long>(checkpoints), predicted.cil, slowdown_s, exact ? "exact" : "heuristic");
  std::string s = buf;
  if (dp_layers > 0) s += ", " + std::to_string(dp_layers) + (dp_layers == 1 ? " layer" : " layers");
  if (replans > 0) s += ", " + std::to_string(replans) + " re-plans";
  std::snprintf(buf, sizeof(buf), ", %.3g s)", plan_time_s);
  return s + buf;
}

StatusOr<LossCurve> InterpolateCurve(const predictor::CurveData& points, int64_t first, int64_t last) {
  if (points.size() == 0) return InvalidArgumentError("no loss points to interpolate");
  if (last < first) return InvalidArgumentError("empty iteration range to interpolate");
  std::vector<double> out;
  out.reserve(static_cast<size_t>(last - first + 1));
  size_t k = 0;
  const auto& x = points.iterations;
  const auto& y = points.losses;
  for (int64_t i = first; i <= last; ++i) {
    const double xi = static_cast<double>(i);
    while (k + 1 < x.size() && x[k + 1] <= xi) ++k;
    double v;
    if (xi <= x.front()) {
      v = y.front();
    } else if (k + 1 >= x.size()) {
      v = y.back();
    } else if (xi == x[k]) {
      v = y[k];
    } else if (std::isinf(y[k]) || std::isinf(y[k + 1])) {
      v = std::numeric_limits<double>::infinity();  // next to a diverged model: nothing says when it diverged
    } else {
      const double w = (xi - x[k]) / (x[k + 1] - x[k]);
      v = y[k] + w * (y[k + 1] - y[k]);
    }
    out.push_back(v);
  }
  return LossCurve(first, std::move(out));
}

namespace {

predictor::CurveData PointsUpTo(const predictor::CurveData& d, int64_t last) {
  return d.Prefix(static_cast<double>(last));
}

// The true curve as the exact solver takes it: a diverged model's +inf
// becomes a finite loss D so large that one request served by it costs more
// than every request of the run served at the worst finite loss (plus the
// drift term at the longest age), so the optimum never publishes it and the
// solver's arithmetic stays finite. The judge still charges +inf.
StatusOr<LossCurve> ChargeDivergedForSolver(const Problem& p, const LossCurve& truth) {
  VIPER_RETURN_IF_ERROR(truth.CheckCovers(p, /*allow_diverged=*/true).WithContext("true curve"));
  const int64_t W = p.warmup_iterations, N = p.total_iterations;
  if (truth.DivergedIn(W, N) == 0) return truth;
  double worst = 0;
  for (int64_t i = W; i <= N; ++i) {
    if (std::isfinite(truth.at(i))) worst = std::max(worst, truth.at(i));
  }
  const int64_t most = std::min(p.MaxCheckpoints(), N - W);
  const double span_s = static_cast<double>(N - W) * p.seconds_per_iteration +
                        static_cast<double>(most) * p.cost.stall_s + p.cost.delay_s +
                        std::max(0.0, p.WindowEnd(most));
  const double requests = span_s * p.requests.RatePerSecond() + static_cast<double>(p.requests.request_count) +
                          static_cast<double>(p.requests.trace_s.size()) + 1.0;
  const double charged = 4.0 * (requests + 1.0) * (worst + std::fabs(p.drift_per_s) * span_s + 1.0);
  if (!std::isfinite(charged)) {
    return InvalidArgumentError("the true curve has diverged iterations and the run is too long to charge them a "
                                "finite loss for the exact solver");
  }
  std::vector<double> losses(truth.losses());
  for (double& l : losses) {
    if (std::isinf(l)) l = charged;
  }
  return LossCurve(truth.first_iteration(), std::move(losses));
}

class StrategyImpl : public Strategy {
 public:
  StrategyImpl(StrategyKind kind, StrategyOptions options) : kind_(kind), options_(std::move(options)) {}
  StrategyKind kind() const override { return kind_; }

  StatusOr<Plan> MakePlan(const PlanningInput& in) override {
    const auto t0 = std::chrono::steady_clock::now();
    const Problem& p = in.problem;
    VIPER_RETURN_IF_ERROR(p.Validate());
    VIPER_RETURN_IF_ERROR(in.predicted.CheckCovers(p).WithContext("predicted curve"));
    Plan plan;
    PlanSummary& s = plan.summary;
    s.strategy = kind_;
    Solution sol;
    std::vector<int64_t> published, kept;
    std::vector<std::pair<int64_t, double>> pauses, waits;
    std::vector<OnlinePlanner::Decision> decisions;
    switch (kind_) {
      case StrategyKind::kEpoch: {
        VIPER_ASSIGN_OR_RETURN(sol, EpochSchedule(p, options_.iterations_per_epoch));
        s.message = "every epoch boundary (" + std::to_string(options_.iterations_per_epoch) + " iterations)";
        break;
      }
      case StrategyKind::kViperFixed: {
        VIPER_ASSIGN_OR_RETURN(sol, ViperFixedInterval(p, in.predicted));
        s.message = "Viper Algorithm 2: best single interval by Algorithm 1 counting";
        break;
      }
      case StrategyKind::kViperGreedy: {
        const predictor::CurveData warm = PointsUpTo(in.observed, p.warmup_iterations);
        VIPER_ASSIGN_OR_RETURN(double threshold, ViperGreedyThreshold(warm.losses));
        VIPER_ASSIGN_OR_RETURN(sol, ViperGreedy(p, in.predicted, threshold));
        char buf[96];
        std::snprintf(buf, sizeof(buf), "%.6g", threshold);
        s.message = std::string("Viper Algorithm 3: checkpoint when the predicted loss drops by > ") + buf;
        break;
      }
      case StrategyKind::kFixed: {
        VIPER_ASSIGN_OR_RETURN(sol, SolveFixedInterval(p, in.predicted));
        s.exact = true;
        s.message = "exact best single interval (fluid objective)";
        break;
      }
      case StrategyKind::kOptimal: {
        VIPER_ASSIGN_OR_RETURN(sol, SolveOptimal(p, in.predicted));
        s.exact = true;
        s.message = "exact optimal irregular schedule on the prediction (fluid objective)";
        break;
      }
      case StrategyKind::kOracle: {
        Problem truth_p = p;  // the run's own clock, known to a bound only
        if (!in.truth_elapsed_s.empty()) {
          truth_p.elapsed_s = in.truth_elapsed_s;
          VIPER_RETURN_IF_ERROR(truth_p.Validate().WithContext("the run's own clock"));
        }
        if (in.truth_staleness) {
          VIPER_ASSIGN_OR_RETURN(SurfaceSolution ss, SolveOptimalOnSurface(truth_p, *in.truth_staleness));
          sol.schedule = std::move(ss.schedule);
          sol.objective = ss.objective;
          sol.layers = ss.layers;
          published = std::move(ss.published);
          s.exact = true;
          s.message = "exact optimal schedule on the staleness table's test_loss, among checkpoints at its " +
                      std::to_string(ss.candidates) + " versions in (W, N]" +
                      (ss.republish_searched ? ", each publishing its own model or an older one ("
                                                   + std::to_string(ss.republished) + " re-published)"
                                             : " (re-publishing not searched: too many versions)") +
                      " (a bound, not a strategy)";
          break;
        }
        if (!in.truth) return FailedPreconditionError("oracle needs the true curve");
        VIPER_ASSIGN_OR_RETURN(const LossCurve charged, ChargeDivergedForSolver(truth_p, *in.truth));
        VIPER_ASSIGN_OR_RETURN(sol, SolveOptimal(truth_p, charged));
        s.exact = true;
        s.message = "exact optimal schedule on the true curve (a bound, not a strategy)";
        break;
      }
      case StrategyKind::kOnline: {
        if (!options_.forecasters) return InvalidArgumentError("online needs StrategyOptions::forecasters");
        OnlinePlanner::Options oo = options_.online;
        oo.metric = in.observed_kind;
        OnlinePlanner planner(p, options_.forecasters, oo);
        const auto& obs = in.observed;
        const bool with_table = in.observed_staleness && in.observed_kind == ObservationKind::kValidation;
        const bool wall = with_table && p.requests.traffic_clock == TrafficClock::kWall;
        // The producer's pace as it has measured it at `it` (a logged row):
        // seconds per iteration over its latest W iterations, the warm-up's
        // tau for the part of them before W. It reads the run's clock up to
        // `it` only (the no-peeking test alters later wall times too).
        const std::vector<double>& clock = in.truth_elapsed_s;
        const int64_t W = p.warmup_iterations;
        auto pace_at = [&](int64_t it) {
          const int64_t window = std::max<int64_t>(1, W);
          const int64_t from = it - window;
          const double before = from >= W ? clock[static_cast<size_t>(from - W)]
                                           : -static_cast<double>(W - from) * p.seconds_per_iteration;
          return (clock[static_cast<size_t>(it - W)] - before) / static_cast<double>(window);
        };
        // Re-measuring a model the producer does not train is a pause of
        // cost.remeasure_s, once per traffic state: a model measured before
        // on an equal sample (the same value from the table: a calm stretch,
        // a domain that came back) is read again for free, as the live
        // producer reuses an evaluation on an equal traffic state
        // (workflow/README.md). The candidate is the producer's own
        // validation, already in the log's clock.
        std::set<std::pair<int64_t, double>> measured_on;
        double paused_s = 0, waited_s = 0;
        int64_t remeasured = 0;
        // Beside training (cost.remeasure_beside) the producer trains on
        // while a helper re-measures; the decision waits for it, at most
        // until the next measurement, where the producer waits out the rest
        // (`overrun`: a pause there, known to it only then). The model of
        // the measurement's iteration is copied aside for the decision
        // (cost.keep_copy_s, a pause).
        const bool beside = p.cost.remeasure_beside;
        double overrun = 0;
        auto seconds_between = [&](int64_t a, int64_t b) {
          const bool on_clock = a >= W && static_cast<size_t>(b - W) < clock.size();
          return on_clock ? clock[static_cast<size_t>(b - W)] - clock[static_cast<size_t>(a - W)]
                          : static_cast<double>(b - a) * p.seconds_per_iteration;
        };
        auto pause = [&](int64_t it, double seconds) -> Status {
          if (!(seconds > 0)) return Status::Ok();
          if (!pauses.empty() && pauses.back().first == it) {
            pauses.back().second += seconds;
          } else {
            pauses.emplace_back(it, seconds);
          }
          paused_s += seconds;
          return planner.ObservePause(seconds);
        };
        // Where the traffic is when the producer measures at `it` under the
        // wall clock: the last iteration an unstalled producer would have
        // finished by then (the run's clock at `it` plus the stalls of the
        // checkpoints taken so far, the keep copies and the re-measuring
        // pauses; at most N), the simulator's judge's own
        // position (LastIterationBy, whole iterations). The
        // world's present, not the planner's guess of it (TrafficAt, which
        // converts the stalled seconds at the pace measured so far): a live
        // producer's validation sample is drawn from the traffic as it is,
        // so a switch shows when it happens wherever the planner thinks the
        // traffic is. Measured at the planner's own guess, a switch showed at
        // the guessed position and the guess's error never reached what the
        // planner saw: online's wall-clock mean regret looked 0.6 points
        // better over thirteen sets (1.5 on the frozen development sets)
        // than it is (bench/README.md, "Twenty-sixth session"). The planner
        // reads the loss there, never the position or
        // the clock past `it`.
        auto traffic_now = [&](int64_t it) {
          if (it <= W) return static_cast<double>(it);  // no stall before the warm-up's end
          const double stalled = static_cast<double>(planner.taken().size()) * p.cost.stall_s +
                                 static_cast<double>(planner.copies().size()) * p.cost.keep_copy_s + paused_s;
          const bool on_clock = static_cast<size_t>(it - W) < clock.size();
          const double trained = on_clock ? clock[static_cast<size_t>(it - W)]
                                          : static_cast<double>(it - W) * p.seconds_per_iteration;
          const int64_t t = LastIterationBy(on_clock ? clock : std::vector<double>{}, W, p.total_iterations,
                                            p.seconds_per_iteration, trained + stalled);
          return static_cast<double>(std::clamp(t, it, p.total_iterations));
        };
        int64_t clock_known = W;  // the producer's clock reported up to here
        // (iteration, traffic) at each measurement: where the judge placed the traffic.
        std::vector<std::pair<int64_t, double>> judged;
        // The planner's copies (regime ends; OnlinePlanner::copies) are
        // charged where kept models are re-measured: each comes after its
        // measurement and before the decision there, so a checkpoint at it
        // starts after it, and later measurements see the traffic that much
        // further on.
        const bool keeping = with_table && oo.keep_versions > 0;
        std::vector<std::pair<int64_t, double>> deferred;  // (model, loss): answers that followed a decision
        int64_t calm_points = 0;  // measurements decided before their re-measurements
        int64_t followed = 0;     // decisions whose newest published versions' answers followed them
        for (size_t i = 0; i < obs.size(); ++i) {
          const int64_t it = static_cast<int64_t>(obs.iterations[i]);
          if (it > p.total_iterations) break;
          if (it > W && static_cast<size_t>(it - W) < clock.size()) {
            const double pace = pace_at(it);
            if (std::isfinite(pace) && pace > 0) VIPER_RETURN_IF_ERROR(planner.SetPace(pace));
          }
          // Today's validation sample is the traffic now: the producer's
          // iteration, or under the wall clock where the traffic has got to
          // while the producer stalled. Under the wall clock the candidate is
          // measured there too.
          if (overrun > 0) {
            VIPER_RETURN_IF_ERROR(pause(it, overrun));
            overrun = 0;
          }
          // The kept models' answers that followed the last measurement's
          // decision (partial waits) reach the planner now, before this
          // measurement, attributed to theirs.
          if (!deferred.empty()) {
            for (const auto& [model, l] : deferred) {
              if (std::isfinite(l) && model != planner.served_model()) {
                VIPER_RETURN_IF_ERROR(planner.ObserveKept(model, l));
              }
            }
            deferred.clear();
          }
          const double traffic = wall ? traffic_now(it) : planner.TrafficAt(it);
          judged.emplace_back(it, traffic);
          double measured = obs.losses[i];
          if (wall && it > p.warmup_iterations) {
            VIPER_ASSIGN_OR_RETURN(measured, in.observed_staleness->At(it, traffic));
          }
          // The producer's own clock up to `it` (it times its iterations):
          // where the traffic was at a past iteration becomes known to it
          // once it has trained past that moment (OnlinePlanner::ObserveClock).
          while (wall && clock_known < it && static_cast<size_t>(clock_known + 1 - W) < clock.size()) {
            ++clock_known;
            const double trained = clock[static_cast<size_t>(clock_known - W)];
            VIPER_RETURN_IF_ERROR(planner.ObserveClock(clock_known, trained));
          }
          VIPER_RETURN_IF_ERROR(planner.Observe(it, measured, in.observed_kind));
          measured_on.emplace(it, measured);  // the producer's own validation: in the log's clock
          // Beside training a calm measurement decides at once, before its
          // re-measurements (OnlinePlanner::DecidesBeforeRemeasured): no
          // copy aside, no wait; the helper's answers follow the decision
          // (and a checkpoint there).
          const bool calm = beside && planner.DecidesBeforeRemeasured();
          // The point's re-measurements: the served version, then the kept
          // models the planner asks for (KeptVersions, which reads the
          // served answer: the ramp rule). A calm point's run after its
          // decision, in the live loop's order (workflow/src/live_loop.cc:
          // the helper's served answer in, ObserveServedLate, then the kept
          // models); asked for before the served answer, the kept models
          // were chosen without it (bench/README.md, "Sixty-sixth session").
          // `served`: the version serving at the point (a calm point's
          // checkpoint may have replaced it since; the helper measures it).
          auto remeasure = [&](int64_t served) -> Status {
            calm_points += calm ? 1 : 0;
            // The served version re-measured on this moment's validation sample
            // (never a diverged one: the planner does not publish those).
            VIPER_ASSIGN_OR_RETURN(double again, in.observed_staleness->At(served, traffic));
            int64_t fresh = measured_on.emplace(served, again).second ? 1 : 0;
            if (calm) {
              if (std::isfinite(again)) VIPER_RETURN_IF_ERROR(planner.ObserveServedLate(served, again));
            } else if (std::isfinite(again)) {
              VIPER_RETURN_IF_ERROR(planner.ObserveServed(again));
            }
            // The kept models too, on the same sample (for re-publishing).
            // Beside training, only as many new evaluations as fit in the
            // last measurement gap at the pace measured now (the served
            // version's first): the helper is then done by the next
            // measurement, and the kept models left out are asked for
            // again there (on the same traffic, those measured now are
            // free). The dev pool's 186 cases: 13.06 -> 12.15% mean,
            // recurring 44.7 -> 39.3% (bench/README.md, "Sixty-third
            // session").
            double budget = std::numeric_limits<double>::infinity();
            if (beside && i > 0 && it > W && static_cast<size_t>(it - W) < clock.size()) {
              budget = static_cast<double>(it - static_cast<int64_t>(obs.iterations[i - 1])) * pace_at(it) -
                       static_cast<double>(fresh) * p.cost.remeasure_s;
            }
            // A decision beside training waits for the first `rivals`
            // (OnlinePlanner::Options::partial_waits); the others' answers
            // follow it, as a calm point's do.
            size_t rivals = 0;
            const std::vector<int64_t> kept_now = planner.KeptVersions(&rivals);
            int64_t waited_fresh = fresh;  // the evaluations the decision waits for
            bool follows = false;
            for (size_t k = 0; k < kept_now.size(); ++k) {
              const int64_t kept = kept_now[k];
              VIPER_ASSIGN_OR_RETURN(double l, in.observed_staleness->At(kept, traffic));
              const bool is_new = measured_on.count({kept, l}) == 0;
              if (is_new && budget < p.cost.remeasure_s) continue;  // next time
              if (is_new) {
                measured_on.emplace(kept, l);
                ++fresh;
                budget -= p.cost.remeasure_s;
              }
              if (calm) {
                if (kept != planner.served_model()) VIPER_RETURN_IF_ERROR(planner.ObserveKept(kept, l));
              } else if (beside && k >= rivals) {
                follows = follows || is_new;
                deferred.emplace_back(kept, l);
              } else {
                waited_fresh = fresh;
                VIPER_RETURN_IF_ERROR(planner.ObserveKept(kept, l));
              }
            }
            remeasured += fresh;
            followed += follows ? 1 : 0;
            const double measuring = static_cast<double>(fresh) * p.cost.remeasure_s;
            if (measuring > 0 && !beside) {
              VIPER_RETURN_IF_ERROR(pause(it, measuring));
            } else if (measuring > 0) {
              const double until_next = std::max(
                  0.0, i + 1 < obs.size() ? seconds_between(it, static_cast<int64_t>(obs.iterations[i + 1])) : measuring);
              // A calm point decided at once: nothing copied aside, nothing
              // waited. Otherwise the model is copied aside and the decision
              // waits for what it needs (at most until the next measurement).
              if (!calm) {
                const bool copied = !planner.copies().empty() && planner.copies().back() == it;  // kept anyway
                if (!copied) VIPER_RETURN_IF_ERROR(pause(it, p.cost.keep_copy_s));
                // (Nothing new waited for, as where every answer it waits
                // for was read before: no wait.)
                const double wait = std::min(static_cast<double>(waited_fresh) * p.cost.remeasure_s, until_next);
                if (wait > 0) waits.emplace_back(it, wait);
                waited_s += wait;
              }
              // A helper not done by the next measurement is waited out there.
              overrun = std::max(0.0, measuring - until_next);
            }
            return Status::Ok();
          };
          const bool remeasuring = with_table && it > p.warmup_iterations;
          const int64_t served_at_point = planner.served_model();
          if (remeasuring && !calm) VIPER_RETURN_IF_ERROR(remeasure(served_at_point));
          VIPER_ASSIGN_OR_RETURN(bool now, planner.ShouldCheckpoint(it));
          if (now) VIPER_RETURN_IF_ERROR(planner.Commit(it));
          if (remeasuring && calm) VIPER_RETURN_IF_ERROR(remeasure(served_at_point));
        }
        sol.schedule = planner.taken();
        if (keeping) kept = planner.copies();
        s.remeasurements = remeasured;
        s.remeasure_s = paused_s;
        s.remeasure_wait_s = waited_s;
        if (planner.summary().republished > 0) published = planner.published();
        decisions = planner.decisions();
        // Where the judge placed the traffic at each decision, beside the
        // planner's estimate (`traffic`): the decisions CSV's last column.
        for (auto& d : decisions) {
          const auto j = std::lower_bound(judged.begin(), judged.end(), d.iteration,
                                          [](const auto& e, int64_t it) { return e.first < it; });
          if (j != judged.end() && j->first == d.iteration) d.judge_traffic = j->second;
        }
        s.replans = planner.summary().replans;
        s.message = planner.summary().BriefReport(static_cast<int64_t>(sol.schedule.size()));
        if (remeasured > 0) {
          const auto ms = [](double x) { return std::to_string(static_cast<int>(std::lround(x * 1000))); };
          std::string how;
          if (beside && (waited_s > 0 || calm_points > 0)) {
            how = "beside training: decisions waited " + ms(waited_s) + " ms, producer pauses " + ms(paused_s) +
                  " ms (copies aside, overruns), charged; " + std::to_string(calm_points) +
                  " calm points decided before their re-measurements, " + std::to_string(followed) +
                  " decisions before the serving domain's kept versions'";
          } else if (paused_s > 0) {
            how = ms(paused_s) + " ms of producer pauses, charged";
          } else {
            how = "free: --remeasure-s 0 or no validation pause in the log";
          }
          s.message += ", " + std::to_string(remeasured) + " models re-measured on traffic new to them (" + how + ")";
        }
        s.message += ": re-plans exactly at every measurement, gates on measured quality";
        break;
      }
    }
    plan.schedule = sol.schedule;
    plan.published = std::move(published);
    plan.kept = std::move(kept);
    plan.pauses = std::move(pauses);
    plan.waits = std::move(waits);
    plan.decisions = std::move(decisions);
    s.dp_layers = sol.layers;
    s.solver_objective = sol.objective;
    s.checkpoints = static_cast<int64_t>(plan.schedule.size());
    s.slowdown_s = static_cast<double>(s.checkpoints) * p.cost.stall_s +
                   static_cast<double>(plan.kept.size()) * p.cost.keep_copy_s + s.remeasure_s;
    VIPER_ASSIGN_OR_RETURN(s.predicted, Evaluate(p, in.predicted, plan.schedule, CountingMode::kFluid));
    s.plan_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return plan;
  }

 private:
  StrategyKind kind_;
  StrategyOptions options_;
};

}  // namespace

StatusOr<std::unique_ptr<Strategy>> MakeStrategy(StrategyKind kind, const StrategyOptions& options) {
  if (kind == StrategyKind::kEpoch && options.iterations_per_epoch <= 0) {
    return InvalidArgumentError("epoch needs iterations_per_epoch > 0");
  }
  if (kind == StrategyKind::kOnline && !options.forecasters) {
    return InvalidArgumentError("online needs a forecaster");
  }
  return std::unique_ptr<Strategy>(new StrategyImpl(kind, options));
}

}  // namespace schedulers
}  // namespace viper
