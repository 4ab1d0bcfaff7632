// The planning context: its cost sources and errors, and on the shipped real
// logs, no strategy but the oracle may read a log row before a live producer
// would have seen it.
#include "viper/schedulers/scenario.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "viper/datasets/log_reader.h"
#include "viper/schedulers/presets.h"
#include "viper/schedulers/solvers.h"

namespace viper {
namespace schedulers {
namespace {

// Every row after iteration s changed: losses scaled by random factors in
// [0.3, 3] (train, validation, test), later rows taking longer.
TrainingLog AlterAfter(TrainingLog log, int64_t s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> factor(0.3, 3.0);
  double extra_s = 0;
  for (LogRecord& r : log.records) {
    if (r.iteration <= s) continue;
    for (std::optional<double>* v : {&r.train_loss, &r.val_loss, &r.test_loss}) {
      if (*v) **v *= factor(rng);
    }
    extra_s += 0.01 * factor(rng);
    if (r.wall_time_s) *r.wall_time_s += extra_s;
  }
  return log;
}

// 200 rows of a made-up decaying curve named `source`: training loss on
// every row, wall times (0.1 s per iteration) when `timed`, validation and
// test loss on every 10th row when `evaluated`.
TrainingLog MadeUpLog(const std::string& source, bool timed, bool evaluated) {
  TrainingLog log;
  log.source = source;
  for (int i = 1; i <= 200; ++i) {
    LogRecord r;
    r.iteration = i;
    if (timed) r.wall_time_s = 0.1 * i;
    r.train_loss = 2.0 / (1 + 0.05 * i);
    if (evaluated && i % 10 == 0) {
      r.val_loss = 1.0 / (1 + 0.02 * i);
      r.test_loss = 1.1 / (1 + 0.02 * i);
    }
    log.records.push_back(r);
  }
  return log;
}

Schedule UpTo(const Schedule& s, int64_t last) {
  Schedule out;
  for (int64_t x : s) {
    if (x <= last) out.push_back(x);
  }
  return out;
}

// For every shipped log, every strategy but the oracle and two cut points s:
// the decisions at or before s are the same whatever the log says after s.
TEST(ScenarioTest, NoStrategyPeeksAtLaterRows) {
  const auto logs = datasets::ShippedLogFiles();
  ASSERT_GE(logs.size(), 7u) << "shipped logs missing in " << datasets::ShippedLogDirectory();
  int oracle_checks = 0;
  datasets::LogReader::Options read;
  read.non_finite = datasets::NonFinitePolicy::kDiverged;  // as the planning commands read them
  for (const std::string& path : logs) {
    auto log = datasets::LogReader::ReadFile(path, read);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    ScenarioOptions o;
    o.warmup_fraction = 0.2;
    TierCost tier;
    tier.model_size_bytes = 600e6;
    tier.snapshot_bandwidth_bytes_per_s = 75e9;  // ~8 ms stall: many checkpoints, so cut points matter
    tier.transfer_bandwidth_bytes_per_s = 5e9;
    tier.synchronous = false;
    o.tier = tier;
    auto base = MakeScenario(*log, o);
    ASSERT_TRUE(base.ok()) << path << ": " << base.status().ToString();
    const int64_t W = base->problem.warmup_iterations, N = base->problem.total_iterations;
    for (int64_t s : {W + (N - W) / 3, W + 2 * (N - W) / 3}) {
      auto altered = MakeScenario(AlterAfter(*log, s, static_cast<uint64_t>(s)), o);
      ASSERT_TRUE(altered.ok()) << altered.status().ToString();
      for (StrategyKind k : AllStrategyKinds()) {
        if (k == StrategyKind::kOracle) continue;
        auto a = PlanStrategy(*base, k);
        auto b = PlanStrategy(*altered, k);
        ASSERT_TRUE(a.ok() && b.ok()) << path << " " << ToString(k) << ": " << a.status().ToString() << " / "
                                      << b.status().ToString();
        EXPECT_EQ(UpTo(a->schedule, s), UpTo(b->schedule, s))
            << path << ", " << ToString(k) << ": decisions up to iteration " << s << " changed with later rows";
      }
      // The oracle does read the future: the check above would catch a peek.
      // (Unless it publishes nothing after s either way: after the collapse
      // of collapse-sgd-h256, or the divergence of diverge-sgd-h256, every
      // version is bad, altered or not.)
      auto a = PlanStrategy(*base, StrategyKind::kOracle);
      auto b = PlanStrategy(*altered, StrategyKind::kOracle);
      ASSERT_TRUE(a.ok() && b.ok());
      const bool publishes_after = (!a->schedule.empty() && a->schedule.back() > s) ||
                                   (!b->schedule.empty() && b->schedule.back() > s);
      if (!publishes_after) continue;
      ++oracle_checks;
      EXPECT_NE(a->schedule, b->schedule) << path << ": the oracle should see the altered future";
    }
  }
  EXPECT_GE(oracle_checks, 2 * (static_cast<int>(logs.size()) - 2))
      << "the oracle check should run on all but the two logs that collapse or diverge";
}

// The judge reads test_loss where the log has it, and never lets a planner observe it.
TEST(ScenarioTest, TruthIsTheTestColumnAndPlannersCannotObserveIt) {
  const TrainingLog log = MadeUpLog("made-up", true, true);
  ScenarioOptions o;
  o.warmup_fraction = 0.5;
  auto sc = MakeScenario(log, o);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->metric, predictor::LossMetric::kValLoss);
  EXPECT_EQ(sc->truth_metric, predictor::LossMetric::kTestLoss);
  EXPECT_TRUE(sc->separate_truth);
  EXPECT_NEAR(sc->truth->at(200), 1.1 / 5.0, 1e-12);  // the test column, not validation's 0.2
  o.metric = predictor::LossMetric::kTestLoss;
  auto bad = MakeScenario(log, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("test_loss"), std::string::npos);
  // tau comes from the warm-up rows only (0.1 s each), whatever follows.
  EXPECT_NEAR(sc->problem.seconds_per_iteration, 0.1, 1e-9);
}

// The oracle (a bound) plans on the run's own clock: the per-iteration
// times the simulator replays, where every other strategy has only the
// warm-up's tau. A run 3x slower after its warm-up: the oracle's schedule is
// the exact optimum on that clock, not at the warm-up's 0.1 s per iteration
// (the two differ, so the test can fail).
TEST(ScenarioTest, TheOracleIsPlannedOnTheRunsOwnClock) {
  TrainingLog log = MadeUpLog("made-up", true, true);
  for (LogRecord& r : log.records) {
    if (r.iteration > 100) r.wall_time_s = 10.0 + 0.3 * static_cast<double>(r.iteration - 100);
  }
  ScenarioOptions o;
  o.warmup_fraction = 0.5;
  o.tier = MeasuredCost{0.5, 3.0};
  auto sc = MakeScenario(log, o);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_NEAR(sc->problem.seconds_per_iteration, 0.1, 0.005);  // the planners' tau: about the warm-up's
  const Problem slow = BoundProblem(*sc);
  const int64_t W = sc->problem.warmup_iterations;
  ASSERT_EQ(static_cast<int64_t>(slow.elapsed_s.size()), 200 - W + 1);
  EXPECT_NEAR(slow.Elapsed(200), 0.3 * static_cast<double>(200 - W), 1e-9);  // 0.3 s per iteration after it
  auto oracle = PlanStrategy(*sc, StrategyKind::kOracle);
  ASSERT_TRUE(oracle.ok()) << oracle.status().ToString();
  const Problem fast = sc->problem;
  auto at_slow = SolveOptimal(slow, *sc->truth);
  auto at_fast = SolveOptimal(fast, *sc->truth);
  ASSERT_TRUE(at_slow.ok() && at_fast.ok());
  ASSERT_NE(at_slow->schedule, at_fast->schedule);
  EXPECT_EQ(oracle->schedule, at_slow->schedule);
  // Without per-iteration times (a log with no wall times beyond tau given) nothing changes.
  ScenarioOptions constant = o;
  constant.seconds_per_iteration = 0.1;
  auto sc2 = MakeScenario(log, constant);
  ASSERT_TRUE(sc2.ok()) << sc2.status().ToString();
  EXPECT_TRUE(TruthElapsed(*sc2).empty());
}

// The replayed clock against tau: an even pace is regular; a run that
// stalls for 5 s at a few iterations after its warm-up (a loaded machine)
// spends most of its replayed time there and is reported as irregular, as is
// one that runs three times slower after its warm-up; a given tau replays no
// clock at all.
TEST(ScenarioTest, SaysWhenTheReplayedClockIsIrregular) {
  ScenarioOptions o;
  o.warmup_fraction = 0.5;
  o.tier = MeasuredCost{0.5, 3.0};
  auto pace_of = [&](const TrainingLog& log, const ScenarioOptions& options) {
    auto sc = MakeScenario(log, options);
    EXPECT_TRUE(sc.ok()) << sc.status().ToString();
    return sc.ok() ? MeasureReplayedPace(*sc) : std::nullopt;
  };
  const auto even = pace_of(MadeUpLog("even", true, true), o);
  ASSERT_TRUE(even.has_value());
  EXPECT_NEAR(even->over_tau, 1.0, 0.05);
  EXPECT_NEAR(even->seconds_per_iteration, 0.1, 0.005);
  EXPECT_LT(even->slow_share, 0.01);
  EXPECT_FALSE(IrregularPace(*even)) << DescribeReplayedPace(*even);
  EXPECT_EQ(DescribeReplayedPace(*even).find("irregular"), std::string::npos);

  TrainingLog loaded = MadeUpLog("loaded", true, true);
  double extra = 0;
  for (LogRecord& r : loaded.records) {
    if (r.iteration == 130 || r.iteration == 150 || r.iteration == 170) extra += 5.0;
    *r.wall_time_s += extra;
  }
  const auto spiky = pace_of(loaded, o);
  ASSERT_TRUE(spiky.has_value());
  EXPECT_GT(spiky->slow_share, 0.5);
  EXPECT_NEAR(spiky->over_tau, (10.0 + 15.0) / 10.0, 0.05);  // 100 iterations of 0.1 s, plus 15 s
  EXPECT_TRUE(IrregularPace(*spiky));
  EXPECT_NE(DescribeReplayedPace(*spiky).find("irregular"), std::string::npos) << DescribeReplayedPace(*spiky);

  TrainingLog slower = MadeUpLog("slower", true, true);
  for (LogRecord& r : slower.records) {
    if (r.iteration > 100) r.wall_time_s = 10.0 + 0.3 * static_cast<double>(r.iteration - 100);
  }
  const auto slow = pace_of(slower, o);
  ASSERT_TRUE(slow.has_value());
  EXPECT_NEAR(slow->over_tau, 3.0, 0.2);
  EXPECT_LT(slow->slow_share, 0.01);
  EXPECT_TRUE(IrregularPace(*slow));

  ScenarioOptions given = o;
  given.seconds_per_iteration = 0.1;
  EXPECT_FALSE(pace_of(MadeUpLog("given", true, true), given).has_value());
}

// The defaults are valid: the gpu preset for a 600 MB model, async, push.
TEST(ScenarioOptionsTest, DefaultsAreValid) {
  ScenarioOptions o;
  std::string error;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  const TierCost t = ToTierCost(o.tier);
  const TierCost gpu = PresetTierCost(Tier::kGpu, 600e6, false, Notification::kPush);
  EXPECT_EQ(t.ToCheckpointCost().stall_s, gpu.ToCheckpointCost().stall_s);
  EXPECT_EQ(t.ToCheckpointCost().delay_s, gpu.ToCheckpointCost().delay_s);
}

// Measured sigma/delta as phases: the stall is sigma and the delay delta
// (a delta below sigma counts as sigma); polling adds half a period.
TEST(ScenarioOptionsTest, MeasuredCostIsSigmaAndDelta) {
  // 0.25 s and 0.75 s are binary-exact, so the phases add up exactly.
  const CheckpointCost c = ToTierCost(MeasuredCost{0.25, 0.75}).ToCheckpointCost();
  EXPECT_EQ(c.stall_s, 0.25);
  EXPECT_EQ(c.delay_s, 0.75);
  const CheckpointCost below = ToTierCost(MeasuredCost{0.5, 0.25}).ToCheckpointCost();
  EXPECT_EQ(below.delay_s, 0.5);
  const CheckpointCost polled = ToTierCost(MeasuredCost{0.25, 0.75, Notification::kPoll, 2.0}).ToCheckpointCost();
  EXPECT_EQ(polled.delay_s, 1.75);
  ScenarioOptions o;
  o.tier = MeasuredCost{-1, 1};
  std::string error;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("stall_s"), std::string::npos) << error;
}

// Each source reaches the problem: Problem::cost is the phases' sigma/delta.
TEST(ScenarioTest, TheCostSourceMakesTheProblemsCost) {
  const TrainingLog log = MadeUpLog("made-up", true, false);
  ScenarioOptions o;
  o.tier = PresetCost{Tier::kHost, 1.7e9, false, Notification::kPush, 1.0};
  auto preset = MakeScenario(log, o);
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  const CheckpointCost host = PresetTierCost(Tier::kHost, 1.7e9, false, Notification::kPush).ToCheckpointCost();
  EXPECT_EQ(preset->problem.cost.stall_s, host.stall_s);
  EXPECT_EQ(preset->problem.cost.delay_s, host.delay_s);
  o.tier = MeasuredCost{0.25, 0.75};
  auto measured = MakeScenario(log, o);
  ASSERT_TRUE(measured.ok()) << measured.status().ToString();
  EXPECT_EQ(measured->problem.cost.stall_s, 0.25);
  EXPECT_EQ(measured->problem.cost.delay_s, 0.75);
  EXPECT_EQ(measured->tier.model_size_bytes, 1.0);
}

// Re-measuring a model costs the producer what its own validation costs in
// the log: each validation row's iteration 0.35 s longer here.
TEST(ScenarioTest, ARemeasurementCostsTheLogsValidationPause) {
  TrainingLog log = MadeUpLog("made-up", true, true);
  double extra = 0;
  for (LogRecord& r : log.records) {
    if (r.val_loss) extra += 0.35;
    *r.wall_time_s += extra;
  }
  EXPECT_NEAR(ValidationPauseSeconds(log), 0.35, 1e-9);
  ScenarioOptions o;
  o.warmup_fraction = 0.3;
  auto sc = MakeScenario(log, o);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_NEAR(sc->problem.cost.remeasure_s, 0.35, 1e-9);
  o.remeasure_s = 0.2;
  EXPECT_EQ(MakeScenario(log, o)->problem.cost.remeasure_s, 0.2);
  o.remeasure_s = 0;
  EXPECT_EQ(MakeScenario(log, o)->problem.cost.remeasure_s, 0.0);
  // No pause where the log cannot show one: no wall times, or no
  // validation; nor where validation takes no longer than training.
  EXPECT_EQ(ValidationPauseSeconds(MadeUpLog("untimed", false, true)), 0.0);
  EXPECT_EQ(ValidationPauseSeconds(MadeUpLog("unevaluated", true, false)), 0.0);
  EXPECT_NEAR(ValidationPauseSeconds(MadeUpLog("even", true, true)), 0.0, 1e-9);
  o.remeasure_s = std::numeric_limits<double>::quiet_NaN();
  std::string error;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("remeasure_s"), std::string::npos) << error;
}

// tau that cannot be measured is FailedPrecondition naming the log; a
// warm-up too short names the warm-up that would do.
TEST(ScenarioTest, ErrorsSayWhatToGive) {
  const TrainingLog log = MadeUpLog("untimed", false, false);
  ScenarioOptions o;
  auto untimed = MakeScenario(log, o);
  ASSERT_FALSE(untimed.ok());
  EXPECT_EQ(untimed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(untimed.status().message().rfind("untimed: ", 0), 0u) << untimed.status().message();
  o.seconds_per_iteration = 0.1;
  EXPECT_TRUE(MakeScenario(log, o).ok());
  o.warmup_iterations = 3;  // 3 training points; the predictor needs more
  auto short_warmup = MakeScenario(log, o);
  ASSERT_FALSE(short_warmup.ok());
  EXPECT_EQ(short_warmup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_warmup.status().message().find("give a longer warm-up (to iteration"), std::string::npos)
      << short_warmup.status().message();
}

// The online planner's forecaster fits a regime from min_fit_points
// measurements, down to 5, where the predictor alone would want its own 8
// (and every young regime would stay flat).
TEST(ScenarioTest, OnlineForecastersFitFromMinFitPoints) {
  Scenario sc;
  ASSERT_EQ(sc.predictor_options.min_points, 8);
  auto points = [](int n) {
    predictor::CurveData d;
    for (int i = 1; i <= n; ++i) {
      d.iterations.push_back(50.0 * i);
      d.losses.push_back(0.4 + 2.0 * std::exp(-50.0 * i / 120.0));
    }
    return d;
  };
  OnlinePlanner::Options o;
  o.min_fit_points = 5;
  EXPECT_FALSE(PredictorForecasterFactory(sc.predictor_options)()->Forecast(points(5), 1, 1000).ok());
  auto five = OnlineForecasters(sc, o)()->Forecast(points(5), 1, 1000);
  ASSERT_TRUE(five.ok()) << five.status().ToString();
  EXPECT_LT(five->at(1000), five->at(250)) << "a falling regime is forecast to fall on";
  o.min_fit_points = 3;  // the families need 5
  EXPECT_FALSE(OnlineForecasters(sc, o)()->Forecast(points(4), 1, 1000).ok());
  EXPECT_TRUE(OnlineForecasters(sc, o)()->Forecast(points(5), 1, 1000).ok());
  o.min_fit_points = 20;  // a later fit is the planner's to wait for, not the forecaster's
  EXPECT_TRUE(OnlineForecasters(sc, o)()->Forecast(points(8), 1, 1000).ok());
}

// Where the warm-up holds fewer validation points than the warm-up fit
// needs, the static strategies plan on the training loss, and online still
// observes the validation loss, as a producer that validates measures it;
// it reads no later row there either. An explicit metric binds online too,
// and a warm-up without a validation point leaves it the training loss.
TEST(ScenarioTest, OnlineObservesValidationWhereTheFitFallsBack) {
  const TrainingLog log = MadeUpLog("made-up", /*timed=*/true, /*evaluated=*/true);
  ScenarioOptions o;
  o.warmup_iterations = 60;  // validation at 10, 20, ..., 60: 6 points, the fit needs 8
  auto sc = MakeScenario(log, o);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->metric, predictor::LossMetric::kTrainLoss);
  EXPECT_EQ(sc->online_metric, predictor::LossMetric::kValLoss);
  EXPECT_EQ(OnlineObservationKind(*sc), ObservationKind::kValidation);
  EXPECT_EQ(OnlinePoints(*sc).size(), 20u) << "the validation series";
  sc->online.record_decisions = true;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->decisions.size(), 14u) << "one decision at each validation point after the warm-up";
  for (const auto& d : plan->decisions) {
    EXPECT_EQ(d.iteration % 10, 0);
    EXPECT_DOUBLE_EQ(d.candidate_loss, 1.0 / (1 + 0.02 * static_cast<double>(d.iteration)));
  }
  const int64_t s = 130;
  auto altered = MakeScenario(AlterAfter(log, s, 7), o);
  ASSERT_TRUE(altered.ok()) << altered.status().ToString();
  auto b = PlanStrategy(*altered, StrategyKind::kOnline);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(UpTo(plan->schedule, s), UpTo(b->schedule, s)) << "online read a row after iteration " << s;

  o.metric = predictor::LossMetric::kTrainLoss;
  auto explicit_metric = MakeScenario(log, o);
  ASSERT_TRUE(explicit_metric.ok()) << explicit_metric.status().ToString();
  EXPECT_EQ(explicit_metric->online_metric, predictor::LossMetric::kTrainLoss);
  EXPECT_EQ(OnlinePoints(*explicit_metric).size(), 200u) << "the training series, not a copy of it";
  EXPECT_TRUE(explicit_metric->online_points.iterations.empty());
  o.metric.reset();
  o.warmup_iterations = 9;  // 9 training points, no validation point yet
  auto unvalidated = MakeScenario(log, o);
  ASSERT_TRUE(unvalidated.ok()) << unvalidated.status().ToString();
  EXPECT_EQ(unvalidated->online_metric, predictor::LossMetric::kTrainLoss);
  EXPECT_EQ(OnlineObservationKind(*unvalidated), ObservationKind::kTraining);
}

}  // namespace
}  // namespace schedulers
}  // namespace viper
