#include "viper/schedulers/solvers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "viper/schedulers/cil_model.h"

namespace viper {
namespace schedulers {
namespace {

double Objective(const Problem& p, const LossCurve& c, const Schedule& s) {
  auto ev = Evaluate(p, c, s, CountingMode::kFluid);
  EXPECT_TRUE(ev.ok()) << ev.status().ToString();
  return ev.ok() ? ev->objective : NAN;
}

void ExpectRelNear(double a, double b, const std::string& what) {
  EXPECT_LE(std::fabs(a - b), 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)})) << what << ": " << a << " vs " << b;
}

// Three shapes of learning curve over iterations 0..N: smooth exponential
// decay, the same with noise (not monotone), and step drops (LR schedule).
LossCurve RandomCurve(std::mt19937_64& rng, int64_t N, int shape) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  const double a = 0.5 + 3 * U(rng), b = 0.5 + 4 * U(rng), c = 0.05 + U(rng);
  std::vector<double> l;
  for (int64_t i = 0; i <= N; ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(N);
    double v = a * std::exp(-b * t) + c;
    if (shape == 1) v = std::max(0.0, v + 0.3 * (U(rng) - 0.5));
    if (shape == 2) v = c + a * (t < 0.3 ? 1.0 : t < 0.6 ? 0.4 : t < 0.85 ? 0.15 : 0.05) + 0.05 * U(rng);
    l.push_back(v);
  }
  return LossCurve(0, l);
}

Problem RandomProblem(std::mt19937_64& rng, int64_t n_max) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  Problem p;
  p.warmup_iterations = static_cast<int64_t>(4 * U(rng));
  p.total_iterations = p.warmup_iterations + 1 + static_cast<int64_t>((n_max - 1) * U(rng));
  p.seconds_per_iteration = 0.5 + 1.5 * U(rng);
  p.cost.stall_s = U(rng) < 0.2 ? 0.0 : 2.0 * U(rng);
  p.cost.delay_s = U(rng) < 0.2 ? 0.0 : 4.0 * U(rng);
  p.requests.interval_s = 0.2 + 2.0 * U(rng);
  const double w = U(rng);
  const double train_s = static_cast<double>(p.total_iterations - p.warmup_iterations) * p.seconds_per_iteration;
  if (w < 0.4) {
    p.requests.window = WindowKind::kWhileTraining;
  } else if (w < 0.7) {
    p.requests.window = WindowKind::kRequestCount;
    p.requests.request_count = 1 + static_cast<int64_t>(1.5 * train_s / p.requests.interval_s * U(rng));
  } else {
    p.requests.window = WindowKind::kEndTime;
    p.requests.end_time_s = 0.1 + 1.5 * train_s * U(rng);
  }
  if (U(rng) < 0.3) p.drift_per_s = 0.2 * U(rng);
  if (U(rng) < 0.3) p.price_per_slowdown_s = 3.0 * U(rng);
  if (U(rng) < 0.3) p.slowdown_budget_s = 6.0 * U(rng);
  if (U(rng) < 0.3) p.min_spacing_iterations = 1 + static_cast<int64_t>(3 * U(rng));
  return p;
}

// optimal == O(N^2) DP == enumeration of all subsets, on 600 random cases
// (N - W <= 12, all window kinds, drift, price, budget and spacing mixed in).
TEST(SolversTest, OptimalMatchesEnumerationAndQuadraticDp) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 600; ++trial) {
    const Problem p = RandomProblem(rng, 12);
    const LossCurve c = RandomCurve(rng, p.total_iterations, trial % 3);
    auto opt = SolveOptimal(p, c);
    auto quad = SolveOptimalQuadratic(p, c);
    auto en = SolveByEnumeration(p, c);
    ASSERT_TRUE(opt.ok() && quad.ok() && en.ok()) << opt.status().ToString();
    ASSERT_TRUE(p.CheckSchedule(opt->schedule).ok()) << "trial " << trial;
    const std::string what = "trial " + std::to_string(trial) + " window " + ToString(p.requests.window);
    ExpectRelNear(Objective(p, c, opt->schedule), en->objective, what + " optimal vs enumeration");
    ExpectRelNear(Objective(p, c, quad->schedule), en->objective, what + " quadratic vs enumeration");
    ExpectRelNear(opt->objective, en->objective, what + " optimal's own value");
  }
}

// Larger horizons: optimal == the O(N^2) DP (enumeration is out of reach).
TEST(SolversTest, OptimalMatchesQuadraticDpOnLongerCurves) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const Problem p = RandomProblem(rng, 150);
    const LossCurve c = RandomCurve(rng, p.total_iterations, trial % 3);
    auto opt = SolveOptimal(p, c);
    auto quad = SolveOptimalQuadratic(p, c);
    ASSERT_TRUE(opt.ok() && quad.ok());
    ASSERT_TRUE(p.CheckSchedule(opt->schedule).ok());
    ExpectRelNear(Objective(p, c, opt->schedule), Objective(p, c, quad->schedule),
                  "trial " + std::to_string(trial));
  }
}

// Re-planning from a prefix (what the online planner does): the near-linear
// and the quadratic DP agree on the suffix optimum.
TEST(SolversTest, ReplanFromPrefixMatchesQuadraticDp) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 100; ++trial) {
    const Problem p = RandomProblem(rng, 60);
    if (p.total_iterations - p.warmup_iterations < 3) continue;
    const LossCurve c = RandomCurve(rng, p.total_iterations, trial % 3);
    PlanStart start;
    start.checkpoints_taken = 1 + trial % 2;
    start.last_checkpoint = p.warmup_iterations + 1 + trial % (p.total_iterations - p.warmup_iterations);
    auto opt = SolveOptimal(p, c, start);
    auto quad = SolveOptimalQuadratic(p, c, start);
    ASSERT_TRUE(opt.ok() && quad.ok());
    ExpectRelNear(opt->objective, quad->objective, "trial " + std::to_string(trial));
  }
}

// fixed == brute force over every interval, each judged by Evaluate(); and
// optimal is never worse than fixed, viper-fixed, viper-greedy or epoch on
// the fluid objective (when those respect the constraints).
TEST(SolversTest, FixedEqualsBruteForceAndOptimalIsNeverWorse) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const Problem p = RandomProblem(rng, 80);
    const LossCurve c = RandomCurve(rng, p.total_iterations, trial % 3);
    auto fixed = SolveFixedInterval(p, c);
    ASSERT_TRUE(fixed.ok());
    double brute = Objective(p, c, {});
    for (int64_t d = 1; d <= p.total_iterations - p.warmup_iterations; ++d) {
      Schedule s;
      for (int64_t x = p.warmup_iterations + d; x <= p.total_iterations; x += d) s.push_back(x);
      if (p.CheckSchedule(s).ok()) brute = std::min(brute, Objective(p, c, s));
    }
    ExpectRelNear(fixed->objective, brute, "fixed, trial " + std::to_string(trial));
    ExpectRelNear(Objective(p, c, fixed->schedule), brute, "fixed schedule, trial " + std::to_string(trial));
    const double opt = Objective(p, c, SolveOptimal(p, c)->schedule);
    EXPECT_LE(opt, brute * (1 + 1e-9) + 1e-12);
    std::vector<Schedule> others = {ViperFixedInterval(p, c)->schedule, EpochSchedule(p, 7)->schedule};
    others.push_back(ViperGreedy(p, c, 0.05)->schedule);
    for (const Schedule& s : others) {
      if (p.CheckSchedule(s).ok()) {
        EXPECT_LE(opt, Objective(p, c, s) * (1 + 1e-9) + 1e-12);
      }
    }
  }
}

// Hand case for the serve-while-training DP, no costs: with l = 10 - i over
// 0..4 and free checkpoints every checkpoint helps, except one at N = 4,
// which would serve nothing (training, hence the window, ends there):
// {1, 2, 3}, CIL 10 + 9 + 8 + 7 = 34 (one second each, one request per second).
TEST(SolversTest, FreeCheckpointsTakeEveryIteration) {
  Problem p;
  p.total_iterations = 4;
  auto s = SolveOptimal(p, LossCurve(0, {10, 9, 8, 7, 6}));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->schedule, (Schedule{1, 2, 3}));
  EXPECT_NEAR(s->objective, 34.0, 1e-12);
  p.slowdown_budget_s = 0.0;  // zero stall: the budget does not bind
  EXPECT_EQ(SolveOptimal(p, LossCurve(0, {10, 9, 8, 7, 6}))->schedule.size(), 3u);
}

// Viper's Algorithm 2 by hand: W = 0, N = 4, tau = 1, t_infer = 1, M = 4,
// losses 4, 3, 2, 1, 0.5, t_p = 0.5, t_c = 1.0 (delay 1.5).
//  d=1: v0 floor(1+0.5+1)=2 -> 8; v@1 floor(1.5)=1 -> 3; v@2 1 -> 2; 0 left: 13.
//  d=2: v0 floor(3.5)=3 -> 12; v@2 min(2, 1 left) -> 2: 14.
//  d=3: v0 floor(4.5)=4 -> 16.  d=4: v0 min(5, 4) -> 16.   Best: d = 1, 13.
TEST(ViperAlgorithmsTest, FixedIntervalHandComputed) {
  Problem p;
  p.total_iterations = 4;
  p.cost.stall_s = 0.5;
  p.cost.delay_s = 1.5;
  p.requests.window = WindowKind::kRequestCount;
  p.requests.request_count = 4;
  auto s = ViperFixedInterval(p, LossCurve(0, {4, 3, 2, 1, 0.5}));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->schedule, (Schedule{1, 2, 3, 4}));
  EXPECT_NEAR(s->objective, 13.0, 1e-12);
  auto ev = Evaluate(p, LossCurve(0, {4, 3, 2, 1, 0.5}), {2, 4}, CountingMode::kViper);
  EXPECT_NEAR(ev->cil, 14.0, 1e-12);
}

// Viper's Algorithm 3 by hand: warm-up losses 10, 8, 7, 5 drop by 2, 1, 2:
// mean 5/3, population std sqrt(2/9), threshold 2.1381. Predicted 5, 4, 2.5,
// 2.4, 0.3, 0.2 at 3..8: drops from the last checkpoint exceed it at 5
// (5 - 2.5 = 2.5) and at 7 (2.5 - 0.3 = 2.2).
TEST(ViperAlgorithmsTest, GreedyHandComputed) {
  auto th = ViperGreedyThreshold({10, 8, 7, 5});
  ASSERT_TRUE(th.ok());
  EXPECT_NEAR(*th, 5.0 / 3.0 + std::sqrt(2.0 / 9.0), 1e-12);
  Problem p;
  p.warmup_iterations = 3;
  p.total_iterations = 8;
  auto s = ViperGreedy(p, LossCurve(3, {5, 4, 2.5, 2.4, 0.3, 0.2}), *th);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->schedule, (Schedule{5, 7}));
  EXPECT_FALSE(ViperGreedyThreshold({1.0}).ok());
}

TEST(ViperAlgorithmsTest, EpochBoundaries) {
  Problem p;
  p.warmup_iterations = 250;
  p.total_iterations = 1000;
  auto s = EpochSchedule(p, 216);  // TC1's epoch length
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->schedule, (Schedule{432, 648, 864}));
  EXPECT_FALSE(EpochSchedule(p, 0).ok());
}

}  // namespace
}  // namespace schedulers
}  // namespace viper
