#include "viper/predictor/curve.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "families.h"

namespace viper {
namespace predictor {
namespace internal {
namespace {

constexpr ParamKind kA = ParamKind::kAmplitude;
constexpr ParamKind kL = ParamKind::kLogAmplitude;
constexpr ParamKind kS = ParamKind::kShape;
constexpr double kAmpMax = 1e3;    // amplitudes, normalised loss units
constexpr double kRateMax = 1e4;   // rates per unit of t
constexpr double kPowMax = 20.0;   // exponents
constexpr double kPowMin = 1e-3;

// Order must follow the enum.
const FamilySpec kSpecs[kNumCurveFamilies] = {
    {CurveFamily::kExp2, "exp2", "a*exp(-b*t)", 2, {"a", "b", "", ""}, {kA, kS, kS, kS},
     {0, 0, 0, 0}, {kAmpMax, kRateMax, 0, 0}, {false, false, false, false}},
    {CurveFamily::kExp3, "exp3", "a*exp(-b*t) + c", 3, {"a", "b", "c", ""}, {kA, kS, kA, kS},
     {0, 0, 0, 0}, {kAmpMax, kRateMax, kAsymptoteMagnitude, 0}, {false, false, true, false}},
    {CurveFamily::kLin2, "lin2", "a*t + b", 2, {"a", "b", "", ""}, {kA, kA, kS, kS},
     {-kAmpMax, -kAmpMax, 0, 0}, {0, kAmpMax, 0, 0}, {false, false, false, false}},
    {CurveFamily::kExpd3, "expd3", "c - (c - a)*exp(-b*t)", 3, {"a", "b", "c", ""}, {kA, kS, kA, kS},
     {0, 0, 0, 0}, {kAmpMax, kRateMax, kAsymptoteMagnitude, 0}, {false, false, true, false}},
    {CurveFamily::kPow3, "pow3", "c + a*t^(-alpha)", 3, {"c", "a", "alpha", ""}, {kA, kA, kS, kS},
     {0, 0, kPowMin, 0}, {kAsymptoteMagnitude, kAmpMax, kPowMax, 0}, {true, false, false, false}},
    {CurveFamily::kPow4, "pow4", "c + a*(1 + b*t)^(-alpha)", 4, {"c", "a", "b", "alpha"}, {kA, kA, kS, kS},
     {0, 0, 1e-6, kPowMin}, {kAsymptoteMagnitude, kAmpMax, 1e6, kPowMax}, {true, false, false, false}},
    {CurveFamily::kLogPower, "log_power", "a / (1 + (t/exp(b))^c)", 3, {"a", "b", "c", ""}, {kA, kS, kS, kS},
     {0, -20, kPowMin, 0}, {kAmpMax, 20, kPowMax, 0}, {false, false, false, false}},
    {CurveFamily::kExp4, "exp4", "c + a*exp(-b*t^alpha)", 4, {"c", "a", "b", "alpha"}, {kA, kA, kS, kS},
     {0, 0, 0, 0.05}, {kAsymptoteMagnitude, kAmpMax, kRateMax, 5}, {true, false, false, false}},
    {CurveFamily::kIlog2, "ilog2", "c + a/log(x + 1)", 2, {"c", "a", "", ""}, {kA, kA, kS, kS},
     {0, 0, 0, 0}, {kAsymptoteMagnitude, kAmpMax, 0, 0}, {true, false, false, false}},
    {CurveFamily::kWeibull, "weibull", "alpha - (alpha - beta)*exp(-(kappa*t)^delta)", 4,
     {"alpha", "beta", "kappa", "delta"}, {kA, kA, kS, kS},
     {0, 0, 1e-6, 0.05}, {kAsymptoteMagnitude, kAmpMax, 1e6, 10}, {true, false, false, false}},
    {CurveFamily::kMmf, "mmf", "alpha - (alpha - beta)/(1 + (kappa*t)^delta)", 4,
     {"alpha", "beta", "kappa", "delta"}, {kA, kA, kS, kS},
     {0, 0, 1e-6, 0.05}, {kAsymptoteMagnitude, kAmpMax, 1e6, 10}, {true, false, false, false}},
    {CurveFamily::kJanoschek, "janoschek", "alpha - (alpha - beta)*exp(-kappa*t^delta)", 4,
     {"alpha", "beta", "kappa", "delta"}, {kA, kA, kS, kS},
     {0, 0, 0, 0.05}, {kAsymptoteMagnitude, kAmpMax, kRateMax, 10}, {true, false, false, false}},
    {CurveFamily::kVaporPressure, "vapor_pressure", "exp(a + b/t + c*log(t))", 3, {"a", "b", "c", ""},
     {kL, kS, kS, kS}, {-50, 0, -kPowMax, 0}, {50, 1e3, 0, 0}, {false, false, false, false}},
    {CurveFamily::kLogLogLinear, "loglog_linear", "exp(a - b*log(t))", 2, {"a", "b", "", ""},
     {kL, kS, kS, kS}, {-50, 0, 0, 0}, {50, kPowMax, 0, 0}, {false, false, false, false}},
    {CurveFamily::kHill3, "hill3", "ymax / (1 + (t/kappa)^eta)", 3, {"ymax", "kappa", "eta", ""},
     {kA, kS, kS, kS}, {0, 1e-6, kPowMin, 0}, {kAmpMax, 1e6, kPowMax, 0}, {false, false, false, false}},
};

}  // namespace

const FamilySpec& Spec(CurveFamily family) { return kSpecs[static_cast<int>(family)]; }

double EvaluateNormalized(CurveFamily family, const double* params, double t, double x) {
  return EvalFamily<double>(family, params, t, x);
}

std::vector<Params> StartPoints(CurveFamily family, const DataStats& s) {
  const double u0 = std::max(s.u_first, 1e-6);
  const double u1 = std::max(std::min(s.u_last, u0), 0.0);
  const double drop = std::max(u0 - u1, 0.05 * u0);
  const double c0 = std::max(u1 - 0.2 * drop, 0.0);   // asymptote guess just below the last loss
  const double c_low = 0.5 * c0;
  const double t0 = std::max(s.t_first, 1e-12);
  const double t1 = std::max(s.t_last, t0 * 1.0001);
  const double lt0 = std::log(t0), lt1 = std::log(t1);
  // Log-log slope between the ends (>= 0 for a decreasing curve).
  const double slope = (u1 > 0 && u0 > u1) ? std::log(u0 / u1) / (lt1 - lt0) : 0.1;
  std::vector<Params> out;
  switch (family) {
    case CurveFamily::kExp2: {
      const double b = (u1 > 0 && u0 > u1) ? std::log(u0 / u1) / (t1 - t0) : 1.0;
      for (double k : {1.0, 3.0, 0.3}) out.push_back({u0 * std::exp(k * b * t0), k * b, 0, 0});
      break;
    }
    case CurveFamily::kExp3:
      for (double b : {5.0, 20.0, 1.0, 80.0}) out.push_back({(u0 - c0) * std::exp(b * t0), b, c0, 0});
      break;
    case CurveFamily::kLin2: {
      const double a = std::min((u1 - u0) / (t1 - t0), 0.0);
      out.push_back({a, u0 - a * t0, 0, 0});
      out.push_back({0, 0.5 * (u0 + u1), 0, 0});
      break;
    }
    case CurveFamily::kExpd3:
      for (double b : {5.0, 20.0, 1.0, 80.0}) out.push_back({u0, b, c0, 0});
      break;
    case CurveFamily::kPow3:
      for (double alpha : {0.5, 1.0, 0.2, 2.0})
        out.push_back({c_low, (u0 - c_low) * std::exp(alpha * lt0), alpha, 0});
      break;
    case CurveFamily::kPow4:
      for (double b : {30.0, 300.0, 3.0})
        out.push_back({c_low, u0 - c_low, b, 1.0});
      out.push_back({c_low, u0 - c_low, 30.0, 0.5});
      break;
    case CurveFamily::kLogPower:
      for (double b : {-2.0, 0.0, -5.0}) out.push_back({u0, b, std::max(slope, 0.3), 0});
      out.push_back({u0, -2.0, 1.0, 0});
      break;
    case CurveFamily::kExp4:
      for (double b : {5.0, 20.0, 1.0}) out.push_back({c0, u0 - c0, b, 1.0});
      out.push_back({c0, u0 - c0, 5.0, 0.5});
      break;
    case CurveFamily::kIlog2: {
      const double l0 = std::log(s.x_first + 1.0), l1 = std::log(std::max(s.x_last, s.x_first + 1) + 1.0);
      double a = (u0 - u1) / (1.0 / l0 - 1.0 / l1);
      double c = u1 - a / l1;
      if (!(a > 0) || c < 0) {
        c = 0;
        a = u1 * l1;
      }
      out.push_back({c, a, 0, 0});
      out.push_back({0, u1 * l1, 0, 0});
      break;
    }
    case CurveFamily::kWeibull:
    case CurveFamily::kJanoschek:
      for (double k : {5.0, 20.0, 1.0}) out.push_back({c0, u0, k, 1.0});
      out.push_back({c0, u0, 5.0, 0.5});
      break;
    case CurveFamily::kMmf:
      for (double k : {20.0, 100.0, 3.0}) out.push_back({c0, u0, k, 1.0});
      out.push_back({c0, u0, 20.0, 0.6});
      break;
    case CurveFamily::kVaporPressure: {
      const double c = -std::min(slope, kPowMax);
      out.push_back({std::log(std::max(u1, 1e-6)) - c * lt1, 0.0, c, 0});
      out.push_back({std::log(std::max(u1, 1e-6)) - 0.5 * c * lt1, t0, 0.5 * c, 0});
      break;
    }
    case CurveFamily::kLogLogLinear: {
      const double b = std::min(slope, kPowMax);
      out.push_back({std::log(std::max(u1, 1e-6)) + b * lt1, b, 0, 0});
      out.push_back({std::log(std::max(u0, 1e-6)) + 0.5 * b * lt0, 0.5 * b, 0, 0});
      break;
    }
    case CurveFamily::kHill3:
      for (double k : {0.1, 0.01, 1.0}) out.push_back({u0, k, std::max(slope, 0.3), 0});
      out.push_back({u0, 0.05, 1.0, 0});
      break;
  }
  // Clip into the bounds (the loss floor is 0 here; callers widen it).
  const FamilySpec& spec = Spec(family);
  for (auto& p : out) {
    for (int i = 0; i < spec.num_params; ++i) {
      if (!std::isfinite(p[i])) p[i] = 0.5 * (spec.lower[i] + spec.upper[i]);
      p[i] = std::min(std::max(p[i], spec.lower[i]), spec.upper[i]);
    }
  }
  return out;
}

}  // namespace internal

const char* ToString(CurveFamily family) { return internal::Spec(family).name; }

StatusOr<CurveFamily> CurveFamilyFromString(const std::string& name) {
  for (CurveFamily f : AllCurveFamilies()) {
    if (name == ToString(f)) return f;
  }
  std::string known;
  for (CurveFamily f : AllCurveFamilies()) known += std::string(known.empty() ? "" : ", ") + ToString(f);
  return InvalidArgumentError("unknown curve family '" + name + "' (known: " + known + ")");
}

std::vector<CurveFamily> AllCurveFamilies() {
  std::vector<CurveFamily> out;
  for (int i = 0; i < kNumCurveFamilies; ++i) out.push_back(static_cast<CurveFamily>(i));
  return out;
}

std::vector<CurveFamily> ViperCurveFamilies() {
  return {CurveFamily::kExp2, CurveFamily::kExp3, CurveFamily::kLin2, CurveFamily::kExpd3};
}

StatusOr<std::vector<CurveFamily>> ParseCurveFamilies(const std::string& list) {
  std::vector<CurveFamily> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    std::vector<CurveFamily> add;
    if (item == "all") {
      add = AllCurveFamilies();
    } else if (item == "viper") {
      add = ViperCurveFamilies();
    } else {
      VIPER_ASSIGN_OR_RETURN(CurveFamily f, CurveFamilyFromString(item));
      add.push_back(f);
    }
    for (CurveFamily f : add) {
      if (std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
    }
  }
  if (out.empty()) return InvalidArgumentError("empty family list '" + list + "'");
  return out;
}

const char* FamilyFormula(CurveFamily family) { return internal::Spec(family).formula; }

int NumParams(CurveFamily family) { return internal::Spec(family).num_params; }

std::vector<std::string> ParamNames(CurveFamily family) {
  const auto& spec = internal::Spec(family);
  return std::vector<std::string>(spec.param_names.begin(), spec.param_names.begin() + spec.num_params);
}

double FittedCurve::Evaluate(double iteration) const {
  const double x = std::max(iteration, 1.0);
  internal::Params p{};
  for (size_t i = 0; i < params.size() && i < p.size(); ++i) p[i] = params[i];
  return internal::EvaluateNormalized(family, p.data(), x / x_scale, x);
}

const char* ToString(LossMetric metric) {
  switch (metric) {
    case LossMetric::kTrainLoss: return "train_loss";
    case LossMetric::kValLoss: return "val_loss";
    case LossMetric::kTestLoss: return "test_loss";
  }
  return "?";
}

StatusOr<LossMetric> LossMetricFromString(const std::string& name) {
  if (name == "train_loss" || name == "loss") return LossMetric::kTrainLoss;
  if (name == "val_loss" || name == "eval_loss") return LossMetric::kValLoss;
  if (name == "test_loss") return LossMetric::kTestLoss;
  return InvalidArgumentError("unknown loss metric '" + name + "' (known: train_loss, val_loss, test_loss)");
}

CurveData CurveData::Prefix(double last_iteration) const {
  CurveData out;
  for (size_t i = 0; i < size() && iterations[i] <= last_iteration; ++i) {
    out.iterations.push_back(iterations[i]);
    out.losses.push_back(losses[i]);
  }
  return out;
}

CurveData CurveData::Suffix(double after_iteration) const {
  CurveData out;
  for (size_t i = 0; i < size(); ++i) {
    if (iterations[i] <= after_iteration) continue;
    out.iterations.push_back(iterations[i]);
    out.losses.push_back(losses[i]);
  }
  return out;
}

StatusOr<CurveData> ExtractCurve(const TrainingLog& log, LossMetric metric, bool keep_diverged) {
  CurveData out;
  for (size_t row = 0; row < log.records.size(); ++row) {
    const LogRecord& r = log.records[row];
    const std::optional<double>& v = metric == LossMetric::kTrainLoss ? r.train_loss
                                     : metric == LossMetric::kValLoss ? r.val_loss
                                                                      : r.test_loss;
    if (!v) continue;
    if (!std::isfinite(*v) && !keep_diverged) {
      return InvalidArgumentError(log.source + ": row " + std::to_string(row + 1) + " (iteration " +
                                  std::to_string(r.iteration) + "): " + ToString(metric) +
                                  " is not finite (the model diverged there: fit the rows before it)");
    }
    if (!out.iterations.empty() && static_cast<double>(r.iteration) <= out.iterations.back()) {
      return InvalidArgumentError(log.source + ": row " + std::to_string(row + 1) + ": iteration " +
                                  std::to_string(r.iteration) + " does not increase");
    }
    out.iterations.push_back(static_cast<double>(r.iteration));
    out.losses.push_back(std::isfinite(*v) ? *v : std::numeric_limits<double>::infinity());
  }
  if (out.iterations.empty()) {
    const int64_t val = log.ValLossPoints();
    return NotFoundError(log.source + ": no row has a " + std::string(ToString(metric)) + " value" +
                         (metric == LossMetric::kTrainLoss && val > 0
                              ? " (an evaluation-only log: its " + std::to_string(val) +
                                    " val_loss points are the series to use, e.g. --metric val_loss)"
                              : ""));
  }
  return out;
}

}  // namespace predictor
}  // namespace viper
