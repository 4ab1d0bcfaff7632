#include "viper/config.h"
#if VIPER_HAVE_MPI
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "mpi_link.h"
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

void RunChunked(MPI_Comm comm, bool send, uint64_t chunk_bytes, int max_inflight,
                std::vector<ChunkedTransfer>* transfers, double deadline_s, int sleep_us) {
  // No sleeping while bytes move: shared-memory MPI transports progress only
  // inside MPI calls (one fragment per call), so a sleep between tests caps
  // the bandwidth. Yield only, to share the core with the peer.
  (void)sleep_us;
  for (;;) {
    bool all_done = true;
    bool progressed = false;
    for (ChunkedTransfer& t : *transfers) {
      if (t.failed || t.Done()) continue;
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
        progressed = true;
      }
      while (!t.failed && t.next < t.size && static_cast<int>(t.inflight.size()) < max_inflight) {
        const uint64_t n = std::min(chunk_bytes, t.size - t.next);
        MPI_Request req;
        const int rc =
            send ? MPI_Isend(t.data + t.next, static_cast<int>(n), MPI_BYTE, t.peer, kTagData, comm, &req)
                 : MPI_Irecv(t.data + t.next, static_cast<int>(n), MPI_BYTE, t.peer, kTagData, comm, &req);
        if (rc != MPI_SUCCESS) {
          t.failed = true;
          break;
        }
        t.inflight.push_back(req);
        t.next += n;
        progressed = true;
      }
      if (t.failed) {
        for (MPI_Request& r : t.inflight) MPI_Request_free(&r);
        t.inflight.clear();
      }
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
    if (!progressed) std::this_thread::yield();
  }
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
#endif  // VIPER_HAVE_MPI
