// Internal: the drift of Trainer::Options where trainer.cc needs it without
// naming a drift kind. trainer_drift.cc holds the whole drifting stream: the
// public traffic side (DriftTrafficState, DriftedSamples and the functions
// they are made of, declared in trainer.h) and the training side (the
// Trainer members that draw batches as the drift has them: ActiveClasses,
// StartEpoch, DrawPriorBatch, NextBatch, SetUpDriftPools).
//
// Free functions of the options rather than a stream object: the drift is a
// pure function of (Options, iteration), which is how the public side and
// the live consumers already use it; the state the training stream keeps
// (pools, positions, the data generator) is shared with the undrifted epochs
// and stays in Trainer.
#pragma once

#include <string>

#include "viper/core/status.h"
#include "viper/workflow/fashion_mnist.h"
#include "viper/workflow/trainer.h"

namespace viper {
namespace workflow {
namespace internal {

// The drift fields of `options` (Trainer::Options::IsValid calls it after the
// optimiser's fields): false and a message naming the field when one is out
// of range for the drift kind.
bool DriftOptionsValid(const Trainer::Options& options, std::string* error);

// Trainer::Create's check of the training samples against the drift:
// rotation and recurring rotate images and need square ones.
Status CheckDriftTrainingSamples(const Trainer::Options& options, const Samples& train);

}  // namespace internal
}  // namespace workflow
}  // namespace viper
