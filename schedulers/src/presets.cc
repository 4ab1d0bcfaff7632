#include "viper/schedulers/presets.h"

namespace viper {
namespace schedulers {
namespace {

struct Calibration {
  double small_bytes, small_s, large_bytes, large_s;  // async update latency points
  double snapshot_bytes_per_s;                        // producer stall bandwidth
};

Calibration For(Tier tier) {
  constexpr double kNt3a = 600e6, kTc1 = 4.7e9;
  switch (tier) {
    case Tier::kGpu: return {kNt3a, 0.123, kTc1, 0.856, kTc1 / (1.0 / 16.0)};
    case Tier::kHost: return {kNt3a, 0.391, kTc1, 2.326, kTc1 / (22.0 / 16.0)};
    case Tier::kPfs: return {kNt3a, 1.145, kTc1, 6.977, kTc1 / (60.0 / 16.0)};
  }
  return {};
}

}  // namespace

TierCost PresetTierCost(Tier tier, double model_size_bytes, bool synchronous, Notification notification,
                        double poll_period_s) {
  const Calibration c = For(tier);
  const double slope = (c.large_s - c.small_s) / (c.large_bytes - c.small_bytes);  // s per byte
  const double latency = c.small_s - slope * c.small_bytes;                          // s
  const double rest = slope - 1.0 / c.snapshot_bytes_per_s;  // s per byte after the snapshot
  TierCost t;
  t.model_size_bytes = model_size_bytes;
  t.snapshot_latency_s = 0.0;
  t.snapshot_bandwidth_bytes_per_s = c.snapshot_bytes_per_s;
  t.transfer_latency_s = latency;
  t.transfer_bandwidth_bytes_per_s = 1.0 / (0.75 * rest);
  t.load_latency_s = 0.0;
  t.load_bandwidth_bytes_per_s = 1.0 / (0.25 * rest);
  // A model the producer keeps without publishing it stays in its own
  // device memory: a device-local copy, the gpu tier's snapshot, whichever
  // tier delivers (600 MB: 8 ms).
  t.keep_copy_bandwidth_bytes_per_s = For(Tier::kGpu).snapshot_bytes_per_s;
  t.synchronous = synchronous;
  t.notification = notification;
  t.poll_period_s = poll_period_s;
  return t;
}

std::vector<std::pair<double, double>> PaperAsyncUpdateLatency(Tier tier) {
  const Calibration c = For(tier);
  return {{c.small_bytes, c.small_s}, {c.large_bytes, c.large_s}};
}

}  // namespace schedulers
}  // namespace viper
