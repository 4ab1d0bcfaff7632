// The live producer's end of run (rank 0, after the consumers reported):
// what its own publishes and the consumers' swaps and requests come to in
// LiveRun::Summary. live_producer.cc runs the run; this file only reads what
// the run left behind, so the two concerns live apart.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "live_exchange.h"
#include "viper/transports/publisher.h"
#include "viper/workflow/live.h"

namespace viper {
namespace workflow {
namespace internal {

// One published version, as the producer saw it.
struct Published {
  uint64_t version = 0;
  int64_t iteration = 0;
  int64_t model_iteration = 0;  // the model it carries (older than `iteration`: a re-publish)
  double start_s = 0;  // since the end of warm-up
  transports::Publisher::VersionReport report;
};

// Per version: the producer's report and the consumers' servable times
// (summary->versions, total stall, mean update latency, whether every
// version reached every consumer that reported). `t_warm` is the end of the
// warm-up since the common origin. Returns version -> position in
// summary->versions.
std::map<uint64_t, size_t> SummarizeVersions(const std::vector<Published>& published,
                                             const std::vector<transports::Publisher::VersionReport>& reports,
                                             const std::map<int, ConsumerResults>& results, double t_warm,
                                             transports::Mode mode, LiveRun::Summary* summary);

// The requests served in the window [0, training end], charged to their
// versions (`index` from SummarizeVersions). With drifting traffic,
// `timeline` (when each iteration ended, since the common origin; the first
// iteration is `first`) judges the consumers' estimates of the producer's
// iteration.
void SummarizeRequests(const std::map<int, ConsumerResults>& results, double t_warm,
                       const std::map<uint64_t, size_t>& index,
                       const std::vector<std::pair<double, int64_t>>& timeline, int64_t first,
                       LiveRun::Summary* summary);

}  // namespace internal
}  // namespace workflow
}  // namespace viper
