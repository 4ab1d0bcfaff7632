// A staleness table in the planning context: the planners read only what a
// live producer could have measured by then, the oracle reads the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include <filesystem>

#include "swap_run.h"
#include "viper/datasets/log_reader.h"
#include "viper/datasets/staleness_reader.h"
#include "viper/schedulers/scenario.h"

namespace viper {
namespace schedulers {
namespace {

// The scenarios below re-measure for free (remeasure_s = 0): they pin the
// planner's rules on the decisions they were calibrated on, before the judge
// charged the producer's re-measuring pauses (Plan::pauses). The charge has
// its own tests (ARemeasurementPausesTheProducer...).
ScenarioOptions Options(const StalenessTable& table) {
  ScenarioOptions o;
  o.remeasure_s = 0;
  o.warmup_fraction = 0.2;
  TierCost tier;
  tier.model_size_bytes = 600e6;
  tier.snapshot_bandwidth_bytes_per_s = 75e9;
  tier.transfer_bandwidth_bytes_per_s = 5e9;
  tier.synchronous = false;
  o.tier = tier;
  o.staleness = table;
  return o;
}

// The decisions up to `last`: each checkpoint and the model it publishes.
std::vector<std::pair<int64_t, int64_t>> UpTo(const Plan& plan, int64_t last) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t q = 0; q < plan.schedule.size(); ++q) {
    if (plan.schedule[q] > last) break;
    out.emplace_back(plan.schedule[q], plan.published.empty() ? plan.schedule[q] : plan.published[q]);
  }
  return out;
}

// The model each checkpoint of `plan` publishes.
std::vector<int64_t> Models(const Plan& plan) { return plan.published.empty() ? plan.schedule : plan.published; }

// Table rows on traffic after s (and log rows after s) changed: every
// strategy but the oracle decides the same up to s. Cuts before the swap,
// on it and after it.
TEST(StalenessScenarioTest, NoStrategyPeeksAtLaterTableRows) {
  const auto [log, table] = testing::SwapRun(1);
  auto base = MakeScenario(log, Options(table));
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  ASSERT_TRUE(base->staleness_observed && base->staleness_truth);
  for (int64_t s : {1200, 1500, 2200}) {
    const auto [alog, atable] = testing::SwapRun(1, s);
    auto altered = MakeScenario(alog, Options(atable));
    ASSERT_TRUE(altered.ok()) << altered.status().ToString();
    for (StrategyKind k : AllStrategyKinds()) {
      if (k == StrategyKind::kOracle) continue;
      auto a = PlanStrategy(*base, k);
      auto b = PlanStrategy(*altered, k);
      ASSERT_TRUE(a.ok() && b.ok()) << ToString(k) << ": " << a.status().ToString() << " / " << b.status().ToString();
      EXPECT_EQ(UpTo(*a, s), UpTo(*b, s))
          << ToString(k) << ": decisions up to iteration " << s << " changed with later table rows";
    }
    auto a = PlanStrategy(*base, StrategyKind::kOracle);
    auto b = PlanStrategy(*altered, StrategyKind::kOracle);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE(a->schedule, b->schedule) << "the oracle should see the altered table";
  }
}

TEST(StalenessScenarioTest, ATableOfAnotherRunIsRefused) {
  auto [log, table] = testing::SwapRun(1);
  const auto other = testing::SwapRun(2).second;  // same shape, other noise
  auto sc = MakeScenario(log, Options(other));
  ASSERT_FALSE(sc.ok());
  EXPECT_NE(sc.status().message().find("is not a staleness table of"), std::string::npos) << sc.status().message();
  // A table that starts after the warm-up cannot judge version 0.
  table.records.erase(std::remove_if(table.records.begin(), table.records.end(), [](const StalenessRecord& r) { return r.version_iteration < 1000; }), table.records.end());
  auto late = MakeScenario(log, Options(table));
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("does not cover"), std::string::npos) << late.status().message();
}

TEST(StalenessScenarioTest, OnlineReMeasuresTheServedVersionAndReplacesItAfterTheSwap) {
  const auto [log, table] = testing::SwapRun(1);
  auto sc = MakeScenario(log, Options(table));
  ASSERT_TRUE(sc.ok());
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_NE(plan->summary.message.find("re-measured"), std::string::npos) << plan->summary.message;
  // Something after the swap is published: the served pre-swap version
  // re-measures 1.5 worse, and the retrained model recovers below it.
  ASSERT_FALSE(plan->schedule.empty());
  EXPECT_GT(plan->schedule.back(), 1500);
}

// Under the wall clock a stall is priced by how fast new versions decay (each
// later version serves traffic sigma further on). A step change is no such
// rate: after the swap the pre-swap version is 1.5 worse for good, while the
// versions trained after it do not decay. Priced from the decay within the
// regime (after three re-measurements past the change), the retrained model
// is published as it recovers from the swap's spike: checkpoints at 1550,
// 1600, 1650 and 1750 on a tier that stalls 2 s (20 iterations); priced from
// the step as a rate (93 per second of stall), 1600 only, then 1850.
// Without the prior over drift (which prices every stall before the swap):
// the rule tested is the measured decay's.
TEST(StalenessScenarioTest, UnderTheWallClockAStepIsNoLagPrice) {
  const auto [log, table] = testing::SwapRun(1);
  ScenarioOptions o = Options(table);
  o.problem_template.requests.traffic_clock = TrafficClock::kWall;
  o.tier = MeasuredCost{2.0, 3.0};
  o.online.drift_prior = 0;
  auto sc = MakeScenario(log, o);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto recovering = std::count_if(plan->schedule.begin(), plan->schedule.end(),
                                        [](int64_t c) { return c > 1500 && c <= 1800; });
  EXPECT_GE(recovering, 3) << plan->summary.message;
}

// A prior over drift (OnlinePlanner::Options::drift_prior, on by default)
// prices the lag of every stall before a drift is measured: under the wall
// clock online takes fewer checkpoints before the swap (each would leave the
// producer 20 iterations further behind it) and still replaces the stale
// version after it. Under the producer clock a stall holds the traffic too:
// no lag, no change.
TEST(StalenessScenarioTest, ADriftPriorSkipsCheckpointsBeforeTheSwapOnlyUnderTheWallClock) {
  const auto [log, table] = testing::SwapRun(1);
  ASSERT_GT(OnlinePlanner::Options().drift_prior, 0);
  for (TrafficClock clock : {TrafficClock::kWall, TrafficClock::kProducer}) {
    Plan plans[2];
    for (int with = 0; with < 2; ++with) {
      ScenarioOptions o = Options(table);
      o.problem_template.requests.traffic_clock = clock;
      o.tier = MeasuredCost{2.0, 3.0};
      if (!with) o.online.drift_prior = 0.0;  // else the default
      auto sc = MakeScenario(log, o);
      ASSERT_TRUE(sc.ok()) << sc.status().ToString();
      auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      plans[with] = *plan;
    }
    auto before = [](const Plan& p) { return std::count_if(p.schedule.begin(), p.schedule.end(), [](int64_t c) { return c < 1500; }); };
    const std::string both = plans[0].summary.message + "\n" + plans[1].summary.message;
    if (clock == TrafficClock::kWall) {
      EXPECT_LT(before(plans[1]), before(plans[0])) << both;
      ASSERT_FALSE(plans[1].schedule.empty()) << both;
      EXPECT_GT(plans[1].schedule.back(), 1500) << both;
    } else {
      EXPECT_EQ(plans[1].schedule, plans[0].schedule) << both;
    }
  }
  OnlinePlanner::Options bad;
  bad.drift_prior = -1;
  std::string why;
  EXPECT_FALSE(bad.IsValid(&why));
  EXPECT_NE(why.find("drift_prior"), std::string::npos) << why;
}

// The prior applies only where the served version is re-measured. On the
// diagonal (no table) neither online nor the judge can see a drift, and a
// prior would only cost checkpoints: the plan with any prior is the plan
// without one, under the wall clock where it would otherwise act.
TEST(StalenessScenarioTest, ADriftPriorNeedsTheServedVersionReMeasured) {
  const auto [log, table] = testing::SwapRun(1);
  Plan plans[2];
  for (int with = 0; with < 2; ++with) {
    ScenarioOptions o = Options(table);
    o.staleness.reset();
    o.problem_template.requests.traffic_clock = TrafficClock::kWall;
    o.tier = MeasuredCost{2.0, 3.0};
    o.online.drift_prior = with ? 3.0 : 0.0;
    auto sc = MakeScenario(log, o);
    ASSERT_TRUE(sc.ok()) << sc.status().ToString();
    auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->summary.message.find("re-measured"), std::string::npos) << plan->summary.message;
    plans[with] = *plan;
  }
  EXPECT_EQ(plans[1].schedule, plans[0].schedule)
      << plans[0].summary.message << "\n" << plans[1].summary.message;
  EXPECT_EQ(plans[1].summary.message.find("lag priced"), std::string::npos) << plans[1].summary.message;
}

// Every shipped table reads, is its log's (same diagonal) and covers it, and
// on the traffic-drift runs some stale pair costs more than its diagonal.
TEST(StalenessScenarioTest, EveryShippedTableIsItsLogs) {
  namespace fs = std::filesystem;
  int tables = 0;
  for (const auto& e : fs::directory_iterator(datasets::ShippedLogDirectory())) {
    const std::string name = e.path().filename().string();
    const auto at = name.find(".staleness.csv");
    if (at == std::string::npos) continue;
    ++tables;
    const std::string log_path = (e.path().parent_path() / (name.substr(0, at) + ".csv.gz")).string();
    // As the planning commands read them: a NaN is a diverged model.
    datasets::LogReader::Options lo;
    lo.non_finite = datasets::NonFinitePolicy::kDiverged;
    datasets::StalenessReader::Options to;
    to.non_finite = datasets::NonFinitePolicy::kDiverged;
    auto log = datasets::LogReader::ReadFile(log_path, lo);
    auto table = datasets::StalenessReader::ReadFile(e.path().string(), to);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    auto sc = MakeScenario(*log, Options(*table));
    ASSERT_TRUE(sc.ok()) << name << ": " << sc.status().ToString();
    // No traffic drift: the control, and the runs that collapse or diverge
    // (their stale pairs equal their diagonal; later versions are the bad ones).
    if (name.rfind("sgd-h256.", 0) == 0 || name.rfind("collapse-", 0) == 0 || name.rfind("diverge-", 0) == 0) {
      continue;
    }
    double worst = 0;
    for (const auto& g : sc->staleness_truth->Grid()) {
      worst = std::max(worst, g.loss - *sc->staleness_truth->At(g.version, static_cast<double>(g.version)));
    }
    EXPECT_GT(worst, 0.1) << name << ": a traffic drift should make some stale pair cost more";
  }
  EXPECT_GE(tables, 7);
}

// Recurring domains (recur-sgd-h256: the traffic's inputs rotate 90 degrees
// at 1000 and back every 750 iterations): when a domain returns, a model kept
// from its last visit beats anything trained since, so online re-publishes
// kept models, each older than its checkpoint and one it kept (published or
// measured last before a detected change), and that lowers its CIL on the
// table against the same planner that never re-publishes. The oracle, which
// may re-publish any earlier model, does too and stays a bound. Anticipating
// the returns pays under the producer clock on the gpu tier and under the
// wall clock on pfs (under the wall clock on gpu it does not: 35% against
// 31% without it, bench/README.md).
TEST(StalenessScenarioTest, OnlineRePublishesAKeptModelWhenADomainReturns) {
  const std::string dir = datasets::ShippedLogDirectory();
  auto log = datasets::LogReader::ReadFile(dir + "/recur-sgd-h256.csv.gz", {});
  auto table = datasets::StalenessReader::ReadFile(dir + "/recur-sgd-h256.staleness.csv.gz", {});
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  for (const auto& [clock, tier] : {std::pair{TrafficClock::kProducer, Tier::kGpu}, std::pair{TrafficClock::kWall, Tier::kPfs}})
  for (WindowKind window : {WindowKind::kWhileTraining, WindowKind::kRequestCount}) {
    SCOPED_TRACE(std::string(ToString(clock)) + " clock");
    ScenarioOptions o;
    o.remeasure_s = 0;  // re-measuring free: see Options()
    o.warmup_fraction = 0.2;
    o.tier = PresetCost{tier, 600e6, false, Notification::kPush, 1.0};
    o.problem_template.requests.window = window;
    o.problem_template.requests.traffic_clock = clock;
    if (window == WindowKind::kRequestCount) o.problem_template.requests.request_count = 3747;
    o.staleness = *table;
    auto sc = MakeScenario(*log, o);
    ASSERT_TRUE(sc.ok()) << sc.status().ToString();
    auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_EQ(plan->published.size(), plan->schedule.size()) << plan->summary.message;
    int republished = 0;
    for (size_t q = 0; q < plan->schedule.size(); ++q) {
      EXPECT_LE(plan->published[q], plan->schedule[q]);
      if (plan->published[q] == plan->schedule[q]) continue;
      ++republished;
      // A kept model: the warm-up's, one published before, or a measurement point.
      const bool earlier = plan->published[q] == sc->problem.warmup_iterations ||
                           std::find(plan->schedule.begin(), plan->schedule.begin() + static_cast<std::ptrdiff_t>(q),
                                     plan->published[q]) != plan->schedule.begin() + static_cast<std::ptrdiff_t>(q) ||
                           plan->published[q] % 50 == 0;
      EXPECT_TRUE(earlier) << "re-published model " << plan->published[q];
    }
    EXPECT_GE(republished, 3) << ToString(window) << ": " << plan->summary.message;
    EXPECT_NE(plan->summary.message.find("re-published"), std::string::npos) << plan->summary.message;
    ScenarioOptions never = o;
    never.online.keep_versions = 0;
    auto sc0 = MakeScenario(*log, never);
    ASSERT_TRUE(sc0.ok());
    auto plan0 = PlanStrategy(*sc0, StrategyKind::kOnline);
    ASSERT_TRUE(plan0.ok());
    EXPECT_TRUE(plan0->published.empty());
    auto with = EvaluateOnSurface(sc->problem, *sc->staleness_truth, plan->schedule, plan->published,
                                  plan->kept, plan->pauses);
    auto without = EvaluateOnSurface(sc->problem, *sc->staleness_truth, plan0->schedule, plan0->published,
                                     plan0->kept, plan0->pauses);
    ASSERT_TRUE(with.ok() && without.ok());
    EXPECT_LT(with->cil, 0.95 * without->cil) << ToString(window);
    // The returns are every 750 iterations: from the third change on, the
    // returning domain's model is published before the change is seen.
    EXPECT_NE(plan->summary.message.find("ahead of a predicted return"), std::string::npos) << plan->summary.message;
    ScenarioOptions react = o;
    react.online.anticipate_returns = false;
    auto sc1 = MakeScenario(*log, react);
    ASSERT_TRUE(sc1.ok());
    auto plan1 = PlanStrategy(*sc1, StrategyKind::kOnline);
    ASSERT_TRUE(plan1.ok());
    auto reactive = EvaluateOnSurface(sc->problem, *sc->staleness_truth, plan1->schedule, plan1->published,
                                      plan1->kept, plan1->pauses);
    ASSERT_TRUE(reactive.ok());
    EXPECT_LT(with->cil, 0.97 * reactive->cil) << ToString(window) << ": anticipating returns should pay here";
    auto oracle = PlanStrategy(*sc, StrategyKind::kOracle);
    ASSERT_TRUE(oracle.ok());
    auto bound = EvaluateOnSurface(sc->problem, *sc->staleness_truth, oracle->schedule, oracle->published);
    ASSERT_TRUE(bound.ok());
    EXPECT_LE(bound->objective, with->objective) << ToString(window);
  }
}

// One frozen development run (bench/devsets/SET/NAME.csv.gz and its table)
// as a scenario: 20% warm-up, a tier preset, the wall traffic clock.
// Without the prior over drift unless `drift_prior` says (1.5 in the tests
// written while it was the default, 3 since the thirty-seventh session):
// the tests below were measured at 0 and test the re-publishing rules, which
// the prior's fewer checkpoints would leave unexercised on these runs.
// `path`: the log without its .csv.gz; its table is beside it.
// `requests` > 0: a fixed window of that many requests (`--requests`),
// else served while training runs.
StatusOr<Scenario> WallScenarioAt(const std::string& path, Tier tier,
                                  TrafficClock clock = TrafficClock::kWall, int64_t requests = 0,
                                  double drift_prior = 0) {
  VIPER_ASSIGN_OR_RETURN(auto log, datasets::LogReader::ReadFile(path + ".csv.gz", {}));
  VIPER_ASSIGN_OR_RETURN(auto table, datasets::StalenessReader::ReadFile(path + ".staleness.csv.gz", {}));
  ScenarioOptions o;
  o.remeasure_s = 0;  // re-measuring free: see Options()
  o.warmup_fraction = 0.2;
  o.tier = PresetCost{tier, 600e6, false, Notification::kPush, 1.0};
  o.problem_template.requests.traffic_clock = clock;
  if (requests > 0) {
    o.problem_template.requests.window = WindowKind::kRequestCount;
    o.problem_template.requests.request_count = requests;
  }
  o.staleness = std::move(table);
  o.online.drift_prior = drift_prior;
  return MakeScenario(log, o);
}
StatusOr<Scenario> FrozenWallScenario(const std::string& set, const std::string& name, Tier tier,
                                      TrafficClock clock = TrafficClock::kWall, int64_t requests = 0,
                                      double drift_prior = 0) {
  return WallScenarioAt(std::string(VIPER_TEST_SOURCE_DIR) + "/bench/devsets/" + set + "/" + name, tier,
                        clock, requests, drift_prior);
}
// The same for a shipped log (datasets/logs/NAME.csv.gz).
StatusOr<Scenario> ShippedWallScenario(const std::string& name, Tier tier) {
  return WallScenarioAt(datasets::ShippedLogDirectory() + "/" + name, tier);
}

// A plan's CIL and the oracle's, both judged on the scenario's table and on
// the log's own clock (BoundProblem: the clock the oracle plans on and
// `viper simulate` replays; the planners plan on tau). Until the
// twenty-fourth session both were judged on tau's uniform clock, where the
// oracle's plan is not the optimum: online measured below it on set 13's
// p-recur65 (0.97 x); every threshold below still holds on the log's clock.
struct AgainstOracle {
  double online = 0, oracle = 0;
};
StatusOr<AgainstOracle> JudgeAgainstOracle(const Scenario& sc, const Plan& plan) {
  const Problem judge = BoundProblem(sc);
  VIPER_ASSIGN_OR_RETURN(auto online, EvaluateOnSurface(judge, *sc.staleness_truth, plan.schedule,
                                                        plan.published, plan.kept, plan.pauses));
  VIPER_ASSIGN_OR_RETURN(auto oracle, PlanStrategy(sc, StrategyKind::kOracle));
  VIPER_ASSIGN_OR_RETURN(auto bound,
                         EvaluateOnSurface(judge, *sc.staleness_truth, oracle.schedule, oracle.published));
  return AgainstOracle{online.cil, bound.cil};
}

// Expects `plan`'s CIL on `sc`'s table below `factor` times the oracle's.
void ExpectPlanWithin(const Scenario& sc, const Plan& plan, double factor) {
  auto judged = JudgeAgainstOracle(sc, plan);
  ASSERT_TRUE(judged.ok()) << judged.status().ToString();
  EXPECT_LT(judged->online, factor * judged->oracle)
      << plan.summary.message << "; online " << judged->online << ", oracle " << judged->oracle;
}

// Plans `online` on `sc` and expects its CIL on the table below `factor`
// times the oracle's.
void ExpectOnlineWithin(const Scenario& sc, double factor) {
  auto plan = PlanStrategy(sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ExpectPlanWithin(sc, *plan, factor);
}

// Keeping every regime's end takes a copy of the model at every validation
// point (any may turn out to be the last before a change), and each copy
// pauses the producer (presets: the gpu tier's snapshot, 8 ms for 600 MB):
// the plan lists them and the judge charges them (bench/README.md,
// "Fifty-sixth session": +6.5 points of mean regret on the pool). Without
// regime ends nothing is copied and only the warm-up's or a model
// published before goes out again. The default copies only at the
// measurement before a predicted switch: on the shipped recurring run
// (pfs, wall clock) a few copies, each such a measurement.
TEST(StalenessScenarioTest, KeepingRegimeEndsCopiesAtEveryValidationPointAndIsCharged) {
  auto sc = ShippedWallScenario("recur-sgd-h256", Tier::kPfs);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_NEAR(sc->problem.cost.keep_copy_s, 600e6 / 75.2e9, 1e-4);
  ASSERT_EQ(sc->online.regime_ends, RegimeEnds::kPredicted) << "the default";
  sc->online.record_decisions = true;
  auto predicted = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(predicted.ok()) << predicted.status().ToString();
  // Switches every 750 iterations from 1000 (traffic): once the cycle is
  // known, a few copies per switch (14 in all; every point: 76), each at a
  // measurement whose predicted switch lies within 1.5 gaps of traffic ahead.
  EXPECT_GE(predicted->kept.size(), 3u);
  EXPECT_LE(predicted->kept.size(), 16u);
  for (int64_t c : predicted->kept) {
    const auto d = std::find_if(predicted->decisions.begin(), predicted->decisions.end(),
                                [&](const auto& x) { return x.iteration == c; });
    ASSERT_NE(d, predicted->decisions.end()) << c;
    EXPECT_TRUE(std::isfinite(d->predicted_switch)) << c;
  }
  sc->online.regime_ends = RegimeEnds::kOff;
  sc->online.record_decisions = false;
  auto off = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_TRUE(off->kept.empty());
  for (size_t q = 0; q < off->published.size(); ++q) {
    if (off->published[q] == off->schedule[q]) continue;
    const auto before = off->schedule.begin() + static_cast<std::ptrdiff_t>(q);
    EXPECT_TRUE(off->published[q] == sc->problem.warmup_iterations ||
                std::find(off->schedule.begin(), before, off->published[q]) != before)
        << "re-published " << off->published[q] << ", never published before";
  }
  sc->online.regime_ends = RegimeEnds::kEvery;
  auto on = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  // Every validation point after the warm-up (every 50 iterations, and N), once.
  const int64_t W = sc->problem.warmup_iterations, N = sc->problem.total_iterations;
  ASSERT_FALSE(on->kept.empty());
  EXPECT_EQ(on->kept.front(), (W / 50 + 1) * 50);
  EXPECT_EQ(on->kept.back(), N);
  for (size_t i = 1; i < on->kept.size(); ++i) {
    EXPECT_TRUE(on->kept[i] % 50 == 0 || on->kept[i] == N) << on->kept[i];
    EXPECT_EQ(on->kept[i] - on->kept[i - 1], on->kept[i] == N ? N % 50 : 50) << on->kept[i];
  }
  // The judge sees them (the CIL may move either way: a later landing can
  // fall nearer a switch).
  const Problem judge = BoundProblem(*sc);
  auto charged = EvaluateOnSurface(judge, *sc->staleness_truth, on->schedule, on->published, on->kept);
  auto free = EvaluateOnSurface(judge, *sc->staleness_truth, on->schedule, on->published);
  ASSERT_TRUE(charged.ok() && free.ok());
  EXPECT_NE(charged->cil, free->cil);
}

// A young ramp is not chased on a slow tier under the wall clock. On the
// frozen set 3 rotation run (bench/devsets/set3/g-rotate: the warm-up's
// model re-measures worse from about 1450 to 2100; pfs, a 0.48 s stall and
// a 1.15 s delivery, about 680 iterations of lag together at its 2.4 ms an
// iteration; the default drift prior), online without the hold published
// at 1800, in the ramp: its stall put every later version 200 iterations
// further behind the traffic, and the next publish came at 2700: 1.34 x
// the oracle (1.13 x since the fifty-second session, whose still traffic
// charges no lag after the ramp, AStillTrafficChargesNoLag: the next
// publish comes at 2160). Held while the ramp is younger than the lag, it
// publishes at 2160, after the ramp: 1.05 x (the oracle checkpoints at
// 1980 and 2280). Until the fifty-first session this test ran on set 4's
// f-rotate (pfs, no drift prior), where the lag price read from the fixed
// models' recent rise (ARampIsReadFromTheFixedModelsRise) now holds the
// same publishes without the hold.
TEST(StalenessScenarioTest, AYoungRampIsNotChasedUnderTheWallClock) {
  auto sc = FrozenWallScenario("set3", "g-rotate", Tier::kPfs, TrafficClock::kWall, 0,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ASSERT_TRUE(sc->online.hold_young_ramps);
  auto held = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  Scenario chase = *sc;
  chase.online.hold_young_ramps = false;
  auto chased = PlanStrategy(chase, StrategyKind::kOnline);
  ASSERT_TRUE(chased.ok()) << chased.status().ToString();
  const auto during = [](const Plan& p) {
    return std::count_if(p.schedule.begin(), p.schedule.end(),
                         [](int64_t c) { return c >= 1450 && c < 2000; });
  };
  EXPECT_GE(during(*chased), 1) << chased->summary.message;
  EXPECT_EQ(during(*held), 0) << held->summary.message;
  EXPECT_NE(held->summary.message.find("held on a young ramp"), std::string::npos) << held->summary.message;
  auto oracle = PlanStrategy(*sc, StrategyKind::kOracle);
  ASSERT_TRUE(oracle.ok());
  auto cil = [&](const Plan& p) {
    auto e = EvaluateOnSurface(sc->problem, *sc->staleness_truth, p.schedule, p.published, p.kept, p.pauses);
    EXPECT_TRUE(e.ok());
    return e.ok() ? e->cil : 0.0;
  };
  EXPECT_LT(cil(*held), 1.05 * cil(*oracle)) << held->summary.message;
  EXPECT_GT(cil(*chased), 1.1 * cil(*oracle)) << chased->summary.message;
  // Under the producer clock the traffic waits out a stall: nothing is held.
  Scenario producer = *sc;
  producer.problem.requests.traffic_clock = TrafficClock::kProducer;
  auto p = PlanStrategy(producer, StrategyKind::kOnline);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->summary.message.find("held on a young ramp"), std::string::npos) << p->summary.message;
}

// A ramp is read from the fixed models' rise, and its lag priced over what
// is left of it. On the shipped rotation run (rotate-sgd-h256: 90 degrees
// over iterations 1500-3000; host, wall clock, the default drift prior)
// each version published in the ramp's first gaps was re-measured once
// before the next went out, and the served versions' excess over their age
// read no rate: online published at seven measurements in a row
// (1650-1950), each a stall that left every later version 18 iterations
// further behind the traffic. Once the rate was read, the lag was priced to
// the run's end, and nothing went out for 400 iterations while the served
// model decayed to 3 times the candidate's loss: 1.32 x the oracle. Read
// from the recent rise and priced over the ramp's expected rest, it
// publishes every 150-300 iterations through the ramp: 1.04 x.
TEST(StalenessScenarioTest, ARampIsReadFromTheFixedModelsRise) {
  auto sc = WallScenarioAt(datasets::ShippedLogDirectory() + "/rotate-sgd-h256", Tier::kHost, TrafficClock::kWall, 0,
                           OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto early = std::count_if(plan->schedule.begin(), plan->schedule.end(),
                                   [](int64_t c) { return c >= 1600 && c < 2000; });
  EXPECT_LE(early, 2) << plan->summary.message;
  ExpectPlanWithin(*sc, *plan, 1.15);
}

// Once the traffic stands still after a change, a stall leaves no version
// behind it: no lag price. On set 3's g-rotate (pfs, a request window, the
// default drift prior) online published 2040 in the rotation, and its
// traffic passed the ramp's end soon after. The served versions' excess
// over their age still remembered the ramp, priced every stall at 900-1100
// per second, and held fresh models at 0.48-0.54 beside the served one at
// 0.69 to the end: 1.084 x the oracle. With the fixed models still over
// three gaps the price is 0, 2280 goes out, and online is 1.046 x
// (bench/README.md, "Fifty-second session").
TEST(StalenessScenarioTest, AStillTrafficChargesNoLag) {
  auto sc = FrozenWallScenario("set3", "g-rotate", Tier::kPfs, TrafficClock::kWall, 2998,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.record_decisions = true;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  int64_t unpriced_after_ramp = 0;  // fresh publishes after the ramp with no lag price
  for (const auto& d : plan->decisions) {
    if (d.publish && d.iteration >= 2200 && std::string_view(d.publish_kind) == "fresh" && d.changes > 0 &&
        d.lag_price == 0) {
      ++unpriced_after_ramp;
    }
  }
  EXPECT_GE(unpriced_after_ramp, 1) << plan->summary.message;
  ExpectPlanWithin(*sc, *plan, 1.06);
}

// A re-publish is a switch of the traffic's domain only when the served
// model measures worse than when it was published. On the frozen set 1
// recurring run (bench/devsets/set1/h-recur60: 60 degrees every 500
// iterations from 1200; gpu, wall clock), at 1880 a fresh upright model
// served at the level it was published at and the pre-drift model measured
// 0.07 better: re-published, as it should be, but once counted as a switch it
// broke the spacing of the real ones, a return was predicted 250 iterations
// early with the wrong domain's model, and online was +76% over the oracle.
// Not counted, three returns are published ahead and none fails. (Since
// the twenty-sixth session's measurements where the traffic is, this run,
// the frozen development sets and the in-repository fixtures decide the
// same with the rule or without it (1.17 x here either way): the test
// bounds the run, it no longer isolates the rule; bench/README.md,
// "Twenty-sixth session".)
TEST(StalenessScenarioTest, ASameDomainRePublishIsNoSwitch) {
  auto sc = FrozenWallScenario("set1", "h-recur60", Tier::kGpu);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string& m = plan->summary.message;
  const size_t ahead = m.find(" ahead of a predicted return");
  ASSERT_NE(ahead, std::string::npos) << m;
  const size_t open = m.rfind('(', ahead);
  ASSERT_NE(open, std::string::npos) << m;
  EXPECT_GE(std::stoi(m.substr(open + 1, ahead - open - 1)), 3) << m;
  EXPECT_EQ(m.find("did not come"), std::string::npos) << m;
  auto judged = JudgeAgainstOracle(*sc, *plan);
  ASSERT_TRUE(judged.ok()) << judged.status().ToString();
  EXPECT_LT(judged->online, 1.5 * judged->oracle) << m;
}

// The same rule reads "worse than when it was published" against the served
// model's loss when it was committed. On set 4's recurring run
// (bench/devsets/set4/f-recur30: 30 degrees every 700 iterations from 1500;
// host, wall clock) a fresh model was published at 0.59 in a regime young
// enough to be forecast flat at 2.0 (the median of its transition); at the
// return it measured 1.02, above what it was published at but below that
// forecast. Read against the forecast, the return was not a switch, the
// switches' spacing came one return later, and a reactive re-publish that
// arrived half a stay late was made (12 checkpoints, 3 re-publishes, +76%).
TEST(StalenessScenarioTest, AReturnIsASwitchAgainstTheServedModelsCommittedLoss) {
  auto sc = FrozenWallScenario("set4", "f-recur30", Tier::kHost);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // Since the fifteenth session a reactive re-publish must also be what the
  // re-plan would do with the kept model as the candidate (it pays a stall
  // and its lag like any checkpoint). Before, this run re-published the
  // warm-up's model at 1400 and 950 at 1800, 10 checkpoints, +64%; the
  // re-plan wants neither, 5 checkpoints, +52%. Since the twenty-first
  // session the returns are predicted and published ahead, none fails, and
  // a re-publish too late for the reactive rule is made when it lands well
  // before the next predicted switch: +43.8% -> +27.7% over the oracle
  // (with the drift prior off, as here).
  // (Until the twenty-sixth session no predicted return failed here either.
  // Since the replay measures the planner where the traffic is, not where
  // the planner guesses it is, one does: a switch is seen at the world's
  // position and placed at the planner's guess of it, and the guess is off
  // by the pace's error on the stalled seconds.)
  EXPECT_LE(plan->schedule.size(), 10u) << plan->summary.message;
  auto judged = JudgeAgainstOracle(*sc, *plan);
  ASSERT_TRUE(judged.ok()) << judged.status().ToString();
  // 1.32 x before the twenty-fifth session's traffic position, 1.36 x
  // since, 1.56 x since the twenty-sixth's measurements where the traffic is.
  EXPECT_LT(judged->online, 1.6 * judged->oracle)
      << plan->summary.message << "; online " << judged->online << ", oracle " << judged->oracle;
  // The rules added since make that run pass without this one (1.56 x
  // either way in the twenty-sixth session). Among the frozen recurring
  // and repeated-swap runs it still decides one: set 8's b-swaps450 (host,
  // served while training, the default drift prior; figures at 1.5), where online is
  // 1.52 x the oracle with it and 2.17 x without (1.63 x and 2.53 x before
  // the twenty-sixth session's measurements where the traffic is).
  auto swaps = FrozenWallScenario("set8", "b-swaps450", Tier::kHost);
  ASSERT_TRUE(swaps.ok()) << swaps.status().ToString();
  swaps->online.drift_prior = OnlinePlanner::Options().drift_prior;
  auto swaps_plan = PlanStrategy(*swaps, StrategyKind::kOnline);
  ASSERT_TRUE(swaps_plan.ok()) << swaps_plan.status().ToString();
  auto swaps_judged = JudgeAgainstOracle(*swaps, *swaps_plan);
  ASSERT_TRUE(swaps_judged.ok()) << swaps_judged.status().ToString();
  EXPECT_LT(swaps_judged->online, 1.8 * swaps_judged->oracle)
      << swaps_plan->summary.message << "; online " << swaps_judged->online << ", oracle " << swaps_judged->oracle;
}

// Under the wall clock the traffic runs ahead of the producer, so the
// producer's own training data switches domain after the traffic's did, and
// the change detector sees that switch in the candidate's curve. The served
// model tells the two apart (it stays put across the producer's switch), but
// not when a publish fell between the two measurements: until the
// twenty-first session that was a switch of the traffic. On held-out set 14's
// swaps (bench/devsets/set14/q-swaps800: classes 5 and 9 swapped back and forth
// every 800 iterations from 1100; host) such a false switch refuted a
// correct prediction and stopped predictions for the rest of the run: +97%
// over the oracle (drift prior off, as here). The model re-measured at both
// measurements (the one served before, kept, or the new one, kept before)
// stayed put, so it is no switch: +39%.
TEST(StalenessScenarioTest, APublishBetweenIsNoSwitchWhenAModelReMeasuredAcrossStayedPut) {
  auto sc = FrozenWallScenario("set14", "q-swaps800", Tier::kHost);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string& m = plan->summary.message;
  EXPECT_EQ(m.find("did not come"), std::string::npos) << m;
  auto judged = JudgeAgainstOracle(*sc, *plan);
  ASSERT_TRUE(judged.ok()) << judged.status().ToString();
  EXPECT_LT(judged->online, 1.6 * judged->oracle)
      << m << "; online " << judged->online << ", oracle " << judged->oracle;
}

// The wait guard (OnlinePlanner::Options::wait_guard) publishes the
// candidate once the served model's measured excess over it, summed over
// the gaps since the last publish, outweighs wait_guard stalls at the
// candidate's loss, where the re-plan would wait on. On set 14's swaps
// (bench/devsets/set14/q-swaps800: classes 5 and 9 swapped back and forth
// every 800 iterations from 1100; pfs, served while training runs, the
// default drift prior) the re-plan read the first swap's step as a rate
// of decay (1.7 per second) and, from the swap at 1102 to the next one,
// kept its first checkpoint beyond that next swap (2547-2612) while the
// served model measured 1.65 and the candidate 0.40-0.45; the guard
// publishes at 1672, 15 measurements on: 1.78 x the oracle without it,
// 1.23 x with it (bench/README.md, "Fifty-eighth session"). Since the
// sixtieth session a return falls back to an earlier visit's model of its
// domain and a switch seen part-way is one with its rest, which serve the
// later swaps of both runs: 1.34 x without the guard, 1.19 x with it.
TEST(StalenessScenarioTest, TheWaitGuardPublishesWhatTheRePlanKeepsPuttingOff) {
  auto sc = FrozenWallScenario("set14", "q-swaps800", Tier::kPfs);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.drift_prior = OnlinePlanner::Options().drift_prior;
  ASSERT_GT(sc->online.wait_guard, 0) << "the default";
  sc->online.record_decisions = true;
  auto guarded = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(guarded.ok()) << guarded.status().ToString();
  int fired = 0;
  for (const auto& d : guarded->decisions) {
    if (!d.waited_too_long) continue;
    ++fired;
    EXPECT_TRUE(d.publish) << d.iteration;
    EXPECT_STREQ(d.publish_kind, "fresh") << d.iteration;
    EXPECT_LT(d.candidate_loss, d.served_loss - d.gate_margin) << d.iteration;
  }
  EXPECT_GE(fired, 1) << guarded->summary.message;
  EXPECT_NE(guarded->summary.message.find("published after waiting too long"), std::string::npos)
      << guarded->summary.message;
  auto with = JudgeAgainstOracle(*sc, *guarded);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  sc->online.wait_guard = 0;
  auto unguarded = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(unguarded.ok()) << unguarded.status().ToString();
  for (const auto& d : unguarded->decisions) EXPECT_FALSE(d.waited_too_long) << d.iteration;
  auto without = JudgeAgainstOracle(*sc, *unguarded);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_LT(with->online, 1.25 * with->oracle) << guarded->summary.message;
  EXPECT_GT(without->online, 1.3 * without->oracle) << unguarded->summary.message;
}

// The measurement right after a switch seen part-way sees the rest of that
// switch. On set 14's swaps (bench/devsets/set14/q-swaps800: swapped every
// 800 iterations from 1100, so five swaps in the traffic; pfs, served while
// training runs, the default drift prior) the swap at 2700 was seen at
// producer 2318 part-way, and the warm-up model (938, unswapped) went out
// there ahead of the swap back (the visit before had left no model of its
// own kept). Re-measured as served at 2356, a stall's traffic on, it jumped
// from its blend at 2318; that was a sixth switch, every later regime was
// counted one off and the returns predicted to the wrong labelling: 1.51 x
// the oracle. One switch: 1.19 x (bench/README.md, "Sixtieth session").
TEST(StalenessScenarioTest, ASwitchSeenPartWayAndItsRestAcrossAStallAreOne) {
  auto sc = FrozenWallScenario("set14", "q-swaps800", Tier::kPfs);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.drift_prior = OnlinePlanner::Options().drift_prior;
  sc->online.record_decisions = true;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  int64_t at_seen = -1, after = -1, most = 0;
  for (const auto& d : plan->decisions) {
    if (d.iteration == 2318) {
      at_seen = d.switches;
      EXPECT_STREQ(d.publish_kind, "ahead") << "the warm-up model published part-way into the swap";
    }
    if (d.iteration == 2356) after = d.switches;
    most = std::max(most, d.switches);
  }
  EXPECT_EQ(at_seen, 3) << plan->summary.message;
  EXPECT_EQ(after, at_seen) << "the swap's rest is no switch of its own";
  EXPECT_EQ(most, 5) << "five swaps in the traffic";
  ExpectPlanWithin(*sc, *plan, 1.25);
}

// At the first return no cycle is known, so nothing anticipates it. On
// held-out set 13's recurring run retrained in the sixty-first session
// (bench/devsets/set13/p-recur65b: 65 degrees every 600 iterations; host,
// a request window, the default drift prior) the switch back to the first
// domain shows at 1392: the served model measures 4.95, the producer's own
// 4.09 (it still trains on the ending domain, through the traffic's lead)
// and a kept model 0.88. The kept model's re-publish was judged late (its
// gap and lag 0.38 of a stay against the late rule's 0.35), so the fresh
// model went out alone, served the returning domain at 4.97 and held the
// kept model back a measurement: 2.06 x the oracle. The kept model goes out
// in the fresh one's place (the same stall and lag): 1.71 x.
TEST(StalenessScenarioTest, AtTheFirstReturnAWinningKeptModelGoesOutInsteadOfTheFreshOne) {
  auto sc = FrozenWallScenario("set13", "p-recur65b", Tier::kHost, TrafficClock::kWall, 2998,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.record_decisions = true;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  bool seen = false;
  for (const auto& d : plan->decisions) {
    if (d.switches != 2 || seen) continue;
    seen = true;  // the first return's first measurement
    EXPECT_EQ(d.iteration, 1392);
    EXPECT_EQ(d.cycle, 0) << "no cycle is known at the first return";
    EXPECT_TRUE(d.publish) << "a publish goes out at the first return";
    EXPECT_STREQ(d.publish_kind, "kept")
        << "published " << d.published_model << " (candidate " << d.candidate_loss << ", best kept "
        << d.best_kept_model << " at " << d.best_kept_loss << ")";
    EXPECT_EQ(d.published_model, d.best_kept_model);
  }
  EXPECT_TRUE(seen) << plan->summary.message;
  ExpectPlanWithin(*sc, *plan, 1.85);
}

// When an anticipation has published the returning domain's model ahead of a
// switch, that model serves the last stretch of the ending domain, where it
// measures badly. The ending domain's best model was read against it: the
// producer's own model there, of whichever domain it was trained on, passed
// for the ending domain's best and went out ahead of that domain's next
// return. On set 1's recurring run (bench/devsets/set1/h-recur60: 60 degrees
// every 600 iterations; host) that was +65% over the oracle; read against the
// model the anticipation replaced (re-measured there as kept), +50%.
TEST(StalenessScenarioTest, TheEndingDomainsBestIsReadAgainstTheModelServingIt) {
  auto sc = FrozenWallScenario("set1", "h-recur60", Tier::kHost);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string& m = plan->summary.message;
  auto judged = JudgeAgainstOracle(*sc, *plan);
  ASSERT_TRUE(judged.ok()) << judged.status().ToString();
  // 2.01 x since the twenty-sixth session's measurements where the traffic
  // is (1.5 x before): its switches are seen at the world's position and
  // placed at the planner's guess of it (bench/README.md, "Twenty-sixth
  // session").
  EXPECT_LT(judged->online, 2.05 * judged->oracle)
      << m << "; online " << judged->online << ", oracle " << judged->oracle;
  // Since the twenty-fifth session's traffic position (all stalls at the
  // latest pace) that run passes without the rule too (2.01 x either way in
  // the twenty-sixth); it decides set 14's q-swaps800 on host with a window
  // of 3747 requests: 1.35 x the oracle with it, 1.54 x without (the same
  // since the twenty-sixth session).
  auto swaps = FrozenWallScenario("set14", "q-swaps800", Tier::kHost, TrafficClock::kWall, 3747);
  ASSERT_TRUE(swaps.ok()) << swaps.status().ToString();
  ExpectOnlineWithin(*swaps, 1.45);
}

// A reactive re-publish that would land more than 0.35 of the switches'
// spacing after the switch it reacts to is skipped (the kept model would
// serve the wrong domain after the next switch). Once the next switch is
// predicted an anticipation serves it, and the re-publish is made when it
// lands at least 0.2 of the spacing before that switch. On set 4's recurring
// run (bench/devsets/set4/f-recur30, host, the default drift prior; the
// figures at 1.5, the default until the thirty-seventh session) the
// first return's kept model then serves the last part of that stay: +28.8%
// -> +15.7% over the oracle.
TEST(StalenessScenarioTest, ALateRePublishIsMadeWhenItLandsWellBeforeThePredictedSwitch) {
  auto sc = FrozenWallScenario("set4", "f-recur30", Tier::kHost);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.drift_prior = OnlinePlanner::Options().drift_prior;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string& m = plan->summary.message;
  EXPECT_EQ(m.find("did not come"), std::string::npos) << m;
  auto judged = JudgeAgainstOracle(*sc, *plan);
  ASSERT_TRUE(judged.ok()) << judged.status().ToString();
  // (1.22 x since the twenty-fifth session's traffic position; 1.28 x
  // without the rule. Since the twenty-sixth session's measurements where
  // the traffic is, 1.29 x, and 1.26 x without: the rule no longer decides
  // this run.)
  EXPECT_LT(judged->online, 1.32 * judged->oracle)
      << m << "; online " << judged->online << ", oracle " << judged->oracle;
  // It decides set 3's recurring run (bench/devsets/set3/g-recur45: 45
  // degrees, back every 900 iterations) on pfs, with a window of N - W =
  // 2998 requests and the default drift prior (at 1.5): 1.44 x the oracle with it,
  // 1.75 x without (bench/README.md, "Twenty-sixth session": without the
  // rule twelve cases of the pool got worse, two better).
  auto recur = FrozenWallScenario("set3", "g-recur45", Tier::kPfs, TrafficClock::kWall, 2998);
  ASSERT_TRUE(recur.ok()) << recur.status().ToString();
  recur->online.drift_prior = OnlinePlanner::Options().drift_prior;
  ExpectOnlineWithin(*recur, 1.55);
}

// A return is learned from one named model too: the one that served the
// regime two back, once it measures better than the served model and the
// candidate by the gate's margin. Before, only the best of the K kept
// models could show a return, with a margin raised by the best-of-K bias,
// and a slow tier learned the cycle late: on set 1's recurring run
// (bench/devsets/set1/h-recur60, host, producer clock) the first return
// (at 1650) is now seen at 1720, where the first domain's model measures 0.39
// against the served model's 4.17 and the candidate's 0.53, and the later
// returns are published ahead: +51.0% -> +42.0% over the oracle.
TEST(StalenessScenarioTest, TheModelOfTwoRegimesBackShowsAReturn) {
  auto sc = FrozenWallScenario("set1", "h-recur60", Tier::kHost, TrafficClock::kProducer);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string& m = plan->summary.message;
  EXPECT_EQ(m.find("did not come"), std::string::npos) << m;
  auto judged = JudgeAgainstOracle(*sc, *plan);
  ASSERT_TRUE(judged.ok()) << judged.status().ToString();
  EXPECT_LT(judged->online, 1.46 * judged->oracle)
      << m << "; online " << judged->online << ", oracle " << judged->oracle;
}

// A jump of the served model between two re-measurements is a switch when
// it moves by more than the change threshold in noise sd of a difference.
// The noise is the regime's, and a regime that held a transition measures a
// large one: on held-out set 8's swaps (bench/devsets/set8/b-swaps450:
// classes 1 and 7 swapped back and forth every 450 iterations from 1500;
// host, wall clock, a window of N - W = 3748 requests) switches were missed
// where a model of the other domain tripled, and predictions went wrong:
// +110% over the oracle (drift prior off, as here). A move of more than half
// the model's level is a jump too: +74%. Since the twenty-seventh session's
// traffic positions read off the producer's clock, 1.57 x with the rule and
// 1.73 x without.
TEST(StalenessScenarioTest, AServedModelMovingByHalfItsLevelJumped) {
  auto sc = FrozenWallScenario("set8", "b-swaps450", Tier::kHost);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->problem.requests.window = WindowKind::kRequestCount;
  sc->problem.requests.request_count = sc->problem.total_iterations - sc->problem.warmup_iterations;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string& m = plan->summary.message;
  auto judged = JudgeAgainstOracle(*sc, *plan);
  ASSERT_TRUE(judged.ok()) << judged.status().ToString();
  EXPECT_LT(judged->online, 1.65 * judged->oracle)
      << m << "; online " << judged->online << ", oracle " << judged->oracle;
  // In the twenty-sixth session that run was 1.69 x with the rule and 1.71 x
  // without, and the rule decided set 1's recurring run (h-recur60) on pfs,
  // served while training, default drift prior: 1.85 x with it, 2.08 x
  // without. With the producer's clock that run is 2.23 x with it and 2.08
  // x without (bench/README.md, "Twenty-seventh session"): it left this test.
}

// A switch seen part-way is placed where its blend crosses. Between two of
// a table's rows the traffic is a blend (the judge interpolates), so under
// the wall clock the first measurement after a switch often shows only part
// of the served model's move; placed at its gap's middle, each such switch
// was up to half a gap early, and a spacing from two of them twice that. On
// the shipped recurring run (recur-sgd-h256: 30 degrees, back every 750
// iterations; wall clock, the drift prior off) the predicted returns then
// fell early: +52.8% over the oracle on gpu, +29.3% on host. Placed by the
// fraction of the move seen, +35.0% and +15.2% (gpu +21.5% with the rule of
// the next test). Since the twenty-sixth session's measurements where the
// traffic is (a switch seen at the world's position, placed at the
// planner's guess of it): +21.3% and +38.5% with the rule, +52.3% and
// +60.0% without. Until the fiftieth session the place was kept within the
// gap the switch was seen in, though one seen less than halfway crosses
// past it: +21.2% and +22.7% then, +12.1% and +15.2% at the crossing. With
// the next test's rule as well: +7.9% and +13.7%, and +17.2% and
// +15.5% with the old place (so only gpu tells the two places apart here).
TEST(StalenessScenarioTest, ASwitchSeenPartWayIsPlacedWhereItsBlendCrosses) {
  for (const auto& [tier, bound] : {std::pair{Tier::kGpu, 1.12}, std::pair{Tier::kHost, 1.19}}) {
    SCOPED_TRACE(ToString(tier));
    auto sc = ShippedWallScenario("recur-sgd-h256", tier);
    ASSERT_TRUE(sc.ok()) << sc.status().ToString();
    ExpectOnlineWithin(*sc, bound);
  }
}

// A domain coming back is served by a model that falls there. Part-way
// through a switch the ending domain's models still measure best, and the
// best kept model went out though it was of the ending domain; the
// returning domain's went out a measurement later. The kept models that
// fall while the served one rises are the returning domain's, and the
// lowest of them now goes out at once. On the shipped recurring run
// (recur-sgd-h256; gpu, wall clock, the drift prior off): 1.121 x the
// oracle -> 1.079 x (host 1.152 -> 1.137; bench/README.md, "Fiftieth
// session").
TEST(StalenessScenarioTest, ADomainComingBackIsServedByAModelThatFallsThere) {
  auto sc = ShippedWallScenario("recur-sgd-h256", Tier::kGpu);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 1.10);
}

// A switch seen right after a fresh publish is placed part-way too. The
// served model there was the producer's own at the measurement before: it
// was measured there, not re-measured, and the part-way placement, which
// read only re-measurements, kept such a switch at its gap's middle. On the
// shipped recurring run (recur-sgd-h256, gpu, wall clock, the drift prior
// off; back every 750 iterations from 1000, so a table's blend crosses 25
// before each) the switch at 4000 came right after the fresh 3900: the next
// return was predicted at 4664, not 4725, and the returning domain's model
// (3900) went out ahead at 4650, 75 iterations early: 1.080 x the oracle.
// Placed part-way: the return predicted at 4718, nothing published early,
// 1.045 x (bench/README.md, "Fifty-third session").
TEST(StalenessScenarioTest, ASwitchSeenRightAfterAFreshPublishIsPlacedPartWay) {
  auto sc = ShippedWallScenario("recur-sgd-h256", Tier::kGpu);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.record_decisions = true;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_FALSE(plan->decisions.empty());
  const double last_predicted = plan->decisions.back().predicted_switch;
  EXPECT_NEAR(last_predicted, 4725.0, 25.0) << plan->summary.message;
  ExpectPlanWithin(*sc, *plan, 1.06);
}

// A switch seen nearly whole across a stall is placed part-way. A stall
// between two measurements widens the traffic's gap past the table's row
// spacing; a served model that had moved 98% of its way at the first
// measurement after the switch counted as seen whole, and its switch went
// to that wide gap's middle, up to 40 iterations early. Placed part-way
// wherever the fixed models' noise tells f from 0 and 1 (on a table's
// fixed sample, any f strictly between). On set 17's repeated swaps
// (bench/devsets/set17/t-swaps500: labels swapped every 500 iterations
// from 1300; host, wall clock, the default drift prior, served while
// training) four of seven switches were placed 20-46 iterations off:
// 1.449 x the oracle; placed part-way, 1.353 x (bench/README.md,
// "Fifty-third session"). 1.394 x before the sixtieth session, 1.455 x
// since: the run learns a cycle of 4 for the two labellings, and read from
// it the model that served a visit of the returning labelling (1558) is
// another domain's, so no return's model goes out ahead at 3813
// (ReturnPredictor::PredictedReturn's fallbacks; bench/README.md,
// "Sixtieth session").
TEST(StalenessScenarioTest, ASwitchSeenNearlyWholeAcrossAStallIsPlacedPartWay) {
  auto sc = FrozenWallScenario("set17", "t-swaps500", Tier::kHost, TrafficClock::kWall, 0,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 1.47);
}

// A swap back is a switch when only a kept model shows it. The model serving
// at set 17's first swap back (bench/devsets/set17/t-swaps500; pfs, wall
// clock, a fixed window of 3748 requests, the default drift prior) was
// trained across the first swap, on both labellings, and measured about
// the same on both; the change detector saw the swap back in the producer's
// own loss, and with the served model staying across it that was read as
// the producer's own data moving. The pre-swap kept model fell from 2.9 to
// 0.48 there. Unrecorded, the swaps were counted one short and the next
// return predicted a whole period on: 1.878 x the oracle. Recorded (a kept
// model losing more than half its loss, as without a detected change):
// 1.391 x (bench/README.md, "Fifty-third session"). The pre-swap model is a
// regime's end (kept by a copy at every validation point); since the
// judge charges those copies (fifty-sixth session), 1.600 x.
// (Without regime ends, the default now: 1.683 x.)
TEST(StalenessScenarioTest, ASwapBackIsASwitchWhenOnlyAKeptModelFalls) {
  auto sc = FrozenWallScenario("set17", "t-swaps500", Tier::kPfs, TrafficClock::kWall, 3748,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.regime_ends = RegimeEnds::kEvery;
  sc->online.record_decisions = true;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // Swaps at 1300 and back at 1800 (traffic iterations): both recorded by
  // the time the producer reaches 1800 (the traffic is ahead of it).
  int64_t switches_by_1800 = 0;
  for (const auto& d : plan->decisions) {
    if (d.iteration <= 1800) switches_by_1800 = std::max(switches_by_1800, d.switches);
  }
  EXPECT_GE(switches_by_1800, 2) << plan->summary.message;
  ExpectPlanWithin(*sc, *plan, 1.65);
}

// A predicted return seen before its model went out ahead is published at
// once. On gpu the delivery lag (14 iterations on the shipped recurring
// run) is shorter than a measurement gap (50): the measurement whose
// delivery would land at the predicted switch was mostly past the switch's
// start, saw it part-way and recorded it, so the anticipation never went
// out, and the reactive path waited for a kept model to win on the blend
// (the ending domain's models measure best there) or published the
// producer's own, of the ending domain: +35.0% over the oracle (wall clock,
// drift prior off). Publishing the named model at the switch: +21.5%.
TEST(StalenessScenarioTest, APredictedReturnSeenBeforeItWentOutIsPublishedAtOnce) {
  auto sc = ShippedWallScenario("recur-sgd-h256", Tier::kGpu);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 1.28);
}

// A re-publish of the regime just ended's model shows no cycle. On frozen
// set 3's recurring run (bench/devsets/set3/g-recur45: 45 degrees, back
// every 900 iterations; gpu, wall clock) the traffic part-way back to the
// first domain at the second switch made the second domain's first model
// (1020) win a re-publish (0.93 against the served model's 1.22), which
// took the regime's one say on the cycle; the first domain's model (the
// warm-up's, 0.43), re-published a measurement later, was not heard, and
// the cycle was learned a whole stay later: +14.7% over the oracle.
// Heard: +12.2%. Since the twenty-fifth session's traffic position (all
// stalls at the latest pace) that run is 1.20 x the oracle with the rule or
// without it, and stays here as a bound; the rule now decides set 4's
// f-recur30 on gpu: 1.13 x with it, 1.22 x without (with the producer's
// clock since the twenty-seventh session, 1.170 x with it, 1.254 x
// without; g-recur45 1.197 x either way).
TEST(StalenessScenarioTest, ARePublishOfTheRegimeJustEndedShowsNoCycle) {
  auto sc = FrozenWallScenario("set3", "g-recur45", Tier::kGpu);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 1.23);
  auto f = FrozenWallScenario("set4", "f-recur30", Tier::kGpu);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ExpectOnlineWithin(*f, 1.19);
}

// A run that collapses (collapse-sgd-h256: the learning rate jumps 60x at
// 2500 and SGD diverges): no version from the collapse on is ever better
// than one from before it, so the closed loop must never publish one, on
// any tier, in either window, judged on the table or on the diagonal. The
// oracle, which knows, never does either; epoch does (the test can fail).
TEST(StalenessScenarioTest, OnlineNeverPublishesACollapsedModel) {
  const std::string dir = datasets::ShippedLogDirectory();
  auto log = datasets::LogReader::ReadFile(dir + "/collapse-sgd-h256.csv.gz", {});
  auto table = datasets::StalenessReader::ReadFile(dir + "/collapse-sgd-h256.staleness.csv.gz", {});
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  // The collapse: the first validation point at more than twice the best
  // validation loss before it.
  int64_t collapse = 0;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& r : log->records) {
    if (!r.val_loss) continue;
    if (*r.val_loss > 2 * best) {
      collapse = r.iteration;
      break;
    }
    best = std::min(best, *r.val_loss);
  }
  ASSERT_GT(collapse, 2000) << "the shipped run should collapse late (at 2500)";
  int epoch_collapsed = 0;
  for (Tier tier : {Tier::kGpu, Tier::kHost, Tier::kPfs}) {
    for (WindowKind window : {WindowKind::kWhileTraining, WindowKind::kRequestCount}) {
      for (bool with_table : {true, false}) {
        ScenarioOptions o;
        o.remeasure_s = 0;  // re-measuring free: see Options()
        o.warmup_fraction = 0.2;
        o.tier = PresetCost{tier, 600e6, false, Notification::kPush, 1.0};
        o.problem_template.requests.window = window;
        if (window == WindowKind::kRequestCount) o.problem_template.requests.request_count = 3747;
        if (with_table) o.staleness = *table;
        auto sc = MakeScenario(*log, o);
        ASSERT_TRUE(sc.ok()) << sc.status().ToString();
        const std::string what = std::string(ToString(tier)) + "/" + ToString(window) + (with_table ? "/table" : "/diagonal");
        for (StrategyKind k : {StrategyKind::kOnline, StrategyKind::kOracle}) {
          auto plan = PlanStrategy(*sc, k);
          ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().ToString();
          // The model each checkpoint publishes (a re-publish after the
          // collapse of a kept model from before it is allowed).
          for (int64_t c : Models(*plan)) {
            EXPECT_LT(c, collapse) << what << ": " << ToString(k) << " published the model of iteration " << c
                                   << ", after the collapse at " << collapse << "; " << plan->summary.message;
          }
        }
        auto epoch = PlanStrategy(*sc, StrategyKind::kEpoch);
        ASSERT_TRUE(epoch.ok());
        if (!epoch->schedule.empty() && epoch->schedule.back() >= collapse) ++epoch_collapsed;
      }
    }
  }
  EXPECT_GT(epoch_collapsed, 0) << "checkpointing every epoch should publish a collapsed version";
}

// A run that diverges to NaN (diverge-sgd-h256: the learning rate x1e12 at
// 2500; its losses pass 1e21 and turn NaN, and it trains on as a loop without
// a NaN check would), read with --non-finite diverged: neither online nor the
// oracle publishes a version from 2500 on, in either window, with the table
// or on the diagonal; epoch does (the test can fail).
TEST(StalenessScenarioTest, OnlineNeverPublishesADivergedModel) {
  const std::string dir = datasets::ShippedLogDirectory();
  datasets::LogReader::Options lo;
  lo.non_finite = datasets::NonFinitePolicy::kDiverged;
  datasets::StalenessReader::Options to;
  to.non_finite = datasets::NonFinitePolicy::kDiverged;
  auto log = datasets::LogReader::ReadFile(dir + "/diverge-sgd-h256.csv.gz", lo);
  auto table = datasets::StalenessReader::ReadFile(dir + "/diverge-sgd-h256.staleness.csv.gz", to);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  const LogSummary summary = Summarize(*log);
  ASSERT_TRUE(summary.first_diverged_iteration.has_value());
  ASSERT_GT(*summary.first_diverged_iteration, 2500);
  ASSERT_LT(*summary.first_diverged_iteration, 2600);
  // The same log read by default refuses the NaN, naming the line.
  auto refused = datasets::LogReader::ReadFile(dir + "/diverge-sgd-h256.csv.gz", {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--non-finite diverged"), std::string::npos);
  int epoch_diverged = 0;
  for (WindowKind window : {WindowKind::kWhileTraining, WindowKind::kRequestCount}) {
    for (bool with_table : {true, false}) {
      ScenarioOptions o;
      o.remeasure_s = 0;  // re-measuring free: see Options()
      o.warmup_fraction = 0.2;
      o.tier = PresetCost{Tier::kHost, 600e6, false, Notification::kPush, 1.0};
      o.problem_template.requests.window = window;
      if (window == WindowKind::kRequestCount) o.problem_template.requests.request_count = 3747;
      if (with_table) o.staleness = *table;
      auto sc = MakeScenario(*log, o);
      ASSERT_TRUE(sc.ok()) << sc.status().ToString();
      const std::string what = std::string(ToString(window)) + (with_table ? "/table" : "/diagonal");
      for (StrategyKind k : {StrategyKind::kOnline, StrategyKind::kOracle}) {
        auto plan = PlanStrategy(*sc, k);
        ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().ToString();
        for (int64_t c : Models(*plan)) {
          EXPECT_LT(c, 2500) << what << ": " << ToString(k) << " published the model of iteration " << c << "; "
                             << plan->summary.message;
        }
        if (k == StrategyKind::kOnline) {
          EXPECT_NE(plan->summary.message.find("diverged measurements"), std::string::npos) << plan->summary.message;
        }
      }
      auto epoch = PlanStrategy(*sc, StrategyKind::kEpoch);
      ASSERT_TRUE(epoch.ok());
      if (!epoch->schedule.empty() && epoch->schedule.back() > *summary.first_diverged_iteration) ++epoch_diverged;
    }
  }
  EXPECT_GT(epoch_diverged, 0) << "checkpointing every epoch should publish a diverged version";
  // A warm-up that reaches the divergence leaves nothing to plan from.
  ScenarioOptions late;
  late.warmup_iterations = 3000;
  auto sc = MakeScenario(*log, late);
  ASSERT_FALSE(sc.ok());
  EXPECT_NE(sc.status().message().find("diverged during the warm-up"), std::string::npos) << sc.status().message();
}

// A re-publish that lands late leaves the served model already the one the
// next predicted return names. On held-out set 13's recurring run
// (bench/devsets/set13/p-recur65: 65 degrees and back every 650 iterations;
// pfs, a delivery lag near a stay under the wall clock), the producer's own
// model of the ending domain went out as the return came and replaced the
// returning domain's model there: 2.06 x the oracle's CIL. Held as the
// anticipation instead (nothing else goes out until its switch): 1.43 x.
// With regime ends kept and their copies charged (fifty-sixth session):
// 1.57 x; without them (the default now) 2.06 x.
TEST(StalenessScenarioTest, AServedModelThatIsTheReturnsHoldsThroughIt) {
  auto sc = FrozenWallScenario("set13", "p-recur65", Tier::kPfs);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.regime_ends = RegimeEnds::kEvery;
  ExpectOnlineWithin(*sc, 1.6);
}

// The first reactive re-publish comes with one switch seen and no spacing
// yet, so it was never judged late (the 0.35 rule needs a spacing). The
// first regime's length stands in for a stay. On held-out set 14's repeated
// swaps (bench/devsets/set14/q-swaps800: classes 5 and 9 swapped back and
// forth every 800 iterations; pfs, a fixed window of 2998 requests) the
// first re-publish would land late. Skipped: 1.43 -> 1.35 x the oracle.
TEST(StalenessScenarioTest, TheFirstRegimeStandsInForAStayBeforeASpacingIsKnown) {
  auto sc = FrozenWallScenario("set14", "q-swaps800", Tier::kPfs, TrafficClock::kWall, 2998);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 1.39);
}

// The ending domain's best is read before a switch seen part-way. On set 1's
// h-recur60 pfs/train (the drift prior at 1.5) the measurement before the
// switch seen at 1720 was already in the next domain: the model serving the
// ending one had jumped there (0.40 -> 3.06) and the producer's own, trained
// on the next domain, measured less badly (1.75) and passed for the ending
// domain's best; published ahead of that domain's return, it served the
// wrong domain for 440 traffic iterations. Read at the measurement before,
// the return publishes the ending domain's model: 1.84 x the oracle -> 1.50 x.
TEST(StalenessScenarioTest, TheEndingDomainsBestIsReadBeforeASwitchSeenPartWay) {
  auto sc = FrozenWallScenario("set1", "h-recur60", Tier::kPfs, TrafficClock::kWall, 0, /*drift_prior=*/1.5);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 1.65);
}

// Once the traffic is at the run's end no switch can follow, and a kept
// model's re-publish is never late. On set 8's b-swaps700 (bench/devsets/set8,
// held-out set 8 as drawn on 2026-12-03) host/train the traffic reached N at
// producer iteration 3375; a fresh model measuring 1.69 there served 630
// iterations while a kept one measured 0.37, its re-publish skipped as late
// (the delivery lag over 0.35 of the swaps' spacing): 2.60 x the oracle ->
// 2.29 x.
TEST(StalenessScenarioTest, ARePublishIsNeverLateOnceTheTrafficIsAtTheRunsEnd) {
  auto sc =
      FrozenWallScenario("set8", "b-swaps700", Tier::kHost, TrafficClock::kWall, 0, /*drift_prior=*/1.5);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 2.45);
}

// A kept model is not re-published, under the wall clock, while the
// producer has not yet trained through the switch the traffic has shown and
// the stall costs more than the kept model gains until the producer's
// recovered models can replace it. On set 3's g-swap (one label swap at
// 1760; pfs, a fixed window of 2998 requests, the drift prior at 1.5) the
// traffic led the producer by 360 iterations: online re-published the
// warm-up's model at 2040 (2.99 against the served one's 3.55), and its
// stall put the fresh model of 2160 (0.39) 120 traffic iterations later:
// 1.55 x the oracle -> 1.46 x. Under the producer clock the rule cannot
// apply (no switch the traffic shows lies ahead of the producer).
TEST(StalenessScenarioTest, AKeptModelIsNotRePublishedWhenItsStallOutweighsItsGain) {
  auto sc = FrozenWallScenario("set3", "g-swap", Tier::kPfs, TrafficClock::kWall, 2998, /*drift_prior=*/1.5);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (size_t q = 0; q < plan->schedule.size(); ++q) {
    if (plan->schedule[q] < 1760) continue;
    EXPECT_EQ(plan->published.empty() ? plan->schedule[q] : plan->published[q], plan->schedule[q])
        << "re-published " << plan->published[q] << " at " << plan->schedule[q] << ": " << plan->summary.message;
  }
  ExpectOnlineWithin(*sc, 1.5);
  EXPECT_NE(plan->summary.message.find("held until the producer trains through a switch"), std::string::npos)
      << plan->summary.message;
  auto producer = FrozenWallScenario("set3", "g-swap", Tier::kPfs, TrafficClock::kProducer, 2998, 1.5);
  ASSERT_TRUE(producer.ok()) << producer.status().ToString();
  auto waits = PlanStrategy(*producer, StrategyKind::kOnline);
  ASSERT_TRUE(waits.ok()) << waits.status().ToString();
  EXPECT_EQ(waits->summary.message.find("held until"), std::string::npos) << waits->summary.message;
}

// A served model that jumps at its first re-measurement shows a switch.
// Until the forty-sixth session this was pinned on set 1's h-recur60 (60
// degrees, the domains taking turns every 500 iterations from 1200; pfs, a
// fixed window of 2998 requests, the default drift prior), where a kept
// model re-published at producer 1560 jumped at the next measurement as the
// traffic switched again: recorded, 2.03 x the oracle (unrecorded, 2.16 x,
// and the second domain's model went out ahead of the first domain's
// return). That re-publish is no longer made (below), and no frozen
// development run shows a re-published kept model jumping any more: the
// kept model's branch of the rule (its re-measurement as kept at the
// measurement before) has no scenario test now. The producer's own model
// published at the measurement before (compared with its own measurement
// there) still has: on set 4's f-recur30 (30 degrees, back every 600
// iterations; pfs, served while training runs) 1.34 x the oracle -> 1.18 x.
TEST(StalenessScenarioTest, ARePublishedModelThatJumpsShowsASwitch) {
  auto own = FrozenWallScenario("set4", "f-recur30", Tier::kPfs, TrafficClock::kWall, 0,
                                OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  ExpectOnlineWithin(*own, 1.25);
}

// A late re-publish is made before a predicted switch only where it lands
// well before it even if the switch comes early by what the estimated
// positions it was predicted from may be off (kLeadShare of their leads).
// On set 1's h-recur60 above, the first domain's kept model 1160,
// re-published at 1480 (traffic 1951) to land well before the switch
// predicted at 2508, reached the traffic at about 2210, after the switch at
// 2180, and served the second domain until the model published ahead of
// the next return replaced it at about 2450 (800 of the run's excess of
// 3817): 2.07 x the oracle, the pool's worst case. Held: no kept model goes
// out between 1400 and 1600, nor a second-domain model ahead of the first
// domain's return, and online is 1.73 x the oracle (bench/README.md,
// "Forty-sixth session").
TEST(StalenessScenarioTest, ALateRePublishAllowsForWhereTheSwitchesWereEstimated) {
  auto sc = FrozenWallScenario("set1", "h-recur60", Tier::kPfs, TrafficClock::kWall, 2998,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.record_decisions = true;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (const auto& d : plan->decisions) {
    if (!d.publish) continue;
    EXPECT_FALSE(std::string_view(d.publish_kind) == "kept" && d.iteration >= 1400 && d.iteration <= 1600)
        << "re-published " << d.published_model << " at " << d.iteration;
    if (std::string_view(d.publish_kind) == "ahead") {
      EXPECT_FALSE(d.published_model >= 1200 && d.published_model < 1700 && d.traffic > 2200 && d.traffic < 2700)
          << "published " << d.published_model << " (second domain) ahead at " << d.iteration;
    }
  }
  ExpectOnlineWithin(*sc, 1.8);
}

// A kept model against the served one is judged by the fixed models' own
// noise, not the candidate's. On set 3's g-recur45 (45 degrees, back every
// 750 iterations; gpu, while training) the producer's re-learning after
// each switch put the candidate's noise far above what a kept model's
// re-measurement varies by, and a returning domain's kept model waited
// for its margin: 1.20 x the oracle -> 1.12 x (bench/README.md,
// "Forty-sixth session").
TEST(StalenessScenarioTest, AKeptModelOfAReturningDomainIsJudgedByTheFixedModelsNoise) {
  auto sc = FrozenWallScenario("set3", "g-recur45", Tier::kGpu, TrafficClock::kWall, 0,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 1.15);
}

// But not a kept model of the served one's domain (the same regime, or a
// multiple of the cycle back): nothing came back. On set 13's p-recur65
// (gpu, while training) the smaller margin let the warm-up's model 864 in
// over the served 1968 of the same domain (0.397 against 0.421), and the
// cycle's next anticipation then published 864, which the later stays of
// that domain measure worse: 1.37 x the oracle; with the candidate's margin
// for it, 1.22 x.
TEST(StalenessScenarioTest, AnOlderModelOfTheServedDomainNeedsTheCandidatesMargin) {
  auto sc = FrozenWallScenario("set13", "p-recur65", Tier::kGpu, TrafficClock::kWall, 0,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 1.3);
}

// The same hold for the producer's own model. On set 1's h-recur60 (two
// domains taking turns; pfs, a fixed window of 2998 requests, the drift
// prior at 1.5) the first switch was seen at producer iteration 1120 with
// the traffic 157 iterations ahead (the stall of a checkpoint at 1080), and
// online published its own model there (3.67 against the served one's
// 4.10, where the level before the switch was 0.43). Its stall put the
// recovered model of 1240 (0.70) on the traffic at 1712 instead of 1555:
// 1.85 x the oracle -> 1.55 x.
TEST(StalenessScenarioTest, AFreshModelIsHeldWhenItsStallOutweighsItsGain) {
  auto sc = FrozenWallScenario("set1", "h-recur60", Tier::kPfs, TrafficClock::kWall, 2998, /*drift_prior=*/1.5);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  // The rule at the switch of 1120, as it was found: with calm decisions
  // (OnlinePlanner::Options::calm_decisions, the default since the
  // sixty-fourth session) the points before decide without copies set
  // aside, the producer reaches 1120 three iterations further on, the
  // switch's stall no longer outweighs the fresh model's gain there, and
  // online lands at 1.74 x the oracle (1.57 x here).
  sc->online.calm_decisions = false;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(std::find(plan->schedule.begin(), plan->schedule.end(), 1120), plan->schedule.end())
      << plan->summary.message;
  ExpectOnlineWithin(*sc, 1.65);
}

// Nothing is held for a switch while the served model is still rising: on a
// ramp the producer's models do not come back to the level before it while
// it lasts. On set 14's q-rotate (held-out set 14 as drawn on 2026-12-03, a
// rotation; host, while training, the drift prior at 1.5) the rule without
// that guard held the producer's models through the ramp: 1.26 x the
// oracle -> 1.35 x. Since the fifty-first session's lag price (the ramp
// read from the fixed models' recent rise, priced over its expected rest)
// online is at 1.30 x here (at the default prior, 1.31 -> 1.25 x).
TEST(StalenessScenarioTest, NothingIsHeldForASwitchOnARamp) {
  auto sc = FrozenWallScenario("set14", "q-rotate", Tier::kHost, TrafficClock::kWall, 0, /*drift_prior=*/1.5);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->summary.message.find("held until"), std::string::npos) << plan->summary.message;
  ExpectOnlineWithin(*sc, 1.32);
}

// The drift prior's default, 3 since the thirty-seventh session (1.5 from
// the fourteenth): on set 4's class-incremental run (bench/devsets/set4/
// f-classinc: from 4 classes, new ones from 2200; pfs, a fixed window of
// 3747 requests) online at 1.5 published 1900, before the new classes
// came, and its stall put every later version further behind the traffic
// (then 2200, 2250, 2350, 2500): 1.60 x the oracle. At 3 its first publish
// is 2250, the oracle's: 1.00 x (bench/README.md, "Thirty-seventh
// session": over 540 wall cases mean regret 14.1 -> 12.9%).
TEST(StalenessScenarioTest, TheDefaultDriftPriorSkipsTheCheckpointsBeforeNewClasses) {
  ASSERT_EQ(OnlinePlanner::Options().drift_prior, 3.0);
  auto sc = FrozenWallScenario("set4", "f-classinc", Tier::kPfs, TrafficClock::kWall, 3747,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 1.1);
  auto weaker = FrozenWallScenario("set4", "f-classinc", Tier::kPfs, TrafficClock::kWall, 3747, 1.5);
  ASSERT_TRUE(weaker.ok()) << weaker.status().ToString();
  auto plan = PlanStrategy(*weaker, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto judged = JudgeAgainstOracle(*weaker, *plan);
  ASSERT_TRUE(judged.ok()) << judged.status().ToString();
  EXPECT_GT(judged->online, 1.3 * judged->oracle)
      << "the run no longer tells the two priors apart: " << plan->summary.message;
}

// Recurring traffic with three domains (bench/devsets/set23: held-out set
// 23's z-recur3d45f, upright then rotated 45 and 90 degrees in turn every
// 300 iterations from 1000, and z-recur3d60, 60 and 120 degrees every 500
// from 1200; both trained 2026-12-05), host, the default drift prior.
//
// On z-recur3d45f (served while training) a stall's traffic put the
// switch to the third domain and the return of the first within four
// measurement gaps of each other, and they were read as one switch: the
// regimes were counted one short and the cycle was learned as 2 and kept,
// 1.93 x the oracle. The warm-up's model, re-measured across both, rose at
// the first and fell at the second: the traffic changed domain again, so
// they are two switches (OnlinePlanner::ReversedSinceLastSwitch): 1.62 x
// (bench/README.md, "Forty-eighth session"). Since the fifty-third
// session's placements (a switch seen right after a fresh publish, or
// nearly whole across a stall, placed part-way) the switch at 1600 is
// placed right, and the return it predicts sends the next domain's model
// out at 1400, ahead of its switch by the host's delivery lag, where the
// earlier, wrong prediction had sent nothing: 1.88 x with the rule, 1.70 x
// without it (the cycle learned as 3 either way). The rule no longer
// decides this run, which stays here as a bound on it (the first cycle
// learned is 3, within 1.95 x); whether the rule still pays with the new
// placements is open (bench/README.md, "Fifty-third session"). Since the
// fifty-eighth session's wait guard the first change's model goes out at
// 1150 (the oracle's at 1050; 1250 before), and the later anticipations
// send other kept models: 1.88 -> 2.05 x, the bound 2.1 x.
TEST(StalenessScenarioTest, ThreeDomainsASwitchBackWithinFourGapsIsAnother) {
  auto sc = FrozenWallScenario("set23", "z-recur3d45f", Tier::kHost, TrafficClock::kWall, 0,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.record_decisions = true;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto learned = std::find_if(plan->decisions.begin(), plan->decisions.end(),
                                    [](const auto& d) { return d.cycle > 0; });
  ASSERT_NE(learned, plan->decisions.end()) << plan->summary.message;
  EXPECT_EQ(learned->cycle, 3) << "at " << learned->iteration << ": " << plan->summary.message;
  ExpectPlanWithin(*sc, *plan, 2.1);
}

// On z-recur3d60 with a fixed window of 2998 requests, at the first
// domain's return the producer's own model re-learning after the third
// domain measured its noise so high that the first domain's kept model
// (0.45 against a candidate at 5.0) did not win by the best-of-K margin, and
// the model that served the regime two back, of the second domain (2.7),
// beat the served model and the candidate by the gate's margin: read as the
// two-domain recurrence, the cycle was learned as 2, 2.00 x the oracle. A
// kept model of another regime measuring better than that one by the same
// margin says the return is not two regimes back: 1.69 x.
TEST(StalenessScenarioTest, ThreeDomainsTheRegimeTwoBackIsNotTheReturnWhenAnOlderOneIsBetter) {
  auto sc = FrozenWallScenario("set23", "z-recur3d60", Tier::kHost, TrafficClock::kWall, 2998,
                               OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ExpectOnlineWithin(*sc, 1.85);
}

// The model at a switch's first measurement is the new regime's when it
// had learned the new domain there. On the shipped recurring run
// (recur-sgd-h256: back every 750 iterations from 1000; gpu, wall clock,
// the default drift prior, served while training) the traffic barely led
// the producer at the first switch, and the model published at 1000 had
// learned the rotated domain by then (it measured far below the warm-up's
// model there). Counted as the first domain's, it was what the first
// return re-published (at 1700), and it measured 0.54 there against the
// warm-up model's 0.40; counted as the rotated domain's, the warm-up model
// goes out as well: 1.036 x the oracle -> 1.030 x (bench/README.md,
// "Fifty-ninth session").
TEST(StalenessScenarioTest, AModelThatLearnedTheNewDomainAtTheSwitchIsOfTheRegimeAfter) {
  auto sc = WallScenarioAt(datasets::ShippedLogDirectory() + "/recur-sgd-h256", Tier::kGpu,
                           TrafficClock::kWall, 0, OnlinePlanner::Options().drift_prior);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const int64_t warmup_model = sc->problem.warmup_iterations;
  const auto first_return = UpTo(*plan, 1800);
  EXPECT_TRUE(std::any_of(first_return.begin(), first_return.end(), [&](const auto& d) {
    return d.first >= 1700 && d.second == warmup_model;
  })) << plan->summary.message;
  ExpectPlanWithin(*sc, *plan, 1.033);
}

// online's re-measurements pause the producer (Plan::pauses, cost.remeasure_s
// each), and only on a traffic state new to the model: on the shipped
// no-drift run every re-measurement reads a state measured before (the
// live producer reuses those evaluations), on the shipped rotation each
// point of the ramp is new. The judge charges the pauses.
// A shipped log with its table, host tier, wall clock, 20% warm-up, each
// re-measurement `each` seconds.
ScenarioOptions RemeasuringOn(const StalenessTable& table, double each) {
  ScenarioOptions o;
  o.warmup_fraction = 0.2;
  o.tier = PresetCost{Tier::kHost, 600e6, false, Notification::kPush, 1.0};
  o.problem_template.requests.traffic_clock = TrafficClock::kWall;
  o.staleness = table;
  o.remeasure_s = each;
  o.remeasure_beside = false;  // on the training path: a pause each
  return o;
}

// The shipped recurring run (recur-sgd-h256) on the gpu tier, wall clock,
// each kept model re-measured beside training at the log's own
// validation pause.
StatusOr<Scenario> ShippedRecurringOnGpuBeside() {
  const std::string path = datasets::ShippedLogDirectory() + "/recur-sgd-h256";
  auto log = datasets::LogReader::ReadFile(path + ".csv.gz", {});
  if (!log.ok()) return log.status();
  auto table = datasets::StalenessReader::ReadFile(path + ".staleness.csv.gz", {});
  if (!table.ok()) return table.status();
  ScenarioOptions o = RemeasuringOn(*table, -1.0);  // the log's validation pause
  o.tier = PresetCost{Tier::kGpu, 600e6, false, Notification::kPush, 1.0};
  o.remeasure_beside = true;
  return MakeScenario(*log, o);
}

TEST(StalenessScenarioTest, ARemeasurementPausesTheProducerOnlyOnTrafficNewToTheModel) {
  constexpr double kEach = 0.03;
  for (const char* name : {"sgd-h256", "rotate-sgd-h256"}) {
    SCOPED_TRACE(name);
    const std::string path = datasets::ShippedLogDirectory() + "/" + name;
    auto log = datasets::LogReader::ReadFile(path + ".csv.gz", {});
    auto table = datasets::StalenessReader::ReadFile(path + ".staleness.csv.gz", {});
    ASSERT_TRUE(log.ok() && table.ok());
    ScenarioOptions o = RemeasuringOn(*table, kEach);
    auto sc = MakeScenario(*log, o);
    ASSERT_TRUE(sc.ok()) << sc.status().ToString();
    auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    double paused = 0;
    for (const auto& [at, seconds] : plan->pauses) {
      EXPECT_GT(at, sc->problem.warmup_iterations);
      const double n = seconds / kEach;
      EXPECT_GE(n, 0.999);
      EXPECT_NEAR(n, std::round(n), 1e-9) << "a pause of " << seconds << " s at " << at;
      paused += seconds;
    }
    EXPECT_NEAR(paused, kEach * static_cast<double>(plan->summary.remeasurements), 1e-9);
    EXPECT_NEAR(plan->summary.remeasure_s, paused, 1e-12);
    EXPECT_NEAR(plan->summary.slowdown_s,
                static_cast<double>(plan->schedule.size()) * sc->problem.cost.stall_s +
                    static_cast<double>(plan->kept.size()) * sc->problem.cost.keep_copy_s + paused,
                1e-9);
    if (std::string(name) == "sgd-h256") {
      // One: the warm-up's model (iteration 938, between validation points,
      // so the producer never measured it before it served).
      EXPECT_EQ(plan->summary.remeasurements, 1) << plan->summary.message;
      EXPECT_EQ(plan->pauses.size(), 1u);
      continue;
    }
    EXPECT_GE(plan->summary.remeasurements, 10) << plan->summary.message;
    EXPECT_NE(plan->summary.message.find("ms of producer pauses, charged"), std::string::npos)
        << plan->summary.message;
    // The judge: the same schedule without its pauses lands earlier.
    const Problem judge = BoundProblem(*sc);
    auto charged = EvaluateOnSurface(judge, *sc->staleness_truth, plan->schedule, plan->published, plan->kept,
                                     plan->pauses);
    auto free = EvaluateOnSurface(judge, *sc->staleness_truth, plan->schedule, plan->published, plan->kept);
    ASSERT_TRUE(charged.ok() && free.ok());
    EXPECT_NE(charged->cil, free->cil);
    EXPECT_NEAR(charged->objective - charged->cil - (free->objective - free->cil),
                judge.price_per_slowdown_s * paused, 1e-6 * (1 + charged->objective));
    // Free re-measuring (the figures before the charge): no pauses at all.
    o.remeasure_s = 0;
    auto sc0 = MakeScenario(*log, o);
    ASSERT_TRUE(sc0.ok());
    auto plan0 = PlanStrategy(*sc0, StrategyKind::kOnline);
    ASSERT_TRUE(plan0.ok());
    EXPECT_TRUE(plan0->pauses.empty());
    EXPECT_GT(plan0->summary.remeasurements, 0);
  }
}

// Re-measured beside training (cost.remeasure_beside), the producer trains
// on: on the shipped rotation (each point of the ramp a new state) the
// decisions wait for the re-measurements, never past the next validation
// point, and the producer pauses only to copy a candidate aside and for what
// did not fit before the next point. The judge delays a checkpoint by its
// decision's wait.
TEST(StalenessScenarioTest, ARemeasurementBesideTrainingDelaysTheDecisionNotTheProducer) {
  constexpr double kEach = 0.03;
  const std::string path = datasets::ShippedLogDirectory() + "/rotate-sgd-h256";
  auto log = datasets::LogReader::ReadFile(path + ".csv.gz", {});
  auto table = datasets::StalenessReader::ReadFile(path + ".staleness.csv.gz", {});
  ASSERT_TRUE(log.ok() && table.ok());
  ScenarioOptions o = RemeasuringOn(*table, kEach);
  auto on_path = MakeScenario(*log, o);
  o.remeasure_beside = true;
  auto sc = MakeScenario(*log, o);
  ASSERT_TRUE(sc.ok() && on_path.ok());
  ASSERT_TRUE(sc->problem.cost.remeasure_beside);
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  auto paused = PlanStrategy(*on_path, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok() && paused.ok()) << plan.status().ToString();
  ASSERT_GE(plan->waits.size(), 10u) << plan->summary.message;
  const std::vector<double> clock = TruthElapsed(*sc);
  const predictor::CurveData& obs = OnlinePoints(*sc);
  const int64_t W = sc->problem.warmup_iterations;
  double waited = 0;
  for (size_t i = 0; i < plan->waits.size(); ++i) {
    const auto [at, seconds] = plan->waits[i];
    EXPECT_GT(at, W);
    if (i > 0) {
      EXPECT_GT(at, plan->waits[i - 1].first);
    }
    EXPECT_GT(seconds, 0);
    // A whole number of re-measurements, or cut at the next validation point.
    const double n = seconds / kEach;
    const auto next = std::upper_bound(obs.iterations.begin(), obs.iterations.end(), static_cast<double>(at));
    if (next != obs.iterations.end() && static_cast<size_t>(*next - static_cast<double>(W)) < clock.size()) {
      const double gap = clock[static_cast<size_t>(*next - static_cast<double>(W))] - clock[static_cast<size_t>(at - W)];
      EXPECT_LE(seconds, gap + 1e-12) << "at " << at;
      if (seconds < gap - 1e-12) {
        EXPECT_NEAR(n, std::round(n), 1e-9) << "a wait of " << seconds << " s at " << at;
      }
    }
    waited += seconds;
  }
  EXPECT_NEAR(plan->summary.remeasure_wait_s, waited, 1e-9);
  EXPECT_NE(plan->summary.message.find("beside training"), std::string::npos) << plan->summary.message;
  // The producer pauses much less than when it re-measures on the path.
  EXPECT_LT(plan->summary.remeasure_s, 0.5 * paused->summary.remeasure_s)
      << plan->summary.message << " | " << paused->summary.message;
  EXPECT_TRUE(paused->waits.empty());
  // The judge: the same schedule, its decisions' waits taken away, serves
  // its versions earlier (a different cost).
  const Problem judge = BoundProblem(*sc);
  auto waiting = EvaluateOnSurface(judge, *sc->staleness_truth, plan->schedule, plan->published, plan->kept,
                                   plan->pauses, plan->waits);
  auto at_once = EvaluateOnSurface(judge, *sc->staleness_truth, plan->schedule, plan->published, plan->kept,
                                   plan->pauses);
  ASSERT_TRUE(waiting.ok() && at_once.ok());
  bool delayed = false;
  for (int64_t s : plan->schedule) {
    delayed |= std::binary_search(plan->waits.begin(), plan->waits.end(), std::make_pair(s, 0.0),
                                  [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  if (delayed) {
    EXPECT_NE(waiting->cil, at_once->cil);
  } else {
    EXPECT_EQ(waiting->cil, at_once->cil);
  }
}

// The count a planner's summary message gives before `what` (-1: none).
long CountIn(const std::string& message, const std::string& what) {
  const size_t at = message.find(what);
  if (at == std::string::npos || at == 0) return -1L;
  const size_t from = message.rfind(' ', at - 1);
  return std::stol(message.substr(from + 1, at - from - 1));
}

// Calm decisions (OnlinePlanner::Options::calm_decisions): beside training,
// a calm point of the shipped rotation decides before its re-measurements:
// no wait there and no copy aside, so fewer decisions wait and the producer
// pauses no more. (What it costs or gains is the pools': bench/README.md,
// "Sixty-fourth session"; on this case host, 1.02 x the waiting loop's CIL.)
TEST(StalenessScenarioTest, ACalmPointDecidesWithoutWaitingForItsRemeasurements) {
  const std::string path = datasets::ShippedLogDirectory() + "/rotate-sgd-h256";
  auto log = datasets::LogReader::ReadFile(path + ".csv.gz", {});
  auto table = datasets::StalenessReader::ReadFile(path + ".staleness.csv.gz", {});
  ASSERT_TRUE(log.ok() && table.ok());
  ScenarioOptions o = RemeasuringOn(*table, 0.03);
  o.remeasure_beside = true;
  auto waits = MakeScenario(*log, o);
  ASSERT_TRUE(waits.ok()) << waits.status().ToString();
  ASSERT_TRUE(waits->online.calm_decisions);  // the default
  Scenario calm = *waits;
  waits->online.calm_decisions = false;
  auto waited = PlanStrategy(*waits, StrategyKind::kOnline);
  auto decided = PlanStrategy(calm, StrategyKind::kOnline);
  ASSERT_TRUE(waited.ok() && decided.ok()) << decided.status().ToString();
  const auto calm_points = [](const std::string& message) {
    return CountIn(message, " calm points decided before their re-measurements");
  };
  EXPECT_EQ(calm_points(waited->summary.message), 0) << waited->summary.message;
  const long n = calm_points(decided->summary.message);
  EXPECT_GE(n, 5) << decided->summary.message;
  EXPECT_LT(decided->waits.size(), waited->waits.size());
  EXPECT_LE(decided->summary.remeasure_s, waited->summary.remeasure_s + 1e-9)
      << decided->summary.message << " | " << waited->summary.message;
}

// Partial waits (OnlinePlanner::Options::partial_waits): at a point that is
// not calm the decision waits for the served version and the kept models
// that can win a switch (the predicted return's, each ended regime's, the
// warm-up's); the newest published versions follow it. On the shipped
// recurring run (gpu tier, the log's own validation pause per evaluation:
// 87 ms) the switches' decisions wait less, and the returning domain's
// model goes out that much sooner: its regret against the table's oracle
// falls (the pool's case, a request window: 36.5 -> 23.3% over the oracle;
// bench/README.md, "Sixty-fifth session").
TEST(StalenessScenarioTest, ADecisionWaitsOnlyForTheKeptModelsThatCanWinASwitch) {
  auto partial = ShippedRecurringOnGpuBeside();
  ASSERT_TRUE(partial.ok()) << partial.status().ToString();
  ASSERT_TRUE(partial->online.partial_waits);  // the default
  Scenario all = *partial;
  all.online.partial_waits = false;
  auto waited_all = PlanStrategy(all, StrategyKind::kOnline);
  auto waited_some = PlanStrategy(*partial, StrategyKind::kOnline);
  ASSERT_TRUE(waited_all.ok() && waited_some.ok()) << waited_some.status().ToString();
  const auto followed = [](const std::string& message) {
    return CountIn(message, " decisions before the serving domain's kept versions'");
  };
  EXPECT_EQ(followed(waited_all->summary.message), 0) << waited_all->summary.message;
  EXPECT_GE(followed(waited_some->summary.message), 3) << waited_some->summary.message;
  EXPECT_LT(waited_some->summary.remeasure_wait_s, 0.8 * waited_all->summary.remeasure_wait_s)
      << waited_some->summary.message << " | " << waited_all->summary.message;
  const Problem judge = BoundProblem(*partial);
  auto some = EvaluateOnSurface(judge, *partial->staleness_truth, waited_some->schedule, waited_some->published,
                                waited_some->kept, waited_some->pauses, waited_some->waits);
  auto every = EvaluateOnSurface(judge, *all.staleness_truth, waited_all->schedule, waited_all->published,
                                 waited_all->kept, waited_all->pauses, waited_all->waits);
  ASSERT_TRUE(some.ok() && every.ok());
  EXPECT_LT(some->cil, 0.95 * every->cil) << some->cil << " against " << every->cil;
}


// At a predicted return seen at a point (the served version jumped up where
// the prediction placed the switch), rule 5b publishes the return's model
// whatever the kept models answer, at the best level it measured: the
// decision waits for the served version's answer only, and the kept
// models' answers follow it. On the shipped recur-sgd-h256 (gpu, wall
// clock, beside training) the returns at 3200 and 3950 waited for four
// evaluations; for one, they go out 0.26 and 0.31 s sooner: 23.1 -> 12.1%
// over the oracle (bench/README.md, "Sixty-eighth session").
TEST(StalenessScenarioTest, APredictedReturnSeenWaitsForTheServedAnswerOnly) {
  auto sc = ShippedRecurringOnGpuBeside();
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  sc->online.record_decisions = true;
  auto plan = PlanStrategy(*sc, StrategyKind::kOnline);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const double each = sc->problem.cost.remeasure_s;
  ASSERT_GT(each, 0);
  // A re-publish where the decision before predicted a return: the return
  // seen (the served version's answer, one evaluation at most).
  int seen = 0;
  for (size_t k = 1; k < plan->decisions.size(); ++k) {
    const auto& d = plan->decisions[k];
    const auto& before = plan->decisions[k - 1];
    if (!d.publish || std::string_view(d.publish_kind) != "kept" || before.cycle == 0 ||
        !(before.predicted_switch > 0)) {
      continue;
    }
    ++seen;
    double waited = 0;
    for (const auto& [at, s] : plan->waits) waited += at == d.iteration ? s : 0.0;
    EXPECT_LE(waited, 1.0001 * each) << "at " << d.iteration << ": " << plan->summary.message;
  }
  EXPECT_GE(seen, 2) << plan->summary.message;
}

}  // namespace
}  // namespace schedulers
}  // namespace viper
