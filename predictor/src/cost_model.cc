#include "viper/predictor/cost_model.h"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "viper/core/median.h"

namespace viper {
namespace predictor {
namespace {

std::string Trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \t\r\""));
  s.erase(s.find_last_not_of(" \t\r\"") + 1);
  return s;
}

// Relative residual of the affine model: (latency + bytes*s_per_GB/1e9) / seconds - 1.
struct AffineResidual {
  double bytes, seconds;
  template <typename T>
  bool operator()(const T* latency, const T* s_per_gb, T* r) const {
    r[0] = (latency[0] + s_per_gb[0] * T(bytes * 1e-9)) / T(seconds) - T(1.0);
    return true;
  }
};

}  // namespace

StatusOr<IterationTime> EstimateIterationTime(const TrainingLog& log) {
  const LogRecord* prev = nullptr;
  std::vector<double> within, across_extra_raw;
  std::vector<std::pair<double, double>> across;  // (iteration delta, seconds)
  for (size_t row = 0; row < log.records.size(); ++row) {
    const LogRecord& r = log.records[row];
    if (!r.wall_time_s) continue;
    if (prev) {
      const double dt = *r.wall_time_s - *prev->wall_time_s;
      const double di = static_cast<double>(r.iteration - prev->iteration);
      if (dt < 0)
        return InvalidArgumentError(log.source + ": row " + std::to_string(row + 1) + ": wall_time goes back from " +
                                    std::to_string(*prev->wall_time_s) + " to " + std::to_string(*r.wall_time_s));
      if (di > 0) {
        const bool crosses = r.epoch && prev->epoch && *r.epoch != *prev->epoch;
        if (crosses) {
          across.emplace_back(di, dt);
        } else {
          within.push_back(dt / di);
        }
      }
    }
    prev = &r;
  }
  IterationTime out;
  if (within.empty() && across.empty())
    return InvalidArgumentError(log.source + ": need at least two rows with a wall_time to estimate seconds per iteration");
  if (within.empty()) {
    for (const auto& [di, dt] : across) within.push_back(dt / di);
    out.method = "median of per-iteration wall-time deltas (every delta crosses an epoch)";
  } else {
    out.method = "median of per-iteration wall-time deltas within epochs";
  }
  out.seconds_per_iteration = Median(within);
  out.intervals = static_cast<int64_t>(within.size() + across.size());
  LogSummary summary = Summarize(log);
  out.iterations_per_epoch = summary.iterations_per_epoch;
  if (!across.empty() && within.size() >= 3) {
    std::vector<double> dev;
    for (double v : within) dev.push_back(std::fabs(v - out.seconds_per_iteration));
    const double mad = Median(dev);
    std::vector<double> extra;
    for (const auto& [di, dt] : across) extra.push_back(dt - di * out.seconds_per_iteration);
    const double pause = Median(extra);
    const double per_row_spread = 3 * std::max(mad, 1e-12);
    if (pause > per_row_spread && pause > 0.01 * out.seconds_per_iteration) {
      out.epoch_pause_s = pause;
      out.method += "; epoch-boundary pause from " + std::to_string(across.size()) + " boundary deltas";
    }
  }
  if (out.iterations_per_epoch)
    out.seconds_per_epoch = *out.iterations_per_epoch * out.seconds_per_iteration + out.epoch_pause_s.value_or(0.0);
  return out;
}

const char* ToString(CostPhase phase) {
  switch (phase) {
    case CostPhase::kStall: return "stall";
    case CostPhase::kTransfer: return "transfer";
    case CostPhase::kLoad: return "load";
    case CostPhase::kNotify: return "notify";
    case CostPhase::kUpdate: return "update";
  }
  return "?";
}

StatusOr<CostPhase> CostPhaseFromString(const std::string& name) {
  if (name == "stall") return CostPhase::kStall;
  if (name == "transfer") return CostPhase::kTransfer;
  if (name == "load") return CostPhase::kLoad;
  if (name == "notify") return CostPhase::kNotify;
  if (name == "update") return CostPhase::kUpdate;
  return InvalidArgumentError("unknown phase '" + name + "' (known: stall, transfer, load, notify, update)");
}

namespace {

Status ParseNumber(const std::string& text, const std::string& where, const std::string& field, double* out) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
    if (!std::isfinite(v) || v < 0) return InvalidArgumentError(where + ": field '" + field + "' must be a finite number >= 0, got '" + text + "'");
    *out = v;
    return Status::Ok();
  } catch (const std::exception&) {
    return InvalidArgumentError(where + ": field '" + field + "' is not a number: '" + text + "'");
  }
}

Status CheckSample(const CostSample& s, const std::string& where) {
  if (s.tier.empty()) return InvalidArgumentError(where + ": field 'tier' is empty");
  if (s.mode.empty()) return InvalidArgumentError(where + ": field 'mode' is empty");
  if (!(s.seconds > 0)) return InvalidArgumentError(where + ": field 'seconds' must be > 0");
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<CostSample>> ParseCostSamplesCsv(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  std::vector<std::string> header;
  int col[5] = {-1, -1, -1, -1, -1};
  const char* kNames[5] = {"tier", "mode", "phase", "bytes", "seconds"};
  std::vector<CostSample> out;
  auto split = [](const std::string& l) {
    std::vector<std::string> f;
    std::stringstream ss(l);
    std::string item;
    while (std::getline(ss, item, ',')) f.push_back(Trim(item));
    if (!l.empty() && l.back() == ',') f.push_back("");
    return f;
  };
  while (std::getline(in, line)) {
    ++line_no;
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    const std::vector<std::string> fields = split(t);
    const std::string where = source + ":" + std::to_string(line_no);
    if (header.empty()) {
      header = fields;
      for (int k = 0; k < 5; ++k) {
        for (size_t c = 0; c < header.size(); ++c)
          if (header[c] == kNames[k]) col[k] = static_cast<int>(c);
        if (col[k] < 0)
          return InvalidArgumentError(where + ": header lacks the column '" + kNames[k] +
                                      "' (expected tier,mode,phase,bytes,seconds)");
      }
      continue;
    }
    if (fields.size() < header.size())
      return InvalidArgumentError(where + ": expected " + std::to_string(header.size()) + " fields, got " +
                                  std::to_string(fields.size()));
    CostSample s;
    s.tier = fields[col[0]];
    s.mode = fields[col[1]];
    auto phase = CostPhaseFromString(fields[col[2]]);
    if (!phase.ok()) return InvalidArgumentError(where + ": field 'phase': " + phase.status().message());
    s.phase = *phase;
    VIPER_RETURN_IF_ERROR(ParseNumber(fields[col[3]], where, "bytes", &s.bytes));
    VIPER_RETURN_IF_ERROR(ParseNumber(fields[col[4]], where, "seconds", &s.seconds));
    VIPER_RETURN_IF_ERROR(CheckSample(s, where));
    out.push_back(s);
  }
  if (header.empty()) return InvalidArgumentError(source + ": empty file (expected the header tier,mode,phase,bytes,seconds)");
  if (out.empty()) return InvalidArgumentError(source + ": no samples after the header");
  return out;
}

StatusOr<std::vector<CostSample>> ParseCostSamplesJson(const std::string& text, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(source + ": not valid JSON");
  if (!j.is_array()) return InvalidArgumentError(source + ": expected a JSON array of samples");
  std::vector<CostSample> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    const std::string where = source + ": element " + std::to_string(i);
    if (!e.is_object()) return InvalidArgumentError(where + ": not an object");
    for (const char* key : {"tier", "mode", "phase"}) {
      if (!e.contains(key) || !e[key].is_string())
        return InvalidArgumentError(where + ": key '" + key + "' missing or not a string");
    }
    for (const char* key : {"bytes", "seconds"}) {
      if (!e.contains(key) || !e[key].is_number())
        return InvalidArgumentError(where + ": key '" + key + "' missing or not a number");
      if (!(e[key].get<double>() >= 0)) return InvalidArgumentError(where + ": key '" + key + "' must be >= 0");
    }
    CostSample s;
    s.tier = e["tier"].get<std::string>();
    s.mode = e["mode"].get<std::string>();
    auto phase = CostPhaseFromString(e["phase"].get<std::string>());
    if (!phase.ok()) return InvalidArgumentError(where + ": key 'phase': " + phase.status().message());
    s.phase = *phase;
    s.bytes = e["bytes"].get<double>();
    s.seconds = e["seconds"].get<double>();
    VIPER_RETURN_IF_ERROR(CheckSample(s, where));
    out.push_back(s);
  }
  if (out.empty()) return InvalidArgumentError(source + ": no samples");
  return out;
}

StatusOr<std::vector<CostSample>> ReadCostSamples(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open cost samples '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  return json ? ParseCostSamplesJson(ss.str(), path) : ParseCostSamplesCsv(ss.str(), path);
}

bool CostModel::Options::IsValid(std::string* error) const {
  if (!(huber_relative_scale > 0)) {
    if (error) *error = "huber_relative_scale must be > 0";
    return false;
  }
  if (max_iterations < 1) {
    if (error) *error = "max_iterations must be >= 1";
    return false;
  }
  return true;
}

StatusOr<AffineCost> CostModel::FitAffine(const std::vector<std::pair<double, double>>& bs, const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("cost model options: " + error);
  std::set<double> sizes;
  for (const auto& [b, s] : bs) {
    if (!(s > 0) || !(b >= 0) || !std::isfinite(b) || !std::isfinite(s))
      return InvalidArgumentError("cost sample (" + std::to_string(b) + " bytes, " + std::to_string(s) +
                                  " s) is invalid: need bytes >= 0 and seconds > 0");
    sizes.insert(b);
  }
  if (sizes.size() < 2)
    return InvalidArgumentError("need samples at two or more distinct sizes to separate latency from bandwidth, got " +
                                std::to_string(sizes.size()));
  // Start: weighted least squares on the relative residual (closed form).
  double sww = 0, swx = 0, swy = 0, swxx = 0, swxy = 0;
  for (const auto& [b, s] : bs) {
    const double w = 1.0 / (s * s), x = b * 1e-9;
    sww += w; swx += w * x; swy += w * s; swxx += w * x * x; swxy += w * x * s;
  }
  const double det = sww * swxx - swx * swx;
  double slope = det > 0 ? (sww * swxy - swx * swy) / det : 0;
  double icept = det > 0 ? (swy - slope * swx) / sww : 0;
  double latency = std::max(icept, 0.0), s_per_gb = std::max(slope, 1e-12);

  ceres::Problem problem;
  for (const auto& [b, s] : bs) {
    problem.AddResidualBlock(new ceres::AutoDiffCostFunction<AffineResidual, 1, 1, 1>(new AffineResidual{b, s}),
                             new ceres::HuberLoss(options.huber_relative_scale), &latency, &s_per_gb);
  }
  problem.SetParameterLowerBound(&latency, 0, 0.0);
  problem.SetParameterLowerBound(&s_per_gb, 0, 1e-15);
  ceres::Solver::Options so;
  so.linear_solver_type = ceres::DENSE_QR;
  so.max_num_iterations = options.max_iterations;
  so.logging_type = ceres::SILENT;
  so.function_tolerance = 1e-12;
  so.parameter_tolerance = 1e-12;
  ceres::Solver::Summary summary;
  ceres::Solve(so, &problem, &summary);
  if (!summary.IsSolutionUsable()) return InternalError("cost model fit failed: " + summary.message);
  AffineCost out;
  out.latency_s = latency;
  out.bandwidth_Bps = 1e9 / s_per_gb;
  out.samples = bs.size();
  double ss = 0;
  for (const auto& [b, s] : bs) {
    const double e = out.Seconds(b) - s;
    ss += e * e;
    out.max_relative_error = std::max(out.max_relative_error, std::fabs(e) / s);
  }
  out.rmse_s = std::sqrt(ss / bs.size());
  return out;
}

StatusOr<CostModel> CostModel::Fit(const std::vector<CostSample>& samples, const Options& options) {
  std::map<Key, std::vector<std::pair<double, double>>> groups;
  for (const auto& s : samples) groups[Key{s.tier, s.mode, s.phase}].emplace_back(s.bytes, s.seconds);
  if (groups.empty()) return InvalidArgumentError("no cost samples");
  CostModel model;
  for (const auto& [key, bs] : groups) {
    auto fit = FitAffine(bs, options);
    if (!fit.ok())
      return fit.status().WithContext("tier " + std::get<0>(key) + ", mode " + std::get<1>(key) + ", phase " +
                                      ToString(std::get<2>(key)));
    model.models_[key] = *fit;
  }
  return model;
}

Status CostModel::Set(const std::string& tier, const std::string& mode, CostPhase phase, double latency_s,
                      double bandwidth_Bps) {
  if (!(latency_s >= 0) || !std::isfinite(latency_s)) return InvalidArgumentError("latency_s must be finite and >= 0");
  if (!(bandwidth_Bps > 0) || !std::isfinite(bandwidth_Bps)) return InvalidArgumentError("bandwidth_Bps must be finite and > 0");
  AffineCost c;
  c.latency_s = latency_s;
  c.bandwidth_Bps = bandwidth_Bps;
  models_[Key{tier, mode, phase}] = c;
  return Status::Ok();
}

StatusOr<AffineCost> CostModel::Get(const std::string& tier, const std::string& mode, CostPhase phase) const {
  auto it = models_.find(Key{tier, mode, phase});
  if (it != models_.end()) return it->second;
  std::string have;
  for (const auto& [k, v] : models_)
    have += std::string(have.empty() ? "" : ", ") + std::get<0>(k) + "/" + std::get<1>(k) + "/" + ToString(std::get<2>(k));
  return NotFoundError("no cost model for tier " + tier + ", mode " + mode + ", phase " + ToString(phase) +
                       " (have: " + (have.empty() ? "none" : have) + ")");
}

}  // namespace predictor
}  // namespace viper
