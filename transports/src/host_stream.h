// Internal (MPI builds only): a consumer's leg of one version's host stream
// (tier_host.cc), relayed along the fan-out plan or straight from the
// producer. Shared by the host tier's two-sided path (plan, data, header)
// and its delta path (the delta's messages, tier_host_delta.h): both await
// their Route when the announcement is routed (HostPayload::routed), receive
// from the parent it names and forward every message, unchanged and in
// order, to its children as soon as it has landed.
#pragma once

#include <string>
#include <vector>

#include "control.h"
#include "mpi_link.h"
#include "wire.h"

namespace viper {
namespace transports {
namespace internal {

class StreamLeg {
 public:
  // Where version `a`'s kTagData messages come from: when `routed`, the
  // parent its Route names (awaited within the transfer window; a relay
  // parent shortens the deadline to the route's relay_timeout_s), else the
  // producer. Aborted when no consistent Route came in time.
  static StatusOr<StreamLeg> Open(ConsumerControl* control, const Announce& a, bool routed);

  int parent() const { return route_.parent; }
  int children() const { return route_.children_count; }
  double deadline() const { return deadline_; }
  // "within 12.3 s", the time left from Open, for messages.
  const std::string& in_time() const { return in_time_; }
  // Why the stream did not arrive, by who stopped: the producer stopping is
  // the end of the subscription (Aborted); a relay stopping costs only this
  // version (Unavailable: not served, the subscription goes on).
  Status Lost(const std::string& what) const;

  // Receives `chunks` from the parent by the deadline while sending
  // `landed` (messages this leg already received, e.g. the chunk plan) and
  // then each of `chunks`, once it has landed, to the children, in one
  // RunChunked. `hooks.completed` and `hooks.background` are the caller's
  // (e.g. hashing what landed); `hooks.ready` is this leg's. Returns whether
  // the receive completed. *forward_failed: some forward did not complete
  // (logged; the producer drops that child when it does not acknowledge):
  // the freed sends may still read what they forwarded, so the caller keeps
  // that memory until MPI_Finalize.
  bool Run(uint64_t version, const std::vector<Chunk>& landed, const std::vector<Chunk>& chunks,
           ChunkHooks hooks, bool* forward_failed) const;

 private:
  ConsumerControl* control_ = nullptr;
  Route route_;
  double deadline_ = 0;
  std::string in_time_;
};

}  // namespace internal
}  // namespace transports
}  // namespace viper
