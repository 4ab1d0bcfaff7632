// Internal (MPI builds only): the control messages between a Publisher and
// its Subscribers, and chunked transfers with deadlines. Every wait is a
// Test loop with a deadline, on a private duplicate of MPI_COMM_WORLD whose
// error handler is MPI_ERRORS_RETURN, so a dead or silent peer becomes a
// Status instead of a hang or an abort of this process.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "keep_until_finalize.h"

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
  // that map it answer Ready with via_shm = 1 and copy the version out of
  // it; the others receive it as a two-sided stream (Route included).
  char shm_name[64] = {0};
  uint64_t shm_payload_bytes = 0;
};

struct Ready {
  uint64_t session = 0;
  uint64_t version = 0;
  uint64_t window_offset = 0;  // one-sided: where to put the bytes
  int32_t accept = 0;          // 0: cannot take this version (too large)
  int32_t via_host = 0;        // gpu tier: 1 = send through pinned host memory (no CUDA IPC)
  char host[64] = {0};         // the consumer's node name (fan-out by node)
  int32_t via_shm = 0;         // shm protocol: 1 = copies it out of the segment (no data over MPI)
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

// Sends `size` bytes to `dest` and waits at most `timeout_s` for the send to
// complete. A blocking MPI_Send can wait for ever: Open MPI left even a
// small eager send to a rank that had died (mpirun with recovery on)
// incomplete. On timeout the send is cancelled if MPI still can; otherwise
// its request is freed and a copy of the bytes kept until MPI_Finalize
// (KeepUntilFinalize; a few hundred bytes per message to a dead rank). Returns Aborted naming
// the rank when the time is up or MPI fails.
Status SendBytesWithin(MPI_Comm comm, int dest, int tag, const void* data, std::size_t size, double timeout_s);

// Small POD messages.
template <typename T>
Status SendPod(MPI_Comm comm, int dest, int tag, const T& msg, double timeout_s) {
  return SendBytesWithin(comm, dest, tag, &msg, sizeof(T), timeout_s);
}
// Receives one T from `source` (or MPI_ANY_SOURCE) if one is waiting; sets
// *from. Returns false when none is waiting.
template <typename T>
StatusOr<bool> TryRecvPod(MPI_Comm comm, int source, int tag, T* msg, int* from = nullptr) {
  int flag = 0;
  MPI_Status st;
  if (MPI_Iprobe(source, tag, comm, &flag, &st) != MPI_SUCCESS) return AbortedError("MPI_Iprobe failed");
  if (!flag) return false;
  if (MPI_Recv(msg, sizeof(T), MPI_BYTE, st.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
    return AbortedError("MPI_Recv from rank " + std::to_string(st.MPI_SOURCE) + " failed");
  }
  if (from) *from = st.MPI_SOURCE;
  return true;
}

// This process's node name (MPI_Get_processor_name), cut to `size` - 1 bytes.
void NodeName(char* out, std::size_t size);

// Collective over `comm`: `root` draws a random session id and broadcasts it.
StatusOr<uint64_t> AgreeOnSession(MPI_Comm comm, int root);

// Sleeps `sleep_us` after a number of empty polls (spins first, for latency).
class Backoff {
 public:
  explicit Backoff(int sleep_us) : sleep_us_(sleep_us) {}
  void Pause();
  void Reset() { spins_ = 0; }

 private:
  int sleep_us_;
  int spins_ = 0;
};

// One message of a chunked transfer: `size` (< 2 GiB) contiguous bytes.
struct Chunk {
  std::byte* data = nullptr;  // send: read; receive: written
  uint64_t size = 0;
};

// Splits `size` bytes at `data` into chunks of at most `chunk_bytes`.
void AppendChunks(std::byte* data, uint64_t size, uint64_t chunk_bytes, std::vector<Chunk>* chunks);

// One chunked two-sided transfer to or from one peer: the messages of
// `*chunks` in order, with a bounded number in flight. Transfers of one
// version to several peers share the chunk list; a relay drives its receive
// and its sends in one RunChunked.
struct ChunkedTransfer {
  int peer = -1;
  bool send = false;  // false: receive
  const std::vector<Chunk>* chunks = nullptr;
  std::size_t next = 0;       // next chunk to post
  std::size_t completed = 0;  // chunks completed (in order)
  std::vector<MPI_Request> inflight;
  bool failed = false;
  bool Done() const { return next >= chunks->size() && inflight.empty(); }
};

// Work RunChunked interleaves with its MPI calls. All optional.
struct ChunkHooks {
  // Whether chunk `index` of transfer `t` may be posted yet (e.g. the
  // header, once its checksum is known; a relay's send, once that chunk has
  // landed). Asked again on every pass until true.
  std::function<bool(const ChunkedTransfer& t, std::size_t index)> ready;
  // Called once per chunk index, in order, when the first receive (or, when
  // no transfer receives, the first send) to complete that chunk has
  // completed it (receive: the bytes have landed).
  std::function<void(std::size_t index)> completed;
  // Called on every pass; does a bounded slice of work (e.g. hashes 256 KiB)
  // and returns whether there was any. The pass then does not yield.
  std::function<bool()> background;
};

// Drives the sends and receives of all `transfers` until each is done,
// fails, or `deadline_s` (MonotonicSeconds) passes. Failed or late transfers
// get failed = true and their requests are freed (never waited on again).
void RunChunked(MPI_Comm comm, int max_inflight, std::vector<ChunkedTransfer>* transfers, double deadline_s,
                const ChunkHooks& hooks = {});

}  // namespace internal
}  // namespace transports
}  // namespace viper
