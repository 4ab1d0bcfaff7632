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
  // Consumer rank 0: records its decision, then exits (_exit(0)) before
  // sending it to anyone: the other consumer ranks that voted yes are in
  // doubt with nobody left to ask.
  kExitAfterDecision,
  // Producer, shm link: announces its first bucket (the consumer ranks copy
  // it), then stops (returns) / exits (_exit(0)): the rest of its shard
  // never comes. On the MPI link, as kStopAfterHeaders / kExitAfterHeaders.
  kStopAfterFirstBucket,
  kExitAfterFirstBucket,
  // Producer, gpu link: flips one byte of its staging buffer after computing
  // the digests (a piece corrupted in device memory): the consumer rank
  // that takes that byte must not verify, so the group commits nothing.
  // Other links: no effect.
  kCorruptPiece,
};

// The fault applies to version `version` only.
void SetFault(ShardedPublisher* publisher, uint64_t version, GroupFault fault);
void SetFault(ShardedSubscriber* subscriber, uint64_t version, GroupFault fault);

// Versions [first, last] use `seconds` for every peer timeout of this rank
// instead of the options' (set on every rank of both groups). Only for
// versions a known fault makes fail whatever the timing (a rank stopped or
// killed in them): a short wait then decides nothing a test checks, and
// the versions before and after keep the options' timeout.
struct FaultTimeout {
  uint64_t first = 0, last = 0;  // none when first == 0
  double seconds = 0;
  double For(uint64_t version, double otherwise) const {
    return first != 0 && version >= first && version <= last ? seconds : otherwise;
  }
};
void SetFaultTimeout(ShardedPublisher* publisher, uint64_t first, uint64_t last, double seconds);
void SetFaultTimeout(ShardedSubscriber* subscriber, uint64_t first, uint64_t last, double seconds);

}  // namespace internal
}  // namespace transports
}  // namespace viper
