#include "viper/predictor/learning_curve.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "families.h"

namespace viper {
namespace predictor {

using internal::FamilySpec;
using internal::FitOutcome;
using internal::Params;
using internal::ParamKind;
using internal::Spec;

const char* ToString(Selection selection) {
  switch (selection) {
    case Selection::kBestMse: return "best-mse";
    case Selection::kValidation: return "validation";
    case Selection::kEnsemble: return "ensemble";
  }
  return "?";
}

StatusOr<Selection> SelectionFromString(const std::string& name) {
  if (name == "best-mse") return Selection::kBestMse;
  if (name == "validation") return Selection::kValidation;
  if (name == "ensemble") return Selection::kEnsemble;
  return InvalidArgumentError("unknown selection '" + name + "' (known: best-mse, validation, ensemble)");
}

const char* ToString(RobustLoss loss) {
  switch (loss) {
    case RobustLoss::kNone: return "none";
    case RobustLoss::kHuber: return "huber";
    case RobustLoss::kCauchy: return "cauchy";
  }
  return "?";
}

StatusOr<RobustLoss> RobustLossFromString(const std::string& name) {
  if (name == "none") return RobustLoss::kNone;
  if (name == "huber") return RobustLoss::kHuber;
  if (name == "cauchy") return RobustLoss::kCauchy;
  return InvalidArgumentError("unknown robust loss '" + name + "' (known: none, huber, cauchy)");
}

bool LearningCurvePredictor::Options::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (!(validation_fraction > 0 && validation_fraction < 1))
    return fail("validation_fraction must be in (0, 1), got " + std::to_string(validation_fraction));
  if (!(robust_scale_factor > 0)) return fail("robust_scale_factor must be > 0");
  if (starts_per_family < 1 || starts_per_family > 8) return fail("starts_per_family must be in [1, 8]");
  if (max_iterations < 1) return fail("max_iterations must be >= 1");
  if (max_fit_points != 0 && max_fit_points < 16) return fail("max_fit_points must be 0 (no binning) or >= 16");
  if (min_points < 5) return fail("min_points must be >= 5 (a 4-parameter family needs more points than parameters)");
  if (horizon_iteration < 0) return fail("horizon_iteration must be >= 0");
  if (!(ensemble_max_mse_ratio >= 1)) return fail("ensemble_max_mse_ratio must be >= 1");
  if (!(band_z >= 0)) return fail("band_z must be >= 0");
  for (size_t i = 0; i < families.size(); ++i)
    for (size_t j = i + 1; j < families.size(); ++j)
      if (families[i] == families[j]) return fail(std::string("families lists '") + ToString(families[i]) + "' twice");
  return true;
}

struct LearningCurvePredictor::Member {
  Params params{};      // loss units
  std::array<double, kMaxCurveParams * kMaxCurveParams> cov{};  // loss units, scaled by the residual variance
  bool has_cov = false;
};

LearningCurvePredictor::LearningCurvePredictor() = default;
LearningCurvePredictor::LearningCurvePredictor(const LearningCurvePredictor&) = default;
LearningCurvePredictor& LearningCurvePredictor::operator=(const LearningCurvePredictor&) = default;
LearningCurvePredictor::LearningCurvePredictor(LearningCurvePredictor&&) noexcept = default;
LearningCurvePredictor& LearningCurvePredictor::operator=(LearningCurvePredictor&&) noexcept = default;
LearningCurvePredictor::~LearningCurvePredictor() = default;

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  return v[m];
}

// 1.4826 * MAD of the residuals from a running median (window 2h+1).
double NoiseSigma(const std::vector<double>& y) {
  const size_t n = y.size();
  const size_t h = std::min<size_t>(25, std::max<size_t>(2, n / 100));
  std::vector<double> res;
  res.reserve(n);
  std::vector<double> window;
  for (size_t i = 0; i < n; ++i) {
    const size_t lo = i >= h ? i - h : 0, hi = std::min(n - 1, i + h);
    window.assign(y.begin() + lo, y.begin() + hi + 1);
    res.push_back(y[i] - Median(window));
  }
  const double med = Median(res);
  for (double& r : res) r = std::fabs(r - med);
  return 1.4826 * Median(res);
}

// Normalised (and, above max_points, log-binned) fit points.
struct Points {
  std::vector<double> t, x, u, w;
};

Points Prepare(const CurveData& data, double x_scale, double y_scale, int max_points) {
  Points p;
  const size_t n = data.size();
  auto push = [&](double x_sum, double y_sum, double count) {
    const double x = std::max(x_sum / count, 1.0);
    p.x.push_back(x);
    p.t.push_back(x / x_scale);
    p.u.push_back(y_sum / count / y_scale);
    p.w.push_back(count);
  };
  if (max_points == 0 || n <= static_cast<size_t>(max_points)) {
    for (size_t i = 0; i < n; ++i) push(data.iterations[i], data.losses[i], 1);
    return p;
  }
  // Bins equal in log(iteration): the steep start keeps its resolution.
  const double lo = std::log(std::max(data.iterations.front(), 1.0));
  const double hi = std::log(std::max(data.iterations.back(), 1.0)) + 1e-12;
  const double width = (hi - lo) / max_points;
  int bin = -1;
  double xs = 0, ys = 0, c = 0;
  for (size_t i = 0; i < n; ++i) {
    const int b = width > 0 ? std::min(max_points - 1, static_cast<int>((std::log(std::max(data.iterations[i], 1.0)) - lo) / width)) : 0;
    if (b != bin && c > 0) {
      push(xs, ys, c);
      xs = ys = c = 0;
    }
    bin = b;
    xs += data.iterations[i];
    ys += data.losses[i];
    c += 1;
  }
  if (c > 0) push(xs, ys, c);
  return p;
}

internal::DataStats Stats(const CurveData& data, double x_scale, double y_scale) {
  internal::DataStats s;
  const size_t n = data.size();
  const size_t m = std::max<size_t>(1, std::min<size_t>(20, n / 20));
  double u0 = 0, u1 = 0;
  for (size_t i = 0; i < m; ++i) {
    u0 += data.losses[i];
    u1 += data.losses[n - 1 - i];
  }
  s.u_first = u0 / m / y_scale;
  s.u_last = u1 / m / y_scale;
  s.x_first = std::max(data.iterations.front(), 1.0);
  s.x_last = std::max(data.iterations.back(), 1.0);
  s.t_first = s.x_first / x_scale;
  s.t_last = s.x_last / x_scale;
  return s;
}

double ParamScale(ParamKind kind, double y_scale) { return kind == ParamKind::kAmplitude ? y_scale : 1.0; }

Params ToLossUnits(CurveFamily f, const Params& norm, double y_scale) {
  const FamilySpec& spec = Spec(f);
  Params out = norm;
  for (int i = 0; i < spec.num_params; ++i) {
    if (spec.kinds[i] == ParamKind::kAmplitude) out[i] = norm[i] * y_scale;
    if (spec.kinds[i] == ParamKind::kLogAmplitude) out[i] = norm[i] + std::log(y_scale);
  }
  return out;
}

Params ToNormalized(CurveFamily f, const Params& loss, double y_scale) {
  const FamilySpec& spec = Spec(f);
  Params out = loss;
  for (int i = 0; i < spec.num_params; ++i) {
    if (spec.kinds[i] == ParamKind::kAmplitude) out[i] = loss[i] / y_scale;
    if (spec.kinds[i] == ParamKind::kLogAmplitude) out[i] = loss[i] - std::log(y_scale);
  }
  return out;
}

double EvalLoss(CurveFamily f, const Params& p, double x_scale, double iteration) {
  const double x = std::max(iteration, 1.0);
  return internal::EvaluateNormalized(f, p.data(), x / x_scale, x);
}

double Rmse(CurveFamily f, const Params& p, double x_scale, const CurveData& d) {
  if (d.size() == 0) return 0;
  double s = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    const double r = d.losses[i] - EvalLoss(f, p, x_scale, d.iterations[i]);
    s += r * r;
  }
  return std::sqrt(s / d.size());
}

std::string Num(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

// Empty when the curve is sane from the first iteration to the horizon.
std::string HorizonProblem(CurveFamily f, const Params& p, double x_scale, double first, double horizon,
                           double y_scale, bool allow_negative) {
  const int kGrid = 96;
  const double lo = std::log(std::max(first, 1.0)), hi = std::log(std::max(horizon, first + 1.0));
  double prev = std::numeric_limits<double>::quiet_NaN();
  double prev_x = 0;
  for (int k = 0; k <= kGrid; ++k) {
    const double x = std::exp(lo + (hi - lo) * k / kGrid);
    const double v = EvalLoss(f, p, x_scale, x);
    if (!std::isfinite(v)) return "not finite at iteration " + Num(x);
    if (!allow_negative && v < -1e-9 * y_scale)
      return "negative loss " + Num(v) + " at iteration " + Num(x) + " (horizon " + Num(horizon) + ")";
    if (k > 0 && v > prev + 1e-9 * (y_scale + std::fabs(prev)))
      return "loss increases from " + Num(prev) + " at iteration " + Num(prev_x) + " to " + Num(v) + " at " + Num(x);
    prev = v;
    prev_x = x;
  }
  return "";
}

struct Scales {
  double x_scale = 1, y_scale = 1, sigma_u = 0;
};

struct OneFit {
  bool usable = false;
  std::string reason;
  Params norm{};  // normalised params
  LearningCurvePredictor::FamilyFit fit;
  bool has_cov = false;
  std::array<double, kMaxCurveParams * kMaxCurveParams> cov{};  // loss units, scaled
  int iterations = 0;
};

// Fits `family` on `data` from `starts` (normalised) and checks it to `horizon`.
OneFit FitOne(CurveFamily family, const CurveData& data, const Points& pts, const Scales& sc,
              const std::vector<Params>& starts, const LearningCurvePredictor::Options& o, double horizon,
              bool covariance) {
  OneFit r;
  r.fit.family = family;
  internal::FitInput in;
  in.t = &pts.t;
  in.x = &pts.x;
  in.u = &pts.u;
  in.w = &pts.w;
  in.robust_loss = o.robust_loss;
  in.robust_scale = o.robust_scale_factor * std::max(sc.sigma_u, 1e-4);
  in.max_iterations = o.max_iterations;
  in.allow_negative_loss = o.allow_negative_loss;
  in.compute_covariance = covariance;
  FitOutcome out = internal::FitFamily(family, in, starts);
  r.iterations = out.iterations;
  r.fit.solver_iterations = out.iterations;
  if (!out.usable) {
    r.reason = out.reason;
    return r;
  }
  const FamilySpec& spec = Spec(family);
  const Params loss = ToLossUnits(family, out.params, sc.y_scale);
  r.fit.params.assign(loss.begin(), loss.begin() + spec.num_params);
  r.fit.fit_rmse = Rmse(family, loss, sc.x_scale, data);
  const std::string problem = HorizonProblem(family, loss, sc.x_scale, data.iterations.front(), horizon,
                                             sc.y_scale, o.allow_negative_loss);
  if (!problem.empty()) {
    r.reason = problem;
    return r;
  }
  r.usable = true;
  r.norm = out.params;
  if (out.has_covariance) {
    // Residual variance (normalised units) from the weighted residuals.
    double ss = 0;
    for (size_t k = 0; k < pts.t.size(); ++k) {
      const double e = pts.u[k] - internal::EvaluateNormalized(family, out.params.data(), pts.t[k], pts.x[k]);
      ss += pts.w[k] * e * e;
    }
    const double dof = std::max<double>(1, static_cast<double>(pts.t.size()) - spec.num_params);
    const double s2 = ss / dof;
    r.has_cov = true;
    for (int i = 0; i < spec.num_params; ++i)
      for (int j = 0; j < spec.num_params; ++j)
        r.cov[i * kMaxCurveParams + j] = out.covariance[i * kMaxCurveParams + j] * s2 *
                                         ParamScale(spec.kinds[i], sc.y_scale) *
                                         ParamScale(spec.kinds[j], sc.y_scale);
  }
  return r;
}

std::vector<Params> DefaultStarts(CurveFamily f, const CurveData& data, const Scales& sc, int count) {
  std::vector<Params> s = internal::StartPoints(f, Stats(data, sc.x_scale, sc.y_scale));
  if (static_cast<int>(s.size()) > count) s.resize(count);
  return s;
}

Status CheckData(const CurveData& data, int min_points) {
  if (data.iterations.size() != data.losses.size())
    return InvalidArgumentError("curve data: iterations and losses differ in length");
  if (data.size() < static_cast<size_t>(min_points))
    return InvalidArgumentError("too few points to fit a learning curve: got " + std::to_string(data.size()) +
                                ", need at least " + std::to_string(min_points) + " (options.min_points)");
  for (size_t i = 0; i < data.size(); ++i) {
    if (!std::isfinite(data.iterations[i]) || !std::isfinite(data.losses[i]))
      return InvalidArgumentError("curve data: point " + std::to_string(i) + " is not finite");
    if (i > 0 && !(data.iterations[i] > data.iterations[i - 1]))
      return InvalidArgumentError("curve data: iterations must increase, point " + std::to_string(i) +
                                  " has iteration " + Num(data.iterations[i]) + " after " +
                                  Num(data.iterations[i - 1]));
  }
  return Status::Ok();
}

double YScale(const CurveData& data) {
  double m = 0;
  for (double v : data.losses) m = std::max(m, std::fabs(v));
  return m > 0 ? m : 1.0;
}

}  // namespace

// Shared by Fit and Refit: chooses winner/weights from the family fits.
static void Choose(LearningCurvePredictor::Summary* s, bool have_validation, double max_ratio) {
  int best = -1;
  for (size_t i = 0; i < s->families.size(); ++i) {
    auto& f = s->families[i];
    f.weight = 0;
    if (!f.usable) continue;
    const bool use_val = have_validation && s->selection != Selection::kBestMse;
    if (use_val && !f.validation_rmse) continue;
    const double score = use_val ? *f.validation_rmse : f.fit_rmse;
    const double best_score =
        best < 0 ? 0 : (use_val ? *s->families[best].validation_rmse : s->families[best].fit_rmse);
    if (best < 0 || score < best_score) best = static_cast<int>(i);
  }
  s->selected = -1;
  if (best < 0) return;
  if (s->selection != Selection::kEnsemble) {
    s->selected = best;
    s->families[best].weight = 1;
    return;
  }
  // Ensemble: weights proportional to 1 / MSE (validation MSE where scored),
  // members worse than max_ratio x the best MSE get none.
  const bool use_val = have_validation;
  auto score = [&](const LearningCurvePredictor::FamilyFit& f) {
    const double r = use_val ? *f.validation_rmse : f.fit_rmse;
    return std::max(r * r, 1e-300);
  };
  const double best_mse = score(s->families[best]);
  double total = 0;
  for (auto& f : s->families) {
    if (!f.usable || (use_val && !f.validation_rmse)) continue;
    const double mse = score(f);
    if (mse > max_ratio * best_mse) continue;
    f.weight = 1.0 / mse;
    total += f.weight;
  }
  for (auto& f : s->families) f.weight /= total;
}

StatusOr<LearningCurvePredictor> LearningCurvePredictor::Fit(const CurveData& data, const Options& options) {
  const auto t_start = std::chrono::steady_clock::now();
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("predictor options: " + error);
  VIPER_RETURN_IF_ERROR(CheckData(data, options.min_points));

  LearningCurvePredictor p;
  p.options_ = options;
  if (p.options_.families.empty()) p.options_.families = AllCurveFamilies();
  const auto& families = p.options_.families;
  Summary& s = p.summary_;
  s.selection = options.selection;
  s.num_points = data.size();
  s.first_iteration = data.iterations.front();
  s.last_iteration = data.iterations.back();

  Scales sc;
  sc.x_scale = std::max(data.iterations.back(), 1.0);
  sc.y_scale = YScale(data);
  const double sigma = NoiseSigma(data.losses);
  sc.sigma_u = sigma / sc.y_scale;
  s.x_scale = sc.x_scale;
  s.noise_sigma = sigma;
  const double horizon = options.horizon_iteration > 0 ? options.horizon_iteration : 4 * data.iterations.back();
  const Points all_pts = Prepare(data, sc.x_scale, sc.y_scale, options.max_fit_points);

  // Validation split (by count), where both parts are long enough.
  const size_t n_fit = static_cast<size_t>(std::floor(options.validation_fraction * data.size()));
  const bool want_validation = options.selection != Selection::kBestMse;
  const bool can_validate = want_validation && n_fit >= 5 && data.size() - n_fit >= 3;
  std::vector<std::vector<Params>> starts(families.size());
  std::vector<std::optional<double>> val_rmse(families.size());
  std::vector<std::string> val_reason(families.size());
  for (size_t i = 0; i < families.size(); ++i)
    starts[i] = DefaultStarts(families[i], data, sc, options.starts_per_family);
  if (can_validate) {
    const CurveData head = data.Prefix(data.iterations[n_fit - 1]);
    const CurveData tail = data.Suffix(data.iterations[n_fit - 1]);
    const Points head_pts = Prepare(head, sc.x_scale, sc.y_scale, options.max_fit_points);
    for (size_t i = 0; i < families.size(); ++i) {
      OneFit h = FitOne(families[i], head, head_pts, sc,
                        DefaultStarts(families[i], head, sc, options.starts_per_family), options, horizon, false);
      if (!h.usable) {
        val_reason[i] = "on the first " + std::to_string(n_fit) + " points: " + h.reason;
        continue;
      }
      Params loss = ToLossUnits(families[i], h.norm, sc.y_scale);
      val_rmse[i] = Rmse(families[i], loss, sc.x_scale, tail);
      // Warm start of the full fit from the head fit, then the best default start.
      std::vector<Params> st = {h.norm};
      if (!starts[i].empty()) st.push_back(starts[i][0]);
      starts[i] = st;
    }
  }

  p.members_.resize(families.size());
  int iterations = 0;
  int usable = 0;
  std::string reasons;
  for (size_t i = 0; i < families.size(); ++i) {
    OneFit r = FitOne(families[i], data, all_pts, sc, starts[i], options, horizon, true);
    iterations += r.iterations;
    FamilyFit f = r.fit;
    f.usable = r.usable;
    f.drop_reason = r.reason;
    if (can_validate) {
      f.validation_rmse = val_rmse[i];
      if (f.usable && !val_rmse[i]) f.drop_reason = "not scored: " + val_reason[i];
    }
    if (f.usable) {
      ++usable;
      p.members_[i].params = ToLossUnits(families[i], r.norm, sc.y_scale);
      p.members_[i].cov = r.cov;
      p.members_[i].has_cov = r.has_cov;
    } else {
      reasons += std::string(reasons.empty() ? "" : "; ") + ToString(families[i]) + ": " + f.drop_reason;
    }
    s.families.push_back(f);
  }
  Choose(&s, can_validate, options.ensemble_max_mse_ratio);
  s.fit_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (s.selected < 0 && s.selection != Selection::kEnsemble) {
    return FailedPreconditionError("no curve family could be fitted: " + reasons);
  }
  double total_w = 0;
  for (const auto& f : s.families) total_w += f.weight;
  if (!(total_w > 0)) return FailedPreconditionError("no curve family could be fitted: " + reasons);
  s.usable = true;
  s.message = std::to_string(usable) + " of " + std::to_string(families.size()) + " families usable";
  if (want_validation && !can_validate)
    s.message += "; too few points to hold out a validation part, scored on the fit instead";
  (void)iterations;
  return p;
}

Status LearningCurvePredictor::Refit(const CurveData& data) {
  const auto t_start = std::chrono::steady_clock::now();
  VIPER_RETURN_IF_ERROR(CheckData(data, options_.min_points));
  const CurveData fresh = data.Suffix(summary_.last_iteration);
  const bool rescore = options_.selection != Selection::kBestMse && fresh.size() >= 3;

  Summary s = summary_;
  std::vector<Member> members = members_;
  Scales sc;
  sc.x_scale = summary_.x_scale;  // kept: shape parameters are in units of t
  sc.y_scale = YScale(data);
  s.noise_sigma = NoiseSigma(data.losses);
  sc.sigma_u = s.noise_sigma / sc.y_scale;
  s.num_points = data.size();
  s.first_iteration = data.iterations.front();
  s.last_iteration = data.iterations.back();
  const double horizon =
      options_.horizon_iteration > 0 ? options_.horizon_iteration : 4 * data.iterations.back();
  const Points pts = Prepare(data, sc.x_scale, sc.y_scale, options_.max_fit_points);
  bool have_validation = false;
  for (const auto& f : s.families) have_validation = have_validation || f.validation_rmse.has_value();
  int usable = 0;
  for (size_t i = 0; i < s.families.size(); ++i) {
    FamilyFit& f = s.families[i];
    if (!f.usable) continue;
    const CurveFamily fam = f.family;
    if (rescore) f.validation_rmse = Rmse(fam, members[i].params, sc.x_scale, fresh);
    const std::vector<Params> st = {ToNormalized(fam, members[i].params, sc.y_scale)};
    OneFit r = FitOne(fam, data, pts, sc, st, options_, horizon, true);
    f.solver_iterations = r.iterations;
    if (!r.usable) {
      f.usable = false;
      f.drop_reason = "refit: " + r.reason;
      continue;
    }
    ++usable;
    f.params = r.fit.params;
    f.fit_rmse = r.fit.fit_rmse;
    members[i].params = ToLossUnits(fam, r.norm, sc.y_scale);
    members[i].cov = r.cov;
    members[i].has_cov = r.has_cov;
  }
  if (rescore) have_validation = true;
  Choose(&s, have_validation, options_.ensemble_max_mse_ratio);
  double total_w = 0;
  for (const auto& f : s.families) total_w += f.weight;
  if (!(total_w > 0)) return FailedPreconditionError("refit: no curve family survived");
  s.message = std::to_string(usable) + " of " + std::to_string(s.families.size()) + " families usable after refit";
  if (rescore) s.message += "; rescored on " + std::to_string(fresh.size()) + " new points";
  s.fit_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  summary_ = std::move(s);
  members_ = std::move(members);
  return Status::Ok();
}

double LearningCurvePredictor::Predict(double iteration) const {
  double v = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    const double w = summary_.families[i].weight;
    if (w > 0) v += w * EvalLoss(summary_.families[i].family, members_[i].params, summary_.x_scale, iteration);
  }
  return v;
}

std::pair<double, double> LearningCurvePredictor::Band(double iteration) const {
  const double mean = Predict(iteration);
  double var = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    const double w = summary_.families[i].weight;
    if (!(w > 0)) continue;
    const CurveFamily fam = summary_.families[i].family;
    const Member& m = members_[i];
    const double f = EvalLoss(fam, m.params, summary_.x_scale, iteration);
    double v = (f - mean) * (f - mean);
    if (m.has_cov) {
      // Delta method with a central-difference gradient.
      const int np = NumParams(fam);
      double g[kMaxCurveParams] = {0, 0, 0, 0};
      for (int j = 0; j < np; ++j) {
        const double h = 1e-6 * (std::fabs(m.params[j]) + 1e-3);
        Params up = m.params, dn = m.params;
        up[j] += h;
        dn[j] -= h;
        g[j] = (EvalLoss(fam, up, summary_.x_scale, iteration) - EvalLoss(fam, dn, summary_.x_scale, iteration)) /
               (2 * h);
      }
      double q = 0;
      for (int a = 0; a < np; ++a)
        for (int b = 0; b < np; ++b) q += g[a] * m.cov[a * kMaxCurveParams + b] * g[b];
      if (std::isfinite(q) && q > 0) v += q;
    }
    var += w * v;
  }
  const double half = options_.band_z * std::sqrt(var);
  double low = mean - half;
  if (!options_.allow_negative_loss) low = std::max(low, 0.0);
  return {low, mean + half};
}

std::vector<double> LearningCurvePredictor::PredictRange(int64_t first, int64_t last) const {
  std::vector<double> out;
  if (last < first) return out;
  out.resize(static_cast<size_t>(last - first + 1), 0.0);
  for (size_t i = 0; i < members_.size(); ++i) {
    const double w = summary_.families[i].weight;
    if (!(w > 0)) continue;
    const CurveFamily fam = summary_.families[i].family;
    for (int64_t it = first; it <= last; ++it)
      out[static_cast<size_t>(it - first)] += w * EvalLoss(fam, members_[i].params, summary_.x_scale, it);
  }
  return out;
}

std::vector<std::pair<FittedCurve, double>> LearningCurvePredictor::Members() const {
  std::vector<std::pair<FittedCurve, double>> out;
  for (size_t i = 0; i < members_.size(); ++i) {
    const auto& f = summary_.families[i];
    if (!(f.weight > 0)) continue;
    FittedCurve c;
    c.family = f.family;
    c.params.assign(members_[i].params.begin(), members_[i].params.begin() + NumParams(f.family));
    c.x_scale = summary_.x_scale;
    out.emplace_back(c, f.weight);
  }
  return out;
}

std::string LearningCurvePredictor::Summary::BriefReport() const {
  std::ostringstream os;
  int usable_count = 0, weighted = 0;
  for (const auto& f : families) {
    usable_count += f.usable;
    weighted += f.weight > 0;
  }
  os << ToString(selection) << ": ";
  if (selected >= 0) {
    os << ToString(families[selected].family) << " (rmse " << Num(families[selected].fit_rmse) << ")";
  } else {
    os << weighted << " weighted members";
  }
  os << "; " << usable_count << "/" << families.size() << " families usable on " << num_points
     << " points (iterations " << Num(first_iteration) << ".." << Num(last_iteration) << "), noise sigma "
     << Num(noise_sigma) << "; " << Num(fit_time_s) << " s";
  return os.str();
}

namespace {

// RMSE over every point of `after`, and the relative error of the "final
// loss": the mean over the last few points, so one noisy value does not decide it.
template <typename Predict>
ExtrapolationError ScorePoints(const Predict& predict, const CurveData& after) {
  ExtrapolationError e;
  e.points = after.size();
  double ss = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    const double r = after.losses[i] - predict(after.iterations[i]);
    ss += r * r;
  }
  e.rmse = std::sqrt(ss / after.size());
  const size_t m = std::max<size_t>(1, std::min<size_t>(500, after.size() / 20));
  double t = 0, p = 0;
  for (size_t i = after.size() - m; i < after.size(); ++i) {
    t += after.losses[i];
    p += predict(after.iterations[i]);
  }
  e.final_loss = t / m;
  e.predicted_final_loss = p / m;
  e.final_relative_error = std::fabs(e.predicted_final_loss - e.final_loss) / std::max(std::fabs(e.final_loss), 1e-12);
  return e;
}

}  // namespace

StatusOr<ExtrapolationError> ScoreExtrapolation(const LearningCurvePredictor& predictor, const CurveData& truth) {
  const CurveData after = truth.Suffix(predictor.summary().last_iteration);
  if (after.size() == 0)
    return InvalidArgumentError("no points after the fitted range (iteration " +
                                Num(predictor.summary().last_iteration) + ") to score against");
  return ScorePoints([&](double x) { return predictor.Predict(x); }, after);
}

StatusOr<ExtrapolationError> ScoreExtrapolation(const FittedCurve& curve, const CurveData& unseen) {
  if (unseen.size() == 0) return InvalidArgumentError("no unseen points to score against");
  return ScorePoints([&](double x) { return curve.Evaluate(x); }, unseen);
}

}  // namespace predictor
}  // namespace viper
