// Internal: the control messages between a Publisher and its Subscribers
// (plain structs, sent as bytes over MPI by control.cc and the tiers). No
// MPI types here, so tier interfaces can name them in any build.
#pragma once

#include <cstdint>

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
// Fan-out (Announce::routed = 1): after its Ready, each consumer gets a Route
// from the producer naming the rank the kTagData messages come from (the
// producer, or a relaying consumer) and the ranks it forwards them to. A
// relay forwards every message, plan included, unchanged and in order, each
// as soon as it has landed, and acknowledges to the producer itself.
struct Announce {
  uint64_t session = 0;
  uint32_t kind = 0;
  uint32_t protocol = 0;  // HostProtocol as int
  uint64_t version = 0;
  int64_t iteration = 0;
  uint64_t image_bytes = 0;   // header_bytes + data section
  uint64_t chunk_bytes = 0;   // one-sided: bytes per MPI_Put
  uint64_t header_bytes = 0;  // two-sided: padded header size (the data lands after it)
  uint64_t data_chunks = 0;   // two-sided: entries of the plan
  uint64_t routed = 0;        // two-sided: 1 = a Route follows the consumer's Ready
  uint64_t checksum = 0;      // one-sided and pfs; two-sided: 0, the header carries it
  double sent_wtime = 0;      // MonotonicSeconds() at the producer when sent
  // The producer's peer_timeout_s: how long it may wait for the other
  // consumers' answers before any byte moves. A consumer's transfer
  // deadline counts from the end of that wait, so one silent consumer does
  // not make the others give up on the producer.
  double handshake_s = 0;
  // gpu tier (header_bytes above is the padded header there too): the
  // image's offset in the staging allocation, that allocation's
  // cudaIpcMemHandle_t and the interprocess event recorded once the image was
  // complete (both 64 opaque bytes), and the producer's node name (IPC only
  // between processes of one node).
  uint64_t image_offset = 0;
  char ipc_mem[64] = {0};
  char ipc_event[64] = {0};
  char host[64] = {0};
  // shm protocol (two-sided fields set too; host is the producer's node):
  // the segment's name and payload size (the image is written at its start,
  // the header last; see shm_segment.h). Consumers on the producer's node
  // that map it answer Ready with path kPathShm and copy the version out of
  // it; the others receive it as a two-sided stream (Route included).
  char shm_name[64] = {0};
  uint64_t shm_payload_bytes = 0;
};

// How a consumer takes a version: the receive path its Ready names, the
// first of its table (tier.h) that can take the announcement.
enum ReceivePath : int32_t {
  kPathMpi = 0,      // as announced over MPI: two-sided stream, one-sided window, gpu pinned-host pipeline
  kPathShm = 1,      // host, shm protocol: copied out of the producer's segment (no data over MPI)
  kPathCudaIpc = 2,  // gpu: device to device by CUDA IPC (no data over MPI)
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
};

}  // namespace internal
}  // namespace transports
}  // namespace viper
