// Internal (MPI builds only): sending the control messages of wire.h, and
// chunked transfers with deadlines. Every wait is a
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

#include "backoff.h"
#include "keep_until_finalize.h"
#include "wire.h"

#include "viper/core/status.h"

namespace viper {
namespace transports {
namespace internal {

// The private duplicate of MPI_COMM_WORLD of one Publisher or Subscriber
// (control.h), for the tiers that move bytes over MPI. Never freed:
// context ids must not be reused (see wire.h).
struct MpiLink {
  MPI_Comm comm = MPI_COMM_NULL;
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
