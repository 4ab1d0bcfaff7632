#include "viper/schedulers/staleness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>

#include "viper/schedulers/cil_model.h"
#include "viper/schedulers/solvers.h"

namespace viper {
namespace schedulers {
namespace {

using LossFn = std::function<double(int64_t v, int64_t t)>;

// A table measured at every `step` iterations of [first, last] (every pair v <= t).
StalenessTable Grid(int64_t first, int64_t last, int64_t step, const LossFn& f) {
  StalenessTable t;
  t.source = "grid.csv";
  for (int64_t v = first; v <= last; v += step) {
    for (int64_t u = v; u <= last; u += step) {
      StalenessRecord r;
      r.version_iteration = v;
      r.traffic_iteration = u;
      r.test_loss = f(v, u);
      r.val_loss = f(v, u) + 0.01;
      t.records.push_back(r);
    }
  }
  return t;
}

// The diagonal learning curve 2 + 8/(1 + v/10); a label swap at iteration 60
// costs every older version 3 on traffic from then on.
double Curve(int64_t v) { return 2.0 + 8.0 / (1.0 + static_cast<double>(v) / 10.0); }
double Swap(int64_t v, int64_t t) { return Curve(v) + (v < 60 && t >= 60 ? 3.0 : 0.0); }

Problem Small(WindowKind window) {
  Problem p;
  p.warmup_iterations = 10;
  p.total_iterations = 100;
  p.seconds_per_iteration = 1.0;
  p.requests.interval_s = 0.5;
  p.cost.stall_s = 1.5;
  p.cost.delay_s = 4.0;
  p.requests.window = window;
  if (window == WindowKind::kRequestCount) p.requests.request_count = 200;
  return p;
}

TEST(StalenessSurfaceTest, GridPairsAreTheTableAndTheInterpolationIsStated) {
  auto s = StalenessSurface::Make(Grid(0, 100, 10, Swap), StalenessSample::kTest);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_DOUBLE_EQ(*s->At(20, 80), Swap(20, 80));
  EXPECT_DOUBLE_EQ(*s->At(70, 70), Swap(70, 70));
  // Off the grid: version 25 starts at the interpolated diagonal and decays
  // as version 20 did over [25, 80]: the swap's step of 3.
  const double d25 = 0.5 * (Curve(20) + Curve(30));
  EXPECT_NEAR(*s->At(25, 80), d25 + 3.0, 1e-12);
  // A version after the swap does not inherit its older neighbour's step.
  EXPECT_NEAR(*s->At(65, 90), 0.5 * (Curve(60) + Curve(70)), 1e-12);
  // Validation sample is the other column.
  auto val = StalenessSurface::Make(Grid(0, 100, 10, Swap), StalenessSample::kValidation);
  EXPECT_DOUBLE_EQ(*val->At(20, 80), Swap(20, 80) + 0.01);
}

TEST(StalenessSurfaceTest, UncoveredPairsAreErrorsNamingThePair) {
  auto s = StalenessSurface::Make(Grid(20, 100, 10, Swap), StalenessSample::kTest);
  ASSERT_TRUE(s.ok());
  auto before = s->At(10, 50);
  ASSERT_FALSE(before.ok());
  EXPECT_NE(before.status().message().find("version 10, traffic 50"), std::string::npos) << before.status().message();
  EXPECT_NE(before.status().message().find("first version is 20"), std::string::npos);
  auto after = s->At(50, 120);
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.status().message().find("traffic 120"), std::string::npos);
  EXPECT_FALSE(s->CheckCovers(10, 100).ok());
  EXPECT_TRUE(s->CheckCovers(20, 100).ok());

  StalenessTable no_diag = Grid(0, 100, 10, Swap);
  no_diag.records.erase(std::remove_if(no_diag.records.begin(), no_diag.records.end(), [](const StalenessRecord& r) { return r.version_iteration == r.traffic_iteration; }), no_diag.records.end());
  auto bad = StalenessSurface::Make(no_diag, StalenessSample::kTest);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no diagonal"), std::string::npos);
  StalenessTable dup = Grid(0, 20, 10, Swap);
  dup.records.push_back(dup.records.front());
  EXPECT_FALSE(StalenessSurface::Make(dup, StalenessSample::kTest).ok());
}

TEST(StalenessSurfaceTest, IntegralMatchesQuadratureEvenWhereTheLossIsClamped) {
  // Recurring domains: version 20 is bad on traffic 40-60 and good again
  // later; versions between grid points inherit a negative excess that the
  // surface clamps at 0.
  LossFn recurring = [](int64_t v, int64_t t) {
    const bool away = t >= 40 && t < 60;
    return v == 20 && !away && t >= 60 ? 0.05 : Curve(v) * (away && v < 40 ? 3.0 : 1.0);
  };
  auto s = StalenessSurface::Make(Grid(0, 100, 20, recurring), StalenessSample::kTest);
  ASSERT_TRUE(s.ok());
  for (int64_t v : {20, 25, 33, 50}) {
    const double p0 = static_cast<double>(v), p1 = 100;
    double quad = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      const double x = p0 + (p1 - p0) * (i + 0.5) / n;
      quad += *s->At(v, x) * (p1 - p0) / n;
    }
    auto integral = s->Integral(v, p0, p1);
    ASSERT_TRUE(integral.ok());
    EXPECT_NEAR(*integral, quad, 1e-4 * std::max(1.0, quad)) << "version " << v;
    EXPECT_GE(*s->At(v, 70), 0.0);
  }
}

TEST(StalenessEvaluationTest, WithoutDriftItIsTheFluidModelOfTheDiagonal) {
  // A table whose every version keeps its own loss is the diagonal curve:
  // the surface evaluation must equal cil_model's fluid evaluation, for every
  // window, with the linear drift term and price too.
  auto s = StalenessSurface::Make(Grid(0, 100, 1, [](int64_t v, int64_t) { return Curve(v); }), StalenessSample::kTest);
  ASSERT_TRUE(s.ok());
  std::vector<double> l;
  for (int64_t i = 0; i <= 100; ++i) l.push_back(Curve(i));
  const LossCurve curve(0, l);
  std::mt19937 rng(7);
  for (WindowKind w : {WindowKind::kWhileTraining, WindowKind::kRequestCount}) {
    Problem p = Small(w);
    p.drift_per_s = 0.01;
    p.price_per_slowdown_s = 0.3;
    for (int trial = 0; trial < 50; ++trial) {
      Schedule sch;
      for (int64_t i = 11; i <= 100; ++i) {
        if (rng() % 9 == 0) sch.push_back(i);
      }
      auto got = EvaluateOnSurface(p, *s, sch);
      auto want = Evaluate(p, curve, sch, CountingMode::kFluid);
      ASSERT_TRUE(got.ok()) << got.status().message();
      ASSERT_TRUE(want.ok());
      EXPECT_NEAR(got->cil, want->cil, 1e-9 * want->cil) << ToString(w) << " trial " << trial;
      EXPECT_NEAR(got->objective, want->objective, 1e-9 * want->objective);
    }
  }
}

TEST(StalenessEvaluationTest, AStaleVersionPaysTheSwap) {
  // Serving version 0 (iteration 10) all along: on traffic after iteration 60
  // every request pays 3 more than the diagonal charges, and between the
  // grid's traffic points 50 and 60 the step is interpolated (a ramp: 1.5 x 10).
  auto s = StalenessSurface::Make(Grid(0, 100, 10, Swap), StalenessSample::kTest);
  const Problem p = Small(WindowKind::kWhileTraining);
  auto e = EvaluateOnSurface(p, *s, {});
  ASSERT_TRUE(e.ok());
  const double rate = 2.0;
  EXPECT_NEAR(e->cil, rate * (Curve(10) * 90 + 3.0 * 40 + 1.5 * 10), 1e-9);
}

// Every subset of the grid candidates whose checkpoints all become servable
// inside the window, evaluated on the surface; with `republish`, every
// choice of model for each checkpoint too (its own, version 0's, or any
// earlier candidate's). (The oracle leaves out checkpoints that never serve:
// under a drifting table such a checkpoint can still lower the CIL of a fixed
// window, because its stall holds the producer, and so the traffic's drift,
// for sigma; that is a property of tying the traffic to the producer's
// iteration, not a schedule to search.)
// With `prefix`, every schedule begins with it and the rest is a subset of
// the candidates after its last.
// Calls `visit` with every schedule of `cand` (beginning with `prefix`,
// the rest after its last) the oracle searches, and every choice of the
// models its checkpoints publish (their own only, unless `republish`).
void ForEachSchedule(const Problem& p, const std::vector<int64_t>& cand, bool republish,
                     const Schedule& prefix,
                     const std::function<void(const Schedule&, const std::vector<int64_t>&)>& visit) {
  const size_t n = cand.size();
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    Schedule sch(prefix);
    for (size_t i = 0; i < n; ++i) {
      if (!prefix.empty() && cand[i] <= prefix.back()) {
        if (mask & (1u << i)) sch.clear();
        continue;
      }
      if (mask & (1u << i)) sch.push_back(cand[i]);
    }
    if (sch.size() < prefix.size() || !p.CheckSchedule(sch).ok()) continue;
    const int64_t m = static_cast<int64_t>(sch.size());
    if (m > 0 && p.CheckpointStart(sch.back(), m) + p.cost.delay_s >= p.WindowEnd(m)) continue;
    std::vector<int64_t> models(sch);
    std::function<void(size_t)> choose = [&](size_t q) {
      if (q == sch.size()) return visit(sch, models);
      if (!republish) return choose(q + 1);
      models[q] = p.warmup_iterations;
      choose(q + 1);
      for (int64_t c : cand) {
        if (c > sch[q]) break;
        models[q] = c;
        choose(q + 1);
      }
    };
    choose(0);
  }
}

double BestByEnumeration(const Problem& p, const StalenessSurface& s, const std::vector<int64_t>& cand,
                         Schedule* best_schedule = nullptr, bool republish = false,
                         const Schedule& prefix = {}) {
  double best = std::numeric_limits<double>::infinity();
  ForEachSchedule(p, cand, republish, prefix, [&](const Schedule& sch, const std::vector<int64_t>& models) {
    auto e = EvaluateOnSurface(p, s, sch, models);
    if (e.ok() && e->objective < best) {
      best = e->objective;
      if (best_schedule) *best_schedule = sch;
    }
  });
  return best;
}

TEST(StalenessOracleTest, EqualsEnumerationOverGridSchedules) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 40; ++trial) {
    // Random drift: a step at a random iteration of random size, plus a
    // random decay rate; random cost, window, budget, spacing and price.
    const int64_t c = 20 + static_cast<int64_t>(u(rng) * 70);
    const double J = 4 * u(rng), rate = 0.05 * u(rng);
    LossFn f = [&](int64_t v, int64_t t) {
      return Curve(v) + (v < c && t >= c ? J : 0.0) + rate * static_cast<double>(t - v);
    };
    auto s = StalenessSurface::Make(Grid(2, 100, 7, f), StalenessSample::kTest);
    ASSERT_TRUE(s.ok());
    Problem p = Small(trial % 2 ? WindowKind::kRequestCount : WindowKind::kWhileTraining);
    p.cost.stall_s = 3 * u(rng);
    p.cost.delay_s = 10 * u(rng);
    p.price_per_slowdown_s = trial % 3 == 0 ? 2 * u(rng) : 0.0;
    if (trial % 4 == 1) p.slowdown_budget_s = 3.5 * p.cost.stall_s;
    if (trial % 5 == 2) p.min_spacing_iterations = 16;
    std::vector<int64_t> cand;
    for (int64_t v : s->Versions()) {
      if (v > p.warmup_iterations && v <= p.total_iterations) cand.push_back(v);
    }
    ASSERT_LE(cand.size(), 16u);
    // Both clocks: under the wall clock every segment's cost depends on the
    // stalls before it (the solver's count-layered pass, both windows).
    for (TrafficClock clock : {TrafficClock::kProducer, TrafficClock::kWall}) {
      p.requests.traffic_clock = clock;
      // Own models only: re-publishing has its own enumeration below (16
      // candidates are too many to enumerate every model choice).
      auto sol = SolveOptimalOnSurface(p, *s, {}, 4000, /*max_republish_work=*/0);
      ASSERT_TRUE(sol.ok()) << sol.status().message();
      Schedule best;
      const double enumerated = BestByEnumeration(p, *s, cand, &best);
      auto fmt = [](const Schedule& x) {
        std::string o;
        for (int64_t i : x) o += std::to_string(i) + " ";
        return o;
      };
      EXPECT_NEAR(sol->objective, enumerated, 1e-9 * enumerated)
          << "trial " << trial << ", " << ToString(clock) << " clock: solver {" << fmt(sol->schedule)
          << "}, enumeration {" << fmt(best) << "}";
      auto check = EvaluateOnSurface(p, *s, sol->schedule);
      ASSERT_TRUE(check.ok());
      EXPECT_NEAR(check->objective, sol->objective, 1e-9 * sol->objective);
      EXPECT_TRUE(p.CheckSchedule(sol->schedule).ok()) << p.CheckSchedule(sol->schedule).message();
    }
  }
}

// With a fixed prefix the oracle is the best extension of it: equal to
// enumerating the prefix followed by every subset of the later candidates
// (both clocks, both windows, re-publishing off and on), never below the
// unconstrained optimum, and the optimum's own prefix gives the optimum.
TEST(StalenessOracleTest, AFixedPrefixIsTheBestExtensionOfIt) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t c = 30 + static_cast<int64_t>(u(rng) * 50);
    const double J = 1 + 3 * u(rng);
    LossFn f = [&](int64_t v, int64_t t) { return Curve(v) + (v < c && t >= c ? J : 0.0); };
    auto s = StalenessSurface::Make(Grid(2, 100, 14, f), StalenessSample::kTest);
    ASSERT_TRUE(s.ok());
    Problem p = Small(trial % 2 ? WindowKind::kRequestCount : WindowKind::kWhileTraining);
    p.cost.stall_s = 3 * u(rng);
    p.cost.delay_s = 6 * u(rng);
    std::vector<int64_t> cand;
    for (int64_t v : s->Versions()) {
      if (v > p.warmup_iterations && v <= p.total_iterations) cand.push_back(v);
    }
    // One to three of the candidates before the change, in order.
    Schedule prefix;
    for (int64_t v : cand) {
      if (v < c && prefix.size() < 3 && u(rng) < 0.5) prefix.push_back(v);
    }
    if (prefix.empty()) prefix.push_back(cand.front());
    for (TrafficClock clock : {TrafficClock::kProducer, TrafficClock::kWall}) {
      p.requests.traffic_clock = clock;
      const bool republish = trial % 3 == 0;
      auto free = SolveOptimalOnSurface(p, *s, {}, 4000, republish ? 2e7 : 0);
      auto fixed = SolveOptimalOnSurface(p, *s, {}, 4000, republish ? 2e7 : 0, prefix);
      ASSERT_TRUE(free.ok() && fixed.ok()) << fixed.status().message();
      ASSERT_GE(fixed->schedule.size(), prefix.size());
      EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), fixed->schedule.begin())) << "trial " << trial;
      EXPECT_GE(fixed->objective, free->objective * (1 - 1e-12)) << "trial " << trial;
      const double enumerated = BestByEnumeration(p, *s, cand, nullptr, republish, prefix);
      EXPECT_NEAR(fixed->objective, enumerated, 1e-9 * enumerated)
          << "trial " << trial << ", " << ToString(clock) << " clock, republish " << republish;
      // The optimum's own first checkpoints as the prefix: the optimum.
      if (!free->schedule.empty()) {
        Schedule own(free->schedule.begin(), free->schedule.begin() + 1);
        auto same = SolveOptimalOnSurface(p, *s, {}, 4000, republish ? 2e7 : 0, own);
        ASSERT_TRUE(same.ok());
        EXPECT_NEAR(same->objective, free->objective, 1e-9 * free->objective) << "trial " << trial;
      }
    }
  }
  // A prefix that cannot be served inside the window is an error, not a bound.
  Problem p = Small(WindowKind::kRequestCount);
  p.requests.request_count = 10;  // 5 s of requests: nothing after iteration 10 + 5 - delay serves
  auto s = StalenessSurface::Make(Grid(2, 100, 14, Swap), StalenessSample::kTest);
  ASSERT_TRUE(s.ok());
  auto none = SolveOptimalOnSurface(p, *s, {}, 4000, 0, Schedule{86});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("fixed prefix"), std::string::npos) << none.status().message();
}

// FirstChange: a label swap at 60 is first measured at the grid's first
// traffic point from 60 on, and nothing changes before the point below it;
// a table without drift has none.
TEST(StalenessSurfaceTest, FirstChangeIsTheFirstTrafficPointThatMoves) {
  auto swap = StalenessSurface::Make(Grid(2, 100, 9, Swap), StalenessSample::kTest);
  ASSERT_TRUE(swap.ok());
  auto change = swap->FirstChange(0.02);
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->first_changed, 65.0);  // grid 2, 11, ..., 56, 65
  EXPECT_EQ(change->last_unchanged, 56.0);
  auto calm = StalenessSurface::Make(Grid(2, 100, 9, [](int64_t v, int64_t) { return Curve(v); }),
                                     StalenessSample::kTest);
  ASSERT_TRUE(calm.ok());
  EXPECT_FALSE(calm->FirstChange(0.02).has_value());
  // A change smaller than the tolerance is no change.
  auto small = StalenessSurface::Make(
      Grid(2, 100, 9, [](int64_t v, int64_t t) { return Curve(v) * (v < 60 && t >= 60 ? 1.01 : 1.0); }),
      StalenessSample::kTest);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE(small->FirstChange(0.02).has_value());
  EXPECT_TRUE(small->FirstChange(0.005).has_value());
}

// An uneven producer clock (Problem::elapsed_s: every iteration its own
// time, as the simulator replays a log's; what the oracle plans on).
void SetUnevenClock(Problem* p, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  p->elapsed_s.assign(1, 0.0);
  for (int64_t i = p->warmup_iterations + 1; i <= p->total_iterations; ++i) {
    p->elapsed_s.push_back(p->elapsed_s.back() + (u(rng) < 0.1 ? 0.0 : 0.1 + 3.0 * u(rng)));
  }
}

// The surface cost of a schedule by brute force on a fine time grid: the
// producer's (or, under the wall clock, an unstalled producer's) position
// followed second by second through its training and stalls, every version
// served from its servable time, midpoint rule. Independent of the solver's
// pieces.
double CilByQuadrature(const Problem& p, const StalenessSurface& s, const Schedule& sch) {
  const int64_t m = static_cast<int64_t>(sch.size());
  const double R = p.WindowEnd(m), sigma = p.cost.stall_s, delta = p.cost.delay_s;
  const double W = static_cast<double>(p.warmup_iterations), N = static_cast<double>(p.total_iterations);
  auto producer_at = [&](double x) {
    double t = 0, pos = W;
    for (int64_t k = 0; k < m; ++k) {
      const double sk = static_cast<double>(sch[static_cast<size_t>(k)]);
      const double train = p.ElapsedAt(sk) - p.ElapsedAt(pos);
      if (x < t + train) return p.PositionAt(p.ElapsedAt(pos) + (x - t));
      t += train;
      pos = sk;
      if (x < t + sigma) return sk;
      t += sigma;
    }
    const double train = p.ElapsedAt(N) - p.ElapsedAt(pos);
    return x < t + train ? p.PositionAt(p.ElapsedAt(pos) + (x - t)) : N;
  };
  const bool wall = p.requests.traffic_clock == TrafficClock::kWall;
  const int steps = 200000;
  const double dx = R / steps;
  double cil = 0;
  for (int i = 0; i < steps; ++i) {
    const double x = (i + 0.5) * dx;
    int64_t k = 0;
    while (k < m && p.CheckpointStart(sch[static_cast<size_t>(k)], k + 1) + delta <= x) ++k;
    const int64_t v = k == 0 ? p.warmup_iterations : sch[static_cast<size_t>(k - 1)];
    const double traffic = wall ? std::min(N, p.PositionAt(x)) : producer_at(x);
    auto l = s.At(v, traffic);
    if (!l.ok()) return NAN;
    cil += *l * dx * p.requests.RatePerSecond();
  }
  return cil;
}

// On an uneven clock: the surface evaluation equals brute-force quadrature
// over time (both clocks, both windows), and the oracle equals enumeration
// over grid schedules and model choices on that clock.
TEST(StalenessOracleTest, OnAnUnevenClockItEqualsQuadratureAndEnumeration) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 16; ++trial) {
    const double rate = 0.05 * u(rng);
    const int64_t period = 20 + static_cast<int64_t>(u(rng) * 20);
    const double J = 2 * u(rng);
    LossFn f = [&](int64_t v, int64_t t) {
      return Curve(v) + rate * static_cast<double>(t - v) + ((v / period) % 2 != (t / period) % 2 ? J : 0.0);
    };
    auto s = StalenessSurface::Make(Grid(0, 100, 20, f), StalenessSample::kTest);
    ASSERT_TRUE(s.ok());
    Problem p = Small(trial % 2 ? WindowKind::kRequestCount : WindowKind::kWhileTraining);
    p.cost.stall_s = 3 * u(rng);
    p.cost.delay_s = 6 * u(rng);
    p.requests.traffic_clock = trial % 4 < 2 ? TrafficClock::kProducer : TrafficClock::kWall;
    SetUnevenClock(&p, rng);
    ASSERT_TRUE(p.Validate().ok());
    std::vector<int64_t> cand;
    for (int64_t v : s->Versions()) {
      if (v > p.warmup_iterations && v <= p.total_iterations) cand.push_back(v);
    }
    // Quadrature: three random grid schedules.
    for (int r = 0; r < 3; ++r) {
      Schedule sch;
      for (int64_t c : cand) {
        if (u(rng) < 0.4) sch.push_back(c);
      }
      auto e = EvaluateOnSurface(p, *s, sch);
      ASSERT_TRUE(e.ok()) << e.status().message();
      const double q = CilByQuadrature(p, *s, sch);
      EXPECT_NEAR(e->cil, q, 2e-3 * q) << "trial " << trial << " schedule " << r;
    }
    auto sol = SolveOptimalOnSurface(p, *s);
    ASSERT_TRUE(sol.ok()) << sol.status().message();
    const double enumerated = BestByEnumeration(p, *s, cand, nullptr, /*republish=*/sol->republish_searched);
    EXPECT_NEAR(sol->objective, enumerated, 1e-9 * enumerated) << "trial " << trial;
  }
}

// A long uneven clock (more iterations than the per-model prefix keeps, so
// it is completed from a kept entry below): the surface evaluation still
// equals brute-force quadrature, both clocks.
TEST(StalenessOracleTest, OnALongUnevenClockItEqualsQuadrature) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> u(0, 1);
  LossFn f = [](int64_t v, int64_t t) {
    return 1.0 + 4.0 / (1.0 + static_cast<double>(v) / 500.0) + 0.0002 * static_cast<double>(t - v);
  };
  auto s = StalenessSurface::Make(Grid(10, 10010, 1000, f), StalenessSample::kTest);
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (TrafficClock clock : {TrafficClock::kProducer, TrafficClock::kWall}) {
    Problem p = Small(WindowKind::kWhileTraining);
    p.total_iterations = 10010;
    p.seconds_per_iteration = 0.01;
    p.cost.stall_s = 2.0;
    p.cost.delay_s = 3.0;
    p.requests.interval_s = 0.5;
    p.requests.traffic_clock = clock;
    SetUnevenClock(&p, rng);
    const Schedule sch = {2010, 5010, 8010};
    // A long pause in the iteration of each checkpoint (as a log's eval
    // or save pauses): a prefix entry that missed it would be far off.
    for (int64_t c : sch) {
      for (size_t i = static_cast<size_t>(c - p.warmup_iterations); i < p.elapsed_s.size(); ++i) p.elapsed_s[i] += 300.0;
    }
    ASSERT_TRUE(p.Validate().ok());
    auto e = EvaluateOnSurface(p, *s, sch);
    ASSERT_TRUE(e.ok()) << e.status().message();
    const double q = CilByQuadrature(p, *s, sch);
    EXPECT_NEAR(e->cil, q, 2e-3 * q) << ToString(clock);
  }
}

TEST(StalenessOracleTest, RepublishingEqualsEnumerationOverModelChoices) {
  // Recurring domains: the traffic alternates every `period` iterations and a
  // model trained in the other domain pays J, so an older model of today's
  // domain can beat the newest one. Both clocks, both windows, random costs.
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  int republished = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t period = 15 + static_cast<int64_t>(u(rng) * 20);
    const double J = 1 + 3 * u(rng);
    LossFn f = [&](int64_t v, int64_t t) { return Curve(v) + ((v / period) % 2 != (t / period) % 2 ? J : 0.0); };
    auto s = StalenessSurface::Make(Grid(0, 100, 20, f), StalenessSample::kTest);
    ASSERT_TRUE(s.ok());
    Problem p = Small(trial % 2 ? WindowKind::kRequestCount : WindowKind::kWhileTraining);
    p.cost.stall_s = 3 * u(rng);
    p.cost.delay_s = 6 * u(rng);
    p.price_per_slowdown_s = trial % 3 == 0 ? u(rng) : 0.0;
    p.requests.traffic_clock = trial % 4 < 2 ? TrafficClock::kProducer : TrafficClock::kWall;
    std::vector<int64_t> cand;
    for (int64_t v : s->Versions()) {
      if (v > p.warmup_iterations && v <= p.total_iterations) cand.push_back(v);
    }
    ASSERT_LE(cand.size(), 6u);
    auto sol = SolveOptimalOnSurface(p, *s);
    ASSERT_TRUE(sol.ok()) << sol.status().message();
    ASSERT_TRUE(sol->republish_searched);
    const double enumerated = BestByEnumeration(p, *s, cand, nullptr, /*republish=*/true);
    EXPECT_NEAR(sol->objective, enumerated, 1e-9 * enumerated) << "trial " << trial;
    auto check = EvaluateOnSurface(p, *s, sol->schedule, sol->published);
    ASSERT_TRUE(check.ok()) << check.status().message();
    EXPECT_NEAR(check->objective, sol->objective, 1e-9 * sol->objective) << "trial " << trial;
    republished += sol->republished > 0;
    // Without re-publishing the optimum is no better (and is what the
    // enumeration over own models finds).
    auto own = SolveOptimalOnSurface(p, *s, {}, 4000, /*max_republish_work=*/0);
    ASSERT_TRUE(own.ok());
    EXPECT_FALSE(own->republish_searched);
    EXPECT_TRUE(own->published.empty());
    EXPECT_GE(own->objective, sol->objective - 1e-9 * sol->objective);
    EXPECT_NEAR(own->objective, BestByEnumeration(p, *s, cand), 1e-9 * own->objective) << "trial " << trial;
  }
  EXPECT_GT(republished, 0) << "recurring domains should make re-publishing pay in some trial";
}

// L(v, t) = Curve(v) + 0.1 (t - v), and a problem from iteration 0 whose
// stall and delay are 20 s (the two tests below).
double SlowDecay(int64_t v, int64_t t) { return Curve(v) + 0.1 * static_cast<double>(t - v); }
Problem LongStalls() {
  Problem p = Small(WindowKind::kWhileTraining);
  p.warmup_iterations = 0;
  p.cost.stall_s = 20;
  p.cost.delay_s = 20;
  return p;
}

TEST(StalenessOracleTest, UnderTheWallClockStallsDoNotHoldTheTrafficBack) {
  // L(v, t) = Curve(v) + 0.1 (t - v). A schedule {30} with sigma = 20: under
  // the producer clock the traffic waits at 30 during the stall; under the
  // wall clock it moves on, so version 0 (served until A_1) and version 30
  // both meet later traffic, and the CIL is higher by exactly the extra drift.
  auto s = StalenessSurface::Make(Grid(0, 100, 1, SlowDecay), StalenessSample::kTest);
  ASSERT_TRUE(s.ok());
  Problem p = LongStalls();
  p.requests.traffic_clock = TrafficClock::kProducer;
  auto producer = EvaluateOnSurface(p, *s, {30});
  p.requests.traffic_clock = TrafficClock::kWall;
  auto wall = EvaluateOnSurface(p, *s, {30});
  ASSERT_TRUE(producer.ok() && wall.ok());
  // tau = 1, rate 2, W = 0, N = 100, window 120 s. Producer clock: v0 on
  // [0, 50) sees traffic 0..30 then 30 (stall); v30 on [50, 120) sees 30..100.
  // Wall clock: v0 on [0, 50) sees 0..50; v30 on [50, 120) sees 50..100 then
  // 100. Differences in the 0.1 (t - v) term, in request-seconds x 0.1 x 2:
  //   v0: int_0^50 x dx - (int_0^30 x dx + 30 x 20) = 1250 - 1050 = 200;
  //   v30: (int_50^100 (x - 30) dx + 70 x 20) - int_30^100 (x - 30) dx = 3650 - 2450 = 1200.
  EXPECT_NEAR(wall->cil - producer->cil, 2.0 * 0.1 * (200 + 1200), 1e-9);
}

TEST(StalenessOracleTest, KeepCopiesDelayTheCheckpointsAndHoldTheProducersTraffic) {
  // The world above (sigma = delta = 20, schedule {30}) with a 10 s copy at
  // the end of iterations 10 and 30 (kept, unpublished): the checkpoint at
  // 30 starts at 30 + 20 = 50, v30 is servable at 70, training ends at 140.
  // Producer clock: v0 on [0, 70) sees 0..10, 10 (copy), 10..30, 30 (copy),
  // 30 (stall); v30 on [70, 140) sees 30..100 as before. Against no copies
  // (v0 on [0, 50)): v0 serves 20 s longer at Curve(0), and its 0.1 (t - v)
  // term grows from 1050 to 50 + 100 + 400 + 300 + 600 = 1450
  // request-seconds / rate. Wall clock: v0 sees 0..70 (2450 against 1250)
  // and v30 70..100 then 100 for 40 s (4450 against 3650).
  auto s = StalenessSurface::Make(Grid(0, 100, 1, SlowDecay), StalenessSample::kTest);
  ASSERT_TRUE(s.ok());
  Problem p = LongStalls();
  p.cost.keep_copy_s = 10;
  p.price_per_slowdown_s = 1;
  for (TrafficClock clock : {TrafficClock::kProducer, TrafficClock::kWall}) {
    SCOPED_TRACE(ToString(clock));
    p.requests.traffic_clock = clock;
    auto without = EvaluateOnSurface(p, *s, {30});
    auto with = EvaluateOnSurface(p, *s, {30}, {}, {10, 30});
    ASSERT_TRUE(without.ok() && with.ok()) << with.status().ToString();
    EXPECT_DOUBLE_EQ(with->window_end_s, 140.0);
    const double extra_drift = clock == TrafficClock::kProducer ? 1450 - 1050 : (2450 - 1250) + (4450 - 3650);
    EXPECT_NEAR(with->cil - without->cil, 2.0 * (20 * Curve(0) + 0.1 * extra_drift), 1e-9);
    EXPECT_NEAR(with->objective - with->cil, 20 + 2 * 10, 1e-12) << "the copies are slowdown too";
  }
  auto bad = EvaluateOnSurface(p, *s, {30}, {}, {30, 10});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kept[1] = 10"), std::string::npos) << bad.status().message();
}

TEST(StalenessOracleTest, WithoutDriftOnEveryIterationItIsTheDiagonalOptimum) {
  // Every iteration a version and no decay: the oracle on the table is the
  // exact optimum of the diagonal curve (solvers.h), both windows.
  auto s = StalenessSurface::Make(Grid(0, 100, 1, [](int64_t v, int64_t) { return Curve(v); }), StalenessSample::kTest);
  std::vector<double> l;
  for (int64_t i = 0; i <= 100; ++i) l.push_back(Curve(i));
  for (WindowKind w : {WindowKind::kWhileTraining, WindowKind::kRequestCount}) {
    const Problem p = Small(w);
    auto on_table = SolveOptimalOnSurface(p, *s);
    auto diagonal = SolveOptimal(p, LossCurve(0, l));
    ASSERT_TRUE(on_table.ok() && diagonal.ok());
    EXPECT_NEAR(on_table->objective, diagonal->objective, 1e-9 * diagonal->objective) << ToString(w);
  }
}

TEST(StalenessOracleTest, AfterASwapTheOracleReplacesTheStaleVersion) {
  // Without the table the optimum may keep an early version; with it, some
  // checkpoint at or after the swap (iteration 60) is needed.
  auto s = StalenessSurface::Make(Grid(0, 100, 10, Swap), StalenessSample::kTest);
  Problem p = Small(WindowKind::kWhileTraining);
  p.cost.stall_s = 20;  // expensive checkpoints: few of them
  auto sol = SolveOptimalOnSurface(p, *s);
  ASSERT_TRUE(sol.ok());
  ASSERT_FALSE(sol->schedule.empty());
  EXPECT_GE(sol->schedule.back(), 60);
}

// A run that diverges at 60 (a diverged model's losses are +inf, as the
// readers keep NaN/inf with --non-finite diverged): every version from 60 on
// is +inf on every traffic, the versions between 50 and 60 too (nothing says
// when it diverged), older versions keep their own rows, and the oracle never
// publishes a diverged version however cheap checkpoints are.
TEST(StalenessSurfaceTest, ADivergedVersionIsInfiniteAndNeverPublished) {
  const double inf = std::numeric_limits<double>::infinity();
  LossFn f = [&](int64_t v, int64_t t) { return v >= 60 ? inf : Curve(v) + 0.01 * static_cast<double>(t - v); };
  auto s = StalenessSurface::Make(Grid(0, 100, 10, f), StalenessSample::kTest);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(s->Diverged(60));
  EXPECT_TRUE(s->Diverged(55));
  EXPECT_TRUE(s->Diverged(100));
  EXPECT_FALSE(s->Diverged(50));
  EXPECT_EQ(*s->At(70, 90), inf);
  EXPECT_EQ(*s->At(55, 60), inf);
  EXPECT_NEAR(*s->At(50, 90), f(50, 90), 1e-12);
  EXPECT_NEAR(*s->At(45, 95), 0.5 * (Curve(40) + Curve(50)) + 0.01 * 50, 1e-12);
  EXPECT_EQ(*s->Integral(70, 70, 80), inf);
  // A diverged version is +inf even where only diverged rows reach the traffic.
  StalenessTable late = Grid(0, 100, 10, f);
  late.records.erase(std::remove_if(late.records.begin(), late.records.end(),
                                    [](const StalenessRecord& r) { return r.version_iteration < 60 && r.traffic_iteration > 60; }),
                     late.records.end());
  auto ls = StalenessSurface::Make(late, StalenessSample::kTest);
  ASSERT_TRUE(ls.ok()) << ls.status().message();
  EXPECT_EQ(*ls->At(80, 95), inf);
  EXPECT_EQ(*ls->Integral(80, 85, 95), inf);
  EXPECT_FALSE(ls->At(50, 95).ok()) << "a finite version still needs a row reaching the traffic";
  EXPECT_EQ(*s->Integral(70, 75, 75), 0.0);
  EXPECT_TRUE(std::isfinite(s->min_loss()));
  for (WindowKind w : {WindowKind::kWhileTraining, WindowKind::kRequestCount}) {
    Problem p = Small(w);
    p.cost.stall_s = 0.01;
    p.cost.delay_s = 0.1;
    auto sol = SolveOptimalOnSurface(p, *s);
    ASSERT_TRUE(sol.ok()) << sol.status().message();
    ASSERT_FALSE(sol->schedule.empty());
    for (int64_t c : sol->schedule) EXPECT_LT(c, 60) << ToString(w);
    EXPECT_TRUE(std::isfinite(sol->objective));
    // A schedule that publishes one is charged +inf.
    auto bad = EvaluateOnSurface(p, *s, {30, 70});
    ASSERT_TRUE(bad.ok()) << bad.status().message();
    EXPECT_EQ(bad->cil, inf);
  }
  // +inf off the diagonal of a finite version is not a diverged model.
  StalenessTable t = Grid(0, 20, 10, [](int64_t, int64_t) { return 1.0; });
  t.records[1].test_loss = inf;  // (0, 10)
  auto bad = StalenessSurface::Make(t, StalenessSample::kTest);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("(version 0, traffic 10)"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("diverged"), std::string::npos) << bad.status().message();
  // NaN is never a loss here (the readers turn it into +inf or an error).
  t.records[1].test_loss = std::nan("");
  EXPECT_FALSE(StalenessSurface::Make(t, StalenessSample::kTest).ok());
  // A diverged model at the end of the warm-up leaves nothing to serve.
  Problem p = Small(WindowKind::kWhileTraining);
  p.warmup_iterations = 60;
  auto none = SolveOptimalOnSurface(p, *s);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("diverged"), std::string::npos);
}

// Every schedule of `cand` and every model its checkpoints may publish, with
// its objective on `s`, keyed by the decisions taken while the traffic is at
// or before `diverge` (each checkpoint and its model): the part a planner
// that cannot tell two runs apart until then must share.
using PrefixKey = std::vector<std::pair<int64_t, int64_t>>;
std::map<PrefixKey, double> BestByPrefix(const Problem& p, const StalenessSurface& s,
                                         const std::vector<int64_t>& cand, double diverge) {
  std::map<PrefixKey, double> best;
  ForEachSchedule(
      p, cand, /*republish=*/true, {}, [&](const Schedule& sch, const std::vector<int64_t>& models) {
        auto e = EvaluateOnSurface(p, s, sch, models);
        if (!e.ok()) return;
        PrefixKey key;
        for (size_t k = 0; k < sch.size(); ++k) {
          const double start = p.CheckpointStart(sch[k], static_cast<int64_t>(k + 1));
          const double traffic =
              p.requests.traffic_clock == TrafficClock::kWall
                  ? std::min(static_cast<double>(p.total_iterations),
                             static_cast<double>(p.warmup_iterations) + start / p.seconds_per_iteration)
                  : static_cast<double>(sch[k]);
          if (traffic <= diverge) key.emplace_back(sch[k], models[k]);
        }
        auto it = best.find(key);
        if (it == best.end() || e->objective < it->second) best[key] = e->objective;
      });
  return best;
}

TEST(CausalPairBoundTest, EqualsEnumerationOverSharedDecisions) {
  // Run a: domains A, then B from d, then A again from d + P (a recurring
  // first return); run b: B from d on, for good. A model trained in the other
  // domain than the traffic's pays J. Until the return the runs are one.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  int positive = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const int64_t d = 25 + static_cast<int64_t>(u(rng) * 10), P = 25 + static_cast<int64_t>(u(rng) * 15);
    const double J = 1 + 4 * u(rng);
    auto dom_a = [=](int64_t x) { return x >= d && x < d + P; };
    auto dom_b = [=](int64_t x) { return x >= d; };
    LossFn fa = [=](int64_t v, int64_t t) { return Curve(v) + (dom_a(v) != dom_a(t) ? J : 0.0); };
    LossFn fb = [=](int64_t v, int64_t t) { return Curve(v) + (dom_b(v) != dom_b(t) ? J : 0.0); };
    auto ta = Grid(0, 100, 20, fa), tb = Grid(0, 100, 20, fb);
    auto a = StalenessSurface::Make(ta, StalenessSample::kTest),
         b = StalenessSurface::Make(tb, StalenessSample::kTest);
    auto va = StalenessSurface::Make(ta, StalenessSample::kValidation);
    auto vb = StalenessSurface::Make(tb, StalenessSample::kValidation);
    ASSERT_TRUE(a.ok() && b.ok() && va.ok() && vb.ok());
    Problem p = Small(trial % 2 ? WindowKind::kRequestCount : WindowKind::kWhileTraining);
    p.cost.stall_s = 3 * u(rng);
    p.cost.delay_s = 6 * u(rng);
    p.price_per_slowdown_s = trial % 3 == 0 ? u(rng) : 0.0;
    p.requests.traffic_clock = trial % 4 < 2 ? TrafficClock::kProducer : TrafficClock::kWall;
    // The grid's traffic points are 0, 20, ...: the first that differs is the
    // first at or after the return d + P (the loss of a B model there).
    const double agree = SurfacesAgreeUntil(*va, *vb, p.warmup_iterations);
    EXPECT_EQ(agree, 20.0 * std::ceil(static_cast<double>(d + P) / 20.0) - 20.0) << "trial " << trial;
    const std::vector<double> lambdas = {0.2, 0.35, 0.5, 0.65, 0.8};
    auto bound = SolveCausalPairBound(p, *a, *b, agree, lambdas);
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    auto oa = SolveOptimalOnSurface(p, *a), ob = SolveOptimalOnSurface(p, *b);
    ASSERT_TRUE(oa.ok() && ob.ok());
    EXPECT_NEAR(bound->objective_a, oa->objective, 1e-9 * oa->objective);
    std::vector<int64_t> cand;
    for (int64_t v : a->Versions()) {
      if (v > p.warmup_iterations && v <= p.total_iterations) cand.push_back(v);
    }
    const auto ea = BestByPrefix(p, *a, cand, agree), eb = BestByPrefix(p, *b, cand, agree);
    ASSERT_EQ(bound->by_lambda.size(), lambdas.size());
    for (size_t q = 0; q < lambdas.size(); ++q) {
      const double wa = lambdas[q] / oa->objective, wb = (1 - lambdas[q]) / ob->objective;
      double best = std::numeric_limits<double>::infinity();
      for (const auto& [key, cost] : ea) {
        auto it = eb.find(key);
        if (it != eb.end()) best = std::min(best, wa * cost + wb * it->second);
      }
      EXPECT_NEAR(bound->by_lambda[q].second, best - 1, 1e-9)
          << "trial " << trial << " weight " << lambdas[q];
    }
    // The schedules the bound comes from: the same on both runs for their
    // first shared_checkpoints, and their weighted regret is the bound.
    const size_t r = static_cast<size_t>(bound->shared_checkpoints);
    ASSERT_LE(r, bound->schedule_a.size());
    ASSERT_LE(r, bound->schedule_b.size());
    for (size_t q = 0; q < r; ++q) {
      EXPECT_EQ(bound->schedule_a[q], bound->schedule_b[q]);
      EXPECT_EQ(bound->published_a[q], bound->published_b[q]);
    }
    auto xa = EvaluateOnSurface(p, *a, bound->schedule_a, bound->published_a);
    auto xb = EvaluateOnSurface(p, *b, bound->schedule_b, bound->published_b);
    ASSERT_TRUE(xa.ok() && xb.ok()) << "trial " << trial;
    EXPECT_NEAR(bound->lambda * xa->objective / oa->objective +
                    (1 - bound->lambda) * xb->objective / ob->objective - 1,
                bound->bound, 1e-9)
        << "trial " << trial;
    // A bound, not a schedule's regret: at least 0, and no more than what one
    // schedule served on both runs (a planner that never looks) pays on the
    // worse of them.
    EXPECT_GE(bound->bound, -1e-12);
    for (const auto* o : {&*oa, &*ob}) {
      auto ra = EvaluateOnSurface(p, *a, o->schedule, o->published);
      auto rb = EvaluateOnSurface(p, *b, o->schedule, o->published);
      ASSERT_TRUE(ra.ok() && rb.ok());
      EXPECT_LE(bound->bound,
                std::max(ra->objective / oa->objective, rb->objective / ob->objective) - 1 + 1e-9);
    }
    positive += bound->bound > 1e-6;
    // Runs that never differ, or differ from the start: nothing is forced.
    auto same = SolveCausalPairBound(p, *a, *a, static_cast<double>(p.total_iterations), lambdas);
    auto apart = SolveCausalPairBound(p, *a, *b, static_cast<double>(p.warmup_iterations) - 1, lambdas);
    ASSERT_TRUE(same.ok() && apart.ok());
    EXPECT_NEAR(same->bound, 0, 1e-9);
    EXPECT_NEAR(apart->bound, 0, 1e-9);
  }
  EXPECT_GT(positive, 0) << "a first return the planner cannot see coming should force regret in some trial";
}

TEST(CausalBoundTest, FamilyEqualsEnumerationOverSharedDecisions) {
  // Three runs: calm (0), a swap to domain B at d1 (1), the same swap at
  // d2 > d1 (2). Until d1 all three look alike; from d1 to d2 the calm run
  // and run 2 still do. A model trained in the other domain than the
  // traffic's pays J. The curve is flat, so that a calm run wants few
  // checkpoints and a drifted one a checkpoint after its swap: what run 1
  // decides alone after d1 differs from what the others would.
  std::mt19937 rng(29);
  std::uniform_real_distribution<double> u(0, 1);
  int above_pair = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t d1 = 25 + static_cast<int64_t>(u(rng) * 15), d2 = d1 + 20 + static_cast<int64_t>(u(rng) * 20);
    const double J = 1 + 4 * u(rng);
    auto loss = [=](int64_t d) {
      return LossFn([=](int64_t v, int64_t t) {
        return 2.0 + 0.4 / (1.0 + static_cast<double>(v) / 10.0) + ((v >= d) != (t >= d) ? J : 0.0);
      });
    };
    const StalenessTable t0 = Grid(0, 100, 20, loss(1000)), t1 = Grid(0, 100, 20, loss(d1)),
                         t2 = Grid(0, 100, 20, loss(d2));
    std::vector<StalenessSurface> truth, seen;
    for (const StalenessTable* t : {&t0, &t1, &t2}) {
      auto a = StalenessSurface::Make(*t, StalenessSample::kTest);
      auto v = StalenessSurface::Make(*t, StalenessSample::kValidation);
      ASSERT_TRUE(a.ok() && v.ok());
      truth.push_back(*a);
      seen.push_back(*v);
    }
    Problem p = Small(trial % 2 ? WindowKind::kRequestCount : WindowKind::kWhileTraining);
    p.cost.stall_s = 3 * u(rng);
    p.cost.delay_s = 6 * u(rng);
    p.price_per_slowdown_s = trial % 3 == 0 ? u(rng) : 0.0;
    p.requests.traffic_clock = trial % 4 < 2 ? TrafficClock::kProducer : TrafficClock::kWall;
    const double a1 = SurfacesAgreeUntil(seen[0], seen[1], p.warmup_iterations),
                 a2 = SurfacesAgreeUntil(seen[0], seen[2], p.warmup_iterations);
    ASSERT_LE(a1, a2) << "trial " << trial;
    const std::vector<double> parts = {a2, a1, a2};
    const std::vector<std::vector<double>> weights = {{1.0 / 3, 1.0 / 3, 1.0 / 3}, {0.2, 0.5, 0.3}};
    auto bound = SolveCausalBound(p, {&truth[0], &truth[1], &truth[2]}, parts, weights);
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    std::vector<double> opt;
    for (const StalenessSurface& s : truth) {
      auto o = SolveOptimalOnSurface(p, s);
      ASSERT_TRUE(o.ok());
      opt.push_back(o->objective);
    }
    std::vector<int64_t> cand;
    for (int64_t v : truth[0].Versions()) {
      if (v > p.warmup_iterations && v <= p.total_iterations) cand.push_back(v);
    }
    // Run 1 shares the first entries of the calm run's prefix, those taken
    // while the traffic is at or before a1.
    const auto e0 = BestByPrefix(p, truth[0], cand, a2), e1 = BestByPrefix(p, truth[1], cand, a1),
               e2 = BestByPrefix(p, truth[2], cand, a2);
    auto traffic = [&](size_t k, int64_t c) {
      const double start = p.CheckpointStart(c, static_cast<int64_t>(k + 1));
      return p.requests.traffic_clock == TrafficClock::kWall
                 ? std::min(static_cast<double>(p.total_iterations),
                            static_cast<double>(p.warmup_iterations) + start / p.seconds_per_iteration)
                 : static_cast<double>(c);
    };
    ASSERT_EQ(bound->by_weights.size(), weights.size());
    for (size_t q = 0; q < weights.size(); ++q) {
      const std::vector<double>& w = weights[q];
      double best = std::numeric_limits<double>::infinity();
      for (const auto& [key, c0] : e0) {
        auto i2 = e2.find(key);
        if (i2 == e2.end()) continue;
        PrefixKey k1;
        for (size_t k = 0; k < key.size() && traffic(k, key[k].first) <= a1; ++k) k1.push_back(key[k]);
        auto i1 = e1.find(k1);
        if (i1 == e1.end()) continue;
        best = std::min(best, w[0] * c0 / opt[0] + w[1] * i1->second / opt[1] + w[2] * i2->second / opt[2]);
      }
      EXPECT_NEAR(bound->by_weights[q].second, best - 1, 1e-9) << "trial " << trial << " weights " << q;
    }
    // The schedules it comes from: each run's shared checkpoints are the
    // calm run's first ones, and their weighted regret is the bound.
    double weighted = -1;
    for (size_t m = 0; m < 3; ++m) {
      const size_t r = static_cast<size_t>(bound->shared_checkpoints[m]);
      ASSERT_LE(r, bound->schedules[m].size());
      ASSERT_LE(r, bound->schedules[0].size());
      for (size_t q = 0; q < r; ++q) {
        EXPECT_EQ(bound->schedules[m][q], bound->schedules[0][q]) << "trial " << trial << " run " << m;
        EXPECT_EQ(bound->published[m][q], bound->published[0][q]) << "trial " << trial << " run " << m;
      }
      auto x = EvaluateOnSurface(p, truth[m], bound->schedules[m], bound->published[m]);
      ASSERT_TRUE(x.ok());
      weighted += bound->weights[m] * x->objective / opt[m];
    }
    EXPECT_NEAR(weighted, bound->bound, 1e-9) << "trial " << trial;
    // Not knowing when the swap comes costs at least what not knowing
    // whether does: never below the calm run's pair bound with run 1 at the
    // same weights on the two.
    auto pair = SolveCausalBound(p, {&truth[0], &truth[1]}, {a1, a1}, {{0.5, 0.5}});
    auto family = SolveCausalBound(p, {&truth[0], &truth[1], &truth[2]}, parts, {{0.4, 0.4, 0.2}});
    ASSERT_TRUE(pair.ok() && family.ok());
    EXPECT_GE(family->bound + 1e-12, 0.8 * pair->bound) << "trial " << trial;
    above_pair += family->bound > 0.8 * pair->bound + 1e-6;
  }
  EXPECT_GT(above_pair, 0) << "a second onset the planner cannot tell from the calm run should cost more in some trial";
}

TEST(CausalBoundTest, BadFamiliesAreErrors) {
  auto s = StalenessSurface::Make(Grid(0, 100, 20, Swap), StalenessSample::kTest);
  ASSERT_TRUE(s.ok());
  const Problem p = Small(WindowKind::kWhileTraining);
  EXPECT_FALSE(SolveCausalBound(p, {&*s}, {50}, {{1.0}}).ok()) << "one run is no family";
  EXPECT_FALSE(SolveCausalBound(p, {&*s, &*s, &*s}, {50, 50}, {{0.3, 0.3, 0.4}}).ok()) << "a parting point short";
  EXPECT_FALSE(SolveCausalBound(p, {&*s, &*s, &*s}, {50, 50, 50}, {{0.5, 0.5}}).ok()) << "a weight short";
  EXPECT_FALSE(SolveCausalBound(p, {&*s, &*s, &*s}, {50, 50, 50}, {{0.5, 0.4, 0.4}}).ok()) << "weights over 1";
  EXPECT_FALSE(SolveCausalBound(p, {&*s, &*s, &*s}, {50, 50, 50}, {{0.0, 0.5, 0.5}}).ok()) << "a zero weight";
  auto ok = SolveCausalBound(p, {&*s, &*s, &*s}, {50, 50, 50}, {{0.3, 0.3, 0.4}});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_NEAR(ok->bound, 0, 1e-9) << "three copies of one run force nothing";
}

TEST(CausalPairBoundTest, BadWeightsAndUncoveredTablesAreErrors) {
  auto s = StalenessSurface::Make(Grid(0, 100, 20, Swap), StalenessSample::kTest);
  auto short_table = StalenessSurface::Make(Grid(0, 60, 20, Swap), StalenessSample::kTest);
  ASSERT_TRUE(s.ok() && short_table.ok());
  const Problem p = Small(WindowKind::kWhileTraining);
  EXPECT_FALSE(SolveCausalPairBound(p, *s, *s, 50, {}).ok());
  EXPECT_FALSE(SolveCausalPairBound(p, *s, *s, 50, {0.0}).ok());
  EXPECT_FALSE(SolveCausalPairBound(p, *s, *s, 50, {1.5}).ok());
  // 400 candidates: about 2.1e9 slot costs, refused before any is computed.
  auto big = StalenessSurface::Make(Grid(0, 4000, 10, [](int64_t v, int64_t) { return Curve(v); }),
                                    StalenessSample::kTest);
  ASSERT_TRUE(big.ok());
  Problem wide = p;
  wide.total_iterations = 4000;
  auto slow = SolveCausalPairBound(wide, *big, *big, 50, {0.5});
  ASSERT_FALSE(slow.ok());
  EXPECT_NE(slow.status().message().find("thin the tables"), std::string::npos) << slow.status().message();
  auto uncovered = SolveCausalPairBound(p, *s, *short_table, 50, {0.5});
  ASSERT_FALSE(uncovered.ok());
  EXPECT_NE(uncovered.status().message().find("100"), std::string::npos) << uncovered.status().message();
}

}  // namespace
}  // namespace schedulers
}  // namespace viper
