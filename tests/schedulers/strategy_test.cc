#include "viper/schedulers/strategy.h"

#include <gtest/gtest.h>

#include <cmath>

namespace viper {
namespace schedulers {
namespace {

// Returns the true curve whatever it is shown: a perfect forecaster.
class PerfectForecaster : public Forecaster {
 public:
  explicit PerfectForecaster(LossCurve truth) : truth_(std::move(truth)) {}
  StatusOr<LossCurve> Forecast(const predictor::CurveData&, int64_t first, int64_t last) override {
    std::vector<double> v;
    for (int64_t i = first; i <= last; ++i) v.push_back(truth_.at(i));
    return LossCurve(first, v);
  }

 private:
  LossCurve truth_;
};

struct Case {
  PlanningInput input;
  LossCurve truth;
};

// N = 400, W = 80, l(i) = 2 exp(-i/100) + 0.3 (+ a drop at 250), 2 s per iteration.
Case MakeCase(WindowKind window) {
  Case c;
  std::vector<double> l;
  predictor::CurveData points;
  for (int i = 0; i <= 400; ++i) {
    l.push_back(2.0 * std::exp(-i / 100.0) + 0.3 - (i >= 250 ? 0.1 : 0.0));
    points.iterations.push_back(i);
    points.losses.push_back(l.back());
  }
  c.truth = LossCurve(0, l);
  Problem& p = c.input.problem;
  p.warmup_iterations = 80;
  p.total_iterations = 400;
  p.seconds_per_iteration = 2.0;
  p.cost.stall_s = 1.5;
  p.cost.delay_s = 3.0;
  p.requests.interval_s = 0.5;
  p.requests.window = window;
  p.requests.request_count = 1000;
  c.input.predicted = c.truth;
  c.input.truth = c.truth;
  c.input.observed = points;
  return c;
}

TEST(StrategyTest, NamesRoundTrip) {
  for (StrategyKind k : AllStrategyKinds()) EXPECT_EQ(*StrategyKindFromString(ToString(k)), k);
  EXPECT_EQ(ParseStrategyKinds("all")->size(), 7u);
  EXPECT_EQ(ParseStrategyKinds("epoch,optimal")->size(), 2u);
  auto bad = ParseStrategyKinds("epoch,best");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("best"), std::string::npos);
  EXPECT_FALSE(MakeStrategy(StrategyKind::kEpoch, {}).ok());
  EXPECT_FALSE(MakeStrategy(StrategyKind::kOnline, {}).ok());
}

// With a perfect forecaster, receding-horizon re-planning reaches the
// oracle's objective (the principle of optimality: the rest of an optimal
// schedule is optimal for the rest of the problem).
TEST(StrategyTest, OnlineWithPerfectForecastMatchesOracle) {
  for (WindowKind w : {WindowKind::kWhileTraining, WindowKind::kRequestCount}) {
    Case c = MakeCase(w);
    StrategyOptions opt;
    opt.forecasters = [&c] { return std::make_unique<PerfectForecaster>(c.truth); };
    auto online = (*MakeStrategy(StrategyKind::kOnline, opt))->MakePlan(c.input);
    auto oracle = (*MakeStrategy(StrategyKind::kOracle, opt))->MakePlan(c.input);
    ASSERT_TRUE(online.ok() && oracle.ok()) << online.status().ToString();
    EXPECT_NEAR(online->summary.predicted.objective, oracle->summary.predicted.objective,
                1e-9 * oracle->summary.predicted.objective);
  }
}

// Every strategy runs; optimal is the best of them on the fluid objective it
// optimises (planned and judged on the same curve here).
TEST(StrategyTest, AllStrategiesRunAndOptimalIsBest) {
  Case c = MakeCase(WindowKind::kRequestCount);
  StrategyOptions opt;
  opt.iterations_per_epoch = 50;
  opt.forecasters = [&c] { return std::make_unique<PerfectForecaster>(c.truth); };
  double optimal = 0;
  std::vector<double> others;
  for (StrategyKind k : AllStrategyKinds()) {
    auto plan = (*MakeStrategy(k, opt))->MakePlan(c.input);
    ASSERT_TRUE(plan.ok()) << ToString(k) << ": " << plan.status().ToString();
    EXPECT_FALSE(plan->summary.BriefReport().empty());
    if (k == StrategyKind::kOptimal) optimal = plan->summary.predicted.objective;
    others.push_back(plan->summary.predicted.objective);
  }
  for (double o : others) EXPECT_LE(optimal, o * (1 + 1e-9));
}

// The predictor-backed forecaster fits a clean exponential and extrapolates
// it closely (within 5% at the horizon), and online re-plans with it.
TEST(StrategyTest, PredictorForecasterExtrapolates) {
  predictor::CurveData d;
  for (int i = 1; i <= 100; ++i) {
    d.iterations.push_back(i);
    d.losses.push_back(2.0 * std::exp(-i / 60.0) + 0.3);
  }
  predictor::LearningCurvePredictor::Options o;
  o.families = {predictor::CurveFamily::kExp3};
  o.selection = predictor::Selection::kBestMse;
  auto f = MakePredictorForecaster(o);
  auto curve = f->Forecast(d, 100, 300);
  ASSERT_TRUE(curve.ok()) << curve.status().ToString();
  EXPECT_NEAR(curve->at(300), 2.0 * std::exp(-5.0) + 0.3, 0.05 * 0.31);
}

TEST(StrategyTest, InterpolateCurve) {
  predictor::CurveData d;
  d.iterations = {10, 20};
  d.losses = {1.0, 3.0};
  auto c = InterpolateCurve(d, 5, 25);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->at(5), 1.0);   // before the first point: held
  EXPECT_DOUBLE_EQ(c->at(15), 2.0);  // halfway
  EXPECT_DOUBLE_EQ(c->at(25), 3.0);  // after the last: held
}

}  // namespace
}  // namespace schedulers
}  // namespace viper
