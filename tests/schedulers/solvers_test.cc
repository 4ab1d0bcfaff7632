#include "viper/schedulers/solvers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
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

// Shapes the planner meets on drifting data, over iterations 0..N: 0 smooth
// decay, 1 noisy, 2 LR steps, 3 decay then rising (overfitting), 4 a step up
// at a random point (a regime change) then decay again.
LossCurve DriftingCurve(std::mt19937_64& rng, int64_t N, int shape) {
  if (shape < 3) return RandomCurve(rng, N, shape);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  const double a = 0.5 + 3 * U(rng), b = 1 + 4 * U(rng), c = 0.05 + U(rng), at = 0.2 + 0.6 * U(rng);
  std::vector<double> l;
  for (int64_t i = 0; i <= N; ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(N);
    double v = shape == 3 ? a * std::exp(-b * t) + c + a * 0.8 * std::max(0.0, t - at)
                          : (t < at ? a * std::exp(-b * t) : a * (0.7 * std::exp(-b * (t - at)))) + c;
    l.push_back(v + 0.02 * U(rng));
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

// optimal, the O(N^2) DP and enumeration agree on (p, c); optimal's schedule.
Schedule ExpectOptimalMatchesEnumeration(const Problem& p, const LossCurve& c, int trial) {
  auto opt = SolveOptimal(p, c);
  auto quad = SolveOptimalQuadratic(p, c);
  auto en = SolveByEnumeration(p, c);
  EXPECT_TRUE(opt.ok() && quad.ok() && en.ok()) << opt.status().ToString();
  if (!opt.ok() || !quad.ok() || !en.ok()) return {};
  EXPECT_TRUE(p.CheckSchedule(opt->schedule).ok()) << "trial " << trial;
  const std::string what = "trial " + std::to_string(trial) + " window " + ToString(p.requests.window);
  ExpectRelNear(Objective(p, c, opt->schedule), en->objective, what + " optimal vs enumeration");
  ExpectRelNear(Objective(p, c, quad->schedule), en->objective, what + " quadratic vs enumeration");
  ExpectRelNear(opt->objective, en->objective, what + " optimal's own value");
  return opt->schedule;
}

// optimal == O(N^2) DP == enumeration of all subsets, on 600 random cases
// (N - W <= 12, all window kinds, drift, price, budget and spacing mixed in).
TEST(SolversTest, OptimalMatchesEnumerationAndQuadraticDp) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 600; ++trial) {
    const Problem p = RandomProblem(rng, 12);
    const LossCurve c = RandomCurve(rng, p.total_iterations, trial % 3);
    ExpectOptimalMatchesEnumeration(p, c, trial);
  }
}

// On an uneven clock (Problem::elapsed_s: each iteration its own time, as
// the log replays them; what the oracle plans on): optimal == the O(N^2) DP
// == enumeration, 600 random cases, and the uneven clock changes the optimum
// somewhere (so the clock is really used).
TEST(SolversTest, OptimalMatchesEnumerationOnAnUnevenClock) {
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  int changed = 0;
  for (int trial = 0; trial < 600; ++trial) {
    Problem p = RandomProblem(rng, 12);
    const LossCurve c = RandomCurve(rng, p.total_iterations, trial % 3);
    p.elapsed_s.assign(1, 0.0);
    for (int64_t i = p.warmup_iterations + 1; i <= p.total_iterations; ++i) {
      p.elapsed_s.push_back(p.elapsed_s.back() + p.seconds_per_iteration * (U(rng) < 0.1 ? 0.0 : 0.1 + 4.0 * U(rng)));
    }
    const Schedule opt = ExpectOptimalMatchesEnumeration(p, c, trial);
    Problem uniform = p;
    uniform.elapsed_s.clear();
    auto flat = SolveOptimal(uniform, c);
    ASSERT_TRUE(flat.ok());
    if (flat->schedule != opt) ++changed;
  }
  EXPECT_GT(changed, 50);
}

// Problem::elapsed_s is checked: its length, its start and its order.
TEST(SolversTest, AnUnevenClockIsValidated) {
  Problem p;
  p.warmup_iterations = 2;
  p.total_iterations = 5;
  p.elapsed_s = {0, 1, 2, 3};
  EXPECT_TRUE(p.Validate().ok());
  EXPECT_EQ(p.Elapsed(4), 2.0);
  EXPECT_DOUBLE_EQ(p.ElapsedAt(3.5), 1.5);
  EXPECT_DOUBLE_EQ(p.PositionAt(2.25), 4.25);
  EXPECT_EQ(p.PositionAt(99.0), 5.0);
  p.elapsed_s = {0, 1, 2};
  EXPECT_NE(p.Validate().message().find("N - W + 1"), std::string::npos);
  p.elapsed_s = {1, 1, 2, 3};
  EXPECT_NE(p.Validate().message().find("elapsed_s[0]"), std::string::npos);
  p.elapsed_s = {0, 2, 1, 3};
  EXPECT_NE(p.Validate().message().find("elapsed_s[2]"), std::string::npos);
}

// The traffic's whole iteration under the wall clock (the judge's and the
// replay's): the last iteration finished by then, on an uneven clock (a
// pause, two iterations that end together) and on a uniform one (exact
// where seconds is a multiple of tau, the quotient being inexact), in
// [W, N], and the floor of PositionAt, the oracle's fractional position.
TEST(SolversTest, TheTrafficIterationIsTheLastOneFinished) {
  Problem p;
  p.warmup_iterations = 10;
  p.total_iterations = 15;
  p.seconds_per_iteration = 0.1;
  p.elapsed_s = {0, 1, 1, 4, 4.5, 6};
  ASSERT_TRUE(p.Validate().ok());
  EXPECT_EQ(p.TrafficIterationAt(-1.0), 10);
  EXPECT_EQ(p.TrafficIterationAt(0.0), 10);
  EXPECT_EQ(p.TrafficIterationAt(0.99), 10);
  EXPECT_EQ(p.TrafficIterationAt(1.0), 12);  // 11 and 12 end together
  EXPECT_EQ(p.TrafficIterationAt(3.99), 12);  // the pause before 13
  EXPECT_EQ(p.TrafficIterationAt(4.0), 13);
  EXPECT_EQ(p.TrafficIterationAt(6.0), 15);
  EXPECT_EQ(p.TrafficIterationAt(1e9), 15);
  for (double s = -0.5; s < 7.0; s += 0.01) {
    EXPECT_EQ(p.TrafficIterationAt(s), static_cast<int64_t>(std::floor(p.PositionAt(s)))) << s;
  }
  // Uniform: 0.3 / 0.1 is 2.9999999999999996 in floating point, and
  // 3 x 0.1 is 0.30000000000000004 > 0.3: the largest n with n x tau <= s.
  p.elapsed_s.clear();
  EXPECT_EQ(p.TrafficIterationAt(0.3), 12);
  EXPECT_EQ(p.TrafficIterationAt(3.0 * 0.1), 13);
  EXPECT_EQ(p.TrafficIterationAt(0.05), 10);
  EXPECT_EQ(p.TrafficIterationAt(0.5), 15);
  EXPECT_EQ(p.TrafficIterationAt(99.0), 15);
  EXPECT_EQ(p.TrafficIterationAt(std::nan("")), 10);
  for (int n = 0; n <= 5; ++n) {
    const double at = static_cast<double>(n) * p.seconds_per_iteration;
    EXPECT_EQ(p.TrafficIterationAt(at), 10 + n) << n;
    EXPECT_EQ(p.TrafficIterationAt(std::nextafter(at, -1.0)), std::max(10, 9 + n)) << n;
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

// The fluid objective of the versions served from `start` on, written out
// from DESIGN.md §1 independently of the solvers: the start's version (loss
// served_loss, or the curve's at its checkpoint) and each new checkpoint's
// version, each served from its A until the next one's A, clipped to the
// window, plus the price of the new checkpoints.
double ObjectiveFrom(const Problem& p, const LossCurve& c, const PlanStart& st, const Schedule& s) {
  const int64_t k0 = st.checkpoints_taken, m = static_cast<int64_t>(s.size());
  const double R = p.WindowEnd(k0 + m), rate = p.requests.RatePerSecond(), delta = p.cost.delay_s;
  std::vector<double> loss, T, A;
  const int64_t a = k0 > 0 ? st.last_checkpoint : p.warmup_iterations;
  loss.push_back(st.served_loss ? *st.served_loss : c.at(a));
  T.push_back(k0 > 0 ? p.CheckpointStart(a, k0) : 0.0);
  A.push_back(k0 > 0 ? T.back() + delta : 0.0);
  for (int64_t k = 1; k <= m; ++k) {
    loss.push_back(c.at(s[k - 1]));
    T.push_back(p.CheckpointStart(s[k - 1], k0 + k));
    A.push_back(T.back() + delta);
  }
  double v = p.price_per_slowdown_s * p.cost.stall_s * static_cast<double>(m);
  for (int64_t k = 0; k <= m; ++k) {
    const double from = std::min(A[k], R), to = k < m ? std::min(A[k + 1], R) : R;
    if (to > from) v += FluidVersionCost(rate, loss[k], p.drift_per_s, T[k], from, to);
  }
  return v;
}

// Every subset of [first new iteration, N] that respects spacing (also from
// the last checkpoint taken) and the budget (counting those taken); returns
// the best objective, or nullopt when the start's version is not servable.
std::optional<double> BruteForceFrom(const Problem& p, const LossCurve& c, const PlanStart& st) {
  const int64_t k0 = st.checkpoints_taken, g = p.min_spacing_iterations;
  if (k0 > 0 && p.CheckpointStart(st.last_checkpoint, k0) + p.cost.delay_s > p.WindowEnd(k0)) return std::nullopt;
  const int64_t first = std::max(k0 > 0 ? st.last_checkpoint + g : p.warmup_iterations + 1, st.earliest_iteration);
  const int64_t n = std::max<int64_t>(0, p.total_iterations - first + 1);
  double best = ObjectiveFrom(p, c, st, {});
  for (uint64_t mask = 1; mask < (uint64_t{1} << n); ++mask) {
    Schedule s;
    for (int64_t b = 0; b < n; ++b) {
      if (mask >> b & 1) s.push_back(first + b);
    }
    bool ok = k0 + static_cast<int64_t>(s.size()) <= p.MaxCheckpoints();
    for (size_t k = 1; k < s.size() && ok; ++k) ok = s[k] - s[k - 1] >= g;
    if (ok) best = std::min(best, ObjectiveFrom(p, c, st, s));
  }
  return best;
}

PlanStart RandomStart(std::mt19937_64& rng, const Problem& p, const LossCurve& c) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  const int64_t W = p.warmup_iterations, N = p.total_iterations;
  PlanStart st;
  if (U(rng) < 0.6) {
    st.checkpoints_taken = 1 + static_cast<int64_t>(3 * U(rng));
    st.last_checkpoint = W + 1 + static_cast<int64_t>(static_cast<double>(N - W) * U(rng) * 0.999);
  }
  if (U(rng) < 0.6) st.earliest_iteration = static_cast<int64_t>(static_cast<double>(N + 2) * U(rng) * 0.999);
  if (U(rng) < 0.5) {
    const int64_t a = st.checkpoints_taken > 0 ? st.last_checkpoint : W;
    st.served_loss = c.at(a) * (0.5 + U(rng));  // a measured value off the forecast
  }
  return st;
}

// PlanStart (checkpoints taken, earliest iteration, measured served loss):
// optimal == the O(N^2) DP == a brute force written here from the model, on
// 800 tiny random cases of every window kind with drift, price, budget,
// spacing and non-monotone curves. The optimal schedule's own value, recomputed
// independently, is the optimum.
TEST(SolversTest, PlanStartMatchesBruteForceAndQuadraticDp) {
  std::mt19937_64 rng(31);
  int compared = 0;
  for (int trial = 0; trial < 800; ++trial) {
    const Problem p = RandomProblem(rng, 11);
    const LossCurve c = DriftingCurve(rng, p.total_iterations, trial % 5);
    const PlanStart st = RandomStart(rng, p, c);
    const std::string what = "trial " + std::to_string(trial) + " window " + ToString(p.requests.window);
    auto opt = SolveOptimal(p, c, st);
    auto quad = SolveOptimalQuadratic(p, c, st);
    ASSERT_TRUE(opt.ok() && quad.ok()) << what << ": " << opt.status().ToString();
    const auto brute = BruteForceFrom(p, c, st);
    if (!brute) {
      EXPECT_TRUE(opt->schedule.empty()) << what;
      continue;
    }
    ++compared;
    ExpectRelNear(opt->objective, *brute, what + " optimal vs brute force");
    ExpectRelNear(quad->objective, *brute, what + " quadratic vs brute force");
    ExpectRelNear(ObjectiveFrom(p, c, st, opt->schedule), *brute, what + " optimal schedule's value");
    if (!opt->schedule.empty()) {
      const int64_t first = opt->schedule.front();
      EXPECT_GE(first, st.earliest_iteration) << what;
      if (st.checkpoints_taken > 0) {
        EXPECT_GE(first, st.last_checkpoint + p.min_spacing_iterations) << what;
      }
      EXPECT_LE(st.checkpoints_taken + static_cast<int64_t>(opt->schedule.size()), p.MaxCheckpoints()) << what;
    }
  }
  EXPECT_GT(compared, 500);
}

// Bad PlanStart fields are refused, naming the field.
TEST(SolversTest, PlanStartIsValidated) {
  Problem p;
  p.total_iterations = 10;
  const LossCurve c(0, std::vector<double>(11, 1.0));
  auto fails_naming = [&](const PlanStart& st, const std::string& field) {
    auto s = SolveOptimal(p, c, st);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().ToString().find(field), std::string::npos) << s.status().ToString();
    EXPECT_FALSE(SolveOptimalQuadratic(p, c, st).ok());
  };
  PlanStart st;
  st.served_loss = -0.1;
  fails_naming(st, "served_loss");
  st.served_loss = std::numeric_limits<double>::infinity();
  fails_naming(st, "served_loss");
  st.served_loss = std::nan("");
  fails_naming(st, "served_loss");
  st = PlanStart{};
  st.earliest_iteration = -1;
  fails_naming(st, "earliest_iteration");
  st.earliest_iteration = 12;  // N + 2
  fails_naming(st, "earliest_iteration");
  st.earliest_iteration = 11;  // N + 1: valid, nothing can be taken
  auto none = SolveOptimal(p, c, st);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->schedule.empty());
}

// The Lagrangian engine on fixed windows at scale: 400 random cases with
// N - W up to 400, request-count and end-time windows ending before, near and
// after the end of training, drift, price, budget, spacing, PlanStart and the
// five curve shapes: optimal == the O(N^2) DP. Also counts how often the
// certificate closed without the layered DP, so the fast path is known to be
// the one tested (it closes on all 400 at the time of writing; the fallback
// has its own test below).
TEST(SolversTest, FixedWindowCertificateMatchesQuadraticDp) {
  std::mt19937_64 rng(77);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  int fast = 0, fallback = 0, coupled = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Problem p = RandomProblem(rng, 400);
    const double train_s = static_cast<double>(p.total_iterations - p.warmup_iterations) * p.seconds_per_iteration;
    const double end = train_s * (trial % 3 == 0 ? 0.3 + 0.6 * U(rng) : trial % 3 == 1 ? 0.95 + 0.1 * U(rng)
                                                                                        : 1.1 + U(rng));
    if (trial % 2 == 0) {
      p.requests.window = WindowKind::kRequestCount;
      p.requests.request_count = 1 + static_cast<int64_t>(end / p.requests.interval_s);
    } else {
      p.requests.window = WindowKind::kEndTime;
      p.requests.end_time_s = end;
    }
    if (trial % 4 == 0) p.cost.stall_s = p.seconds_per_iteration;  // stall of one iteration
    const LossCurve c = DriftingCurve(rng, p.total_iterations, trial % 5);
    const PlanStart st = trial % 3 == 0 ? RandomStart(rng, p, c) : PlanStart{};
    const std::string what = "trial " + std::to_string(trial);
    auto opt = SolveOptimal(p, c, st);
    auto quad = SolveOptimalQuadratic(p, c, st);
    ASSERT_TRUE(opt.ok() && quad.ok()) << what << ": " << opt.status().ToString();
    ExpectRelNear(opt->objective, quad->objective, what);
    ExpectRelNear(ObjectiveFrom(p, c, st, opt->schedule), quad->objective, what + " schedule's value");
    Problem loose = p;
    loose.slowdown_budget_s.reset();
    EXPECT_TRUE(p.CheckSchedule(opt->schedule).ok() || st.checkpoints_taken > 0) << what;
    if (p.cost.stall_s > 0 && opt->passes > 0) ++coupled;
    if (opt->method == SolveMethod::kLagrangian || opt->method == SolveMethod::kSinglePass) ++fast;
    if (opt->method == SolveMethod::kLayered) ++fallback;
  }
  std::cout << "fixed windows: " << fast << " certified by passes, " << fallback << " by the layered fallback, "
            << coupled << " count-coupled\n";
  EXPECT_GT(fast, 3 * fallback);
}

// A requested certified gap (what re-plans on a forecast use) keeps its
// promise: the schedule's true value is within the reported gap of the O(N^2)
// optimum, the reported gap is within the requested one, and the default
// reports (almost) none. A gap out of range is refused.
TEST(SolversTest, CertifiedGapIsKeptAndReported) {
  std::mt19937_64 rng(91);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  int loosened = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Problem p = RandomProblem(rng, 400);
    const double train_s = static_cast<double>(p.total_iterations - p.warmup_iterations) * p.seconds_per_iteration;
    p.requests.window = WindowKind::kRequestCount;
    p.requests.request_count = 1 + static_cast<int64_t>(train_s * (0.4 + U(rng)) / p.requests.interval_s);
    const LossCurve c = DriftingCurve(rng, p.total_iterations, trial % 5);
    const PlanStart st = trial % 2 == 0 ? RandomStart(rng, p, c) : PlanStart{};
    const double gap = trial % 3 == 0 ? 1e-3 : 1e-6;
    const std::string what = "trial " + std::to_string(trial);
    auto quad = SolveOptimalQuadratic(p, c, st);
    auto exact = SolveOptimal(p, c, st);
    auto approx = SolveOptimal(p, c, st, SolveOptions{gap});
    ASSERT_TRUE(quad.ok() && exact.ok() && approx.ok()) << what << ": " << approx.status().ToString();
    EXPECT_LE(exact->certified_gap, 1e-10) << what;
    EXPECT_LE(approx->certified_gap, gap) << what;
    const double value = ObjectiveFrom(p, c, st, approx->schedule);
    const double scale = std::max(1.0, std::fabs(quad->objective));
    EXPECT_LE(value, quad->objective + (approx->certified_gap + 1e-9) * scale) << what;
    EXPECT_GE(value, quad->objective - 1e-9 * scale) << what;
    if (approx->passes < exact->passes) ++loosened;
  }
  std::cout << "certified gap: " << loosened << " of 300 cases needed fewer passes\n";
  Problem p = RandomProblem(rng, 100);
  const LossCurve c = DriftingCurve(rng, p.total_iterations, 0);
  for (double bad : {-1e-9, 0.02, std::nan("")}) {
    EXPECT_EQ(SolveOptimal(p, c, {}, SolveOptions{bad}).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// The layered DP that SolveOptimal falls back to (seeded with one pass's best
// schedule, capped by the bounds) is exact on its own: == the O(N^2) DP on
// the fixed-window, budget and PlanStart cases of the suites above.
TEST(SolversTest, LayeredFallbackMatchesQuadraticDp) {
  std::mt19937_64 rng(404);
  int layered = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Problem p = RandomProblem(rng, trial % 2 == 0 ? 12 : 120);
    if (trial % 3 == 0) {
      p.requests.window = WindowKind::kWhileTraining;
      if (p.cost.stall_s == 0.0) p.cost.stall_s = 0.5;
      p.slowdown_budget_s = p.cost.stall_s * static_cast<double>(1 + trial % 5);
    }
    const LossCurve c = DriftingCurve(rng, p.total_iterations, trial % 5);
    const PlanStart st = trial % 4 == 0 ? RandomStart(rng, p, c) : PlanStart{};
    auto lay = SolveOptimalLayered(p, c, st);
    auto quad = SolveOptimalQuadratic(p, c, st);
    ASSERT_TRUE(lay.ok() && quad.ok()) << lay.status().ToString();
    const std::string what = "trial " + std::to_string(trial);
    ExpectRelNear(lay->objective, quad->objective, what);
    ExpectRelNear(ObjectiveFrom(p, c, st, lay->schedule), quad->objective, what + " schedule's value");
    if (lay->method == SolveMethod::kLayered) ++layered;
  }
  EXPECT_GT(layered, 150);
}

// Serving while training under a binding budget: the budget couples the
// count (c = 0 in the bound); optimal == the O(N^2) DP.
TEST(SolversTest, BindingBudgetMatchesQuadraticDp) {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  for (int trial = 0; trial < 150; ++trial) {
    Problem p = RandomProblem(rng, 300);
    p.requests.window = WindowKind::kWhileTraining;
    if (p.cost.stall_s == 0.0) p.cost.stall_s = 0.5;
    p.slowdown_budget_s = p.cost.stall_s * static_cast<double>(static_cast<int64_t>(1 + 8 * U(rng)));
    const LossCurve c = DriftingCurve(rng, p.total_iterations, trial % 5);
    auto opt = SolveOptimal(p, c);
    auto quad = SolveOptimalQuadratic(p, c);
    ASSERT_TRUE(opt.ok() && quad.ok());
    ASSERT_TRUE(p.CheckSchedule(opt->schedule).ok());
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
