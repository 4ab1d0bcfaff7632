// Learning-curve families for decreasing loss curves, and the curve data they
// are fitted to. Pure computation: no Ceres in this header.
//
// Coordinates. Every family is written in a normalised iteration
// t = iteration / x_scale (x_scale is fixed by the first fit, normally the
// last fitted iteration, so the data lie in t <= 1 and extrapolation in t > 1);
// ilog2 alone uses the raw iteration x = t * x_scale. Losses are in the
// units of the data. Powers are computed as exp(b * log t) with t > 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/core/training_log.h"

namespace viper {
namespace predictor {

// The curve families. Viper's four first, then those of Domhan et al. (IJCAI
// 2015) turned into decreasing curves (the formulas are in FamilyFormula()).
enum class CurveFamily {
  kExp2,           // a*exp(-b*t)
  kExp3,           // a*exp(-b*t) + c
  kLin2,           // a*t + b                      (a <= 0)
  kExpd3,          // c - (c - a)*exp(-b*t)        (a: value at t=0, c: asymptote)
  kPow3,           // c + a*t^(-alpha)
  kPow4,           // c + a*(1 + b*t)^(-alpha)
  kLogPower,       // a / (1 + (t/exp(b))^c)
  kExp4,           // c + a*exp(-b*t^alpha)
  kIlog2,          // c + a / log(x + 1)           (raw iteration x)
  kWeibull,        // alpha - (alpha - beta)*exp(-(kappa*t)^delta)
  kMmf,            // alpha - (alpha - beta) / (1 + (kappa*t)^delta)
  kJanoschek,      // alpha - (alpha - beta)*exp(-kappa*t^delta)
  kVaporPressure,  // exp(a + b/t + c*log t)       (b >= 0, c <= 0)
  kLogLogLinear,   // exp(a - b*log t): log loss linear in log t
  kHill3,          // ymax / (1 + (t/kappa)^eta)
};
constexpr int kNumCurveFamilies = 15;
constexpr int kMaxCurveParams = 4;

const char* ToString(CurveFamily family);
StatusOr<CurveFamily> CurveFamilyFromString(const std::string& name);
// All fifteen, in enum order.
std::vector<CurveFamily> AllCurveFamilies();
// Viper's four: exp2, exp3, lin2, expd3.
std::vector<CurveFamily> ViperCurveFamilies();
// "exp3,pow3" or "all" or "viper" -> families; errors name the bad entry.
StatusOr<std::vector<CurveFamily>> ParseCurveFamilies(const std::string& list);
// The formula as text, e.g. "a*exp(-b*t) + c".
const char* FamilyFormula(CurveFamily family);
// Number of parameters and their names, in the order of FittedCurve::params.
int NumParams(CurveFamily family);
std::vector<std::string> ParamNames(CurveFamily family);

// One family with its parameters: evaluates the curve.
struct FittedCurve {
  CurveFamily family = CurveFamily::kExp3;
  std::vector<double> params;  // NumParams(family) values, loss units / t units
  double x_scale = 1.0;        // iterations per unit of t

  // Loss at `iteration` (>= 1; smaller values are clamped to 1).
  double Evaluate(double iteration) const;
};

// What the loss is read from in a training log. kTestLoss is the served
// truth (a sample disjoint from validation): judges read it, planners never.
enum class LossMetric { kTrainLoss, kValLoss, kTestLoss };
const char* ToString(LossMetric metric);
StatusOr<LossMetric> LossMetricFromString(const std::string& name);

// Points (iteration, loss) in increasing iteration order.
struct CurveData {
  std::vector<double> iterations;
  std::vector<double> losses;

  size_t size() const { return iterations.size(); }
  // The points with iteration <= last_iteration.
  CurveData Prefix(double last_iteration) const;
  // The points with iteration > after_iteration.
  CurveData Suffix(double after_iteration) const;
};

// The rows of `log` that carry `metric`. Fails when none do, or when the
// iterations are not strictly increasing (the message names the row), or
// at a non-finite loss unless `keep_diverged`: then it is kept as +inf (a
// diverged model, LogReader's NonFinitePolicy::kDiverged), for the judge and
// a planner that observes it; never give such points to a fit.
StatusOr<CurveData> ExtractCurve(const TrainingLog& log, LossMetric metric, bool keep_diverged = false);

}  // namespace predictor
}  // namespace viper
