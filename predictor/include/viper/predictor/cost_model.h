// Cost model: seconds per training iteration from a log, and per transport
// tier an affine time model `seconds = latency_s + bytes / bandwidth_Bps`
// fitted (with Ceres, privately) to measured samples for each phase.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "viper/core/status.h"
#include "viper/core/training_log.h"

namespace viper {
namespace predictor {

// ---- Iteration time --------------------------------------------------------

struct IterationTime {
  double seconds_per_iteration = 0;            // median per-iteration wall time, within epochs
  std::optional<double> epoch_pause_s;         // extra time at an epoch boundary (median), when the log shows one
  std::optional<double> iterations_per_epoch;  // median epoch length, when the log has epochs
  std::optional<double> seconds_per_epoch;     // iterations_per_epoch * seconds_per_iteration + pause
  int64_t intervals = 0;                       // wall-time deltas used
  std::string method;                          // how it was derived, in words
};

// Robust estimate from the wall_time column: the median over consecutive rows
// of (delta wall time / delta iteration), taken within epochs; an epoch pause
// is reported when rows that cross an epoch boundary take more than the
// within-epoch rate by over 3 medians of absolute deviation. Fails when fewer
// than two rows carry a wall time or times go backwards (names the row).
StatusOr<IterationTime> EstimateIterationTime(const TrainingLog& log);

// ---- Transfer phases -------------------------------------------------------

// What a sample measures: producer stall, the transfer, the consumer's load,
// the push/poll discovery delay, and the end-to-end update latency (checkpoint
// start to servable). The transports benchmark writes all five.
enum class CostPhase { kStall, kTransfer, kLoad, kNotify, kUpdate };
const char* ToString(CostPhase phase);
StatusOr<CostPhase> CostPhaseFromString(const std::string& name);

// One measurement, as the transports benchmark writes it
// (CSV header `tier,mode,phase,bytes,seconds`).
struct CostSample {
  std::string tier;   // e.g. gpu, host, pfs
  std::string mode;   // e.g. sync, async
  CostPhase phase = CostPhase::kTransfer;
  double bytes = 0;   // model size, bytes
  double seconds = 0; // measured time, seconds
};

// CSV with the header `tier,mode,phase,bytes,seconds` (any column order,
// extra columns ignored, '#' comments and blank lines skipped). Errors name
// `source`, the line and the field.
StatusOr<std::vector<CostSample>> ParseCostSamplesCsv(const std::string& text, const std::string& source);
// A JSON array of objects with the keys tier, mode, phase, bytes, seconds.
// Errors name `source`, the element index and the key.
StatusOr<std::vector<CostSample>> ParseCostSamplesJson(const std::string& text, const std::string& source);
// Reads a file: .json -> JSON, anything else -> CSV.
StatusOr<std::vector<CostSample>> ReadCostSamples(const std::string& path);

// seconds = latency_s + bytes / bandwidth_Bps.
struct AffineCost {
  double latency_s = 0;
  double bandwidth_Bps = 0;  // bytes per second; > 0
  size_t samples = 0;        // samples fitted (0 = given as options)
  double rmse_s = 0;         // RMSE of the fit over its samples, seconds
  double max_relative_error = 0;  // worst |predicted - measured| / measured

  double Seconds(double bytes) const { return latency_s + bytes / bandwidth_Bps; }
};

class CostModel {
 public:
  struct Options {
    // Robust (Huber) scale on the relative residual (predicted/measured - 1).
    double huber_relative_scale = 0.1;
    // Ceres iteration cap.
    int max_iterations = 200;

    bool IsValid(std::string* error) const;
  };

  // Fits one affine model per (tier, mode, phase) present in `samples`. Each
  // group needs at least two distinct sizes (the message names the group).
  // Residuals are relative, so small and large transfers count alike.
  static StatusOr<CostModel> Fit(const std::vector<CostSample>& samples, const Options& options);
  // Fits a single group of (bytes, seconds) pairs.
  static StatusOr<AffineCost> FitAffine(const std::vector<std::pair<double, double>>& bytes_seconds,
                                        const Options& options);

  // Sets a model by hand (e.g. from --latency/--bandwidth options).
  Status Set(const std::string& tier, const std::string& mode, CostPhase phase, double latency_s,
             double bandwidth_Bps);
  // The model of a group; NotFound names the group and lists those present.
  StatusOr<AffineCost> Get(const std::string& tier, const std::string& mode, CostPhase phase) const;

  using Key = std::tuple<std::string, std::string, CostPhase>;
  const std::map<Key, AffineCost>& models() const { return models_; }

 private:
  std::map<Key, AffineCost> models_;
};

}  // namespace predictor
}  // namespace viper
