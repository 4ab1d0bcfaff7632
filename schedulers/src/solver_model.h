// Internal to viper::schedulers: the fluid objective's pieces for one
// (problem, curve, start), shared by the exact solvers (optimal.cc) and the
// references and baselines (solvers.cc). Not installed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "viper/schedulers/cil_model.h"
#include "viper/schedulers/problem.h"
#include "viper/schedulers/solvers.h"

namespace viper {
namespace schedulers {
namespace internal {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The problem's numbers, and the pieces of the fluid objective.
class Model {
 public:
  Model(const Problem& p, const LossCurve& l, const PlanStart& start)
      : p_(p),
        l_(l),
        W_(p.warmup_iterations),
        N_(p.total_iterations),
        g_(p.min_spacing_iterations),
        tau_(p.seconds_per_iteration),
        sigma_(p.cost.stall_s),
        delta_(p.cost.delay_s),
        rho_(p.drift_per_s),
        rate_(p.requests.RatePerSecond()),
        price_(p.price_per_slowdown_s * p.cost.stall_s),
        k0_(start.checkpoints_taken),
        a_(start.checkpoints_taken > 0 ? start.last_checkpoint : p.warmup_iterations),
        earliest_(start.earliest_iteration),
        start_loss_(start.served_loss ? *start.served_loss : l.at(a_)) {}

  int64_t W() const { return W_; }
  int64_t N() const { return N_; }
  int64_t g() const { return g_; }
  int64_t k0() const { return k0_; }
  int64_t a() const { return a_; }
  // First iteration a new checkpoint may take.
  int64_t lo() const { return std::max(k0_ == 0 ? W_ + 1 : a_ + g_, earliest_); }
  double rate() const { return rate_; }
  double sigma() const { return sigma_; }
  double tau() const { return tau_; }
  // Whether the clock is uniform (Problem::elapsed_s empty).
  bool Uniform() const { return p_.elapsed_s.empty(); }
  // Training seconds from the end of i to the end of j (j >= i).
  double Span(int64_t i, int64_t j) const {
    if (p_.elapsed_s.empty()) return static_cast<double>(j - i) * tau_;
    return U(j) - U(i);
  }
  double rho() const { return rho_; }
  double delta() const { return delta_; }
  // End of a fixed window (kRequestCount, kEndTime): R, independent of the count.
  double WindowEnd() const { return p_.WindowEnd(0); }
  // Loss of the start's version, and when it is servable (seconds).
  double StartLoss() const { return start_loss_; }
  double StartServable() const { return k0_ == 0 ? 0.0 : p_.CheckpointStart(a_, k0_) + delta_; }
  // Price of one checkpoint (price_per_slowdown_s x sigma).
  double price() const { return price_; }
  double loss(int64_t i) const { return l_.at(i); }
  bool CountFree() const { return p_.requests.window == WindowKind::kWhileTraining; }
  // Training seconds from W to the end of j (the problem's clock).
  double U(int64_t j) const { return p_.Elapsed(j); }

  // Cost of the version served before the first new checkpoint j (plus j's price).
  double StartCost(int64_t j) const {
    if (k0_ == 0) {
      const double a1 = U(j) + delta_;
      return FluidVersionCost(rate_, start_loss_, rho_, 0.0, 0.0, a1) + price_;
    }
    const double L = Span(a_, j) + sigma_;
    return FluidVersionCost(rate_, start_loss_, rho_, 0.0, delta_, L + delta_) + price_;
  }
  // Cost of the version of checkpoint i, served until checkpoint j is servable (count-free).
  double Seg(int64_t i, int64_t j) const {
    const double L = Span(i, j) + sigma_;
    return FluidVersionCost(rate_, loss(i), rho_, 0.0, delta_, L + delta_);
  }
  // Seg(i, j) + price = Quad(j) + Slope(i)*U(j) + Icpt(i): the line form.
  double Slope(int64_t i) const {
    const double v = sigma_ - U(i);
    return rate_ * (loss(i) + rho_ * (v + delta_));
  }
  double Icpt(int64_t i) const {
    const double v = sigma_ - U(i);
    return rate_ * (loss(i) * v + 0.5 * rho_ * v * v + rho_ * delta_ * v);
  }
  double Quad(int64_t j) const {
    const double u = U(j);
    return rate_ * 0.5 * rho_ * u * u + price_;
  }
  // Whether checkpoint j, as the K-th overall, is servable inside the window.
  bool Servable(int64_t j, int64_t K) const {
    return p_.CheckpointStart(j, K) + delta_ <= p_.WindowEnd(K);
  }
  // Cost of the last version (checkpoint j, K-th overall) until the window ends.
  std::optional<double> Terminal(int64_t j, int64_t K) const { return TerminalWithLoss(j, K, loss(j)); }
  std::optional<double> TerminalWithLoss(int64_t j, int64_t K, double l) const {
    const double T = p_.CheckpointStart(j, K);
    const double R = p_.WindowEnd(K);
    if (T + delta_ > R) return std::nullopt;
    return FluidVersionCost(rate_, l, rho_, T, T + delta_, R);
  }
  // Lower bound on the cost to complete from state (checkpoint j, K-th overall).
  double RemainingLowerBound(int64_t j, int64_t K, double suffix_min_loss) const {
    const double gap = p_.WindowEnd(K) - (p_.CheckpointStart(j, K) + delta_);
    return gap > 0.0 ? rate_ * suffix_min_loss * gap : 0.0;
  }
  // Cost with no new checkpoint; nullopt when the start's version is not servable.
  std::optional<double> Empty() const {
    if (k0_ == 0) return FluidVersionCost(rate_, start_loss_, rho_, 0.0, 0.0, p_.WindowEnd(0));
    return TerminalWithLoss(a_, k0_, start_loss_);
  }
  // Largest j whose state as the K-th checkpoint is servable (lo() - 1 if none).
  int64_t LastServable(int64_t K) const {
    const double slack = p_.WindowEnd(K) - delta_ - static_cast<double>(K - 1) * sigma_;
    int64_t hi = N_;
    if (slack < U(N_)) hi = slack < 0 ? W_ : static_cast<int64_t>(std::floor(p_.PositionAt(slack)));
    hi = std::min(hi, N_);
    while (hi >= lo() && !Servable(hi, K)) --hi;
    while (hi + 1 <= N_ && Servable(hi + 1, K)) ++hi;
    return std::max(hi, lo() - 1);
  }
  int64_t MaxNewCheckpoints() const {
    const int64_t total = p_.MaxCheckpoints();
    return total == std::numeric_limits<int64_t>::max() ? total : std::max<int64_t>(0, total - k0_);
  }

 private:
  const Problem& p_;
  const LossCurve& l_;
  int64_t W_, N_, g_;
  double tau_, sigma_, delta_, rho_, rate_, price_;
  int64_t k0_, a_, earliest_;
  double start_loss_;  // loss of the version served at the start (measured, or the curve's)
};

// OK when the problem, the curve and the start are valid (InvalidArgument naming the field).
inline Status CheckInputs(const Problem& problem, const LossCurve& curve, const PlanStart& start) {
  VIPER_RETURN_IF_ERROR(problem.Validate());
  VIPER_RETURN_IF_ERROR(curve.CheckCovers(problem));
  if (start.checkpoints_taken < 0) return InvalidArgumentError("start.checkpoints_taken must be >= 0");
  if (start.earliest_iteration < 0 || start.earliest_iteration > problem.total_iterations + 1) {
    return InvalidArgumentError("start.earliest_iteration " + std::to_string(start.earliest_iteration) +
                                " is outside [0, N + 1]");
  }
  if (start.served_loss && !(std::isfinite(*start.served_loss) && *start.served_loss >= 0)) {
    return InvalidArgumentError("start.served_loss must be finite and >= 0");
  }
  if (start.checkpoints_taken > 0 &&
      (start.last_checkpoint <= problem.warmup_iterations || start.last_checkpoint > problem.total_iterations)) {
    return InvalidArgumentError("start.last_checkpoint " + std::to_string(start.last_checkpoint) +
                                " is outside (W, N]");
  }
  return Status::Ok();
}

}  // namespace internal
}  // namespace schedulers
}  // namespace viper
