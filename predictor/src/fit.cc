// Ceres fitting of one curve family. The only file with Ceres templates.
#include <ceres/ceres.h>

#include <cmath>
#include <limits>
#include <memory>

#include "families.h"

namespace viper {
namespace predictor {
namespace internal {
namespace {

// Residual sqrt(w) * (u - f(t)) for one (binned) point. N = parameter count.
template <int N>
struct PointResidual {
  CurveFamily family;
  double t, x, u, sqrt_w;

  template <typename T>
  bool operator()(const T* const p, T* residual) const {
    T full[kMaxCurveParams];
    for (int i = 0; i < kMaxCurveParams; ++i) full[i] = i < N ? p[i] : T(0.0);
    residual[0] = T(sqrt_w) * (T(u) - EvalFamily<T>(family, full, t, x));
    return true;
  }
};

template <int N>
FitOutcome FitN(CurveFamily family, const FitInput& in, const std::vector<Params>& starts) {
  FitOutcome best;
  best.reason = "no starting point";
  const FamilySpec& spec = Spec(family);
  const size_t n = in.t->size();

  std::unique_ptr<ceres::LossFunction> loss;
  if (in.robust_loss == RobustLoss::kHuber) loss = std::make_unique<ceres::HuberLoss>(in.robust_scale);
  if (in.robust_loss == RobustLoss::kCauchy) loss = std::make_unique<ceres::CauchyLoss>(in.robust_scale);

  ceres::Problem::Options problem_options;
  problem_options.loss_function_ownership = ceres::DO_NOT_TAKE_OWNERSHIP;
  problem_options.enable_fast_removal = false;
  ceres::Problem problem(problem_options);
  double p[N];
  for (int i = 0; i < N; ++i) p[i] = starts.empty() ? 0.0 : starts[0][i];
  for (size_t k = 0; k < n; ++k) {
    auto* functor = new PointResidual<N>{family, (*in.t)[k], (*in.x)[k], (*in.u)[k], std::sqrt((*in.w)[k])};
    problem.AddResidualBlock(new ceres::AutoDiffCostFunction<PointResidual<N>, 1, N>(functor), loss.get(), p);
  }
  for (int i = 0; i < N; ++i) {
    double lower = spec.lower[i];
    if (spec.is_floor[i] && in.allow_negative_loss) lower = -kAsymptoteMagnitude;
    problem.SetParameterLowerBound(p, i, lower);
    problem.SetParameterUpperBound(p, i, spec.upper[i]);
  }

  ceres::Solver::Options options;
  options.linear_solver_type = ceres::DENSE_QR;
  options.max_num_iterations = in.max_iterations;
  options.num_threads = 1;
  options.logging_type = ceres::SILENT;
  options.minimizer_progress_to_stdout = false;
  options.function_tolerance = 1e-10;
  options.parameter_tolerance = 1e-10;
  options.gradient_tolerance = 1e-12;

  double best_p[N];
  bool have = false;
  for (const Params& start : starts) {
    for (int i = 0; i < N; ++i) {
      double lower = spec.lower[i];
      if (spec.is_floor[i] && in.allow_negative_loss) lower = -kAsymptoteMagnitude;
      p[i] = std::min(std::max(start[i], lower), spec.upper[i]);
    }
    // Skip starts where the curve is not finite on the data.
    double initial_cost = 0;
    if (!problem.Evaluate(ceres::Problem::EvaluateOptions(), &initial_cost, nullptr, nullptr, nullptr) ||
        !std::isfinite(initial_cost)) {
      if (!have) best.reason = "curve not finite at the starting point";
      continue;
    }
    ceres::Solver::Summary summary;
    ceres::Solve(options, &problem, &summary);
    best.iterations += static_cast<int>(summary.iterations.size());
    if (!summary.IsSolutionUsable() || !std::isfinite(summary.final_cost)) {
      if (!have) best.reason = "Ceres: " + summary.message;
      continue;
    }
    if (!have || summary.final_cost < best.cost) {
      have = true;
      best.cost = summary.final_cost;
      for (int i = 0; i < N; ++i) best_p[i] = p[i];
    }
  }
  if (!have) return best;
  best.usable = true;
  best.reason.clear();
  best.params.fill(0.0);
  for (int i = 0; i < N; ++i) {
    p[i] = best_p[i];
    best.params[i] = best_p[i];
  }

  if (in.compute_covariance && n > static_cast<size_t>(N)) {
    ceres::Covariance::Options cov_options;
    cov_options.algorithm_type = ceres::DENSE_SVD;
    cov_options.null_space_rank = -1;  // drop directions the data do not determine
    cov_options.min_reciprocal_condition_number = 1e-12;
    cov_options.num_threads = 1;
    ceres::Covariance covariance(cov_options);
    std::vector<std::pair<const double*, const double*>> blocks = {{p, p}};
    double cov[N * N];
    if (covariance.Compute(blocks, &problem) && covariance.GetCovarianceBlock(p, p, cov)) {
      bool finite = true;
      for (int i = 0; i < N * N; ++i) finite = finite && std::isfinite(cov[i]);
      if (finite) {
        best.has_covariance = true;
        best.covariance.fill(0.0);
        for (int i = 0; i < N; ++i)
          for (int j = 0; j < N; ++j) best.covariance[i * kMaxCurveParams + j] = cov[i * N + j];
      }
    }
  }
  return best;
}

}  // namespace

FitOutcome FitFamily(CurveFamily family, const FitInput& in, const std::vector<Params>& starts) {
  switch (Spec(family).num_params) {
    case 2: return FitN<2>(family, in, starts);
    case 3: return FitN<3>(family, in, starts);
    case 4: return FitN<4>(family, in, starts);
  }
  FitOutcome bad;
  bad.reason = "unsupported parameter count";
  return bad;
}

}  // namespace internal
}  // namespace predictor
}  // namespace viper
