// Internal: who forwards a version to whom when one producer serves several
// consumers (Fanout in types.h). Pure bookkeeping, no MPI: the Publisher
// sends each consumer a Route built from this plan (mpi_link.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "viper/transports/types.h"

namespace viper {
namespace transports {
namespace internal {

struct FanoutPlan {
  // Each rank's receivers, the producer's included (a missing rank forwards
  // to nobody), in the order it should send.
  std::map<int, std::vector<int>> children;
  std::map<int, int> parent;  // every consumer's sender: the producer or a relay

  const std::vector<int>& ChildrenOf(int rank) const;
  // `rank` and everything below it.
  std::vector<int> Subtree(int rank) const;
};

// Plans the fan-out of one version from `producer` (on node `producer_host`)
// to `consumers` (ascending ranks, nodes in `hosts`, same length). `arity`:
// children per relay for Fanout::kTree. No relay gets more than
// `max_children`; a node with more consumers than that is arranged as a
// `max_children`-ary tree under its first consumer.
FanoutPlan PlanFanout(Fanout fanout, int arity, int max_children, int producer, const std::string& producer_host,
                      const std::vector<int>& consumers, const std::vector<std::string>& hosts);

}  // namespace internal
}  // namespace transports
}  // namespace viper
