// viper.Planner: when to publish, from Python. It drives the planners exactly
// as the live producer does (workflow/src/live.cc): the observations of the
// warm-up are kept as a training log; at the end of the warm-up (the first
// should_checkpoint at an iteration >= W) that log becomes the planning
// problem (schedulers::MakeScenario, tau measured over the warm-up unless
// given, sigma/delta from the cost), and then
//   - online: an OnlinePlanner that has seen the warm-up and sees every later
//     observation (Observe / ShouldCheckpoint / Commit / ObserveServed);
//   - any other strategy (optimal, fixed, viper-greedy, ...): one plan from
//     the warm-up, followed to the end.
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "bindings.h"
#include "viper/core/training_log.h"
#include "viper/schedulers/online.h"
#include "viper/schedulers/scenario.h"
#include "viper/schedulers/strategy.h"
#include "viper/transports/types.h"

namespace viper {
namespace python {
namespace {

using schedulers::ObservationKind;

class Planner {
 public:
  struct Options {
    std::string strategy = "online";
    int64_t total_iterations = 0;      // N
    int64_t warmup_iterations = 0;     // W
    double seconds_per_iteration = 0;  // tau; 0 = measured over the warm-up
    std::optional<double> stall_s, delay_s;  // sigma, delta; set_cost() may give them later
    double request_interval_s = 0;     // seconds between requests; 0 = tau
    std::string metric = "auto";       // auto | val_loss | train_loss
    double gate_z = 0.5;
    double drift_per_s = 0;
    double price_per_slowdown_s = 0;
    std::optional<double> slowdown_budget_s;
    int64_t min_spacing_iterations = 1;
    std::string traffic_clock = "wall";  // wall | producer (schedulers::TrafficClock)
    double drift_prior = schedulers::OnlinePlanner::Options().drift_prior;  // online
    bool record_decisions = false;                                          // online: decisions()
    // online: re-publishing kept models (schedulers::OnlinePlannerOptions).
    int keep_versions = schedulers::OnlinePlanner::Options().keep_versions;
    std::string regime_ends = schedulers::ToString(schedulers::OnlinePlanner::Options().regime_ends);
    bool anticipate_returns = schedulers::OnlinePlanner::Options().anticipate_returns;
    double wait_guard = schedulers::OnlinePlanner::Options().wait_guard;  // online: the rent-or-buy bound
  };

  explicit Planner(Options o) : o_(std::move(o)) {
    auto kind = schedulers::StrategyKindFromString(o_.strategy);
    if (!kind.ok()) Raise(kind.status().WithContext("strategy"));
    kind_ = *kind;
    if (kind_ == schedulers::StrategyKind::kOracle) {
      throw py::value_error("strategy: oracle needs the future loss curve; a live planner cannot use it");
    }
    if (o_.warmup_iterations < 1 || o_.total_iterations <= o_.warmup_iterations) {
      throw py::value_error("need 1 <= warmup < total_iterations, got warmup " + std::to_string(o_.warmup_iterations) +
                            " and total_iterations " + std::to_string(o_.total_iterations));
    }
    if (!(o_.seconds_per_iteration >= 0) || !std::isfinite(o_.seconds_per_iteration)) {
      throw py::value_error("seconds_per_iteration must be >= 0 (0 = measured over the warm-up)");
    }
    if (!(o_.request_interval_s >= 0)) throw py::value_error("request_interval_s must be >= 0 (0 = one request per iteration)");
    if (o_.metric != "auto" && o_.metric != "val_loss" && o_.metric != "train_loss") {
      throw py::value_error("metric must be auto, val_loss or train_loss, got '" + o_.metric + "'");
    }
    if (!schedulers::TrafficClockFromString(o_.traffic_clock).ok()) {
      throw py::value_error("traffic_clock must be producer or wall, got '" + o_.traffic_clock + "'");
    }
    {
      // The planner's own rule, before the warm-up ends and it is built.
      schedulers::OnlinePlanner::Options oo;
      ApplyOnlineOptions(&oo);
      std::string why;
      if (!oo.IsValid(&why)) throw py::value_error(why);
    }
    if (o_.stall_s || o_.delay_s) SetCost(o_.stall_s.value_or(0), o_.delay_s.value_or(o_.stall_s.value_or(0)));
  }

  void SetCost(double stall_s, double delay_s) {
    if (!(stall_s >= 0) || !(delay_s >= 0) || !std::isfinite(stall_s) || !std::isfinite(delay_s)) {
      throw py::value_error("cost: stall_s and delay_s must be finite and >= 0, got " + std::to_string(stall_s) +
                            " and " + std::to_string(delay_s));
    }
    if (built_ && online_) {
      // The closed loop re-plans at every measurement: later re-plans charge
      // the measured cost of the next update (a delta version's, say).
      schedulers::CheckpointCost c;
      c.stall_s = stall_s;
      c.delay_s = std::max(delay_s, stall_s);
      OkOrRaise(online_->SetCost(c));
      return;
    }
    if (built_) {
      throw py::value_error("cost: the " + std::string(schedulers::ToString(kind_)) +
                            " plan was made at the end of the warm-up; set the cost before it (only online re-plans "
                            "with a cost measured later)");
    }
    o_.stall_s = stall_s;
    o_.delay_s = std::max(delay_s, stall_s);
  }

  void Observe(int64_t iteration, std::optional<double> train, std::optional<double> val) {
    if (iteration < last_iteration_) {
      throw py::value_error("observe: iteration " + std::to_string(iteration) + " goes back (last was " +
                            std::to_string(last_iteration_) + ")");
    }
    // A NaN/inf loss is a model that diverged there: kept as +inf (the
    // closed loop never checkpoints it; a warm-up that holds one cannot be
    // planned from, and Build says so).
    for (std::optional<double>* v : {&train, &val}) {
      if (*v && !std::isfinite(**v)) **v = std::numeric_limits<double>::infinity();
    }
    const double now = transports::MonotonicSeconds();
    if (!t0_) t0_ = now;
    last_iteration_ = iteration;
    if (val) last_validation_ = iteration;
    if (!built_) {
      if (log_.records.empty() || log_.records.back().iteration != iteration) {
        log_.records.emplace_back();
        log_.records.back().iteration = iteration;
      }
      LogRecord& r = log_.records.back();
      r.wall_time_s = now - *t0_;
      if (train) r.train_loss = train;
      if (val) r.val_loss = val;
      return;
    }
    if (!online_) return;
    py::gil_scoped_release release;
    if (train) OkOrRaiseNoGil(online_->Observe(iteration, *train, ObservationKind::kTraining));
    if (val) OkOrRaiseNoGil(online_->Observe(iteration, *val, ObservationKind::kValidation));
  }

  bool ShouldCheckpoint(int64_t iteration) {
    if (iteration < last_iteration_) {
      throw py::value_error("should_checkpoint: iteration " + std::to_string(iteration) + " goes back (last was " +
                            std::to_string(last_iteration_) + ")");
    }
    last_iteration_ = iteration;
    if (iteration <= o_.warmup_iterations) return false;
    if (!built_) Build();
    if (iteration > o_.total_iterations) return false;
    if (online_) {
      StatusOr<bool> r = false;
      {
        py::gil_scoped_release release;
        r = online_->ShouldCheckpoint(iteration);
      }
      return ValueOrRaise(std::move(r));
    }
    return next_ < plan_.size() && iteration >= plan_[next_];
  }

  void Commit(int64_t iteration) {
    if (!built_) throw py::value_error("commit: no checkpoint can be taken during the warm-up (iteration <= warmup)");
    if (!taken_.empty() && iteration <= taken_.back()) {
      throw py::value_error("commit: iteration " + std::to_string(iteration) + " is not after the last checkpoint (" +
                            std::to_string(taken_.back()) + ")");
    }
    if (online_) OkOrRaise(online_->Commit(iteration));
    taken_.push_back(iteration);
    while (next_ < plan_.size() && plan_[next_] <= iteration) ++next_;
  }

  void SetPace(double seconds_per_iteration) {
    if (kind_ != schedulers::StrategyKind::kOnline) {
      throw py::value_error("set_pace: only the online strategy re-plans on the measured pace");
    }
    if (!built_ || !online_) {
      throw py::value_error("set_pace: the planner is built at the end of the warm-up (the warm-up's pace is "
                            "seconds_per_iteration, or measured there); set the pace after it");
    }
    OkOrRaise(online_->SetPace(seconds_per_iteration));
  }

  void ObserveClock(int64_t step, double seconds) {
    if (kind_ != schedulers::StrategyKind::kOnline) {
      throw py::value_error("observe_clock: only the online strategy reads the producer's clock");
    }
    if (!built_ || !online_) {
      throw py::value_error("observe_clock: the planner is built at the end of the warm-up; report the clock from "
                            "the step after it");
    }
    OkOrRaise(online_->ObserveClock(step, seconds));
  }

  // A re-measurement belongs to the latest observation, which must be the
  // validation point it was measured at: given before that step's observe()
  // it would be filed under an earlier step, where the planner never
  // compares it with the candidate.
  void CheckRemeasuredAtValidation(const char* what) const {
    if (last_validation_ && *last_validation_ == last_iteration_) return;
    throw py::value_error(std::string(what) + ": the latest observe() (step " + std::to_string(last_iteration_) +
                          ") had no val_loss; re-measure at a validation point, after that step's observe()");
  }

  void ObserveServed(double loss) {
    if (!online_) throw py::value_error("observe_served: only the online strategy re-measures the served version");
    CheckRemeasuredAtValidation("observe_served");
    OkOrRaise(online_->ObserveServed(loss));
  }

  // Whether the planner wants the model measured at `step` copied and kept
  // unpublished, for a later re-publish (OnlinePlanner::CopyAt).
  bool CopyAt(int64_t step) const { return online_ && online_->CopyAt(step); }

  std::vector<int64_t> KeptVersions() const {
    if (!online_) return {};
    return online_->KeptVersions();
  }

  void ObserveKept(int64_t step, double loss) {
    if (!online_) throw py::value_error("observe_kept: only the online strategy re-publishes kept versions");
    CheckRemeasuredAtValidation("observe_kept");
    OkOrRaise(online_->ObserveKept(step, loss));
  }

  // The step whose model the last positive decision publishes.
  int64_t Publishing() const {
    if (!online_) return taken_.empty() ? o_.warmup_iterations : taken_.back();
    return online_->publishing();
  }

  // online with record_decisions: every decision taken so far, one dict each
  // (schedulers::ForEachDecisionField's names and values; None where there
  // was nothing).
  py::list Decisions() const {
    py::list out;
    if (!online_) return out;
    struct Field {
      py::dict* d;
      void operator()(const char* name, int64_t x) const { (*d)[name] = x; }
      void operator()(const char* name, bool b) const { (*d)[name] = b; }
      void operator()(const char* name, std::string_view s) const { (*d)[name] = std::string(s); }
      void operator()(const char* name, std::optional<int64_t> m) const {
        (*d)[name] = m ? py::object(py::int_(*m)) : py::none();
      }
      void operator()(const char* name, double x) const {
        (*d)[name] = std::isfinite(x) ? py::object(py::float_(x)) : py::none();
      }
    };
    for (const auto& x : online_->decisions()) {
      py::dict d;
      schedulers::ForEachDecisionField(x, Field{&d});
      out.append(d);
    }
    return out;
  }

  py::dict Report() const {
    py::dict d;
    d["strategy"] = schedulers::ToString(kind_);
    d["built"] = built_;
    d["checkpoints"] = taken_;
    if (built_) {
      d["metric"] = metric_;
      d["online_metric"] = online_metric_;
      d["traffic_clock"] = schedulers::ToString(problem_.requests.traffic_clock);
      d["seconds_per_iteration"] = problem_.seconds_per_iteration;
      d["stall_s"] = problem_.cost.stall_s;
      d["delay_s"] = problem_.cost.delay_s;
      d["warmup"] = problem_.warmup_iterations;
      d["total_iterations"] = problem_.total_iterations;
      d["predictor"] = predictor_report_;
    }
    if (online_) {
      d["summary"] = online_->summary().BriefReport(static_cast<int64_t>(online_->taken().size()));
      d["replans"] = online_->summary().replans;
      d["changes"] = online_->summary().change_points;
      d["gated"] = online_->summary().gated;
      d["plan"] = online_->last_plan();
      if (online_->served_loss()) d["served_loss"] = *online_->served_loss();
      d["gate_margin"] = online_->GateMargin();
      d["max_decay_per_s"] = online_->summary().max_decay_per_s;
      d["max_lag_price"] = online_->summary().max_lag_price;
      d["published"] = online_->published();
      d["republished"] = online_->summary().republished;
      d["anticipated"] = online_->summary().anticipated;  // of those, ahead of a predicted return
      d["copies"] = online_->copies();                     // models copied and kept unpublished (copy_at)
      d["keep_versions"] = o_.keep_versions;
      d["keep_regime_ends"] = o_.regime_ends;
      d["anticipate_returns"] = o_.anticipate_returns;
      d["anticipation_failed"] = online_->summary().anticipation_failed;
      d["ramp_holds"] = online_->summary().ramp_holds;  // publishes held on a young ramp (wall clock)
      d["switch_holds"] = online_->summary().switch_holds;  // publishes held until the producer trains through a switch
      d["wait_guard"] = o_.wait_guard;
      d["wait_guards"] = online_->summary().wait_guards;  // publishes made after waiting too long
    } else if (built_) {
      d["summary"] = plan_report_;
      d["plan"] = plan_;
    }
    return d;
  }

 private:
  // The user's online options, onto the planner's (checked by its IsValid).
  void ApplyOnlineOptions(schedulers::OnlinePlanner::Options* oo) const {
    oo->gate_z = o_.gate_z;
    oo->drift_prior = o_.drift_prior;
    oo->record_decisions = o_.record_decisions;
    oo->keep_versions = o_.keep_versions;
    oo->anticipate_returns = o_.anticipate_returns;
    oo->wait_guard = o_.wait_guard;
    if (!schedulers::RegimeEndsFromString(o_.regime_ends, &oo->regime_ends)) {
      throw py::value_error("keep_regime_ends must be off, predicted or every, got '" + o_.regime_ends + "'");
    }
  }

  static void OkOrRaiseNoGil(const Status& s) {
    if (s.ok()) return;
    py::gil_scoped_acquire gil;
    Raise(s);
  }

  void Build() {
    if (!o_.stall_s) {
      throw py::value_error(
          "the planner needs the checkpoint cost at the end of the warm-up: pass cost=(stall_s, delay_s) or call "
          "set_cost(report) with the report of the first publish (version 0, at the warm-up)");
    }
    if (log_.records.empty()) throw py::value_error("no observation during the warm-up: call observe() every iteration");
    schedulers::ScenarioOptions sco;
    sco.warmup_iterations = o_.warmup_iterations;
    sco.total_iterations = o_.total_iterations;
    sco.seconds_per_iteration = o_.seconds_per_iteration;
    sco.log_iteration_times = false;
    sco.request_interval_s = o_.request_interval_s;
    if (o_.metric == "val_loss") sco.metric = predictor::LossMetric::kValLoss;
    if (o_.metric == "train_loss") sco.metric = predictor::LossMetric::kTrainLoss;
    sco.tier = schedulers::MeasuredCost{*o_.stall_s, o_.delay_s.value_or(*o_.stall_s)};
    sco.problem_template.drift_per_s = o_.drift_per_s;
    sco.problem_template.price_per_slowdown_s = o_.price_per_slowdown_s;
    sco.problem_template.slowdown_budget_s = o_.slowdown_budget_s;
    sco.problem_template.min_spacing_iterations = o_.min_spacing_iterations;
    sco.problem_template.requests.traffic_clock = *schedulers::TrafficClockFromString(o_.traffic_clock);
    ApplyOnlineOptions(&sco.online);
    log_.source = "viper.Planner warm-up";
    StatusOr<schedulers::Scenario> sc = InternalError("not made");
    StatusOr<schedulers::Plan> plan = InternalError("not planned");
    {
      py::gil_scoped_release release;
      sc = schedulers::MakeScenario(log_, sco);
      if (sc.ok() && kind_ != schedulers::StrategyKind::kOnline) {
        sc->iterations_per_epoch = 0;
        plan = schedulers::PlanStrategy(*sc, kind_);
      }
    }
    if (!sc.ok() && sc.status().code() == StatusCode::kFailedPrecondition &&
        sc.status().message().rfind(log_.source + ":", 0) == 0) {  // tau cannot be measured
      throw py::value_error("planning at the end of the warm-up: " + sc.status().message() +
                            "; pass seconds_per_iteration");
    }
    if (!sc.ok()) Raise(sc.status().WithContext("planning at the end of the warm-up"));
    problem_ = sc->problem;
    metric_ = predictor::ToString(sc->metric);
    online_metric_ = predictor::ToString(sc->online_metric);
    predictor_report_ = sc->predictor_report;
    if (kind_ == schedulers::StrategyKind::kOnline) {
      schedulers::OnlinePlanner::Options oo = sc->online;  // the user's options (sco.online)
      oo.metric = schedulers::OnlineObservationKind(*sc);
      online_ = std::make_unique<schedulers::OnlinePlanner>(
          sc->problem, schedulers::OnlineForecasters(*sc, oo), oo);
      for (const LogRecord& r : log_.records) {
        if (r.train_loss) OkOrRaise(online_->Observe(r.iteration, *r.train_loss, ObservationKind::kTraining));
        if (r.val_loss) OkOrRaise(online_->Observe(r.iteration, *r.val_loss, ObservationKind::kValidation));
      }
    } else {
      if (!plan.ok()) Raise(plan.status().WithContext("planning at the end of the warm-up"));
      plan_ = plan->schedule;
      plan_report_ = plan->summary.BriefReport();
    }
    built_ = true;
  }

  Options o_;
  schedulers::StrategyKind kind_ = schedulers::StrategyKind::kOnline;
  TrainingLog log_;  // the warm-up's observations
  std::optional<double> t0_;
  int64_t last_iteration_ = std::numeric_limits<int64_t>::min();
  std::optional<int64_t> last_validation_;  // the latest observe() with a val_loss
  bool built_ = false;
  schedulers::Problem problem_;
  std::string metric_, online_metric_, predictor_report_, plan_report_;
  std::unique_ptr<schedulers::OnlinePlanner> online_;
  schedulers::Schedule plan_, taken_;
  size_t next_ = 0;
};

}  // namespace

void BindPlanner(py::module_& m) {
  py::class_<Planner>(m, "Planner")
      .def(py::init([](const std::string& strategy, int64_t total_iterations, int64_t warmup,
                       double seconds_per_iteration, std::optional<double> stall_s, std::optional<double> delay_s,
                       double request_interval_s, const std::string& metric, double gate_z, double drift_per_s,
                       double price_per_slowdown_s, std::optional<double> slowdown_budget_s,
                       int64_t min_spacing_iterations, const std::string& traffic_clock, double drift_prior,
                       bool record_decisions, int keep_versions, const std::string& keep_regime_ends,
                       bool anticipate_returns, double wait_guard) {
             Planner::Options o;
             o.strategy = strategy;
             o.total_iterations = total_iterations;
             o.warmup_iterations = warmup;
             o.seconds_per_iteration = seconds_per_iteration;
             o.stall_s = stall_s;
             o.delay_s = delay_s;
             o.request_interval_s = request_interval_s;
             o.metric = metric;
             o.gate_z = gate_z;
             o.drift_per_s = drift_per_s;
             o.price_per_slowdown_s = price_per_slowdown_s;
             o.slowdown_budget_s = slowdown_budget_s;
             o.min_spacing_iterations = min_spacing_iterations;
             o.traffic_clock = traffic_clock;
             o.drift_prior = drift_prior;
             o.record_decisions = record_decisions;
             o.keep_versions = keep_versions;
             o.regime_ends = keep_regime_ends;
             o.anticipate_returns = anticipate_returns;
             o.wait_guard = wait_guard;
             return std::make_unique<Planner>(std::move(o));
           }),
           py::arg("strategy"), py::arg("total_iterations"), py::arg("warmup"), py::arg("seconds_per_iteration"),
           py::arg("stall_s"), py::arg("delay_s"), py::arg("request_interval_s"), py::arg("metric"), py::arg("gate_z"),
           py::arg("drift_per_s"), py::arg("price_per_slowdown_s"), py::arg("slowdown_budget_s"),
           py::arg("min_spacing_iterations"), py::arg("traffic_clock") = "wall",
           py::arg("drift_prior") = schedulers::OnlinePlanner::Options().drift_prior,
           py::arg("record_decisions") = false,
           py::arg("keep_versions") = schedulers::OnlinePlanner::Options().keep_versions,
           py::arg("keep_regime_ends") = std::string(schedulers::ToString(schedulers::OnlinePlanner::Options().regime_ends)),
           py::arg("anticipate_returns") = schedulers::OnlinePlanner::Options().anticipate_returns,
           py::arg("wait_guard") = schedulers::OnlinePlanner::Options().wait_guard)
      .def("set_cost", &Planner::SetCost, py::arg("stall_s"), py::arg("delay_s"))
      .def("observe", &Planner::Observe, py::arg("iteration"), py::arg("train_loss"), py::arg("val_loss"))
      .def("should_checkpoint", &Planner::ShouldCheckpoint, py::arg("iteration"))
      .def("commit", &Planner::Commit, py::arg("iteration"))
      .def("set_pace", &Planner::SetPace, py::arg("seconds_per_iteration"))
      .def("observe_clock", &Planner::ObserveClock, py::arg("step"), py::arg("seconds"))
      .def("observe_served", &Planner::ObserveServed, py::arg("loss"))
      .def("copy_at", &Planner::CopyAt, py::arg("step"))
      .def("kept_versions", &Planner::KeptVersions)
      .def("observe_kept", &Planner::ObserveKept, py::arg("step"), py::arg("loss"))
      .def("publishing", &Planner::Publishing)
      .def("decisions", &Planner::Decisions)
      .def("report", &Planner::Report);
}

}  // namespace python
}  // namespace viper
