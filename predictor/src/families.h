// Internal: the curve families as templates (usable with double and with
// ceres::Jet), their parameter bounds, kinds and starting points. All in
// normalised coordinates: t = iteration / x_scale, u = loss / y_scale.
#pragma once

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"

namespace viper {
namespace predictor {
namespace internal {

using Params = std::array<double, kMaxCurveParams>;

// How a parameter changes when losses are rescaled by s.
enum class ParamKind {
  kAmplitude,     // multiplies by s
  kLogAmplitude,  // adds log(s)
  kShape,         // unchanged
};

struct FamilySpec {
  CurveFamily family;
  const char* name;
  const char* formula;
  int num_params;
  std::array<const char*, kMaxCurveParams> param_names;
  std::array<ParamKind, kMaxCurveParams> kinds;
  // Bounds in normalised units; an "asymptote" bound of 0 below is replaced
  // by -kAsymptoteMagnitude when negative losses are allowed.
  Params lower;
  Params upper;
  std::array<bool, kMaxCurveParams> is_floor;  // lower bound is a loss floor (asymptote / level)
};

constexpr double kAsymptoteMagnitude = 10.0;

const FamilySpec& Spec(CurveFamily family);

// Summary of the normalised data used to choose starting points.
struct DataStats {
  double t_first = 0, t_last = 1;  // first / last t
  double x_first = 1, x_last = 1;  // raw iterations of the same
  double u_first = 1, u_last = 1;  // mean of the first / last few normalised losses
};

// Up to 8 starting points, best guess first.
std::vector<Params> StartPoints(CurveFamily family, const DataStats& stats);

// ---- The formulas (T = double or ceres::Jet) -------------------------------
// t > 0 and x >= 1 are guaranteed by the callers.

template <typename T>
T PowT(const T& base_positive, const T& exponent) {
  using std::exp;
  using std::log;
  return exp(exponent * log(base_positive));
}

template <typename T>
T EvalFamily(CurveFamily f, const T* p, double t, double x) {
  using std::exp;
  using std::log;
  const double log_t = std::log(t);
  switch (f) {
    case CurveFamily::kExp2:  // a, b
      return p[0] * exp(-p[1] * t);
    case CurveFamily::kExp3:  // a, b, c
      return p[0] * exp(-p[1] * t) + p[2];
    case CurveFamily::kLin2:  // a, b
      return p[0] * t + p[1];
    case CurveFamily::kExpd3:  // a, b, c
      return p[2] - (p[2] - p[0]) * exp(-p[1] * t);
    case CurveFamily::kPow3:  // c, a, alpha
      return p[0] + p[1] * exp(-p[2] * log_t);
    case CurveFamily::kPow4:  // c, a, b, alpha
      return p[0] + p[1] * exp(-p[3] * log(T(1.0) + p[2] * t));
    case CurveFamily::kLogPower:  // a, b, c
      return p[0] / (T(1.0) + exp(p[2] * (log_t - p[1])));
    case CurveFamily::kExp4:  // c, a, b, alpha
      return p[0] + p[1] * exp(-p[2] * exp(p[3] * log_t));
    case CurveFamily::kIlog2:  // c, a
      return p[0] + p[1] / std::log(x + 1.0);
    case CurveFamily::kWeibull:  // alpha, beta, kappa, delta
      return p[0] - (p[0] - p[1]) * exp(-exp(p[3] * (log(p[2]) + log_t)));
    case CurveFamily::kMmf:  // alpha, beta, kappa, delta
      return p[0] - (p[0] - p[1]) / (T(1.0) + exp(p[3] * (log(p[2]) + log_t)));
    case CurveFamily::kJanoschek:  // alpha, beta, kappa, delta
      return p[0] - (p[0] - p[1]) * exp(-p[2] * exp(p[3] * log_t));
    case CurveFamily::kVaporPressure:  // a, b, c
      return exp(p[0] + p[1] / t + p[2] * log_t);
    case CurveFamily::kLogLogLinear:  // a, b
      return exp(p[0] - p[1] * log_t);
    case CurveFamily::kHill3:  // ymax, kappa, eta
      return p[0] / (T(1.0) + exp(p[2] * (log_t - log(p[1]))));
  }
  return T(0.0);
}

double EvaluateNormalized(CurveFamily family, const double* params, double t, double x);

// ---- Fitting -----------------------------------------------------------------

struct FitInput {
  const std::vector<double>* t = nullptr;  // normalised iterations
  const std::vector<double>* x = nullptr;  // raw iterations
  const std::vector<double>* u = nullptr;  // normalised losses (bin means)
  const std::vector<double>* w = nullptr;  // weights (points per bin)
  RobustLoss robust_loss = RobustLoss::kHuber;
  double robust_scale = 1e-3;  // normalised loss units
  int max_iterations = 100;
  bool allow_negative_loss = false;
  bool compute_covariance = true;
};

struct FitOutcome {
  bool usable = false;
  std::string reason;      // why not usable
  Params params{};         // normalised
  double cost = 0;         // Ceres cost at the solution
  int iterations = 0;      // over all starts
  bool has_covariance = false;
  std::array<double, kMaxCurveParams * kMaxCurveParams> covariance{};  // (J^T J)^-1, normalised, unscaled
};

// Builds one Ceres problem for the family and solves it from each start;
// keeps the lowest-cost usable solution (fit.cc, the only file with Ceres
// templates: the residual is instantiated once per parameter count, the
// family is a run-time switch, which keeps compile time low).
FitOutcome FitFamily(CurveFamily family, const FitInput& in, const std::vector<Params>& starts);

}  // namespace internal
}  // namespace predictor
}  // namespace viper
