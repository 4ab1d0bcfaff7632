// Internal: the control messages between a Publisher and its Subscribers
// (plain structs, sent as bytes over MPI by control.cc and the tiers). No
// MPI types here, so tier interfaces can name them in any build. What only
// one tier announces is that tier's payload, declared in its own header
// (tier_host.h, tier_gpu.h, ...), not here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "viper/core/status.h"

namespace viper {
namespace transports {
namespace internal {

enum Tag : int {
  kTagAnnounce = 7001,
  kTagReady = 7002,
  kTagData = 7003,
  kTagDone = 7004,
  kTagAck = 7005,
  kTagRoute = 7006,
};

enum AnnounceKind : uint32_t {
  kAnnounceHost = 1,  // bytes follow over MPI (after a Ready)
  kAnnouncePfs = 2,   // the version is durable in the PFS directory: load it
  kAnnounceBye = 3,   // the producer closed; no more versions
  kAnnounceGpu =
      4,  // the image is in the producer's device staging: copy it by CUDA IPC, or ask for the pipeline
};

// Every message carries the session id the producer broadcast when the pair
// was created: Open MPI hands messages that arrive for a freed communicator
// to the next one that gets the same context id, so a late message of an
// earlier Publisher/Subscriber pair must be recognised and dropped. Because
// such a message also puts Open MPI's per-peer sequence numbers out of step
// (the next pair's handshakes then go unmatched), Publisher and Subscriber
// never free their communicator (MPI_Finalize does): context ids are not
// reused.

// The common header of every announcement, then the announcing tier's own
// payload: payload_bytes opaque bytes that only that tier's file (tier.h's
// table) writes and reads, with SetTierPayload / GetTierPayload below. A
// payload is checked by its tier's decoder before any receive path sees it
// (its size exactly, then its fields), so a hostile or garbled announcement
// is refused with a message, never read past its end.
constexpr uint32_t kMaxTierPayloadBytes = 256;

struct Announce {
  uint64_t session = 0;
  uint32_t kind = 0;      // AnnounceKind: which tier announces (with `protocol`)
  uint32_t protocol = 0;  // HostProtocol as int
  uint64_t version = 0;
  int64_t iteration = 0;
  uint64_t image_bytes = 0;  // the whole image: padded header + data section
  uint64_t checksum = 0;     // one-sided, pfs and gpu; two-sided: 0, the header carries it
  double sent_wtime = 0;     // MonotonicSeconds() at the producer when sent
  // The producer's peer_timeout_s: how long it may wait for the other
  // consumers' answers before any byte moves. A consumer's transfer
  // deadline counts from the end of that wait, so one silent consumer does
  // not make the others give up on the producer.
  double handshake_s = 0;
  // The producer's node name (shm and CUDA IPC only between processes of one node).
  char host[64] = {0};
  uint32_t payload_bytes = 0;  // bytes of `payload` the tier wrote
  uint32_t reserved = 0;
  std::byte payload[kMaxTierPayloadBytes] = {};
};

// Writes `p`, a tier's payload struct, into `a`.
template <typename P>
void SetTierPayload(const P& p, Announce* a) {
  static_assert(std::is_trivially_copyable_v<P> && sizeof(P) <= kMaxTierPayloadBytes,
                "a tier payload is a plain struct of at most kMaxTierPayloadBytes");
  std::memcpy(a->payload, &p, sizeof(P));
  a->payload_bytes = static_cast<uint32_t>(sizeof(P));
}

// Reads `a`'s payload as the struct P of tier `tier`: the announced size
// must be exactly sizeof(P) (a shorter one is truncated, a longer one is
// not this tier's). A tier without a payload uses NoTierPayload.
template <typename P>
StatusOr<P> GetTierPayload(const Announce& a, const char* tier) {
  static_assert(std::is_trivially_copyable_v<P> && sizeof(P) <= kMaxTierPayloadBytes,
                "a tier payload is a plain struct of at most kMaxTierPayloadBytes");
  constexpr uint64_t expected = std::is_empty_v<P> ? 0 : sizeof(P);
  if (a.payload_bytes != expected) {
    return DataLossError("announcement of version " + std::to_string(a.version) + " (tier " + tier +
                         "): its payload is " + std::to_string(a.payload_bytes) + " bytes, expected " +
                         std::to_string(expected) +
                         (a.payload_bytes > kMaxTierPayloadBytes
                              ? " (more than an announcement holds, " + std::to_string(kMaxTierPayloadBytes) + ")"
                              : std::string(a.payload_bytes < expected ? " (truncated)" : " (oversized)")));
  }
  P p{};
  if constexpr (!std::is_empty_v<P>) std::memcpy(&p, a.payload, sizeof(P));
  return p;
}

// The payload of a tier that announces nothing of its own.
struct NoTierPayload {};

// A fixed-size name field of a payload, which must hold its terminating NUL.
inline bool Terminated(const char* field, std::size_t size) { return ::strnlen(field, size) < size; }

// How a consumer takes a version: the receive path its Ready names, the
// first of its table (tier.h) that can take the announcement.
enum ReceivePath : int32_t {
  kPathMpi = 0,      // as announced over MPI: two-sided stream, one-sided window, gpu pinned-host pipeline
  kPathShm = 1,      // host, shm protocol: copied out of the producer's segment (no data over MPI)
  kPathCudaIpc = 2,  // gpu: device to device by CUDA IPC (no data over MPI)
  kPathDelta = 3,    // host: a delta against the version it holds (Ready::held_*), over MPI
};

struct Ready {
  uint64_t session = 0;
  uint64_t version = 0;
  uint64_t window_offset = 0;  // one-sided: where to put the bytes
  int32_t accept = 0;          // 0: cannot take this version (too large)
  int32_t path = kPathMpi;     // ReceivePath
  char host[64] = {0};         // the consumer's node name (fan-out by node)
  int32_t reserved = 0;
  int32_t padding = 0;
  // The version the consumer serves now and its viper.checksum (0, 0: none):
  // what a delta can be applied to (host tier, tier_host_delta.h).
  uint64_t held_version = 0;
  uint64_t held_checksum = 0;
};

// Most ranks one relay forwards a version to.
constexpr int kMaxRelayChildren = 32;

// Two-sided fan-out: where this consumer's copy of a version comes from and
// whom it forwards it to.
struct Route {
  uint64_t session = 0;
  uint64_t version = 0;
  int32_t parent = -1;  // rank the kTagData messages come from
  int32_t children_count = 0;
  // Seconds a consumer fed by a relay waits for the version (forwarding
  // included) before it reports it as not delivered, and stays subscribed.
  double relay_timeout_s = 0;
  int32_t children[kMaxRelayChildren] = {0};
};

struct Ack {
  uint64_t session = 0;
  uint64_t version = 0;
  int32_t ok = 0;       // 1: servable; 0: rejected (code says why)
  int32_t code = 0;     // StatusCode when rejected
  double load_s = 0;    // consumer: receive + verify + swap
  double notify_s = 0;  // consumer: receipt time - sent_wtime
  uint64_t bytes_moved = 0;  // consumer: bytes of the version that reached it (Landed::moved_bytes)
};

}  // namespace internal
}  // namespace transports
}  // namespace viper
