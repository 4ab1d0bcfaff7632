#include "viper/schedulers/cil_model.h"

#include <gtest/gtest.h>

#include <string>

namespace viper {
namespace schedulers {
namespace {

// W = 0, N = 10, tau = 1 s, one request per second while training, l(i) = 10 - i.
Problem TenIterations() {
  Problem p;
  p.warmup_iterations = 0;
  p.total_iterations = 10;
  p.seconds_per_iteration = 1.0;
  p.requests.interval_s = 1.0;
  return p;
}

LossCurve Linear() {
  std::vector<double> l;
  for (int i = 0; i <= 10; ++i) l.push_back(10.0 - i);
  return LossCurve(0, l);
}

TEST(ProblemTest, DefaultsAreValid) {
  std::string error;
  EXPECT_TRUE(Problem().IsValid(&error)) << error;
  EXPECT_TRUE(RequestModel().IsValid(&error)) << error;
  EXPECT_TRUE(CheckpointCost().IsValid(&error)) << error;
  EXPECT_TRUE(TierCost().IsValid(&error)) << error;
}

TEST(ProblemTest, InvalidFieldsAreNamed) {
  Problem p = TenIterations();
  p.total_iterations = 0;
  std::string error;
  EXPECT_FALSE(p.IsValid(&error));
  EXPECT_NE(error.find("total_iterations"), std::string::npos) << error;
  p = TenIterations();
  p.cost.stall_s = -1;
  EXPECT_FALSE(p.IsValid(&error));
  EXPECT_NE(error.find("stall_s"), std::string::npos) << error;
  p = TenIterations();
  p.requests.window = WindowKind::kRequestCount;
  EXPECT_FALSE(p.IsValid(&error));
  EXPECT_NE(error.find("request_count"), std::string::npos) << error;
}

TEST(ProblemTest, EnumsRoundTrip) {
  for (auto m : {CountingMode::kFluid, CountingMode::kDiscrete, CountingMode::kViper}) {
    EXPECT_EQ(*CountingModeFromString(ToString(m)), m);
  }
  for (auto w : {WindowKind::kWhileTraining, WindowKind::kRequestCount, WindowKind::kEndTime}) {
    EXPECT_EQ(*WindowKindFromString(ToString(w)), w);
  }
  for (auto a : {ArrivalProcess::kFixedRate, ArrivalProcess::kPoisson, ArrivalProcess::kTrace}) {
    EXPECT_EQ(*ArrivalProcessFromString(ToString(a)), a);
  }
  EXPECT_FALSE(CountingModeFromString("nope").ok());
}

TEST(ProblemTest, TierCostDerivesStallAndDelay) {
  TierCost t;
  t.model_size_bytes = 1e9;
  t.snapshot_bandwidth_bytes_per_s = 1e10;  // 0.1 s
  t.transfer_latency_s = 0.05;
  t.transfer_bandwidth_bytes_per_s = 2e9;   // 0.5 s
  t.load_bandwidth_bytes_per_s = 4e9;       // 0.25 s
  t.synchronous = false;
  t.notification = Notification::kPoll;
  t.poll_period_s = 2.0;                    // mean discovery 1 s
  CheckpointCost c = t.ToCheckpointCost();
  EXPECT_DOUBLE_EQ(c.stall_s, 0.1);
  EXPECT_DOUBLE_EQ(c.delay_s, 0.1 + 0.55 + 1.0 + 0.25);
  t.synchronous = true;
  EXPECT_DOUBLE_EQ(t.ToCheckpointCost().stall_s, 0.65);
}

// No costs: version 0 (loss 10) serves [0, 5), version 1 (loss 5) serves [5, 10):
// 5*10 + 5*5 = 75 in all three counting modes.
TEST(CilModelTest, FreeCheckpointHandComputed) {
  for (auto mode : {CountingMode::kFluid, CountingMode::kDiscrete, CountingMode::kViper}) {
    auto ev = Evaluate(TenIterations(), Linear(), {5}, mode);
    ASSERT_TRUE(ev.ok()) << ev.status().ToString();
    EXPECT_NEAR(ev->cil, 75.0, 1e-9) << ToString(mode);
    EXPECT_NEAR(ev->requests_per_version[0], 5.0, 1e-9);
    EXPECT_NEAR(ev->requests_per_version[1], 5.0, 1e-9);
  }
}

// sigma = 1, delta = 2: T_1 = 5, A_1 = 7, training ends at R = 10 + 1 = 11.
// Fluid: 7*10 + 4*5 = 90. Discrete: arrivals 0..10, 7 before A_1 -> same 90.
// Viper: count = floor((5*1 + t_p 1 + t_c 1)/1) = 7 -> 70, the 4 left of
// M = 11 at loss 5 -> 20: 90.
TEST(CilModelTest, StallAndDelayHandComputed) {
  Problem p = TenIterations();
  p.cost.stall_s = 1.0;
  p.cost.delay_s = 2.0;
  for (auto mode : {CountingMode::kFluid, CountingMode::kDiscrete, CountingMode::kViper}) {
    auto ev = Evaluate(p, Linear(), {5}, mode);
    ASSERT_TRUE(ev.ok());
    EXPECT_NEAR(ev->cil, 90.0, 1e-9) << ToString(mode);
    EXPECT_NEAR(ev->window_end_s, 11.0, 1e-12);
    EXPECT_NEAR(ev->slowdown_s, 1.0, 1e-12);
  }
  // Fluid staleness: v0 on [0,7] from T=0 -> integral 24.5; v1 on [7,11] from T=5 -> (36-4)/2 = 16.
  auto ev = Evaluate(p, Linear(), {5}, CountingMode::kFluid);
  EXPECT_NEAR(*ev->mean_staleness_s, (24.5 + 16.0) / 11.0, 1e-12);
}

// A fixed window of M = 8 requests (R = 8 s): v0 on [0,7] = 70, v1 on [7,8] = 5.
TEST(CilModelTest, RequestCountWindow) {
  Problem p = TenIterations();
  p.cost.stall_s = 1.0;
  p.cost.delay_s = 2.0;
  p.requests.window = WindowKind::kRequestCount;
  p.requests.request_count = 8;
  for (auto mode : {CountingMode::kFluid, CountingMode::kDiscrete, CountingMode::kViper}) {
    auto ev = Evaluate(p, Linear(), {5}, mode);
    ASSERT_TRUE(ev.ok());
    EXPECT_NEAR(ev->cil, 75.0, 1e-9) << ToString(mode);
  }
  // A checkpoint servable only after the window (A = 9 + 2 > 8) serves nobody.
  auto ev = Evaluate(p, Linear(), {9}, CountingMode::kFluid);
  EXPECT_NEAR(ev->cil, 80.0, 1e-9);
  EXPECT_EQ(ev->unserved_versions, 1);
}

// Drift 0.1/s: v0 on [0,5] from T=0: 50 + 0.05*25; v1 on [5,10] from T=5: 25 + 0.05*25.
TEST(CilModelTest, DriftHandComputed) {
  Problem p = TenIterations();
  p.drift_per_s = 0.1;
  auto ev = Evaluate(p, Linear(), {5}, CountingMode::kFluid);
  ASSERT_TRUE(ev.ok());
  EXPECT_NEAR(ev->cil, 77.5, 1e-9);
  // Discrete: v0 requests at 0..4: 50 + 0.1*(0+1+2+3+4); v1 at 5..9: 25 + 0.1*(0+..+4).
  ev = Evaluate(p, Linear(), {5}, CountingMode::kDiscrete);
  EXPECT_NEAR(ev->cil, 77.0, 1e-9);
}

TEST(CilModelTest, RejectsBadSchedules) {
  EXPECT_FALSE(Evaluate(TenIterations(), Linear(), {0}, CountingMode::kFluid).ok());
  EXPECT_FALSE(Evaluate(TenIterations(), Linear(), {11}, CountingMode::kFluid).ok());
  EXPECT_FALSE(Evaluate(TenIterations(), Linear(), {5, 5}, CountingMode::kFluid).ok());
  EXPECT_FALSE(Evaluate(TenIterations(), LossCurve(0, {1.0, 2.0}), {1}, CountingMode::kFluid).ok());
}

TEST(CilModelTest, PoissonArrivalsAreSeeded) {
  RequestModel r;
  r.arrivals = ArrivalProcess::kPoisson;
  r.interval_s = 0.5;
  r.seed = 7;
  auto a = ArrivalTimes(r, 1000.0);
  auto b = ArrivalTimes(r, 1000.0);
  EXPECT_EQ(a, b);
  // Mean 2000 arrivals; 6 standard deviations (sqrt(2000) ~ 45) either side.
  EXPECT_NEAR(static_cast<double>(a.size()), 2000.0, 270.0);
}

}  // namespace
}  // namespace schedulers
}  // namespace viper
