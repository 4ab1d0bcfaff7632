// The training-loss predictor: fits curve families to the warm-up part of a
// learning curve with Ceres (privately), selects or combines them, and
// extrapolates with an uncertainty band. Cheap to call repeatedly: Predict and
// Band are closed-form, Refit warm-starts from the previous parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "viper/core/status.h"
#include "viper/predictor/curve.h"

namespace viper {
namespace predictor {

// How the prediction is made from the fitted families.
enum class Selection {
  kBestMse,     // Viper's rule: lowest warm-up MSE wins
  kValidation,  // fit on the first part, score the extrapolation on the rest, refit the winner on all
  kEnsemble,    // weighted mean of the surviving families, weights 1 / validation MSE
};
const char* ToString(Selection selection);
StatusOr<Selection> SelectionFromString(const std::string& name);

enum class RobustLoss { kNone, kHuber, kCauchy };
const char* ToString(RobustLoss loss);
StatusOr<RobustLoss> RobustLossFromString(const std::string& name);

class LearningCurvePredictor {
 public:
  struct Options {
    // Model selection rule.
    Selection selection = Selection::kEnsemble;
    // Families to fit (empty = all fifteen).
    std::vector<CurveFamily> families;
    // Validation/ensemble: fraction of the fitted points (by count, from the
    // start) used to fit when scoring extrapolation on the rest; in (0, 1).
    double validation_fraction = 0.7;
    // Robust loss on each residual; its scale is robust_scale_factor times the
    // noise (1.4826 * MAD of the residuals from a running median of the data).
    RobustLoss robust_loss = RobustLoss::kHuber;
    // Multiplier of the noise sigma for the robust-loss scale (1.345 = Huber's 95% efficiency).
    double robust_scale_factor = 1.345;
    // Starting points tried per family (1..8); the best usable solution wins.
    int starts_per_family = 3;
    // Ceres iteration cap per start.
    int max_iterations = 100;
    // Above this many points the data are averaged into this many equal-width
    // bins (weighted by count) before fitting; 0 = never. RMSEs always use all points.
    int max_fit_points = 400;
    // Fewest points accepted (a log shorter than this is rejected).
    int min_points = 8;
    // Fits are checked for NaN, negative or increasing loss up to this
    // iteration; 0 = 4 x the last fitted iteration.
    double horizon_iteration = 0;
    // Losses may not go below zero (true for cross-entropy/MSE losses).
    bool allow_negative_loss = false;
    // Ensemble members whose validation MSE exceeds this multiple of the best are given weight 0.
    double ensemble_max_mse_ratio = 20.0;
    // Half-width of Band() in standard deviations (1.96 ~ 95% for a normal error).
    double band_z = 1.96;

    bool IsValid(std::string* error) const;
  };

  // One family's outcome.
  struct FamilyFit {
    CurveFamily family = CurveFamily::kExp3;
    bool usable = false;              // false: dropped, see drop_reason
    std::string drop_reason;          // why it was dropped ("" when usable)
    std::vector<double> params;       // final parameters (fitted on all points), FittedCurve order
    double fit_rmse = 0;              // RMSE on all fitted points, loss units
    std::optional<double> validation_rmse;  // RMSE of the extrapolation onto the held-out part
    double weight = 0;                // share in the prediction (sums to 1 over the family list)
    int solver_iterations = 0;        // Ceres iterations, all starts
  };

  struct Summary {
    Selection selection = Selection::kEnsemble;
    bool usable = false;              // at least one family survived
    std::string message;              // what happened, in a sentence
    size_t num_points = 0;            // points fitted
    double first_iteration = 0, last_iteration = 0;  // range fitted
    double x_scale = 1;               // iterations per unit of t
    double noise_sigma = 0;           // estimated loss noise (1.4826 MAD), loss units
    std::vector<FamilyFit> families;  // one per requested family, in request order
    int selected = -1;                // index of the winner (best-mse/validation), -1 for ensemble
    double fit_time_s = 0;            // wall time of Fit/Refit

    // "ensemble of 12/15 families on 400 points (1..4000), best exp3 rmse 0.012; 0.31 s".
    std::string BriefReport() const;
  };

  // Fits `data` (iterations increasing, >= min_points points). Fails with
  // InvalidArgument for bad options or too-short data, and with
  // FailedPrecondition when every family was dropped (the message lists why).
  static StatusOr<LearningCurvePredictor> Fit(const CurveData& data, const Options& options);

  // Fits again on `data` (normally the same curve, grown), starting each
  // surviving family from its previous parameters with a single start.
  // Ensemble weights / the validation winner are rescored on the points that
  // are new since the last fit when there are at least 3 of them (a true
  // out-of-sample score), else kept. On failure the predictor is unchanged.
  Status Refit(const CurveData& data);

  // Predicted loss at `iteration`.
  double Predict(double iteration) const;
  // (low, high): Predict +- band_z standard deviations, from the parameter
  // covariance of each member (ceres::Covariance, delta method) and, for the
  // ensemble, the spread between members. Low is clamped at 0 unless negative
  // losses are allowed.
  std::pair<double, double> Band(double iteration) const;
  // Predict(i) for every integer i in [first, last] (empty if last < first).
  std::vector<double> PredictRange(int64_t first, int64_t last) const;

  const Summary& summary() const { return summary_; }
  const Options& options() const { return options_; }
  // The members with weight > 0, as curves.
  std::vector<std::pair<FittedCurve, double>> Members() const;

  LearningCurvePredictor(const LearningCurvePredictor&);
  LearningCurvePredictor& operator=(const LearningCurvePredictor&);
  LearningCurvePredictor(LearningCurvePredictor&&) noexcept;
  LearningCurvePredictor& operator=(LearningCurvePredictor&&) noexcept;
  ~LearningCurvePredictor();

 private:
  struct Member;  // family, params, covariance (normalised), weight
  LearningCurvePredictor();
  Options options_;
  Summary summary_;
  std::vector<Member> members_;  // parallel to summary_.families
};

// How well a prediction extrapolates onto the truth after the fitted part.
struct ExtrapolationError {
  size_t points = 0;              // points of `truth` after the fitted range
  double rmse = 0;                // over those points, loss units
  // "Final" = the mean over the last m = clamp(points / 20, 1, 500) points, so
  // one noisy value does not decide it.
  double final_loss = 0;            // true final loss
  double predicted_final_loss = 0;  // predicted, averaged over the same points
  double final_relative_error = 0;  // |predicted - true| / |true|
};
// Scores `predictor` on the points of `truth` after its last fitted iteration.
// Fails when there are none.
StatusOr<ExtrapolationError> ScoreExtrapolation(const LearningCurvePredictor& predictor, const CurveData& truth);
// The same score for one fitted curve, over every point of `unseen` (the
// caller picks the points after the fitted range). Fails when `unseen` is empty.
StatusOr<ExtrapolationError> ScoreExtrapolation(const FittedCurve& curve, const CurveData& unseen);

}  // namespace predictor
}  // namespace viper
