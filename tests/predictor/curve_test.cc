#include "viper/predictor/curve.h"

#include <gtest/gtest.h>

#include <cmath>

namespace viper {
namespace predictor {
namespace {

TEST(CurveFamily, NamesRoundTrip) {
  ASSERT_EQ(AllCurveFamilies().size(), static_cast<size_t>(kNumCurveFamilies));
  for (CurveFamily f : AllCurveFamilies()) {
    auto back = CurveFamilyFromString(ToString(f));
    ASSERT_TRUE(back.ok()) << ToString(f);
    EXPECT_EQ(*back, f);
    EXPECT_EQ(ParamNames(f).size(), static_cast<size_t>(NumParams(f)));
  }
  EXPECT_FALSE(CurveFamilyFromString("exp5").ok());
}

TEST(CurveFamily, ParseListExpandsAliasesAndRejectsUnknown) {
  auto v = ParseCurveFamilies("viper, pow3,exp3");
  ASSERT_TRUE(v.ok());
  // viper = exp2, exp3, lin2, expd3; exp3 is not repeated.
  EXPECT_EQ(v->size(), 5u);
  auto bad = ParseCurveFamilies("exp3,nope");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nope"), std::string::npos);
}

TEST(FittedCurve, EvaluatesTheFormula) {
  // exp3 at t = x / x_scale = 500 / 1000 = 0.5: 2*exp(-3*0.5) + 0.1.
  FittedCurve c{CurveFamily::kExp3, {2.0, 3.0, 0.1}, 1000.0};
  EXPECT_NEAR(c.Evaluate(500), 2.0 * std::exp(-1.5) + 0.1, 1e-12);
  // pow3 = c + a*t^-alpha at t = 2: 0.2 + 1 * 2^-0.5.
  FittedCurve p{CurveFamily::kPow3, {0.2, 1.0, 0.5}, 100.0};
  EXPECT_NEAR(p.Evaluate(200), 0.2 + std::pow(2.0, -0.5), 1e-12);
  // Iterations below 1 are clamped to 1.
  EXPECT_DOUBLE_EQ(p.Evaluate(0), p.Evaluate(1));
}

TEST(ExtractCurve, ReadsTheMetricAndRejectsEmpty) {
  TrainingLog log;
  log.source = "mem";
  for (int i = 1; i <= 5; ++i) {
    LogRecord r;
    r.iteration = i;
    r.train_loss = 1.0 / i;
    if (i % 2 == 0) r.val_loss = 2.0 / i;
    log.records.push_back(r);
  }
  auto train = ExtractCurve(log, LossMetric::kTrainLoss);
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->size(), 5u);
  auto val = ExtractCurve(log, LossMetric::kValLoss);
  ASSERT_TRUE(val.ok());
  EXPECT_EQ(val->size(), 2u);
  for (auto& r : log.records) r.val_loss.reset();
  EXPECT_FALSE(ExtractCurve(log, LossMetric::kValLoss).ok());
}

}  // namespace
}  // namespace predictor
}  // namespace viper
