#include "viper/config.h"
#if VIPER_HAVE_MPI
#include "mpi_link.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "viper/transports/types.h"

namespace viper {
namespace transports {
namespace internal {

void NodeName(char* out, std::size_t size) {
  int len = 0;
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  MPI_Get_processor_name(name, &len);
  std::snprintf(out, size, "%s", name);
}

StatusOr<uint64_t> AgreeOnSession(MPI_Comm comm, int root) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  uint64_t session = 0;
  if (rank == root) {
    std::random_device rd;
    session = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
              static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    if (session == 0) session = 1;
  }
  if (MPI_Bcast(&session, 1, MPI_UINT64_T, root, comm) != MPI_SUCCESS) {
    return AbortedError("MPI_Bcast of the session id failed");
  }
  return session;
}

void Backoff::Pause() {
  if (++spins_ < 200) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
  }
}

void AppendChunks(std::byte* data, uint64_t size, uint64_t chunk_bytes, std::vector<Chunk>* chunks) {
  for (uint64_t off = 0; off < size; off += chunk_bytes) {
    chunks->push_back({data + off, std::min(chunk_bytes, size - off)});
  }
}

void RunChunked(MPI_Comm comm, int max_inflight, std::vector<ChunkedTransfer>* transfers, double deadline_s,
                const ChunkHooks& hooks) {
  // No sleeping while bytes move: shared-memory MPI transports progress only
  // inside MPI calls (one fragment per call), so a sleep between tests caps
  // the bandwidth. Yield only, to share the core with the peer.
  std::size_t reported = 0;  // chunks passed to hooks.completed
  // hooks.completed follows the receives when there are any.
  const bool any_receive = std::any_of(transfers->begin(), transfers->end(),
                                       [](const ChunkedTransfer& t) { return !t.send; });
  for (;;) {
    bool all_done = true;
    bool progressed = false;
    std::size_t most_completed = 0;
    for (ChunkedTransfer& t : *transfers) {
      const bool counts = !t.send || !any_receive;
      if (t.failed || t.Done()) {
        if (!t.failed && counts) most_completed = std::max(most_completed, t.completed);
        continue;
      }
      all_done = false;
      // Complete what finished, in order (messages with one tag match in order).
      while (!t.inflight.empty()) {
        int flag = 0;
        if (MPI_Test(&t.inflight.front(), &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
          t.failed = true;
          break;
        }
        if (!flag) break;
        t.inflight.erase(t.inflight.begin());
        ++t.completed;
        progressed = true;
      }
      const std::vector<Chunk>& chunks = *t.chunks;
      while (!t.failed && t.next < chunks.size() && static_cast<int>(t.inflight.size()) < max_inflight) {
        if (hooks.ready && !hooks.ready(t, t.next)) break;
        const Chunk& c = chunks[t.next];
        MPI_Request req;
        const int n = static_cast<int>(c.size);
        const int rc = t.send ? MPI_Isend(c.data, n, MPI_BYTE, t.peer, kTagData, comm, &req)
                            : MPI_Irecv(c.data, n, MPI_BYTE, t.peer, kTagData, comm, &req);
        if (rc != MPI_SUCCESS) {
          t.failed = true;
          break;
        }
        t.inflight.push_back(req);
        ++t.next;
        progressed = true;
      }
      if (t.failed) {
        for (MPI_Request& r : t.inflight) MPI_Request_free(&r);
        t.inflight.clear();
      } else if (counts) {
        most_completed = std::max(most_completed, t.completed);
      }
    }
    if (hooks.completed) {
      for (; reported < most_completed; ++reported) hooks.completed(reported);
    }
    if (all_done) return;
    if (MonotonicSeconds() > deadline_s) {
      for (ChunkedTransfer& t : *transfers) {
        if (t.Done() || t.failed) continue;
        t.failed = true;
        for (MPI_Request& r : t.inflight) {
          // A peer that never matches leaves the request pending forever; it
          // is released, not waited on (the bytes stay allocated).
          MPI_Request_free(&r);
        }
        t.inflight.clear();
      }
      return;
    }
    if (hooks.background && hooks.background()) progressed = true;
    if (!progressed) std::this_thread::yield();
  }
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
#endif  // VIPER_HAVE_MPI
