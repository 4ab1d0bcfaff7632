#include "viper/predictor/learning_curve.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace viper {
namespace predictor {
namespace {

constexpr double kXScale = 2000;  // synthetic logs run to iteration 2000, one point every 5

// Points x = 5, 10, ..., last of the curve plus Gaussian noise (fixed seed).
CurveData Synthetic(const FittedCurve& truth, double noise_sigma, double last = kXScale, unsigned seed = 7) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, noise_sigma);
  CurveData d;
  for (double x = 5; x <= last; x += 5) {
    d.iterations.push_back(x);
    d.losses.push_back(truth.Evaluate(x) + (noise_sigma > 0 ? noise(rng) : 0.0));
  }
  return d;
}

struct RecoveryCase {
  CurveFamily family;
  std::vector<double> params;  // loss units, t = iteration / 2000
};

class RecoveryTest : public ::testing::TestWithParam<RecoveryCase> {};

// With noise sigma 0.005 on 400 points, each family recovers its own
// parameters: the fitted curve stays within 0.01 (2 sigma) of the truth over
// the data, and each parameter within 15% relative (or 0.02 absolute for
// values near zero). The band is a curve band, so it must contain the truth
// at the end of the data for a correctly specified model.
TEST_P(RecoveryTest, RecoversParameters) {
  const RecoveryCase& c = GetParam();
  FittedCurve truth{c.family, c.params, kXScale};
  const CurveData data = Synthetic(truth, 0.005);
  LearningCurvePredictor::Options o;
  o.selection = Selection::kBestMse;
  o.families = {c.family};
  o.starts_per_family = 4;
  auto p = LearningCurvePredictor::Fit(data, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto& fit = p->summary().families[0];
  ASSERT_TRUE(fit.usable) << fit.drop_reason;
  double max_err = 0;
  for (size_t i = 0; i < data.size(); ++i)
    max_err = std::max(max_err, std::fabs(p->Predict(data.iterations[i]) - truth.Evaluate(data.iterations[i])));
  EXPECT_LT(max_err, 0.01) << ToString(c.family);
  EXPECT_NEAR(fit.fit_rmse, 0.005, 0.001) << "rmse should match the noise";
  for (size_t k = 0; k < c.params.size(); ++k) {
    const double tol = std::max(0.15 * std::fabs(c.params[k]), 0.02);
    EXPECT_NEAR(fit.params[k], c.params[k], tol) << ToString(c.family) << " param " << ParamNames(c.family)[k];
  }
  auto [lo, hi] = p->Band(kXScale);
  EXPECT_LE(lo, p->Predict(kXScale));
  EXPECT_GE(hi, p->Predict(kXScale));
}

INSTANTIATE_TEST_SUITE_P(
    AllFamilies, RecoveryTest,
    ::testing::Values(RecoveryCase{CurveFamily::kExp2, {2.0, 3.0}},
                      RecoveryCase{CurveFamily::kExp3, {2.0, 4.0, 0.3}},
                      RecoveryCase{CurveFamily::kLin2, {-0.2, 1.5}},
                      RecoveryCase{CurveFamily::kExpd3, {2.3, 4.0, 0.3}},
                      RecoveryCase{CurveFamily::kPow3, {0.2, 0.5, 0.3}},
                      RecoveryCase{CurveFamily::kPow4, {0.2, 2.0, 20.0, 1.0}},
                      RecoveryCase{CurveFamily::kLogPower, {2.0, -2.0, 1.5}},
                      RecoveryCase{CurveFamily::kExp4, {0.3, 2.0, 4.0, 0.8}},
                      RecoveryCase{CurveFamily::kIlog2, {0.1, 2.0}},
                      RecoveryCase{CurveFamily::kWeibull, {0.3, 2.3, 5.0, 0.8}},
                      RecoveryCase{CurveFamily::kMmf, {0.3, 2.3, 10.0, 1.2}},
                      RecoveryCase{CurveFamily::kJanoschek, {0.3, 2.3, 4.0, 0.8}},
                      RecoveryCase{CurveFamily::kVaporPressure, {-1.0, 0.001, -0.3}},
                      RecoveryCase{CurveFamily::kLogLogLinear, {-1.0, 0.3}},
                      RecoveryCase{CurveFamily::kHill3, {2.0, 0.2, 1.5}}),
    [](const ::testing::TestParamInfo<RecoveryCase>& info) { return std::string(ToString(info.param.family)); });

TEST(LearningCurvePredictor, DefaultOptionsAreValid) {
  LearningCurvePredictor::Options o;
  std::string error;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.validation_fraction = 1.5;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("validation_fraction"), std::string::npos);
  o = LearningCurvePredictor::Options();
  o.families = {CurveFamily::kExp3, CurveFamily::kExp3};
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("exp3"), std::string::npos);
}

TEST(LearningCurvePredictor, RejectsTooShortLogWithClearMessage) {
  CurveData d{{1, 2, 3}, {1.0, 0.9, 0.8}};
  auto p = LearningCurvePredictor::Fit(d, LearningCurvePredictor::Options());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("too few points"), std::string::npos) << p.status().message();
}

TEST(LearningCurvePredictor, RejectsNonIncreasingIterations) {
  CurveData d{{1, 2, 3, 3, 5, 6, 7, 8, 9}, {1, .9, .8, .7, .6, .5, .4, .3, .2}};
  auto p = LearningCurvePredictor::Fit(d, LearningCurvePredictor::Options());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("must increase"), std::string::npos) << p.status().message();
}

// Viper's rule on noise-free exp3 data, among exp2, lin2 and exp3: exp3 is
// the only family that can fit it exactly, so it must win.
TEST(LearningCurvePredictor, BestMsePicksTheTrueFamily) {
  const CurveData d = Synthetic({CurveFamily::kExp3, {2.0, 4.0, 0.3}, kXScale}, 0.0);
  LearningCurvePredictor::Options o;
  o.selection = Selection::kBestMse;
  o.families = {CurveFamily::kExp2, CurveFamily::kLin2, CurveFamily::kExp3};
  auto p = LearningCurvePredictor::Fit(d, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->summary().selected, 2);
  EXPECT_LT(p->summary().families[2].fit_rmse, 1e-4);
}

// Flat, pure-noise and non-monotone curves must give finite predictions and
// bands with every selection rule (families that cannot fit are dropped).
TEST(LearningCurvePredictor, SurvivesFlatNoisyAndNonMonotoneCurves) {
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0.0, 0.05);
  CurveData flat, noisy, wiggly;
  for (int i = 1; i <= 300; ++i) {
    flat.iterations.push_back(i);
    flat.losses.push_back(0.5);
    noisy.iterations.push_back(i);
    noisy.losses.push_back(0.5 + noise(rng));
    wiggly.iterations.push_back(i);
    wiggly.losses.push_back(1.0 / std::sqrt(i) + 0.2 * std::sin(i / 10.0) + 0.2);
  }
  for (const CurveData* d : {&flat, &noisy, &wiggly}) {
    for (Selection s : {Selection::kBestMse, Selection::kValidation, Selection::kEnsemble}) {
      LearningCurvePredictor::Options o;
      o.selection = s;
      auto p = LearningCurvePredictor::Fit(*d, o);
      ASSERT_TRUE(p.ok()) << ToString(s) << ": " << p.status().ToString();
      for (double x : {1.0, 150.0, 300.0, 1000.0, 1e5}) {
        EXPECT_TRUE(std::isfinite(p->Predict(x))) << ToString(s) << " at " << x;
        auto [lo, hi] = p->Band(x);
        EXPECT_TRUE(std::isfinite(lo) && std::isfinite(hi)) << ToString(s) << " at " << x;
        EXPECT_GE(p->Predict(x), 0.0);
      }
    }
  }
  // A flat curve extrapolates flat: any family that survives is within noise.
  LearningCurvePredictor::Options o;
  o.selection = Selection::kBestMse;
  auto p = LearningCurvePredictor::Fit(flat, o);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->Predict(1000), 0.5, 1e-3);
}

TEST(LearningCurvePredictor, EnsembleWeightsSumToOneAndBandBracketsPrediction) {
  const FittedCurve truth{CurveFamily::kPow3, {0.2, 0.5, 0.3}, kXScale};
  const CurveData d = Synthetic(truth, 0.01);
  auto p = LearningCurvePredictor::Fit(d, LearningCurvePredictor::Options());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  double total = 0;
  for (const auto& f : p->summary().families) total += f.weight;
  EXPECT_NEAR(total, 1.0, 1e-9);
  EXPECT_FALSE(p->Members().empty());
  for (double x : {100.0, 2000.0, 4000.0}) {
    auto [lo, hi] = p->Band(x);
    EXPECT_LE(lo, p->Predict(x));
    EXPECT_GE(hi, p->Predict(x));
  }
  const auto range = p->PredictRange(1998, 2002);
  ASSERT_EQ(range.size(), 5u);
  EXPECT_DOUBLE_EQ(range[2], p->Predict(2000));
  EXPECT_TRUE(p->PredictRange(10, 9).empty());
}

// A correctly specified family fitted on 30% of a noise-free curve
// extrapolates it almost exactly.
TEST(LearningCurvePredictor, ExtrapolatesTheTruthWhenTheFamilyIsRight) {
  const FittedCurve truth{CurveFamily::kExp3, {2.0, 4.0, 0.3}, kXScale};
  const CurveData all = Synthetic(truth, 0.0);
  LearningCurvePredictor::Options o;
  o.selection = Selection::kBestMse;
  o.families = {CurveFamily::kExp3};
  auto p = LearningCurvePredictor::Fit(all.Prefix(600), o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto e = ScoreExtrapolation(*p, all);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->points, 280u);  // iterations 605..2000 every 5
  EXPECT_LT(e->rmse, 1e-4);
  EXPECT_LT(e->final_relative_error, 1e-3);
  EXPECT_FALSE(ScoreExtrapolation(*p, all.Prefix(600)).ok());  // nothing after the fit
}

// Refit warm-starts on the grown curve and updates the range; the new fit is
// at least as close to the truth at the end as the first one was.
TEST(LearningCurvePredictor, RefitOnGrowingCurve) {
  const FittedCurve truth{CurveFamily::kExp3, {2.0, 4.0, 0.3}, kXScale};
  const CurveData all = Synthetic(truth, 0.01);
  LearningCurvePredictor::Options o;
  o.families = ViperCurveFamilies();
  auto p = LearningCurvePredictor::Fit(all.Prefix(400), o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const double before = std::fabs(p->Predict(2000) - truth.Evaluate(2000));
  ASSERT_TRUE(p->Refit(all.Prefix(1200)).ok());
  EXPECT_DOUBLE_EQ(p->summary().last_iteration, 1200);
  EXPECT_EQ(p->summary().num_points, 240u);
  const double after = std::fabs(p->Predict(2000) - truth.Evaluate(2000));
  EXPECT_LE(after, before + 0.005);
  EXPECT_LT(after, 0.02);
  // Refit rejects bad data and leaves the predictor as it was.
  const double kept = p->Predict(2000);
  EXPECT_FALSE(p->Refit(CurveData{{1, 2}, {1, 1}}).ok());
  EXPECT_DOUBLE_EQ(p->Predict(2000), kept);
}

TEST(Selection, NamesRoundTrip) {
  for (Selection s : {Selection::kBestMse, Selection::kValidation, Selection::kEnsemble}) {
    auto back = SelectionFromString(ToString(s));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, s);
  }
  EXPECT_FALSE(SelectionFromString("best").ok());
  EXPECT_TRUE(RobustLossFromString("cauchy").ok());
}

}  // namespace
}  // namespace predictor
}  // namespace viper
