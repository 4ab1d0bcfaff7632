// Internal: every message between the live roles, on the workflow's own
// communicator (a dup of MPI_COMM_WORLD). The roles call these and make no
// MPI calls of their own. Messages are small trivially-copyable structs sent
// as bytes (both ends run the same binary).
//
//   start:    AlignClocks (collective): the producer's clock at the barrier
//             is every rank's time origin; ShareSessionId (collective): the
//             run's session id.
//   training: producer -> consumers, drifting traffic only: PaceMessage
//             every kPacePeriodS after warm-up (PaceAnnouncer / PaceListener).
//   end:      producer -> each consumer: EndMessage (training over, which
//             version is the last); each consumer -> producer: its
//             ConsumerResults (requests served, versions swapped in).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"

namespace viper {
namespace workflow {
namespace internal {

constexpr double kPacePeriodS = 0.01;  // drifting traffic: seconds between pace announcements

// One request a consumer served. Times are seconds since the common origin.
struct RequestRecord {
  double time_s = 0;
  uint64_t version = 0;
  int64_t iteration = 0;           // the served version's
  double loss = 0;
  int64_t traffic_iteration = -1;  // drifting traffic: the consumer's estimate, else -1
};

// One version swapped in at a consumer.
struct SwapRecord {
  uint64_t version = 0;
  double time_s = 0;  // servable from
  double receive_s = 0;
  double verify_s = 0;
};

// What a consumer reports to the producer once training is over.
struct ConsumerResults {
  std::vector<RequestRecord> requests;
  std::vector<SwapRecord> swaps;
};

// Producer -> consumer: training is over.
struct EndMessage {
  int64_t last_version = -1;  // the last version published
  int32_t ranks_lost = 0;     // consumers the producer lost
};

// Producer -> consumers (drifting traffic): where training is.
struct PaceMessage {
  int64_t iteration = 0;
  double time_s = 0;
  double seconds_per_iteration = 0;  // the warm-up's tau
  int64_t total_iterations = 0;      // N
  // 1: training stops at `iteration` until the next message (the producer
  // validates, plans or publishes): the consumers do not extrapolate.
  int64_t holding = 0;
};

// Waits for a non-blocking request until `deadline` (monotonic seconds);
// cancels and frees it and returns false on timeout.
bool WaitRequest(MPI_Request* request, double deadline);

// Collective: each rank's time origin, in its own monotonic seconds. On the
// producer's host CLOCK_MONOTONIC is the same clock, so the producer's is
// used as is; on other hosts each consumer estimates the producer's clock
// from the fastest of a few ping-pongs (error <= half that round trip).
double AlignClocks(MPI_Comm comm, int rank, int size);

// Collective: the run's identity, drawn by the producer (rank 0) and given
// to every consumer. Each version carries it (viper-run.session) and the
// consumers serve no version without it: another run's files in the same
// directory are never served.
std::string ShareSessionId(MPI_Comm comm, int rank);

// Producer side.
bool SendEnd(MPI_Comm comm, int rank, const EndMessage& end, double deadline);
StatusOr<ConsumerResults> ReceiveResults(MPI_Comm comm, int rank, double deadline);

// Consumer side.
std::optional<EndMessage> PollEnd(MPI_Comm comm);  // never waits
std::optional<EndMessage> WaitEnd(MPI_Comm comm, double deadline);
Status SendResults(MPI_Comm comm, const ConsumerResults& results, double deadline);

// Producer: sends a PaceMessage to every consumer at most every kPacePeriodS.
class PaceAnnouncer {
 public:
  PaceAnnouncer(MPI_Comm comm, int size, double base) : comm_(comm), size_(size), base_(base) {}
  void Announce(int64_t iteration, double seconds_per_iteration, int64_t total_iterations);
  // Says, whatever the period, that training holds at `iteration` (a pause:
  // planning, a publish); the next Announce is sent at once. Without it a
  // consumer extrapolated through a re-fit or re-plan of tens of
  // milliseconds at the pace between two announcements of a fast stretch:
  // 40-50 iterations ahead on average on a 930-iteration run of 1 ms
  // iterations whose planning took three quarters of the time.
  void Hold(int64_t iteration, double seconds_per_iteration, int64_t total_iterations);
  // Waits (until `deadline`) for the sends; one a lost consumer never took is cancelled.
  void Finish(double deadline);

 private:
  void Send(const PaceMessage& m);

  MPI_Comm comm_;
  int size_ = 0;
  double base_ = 0;
  double last_ = -1e300;
  std::deque<PaceMessage> sent_;  // stable addresses while the sends are in flight
  std::vector<MPI_Request> requests_;
};

// Consumer: the producer's current iteration, estimated from its pace
// announcements: the last announced iteration plus the time since then over
// tau (between the last two announcements; the warm-up tau after the
// first or after a hold), never behind the served version, never past N;
// while the producer holds (PaceAnnouncer::Hold), the held iteration.
// PaceListener's estimate from the last announcement and the one before it
// (nullptr: none), at `time_s` on the producer's clock.
int64_t EstimateIteration(const PaceMessage& last, const PaceMessage* previous, int64_t served_iteration,
                          double time_s);

class PaceListener {
 public:
  explicit PaceListener(MPI_Comm comm) : comm_(comm) {}
  // Takes every announcement queued so far.
  void Drain();
  int64_t Estimate(int64_t served_iteration, double time_s);

 private:
  MPI_Comm comm_;
  PaceMessage last_, previous_;
  int received_ = 0;
};

}  // namespace internal
}  // namespace workflow
}  // namespace viper
