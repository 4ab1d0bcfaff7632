#include "viper/simulator/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <random>

namespace viper {
namespace simulator {
namespace {

using schedulers::ArrivalProcess;
using schedulers::LossCurve;
using schedulers::Notification;
using schedulers::WindowKind;

// l(i) = 10 - i on iterations 0..10.
LossCurve LinearCurve(int64_t n = 10) {
  std::vector<double> l;
  for (int64_t i = 0; i <= n; ++i) l.push_back(10.0 - static_cast<double>(i));
  return LossCurve(0, l);
}

// A tiny world where every duration is a binary-exact number: tau = 1 s,
// model 1 byte, snapshot 0.5 s (2 B/s), transfer 1 s (1 B/s), load 0.5 s.
Simulator::Options Tiny(bool synchronous, Notification notify) {
  Simulator::Options o;
  o.problem.warmup_iterations = 0;
  o.problem.total_iterations = 10;
  o.problem.seconds_per_iteration = 1.0;
  o.problem.requests.arrivals = ArrivalProcess::kTrace;
  o.problem.requests.trace_s = {0.0, 4.2, 8.6, 12.0};
  o.problem.requests.window = WindowKind::kWhileTraining;
  o.tier.model_size_bytes = 1.0;
  o.tier.snapshot_bandwidth_bytes_per_s = 2.0;
  o.tier.transfer_bandwidth_bytes_per_s = 1.0;
  o.tier.load_bandwidth_bytes_per_s = 2.0;
  o.tier.synchronous = synchronous;
  o.tier.notification = notify;
  o.tier.poll_period_s = 2.0;
  return o;
}

// A table where every version loses 1 per iteration the traffic has moved
// since it: L(v, t) = 10 - v + (t - v), on iterations 0..10.
StalenessTable LosesOnePerIteration() {
  StalenessTable table;
  for (int64_t v = 0; v <= 10; ++v) {
    for (int64_t t = v; t <= 10; ++t) {
      StalenessRecord r;
      r.version_iteration = v;
      r.traffic_iteration = t;
      r.val_loss = r.test_loss = 10.0 - static_cast<double>(v) + static_cast<double>(t - v);
      table.records.push_back(r);
    }
  }
  return table;
}

// The SyncPushTimeline world on the producer clock, judged on
// LosesOnePerIteration's test_loss, with a device-local copy of 0.25 s
// (4 B/s): KeepCopiesStallTheProducer and RemeasuringPausesStallTheProducer.
Simulator::Options CopyingWorld() {
  Simulator::Options o = Tiny(true, Notification::kPush);
  o.record_requests = true;
  o.problem.requests.traffic_clock = schedulers::TrafficClock::kProducer;
  o.tier.keep_copy_bandwidth_bytes_per_s = 4.0;
  auto surface =
      schedulers::StalenessSurface::Make(LosesOnePerIteration(), schedulers::StalenessSample::kTest);
  if (surface.ok()) o.staleness = std::make_shared<const schedulers::StalenessSurface>(std::move(*surface));
  return o;
}

TEST(SimulatorTest, KeepCopiesStallTheProducer) {
  // The SyncPushTimeline world (stall 1.5 s) with a copy of 0.25 s (4 B/s)
  // at the end of iterations 1, 2 and 4, kept without being published. The
  // checkpoint at 2 starts after both copies there (2.5), the one at 5 after
  // three copies and one stall (5 + 1.5 + 0.75 = 7.25); they are servable at
  // 4.5 and 9.25. Producer clock: iteration i ends at i plus the stalls and
  // copies before it, so the requests at 0, 4.2, 8.6 and 12 see traffic 0,
  // 2, 5 and 8 (iteration 9 ends at 12.75), served by v0, v0, v1 (2), v2
  // (5) on L(v, t) = 10 - v + (t - v): 10 + 12 + 11 + 8 = 41.
  Simulator::Options o = CopyingWorld();
  ASSERT_TRUE(o.staleness);
  o.kept_at = {1, 2, 4};
  auto r = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->versions[1].checkpoint_s, 2.5);
  EXPECT_DOUBLE_EQ(r->versions[2].checkpoint_s, 7.25);
  EXPECT_DOUBLE_EQ(*r->versions[1].servable_s, 4.5);
  EXPECT_DOUBLE_EQ(*r->versions[2].servable_s, 9.25);
  EXPECT_EQ(r->keep_copies, 3);
  EXPECT_DOUBLE_EQ(r->slowdown_s, 3.75);
  EXPECT_DOUBLE_EQ(r->training_end_s, 13.75);
  EXPECT_EQ(r->keep_copy_start_s, (std::vector<double>{1.0, 2.25, 6.0}));
  ASSERT_EQ(r->request_log.size(), 4u);
  EXPECT_EQ(r->request_log[3].traffic_iteration, 8);
  EXPECT_DOUBLE_EQ(r->cil, 41.0);
  EXPECT_NE(r->BriefReport().find("3 keep copies of 0.25 s"), std::string::npos) << r->BriefReport();
  EXPECT_NE(r->ChromeTrace().find("keep copy"), std::string::npos);
  // The wall clock: the traffic moves on through the copies (0, 4, 8, 10):
  // 10 + 14 + 14 + 10 = 48, where without them it is 38.
  o.problem.requests.traffic_clock = schedulers::TrafficClock::kWall;
  auto wall = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(wall.ok()) << wall.status().ToString();
  EXPECT_DOUBLE_EQ(wall->cil, 48.0);
  o.kept_at.clear();
  EXPECT_DOUBLE_EQ(Simulator(o).Run(LinearCurve(), {2, 5})->cil, 38.0);
  // Copies at one iteration twice, or outside (W, N]: refused by name.
  for (std::vector<int64_t> bad : {std::vector<int64_t>{2, 2}, std::vector<int64_t>{0}, std::vector<int64_t>{11}}) {
    o.kept_at = bad;
    auto refused = Simulator(o).Run(LinearCurve(), {2, 5});
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("kept_at["), std::string::npos) << refused.status().message();
  }
  o.kept_at.clear();
  o.tier.keep_copy_bandwidth_bytes_per_s = 0;
  EXPECT_FALSE(Simulator(o).Run(LinearCurve(), {2, 5}).ok());
}

TEST(SimulatorTest, RemeasuringPausesStallTheProducerAsCopiesDo) {
  // KeepCopiesStallTheProducer's world, the three copies' 0.75 s now
  // re-measuring pauses (Plan::pauses): one copy of 0.25 s at 2, and pauses
  // of 0.25 s at 1 and 0.25 s at 4. Every time is as with the copies (the
  // pause at 4 comes before the checkpoint at 5 as a copy at 4 did); a
  // pause at the copy's own iteration comes after the copy.
  Simulator::Options o = CopyingWorld();
  ASSERT_TRUE(o.staleness);
  o.kept_at = {2};
  o.pauses = {{1, 0.25}, {4, 0.25}};
  auto r = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->versions[1].checkpoint_s, 2.5);
  EXPECT_DOUBLE_EQ(r->versions[2].checkpoint_s, 7.25);
  EXPECT_DOUBLE_EQ(r->slowdown_s, 3.75);
  EXPECT_DOUBLE_EQ(r->training_end_s, 13.75);
  EXPECT_EQ(r->pauses, 2);
  EXPECT_DOUBLE_EQ(r->pause_s, 0.5);
  EXPECT_DOUBLE_EQ(r->cil, 41.0);
  EXPECT_NE(r->BriefReport().find("2 re-measuring pauses"), std::string::npos) << r->BriefReport();
  EXPECT_NE(r->ChromeTrace().find("re-measure"), std::string::npos);
  // A pause where the copy is: after it (the copy ends at 2.25 + 0.25).
  o.pauses = {{2, 0.5}};
  auto both = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_DOUBLE_EQ(both->versions[1].checkpoint_s, 2.75);
  ASSERT_EQ(both->pause_spans_s.size(), 1u);
  EXPECT_DOUBLE_EQ(both->pause_spans_s[0].first, 2.25);
  EXPECT_DOUBLE_EQ(both->pause_spans_s[0].second, 2.75);
  // Twice at one iteration, outside (W, N], or of no finite length: refused by name.
  for (std::vector<std::pair<int64_t, double>> bad :
       {std::vector<std::pair<int64_t, double>>{{2, 0.1}, {2, 0.1}},
        {{0, 0.1}},
        {{11, 0.1}},
        {{3, -1.0}},
        {{3, std::numeric_limits<double>::infinity()}}}) {
    o.pauses = bad;
    auto refused = Simulator(o).Run(LinearCurve(), {2, 5});
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("pauses["), std::string::npos) << refused.status().message();
  }
}

TEST(SimulatorTest, ADecisionThatWaitedDelaysItsCheckpointAndStallsNothing) {
  // Re-measured beside training (Options::waits): the decision at 2 waited
  // 0.5 s, so the checkpoint there starts 0.5 s later; the producer trained
  // on, so nothing else moves (the wait at 3 has no checkpoint to delay).
  Simulator::Options o = CopyingWorld();
  o.kept_at.clear();
  auto base = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  o.waits = {{2, 0.5}, {3, 0.25}};
  auto r = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->versions[1].checkpoint_s, base->versions[1].checkpoint_s + 0.5);
  EXPECT_DOUBLE_EQ(r->versions[2].checkpoint_s, base->versions[2].checkpoint_s);
  EXPECT_DOUBLE_EQ(*r->versions[1].servable_s, *base->versions[1].servable_s + 0.5);
  EXPECT_DOUBLE_EQ(r->slowdown_s, base->slowdown_s);
  EXPECT_DOUBLE_EQ(r->training_end_s, base->training_end_s);
  EXPECT_DOUBLE_EQ(r->wait_s, 0.5);
  EXPECT_EQ(r->pauses, 0);
  // Version 1 is servable at 4.5 s, not 4: the request at 4.2 s is served
  // the warm-up's model instead.
  EXPECT_DOUBLE_EQ(*base->versions[1].servable_s, 4.0);
  EXPECT_GT(r->cil, base->cil);
  // A wait past the next checkpoint's start (a live helper that overran):
  // the versions still leave in order, the first with the second.
  o.waits = {{2, 10.0}};
  auto late = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_DOUBLE_EQ(late->versions[1].checkpoint_s, base->versions[2].checkpoint_s);
  EXPECT_DOUBLE_EQ(late->versions[2].checkpoint_s, base->versions[2].checkpoint_s);
  for (std::vector<std::pair<int64_t, double>> bad :
       {std::vector<std::pair<int64_t, double>>{{3, 0.1}, {2, 0.1}},
        {{0, 0.1}},
        {{11, 0.1}},
        {{3, std::numeric_limits<double>::quiet_NaN()}}}) {
    o.waits = bad;
    auto refused = Simulator(o).Run(LinearCurve(), {2, 5});
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("waits["), std::string::npos) << refused.status().message();
  }
}

TEST(SimulatorTest, DefaultOptionsAreValid) {
  std::string error;
  EXPECT_TRUE(Simulator::Options().IsValid(&error)) << error;
}

TEST(SimulatorTest, AStalenessTableChargesTheTrafficOfTheRequestsTime) {
  // The SyncPushTimeline world below, judged on a table where every version
  // loses 1 per iteration the traffic has moved since it: L(v, t) = 10 - v + (t - v).
  // Iteration i ends at i + 1.5 x (checkpoints before i). Requests at 0, 4.2,
  // 8.6, 12 see traffic 0, 2 (iteration 3 ends at 4.5), 5 (6 ends at 9) and 9
  // (9 ends at 12), served by v0, v1 (2), v2 (5), v2: 10 + 8 + 5 + 9 = 32,
  // where the diagonal charges the last one 5 (28 in all).
  StalenessTable table = LosesOnePerIteration();
  Simulator::Options o = Tiny(true, Notification::kPush);
  o.record_requests = true;
  o.problem.requests.traffic_clock = schedulers::TrafficClock::kProducer;
  auto surface = schedulers::StalenessSurface::Make(table, schedulers::StalenessSample::kTest);
  ASSERT_TRUE(surface.ok());
  o.staleness = std::make_shared<const schedulers::StalenessSurface>(std::move(*surface));
  auto r = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->cil, 32.0);
  EXPECT_EQ(r->judge, "staleness table");
  ASSERT_EQ(r->request_log.size(), 4u);
  EXPECT_EQ(r->request_log[3].traffic_iteration, 9);
  EXPECT_NE(r->RequestCsv().find("12,2,5,9,9\n"), std::string::npos) << r->RequestCsv();
  // The wall clock: iteration i ends at i whatever the stalls, so the
  // requests see traffic 0, 4, 8 and 10 (training's end caps it): 10 + 10 +
  // 8 + 10 = 38.
  o.problem.requests.traffic_clock = schedulers::TrafficClock::kWall;
  auto wall = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(wall.ok()) << wall.status().ToString();
  EXPECT_DOUBLE_EQ(wall->cil, 38.0);
  EXPECT_EQ(wall->request_log[1].traffic_iteration, 4);
  EXPECT_EQ(wall->request_log[3].traffic_iteration, 10);
  o.problem.requests.traffic_clock = schedulers::TrafficClock::kProducer;
  // Re-publishing: the checkpoint at 5 publishes the kept model of iteration
  // 2, charged as such: 10 + 8 + (8 + 3) + (8 + 7) = 44; the CSV names the
  // served model's iteration.
  o.published = {2, 2};
  auto again = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_DOUBLE_EQ(again->cil, 44.0);
  EXPECT_EQ(again->versions[2].iteration, 5);
  EXPECT_EQ(again->versions[2].model_iteration, 2);
  EXPECT_NE(again->RequestCsv().find("12,2,2,9,15\n"), std::string::npos) << again->RequestCsv();
  o.published = {2, 6};  // a model the checkpoint at 5 cannot have
  auto future = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_FALSE(future.ok());
  EXPECT_NE(future.status().message().find("published[1] = 6"), std::string::npos) << future.status().message();
  o.published = {2};
  EXPECT_FALSE(Simulator(o).Run(LinearCurve(), {2, 5}).ok());
  o.published.clear();
  auto diagonal = Simulator(Tiny(true, Notification::kPush)).Run(LinearCurve(), {2, 5});
  EXPECT_DOUBLE_EQ(diagonal->cil, 28.0);
  EXPECT_EQ(diagonal->judge, "diagonal");
  // A table that starts after W cannot judge version 0: an error naming the pair.
  table.records.erase(std::remove_if(table.records.begin(), table.records.end(), [](const StalenessRecord& x) { return x.version_iteration == 0; }), table.records.end());
  auto late = schedulers::StalenessSurface::Make(table, schedulers::StalenessSample::kTest);
  o.staleness = std::make_shared<const schedulers::StalenessSurface>(std::move(*late));
  auto refused = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("version 0, traffic 10"), std::string::npos) << refused.status().message();
}

TEST(SimulatorTest, SyncPushTimeline) {
  // Sync: stall = snapshot + transfer = 1.5 s.
  // v1: T = 2, snapshot 2.5, transfer 2.5-3.5, pushed 3.5, load 3.5-4.0.
  // v2: T = 5 + 1.5 = 6.5, snapshot 7.0, transfer 7.0-8.0, load 8.0-8.5.
  // Training ends at 10 + 2 * 1.5 = 13. Requests at 0, 4.2, 8.6, 12 are
  // served by v0, v1, v2, v2: CIL = 10 + 8 + 5 + 5 = 28.
  Simulator sim(Tiny(true, Notification::kPush));
  auto r = sim.Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->cil, 28.0);
  EXPECT_EQ(r->requests, 4);
  EXPECT_DOUBLE_EQ(r->slowdown_s, 3.0);
  EXPECT_DOUBLE_EQ(r->training_end_s, 13.0);
  EXPECT_DOUBLE_EQ(r->versions[1].checkpoint_s, 2.0);
  EXPECT_DOUBLE_EQ(*r->versions[1].transfer_end_s, 3.5);
  EXPECT_DOUBLE_EQ(*r->versions[1].servable_s, 4.0);
  EXPECT_DOUBLE_EQ(r->versions[2].checkpoint_s, 6.5);
  EXPECT_DOUBLE_EQ(*r->versions[2].servable_s, 8.5);
  EXPECT_DOUBLE_EQ(*r->versions[2].UpdateLatency(), 2.0);
  EXPECT_EQ(r->versions[0].requests, 1);
  EXPECT_EQ(r->versions[1].requests, 1);
  EXPECT_EQ(r->versions[2].requests, 2);
  // Staleness: 0 - 0, 4.2 - 2, 8.6 - 6.5, 12 - 6.5 -> mean (0 + 2.2 + 2.1 + 5.5) / 4 = 2.45.
  EXPECT_NEAR(*r->mean_staleness_s, 2.45, 1e-12);
}

TEST(SimulatorTest, ADivergedVersionIsChargedInfinity) {
  // SyncPushTimeline's world with the model diverged from iteration 4 on
  // (+inf): publishing 2 and 5, v2 serves 2 requests from a diverged model
  // (CIL +inf); publishing 2 and 3 serves none (CIL 10 + 8 + 7 + 7 = 32).
  LossCurve curve = LinearCurve();
  std::vector<double> l = curve.losses();
  for (size_t i = 4; i < l.size(); ++i) l[i] = std::numeric_limits<double>::infinity();
  const LossCurve diverged(0, l);
  Simulator sim(Tiny(true, Notification::kPush));
  auto bad = sim.Run(diverged, {2, 5});
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  EXPECT_EQ(bad->diverged_requests, 2);
  EXPECT_EQ(bad->cil, std::numeric_limits<double>::infinity());
  EXPECT_NE(bad->BriefReport().find("2 requests served by a diverged model"), std::string::npos);
  auto good = sim.Run(diverged, {2, 3});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->diverged_requests, 0);
  EXPECT_DOUBLE_EQ(good->cil, 32.0);
  // Version 0 serves first: a curve diverged at W is an error, as is NaN.
  l[0] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(sim.Run(LossCurve(0, l), {2}).ok());
  l[0] = 10;
  l[5] = std::nan("");
  EXPECT_FALSE(sim.Run(LossCurve(0, l), {2}).ok());
}

TEST(SimulatorTest, SyncPollTimeline) {
  // Polling every 2 s from phase 0: v1's transfer ends at 3.5, found at the
  // 4.0 poll, loaded 4.0-4.5, so the request at 4.2 still gets v0. v2's ends
  // at 8.0, exactly a poll: loaded 8.0-8.5. CIL = 10 + 10 + 5 + 5 = 30.
  Simulator sim(Tiny(true, Notification::kPoll));
  auto r = sim.Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->versions[1].discovered_s, 4.0);
  EXPECT_DOUBLE_EQ(*r->versions[1].servable_s, 4.5);
  EXPECT_DOUBLE_EQ(*r->versions[2].discovered_s, 8.0);
  EXPECT_DOUBLE_EQ(r->cil, 30.0);
}

TEST(SimulatorTest, AsyncPushTimeline) {
  // Async: stall = snapshot = 0.5 s. v1: T = 2, servable 2 + 0.5 + 1 + 0.5 = 4.0.
  // v2: T = 5.5, servable 7.5. Training ends at 10 + 1 = 11, so the request
  // at 12 falls outside the window. Requests 0, 4.2, 8.6 -> v0, v1, v2 = 23.
  Simulator sim(Tiny(false, Notification::kPush));
  auto r = sim.Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->training_end_s, 11.0);
  EXPECT_DOUBLE_EQ(r->slowdown_s, 1.0);
  EXPECT_DOUBLE_EQ(*r->versions[2].servable_s, 7.5);
  EXPECT_EQ(r->requests, 3);
  EXPECT_DOUBLE_EQ(r->cil, 23.0);
}

TEST(SimulatorTest, AsyncPollTimeline) {
  // v1 transfer ends 3.5 -> poll 4.0 -> servable 4.5; v2 ends 7.0 -> poll 8.0
  // -> servable 8.5. Requests 0, 4.2, 8.6 -> v0, v0, v2 = 25.
  Simulator sim(Tiny(false, Notification::kPoll));
  auto r = sim.Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->versions[2].servable_s, 8.5);
  EXPECT_DOUBLE_EQ(r->cil, 25.0);
}

TEST(SimulatorTest, AsyncSendsCoalesce) {
  // Transfer 4 s. v1: T = 1, snapshot 1.5, sends 1.5-5.5. v2: T = 2.5,
  // snapshot at 3.0 waits. v3: T = 4.0, snapshot at 4.5 replaces v2. At 5.5
  // v3 is sent (5.5-9.5) and v2 is never sent nor served.
  auto o = Tiny(false, Notification::kPush);
  o.tier.transfer_bandwidth_bytes_per_s = 0.25;
  Simulator sim(o);
  auto r = sim.Run(LinearCurve(), {1, 2, 3});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->superseded_versions, 1);
  EXPECT_TRUE(r->versions[2].superseded);
  EXPECT_FALSE(r->versions[2].servable_s.has_value());
  EXPECT_DOUBLE_EQ(*r->versions[3].transfer_start_s, 5.5);
  EXPECT_DOUBLE_EQ(*r->versions[3].servable_s, 10.0);
  EXPECT_DOUBLE_EQ(*r->versions[1].servable_s, 6.0);
}

TEST(SimulatorTest, PollerLoadsOnlyTheNewestCompleteVersion) {
  // Poll period 8 s: v1 (ends 3.5) and v2 (ends 7.0, async) are both complete
  // at the 8.0 poll; only v2 is loaded.
  auto o = Tiny(false, Notification::kPoll);
  o.tier.poll_period_s = 8.0;
  Simulator sim(o);
  auto r = sim.Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->versions[1].superseded);
  EXPECT_FALSE(r->versions[1].servable_s.has_value());
  EXPECT_DOUBLE_EQ(*r->versions[2].servable_s, 8.5);
}

TEST(SimulatorTest, DriftChargesAge) {
  // rho = 1 per second: request at 4.2 served by v1 (T = 2) costs 8 + 2.2.
  auto o = Tiny(true, Notification::kPush);
  o.problem.drift_per_s = 1.0;
  o.problem.requests.trace_s = {4.2};
  Simulator sim(o);
  auto r = sim.Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->cil, 10.2, 1e-12);
}

// For fixed-rate requests and push notification, the simulator must count
// exactly what the CIL model's discrete mode counts (DESIGN.md §1), for any
// schedule, sync or async without coalescing.
TEST(SimulatorTest, MatchesCilModelDiscreteCounting) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    Simulator::Options o;
    o.problem.warmup_iterations = 20;
    o.problem.total_iterations = 400;
    o.problem.seconds_per_iteration = 0.5;
    o.problem.requests.arrivals = trial % 2 ? ArrivalProcess::kPoisson : ArrivalProcess::kFixedRate;
    o.problem.requests.interval_s = 0.375;
    o.problem.requests.seed = static_cast<uint64_t>(trial);
    o.problem.requests.window = trial % 3 == 0 ? WindowKind::kRequestCount : WindowKind::kWhileTraining;
    o.problem.requests.request_count = 300;
    o.problem.drift_per_s = (trial % 4 == 0) ? 0.01 : 0.0;
    o.tier.model_size_bytes = 1.0;
    o.tier.snapshot_bandwidth_bytes_per_s = 4.0;   // 0.25 s
    o.tier.transfer_bandwidth_bytes_per_s = 2.0;   // 0.5 s
    o.tier.load_bandwidth_bytes_per_s = 4.0;       // 0.25 s
    o.tier.synchronous = trial % 2 == 0;
    std::vector<double> losses;
    double l = 3.0;
    for (int64_t i = 20; i <= 400; ++i) {
      l *= 0.995 + 0.004 * std::uniform_real_distribution<double>(0, 1)(rng);
      losses.push_back(l);
    }
    LossCurve curve(20, losses);
    // Checkpoints at least 2 iterations (1 s) apart: the async sender (0.5 s)
    // is idle at every snapshot, so nothing coalesces.
    schedulers::Schedule s;
    for (int64_t i = 21; i <= 400; i += 2 + static_cast<int64_t>(rng() % 30)) s.push_back(i);
    Simulator sim(o);
    auto r = sim.Run(curve, s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    schedulers::Problem p = o.problem;
    p.cost = o.tier.ToCheckpointCost();
    auto ev = schedulers::Evaluate(p, curve, s, schedulers::CountingMode::kDiscrete);
    ASSERT_TRUE(ev.ok()) << ev.status().ToString();
    EXPECT_NEAR(r->cil, ev->cil, 1e-9 * ev->cil) << "trial " << trial;
    EXPECT_EQ(static_cast<double>(r->requests), ev->requests) << "trial " << trial;
    EXPECT_EQ(r->superseded_versions, 0);
  }
}

TEST(SimulatorTest, PerIterationTimesFromTheLog) {
  // Iterations 1..10 take 1 s except iteration 3, which takes 5 s (an epoch
  // boundary pause): a checkpoint after iteration 5 starts at 9 s.
  auto o = Tiny(false, Notification::kPush);
  o.iteration_times_s.assign(10, 1.0);
  o.iteration_times_s[2] = 5.0;
  Simulator sim(o);
  auto r = sim.Run(LinearCurve(), {5});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->versions[1].checkpoint_s, 9.0);
  EXPECT_DOUBLE_EQ(r->training_end_s, 14.5);
}

TEST(SimulatorTest, GoldenSeededRun) {
  // Golden output of a seeded Poisson run, recorded from this engine and
  // checked for plausibility: window 900 * 0.25 + 4 * 0.06 s stall = 225.24 s
  // at 2 requests/s is ~450 requests of mean loss ~0.88. (Regression guard:
  // any change to event order, arrivals or accounting shows up here).
  Simulator::Options o;
  o.problem.warmup_iterations = 100;
  o.problem.total_iterations = 1000;
  o.problem.seconds_per_iteration = 0.25;
  o.problem.requests.arrivals = ArrivalProcess::kPoisson;
  o.problem.requests.interval_s = 0.5;
  o.problem.requests.seed = 7;
  o.tier.model_size_bytes = 600e6;
  o.tier.snapshot_bandwidth_bytes_per_s = 10e9;
  o.tier.transfer_bandwidth_bytes_per_s = 2e9;
  o.tier.load_bandwidth_bytes_per_s = 5e9;
  o.tier.synchronous = false;
  std::vector<double> losses;
  for (int64_t i = 100; i <= 1000; ++i) losses.push_back(0.3 + 2.0 * std::exp(-static_cast<double>(i) / 300.0));
  Simulator sim(o);
  auto r = sim.Run(LossCurve(100, losses), {200, 300, 450, 700});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->BriefReport(), "cil 401.524 over 455 requests, 4 checkpoints, slowdown 0.240 s, staleness 27.254 s");
}

TEST(SimulatorTest, RejectsBadInput) {
  auto o = Tiny(true, Notification::kPush);
  o.problem.requests.arrivals = ArrivalProcess::kFixedRate;
  o.problem.requests.interval_s = 0.0;  // zero request rate
  auto r = Simulator(o).Run(LinearCurve(), {2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("interval_s"), std::string::npos) << r.status().message();

  o = Tiny(true, Notification::kPush);
  o.tier.transfer_latency_s = -1.0;  // negative cost
  r = Simulator(o).Run(LinearCurve(), {2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("latency"), std::string::npos) << r.status().message();

  r = Simulator(Tiny(true, Notification::kPush)).Run(LinearCurve(), {5, 2});  // unsorted
  ASSERT_FALSE(r.ok());
  r = Simulator(Tiny(true, Notification::kPush)).Run(LinearCurve(5), {2});  // curve too short
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("true loss curve"), std::string::npos) << r.status().message();
}

TEST(SimulatorTest, TraceAndCsvOutputs) {
  auto o = Tiny(true, Notification::kPush);
  o.record_requests = true;
  // The traffic column on the producer's clock: iteration 2 at 4.2 s.
  o.problem.requests.traffic_clock = schedulers::TrafficClock::kProducer;
  auto r = Simulator(o).Run(LinearCurve(), {2, 5});
  ASSERT_TRUE(r.ok());
  const std::string csv = r->RequestCsv();
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "time_s,version,iteration,traffic_iteration,loss");
  EXPECT_NE(csv.find("4.2,1,2,2,8\n"), std::string::npos) << csv;
  const std::string trace = r->ChromeTrace();
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("send v2"), std::string::npos);
  EXPECT_NE(trace.find("serving v1"), std::string::npos);
}

}  // namespace
}  // namespace simulator
}  // namespace viper
