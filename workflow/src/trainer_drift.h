// Internal: what the rest of the trainer needs from the drift beyond
// trainer.h. trainer_drift.cc holds the whole drifting stream: its traffic
// side (DriftTrafficState, DriftedSamples and the functions they are made of,
// public in trainer.h), its training side (the Trainer members that check the
// drift's options and draw batches as the drift has them), and this.
//
// Free functions of the options rather than a stream object: the drift is a
// pure function of (Options, iteration), which is how the public side and
// the live consumers already use it; the state the training stream keeps
// (pools, positions, the data generator) is shared with the undrifted epochs
// and stays in Trainer.
#pragma once

#include <cstdint>
#include <vector>

#include "viper/workflow/trainer.h"

namespace viper {
namespace workflow {
namespace internal {

// The steps of the traffic in iterations [first + 2, last], ascending: each s
// whose TrafficState differs from s - 1's, except inside a ramp (a state that
// also changed from s - 2 to s - 1 and changes again from s to s + 1, or s is
// `last`: the iterations of a rotation or a prior shift in progress). A label
// swap, the class-incremental traffic growing and a recurring domain
// switching are steps. The deferred staleness table puts knots at s - 1 and s.
std::vector<int64_t> TrafficSteps(const Trainer::Options& options, int64_t first, int64_t last);

}  // namespace internal
}  // namespace workflow
}  // namespace viper
