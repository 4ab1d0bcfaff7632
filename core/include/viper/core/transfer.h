// The transfer vocabulary shared by the planners, the simulator and the
// transfer engine (DESIGN.md §3): where a version travels (tier), whether the
// producer waits for it (mode) and how a consumer learns of it
// (notification). Defined here once; transports/types.h and
// schedulers/problem.h name these same types.
#pragma once

#include <string>

#include "viper/core/status.h"

namespace viper {

// Where a published version travels through: GPU memory, host memory over
// MPI, or files on the parallel file system.
enum class Tier { kGpu, kHost, kPfs };

// sync: the producer waits until every consumer can serve the version.
// async: the producer waits for the snapshot only; a thread sends it.
enum class TransferMode { kSync, kAsync };

// push: the consumer is told the moment a version is servable. poll: it
// looks for new versions every poll period (PFS directory).
enum class Notify { kPush, kPoll };

const char* ToString(Tier tier);          // "gpu", "host", "pfs"
const char* ToString(TransferMode mode);  // "sync", "async"
const char* ToString(Notify notify);      // "push", "poll"

// The inverse of ToString; InvalidArgument naming the value and the
// accepted names otherwise.
StatusOr<Tier> TierFromString(const std::string& name);
StatusOr<TransferMode> TransferModeFromString(const std::string& name);
StatusOr<Notify> NotifyFromString(const std::string& name);

}  // namespace viper
