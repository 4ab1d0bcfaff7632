#include "viper/schedulers/online.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>

namespace viper {
namespace schedulers {
namespace {

// W = 100, N = 2000, validation every 20 iterations, cheap checkpoints
// (stall 0.01 s, delay 0.1 s at 0.05 s per iteration): the plan wants a
// checkpoint whenever the loss improves, so the gate and the change detector
// decide.
Problem CheapProblem() {
  Problem p;
  p.warmup_iterations = 100;
  p.total_iterations = 2000;
  p.seconds_per_iteration = 0.05;
  p.cost.stall_s = 0.01;
  p.cost.delay_s = 0.1;
  p.requests.interval_s = 0.05;
  return p;
}

ForecasterFactory Forecasters() {
  predictor::LearningCurvePredictor::Options o;
  o.families = {predictor::CurveFamily::kExp3, predictor::CurveFamily::kPow3};
  o.selection = predictor::Selection::kBestMse;
  return PredictorForecasterFactory(o);
}

struct LoopRun {
  Schedule taken;
  std::vector<double> published;  // measured loss of each published version
  OnlinePlanner::Summary summary;
};

// Plays `curve(i)` + Gaussian noise of `noise` at every 20th iteration.
template <typename Curve>
LoopRun Play(const Problem& p, Curve curve, double noise, uint64_t seed = 7) {
  OnlinePlanner planner(p, Forecasters());
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> e(0.0, noise);
  LoopRun run;
  for (int64_t i = 20; i <= p.total_iterations; i += 20) {
    const double v = std::max(0.0, curve(static_cast<double>(i)) + e(rng));
    EXPECT_TRUE(planner.Observe(i, v, ObservationKind::kValidation).ok());
    auto now = planner.ShouldCheckpoint(i);
    EXPECT_TRUE(now.ok()) << now.status().ToString();
    if (*now) {
      EXPECT_TRUE(planner.Commit(i).ok());
      run.published.push_back(v);
    }
  }
  run.taken = planner.taken();
  run.summary = planner.summary();
  return run;
}

TEST(OnlinePlannerTest, DefaultOptionsAreValidAndBadOnesAreNamed) {
  std::string error;
  EXPECT_TRUE(OnlinePlanner::Options().IsValid(&error)) << error;
  OnlinePlanner::Options o;
  o.refit_growth = 1.0;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("refit_growth"), std::string::npos);
  o = OnlinePlanner::Options();
  o.gate_z = -1;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("gate_z"), std::string::npos);
  o = OnlinePlanner::Options();
  o.keep_versions = -1;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("keep_versions"), std::string::npos);
  for (double bad : {-1.0, 1001.0, std::numeric_limits<double>::quiet_NaN()}) {
    o = OnlinePlanner::Options();
    o.wait_guard = bad;
    EXPECT_FALSE(o.IsValid(&error)) << bad;
    EXPECT_NE(error.find("wait_guard"), std::string::npos) << error;
  }
  o = OnlinePlanner::Options();
  o.wait_guard = 0;
  EXPECT_TRUE(o.IsValid(&error)) << "0 = off: " << error;
}

// Under the wall clock the traffic's lead at a past iteration is read off
// the producer's own clock once the producer has trained past that moment.
// A 2 s stall at 140 (40 iterations at tau = 0.05 s), then the producer
// slows to 0.1 s an iteration from 180: seen from 160 the traffic is
// estimated at 200; once the clock reaches it, it was at 190 (4 s to 180,
// one more second at 0.1). Without the clock it stays an estimate. Bad
// clock readings are named.
TEST(OnlinePlannerTest, APastTrafficPositionIsReadOffTheProducersClock) {
  Problem p = CheapProblem();
  p.requests.traffic_clock = TrafficClock::kWall;
  p.cost.stall_s = 2.0;
  OnlinePlanner timed(p, Forecasters()), blind(p, Forecasters());
  double elapsed = 0;
  int64_t clocked = p.warmup_iterations;
  auto clock_to = [&](int64_t it) {
    for (; clocked < it; ++clocked) {
      elapsed += clocked + 1 <= 180 ? 0.05 : 0.1;
      ASSERT_TRUE(timed.ObserveClock(clocked + 1, elapsed).ok());
    }
  };
  for (int64_t i = 120; i <= 300; i += 20) {
    clock_to(i);
    for (OnlinePlanner* planner : {&timed, &blind}) {
      ASSERT_TRUE(planner->Observe(i, 2.0 - 0.001 * static_cast<double>(i), ObservationKind::kValidation).ok());
      if (i == 140) {
        ASSERT_TRUE(planner->Commit(i).ok());
      }
    }
    if (i == 160) {
      EXPECT_DOUBLE_EQ(timed.TrafficAt(160), 200.0);  // 2 s ahead of the clock's end, at tau
    }
  }
  EXPECT_NEAR(timed.TrafficAt(160), 190.0, 1e-9);
  EXPECT_DOUBLE_EQ(blind.TrafficAt(160), 200.0);
  EXPECT_DOUBLE_EQ(timed.TrafficAt(120), 120.0);  // no stall before it
  // An iteration reported again is ignored; a gap, seconds running
  // backwards or not finite, and iterations outside [W, N] are errors.
  EXPECT_TRUE(timed.ObserveClock(250, 1.0).ok());
  auto message = [&](int64_t it, double s) { return timed.ObserveClock(it, s).message(); };
  EXPECT_NE(message(302, elapsed + 1).find("iteration 301 comes first"), std::string::npos);
  EXPECT_NE(message(301, elapsed - 1).find("expected finite and >="), std::string::npos);
  EXPECT_NE(message(301, std::nan("")).find("expected finite"), std::string::npos);
  EXPECT_NE(message(99, 0).find("not in [100, 2000]"), std::string::npos);
  EXPECT_TRUE(timed.ObserveClock(301, elapsed + 0.1).ok());
}

// Under the wall clock the producer's re-measuring pauses put the traffic
// ahead as its stalls do: 1 s after the measurement at 120 is 20
// iterations at tau = 0.05 s from then on.
TEST(OnlinePlannerTest, APauseMovesTheTrafficOnAsAStallDoes) {
  OnlinePlanner planner(CheapProblem(), Forecasters());  // the wall clock (the default)
  ASSERT_TRUE(planner.Observe(120, 1.0, ObservationKind::kValidation).ok());
  ASSERT_TRUE(planner.ObservePause(0.6).ok());
  ASSERT_TRUE(planner.ObservePause(0.4).ok());  // the same pause, in two parts
  ASSERT_TRUE(planner.ObservePause(0).ok());
  EXPECT_DOUBLE_EQ(planner.TrafficAt(120), 120.0);
  EXPECT_DOUBLE_EQ(planner.TrafficAt(140), 160.0);
  ASSERT_TRUE(planner.Observe(140, 1.0, ObservationKind::kValidation).ok());
  ASSERT_TRUE(planner.Commit(140).ok());  // a stall of 0.01 s: 0.2 iterations more
  EXPECT_NEAR(planner.TrafficAt(160), 180.2, 1e-9);
  EXPECT_FALSE(planner.ObservePause(-1).ok());
  EXPECT_FALSE(planner.ObservePause(std::nan("")).ok());
  // The producer clock does not move with the producer's pauses.
  Problem q = CheapProblem();
  q.requests.traffic_clock = TrafficClock::kProducer;
  OnlinePlanner producer(q, Forecasters());
  ASSERT_TRUE(producer.Observe(120, 1.0, ObservationKind::kValidation).ok());
  ASSERT_TRUE(producer.ObservePause(1.0).ok());
  EXPECT_DOUBLE_EQ(producer.TrafficAt(140), 140.0);
}

TEST(OnlinePlannerTest, ObservationsMustBeOrdered) {
  OnlinePlanner planner(CheapProblem(), Forecasters());
  EXPECT_TRUE(planner.Observe(50, 1.0, ObservationKind::kValidation).ok());
  EXPECT_FALSE(planner.Observe(40, 1.0, ObservationKind::kValidation).ok());
  EXPECT_FALSE(planner.ObserveServed(-1).ok());
  EXPECT_FALSE(planner.ObserveKept(60, 1.0).ok()) << "a kept model cannot be from the future";
  EXPECT_TRUE(planner.KeptVersions().empty()) << "the warm-up model is the served one";
  EXPECT_FALSE(*planner.ShouldCheckpoint(50));  // the warm-up: never
}

// On traffic that moves at every measurement (the served model re-measured
// further off its last loss each time: a ramp) every state is new, so each
// kept model re-measured would be a producer pause and none is asked for;
// while the traffic stands still, or once it stops, the kept models are.
TEST(OnlinePlannerTest, NoKeptModelIsReMeasuredOnARamp) {
  Problem p = CheapProblem();
  p.cost.remeasure_s = 0.02;
  OnlinePlanner planner(p, Forecasters());
  double served = 0;
  std::vector<size_t> asked;
  for (int64_t i = 120; i <= 1000; i += 20) {
    const double v = 0.3 + std::exp(-static_cast<double>(i) / 300.0);
    ASSERT_TRUE(planner.Observe(i, v, ObservationKind::kValidation).ok());
    if (i == 140 || i == 200) {
      ASSERT_TRUE(planner.Commit(i).ok());
      served = v;
    }
    if (i > 200) {
      // Still until 500, a ramp over 520..700 (the served model 0.2 worse at
      // every measurement), still again from 720.
      const double ramp = std::clamp(static_cast<double>(i - 500) / 20.0, 0.0, 10.0);
      ASSERT_TRUE(planner.ObserveServed(served + 0.2 * ramp).ok());
      asked.push_back(planner.KeptVersions().size());
      for (int64_t k : planner.KeptVersions()) ASSERT_TRUE(planner.ObserveKept(k, 1.0).ok());
    }
    auto now = planner.ShouldCheckpoint(i);
    ASSERT_TRUE(now.ok()) << now.status().ToString();
  }
  // asked[j] is at i = 220 + 20 j: still at 500 (j = 14), moving at 520 and
  // 540 (j = 15, 16), so none from 540 to 700 (j = 16 .. 24), and again
  // from 740 (j = 26: 720 moved, 700 did, 740 did not).
  ASSERT_EQ(asked.size(), 40u);
  EXPECT_GT(asked[14], 0u);
  EXPECT_GT(asked[15], 0u) << "one move is a step, not yet a ramp";
  for (size_t j = 16; j <= 24; ++j) EXPECT_EQ(asked[j], 0u) << "at " << 220 + 20 * j;
  EXPECT_GT(asked[26], 0u);
  // Where re-measuring is free, the ramp's kept models are measured too.
  OnlinePlanner free(CheapProblem(), Forecasters());
  served = 0;
  for (int64_t i = 120; i <= 600; i += 20) {
    ASSERT_TRUE(
        free.Observe(i, 0.3 + std::exp(-static_cast<double>(i) / 300.0), ObservationKind::kValidation).ok());
    if (i == 140 || i == 200) {
      ASSERT_TRUE(free.Commit(i).ok());
      served = 0.3 + std::exp(-static_cast<double>(i) / 300.0);
    }
    if (i > 200) {
      ASSERT_TRUE(
          free.ObserveServed(served + 0.2 * std::clamp(static_cast<double>(i - 500) / 20.0, 0.0, 10.0)).ok());
      if (i >= 540) {
        EXPECT_FALSE(free.KeptVersions().empty()) << "at " << i;
      }
      for (int64_t k : free.KeptVersions()) ASSERT_TRUE(free.ObserveKept(k, 1.0).ok());
    }
    ASSERT_TRUE(free.ShouldCheckpoint(i).ok());
  }
}

// Beside training a decision waits for the ended regimes' kept models only
// where something says an older domain may be back (KeptModelsInPlay): the
// served version jumped or moved at this point, a kept model fell between
// its latest two re-measurements, or a return was seen. On still traffic
// their answers follow the decision (waited for: none); re-measuring free,
// every one is waited for.
TEST(OnlinePlannerTest, ADecisionWaitsForKeptModelsOnlyWhereAnOlderDomainMayBeBack) {
  Problem p = CheapProblem();
  p.cost.remeasure_s = 0.02;
  p.cost.remeasure_beside = true;
  // kept_at(i): the kept models' answer at i; served_at(i): the served one's.
  const auto run = [&](const Problem& problem, const std::function<double(int64_t)>& served_at,
                       const std::function<double(int64_t)>& kept_at) {
    OnlinePlanner planner(problem, Forecasters());
    std::map<int64_t, std::pair<size_t, size_t>> waited;  // i -> (waited for, asked)
    for (int64_t i = 120; i <= 600; i += 20) {
      const double v = 0.3 + std::exp(-static_cast<double>(i) / 300.0);
      EXPECT_TRUE(planner.Observe(i, v, ObservationKind::kValidation).ok());
      if (i == 140 || i == 200) {
        EXPECT_TRUE(planner.Commit(i).ok());
      }
      if (i > 200) {
        EXPECT_TRUE(planner.ObserveServed(served_at(i)).ok());
        size_t rivals = 0;
        const std::vector<int64_t> kept = planner.KeptVersions(&rivals);
        waited[i] = {rivals, kept.size()};
        for (int64_t k : kept) EXPECT_TRUE(planner.ObserveKept(k, kept_at(i)).ok());
      }
      EXPECT_TRUE(planner.ShouldCheckpoint(i).ok());
    }
    return waited;
  };
  const auto still = [](int64_t) { return 0.45; };
  const auto kept_still = [](int64_t) { return 1.0; };
  // Still traffic: the warm-up's model and the first published one asked
  // for, none waited for.
  auto w = run(p, still, kept_still);
  ASSERT_GT(w[400].second, 0u);
  for (int64_t i = 260; i <= 600; i += 20) EXPECT_EQ(w[i].first, 0u) << "at " << i;
  // The served version jumps at 420: that point waits for the warm-up's model.
  w = run(p, [](int64_t i) { return i == 420 ? 2.5 : 0.45; }, kept_still);
  EXPECT_GT(w[420].first, 0u);
  EXPECT_EQ(w[400].first, 0u);
  // The kept models fall at 420 (their answers come after that point's
  // decision): the next points wait for them.
  w = run(p, still, [](int64_t i) { return i >= 420 ? 0.5 : 1.0; });
  EXPECT_EQ(w[420].first, 0u);
  EXPECT_GT(w[440].first, 0u);
  EXPECT_GT(w[460].first, 0u);
  EXPECT_EQ(w[500].first, 0u) << "fallen three points back: still again";
  // Re-measuring free, every kept model is waited for.
  Problem free = p;
  free.cost.remeasure_s = 0;
  w = run(free, still, kept_still);
  for (int64_t i = 260; i <= 600; i += 20) EXPECT_EQ(w[i].first, w[i].second) << "at " << i;
}

// Beside training a calm point decides before its re-measurements
// (Options::calm_decisions): the candidate measures as at the point before,
// within twice the gate's margin, and no switch was seen. A jump is not
// calm, nor a point right after the warm-up's only measurement, nor a
// training-loss loop, nor with the option off.
TEST(OnlinePlannerTest, ACalmPointDecidesBeforeItsRemeasurements) {
  Problem p = CheapProblem();
  OnlinePlanner::Options on;
  on.calm_decisions = true;
  OnlinePlanner planner(p, Forecasters(), on);
  // A flat curve with noise of sd 0.03 (a fixed draw).
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0.0, 0.03);
  ASSERT_TRUE(planner.Observe(100, 0.5 + noise(rng), ObservationKind::kValidation).ok());
  EXPECT_FALSE(planner.DecidesBeforeRemeasured()) << "one measurement: nothing to compare with";
  int calm = 0, points = 0;
  for (int64_t i = 120; i <= 1000; i += 20) {
    ASSERT_TRUE(planner.Observe(i, 0.5 + noise(rng), ObservationKind::kValidation).ok());
    calm += planner.DecidesBeforeRemeasured() ? 1 : 0;
    ++points;
    ASSERT_TRUE(planner.Observe(i + 5, 0.9, ObservationKind::kTraining).ok());
    EXPECT_FALSE(planner.DecidesBeforeRemeasured()) << "not right after a validation point";
    ASSERT_TRUE(planner.ShouldCheckpoint(i + 5).ok());
  }
  EXPECT_GT(calm, points / 2) << "most points of a still curve are calm";
  // A jump of 0.8 against a margin of a few hundredths.
  ASSERT_TRUE(planner.Observe(1020, 1.3, ObservationKind::kValidation).ok());
  EXPECT_LT(2.0 * planner.GateMargin(), 0.5);
  EXPECT_FALSE(planner.DecidesBeforeRemeasured());

  ASSERT_TRUE(OnlinePlanner::Options().calm_decisions);  // the default
  OnlinePlanner::Options off;
  off.calm_decisions = false;
  OnlinePlanner waits(p, Forecasters(), off);
  OnlinePlanner::Options training = on;
  training.metric = ObservationKind::kTraining;
  OnlinePlanner on_training(p, Forecasters(), training);
  for (int64_t i = 100; i <= 200; i += 20) {
    ASSERT_TRUE(waits.Observe(i, 0.5, ObservationKind::kValidation).ok());
    ASSERT_TRUE(on_training.Observe(i, 0.5, ObservationKind::kTraining).ok());
  }
  EXPECT_FALSE(waits.DecidesBeforeRemeasured());
  EXPECT_FALSE(on_training.DecidesBeforeRemeasured());
}

// A calm point's served re-measurement arrives after its decision
// (ObserveServedLate): a jump it shows is recorded as the switch the
// decision could not see, also where the publish at that point replaced
// the served version; the same answer without a jump records none.
TEST(OnlinePlannerTest, AServedJumpAnsweredAfterACalmDecisionIsASwitch) {
  for (const bool jump : {true, false}) {
    for (const bool replaced : {true, false}) {
      OnlinePlanner::Options o;
      o.calm_decisions = true;
      o.record_decisions = true;
      OnlinePlanner planner(CheapProblem(), Forecasters(), o);
      std::mt19937_64 rng(5);
      std::normal_distribution<double> noise(0.0, 0.01);
      int64_t i = 100;
      double last = 0;
      // The served version (the warm-up's, 100) re-measures as it measured:
      // a fixed model on a traffic that does not move.
      const double at_warmup = 0.5;
      for (; i <= 600; i += 20) {
        last = i == 100 ? at_warmup : 0.5 + noise(rng);
        ASSERT_TRUE(planner.Observe(i, last, ObservationKind::kValidation).ok());
        if (i > 100) {
          ASSERT_TRUE(planner.ObserveServed(at_warmup).ok());
        }
        ASSERT_TRUE(planner.ShouldCheckpoint(i).ok());
      }
      // The point of 620 is calm (as 600 measured); decided before its
      // served answer is in.
      ASSERT_TRUE(planner.Observe(i, last, ObservationKind::kValidation).ok());
      ASSERT_TRUE(planner.DecidesBeforeRemeasured())
          << "switches " << planner.decisions().back().switches << " margin " << planner.GateMargin()
          << " holding " << planner.anticipating();
      const int64_t served = planner.served_model();
      ASSERT_TRUE(planner.ShouldCheckpoint(i).ok());
      if (replaced) {
        ASSERT_TRUE(planner.Commit(i).ok());
        ASSERT_NE(planner.served_model(), served);
      }
      ASSERT_TRUE(planner.ObserveServedLate(served, jump ? 2.5 : at_warmup).ok());
      i += 20;
      ASSERT_TRUE(planner.Observe(i, 0.5 + noise(rng), ObservationKind::kValidation).ok());
      ASSERT_TRUE(planner.ShouldCheckpoint(i).ok());
      ASSERT_FALSE(planner.decisions().empty());
      EXPECT_EQ(planner.decisions().back().switches, jump ? 1 : 0)
          << (jump ? "a jump" : "no jump") << (replaced ? ", replaced" : ", still served");
    }
  }
}

// A run that diverges at 1000 (NaN, then +inf, as the log reader keeps them
// with --non-finite diverged): the loop never checkpoints at a non-finite
// measurement, however cheap checkpoints are, and counts them; before the
// divergence it publishes as usual (so the test can fail).
TEST(OnlinePlannerTest, NeverCheckpointsADivergedModel) {
  const Problem p = CheapProblem();
  OnlinePlanner planner(p, Forecasters());
  int diverged = 0;
  for (int64_t i = 20; i <= p.total_iterations; i += 20) {
    double v = 0.3 + 2.0 * std::exp(-static_cast<double>(i) / 400.0);
    if (i >= 1000) {
      v = i % 40 == 0 ? std::nan("") : std::numeric_limits<double>::infinity();
      ++diverged;
    }
    ASSERT_TRUE(planner.Observe(i, v, ObservationKind::kValidation).ok()) << i;
    auto now = planner.ShouldCheckpoint(i);
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    if (i >= 1000) {
      EXPECT_FALSE(*now) << "checkpoint of a diverged model at " << i;
    }
    if (*now) {
      ASSERT_TRUE(planner.Commit(i).ok());
    }
  }
  ASSERT_FALSE(planner.taken().empty());
  EXPECT_LT(planner.taken().back(), 1000);
  EXPECT_EQ(planner.summary().diverged, diverged);
  EXPECT_NE(planner.summary().BriefReport(1).find("diverged"), std::string::npos);
  // The training loss as the metric: a smoothing window that holds a
  // non-finite loss is never a measurement.
  OnlinePlanner::Options o;
  o.metric = ObservationKind::kTraining;
  o.training_smoothing = 4;
  OnlinePlanner t(p, Forecasters(), o);
  for (int64_t i = 1; i <= 400; ++i) {
    const double v = i > 300 && i % 7 == 0 ? std::nan("") : 1.0 + 100.0 / static_cast<double>(i);
    ASSERT_TRUE(t.Observe(i, v, ObservationKind::kTraining).ok());
    auto now = t.ShouldCheckpoint(i);
    ASSERT_TRUE(now.ok());
    if (*now) {
      ASSERT_TRUE(t.Commit(i).ok());
    }
  }
  EXPECT_GT(t.summary().diverged, 0);
}

// A decreasing curve with little noise: the loop publishes as the loss falls,
// and every published version measured better than the one it replaced.
TEST(OnlinePlannerTest, FollowsADecreasingCurveAndPublishesOnlyImprovements) {
  const LoopRun r = Play(CheapProblem(), [](double i) { return 0.3 + 2.0 * std::exp(-i / 400.0); }, 0.005);
  EXPECT_GE(r.taken.size(), 5u);
  for (size_t k = 1; k < r.published.size(); ++k) EXPECT_LT(r.published[k], r.published[k - 1]);
  EXPECT_GT(r.summary.replans, 80);  // one per measurement after the warm-up
}

// With record_decisions, one Decision per measurement after the warm-up that
// agrees with what the loop did (its checkpoints, its gate's refusals), and
// DecisionsCsv writes one row each; without it, none are kept.
TEST(OnlinePlannerTest, RecordsEveryDecisionWhenAsked) {
  const Problem p = CheapProblem();
  OnlinePlanner::Options o;
  o.record_decisions = true;
  OnlinePlanner planner(p, Forecasters(), o);
  OnlinePlanner quiet(p, Forecasters());
  std::mt19937_64 rng(7);
  std::normal_distribution<double> e(0.0, 0.02);
  for (int64_t i = 20; i <= p.total_iterations; i += 20) {
    const double v = 0.4 + 1.5 * std::exp(-static_cast<double>(i) / 300.0) + e(rng);
    for (OnlinePlanner* pl : {&planner, &quiet}) {
      ASSERT_TRUE(pl->Observe(i, v, ObservationKind::kValidation).ok());
      auto now = pl->ShouldCheckpoint(i);
      ASSERT_TRUE(now.ok()) << now.status().ToString();
      if (*now) {
        ASSERT_TRUE(pl->Commit(i).ok());
      }
    }
  }
  EXPECT_TRUE(quiet.decisions().empty());
  EXPECT_EQ(quiet.taken(), planner.taken()) << "recording changes no decision";
  const auto& d = planner.decisions();
  ASSERT_EQ(d.size(), static_cast<size_t>((p.total_iterations - p.warmup_iterations) / 20));
  Schedule published;
  int64_t gated = 0, waits = 0;
  for (const auto& x : d) {
    EXPECT_GT(x.iteration, p.warmup_iterations);
    // The re-plan's first checkpoint: before the next measurement (20
    // iterations on) exactly when it wants one now; a later one is a wait.
    if (x.plan_wants) {
      EXPECT_GE(x.planned_checkpoint, x.iteration);
      EXPECT_LT(x.planned_checkpoint, x.iteration + 20);
    } else if (x.planned_checkpoint >= 0) {
      EXPECT_GE(x.planned_checkpoint, x.iteration + 20);
      ++waits;
    }
    // The wall clock (the default): each stall so far moves the traffic on
    // by stall_s / tau = 0.2 iterations, up to N.
    EXPECT_NEAR(x.traffic,
                std::min(static_cast<double>(p.total_iterations),
                         static_cast<double>(x.iteration) + 0.2 * static_cast<double>(published.size())),
                1e-9);
    if (x.publish) {
      published.push_back(x.iteration);
      EXPECT_EQ(x.published_model, x.iteration);
      EXPECT_STREQ(x.publish_kind, "fresh");
      EXPECT_TRUE(x.plan_wants);
    } else {
      EXPECT_EQ(x.published_model, -1);
    }
    if (x.gated) {
      ++gated;
      EXPECT_TRUE(x.plan_wants && !x.publish);
      EXPECT_GE(x.candidate_loss, x.served_loss - x.gate_margin);
    }
  }
  EXPECT_EQ(published, planner.taken());
  EXPECT_EQ(gated, planner.summary().gated);
  EXPECT_GT(gated, 0);
  EXPECT_GT(waits, 0);
  const std::string csv = DecisionsCsv(d);
  EXPECT_NE(csv.find(",plan_wants,planned_checkpoint,gated,"), std::string::npos);
  EXPECT_EQ(csv.rfind("iteration,traffic_iteration,candidate_loss,served_model,served_loss,", 0), 0u);
  EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), d.size() + 1);
  EXPECT_NE(csv.find("\n" + std::to_string(published.front()) + ","), std::string::npos);
}

// Flat and noisy: most candidates are noise, and the gate refuses them.
TEST(OnlinePlannerTest, GateRefusesNoiseOnAFlatCurve) {
  const LoopRun r = Play(CheapProblem(), [](double) { return 0.4; }, 0.02);
  EXPECT_GT(r.summary.gated, 0);
  // Ungated, every dip below the served value would be published.
  Problem p = CheapProblem();
  OnlinePlanner::Options loose;
  loose.gate_z = 0;
  OnlinePlanner planner(p, Forecasters(), loose);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> e(0.0, 0.02);
  for (int64_t i = 20; i <= p.total_iterations; i += 20) {
    ASSERT_TRUE(planner.Observe(i, 0.4 + e(rng), ObservationKind::kValidation).ok());
    if (*planner.ShouldCheckpoint(i)) {
      ASSERT_TRUE(planner.Commit(i).ok());
    }
  }
  EXPECT_LT(r.taken.size(), planner.taken().size());
}

// Class-incremental drift: the loss sits at 3 until 1000, then falls to 0.5.
// The detector starts a new regime right after the step, and the loop
// publishes within two measurements of it.
TEST(OnlinePlannerTest, DetectsAStepAndPublishesAfterIt) {
  const LoopRun r = Play(CheapProblem(),
                     [](double i) { return i <= 1000 ? 3.0 : 0.5 + 0.5 * std::exp(-(i - 1000) / 200.0); }, 0.05);
  ASSERT_GE(r.summary.changes, 1) << r.summary.BriefReport(static_cast<int64_t>(r.taken.size()));
  EXPECT_GE(r.summary.change_points.front(), 1000);
  EXPECT_LE(r.summary.change_points.front(), 1060);
  bool after = false;
  for (int64_t s : r.taken) after |= s > 1000 && s <= 1040;
  EXPECT_TRUE(after) << "no checkpoint within two measurements of the step";
}

// The noise a young regime is judged with. Three regimes: 0.5 with noise
// 0.01 (2% of the level) until 600; then nine measurements that are all
// transition (the old model on a new domain, the model re-learning, the next
// switch seen part-way), whose own "noise" is a large share of their level;
// then a flat 3. Right after the second change the new regime has too few
// points of its own, so it borrows a relative noise from an ended regime:
// the smallest one (2%: a margin of 0.5 x sqrt 2 x 2% x 3 = 0.04), not the
// transition's (a margin near 1 for three measurements, which kept a kept
// model that measured 2.8 better from being re-published on set 6's
// recurring run).
TEST(OnlinePlannerTest, AYoungRegimeBorrowsTheSmallestRelativeNoiseOfAnEndedOne) {
  OnlinePlanner planner(CheapProblem(), Forecasters());
  std::mt19937_64 rng(5);
  std::normal_distribution<double> e(0.0, 0.01);
  // The second regime as measured on set 6's recurring run (pfs, wall clock):
  // the old model on the new domain, the model re-learning, the next switch
  // seen part-way.
  const std::vector<double> transition = {3.0, 3.35, 3.05, 0.65, 0.63, 0.58, 0.55, 0.49, 1.34};
  auto level = [&](int64_t i) {
    return i < 600 ? 0.5 : i < 780 ? transition[static_cast<size_t>((i - 600) / 20)] : 3.0;
  };
  std::optional<double> margin_after;
  for (int64_t i = 20; i <= 900; i += 20) {
    ASSERT_TRUE(planner.Observe(i, level(i) + e(rng), ObservationKind::kValidation).ok());
    auto now = planner.ShouldCheckpoint(i);
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    if (*now) {
      ASSERT_TRUE(planner.Commit(i).ok());
    }
    if (!margin_after && planner.summary().changes >= 2) margin_after = planner.GateMargin();
  }
  const std::string report = planner.summary().BriefReport(static_cast<int64_t>(planner.taken().size()));
  ASSERT_TRUE(margin_after.has_value()) << "the second change was not detected: " << report;
  EXPECT_GE(planner.summary().change_points.back(), 760) << report;  // the best split may place it one measurement early
  EXPECT_LT(*margin_after, 0.3) << report << "; margin " << *margin_after;
}

// A label swap in the traffic at 1000, under the wall clock with a stall of
// 40 iterations: every version trained before it is 1.8 worse from then on
// (a step, and no further decay), and the producer's own model, trained on
// the swapped labels from its iteration 1000, recovers to 0.45. The served
// version is re-measured on the traffic at every measurement, as the live
// producer does. A step is not a rate: read as one (1.8 over the served
// version's age, per second), every version looks to lose that much per
// second, the served version's level at its checkpoint is rebased to 0, and
// the recovered model is held (6 measurements here; 300 iterations on the
// ninth session's f-swap/pfs) while each request pays the difference.
// DISABLED: it fails today and documents the defect (bench/README.md,
// "Tenth session"). The estimator that passes it (the median of the served
// version's consecutive re-measurement slopes) was neutral to worse on the
// held-out set 5 and worse on class-incremental traffic, whose repeated
// steps are a rate, so it was not kept; the patch is described there.
// The sixteenth session's variants that pass it (bench/README.md,
// "Sixteenth session", point 2) were neutral on held-out set 9 and lose on
// recurring traffic, where the misread rate keeps the loop from chasing
// each switch on a slow tier. Traced again in the fifty-seventh session:
// it still fails (5 measurements), but no longer for this reason (the
// decay read there is 0.09-0.14 per second): the re-plan takes no
// checkpoint from 1020 to 1100, weighing the 20 s stall (a fifth of the
// run) against the young regime's flat forecast, and publishes at 1120.
TEST(OnlinePlannerTest, DISABLED_AStepInTheServedVersionIsNotARateOfDecay) {
  Problem p = CheapProblem();
  p.requests.traffic_clock = TrafficClock::kWall;
  p.cost.stall_s = 20.0;
  p.cost.delay_s = 2.0;
  // Version v (the producer's model after iteration v) on the traffic at t;
  // the traffic's swap takes 60 iterations (as a table's interpolation does).
  auto loss = [](double v, double t) {
    if (v >= 1000) return 0.45 + 2.0 * std::exp(-(v - 1000) / 60.0);
    return 0.4 + 1.6 * std::exp(-(v - 100) / 300.0) + 1.8 * std::clamp((t - 1000) / 60.0, 0.0, 1.0);
  };
  OnlinePlanner planner(p, Forecasters());
  std::mt19937_64 rng(11);
  std::normal_distribution<double> e(0.0, 0.01);
  // The longest run of measurements, once the producer has the swapped
  // labels, with the candidate 0.3 or more below the served version and
  // nothing published (before the swap a stall of 400 iterations is worth
  // waiting for: the plan, not the decay, decides).
  int run = 0, longest = 0;
  int64_t longest_end = -1;
  for (int64_t i = 20; i <= p.total_iterations; i += 20) {
    const double t = planner.TrafficAt(i);
    const double v = loss(static_cast<double>(i), t) + e(rng);
    ASSERT_TRUE(planner.Observe(i, v, ObservationKind::kValidation).ok());
    double served = v;
    if (i > p.warmup_iterations) {
      served = loss(static_cast<double>(planner.served_model()), t) + e(rng);
      ASSERT_TRUE(planner.ObserveServed(served).ok());
    }
    auto now = planner.ShouldCheckpoint(i);
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    if (*now) {
      ASSERT_TRUE(planner.Commit(i).ok());
    }
    run = i >= 1000 && !*now && v < served - 0.3 ? run + 1 : 0;
    if (run > longest) {
      longest = run;
      longest_end = i;
    }
  }
  EXPECT_LE(longest, 3) << "a candidate 0.3 or more better than the served version was held for " << longest
                        << " measurements, until " << longest_end << "; "
                        << planner.summary().BriefReport(static_cast<int64_t>(planner.taken().size()));
  EXPECT_GE(planner.summary().changes, 1);
}

// Under the wall clock, the traffic changes at 1000, seen by the change
// detector as it begins: `old` is the excess it gives a model trained before
// it at traffic t, `fresh` a model trained after it. Returns, over the
// decisions at which a model from before the change still served after it,
// the largest lag price (Summary::lag_price) where its re-measurement was
// within 0.05 of the one before (flat) and where it was not, and the drift
// prior's bound (drift_prior x the largest candidate loss x request rate).
struct LagPrices {
  double flat = 0, rising = 0, prior_bound = 0;
  // Over the decisions after the change where the old model served and had
  // risen by more than 0.02 at each of its last two re-measurements: the
  // smallest lag price over what the drift prior alone prices then (inf:
  // none such).
  double rising_over_prior = std::numeric_limits<double>::infinity();
  std::string report;
};
LagPrices PlayAChange(const std::function<double(double)>& old, const std::function<double(double, double)>& fresh,
                      double drift_prior = OnlinePlanner::Options().drift_prior) {
  Problem p = CheapProblem();
  p.requests.traffic_clock = TrafficClock::kWall;
  p.cost.stall_s = 5.0;
  p.cost.delay_s = 0.5;
  auto loss = [&](double v, double t) {
    return v >= 1000 ? fresh(v, t) : 0.4 + 1.6 * std::exp(-(v - 100) / 300.0) + old(t);
  };
  OnlinePlanner::Options o;
  o.drift_prior = drift_prior;
  OnlinePlanner planner(p, Forecasters(), o);
  std::mt19937_64 rng(11);
  std::normal_distribution<double> e(0.0, 0.01);
  LagPrices out;
  double max_candidate = 0, served_before = 0, served_before2 = 0;
  for (int64_t i = 20; i <= p.total_iterations; i += 20) {
    const double t = planner.TrafficAt(i);
    const double v = loss(static_cast<double>(i), t) + e(rng);
    max_candidate = std::max(max_candidate, v);
    EXPECT_TRUE(planner.Observe(i, v, ObservationKind::kValidation).ok());
    double served = 0;
    if (i > p.warmup_iterations) {
      served = loss(static_cast<double>(planner.served_model()), t) + e(rng);
      EXPECT_TRUE(planner.ObserveServed(served).ok());
    }
    const bool old_after_change = planner.served_model() < 1000 && t > 1000;
    auto now = planner.ShouldCheckpoint(i);
    EXPECT_TRUE(now.ok()) << now.status().ToString();
    if (old_after_change && planner.summary().changes > 0) {
      double* slot = std::fabs(served - served_before) < 0.05 ? &out.flat : &out.rising;
      *slot = std::max(*slot, planner.summary().lag_price);
      if (served - served_before > 0.02 && served_before - served_before2 > 0.02 && drift_prior > 0) {
        // The prior's price per second of stall now: drift_prior x v over
        // the window, x the request rate, x the window's seconds left.
        const int64_t k = static_cast<int64_t>(planner.taken().size());
        const double span = p.WindowEnd(k);
        const double now_s = static_cast<double>(i - p.warmup_iterations) * p.seconds_per_iteration +
                             static_cast<double>(k) * p.cost.stall_s;
        const double prior = drift_prior * v / span * p.requests.RatePerSecond() * std::max(0.0, span - now_s);
        if (prior > 0) out.rising_over_prior = std::min(out.rising_over_prior, planner.summary().lag_price / prior);
      }
    }
    served_before2 = served_before;
    served_before = served;
    if (*now) {
      EXPECT_TRUE(planner.Commit(i).ok());
    }
  }
  out.prior_bound = planner.options().drift_prior * max_candidate * p.requests.RatePerSecond();
  out.report = planner.summary().BriefReport(static_cast<int64_t>(planner.taken().size()));
  return out;
}

// Class-incremental traffic: a model of the old classes rises by 0.25 for two
// measurements (the traffic's first samples of the new classes), so the
// change is detected before the step of 3.0 that follows. Once the step has
// settled, the old model's excess is no rate at which versions trained since
// will decay: the lag price of a stall is the drift prior's, as before any
// change. Read as a rate, the step priced a stall at 365 per second here (and
// held recovered models on class-incremental tables on a host tier:
// bench/README.md, "Seventeenth session"). Fails without the settled-step
// rule in PriceStaleness.
TEST(OnlinePlannerTest, ASettledStepIsNoLagRate) {
  const LagPrices lag = PlayAChange(
      [](double t) { return (t >= 960 && t < 1000 ? 0.25 : 0.0) + 3.0 * std::clamp((t - 1000) / 20.0, 0.0, 1.0); },
      [](double v, double) { return 0.45 + 2.0 * std::exp(-(v - 1000) / 60.0); });
  EXPECT_GT(lag.flat, 0) << "no flat decision priced the lag: the test measures nothing: " << lag.report;
  EXPECT_LE(lag.flat, lag.prior_bound * 1.0001) << lag.report;
}

// A rotation: from 1000 every model's loss rises by 0.01 per traffic
// iteration past max(its own iteration, 1000). While the old model serves
// and keeps rising, its rate is the ramp's, which the versions trained since
// meet too: the lag price takes it. Without a drift prior (0 here) only a
// measured rate prices the lag at all. Fails when a served model from
// before a change never prices the lag by its rate. (Until the fifty-first
// session, with the prior at 1.5, the test asked for a price above the
// prior's bound; the lag is priced over the ramp's expected rest since,
// below that bound here.)
TEST(OnlinePlannerTest, ARampKeepsItsLagRateAcrossAChange) {
  const LagPrices lag = PlayAChange(
      [](double t) { return 0.01 * std::max(0.0, t - 1000); },
      [](double v, double t) { return 0.45 + 2.0 * std::exp(-(v - 1000) / 60.0) + 0.01 * std::max(0.0, t - v); },
      /*drift_prior=*/0.0);
  EXPECT_GT(lag.rising, 0.0) << lag.report;
}

// A slow rotation: from 1000 every model's loss rises by 0.002 per traffic
// iteration past max(its own iteration, 1000). The ramp's rate, fitted on
// the old model's first re-measurements, is below the drift prior's (3):
// while the old model keeps rising, a stall is priced at least as the prior
// prices it, as before any change was seen. Fails without the prior's floor
// on a ramp in PriceStaleness (the price fell to the young ramp's rate).
TEST(OnlinePlannerTest, ARampPricesTheLagAtLeastAsThePriorDoes) {
  const LagPrices lag = PlayAChange(
      [](double t) { return 0.002 * std::max(0.0, t - 1000); },
      [](double v, double t) { return 0.45 + 2.0 * std::exp(-(v - 1000) / 60.0) + 0.002 * std::max(0.0, t - v); },
      /*drift_prior=*/3.0);
  ASSERT_TRUE(std::isfinite(lag.rising_over_prior)) << "no decision on the ramp: the test measures nothing: "
                                                    << lag.report;
  EXPECT_GE(lag.rising_over_prior, 0.999) << lag.report;
}

// Overfitting: the loss falls to 0.4 at 800 and then rises. Nothing measured
// worse than the served version is published, so no version after the turn
// is worse than the best before it.
TEST(OnlinePlannerTest, DoesNotPublishWhileTheCurveRises) {
  const LoopRun r = Play(CheapProblem(),
                     [](double i) { return i <= 800 ? 0.4 + 1.6 * (1 - i / 800.0) : 0.4 + (i - 800) / 2000.0; },
                     0.01);
  for (int64_t s : r.taken) EXPECT_LE(s, 880) << "published at " << s << " while the loss rises";
}

// With the training loss as the metric, measurements are averages of
// training_smoothing batch losses, so decisions come every 25 iterations.
TEST(OnlinePlannerTest, TrainingMetricIsSmoothed) {
  OnlinePlanner::Options o;
  o.metric = ObservationKind::kTraining;
  OnlinePlanner planner(CheapProblem(), Forecasters(), o);
  for (int64_t i = 1; i <= 2000; ++i) {
    ASSERT_TRUE(planner.Observe(i, 0.3 + 2.0 * std::exp(-i / 400.0), ObservationKind::kTraining).ok());
    auto now = planner.ShouldCheckpoint(i);
    ASSERT_TRUE(now.ok());
    if (*now) {
      EXPECT_EQ(i % 25, 0) << "decision between measurements";
      ASSERT_TRUE(planner.Commit(i).ok());
    }
  }
  EXPECT_GT(planner.taken().size(), 3u);
}

// Two domains alternate at `switches` (traffic and training data alike): a
// model is 2.0 worse on the domain it was not trained on last, and on its
// own it re-learns after a switch (1.5 worse, decaying over 100
// iterations). The loop re-measures the served
// and kept models at every measurement, as a producer with a staleness
// table does. Returns the planner and (checkpoint, published model) pairs.
struct DomainRun {
  std::vector<std::pair<int64_t, int64_t>> decisions;
  OnlinePlanner::Summary summary;
};
DomainRun PlayDomains(const std::vector<int64_t>& switches, bool anticipate,
                      const Problem& p = CheapProblem(), bool kept_first = false, bool relearns_first_domain = true,
                      double drift_prior = OnlinePlanner::Options().drift_prior) {
  auto domain = [&](int64_t t) {
    return static_cast<int>(std::upper_bound(switches.begin(), switches.end(), t) - switches.begin()) % 2;
  };
  auto loss = [&](int64_t model, int64_t traffic) {
    const double base = 0.3 + 1.5 * std::exp(-static_cast<double>(traffic) / 300.0);
    if (domain(model) != domain(traffic)) return base + 2.0;
    const auto last = std::upper_bound(switches.begin(), switches.end(), model);
    if (last == switches.begin() || (!relearns_first_domain && domain(model) == 0)) return base;
    return base + 1.5 * std::exp(-static_cast<double>(model - *(last - 1)) / 100.0);
  };
  OnlinePlanner::Options o;
  o.anticipate_returns = anticipate;
  o.drift_prior = drift_prior;
  // The re-publishing rules with every model they may name: the regimes'
  // ends too (a copy at each validation point; no judge here charges it).
  o.regime_ends = RegimeEnds::kEvery;
  OnlinePlanner planner(p, Forecasters(), o);
  std::mt19937_64 rng(11);
  std::normal_distribution<double> e(0.0, 0.01);
  DomainRun run;
  for (int64_t i = 20; i <= p.total_iterations; i += 20) {
    EXPECT_TRUE(planner.Observe(i, loss(i, i) + e(rng), ObservationKind::kValidation).ok());
    if (i > p.warmup_iterations) {
      // The same draws in either order: the served version's first.
      const double served = loss(planner.served_model(), i) + e(rng);
      std::vector<std::pair<int64_t, double>> kept;
      for (int64_t k : planner.KeptVersions()) kept.emplace_back(k, loss(k, i) + e(rng));
      if (!kept_first) {
        EXPECT_TRUE(planner.ObserveServed(served).ok());
      }
      for (const auto& [k, l] : kept) EXPECT_TRUE(planner.ObserveKept(k, l).ok());
      if (kept_first) {
        EXPECT_TRUE(planner.ObserveServed(served).ok());
      }
    }
    auto now = planner.ShouldCheckpoint(i);
    EXPECT_TRUE(now.ok()) << now.status().ToString();
    if (!*now) continue;
    EXPECT_TRUE(planner.Commit(i).ok());
    run.decisions.emplace_back(i, planner.served_model());
  }
  run.summary = planner.summary();
  return run;
}

// Evenly spaced returns (every 300 iterations from 300): after the first
// return is seen (a kept model of two regimes back wins) and the changes at
// 300, 600 and 900 are evenly spaced, the loop publishes the returning
// domain's model at the measurement before each predicted change (1180,
// 1480, 1780), and without anticipation only after it.
TEST(OnlinePlannerTest, AnticipatesAReturnOnceReturnsAreEvenlySpaced) {
  const std::vector<int64_t> switches = {300, 600, 900, 1200, 1500, 1800};
  const DomainRun on = PlayDomains(switches, true), off = PlayDomains(switches, false);
  const std::string report = on.summary.BriefReport(static_cast<int64_t>(on.decisions.size()));
  EXPECT_EQ(on.summary.anticipated, 3) << report;
  EXPECT_EQ(on.summary.anticipation_failed, 0) << report;
  for (int64_t change : {1200, 1500, 1800}) {
    const auto before = std::find_if(on.decisions.begin(), on.decisions.end(),
                                     [&](const auto& d) { return d.first == change - 20; });
    ASSERT_NE(before, on.decisions.end()) << "nothing published just before " << change << ": " << report;
    EXPECT_LT(before->second, change - 300) << "the returning domain's model is from an earlier regime";
  }
  EXPECT_EQ(off.summary.anticipated, 0);
  for (const auto& [at, model] : off.decisions) {
    if (model != at) {
      EXPECT_TRUE(std::find(switches.begin(), switches.end(), at) != switches.end())
          << "without anticipation a re-publish follows a change it has seen, not " << at;
    }
  }
}

// The fourth change comes 200 iterations late: the anticipated publish at
// 1180 is a wrong prediction (the one before it, from the interval of the
// first two changes once the first domain came back, was right). It is counted,
// the loop goes back to the model of the domain still in the traffic before
// the late change, and it does not anticipate again before two new changes.
TEST(OnlinePlannerTest, AReturnThatDoesNotComeStopsAnticipation) {
  const DomainRun run = PlayDomains({300, 600, 900, 1400, 1700}, true);
  const std::string report = run.summary.BriefReport(static_cast<int64_t>(run.decisions.size()));
  EXPECT_EQ(run.summary.anticipated, 2) << report;
  EXPECT_EQ(run.summary.anticipation_failed, 1) << report;
  EXPECT_NE(report.find("1 predicted returns did not come"), std::string::npos) << report;
  bool back = false;
  std::string decisions;
  for (const auto& [at, model] : run.decisions) {
    decisions += " " + std::to_string(at) + ":" + std::to_string(model);
    // Domain 1 (the traffic's from 900 to 1400) was trained in [300, 600) and from 900.
    back = back || (at > 1180 && at < 1400 && ((model >= 300 && model < 600) || (model >= 900 && model < 1400)));
  }
  EXPECT_TRUE(back) << "the served model goes back to the domain of 900-1400:" << decisions << "; " << report;
}

// A reactive re-publish arrives a measurement gap and the delivery lag after
// the switch it reacts to. With returns every 300 iterations and a delay of
// 240 (12 s at 0.05 s per iteration), it would serve its domain for the last
// 40 iterations of each stay and the wrong one for 260 after the next
// switch: once two switches give their spacing, none is made (the first
// return's, before any spacing is known, is). With the cheap delay (2
// iterations) every return is re-published.
TEST(OnlinePlannerTest, SkipsAReactiveRePublishThatWouldArriveTooLate) {
  const std::vector<int64_t> switches = {300, 600, 900, 1200, 1500, 1800};
  Problem slow = CheapProblem();
  slow.cost.delay_s = 12.0;
  auto republished = [](const DomainRun& run) {
    std::vector<int64_t> at;
    for (const auto& [when, model] : run.decisions) {
      if (model != when) at.push_back(when);
    }
    return at;
  };
  const std::vector<int64_t> fast = republished(PlayDomains(switches, false));
  const std::vector<int64_t> late = republished(PlayDomains(switches, false, slow));
  EXPECT_GE(fast.size(), 4u);
  ASSERT_LE(late.size(), 1u);
  if (!late.empty()) {
    EXPECT_LE(late.front(), 620) << "only the first return, before the spacing is known";
  }
}

// Returns that only the served model's re-measurements show, with a slow
// delivery. The producer's own model re-learns after a switch into the
// second domain (a change is detected there) but not after one back into the
// first, which it never forgets: its validation loss does not move there,
// while the served model, of the other domain, jumps by 2.0. With a delay of
// 240 iterations (12 s) against returns every 300, a reactive re-publish is
// skipped once the spacing is known (SkipsAReactiveRePublishThatWouldArrive-
// TooLate). A jump of the served model is a switch, and a kept model of two
// regimes back that wins at one shows the domain came back even when its
// re-publish is skipped: the returns are anticipated, each publish made
// about 240 iterations before the switch it is for. Without either, nothing
// is anticipated.
const std::vector<int64_t> kEvery300 = {300, 600, 900, 1200, 1500, 1800};
// Those returns, the first domain never forgotten, with a delivery delay of
// `delay_s` (20 iterations a second).
DomainRun PlayNeverForgotten(double delay_s) {
  Problem p = CheapProblem();
  p.cost.delay_s = delay_s;
  return PlayDomains(kEvery300, true, p, false, /*relearns_first_domain=*/false);
}
TEST(OnlinePlannerTest, AnticipatesReturnsThatOnlyTheServedModelShows) {
  const std::vector<int64_t>& switches = kEvery300;
  const DomainRun run = PlayNeverForgotten(12.0);
  const std::string report = run.summary.BriefReport(static_cast<int64_t>(run.decisions.size()));
  EXPECT_LE(run.summary.changes, 3) << report;
  EXPECT_GE(run.summary.anticipated, 2) << report;
  EXPECT_EQ(run.summary.anticipation_failed, 0) << report;
  std::string decisions;
  int ahead = 0;
  for (const auto& [at, model] : run.decisions) {
    decisions += " " + std::to_string(at) + ":" + std::to_string(model);
    // A publish for the switch after it: a model of that switch's domain,
    // landing (240 iterations on) within a measurement gap or two of it.
    const auto next = std::upper_bound(switches.begin(), switches.end(), at);
    if (model != at && next != switches.end() && *next - at >= 200 && *next - at <= 260) ++ahead;
  }
  EXPECT_GE(ahead, 2) << "publishes about 240 iterations ahead of a switch:" << decisions << "; " << report;
}

// The same returns with a delivery of 440 iterations (22 s), longer than a
// stay of 300: a model published for the next return as soon as the last
// switch is seen lands 160 iterations after it, more than 0.35 of the
// spacing: it would serve the wrong domain after the switch that follows.
// No return is anticipated (the cycle is still learned from the kept
// models' late wins).
TEST(OnlinePlannerTest, DoesNotAnticipateAReturnItCannotReachInTime) {
  const DomainRun run = PlayNeverForgotten(22.0);
  const std::string report = run.summary.BriefReport(static_cast<int64_t>(run.decisions.size()));
  EXPECT_EQ(run.summary.anticipated, 0) << report;
  EXPECT_EQ(run.summary.anticipation_failed, 0) << report;
}

// Plays a run through `planner` at every 20th iteration up to `last`: the
// producer's own model measuring `own(i)`, and after the warm-up the served
// and kept models re-measured as `loss(model, traffic)`, each with Gaussian
// noise of sd `noise` (one generator seeded `seed`, drawn in that order);
// commits where the planner says so.
template <typename Own, typename Loss>
void PlayReMeasured(OnlinePlanner* planner, const Own& own, const Loss& loss, int64_t last, double noise,
                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> e(0.0, noise);
  for (int64_t i = 20; i <= last; i += 20) {
    ASSERT_TRUE(planner->Observe(i, own(i) + e(rng), ObservationKind::kValidation).ok());
    if (i > planner->problem().warmup_iterations) {
      ASSERT_TRUE(planner->ObserveServed(loss(planner->served_model(), i) + e(rng)).ok());
      for (int64_t k : planner->KeptVersions()) ASSERT_TRUE(planner->ObserveKept(k, loss(k, i) + e(rng)).ok());
    }
    auto now = planner->ShouldCheckpoint(i);
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    if (*now) {
      ASSERT_TRUE(planner->Commit(i).ok());
    }
  }
}

// A switch that only a kept model shows. Every model the producer makes
// after the warm-up is a generalist (the same loss on either domain, and
// it never forgets), so neither the candidate nor the served model moves
// when the traffic switches. The warm-up's model, a specialist of the first
// domain kept for re-publishing, does: 3.0 on the second domain. Its rise
// at the switch away says nothing the planner reads as a switch; its loss
// falling by more than half when the first domain comes back is one (the
// return predictor counts regimes by the switches it is told of; set 17's
// t-swaps500 on host missed the swap back, where the served model had been
// trained across the swap, and counted every later regime one off:
// bench/README.md, "Forty-fifth session").
TEST(OnlinePlannerTest, AKeptModelThatFallsByHalfShowsASwitch) {
  const Problem p = CheapProblem();
  OnlinePlanner::Options o;
  o.record_decisions = true;
  OnlinePlanner planner(p, Forecasters(), o);
  auto curve = [](int64_t model) { return 0.5 + 0.3 * std::exp(-static_cast<double>(model) / 200.0); };
  auto loss = [&](int64_t model, int64_t traffic) {
    if (model > p.warmup_iterations) return curve(model);
    return traffic > 700 && traffic <= 1100 ? 3.0 : curve(model);
  };
  ASSERT_NO_FATAL_FAILURE(PlayReMeasured(&planner, curve, loss, 1400, 0.005, 5));
  const std::string report = planner.summary().BriefReport(static_cast<int64_t>(planner.taken().size()));
  std::string seen;
  for (const auto& d : planner.decisions()) {
    if (d.switches > 0 && seen.empty()) seen = std::to_string(d.iteration);
    if (d.iteration == 1100) {
      EXPECT_EQ(d.switches, 0) << report;
    }
    if (d.iteration == 1120) {
      EXPECT_EQ(d.switches, 1) << report;
      EXPECT_GT(d.served_model, p.warmup_iterations) << "a generalist serves at the return: " << report;
    }
  }
  EXPECT_EQ(seen, "1120") << "the first switch recorded: " << report;
  EXPECT_EQ(planner.summary().changes, 0) << report;
}

// Three domains, each a step further from the first (rotations by 0, 1
// and 2 steps: a model measures 1.5 more per step between the domain it was
// trained on and the traffic's), visited 0, 1, 2, 0, 1, 2, 0 with a short
// stay in domain 2 (800-860: three measurement gaps). The kept warm-up
// model, of domain 0, rises at 800 and falls back at 860: the traffic
// changed domain twice, two switches, though the second comes within four
// measurement gaps of the first (set 23's z-recur3d45f on host, where a
// stall's traffic brought a switch that close: read as one, the regimes
// were counted one short and the cycle was learned as 2; bench/README.md,
// "Forty-eighth session"). Both are recorded, and the return of domain 0
// shows a cycle of three regimes.
TEST(OnlinePlannerTest, ASwitchBackWithinFourGapsIsAnotherSwitch) {
  const Problem p = CheapProblem();
  const std::vector<int64_t> switches = {600, 800, 860, 1200, 1400, 1460};
  auto domain = [&](int64_t t) {
    return static_cast<int>(std::upper_bound(switches.begin(), switches.end(), t) - switches.begin()) % 3;
  };
  auto loss = [&](int64_t model, int64_t traffic) {
    // The producer re-learns after each switch it trains through.
    const auto last = std::upper_bound(switches.begin(), switches.end(), model);
    const double relearning = last == switches.begin() ? 0.0 : std::exp(-static_cast<double>(model - *(last - 1)) / 100.0);
    const double base = 0.3 + 1.5 * std::exp(-static_cast<double>(model) / 300.0) + 1.5 * relearning;
    return base + 1.5 * std::abs(domain(model) - domain(traffic));
  };
  OnlinePlanner::Options o;
  o.record_decisions = true;
  OnlinePlanner planner(p, Forecasters(), o);
  ASSERT_NO_FATAL_FAILURE(PlayReMeasured(
      &planner, [&](int64_t i) { return loss(i, i); }, loss, 1600, 0.01, 7));
  const std::string report = planner.summary().BriefReport(static_cast<int64_t>(planner.taken().size()));
  std::string trace;
  int64_t switches_at_1000 = -1, cycle_at_1000 = -1;
  for (const auto& d : planner.decisions()) {
    trace += " " + std::to_string(d.iteration) + ":" + std::to_string(d.switches) + "/" + std::to_string(d.cycle);
    if (d.iteration == 1000) switches_at_1000 = d.switches, cycle_at_1000 = d.cycle;
  }
  EXPECT_EQ(switches_at_1000, 3) << "600, 800 and 860 (iteration:switches/cycle)" << trace << "; " << report;
  EXPECT_EQ(cycle_at_1000, 3) << trace << "; " << report;
}

// A ramp in the traffic (iterations 800-1400: a model's loss grows by 3 x
// how far the traffic has moved from where it was trained) under the wall
// clock, the served and kept models re-measured at every measurement. With
// a delivery of 160 iterations (8 s), eight measurement gaps, publishes are
// held while the ramp is younger than that (none from 840, where two rises
// are seen, to 900); with a delivery of 50 iterations (2.5 gaps, longer
// than two rises span) and under the producer clock none is.
TEST(OnlinePlannerTest, HoldsAYoungRampOnlyWhereTheLagSpansThreeGapsUnderTheWallClock) {
  auto angle = [](double t) { return std::clamp((t - 800.0) / 600.0, 0.0, 1.0); };
  auto loss = [&](int64_t model, double traffic) {
    const double m = static_cast<double>(model);
    return 0.3 + 1.5 * std::exp(-m / 300.0) + 3.0 * std::fabs(angle(traffic) - angle(m));
  };
  auto play = [&](double delay_s, TrafficClock clock, bool hold, bool kept_first = false) {
    Problem p = CheapProblem();
    p.cost.delay_s = delay_s;
    p.requests.traffic_clock = clock;
    OnlinePlanner::Options o;
    o.hold_young_ramps = hold;
    OnlinePlanner planner(p, Forecasters(), o);
    std::mt19937_64 rng(5);
    std::normal_distribution<double> e(0.0, 0.01);
    std::vector<int64_t> during;  // checkpoints while the ramp (from 800) was younger than the lag
    for (int64_t i = 20; i <= p.total_iterations; i += 20) {
      const double traffic = planner.TrafficAt(i);
      EXPECT_TRUE(planner.Observe(i, loss(i, traffic) + e(rng), ObservationKind::kValidation).ok());
      if (i > p.warmup_iterations) {
        // Re-measured on a fixed sample, as a table's are: no noise.
        if (!kept_first) {
          EXPECT_TRUE(planner.ObserveServed(loss(planner.served_model(), traffic)).ok());
        }
        for (int64_t k : planner.KeptVersions()) EXPECT_TRUE(planner.ObserveKept(k, loss(k, traffic)).ok());
        if (kept_first) {
          EXPECT_TRUE(planner.ObserveServed(loss(planner.served_model(), traffic)).ok());
        }
      }
      auto now = planner.ShouldCheckpoint(i);
      EXPECT_TRUE(now.ok()) << now.status().ToString();
      if (!*now) continue;
      EXPECT_TRUE(planner.Commit(i).ok());
      if (traffic >= 840 && traffic < 900) during.push_back(i);
    }
    return std::make_pair(planner.summary(), during);
  };
  const auto [slow, slow_during] = play(8.0, TrafficClock::kWall, true);
  const std::string report = slow.BriefReport(0);
  EXPECT_GT(slow.ramp_holds, 0) << report;
  EXPECT_NE(report.find("held on a young ramp"), std::string::npos) << report;
  EXPECT_TRUE(slow_during.empty()) << report << " first at "
                                   << (slow_during.empty() ? -1 : slow_during.front());
  const auto [off, off_during] = play(8.0, TrafficClock::kWall, false);
  EXPECT_EQ(off.ramp_holds, 0);
  EXPECT_FALSE(off_during.empty()) << "without the hold the loop publishes on the young ramp: "
                                   << off.BriefReport(0);
  EXPECT_EQ(play(2.9, TrafficClock::kWall, true).first.ramp_holds, 0)
      << "a lag of 58 iterations is under three gaps";
  EXPECT_EQ(play(8.0, TrafficClock::kProducer, true).first.ramp_holds, 0) << "the traffic waits out a stall";
  // A live producer may report the kept models before the served version:
  // one record per iteration holds both, so the hold sees the same history.
  const auto [reversed, reversed_during] = play(8.0, TrafficClock::kWall, true, /*kept_first=*/true);
  EXPECT_EQ(reversed.ramp_holds, slow.ramp_holds);
  EXPECT_EQ(reversed_during, slow_during);
}

// The re-publishes and anticipations of a recurring run do not depend on
// whether the served version or the kept models are re-measured first.
TEST(OnlinePlannerTest, ReMeasurementsMayComeInEitherOrder) {
  const std::vector<int64_t> switches = {300, 600, 900, 1200, 1500, 1800};
  const DomainRun served_first = PlayDomains(switches, true);
  const DomainRun kept_first = PlayDomains(switches, true, CheapProblem(), /*kept_first=*/true);
  EXPECT_GT(served_first.summary.republished, 0) << "the run must exercise the kept models";
  EXPECT_EQ(kept_first.decisions, served_first.decisions);
  EXPECT_EQ(kept_first.summary.republished, served_first.summary.republished);
  EXPECT_EQ(kept_first.summary.anticipated, served_first.summary.anticipated);
}

// Regimes of 6 measurements (every 120 iterations from 300) are shorter than
// min_fit_points: the change detector sees only some switches, late, and
// fits no curve between them. The kept model that wins at each return marks
// the switch, and once three are evenly spaced the returning domain's model
// goes out at the measurement before each switch. Under the drift prior
// of 1.5 (the default until the thirty-seventh session): at 3 fewer
// checkpoints are taken before the first switch, the detector sees the
// switches at 300, 540 and 780 (not 300, 500 and 660), anticipation begins
// a cycle later (760, not 640), and the summary counts 12 anticipated
// publishes of which 11 are at a measurement before a switch (not
// traced; bench/README.md, "Thirty-seventh session").
TEST(OnlinePlannerTest, AnticipatesReturnsTooShortToFitBetween) {
  std::vector<int64_t> switches;
  for (int64_t s = 300; s <= 1990; s += 120) switches.push_back(s);
  const DomainRun run = PlayDomains(switches, true, CheapProblem(), false, true, /*drift_prior=*/1.5);
  const std::string report = run.summary.BriefReport(static_cast<int64_t>(run.decisions.size()));
  EXPECT_GE(run.summary.anticipated, 10) << report;
  EXPECT_EQ(run.summary.anticipation_failed, 0) << report;
  int before = 0;
  std::string decisions;
  for (const auto& [at, model] : run.decisions) {
    before += model != at && std::find(switches.begin(), switches.end(), at + 20) != switches.end();
    decisions += " " + std::to_string(at) + ":" + std::to_string(model);
  }
  EXPECT_EQ(before, run.summary.anticipated)
      << "every anticipated publish is at the measurement before a switch:" << decisions << "; " << report;
}

}  // namespace
}  // namespace schedulers
}  // namespace viper

namespace viper {
namespace schedulers {
namespace {

// The start fields the closed loop re-plans with: the Li Chao solver and the
// O(N^2) reference agree on random noisy curves, windows and start states.
TEST(OnlinePlannerTest, PlanStartFieldsAreExactAgainstTheReference) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int c = 0; c < 200; ++c) {
    Problem p;
    p.warmup_iterations = 5;
    p.total_iterations = 5 + 20 + static_cast<int64_t>(u(rng) * 40);
    p.seconds_per_iteration = 0.5 + u(rng);
    p.cost.stall_s = u(rng);
    p.cost.delay_s = p.cost.stall_s + 2 * u(rng);
    p.requests.interval_s = 0.3;
    if (c % 2) {
      p.requests.window = WindowKind::kRequestCount;
      p.requests.request_count = 20 + static_cast<int64_t>(u(rng) * 150);
    }
    p.drift_per_s = c % 3 == 0 ? 0.01 * u(rng) : 0.0;
    p.min_spacing_iterations = 1 + static_cast<int64_t>(u(rng) * 3);
    std::vector<double> l;
    for (int64_t i = 0; i <= p.total_iterations; ++i) l.push_back(0.2 + u(rng));
    const LossCurve curve(0, l);
    PlanStart st;
    st.checkpoints_taken = c % 4 == 0 ? 0 : 1 + c % 3;
    st.last_checkpoint = p.warmup_iterations + 1 + static_cast<int64_t>(u(rng) * 8);
    st.earliest_iteration = st.last_checkpoint + static_cast<int64_t>(u(rng) * 10);
    if (c % 5 != 0) st.served_loss = 0.2 + u(rng);
    auto fast = SolveOptimal(p, curve, st);
    auto ref = SolveOptimalQuadratic(p, curve, st);
    ASSERT_TRUE(fast.ok() && ref.ok()) << fast.status().ToString() << " / " << ref.status().ToString();
    EXPECT_NEAR(fast->objective, ref->objective, 1e-9 * std::max(1.0, std::fabs(ref->objective))) << "case " << c;
    for (int64_t s : fast->schedule) EXPECT_GE(s, st.earliest_iteration);
  }
  PlanStart bad;
  bad.served_loss = -1.0;
  EXPECT_FALSE(SolveOptimal(CheapProblem(), LossCurve(0, std::vector<double>(2001, 1.0)), bad).ok());
}

}  // namespace
}  // namespace schedulers
}  // namespace viper

namespace viper {
namespace schedulers {
namespace {

// Expensive checkpoints (stall 5 s: 100 warm-up iterations of training;
// delivery 8 s) on a decaying validation curve measured every 20
// iterations with a little noise.
Problem ExpensiveProblem() {
  Problem p = CheapProblem();
  p.cost.stall_s = 5.0;
  p.cost.delay_s = 8.0;
  return p;
}

// Drives `planner` through ExpensiveProblem()'s curve; `before(i)` runs after
// each measurement is observed, `after()` after each checkpoint committed.
OnlinePlanner PlayExpensive(OnlinePlanner planner, const std::function<void(OnlinePlanner*, int64_t)>& before,
                            const std::function<void(OnlinePlanner*)>& after) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> e(0.0, 0.003);
  for (int64_t i = 20; i <= planner.problem().total_iterations; i += 20) {
    const double v = 0.3 + 2.0 * std::exp(-static_cast<double>(i) / 600.0) + e(rng);
    EXPECT_TRUE(planner.Observe(i, v, ObservationKind::kValidation).ok());
    if (before) before(&planner, i);
    auto now = planner.ShouldCheckpoint(i);
    EXPECT_TRUE(now.ok()) << now.status().ToString();
    if (!*now) continue;
    EXPECT_TRUE(planner.Commit(i).ok());
    if (after) after(&planner);
  }
  return planner;
}

// The measured cost of the next update (a delta version moves fewer bytes):
// after SetCost the re-plans charge the new cost, so a planner that learned
// its checkpoints became cheap publishes more of them than one still
// planning with the first version's cost. A bad cost is refused.
TEST(OnlinePlannerTest, PlansWithTheMeasuredCostOfTheNextUpdate) {
  auto run = [&](bool cheaper_after_first) {
    return PlayExpensive(OnlinePlanner(ExpensiveProblem(), Forecasters()), nullptr, [&](OnlinePlanner* planner) {
      if (cheaper_after_first && planner->taken().size() == 1) {
        CheckpointCost delta_cost;
        delta_cost.stall_s = 0.01;
        delta_cost.delay_s = 0.1;
        EXPECT_TRUE(planner->SetCost(delta_cost).ok());
      }
    });
  };
  const OnlinePlanner full = run(false), delta = run(true);
  EXPECT_EQ(full.summary().cost_updates, 0);
  EXPECT_EQ(delta.summary().cost_updates, 1);
  EXPECT_DOUBLE_EQ(delta.problem().cost.stall_s, 0.01);
  EXPECT_GT(delta.taken().size(), full.taken().size() + 2)  // 70 against 3 when written
      << "full: " << full.summary().BriefReport(static_cast<int64_t>(full.taken().size()))
      << "; delta: " << delta.summary().BriefReport(static_cast<int64_t>(delta.taken().size()));
  EXPECT_NE(delta.summary().BriefReport(1).find("cost re-measured 1 times"), std::string::npos);
  OnlinePlanner planner(CheapProblem(), Forecasters());
  CheckpointCost bad;
  bad.stall_s = -1;
  EXPECT_FALSE(planner.SetCost(bad).ok());
  EXPECT_DOUBLE_EQ(planner.problem().cost.stall_s, 0.01);  // unchanged
}

// A run that slows down after its warm-up (a shared machine): the producer
// measures its pace (SetPace) and the re-plans plan the time left on it.
// With expensive checkpoints, a run ten times slower than its warm-up has
// ten times the requests left to serve with each version, so more
// checkpoints pay; a pace within pace_tolerance of the one in use is noise
// and changes nothing.
TEST(OnlinePlannerTest, PlansTheTimeLeftOnTheMeasuredPace) {
  const Problem expensive = ExpensiveProblem();
  auto run = [&](double pace_factor) {
    return PlayExpensive(
        OnlinePlanner(expensive, Forecasters()),
        [&](OnlinePlanner* planner, int64_t i) {
          if (i > expensive.warmup_iterations) {
            EXPECT_TRUE(planner->SetPace(pace_factor * expensive.seconds_per_iteration).ok());
          }
        },
        nullptr);
  };
  const OnlinePlanner warm = run(1.0), noise = run(1.05), slow = run(10.0);
  EXPECT_EQ(warm.summary().pace_updates, 0);
  EXPECT_EQ(noise.summary().pace_updates, 0);  // within the 10% tolerance
  EXPECT_EQ(noise.taken(), warm.taken());
  EXPECT_EQ(slow.summary().pace_updates, 1);
  EXPECT_DOUBLE_EQ(slow.problem().seconds_per_iteration, 0.5);
  EXPECT_GT(slow.taken().size(), warm.taken().size() + 2)
      << "warm-up pace: " << warm.summary().BriefReport(static_cast<int64_t>(warm.taken().size()))
      << "; measured: " << slow.summary().BriefReport(static_cast<int64_t>(slow.taken().size()));
  EXPECT_NE(slow.summary().BriefReport(1).find("pace re-measured (500 ms per iteration at the end)"),
            std::string::npos)
      << slow.summary().BriefReport(1);
  OnlinePlanner planner(CheapProblem(), Forecasters());
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    EXPECT_FALSE(planner.SetPace(bad).ok()) << bad;
  }
  EXPECT_DOUBLE_EQ(planner.problem().seconds_per_iteration, 0.05);  // unchanged
  OnlinePlanner::Options o;
  o.pace_tolerance = -0.1;
  std::string error;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("pace_tolerance"), std::string::npos);
}

// The warm-up model (iteration W, between two measurements) is read between
// the last measurement before W and the first one after it, not at the older
// one alone: on a falling curve that one sits above the model at W by the
// progress made since, and a candidate a few iterations past W looked better
// by that much: on a tier whose stall is 20 iterations (1 s at 0.05 s an
// iteration) it was published, two iterations past W; read between, it is
// no gain worth the stall. A re-measurement of the served version replaces
// the reading; one measured at W itself is read as measured.
TEST(OnlinePlannerTest, TheWarmUpModelIsReadBetweenItsNeighbouringMeasurements) {
  Problem p = CheapProblem();
  p.cost.stall_s = 1.0;
  p.cost.delay_s = 1.0;
  p.warmup_iterations = 98;  // measurements every 20: 80 before W, 100 after
  auto curve = [](double i) { return 0.3 + 2.0 * std::exp(-i / 600.0); };
  OnlinePlanner planner(p, Forecasters());
  for (int64_t i = 20; i <= 80; i += 20) {
    ASSERT_TRUE(planner.Observe(i, curve(static_cast<double>(i)), ObservationKind::kValidation).ok());
  }
  ASSERT_DOUBLE_EQ(*planner.served_loss(), curve(80));
  ASSERT_TRUE(planner.Observe(100, curve(100), ObservationKind::kValidation).ok());
  EXPECT_NEAR(*planner.served_loss(), curve(80) + 0.9 * (curve(100) - curve(80)), 1e-12);
  auto now = planner.ShouldCheckpoint(100);
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_FALSE(*now) << "a model two iterations past W is no gain worth a 20-iteration stall";
  ASSERT_TRUE(planner.Observe(120, curve(120), ObservationKind::kValidation).ok());
  EXPECT_NEAR(*planner.served_loss(), curve(80) + 0.9 * (curve(100) - curve(80)), 1e-12)
      << "only the first measurement past W places the warm-up model";

  OnlinePlanner remeasured(p, Forecasters());
  ASSERT_TRUE(remeasured.Observe(80, curve(80), ObservationKind::kValidation).ok());
  ASSERT_TRUE(remeasured.ObserveServed(1.5).ok());
  ASSERT_TRUE(remeasured.Observe(100, curve(100), ObservationKind::kValidation).ok());
  EXPECT_DOUBLE_EQ(*remeasured.served_loss(), 1.5) << "a re-measured served version is read as measured";

  p.warmup_iterations = 100;
  OnlinePlanner on_grid(p, Forecasters());
  for (int64_t i = 20; i <= 120; i += 20) {
    ASSERT_TRUE(on_grid.Observe(i, curve(static_cast<double>(i)), ObservationKind::kValidation).ok());
  }
  EXPECT_DOUBLE_EQ(*on_grid.served_loss(), curve(100));
}

}  // namespace
}  // namespace schedulers
}  // namespace viper
