// The host tier (tier_host.cc; mpi_stub.cc without MPI): shm and two-sided,
// its announcement payload and its factories for the tier table (tier.h).
//
// Two-sided host transfer, after the consumer's Ready, all kTagData messages
// from the producer, in this order:
//   1. the plan: data_chunks uint64 sizes (one message, 8 * data_chunks bytes);
//   2. data_chunks messages, the data section in order, sizes as planned
//      (each < 2 GiB; the producer cuts them at tensor boundaries and at
//      chunk_bytes, so each is one contiguous range of its memory);
//   3. the padded safetensors header, header_bytes, with viper.checksum.
// The consumer lands chunk i of the data at header_bytes + (sum of the
// earlier sizes) and the header at 0, so its buffer holds the image; it
// hashes the data while later chunks are in flight and compares the digest
// with the header's viper.checksum. The producer hashes while its sends are
// in flight, so the checksum is known only when the header goes out.
//
// Fan-out (HostPayload::routed = 1): after its Ready, each consumer gets a Route
// from the producer naming the rank the kTagData messages come from (the
// producer, or a relaying consumer) and the ranks it forwards them to. A
// relay forwards every message, plan included, unchanged and in order, each
// as soon as it has landed, and acknowledges to the producer itself. The
// delta takers (tier_host_delta.h) get a Route too, from a plan of their own
// over the takers alone: a relay there forwards the delta's messages, and
// only to takers (they hold the same base). The consumer's leg of either
// stream, relayed or not, is StreamLeg (host_stream.h).
//
// shm protocol (the two-sided fields set too; Announce::host is the
// producer's node): the segment's name and payload size (the image is
// written at its start, the header last; see shm_segment.h). Consumers on
// the producer's node that map it answer Ready with path kPathShm and copy
// the version out of it; the others receive it as a two-sided stream (Route
// included).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tier.h"
#include "wire.h"

namespace viper {
namespace transports {
namespace internal {

// What a host announcement carries beyond the common header.
struct HostPayload {
  uint64_t header_bytes = 0;       // padded header size (the data lands after it)
  uint64_t data_chunks = 0;        // entries of the plan
  uint64_t routed = 0;             // 1 = a Route follows the consumer's Ready (two-sided and delta)
  uint64_t shm_payload_bytes = 0;  // shm: the segment's payload size
  char shm_name[64] = {0};         // shm: the segment's name; empty: two-sided only
  // A delta offered (tier_host_delta.h): delta_bytes > 0 bytes, in messages
  // of delta_chunk_bytes, against the version delta_base_version whose
  // viper.checksum is delta_base_checksum. A consumer holding that base may
  // answer Ready with kPathDelta; one on the producer's node only when
  // delta_shm = 1 (else its link, shared memory, is as fast as the apply;
  // 0 and 2 offer it on other nodes only).
  uint64_t delta_bytes = 0;
  uint64_t delta_chunk_bytes = 0;
  uint64_t delta_base_version = 0;
  uint64_t delta_base_checksum = 0;
  uint64_t delta_shm = 0;
  // delta_shm = 2 (delta auto, by measured rates): the delta is offered
  // only to the consumers on other nodes whose rank has its bit here (rank
  // r: bit r % 64 of word r / 64; ranks below 512), those the producer's
  // measured rates predict to gain from it (tier_host_delta.h).
  uint64_t delta_ranks[8] = {0, 0, 0, 0, 0, 0, 0, 0};
};

// The host tier's decoder: the payload's size, a terminated segment name
// and a 0/1 `routed`. (Whether its sizes fit the image is the receive
// paths' check: they refuse an inconsistent announcement.)
inline StatusOr<HostPayload> DecodeHostPayload(const Announce& a) {
  VIPER_ASSIGN_OR_RETURN(HostPayload p, GetTierPayload<HostPayload>(a, "host"));
  if (!Terminated(p.shm_name, sizeof(p.shm_name))) {
    return DataLossError("announcement of version " + std::to_string(a.version) +
                         " (tier host): the shm segment name is not terminated");
  }
  bool ranks = false;
  for (uint64_t w : p.delta_ranks) ranks |= w != 0;
  if (p.delta_shm > 2 || (ranks && p.delta_shm != 2) ||
      (p.delta_bytes > 0 &&
       (p.delta_chunk_bytes == 0 || p.delta_chunk_bytes > (1ull << 30) || p.delta_bytes > a.image_bytes))) {
    return DataLossError(
        "announcement of version " + std::to_string(a.version) + " (tier host): inconsistent delta offer (" +
        std::to_string(p.delta_bytes) + " bytes in " + std::to_string(p.delta_chunk_bytes) +
        "-byte messages for a " + std::to_string(a.image_bytes) + "-byte image, delta_shm " +
        std::to_string(p.delta_shm) + (ranks ? ", delta_ranks set (only with delta_shm 2)" : "") + ")");
  }
  if (p.routed > 1) {
    return DataLossError("announcement of version " + std::to_string(a.version) + " (tier host): routed is " +
                         std::to_string(p.routed) + ", expected 0 or 1");
  }
  return p;
}

StatusOr<std::unique_ptr<TierSender>> MakeHostSender(const SenderSetup& setup);
// Three paths: a delta against the version held (when offered for it,
// tier_host_delta.h), shm (same node, segment mapped), then two-sided (any node).
StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeHostReceivers(const ReceiverSetup& setup);

}  // namespace internal
}  // namespace transports
}  // namespace viper
