// The live consumer role (ranks 1..): subscribe, serve requests with the
// newest verified version until the producer says training is over, report.
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "live_exchange.h"
#include "live_roles.h"
#include "live_workloads.h"
#include "viper/core/log.h"
#include "viper/transports/subscriber.h"

namespace viper {
namespace workflow {
namespace internal {
namespace {

using transports::MonotonicSeconds;

class Consumer {
 public:
  Consumer(const LiveRun::Options& o, MPI_Comm comm, int rank, double base, std::string session)
      : o_(o), comm_(comm), rank_(rank), base_(base), session_(std::move(session)), pace_(comm) {}

  StatusOr<LiveRun::Summary> Run() {
    VIPER_ASSIGN_OR_RETURN(oracle_, MakeLossOracle(o_, rank_));
    VIPER_RETURN_IF_ERROR(Subscribe());
    // Only the status is kept: holding version 0 for the whole run pinned one
    // of the two landing buffers, so the third version landed in a fresh,
    // untouched one (about 2 s at 600 MB on the VM, once per run).
    const Status first = sub_->WaitForVersion(0, o_.producer_timeout_s).status();
    if (first.ok()) VIPER_RETURN_IF_ERROR(Serve());
    if (drifting_) pace_.Drain();  // pace messages still queued are taken (not left unmatched)
    const auto ss = sub_->summary();
    sub_->Stop();
    if (!end_ && !ss.producer_lost) {
      // Push: the subscription ended with the producer's goodbye; the end
      // message follows it.
      end_ = WaitEnd(comm_, MonotonicSeconds() + o_.consumer_timeout_s);
    }
    if (!end_) {
      const std::string why = first.ok() ? ss.message : first.message();
      return AbortedError(Who() + ": producer (rank 0) lost after " + std::to_string(results_.requests.size()) +
                          " requests served with the last good version: " + why);
    }
    if (!first.ok()) {
      // The producer ended the run normally but no version of it was ever
      // servable here (all refused: another run's, a wrong key): report
      // anyway, so that the producer fails the run naming this consumer
      // rather than this rank aborting the job with a "lost producer".
      Log(LogLevel::kWarning, "consumer",
          Who() + ": served no version of this run (" + first.message() + "); reporting to the producer");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      results_.swaps = swaps_;
    }
    Status sent = SendResults(comm_, results_, MonotonicSeconds() + o_.consumer_timeout_s + 30);
    if (!sent.ok()) return sent.WithContext(Who());
    return Summarize();
  }

 private:
  std::string Who() const { return "consumer rank " + std::to_string(rank_); }

  Status Subscribe() {
    transports::Subscriber::Options so;
    so.tier = o_.tier;
    so.notify = o_.notify;
    so.producer_rank = 0;
    so.producer_timeout_s = o_.producer_timeout_s;
    // Longer than the producer's peer timeout: when another consumer dies
    // mid-fan-out, the producer drops it first and then finishes this transfer.
    so.transfer_timeout_s = 2 * o_.consumer_timeout_s + 5;
    so.pfs_dir = o_.pfs_dir;
    so.session_id = session_;  // never another run's version
    so.hmac_key_file = o_.hmac_key_file;  // nor one not signed under this key
    so.poll_period_s = o_.poll_period_s;
    so.preallocate_bytes = ExpectedModelBytes(o_) + (1 << 20);
    // Swap times, on the receiving thread, from the first version on (set in
    // Create: set after it, a version 0 that arrived in between went
    // unrecorded and counted as not delivered; seen at np 5 on 2 cores).
    auto record_swap = [this](std::shared_ptr<const transports::ModelVersion> v) {
      const SwapRecord swap{v->state.metadata.version, MonotonicSeconds() - base_, v->receive_s, v->verify_s};
      std::lock_guard<std::mutex> lock(mu_);
      swaps_.push_back(swap);
    };
    VIPER_ASSIGN_OR_RETURN(sub_, transports::Subscriber::Create(so, record_swap));
    return Status::Ok();
  }

  // True once the subscription has ended, or the producer has said training
  // is over and the last version is in (polling consumers may still have to
  // find it; they give up a poll period and a timeout later).
  bool Finished() {
    if (sub_->WaitUntilDone(0)) return true;
    if (!end_) {
      end_ = PollEnd(comm_);
      if (!end_) return false;
      end_deadline_ = MonotonicSeconds() + o_.poll_period_s + o_.consumer_timeout_s;
    }
    auto cur = sub_->Current();
    return (cur && static_cast<int64_t>(cur->state.metadata.version) >= end_->last_version) ||
           MonotonicSeconds() > end_deadline_;
  }

  // One request every 1 / requests_per_s seconds, charged the loss of the
  // version current at that moment.
  Status Serve() {
    const double start = MonotonicSeconds();
    const double interval = 1.0 / o_.requests_per_s;
    auto finished = [this] { return Finished(); };
    for (int64_t q = 0;; ++q) {
      SleepUntil(start + static_cast<double>(q) * interval, finished);
      if (Finished()) return Status::Ok();
      auto cur = sub_->Current();
      RequestRecord r;
      r.time_s = MonotonicSeconds() - base_;
      r.version = cur->state.metadata.version;
      r.iteration = cur->state.metadata.iteration;
      r.traffic_iteration = drifting_ ? pace_.Estimate(r.iteration, r.time_s) : -1;
      auto loss = oracle_->Loss(*cur, q, r.traffic_iteration);
      if (!loss.ok()) return loss.status().WithContext(Who() + ": request " + std::to_string(q));
      r.loss = *loss;
      results_.requests.push_back(r);
    }
  }

  LiveRun::Summary Summarize() const {
    LiveRun::Summary s;
    s.termination = "completed";
    s.peers_lost = end_->ranks_lost > 0;
    s.requests = static_cast<int64_t>(results_.requests.size());
    for (const auto& r : results_.requests) {
      LiveRun::Request q;
      q.consumer = rank_;
      q.time_s = r.time_s;
      q.version = r.version;
      q.iteration = r.iteration;
      q.loss = r.loss;
      q.traffic_iteration = r.traffic_iteration;
      s.cil += q.loss;
      s.request_log.push_back(q);
    }
    return s;
  }

  const LiveRun::Options& o_;
  MPI_Comm comm_;
  const int rank_;
  const double base_;
  const std::string session_;  // the run's identity (ShareSessionId)
  const bool drifting_ = DriftChangesTraffic(o_);
  PaceListener pace_;
  std::unique_ptr<LossOracle> oracle_;
  std::unique_ptr<transports::Subscriber> sub_;
  std::optional<EndMessage> end_;
  double end_deadline_ = 0;
  ConsumerResults results_;          // requests, on this thread
  std::mutex mu_;
  std::vector<SwapRecord> swaps_;    // on the receiving thread
};

}  // namespace

StatusOr<LiveRun::Summary> RunConsumer(const LiveRun::Options& o, MPI_Comm comm, int rank, double base) {
  const std::string session = ShareSessionId(comm, rank);
  return Consumer(o, comm, rank, base, session).Run();
}

}  // namespace internal
}  // namespace workflow
}  // namespace viper
