// Internal: the two live roles (live_producer.cc, live_consumer.cc).
// LiveRun::Run (live.cc) aligns the clocks and calls one of them.
#pragma once

#include <mpi.h>

#include "viper/core/status.h"
#include "viper/workflow/live.h"

namespace viper {
namespace workflow {
namespace internal {

// Rank 0: trains (or replays), plans, publishes, then gathers the
// consumers' results into the run's Summary. `base`: the common time origin.
StatusOr<LiveRun::Summary> RunProducer(const LiveRun::Options& o, MPI_Comm comm, int size, double base);

// Ranks 1..: serves requests at the configured rate with the newest
// verified version until training is over, then reports to the producer.
StatusOr<LiveRun::Summary> RunConsumer(const LiveRun::Options& o, MPI_Comm comm, int rank, double base);

}  // namespace internal
}  // namespace workflow
}  // namespace viper
