// Internal, tests only: faults injected into one version of a producer or
// consumer rank of a group (group.h), to check that the group never serves
// a mix of versions.
#pragma once

#include <cstdint>

#include "viper/transports/group.h"

namespace viper {
namespace transports {
namespace internal {

enum class GroupFault {
  kNone,
  // Producer: sends its headers, then none of its bytes, and returns (a rank
  // that stalled). Consumer: receives the headers, then neither receives
  // nor votes, and returns an error (a rank that dropped out).
  kStopAfterHeaders,
  // The rank exits (_exit(0), no MPI_Finalize) after sending (producer) or
  // receiving (consumer) the headers: a rank killed mid-version (mpirun with
  // --mca orte_enable_recovery 1, or Open MPI ends the job).
  kExitAfterHeaders,
  // Consumer rank other than 0: votes, then receives the group's decision
  // and drops it (a decision lost on its way): the rank is in doubt.
  kDropDecision,
};

// The fault applies to version `version` only.
void SetFault(ShardedPublisher* publisher, uint64_t version, GroupFault fault);
void SetFault(ShardedSubscriber* subscriber, uint64_t version, GroupFault fault);

}  // namespace internal
}  // namespace transports
}  // namespace viper
