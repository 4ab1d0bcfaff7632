// The closed loop's decisions, recorded (OnlinePlanner::Options::record_decisions) and as CSV.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "online_returns.h"
#include "viper/schedulers/online.h"

namespace viper {
namespace schedulers {
namespace {

// Appends one field and a comma.
struct CsvField {
  std::string* row;
  void operator()(const char*, int64_t x) const { *row += std::to_string(x) + ','; }
  void operator()(const char*, bool b) const { *row += b ? "1," : "0,"; }
  void operator()(const char*, std::string_view s) const { *row += std::string(s) + ','; }
  void operator()(const char*, std::optional<int64_t> m) const { *row += (m ? std::to_string(*m) : "") + ','; }
  void operator()(const char*, double x) const {
    char buf[32] = "";
    if (std::isfinite(x)) std::snprintf(buf, sizeof(buf), "%.9g", x);
    *row += std::string(buf) + ',';
  }
};

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
  // The re-plan with the candidate at its measured loss (before the gate
  // and the holds): when it takes none, no publish is planned for the rest
  // of the run as things stand, not merely later.
  if (!last_plan_.empty()) d.planned_checkpoint = last_plan_.front();
  d.gated = gated;
  d.held_for_return = holding;
  d.held_on_ramp = ramp_hold;
  d.held_for_switch = held_for_switch_;
  d.waited_too_long = waited_too_long_;
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
  std::string out;
  ForEachDecisionField(OnlinePlanner::Decision(), [&](const char* name, const auto&) { out += std::string(name) + ','; });
  out.back() = '\n';
  for (const auto& d : decisions) {
    std::string row;
    ForEachDecisionField(d, CsvField{&row});
    row.back() = '\n';
    out += row;
  }
  return out;
}

}  // namespace schedulers
}  // namespace viper
