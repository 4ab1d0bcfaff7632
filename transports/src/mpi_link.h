// Internal (MPI builds only): the control messages between a Publisher and
// its Subscribers, and chunked transfers with deadlines. Every wait is a
// Test loop with a deadline, on a private duplicate of MPI_COMM_WORLD whose
// error handler is MPI_ERRORS_RETURN, so a dead or silent peer becomes a
// Status instead of a hang or an abort of this process.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "viper/core/status.h"

namespace viper {
namespace transports {
namespace internal {

enum Tag : int { kTagAnnounce = 7001, kTagReady = 7002, kTagData = 7003, kTagDone = 7004, kTagAck = 7005 };

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
// earlier Publisher/Subscriber pair must be recognised and dropped.
struct Announce {
  uint64_t session = 0;
  uint32_t kind = 0;
  uint32_t protocol = 0;  // HostProtocol as int
  uint64_t version = 0;
  int64_t iteration = 0;
  uint64_t image_bytes = 0;
  uint64_t chunk_bytes = 0;
  uint64_t checksum = 0;
  double sent_wtime = 0;  // MonotonicSeconds() at the producer when sent
  // gpu tier: the padded header's size, the image's offset in the staging
  // allocation, that allocation's cudaIpcMemHandle_t and the interprocess
  // event recorded once the image was complete (both 64 opaque bytes), and
  // the producer's node name (IPC only between processes of one node).
  uint64_t header_bytes = 0;
  uint64_t image_offset = 0;
  char ipc_mem[64] = {0};
  char ipc_event[64] = {0};
  char host[64] = {0};
};

struct Ready {
  uint64_t session = 0;
  uint64_t version = 0;
  uint64_t window_offset = 0;  // one-sided: where to put the bytes
  int32_t accept = 0;          // 0: cannot take this version (too large)
  int32_t via_host = 0;        // gpu tier: 1 = send through pinned host memory (no CUDA IPC)
};

struct Ack {
  uint64_t session = 0;
  uint64_t version = 0;
  int32_t ok = 0;       // 1: servable; 0: rejected (code says why)
  int32_t code = 0;     // StatusCode when rejected
  double load_s = 0;    // consumer: receive + verify + swap
  double notify_s = 0;  // consumer: receipt time - sent_wtime
};

// Small POD messages.
template <typename T>
Status SendPod(MPI_Comm comm, int dest, int tag, const T& msg) {
  if (MPI_Send(&msg, sizeof(T), MPI_BYTE, dest, tag, comm) != MPI_SUCCESS) {
    return AbortedError("MPI_Send to rank " + std::to_string(dest) + " failed");
  }
  return Status::Ok();
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

// One chunked two-sided transfer to or from one peer, with a bounded number
// of chunks in flight.
struct ChunkedTransfer {
  int peer = -1;
  std::byte* data = nullptr;  // send: read; receive: written
  uint64_t size = 0;
  uint64_t next = 0;  // next offset to post
  std::vector<MPI_Request> inflight;
  bool failed = false;
  bool Done() const { return next >= size && inflight.empty(); }
};

// Drives sends (or receives) on all `transfers` until each is done, fails, or
// `deadline_s` (MonotonicSeconds) passes. Failed or late transfers get
// failed = true and their requests are freed (never waited on again).
void RunChunked(MPI_Comm comm, bool send, uint64_t chunk_bytes, int max_inflight,
                std::vector<ChunkedTransfer>* transfers, double deadline_s, int sleep_us);

}  // namespace internal
}  // namespace transports
}  // namespace viper
