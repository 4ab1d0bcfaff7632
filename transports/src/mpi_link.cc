// MPI builds only (mpi_stub.cc otherwise).
#include "mpi_link.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

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

namespace {

// What KeepUntilFinalize holds, as the value of an MPI_COMM_SELF attribute.
struct KeptMemory {
  std::mutex mu;
  std::vector<std::shared_ptr<const void>> items;
};

int DeleteKeptMemory(MPI_Comm, int, void* value, void*) {
  delete static_cast<KeptMemory*>(value);  // MPI_Finalize: nothing reads it any more
  return MPI_SUCCESS;
}

// The session's KeptMemory (made on first use); nullptr outside an MPI session.
KeptMemory* SessionKeptMemory() {
  static std::mutex mu;
  static int keyval = MPI_KEYVAL_INVALID;
  std::lock_guard<std::mutex> lock(mu);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return nullptr;
  if (keyval == MPI_KEYVAL_INVALID) MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, DeleteKeptMemory, &keyval, nullptr);
  void* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_SELF, keyval, &value, &found);
  if (found) return static_cast<KeptMemory*>(value);
  auto* kept = new KeptMemory;
  MPI_Comm_set_attr(MPI_COMM_SELF, keyval, kept);
  return kept;
}

}  // namespace

void KeepUntilFinalize(std::shared_ptr<const void> memory) {
  if (!memory) return;
  KeptMemory* kept = SessionKeptMemory();
  if (kept == nullptr) return;  // no MPI session: nothing else can read it, released here
  std::lock_guard<std::mutex> lock(kept->mu);
  kept->items.push_back(std::move(memory));
}

Status SendBytesWithin(MPI_Comm comm, int dest, int tag, const void* data, std::size_t size, double timeout_s) {
  auto copy = std::make_unique<std::byte[]>(size);
  std::memcpy(copy.get(), data, size);
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Isend(copy.get(), static_cast<int>(size), MPI_BYTE, dest, tag, comm, &request) != MPI_SUCCESS) {
    return AbortedError("MPI_Isend to rank " + std::to_string(dest) + " failed");
  }
  const double deadline = MonotonicSeconds() + timeout_s;
  Backoff backoff(20);
  for (;;) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return AbortedError("MPI_Test of a send to rank " + std::to_string(dest) + " failed");
    }
    if (done) return Status::Ok();
    if (MonotonicSeconds() > deadline) break;
    backoff.Pause();
  }
  MPI_Cancel(&request);
  for (int i = 0; i < 100; ++i) {  // a cancelled send completes at once, if at all
    int done = 0;
    MPI_Status status;
    if (MPI_Test(&request, &done, &status) == MPI_SUCCESS && done) {
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      if (!cancelled) return Status::Ok();  // it went out after all
      request = MPI_REQUEST_NULL;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (request != MPI_REQUEST_NULL) {
    // MPI may still send it: the request is let go, the bytes kept.
    MPI_Request_free(&request);
    KeepUntilFinalize(std::shared_ptr<std::byte>(copy.release(), std::default_delete<std::byte[]>()));
  }
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", timeout_s);
  return AbortedError("a message to rank " + std::to_string(dest) + " was not taken within " + seconds +
                      " s (the rank is gone or stalled)");
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
