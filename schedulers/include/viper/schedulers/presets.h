// Transport-tier presets calibrated on the Viper paper's Polaris measurements
// (4x A100-40GB per node, Slingshot-10, Lustre; shared/reference/viper-facts.md).
//
// Each tier's asynchronous end-to-end update latency is affine in the model
// size, fitted exactly through the paper's two points (NT3.A 600 MB and TC1
// 4.7 GB): GPU 0.123 s / 0.856 s, host 0.391 s / 2.326 s, Viper PFS
// 1.145 s / 6.977 s. The producer stall (the snapshot) comes from the
// paper's TC1 training overhead with 16 epoch-boundary checkpoints: GPU ~1 s,
// host ~22 s, PFS ~60 s, i.e. 75, 3.4 and 1.25 GB/s for 4.7 GB. The rest of
// the latency is split 75% transfer (with the affine latency) and 25% load.
// Synchronous mode uses the same phases (stall = snapshot + transfer); the
// paper's sync figures, one copy shorter, are not modelled separately.
//
// A scenario names a preset as its cost source (scenario.h: PresetCost); the
// simulator replays the resulting phases.
#pragma once

#include <utility>
#include <vector>

#include "viper/core/transfer.h"
#include "viper/schedulers/problem.h"

namespace viper {
namespace schedulers {

// The TierCost of `tier` for a model of `model_size_bytes`, in `synchronous`
// or async mode, with the given notification (poll period in seconds).
TierCost PresetTierCost(Tier tier, double model_size_bytes, bool synchronous, Notification notification,
                        double poll_period_s = 1.0);

// The paper's async update latency for `tier` at the calibration sizes, for
// documentation and tests: {bytes, seconds} pairs.
std::vector<std::pair<double, double>> PaperAsyncUpdateLatency(Tier tier);

}  // namespace schedulers
}  // namespace viper
