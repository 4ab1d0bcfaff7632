#include "live_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <type_traits>

#include "viper/transports/private_dir.h"
#include "viper/transports/types.h"

namespace viper {
namespace workflow {
namespace internal {
namespace {

using transports::MonotonicSeconds;

constexpr int kTagCounts = 1;    // consumer -> producer: request and swap counts
constexpr int kTagRequests = 2;  // consumer -> producer: RequestRecord[]
constexpr int kTagSwaps = 3;     // consumer -> producer: SwapRecord[]
constexpr int kTagEnd = 4;       // producer -> consumer: EndMessage
constexpr int kTagClock = 5;     // clock-alignment ping-pong
constexpr int kTagPace = 6;      // producer -> consumer: PaceMessage

struct ResultCounts {
  int64_t requests = 0;
  int64_t swaps = 0;
};

static_assert(std::is_trivially_copyable_v<RequestRecord> && std::is_trivially_copyable_v<SwapRecord> &&
              std::is_trivially_copyable_v<EndMessage> && std::is_trivially_copyable_v<PaceMessage>);

template <typename T>
void Isend(MPI_Comm comm, const T* data, std::size_t count, int to, int tag, MPI_Request* request) {
  MPI_Isend(data, static_cast<int>(count * sizeof(T)), MPI_BYTE, to, tag, comm, request);
}
template <typename T>
void Irecv(MPI_Comm comm, T* data, std::size_t count, int from, int tag, MPI_Request* request) {
  MPI_Irecv(data, static_cast<int>(count * sizeof(T)), MPI_BYTE, from, tag, comm, request);
}

// True once a message with `tag` from rank 0 is waiting.
bool Waiting(MPI_Comm comm, int tag) {
  int flag = 0;
  MPI_Iprobe(0, tag, comm, &flag, MPI_STATUS_IGNORE);
  return flag != 0;
}

}  // namespace

bool WaitRequest(MPI_Request* request, double deadline) {
  int done = 0;
  while (true) {
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (MonotonicSeconds() > deadline) {
      MPI_Cancel(request);
      MPI_Request_free(request);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

double AlignClocks(MPI_Comm comm, int rank, int size) {
  MPI_Barrier(comm);
  double base = MonotonicSeconds();
  char host[MPI_MAX_PROCESSOR_NAME] = {0}, producer_host[MPI_MAX_PROCESSOR_NAME] = {0};
  int host_len = 0;
  MPI_Get_processor_name(host, &host_len);
  if (rank == 0) std::memcpy(producer_host, host, sizeof(host));
  MPI_Bcast(producer_host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, comm);
  double producer_base = base;
  MPI_Bcast(&producer_base, 1, MPI_DOUBLE, 0, comm);
  int remote = rank != 0 && std::strcmp(host, producer_host) != 0;
  std::vector<int> remotes(static_cast<size_t>(size), 0);
  MPI_Gather(&remote, 1, MPI_INT, remotes.data(), 1, MPI_INT, 0, comm);
  constexpr int kPings = 16;
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      if (!remotes[static_cast<size_t>(r)]) continue;
      for (int k = 0; k < kPings; ++k) {
        double dummy = 0;
        MPI_Recv(&dummy, 1, MPI_DOUBLE, r, kTagClock, comm, MPI_STATUS_IGNORE);
        const double t = MonotonicSeconds() - base;
        MPI_Send(&t, 1, MPI_DOUBLE, r, kTagClock, comm);
      }
    }
    return base;
  }
  if (!remote) return producer_base;
  double best_rtt = 1e300, offset = 0;
  for (int k = 0; k < kPings; ++k) {
    const double t0 = MonotonicSeconds();
    MPI_Send(&t0, 1, MPI_DOUBLE, 0, kTagClock, comm);
    double tp = 0;
    MPI_Recv(&tp, 1, MPI_DOUBLE, 0, kTagClock, comm, MPI_STATUS_IGNORE);
    const double t1 = MonotonicSeconds();
    if (t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      offset = tp - 0.5 * (t0 + t1);  // producer-relative time = local + offset
    }
  }
  return -offset;
}

std::string ShareSessionId(MPI_Comm comm, int rank) {
  char id[64] = {0};
  if (rank == 0) {
    const std::string fresh = transports::NewSessionId();
    std::snprintf(id, sizeof(id), "%s", fresh.c_str());
  }
  MPI_Bcast(id, sizeof(id), MPI_CHAR, 0, comm);
  id[sizeof(id) - 1] = '\0';
  return id;
}

bool SendEnd(MPI_Comm comm, int rank, const EndMessage& end, double deadline) {
  MPI_Request request;
  Isend(comm, &end, 1, rank, kTagEnd, &request);
  return WaitRequest(&request, deadline);
}

StatusOr<ConsumerResults> ReceiveResults(MPI_Comm comm, int rank, double deadline) {
  const std::string who = "consumer rank " + std::to_string(rank);
  ResultCounts counts;
  MPI_Request request;
  Irecv(comm, &counts, 1, rank, kTagCounts, &request);
  if (!WaitRequest(&request, deadline)) return UnavailableError(who + ": no results in time");
  if (counts.requests < 0 || counts.swaps < 0) {
    return DataLossError(who + ": sent negative result counts");
  }
  ConsumerResults results;
  results.requests.resize(static_cast<size_t>(counts.requests));
  results.swaps.resize(static_cast<size_t>(counts.swaps));
  MPI_Request requests[2];
  Irecv(comm, results.requests.data(), results.requests.size(), rank, kTagRequests, &requests[0]);
  Irecv(comm, results.swaps.data(), results.swaps.size(), rank, kTagSwaps, &requests[1]);
  if (!WaitRequest(&requests[0], deadline) || !WaitRequest(&requests[1], deadline)) {
    return UnavailableError(who + ": results cut short");
  }
  return results;
}

std::optional<EndMessage> PollEnd(MPI_Comm comm) {
  if (!Waiting(comm, kTagEnd)) return std::nullopt;
  EndMessage end;
  MPI_Recv(&end, sizeof(end), MPI_BYTE, 0, kTagEnd, comm, MPI_STATUS_IGNORE);
  return end;
}

std::optional<EndMessage> WaitEnd(MPI_Comm comm, double deadline) {
  EndMessage end;
  MPI_Request request;
  Irecv(comm, &end, 1, 0, kTagEnd, &request);
  if (!WaitRequest(&request, deadline)) return std::nullopt;
  return end;
}

Status SendResults(MPI_Comm comm, const ConsumerResults& results, double deadline) {
  const ResultCounts counts{static_cast<int64_t>(results.requests.size()),
                            static_cast<int64_t>(results.swaps.size())};
  MPI_Request requests[3];
  Isend(comm, &counts, 1, 0, kTagCounts, &requests[0]);
  Isend(comm, results.requests.data(), results.requests.size(), 0, kTagRequests, &requests[1]);
  Isend(comm, results.swaps.data(), results.swaps.size(), 0, kTagSwaps, &requests[2]);
  for (auto& r : requests) {
    if (!WaitRequest(&r, deadline)) return AbortedError("the producer did not collect the results");
  }
  return Status::Ok();
}

void PaceAnnouncer::Announce(int64_t iteration, double seconds_per_iteration, int64_t total_iterations) {
  const double now = MonotonicSeconds();
  if (now - last_ < kPacePeriodS) return;
  last_ = now;
  Send({iteration, now - base_, seconds_per_iteration, total_iterations, 0});
}

void PaceAnnouncer::Hold(int64_t iteration, double seconds_per_iteration, int64_t total_iterations) {
  const double now = MonotonicSeconds();
  last_ = -1e300;  // the next Announce goes at once: training resumed
  Send({iteration, now - base_, seconds_per_iteration, total_iterations, 1});
}

void PaceAnnouncer::Send(const PaceMessage& m) {
  sent_.push_back(m);
  for (int r = 1; r < size_; ++r) {
    requests_.emplace_back();
    Isend(comm_, &sent_.back(), 1, r, kTagPace, &requests_.back());
  }
}

void PaceAnnouncer::Finish(double deadline) {
  for (auto& r : requests_) WaitRequest(&r, deadline);
  requests_.clear();
}

void PaceListener::Drain() {
  while (Waiting(comm_, kTagPace)) {
    previous_ = last_;
    MPI_Recv(&last_, sizeof(last_), MPI_BYTE, 0, kTagPace, comm_, MPI_STATUS_IGNORE);
    ++received_;
  }
}

int64_t PaceListener::Estimate(int64_t served_iteration, double time_s) {
  Drain();
  if (received_ == 0) return served_iteration;
  return EstimateIteration(last_, received_ >= 2 ? &previous_ : nullptr, served_iteration, time_s);
}

int64_t EstimateIteration(const PaceMessage& last, const PaceMessage* previous, int64_t served_iteration,
                          double time_s) {
  double tau = last.seconds_per_iteration;
  if (previous != nullptr && !previous->holding && last.iteration > previous->iteration &&
      last.time_s > previous->time_s) {
    tau = (last.time_s - previous->time_s) / static_cast<double>(last.iteration - previous->iteration);
  }
  double estimate = static_cast<double>(last.iteration);
  if (tau > 0 && !last.holding) estimate += std::floor(std::max(0.0, time_s - last.time_s) / tau);
  estimate = std::max(estimate, static_cast<double>(served_iteration));
  if (last.total_iterations > 0) estimate = std::min(estimate, static_cast<double>(last.total_iterations));
  return static_cast<int64_t>(estimate);
}

}  // namespace internal
}  // namespace workflow
}  // namespace viper
