// The closed loop's decisions, recorded (OnlinePlanner::Options::record_decisions) and as CSV.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "online_returns.h"
#include "viper/schedulers/online.h"

namespace viper {
namespace schedulers {
namespace {

void Real(std::string* row, double x) {
  char buf[32] = "";
  if (std::isfinite(x)) std::snprintf(buf, sizeof(buf), "%.9g", x);
  *row += buf;
  *row += ',';
}

void Int(std::string* row, int64_t x, bool present = true) {
  if (present) *row += std::to_string(x);
  *row += ',';
}

}  // namespace

void OnlinePlanner::RecordDecision(int64_t now, double v, double sigma, const Problem& planned,
                                   bool plan_wanted, bool gated, bool holding, bool ramp_hold, bool publish) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  Decision d;
  d.iteration = now;
  d.traffic = TrafficAt(now);
  d.candidate_loss = v;
  d.served_model = served_model();
  d.served_loss = served_loss_ ? *served_loss_ : kNaN;
  d.noise_sd = sigma;
  d.gate_margin = MarginFor(sigma);
  d.plan_wants = plan_wanted;
  d.gated = gated;
  d.held_for_return = holding;
  d.held_on_ramp = ramp_hold;
  d.publish = publish;
  if (publish) {
    d.published_model = publishing_;
    d.publish_kind = publishing_ == now ? "fresh" : returns_->pending() ? "ahead" : "kept";
  }
  d.best_kept_loss = kNaN;
  for (const auto& [model, loss] : KeptAt(now)) {
    if (d.best_kept_model < 0 || loss < d.best_kept_loss) {
      d.best_kept_model = model;
      d.best_kept_loss = loss;
    }
  }
  d.decay_per_s = planned.drift_per_s;
  d.lag_price = summary_.lag_price;
  d.changes = summary_.changes;
  d.switches = static_cast<int64_t>(returns_->switches().size());
  d.cycle = static_cast<int64_t>(returns_->cycle());
  const auto r = returns_->PredictedReturn(MeasurementGap());
  d.predicted_switch = r ? r->change : kNaN;
  decisions_.push_back(d);
}

std::string DecisionsCsv(const std::vector<OnlinePlanner::Decision>& decisions) {
  std::string out =
      "iteration,traffic_iteration,candidate_loss,served_model,served_loss,noise_sd,gate_margin,plan_wants,"
      "gated,"
      "held_for_return,held_on_ramp,publish,published_model,publish_kind,best_kept_model,best_kept_loss,"
      "decay_per_s,"
      "lag_price_per_s,changes,switches,cycle,predicted_switch\n";
  for (const auto& d : decisions) {
    std::string row;
    Int(&row, d.iteration);
    Real(&row, d.traffic);
    Real(&row, d.candidate_loss);
    Int(&row, d.served_model);
    Real(&row, d.served_loss);
    Real(&row, d.noise_sd);
    Real(&row, d.gate_margin);
    for (bool b : {d.plan_wants, d.gated, d.held_for_return, d.held_on_ramp, d.publish}) Int(&row, b ? 1 : 0);
    Int(&row, d.published_model, d.published_model >= 0);
    row += d.publish_kind;
    row += ',';
    Int(&row, d.best_kept_model, d.best_kept_model >= 0);
    Real(&row, d.best_kept_loss);
    Real(&row, d.decay_per_s);
    Real(&row, d.lag_price);
    Int(&row, d.changes);
    Int(&row, d.switches);
    Int(&row, d.cycle);
    Real(&row, d.predicted_switch);
    row.back() = '\n';
    out += row;
  }
  return out;
}

}  // namespace schedulers
}  // namespace viper
