// The live workflow: producer (rank 0) and consumer (ranks 1..) roles.
#include "viper/workflow/live.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "viper/core/log.h"
#include "viper/datasets/log_reader.h"
#include "viper/predictor/curve.h"
#include "viper/schedulers/solvers.h"
#include "viper/schedulers/scenario.h"
#include "viper/simulator/compare.h"
#include "viper/transports/device_memory.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"
#include "viper/workflow/fashion_mnist.h"
#include "viper/workflow/mlp.h"

namespace viper {
namespace workflow {
namespace {

using transports::MonotonicSeconds;

// Tags on the workflow's own communicator (a dup of MPI_COMM_WORLD).
constexpr int kTagCounts = 1;      // consumer -> producer: request and swap counts
constexpr int kTagRequests = 2;    // consumer -> producer: request records
constexpr int kTagVersions = 3;    // consumer -> producer: swap records
constexpr int kTagEnd = 4;         // producer -> consumer: training over, last version number
constexpr int kTagClock = 5;       // clock-alignment ping-pong
constexpr int kTagPace = 6;        // producer -> consumer (drifting traffic): iteration, time, warm-up tau, N
constexpr double kPacePeriodS = 0.01;  // drifting traffic: seconds between pace announcements
constexpr int kRequestFields = 5;  // time, version, iteration, loss, traffic iteration
constexpr int kVersionFields = 4;  // version, servable time, receive_s, verify_s

// True when the trainer's drift changes what the inference traffic costs
// (label swap, rotation); classes arriving in training do not.
bool DriftChangesTraffic(const LiveRun::Options& o) {
  return o.workload == LiveRun::Workload::kTrainer &&
         (o.trainer.drift == Trainer::Drift::kLabelSwap || o.trainer.drift == Trainer::Drift::kRotation);
}

bool Fail(std::string* error, const std::string& message) {
  if (error) *error = message;
  return false;
}

void SleepUntil(double t, const std::function<bool()>& stop) {
  while (true) {
    const double now = MonotonicSeconds();
    if (now >= t) return;
    if (stop && stop()) return;
    const double left = std::min(t - now, 0.05);
    std::this_thread::sleep_for(std::chrono::duration<double>(left));
  }
}

// Waits for a non-blocking request until `deadline` (monotonic seconds);
// cancels it and returns false on timeout.
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

// Replay model: F32 tensors of at most 256 MiB summing to `bytes` (rounded
// down to 4 bytes), filled (pre-touched) with a pattern.
ModelState MakeReplayModel(uint64_t bytes) {
  ModelState state;
  const uint64_t per = 256ull << 20;
  uint64_t left = std::max<uint64_t>(4, bytes) / 4 * 4;
  for (int k = 0; left > 0; ++k) {
    const uint64_t b = std::min(left, per);
    Tensor t = Tensor::Allocate("replay." + std::to_string(k), DType::kF32, {static_cast<int64_t>(b / 4)});
    std::memset(t.data, 0x3c + k, t.size_bytes);
    (void)state.Add(std::move(t));
    left -= b;
  }
  return state;
}

// The inference-loss metric a replay uses: validation loss when the warm-up
// has enough validation points for the predictor, else training loss. The
// producer and the consumers decide the same way from the same log.
predictor::LossMetric ChooseMetric(const TrainingLog& log, int64_t warmup, int min_points) {
  auto val = predictor::ExtractCurve(log, predictor::LossMetric::kValLoss);
  const bool enough =
      val.ok() && static_cast<int>(val->Prefix(static_cast<double>(warmup)).size()) >= min_points;
  return enough ? predictor::LossMetric::kValLoss : predictor::LossMetric::kTrainLoss;
}

struct ReplayLog {
  TrainingLog log;
  int64_t first = 0, last = 0;
};

StatusOr<ReplayLog> LoadReplayLog(const LiveRun::Options& o) {
  datasets::LogReader::Options ro;
  VIPER_ASSIGN_OR_RETURN(TrainingLog log, datasets::LogReader::ReadFile(o.log_path, ro));
  if (o.replay_max_iterations > 0) {
    auto& r = log.records;
    r.erase(std::remove_if(r.begin(), r.end(),
                           [&](const LogRecord& x) { return x.iteration > o.replay_max_iterations; }),
            r.end());
  }
  if (log.records.size() < 2) return InvalidArgumentError(o.log_path + ": fewer than 2 rows to replay");
  for (const auto& r : log.records) {
    if (!r.wall_time_s) {
      return InvalidArgumentError(o.log_path + ": iteration " + std::to_string(r.iteration) +
                                  " has no wall time (replay needs the iteration times)");
    }
  }
  ReplayLog rl;
  rl.first = log.records.front().iteration;
  rl.last = log.records.back().iteration;
  rl.log = std::move(log);
  return rl;
}

int64_t WarmupOf(const LiveRun::Options& o, int64_t first, int64_t last) {
  if (o.warmup_iterations > 0) return o.warmup_iterations;
  return first + static_cast<int64_t>(std::llround(o.warmup_fraction * static_cast<double>(last - first)));
}

// ----------------------------------------------------------------------------
// Workloads: one producer-side step interface.
class ProducerWorkload {
 public:
  virtual ~ProducerWorkload() = default;
  virtual int64_t total_iterations() const = 0;
  virtual int64_t iterations_per_epoch() const = 0;
  virtual Status Step(LogRecord* record) = 0;
  virtual const ModelState& model() const = 0;
  // The producer was blocked for `seconds` outside Step (a checkpoint stall,
  // planning): a replay shifts its remaining iterations by as much, as a real
  // training job would be delayed.
  virtual void Paused(double seconds) {}
  // The model was just published: remember it as the served version.
  virtual void Published() {}
  // The served version's loss on the current validation sample (with the
  // data as they are now); nullopt when the workload cannot re-measure it.
  virtual std::optional<double> RevalidatePublished() { return std::nullopt; }
};

class TrainerWorkload : public ProducerWorkload {
 public:
  explicit TrainerWorkload(std::unique_ptr<Trainer> t) : trainer_(std::move(t)) {}
  int64_t total_iterations() const override { return trainer_->planned_iterations(); }
  int64_t iterations_per_epoch() const override { return trainer_->iterations_per_epoch(); }
  Status Step(LogRecord* record) override { return trainer_->Step(record); }
  const ModelState& model() const override { return trainer_->model().state(); }
  void Published() override { served_ = trainer_->model().state(); }
  std::optional<double> RevalidatePublished() override {
    if (!served_) return std::nullopt;
    auto e = Evaluate(*served_, trainer_->DriftedView(trainer_->validation(), trainer_->iterations_done()));
    if (!e.ok()) return std::nullopt;
    return e->mean_loss;
  }

 private:
  std::unique_ptr<Trainer> trainer_;
  std::optional<ModelState> served_;  // a copy of the last published parameters
};

// Replays the logged iteration times (sleeping) and losses.
class ReplayWorkload : public ProducerWorkload {
 public:
  ReplayWorkload(ReplayLog log, uint64_t model_bytes, double time_scale, std::function<bool()> stop)
      : log_(std::move(log)),
        model_(MakeReplayModel(model_bytes)),
        scale_(time_scale),
        stop_(std::move(stop)) {
    const auto s = Summarize(log_.log);
    per_epoch_ = s.iterations_per_epoch ? static_cast<int64_t>(*s.iterations_per_epoch) : 0;
  }
  int64_t total_iterations() const override { return log_.last; }
  int64_t iterations_per_epoch() const override { return per_epoch_; }
  Status Step(LogRecord* record) override {
    if (next_ >= log_.log.records.size()) return FailedPreconditionError("replay: the log has ended");
    const LogRecord& r = log_.log.records[next_];
    const double logged = *r.wall_time_s * scale_;
    if (next_ == 0) {
      start_ = MonotonicSeconds() - logged;
      paused_ = 0;
    }
    SleepUntil(start_ + paused_ + logged, stop_);
    *record = r;
    record->wall_time_s = MonotonicSeconds() - start_;
    ++next_;
    return Status::Ok();
  }
  const ModelState& model() const override { return model_; }
  void Paused(double seconds) override { paused_ += seconds; }
  // Moves the replayed tensors to CUDA device 0 (the gpu tier publishes them from there).
  Status MoveModelToDevice() {
    VIPER_ASSIGN_OR_RETURN(model_, transports::CopyToDevice(model_, 0));
    return Status::Ok();
  }

 private:
  ReplayLog log_;
  ModelState model_;
  double scale_ = 1.0;
  std::function<bool()> stop_;
  size_t next_ = 0;
  double start_ = 0, paused_ = 0;
  int64_t per_epoch_ = 0;
};

// ----------------------------------------------------------------------------
// Consumer-side per-request loss.
class LossOracle {
 public:
  virtual ~LossOracle() = default;
  // `traffic_iteration`: the producer iteration whose drift the request's
  // input carries (< 0: undrifted).
  virtual double Loss(const transports::ModelVersion& version, int64_t request, int64_t traffic_iteration) = 0;
};

// Requests cycle over the trainer's test subset; drifting traffic drifts the
// one image of each request (a rotation of one image is cheap; the whole
// subset per request is not).
class TrainerLoss : public LossOracle {
 public:
  TrainerLoss(Trainer::Options trainer, Samples test, int64_t offset)
      : trainer_(std::move(trainer)), test_(std::move(test)), offset_(offset) {
    test_.GatherAll(&inputs_, &labels_);
  }
  double Loss(const transports::ModelVersion& version, int64_t request, int64_t traffic_iteration) override {
    if (!model_ || cached_version_ != version.state.metadata.version) {
      // gpu tier: the served version is in device memory; evaluate a host copy.
      StatusOr<ModelState> host = ModelState();
      if (version.memory == MemoryKind::kDevice) host = transports::CopyToHost(version.state);
      if (!host.ok()) return std::nan("");
      auto m = Mlp::FromModelState(version.memory == MemoryKind::kDevice ? *host : version.state);
      if (!m.ok()) return std::nan("");
      model_ = std::make_unique<Mlp>(std::move(*m));
      cached_version_ = version.state.metadata.version;
    }
    const int64_t n = static_cast<int64_t>(labels_.size());
    const int64_t j = (request + offset_) % n;
    Eigen::MatrixXf x;
    std::vector<int32_t> y;
    if (traffic_iteration >= 0) {
      const Samples one = DriftedSamples(trainer_, test_.Subset({j}), traffic_iteration);
      one.GatherAll(&x, &y);
    } else {
      x = inputs_.col(j);
      y = {labels_[static_cast<size_t>(j)]};
    }
    return Evaluate(*model_, x, y, 1).mean_loss;
  }

 private:
  Trainer::Options trainer_;
  Samples test_;
  Eigen::MatrixXf inputs_;
  std::vector<int32_t> labels_;
  int64_t offset_ = 0;
  std::unique_ptr<Mlp> model_;
  uint64_t cached_version_ = 0;
};

class ReplayLoss : public LossOracle {
 public:
  explicit ReplayLoss(schedulers::LossCurve curve) : curve_(std::move(curve)) {}
  double Loss(const transports::ModelVersion& version, int64_t, int64_t) override {
    const int64_t it = version.state.metadata.iteration;
    const int64_t c = std::clamp(it, curve_.first_iteration(), curve_.last_iteration());
    return curve_.at(c);
  }

 private:
  schedulers::LossCurve curve_;
};

uint64_t ExpectedModelBytes(const LiveRun::Options& o) {
  if (o.workload == LiveRun::Workload::kReplay) return o.model_bytes;
  Mlp::Options mo;
  mo.hidden_widths = o.trainer.hidden_widths;
  int64_t in = mo.input_features, total = 0;
  for (int64_t w : mo.hidden_widths) {
    total += in * w + w;
    in = w;
  }
  total += in * mo.num_classes + mo.num_classes;
  return static_cast<uint64_t>(total) * 4;
}

// ----------------------------------------------------------------------------
// Consumer role.
StatusOr<LiveRun::Summary> RunConsumer(const LiveRun::Options& o, MPI_Comm comm, int rank, double base) {
  LiveRun::Summary s;
  // The loss of a served version.
  std::unique_ptr<LossOracle> oracle;
  if (o.workload == LiveRun::Workload::kTrainer) {
    // The test subset only: disjoint from the validation subset the producer plans on.
    VIPER_ASSIGN_OR_RETURN(Trainer::EvaluationSets sets, Trainer::LoadEvaluationSets(o.trainer));
    if (sets.test.empty()) return InvalidArgumentError("consumer: the trainer's test subset is empty");
    const int64_t offset = (static_cast<int64_t>(rank) - 1) * 997 % sets.test.size();
    oracle = std::make_unique<TrainerLoss>(o.trainer, std::move(sets.test), offset);
  } else {
    VIPER_ASSIGN_OR_RETURN(ReplayLog rl, LoadReplayLog(o));
    predictor::LearningCurvePredictor::Options po;
    const auto metric = ChooseMetric(rl.log, WarmupOf(o, rl.first, rl.last), po.min_points);
    VIPER_ASSIGN_OR_RETURN(auto points, predictor::ExtractCurve(rl.log, metric));
    VIPER_ASSIGN_OR_RETURN(auto curve, schedulers::InterpolateCurve(points, rl.first, rl.last));
    oracle = std::make_unique<ReplayLoss>(std::move(curve));
  }

  transports::Subscriber::Options so;
  so.tier = o.tier;
  so.notify = o.notify;
  so.producer_rank = 0;
  so.producer_timeout_s = o.producer_timeout_s;
  // Longer than the producer's peer timeout: when another consumer dies
  // mid-fan-out, the producer drops it first and then finishes this transfer.
  so.transfer_timeout_s = 2 * o.consumer_timeout_s + 5;
  so.pfs_dir = o.pfs_dir;
  so.poll_period_s = o.poll_period_s;
  so.preallocate_bytes = ExpectedModelBytes(o) + (1 << 20);
  // Swap times, on the receiving thread, from the first version on (set in
  // Create: set after it, a version 0 that arrived in between went
  // unrecorded and counted as not delivered; seen at np 5 on 2 cores).
  std::mutex mu;
  std::vector<double> swaps;  // kVersionFields per version
  auto record_swap = [&](std::shared_ptr<const transports::ModelVersion> v) {
    const double t = MonotonicSeconds() - base;
    std::lock_guard<std::mutex> lock(mu);
    swaps.insert(swaps.end(), {static_cast<double>(v->state.metadata.version), t, v->receive_s, v->verify_s});
  };
  VIPER_ASSIGN_OR_RETURN(auto sub, transports::Subscriber::Create(so, record_swap));

  // Serve from version 0 on, until the producer says training is over (and
  // the last version is in: polling consumers may still have to find it) or
  // the subscription ends.
  // Only the status is kept: holding version 0 for the whole run pinned one
  // of the two landing buffers, so the third version landed in a fresh,
  // untouched one (about 2 s at 600 MB on the VM, once per run).
  const Status first = sub->WaitForVersion(0, o.producer_timeout_s).status();
  std::vector<double> reqs;  // kRequestFields per request
  bool end_received = false;
  double last_version = -1, end_deadline = 0;
  double end_msg[2] = {-1, 0};  // last version, ranks lost
  auto finished = [&] {
    if (sub->WaitUntilDone(0)) return true;
    if (!end_received) {
      int flag = 0;
      MPI_Iprobe(0, kTagEnd, comm, &flag, MPI_STATUS_IGNORE);
      if (!flag) return false;
      MPI_Recv(end_msg, 2, MPI_DOUBLE, 0, kTagEnd, comm, MPI_STATUS_IGNORE);
      last_version = end_msg[0];
      end_received = true;
      end_deadline = MonotonicSeconds() + o.poll_period_s + o.consumer_timeout_s;
    }
    auto cur = sub->Current();
    return (cur && static_cast<double>(cur->state.metadata.version) >= last_version) ||
           MonotonicSeconds() > end_deadline;
  };
  // Drifting traffic: the producer's current iteration, estimated from its
  // pace announcements (kTagPace: iteration, its time, warm-up tau, N; one
  // every kPacePeriodS after warm-up): the last announced iteration plus the
  // time since then over tau (between the last two announcements; the
  // warm-up tau after the first), never behind the served version, never past N.
  const bool drifting = DriftChangesTraffic(o);
  double pace[4] = {0, 0, 0, 0}, previous[4] = {0, 0, 0, 0};
  int paces = 0;
  auto receive_pace = [&] {
    if (!drifting) return;
    while (true) {
      int flag = 0;
      MPI_Iprobe(0, kTagPace, comm, &flag, MPI_STATUS_IGNORE);
      if (!flag) return;
      std::copy(pace, pace + 4, previous);
      MPI_Recv(pace, 4, MPI_DOUBLE, 0, kTagPace, comm, MPI_STATUS_IGNORE);
      ++paces;
    }
  };
  auto traffic_iteration = [&](const transports::ModelVersion& v, double t) -> int64_t {
    if (!drifting) return -1;
    receive_pace();
    const double ik = static_cast<double>(v.state.metadata.iteration);
    if (paces == 0) return static_cast<int64_t>(ik);
    double tau = pace[2];
    if (paces >= 2 && pace[0] > previous[0] && pace[1] > previous[1]) {
      tau = (pace[1] - previous[1]) / (pace[0] - previous[0]);
    }
    double est = pace[0];
    if (tau > 0) est += std::floor(std::max(0.0, t - pace[1]) / tau);
    est = std::max(est, ik);
    if (pace[3] > 0) est = std::min(est, pace[3]);
    return static_cast<int64_t>(est);
  };
  if (first.ok()) {
    const double start = MonotonicSeconds();
    const double interval = 1.0 / o.requests_per_s;
    for (int64_t q = 0;; ++q) {
      SleepUntil(start + static_cast<double>(q) * interval, finished);
      if (finished()) break;
      auto cur = sub->Current();
      const double t = MonotonicSeconds() - base;
      const int64_t ti = traffic_iteration(*cur, t);
      const double loss = oracle->Loss(*cur, q, ti);
      reqs.insert(reqs.end(), {t, static_cast<double>(cur->state.metadata.version),
                               static_cast<double>(cur->state.metadata.iteration), loss,
                               static_cast<double>(ti)});
    }
  }
  receive_pace();  // pace messages still queued are taken (not left unmatched)
  const auto ss = sub->summary();
  sub->Stop();
  if (!end_received && !ss.producer_lost) {
    // Push: the subscription ended with the producer's goodbye; the end
    // message follows it.
    MPI_Request er;
    MPI_Irecv(end_msg, 2, MPI_DOUBLE, 0, kTagEnd, comm, &er);
    end_received = WaitRequest(&er, MonotonicSeconds() + o.consumer_timeout_s);
    last_version = end_msg[0];
  }
  if (!first.ok() || !end_received) {
    std::string why = first.ok() ? ss.message : first.message();
    return AbortedError("consumer rank " + std::to_string(rank) + ": producer (rank 0) lost after " +
                        std::to_string(reqs.size() / kRequestFields) +
                        " requests served with the last good version: " + why);
  }
  // Report to the producer.
  std::vector<double> sw;
  {
    std::lock_guard<std::mutex> lock(mu);
    sw = swaps;
  }
  int64_t counts[2] = {static_cast<int64_t>(reqs.size() / kRequestFields),
                       static_cast<int64_t>(sw.size() / kVersionFields)};
  const double deadline = MonotonicSeconds() + o.consumer_timeout_s + 30;
  MPI_Request r[3];
  MPI_Isend(counts, 2, MPI_INT64_T, 0, kTagCounts, comm, &r[0]);
  MPI_Isend(reqs.data(), static_cast<int>(reqs.size()), MPI_DOUBLE, 0, kTagRequests, comm, &r[1]);
  MPI_Isend(sw.data(), static_cast<int>(sw.size()), MPI_DOUBLE, 0, kTagVersions, comm, &r[2]);
  for (auto& x : r) {
    if (!WaitRequest(&x, deadline)) {
      return AbortedError("consumer rank " + std::to_string(rank) +
                          ": the producer did not collect the results");
    }
  }
  s.termination = "completed";
  s.peers_lost = end_msg[1] > 0;
  s.requests = counts[0];
  for (size_t i = 0; i + kRequestFields <= reqs.size(); i += kRequestFields) {
    LiveRun::Request q;
    q.consumer = rank;
    q.time_s = reqs[i];
    q.version = static_cast<uint64_t>(reqs[i + 1]);
    q.iteration = static_cast<int64_t>(reqs[i + 2]);
    q.loss = reqs[i + 3];
    q.traffic_iteration = static_cast<int64_t>(reqs[i + 4]);
    s.cil += q.loss;
    s.request_log.push_back(q);
  }
  return s;
}

// ----------------------------------------------------------------------------
// Producer role.
struct Published {
  uint64_t version = 0;
  int64_t iteration = 0;
  double start_s = 0;  // relative to base
  transports::Publisher::VersionReport report;
};

StatusOr<LiveRun::Summary> RunProducer(const LiveRun::Options& o, MPI_Comm comm, int size, double base) {
  LiveRun::Summary s;
  s.workload = LiveRun::ToString(o.workload);
  s.tier = transports::ToString(o.tier);
  s.mode = transports::ToString(o.mode);
  s.notify = transports::ToString(o.notify);
  s.fanout = transports::ToString(o.fanout);
  s.host_protocol = transports::ToString(o.host_protocol);
  s.strategy = schedulers::ToString(o.strategy);
  s.consumers = size - 1;
  auto log = [&](const std::string& line) {
    if (o.verbose) Log(LogLevel::kInfo, "producer", line);
  };
  auto stop = [&] { return o.should_stop && o.should_stop(); };

  std::unique_ptr<ProducerWorkload> work;
  int64_t first_iteration = 1;
  if (o.workload == LiveRun::Workload::kTrainer) {
    Trainer::Options to = o.trainer;
    to.log_test = false;  // the consumers measure the truth on the test subset
    VIPER_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(to));
    work = std::make_unique<TrainerWorkload>(std::move(trainer));
  } else {
    VIPER_ASSIGN_OR_RETURN(ReplayLog rl, LoadReplayLog(o));
    first_iteration = rl.first;
    auto replay =
        std::make_unique<ReplayWorkload>(std::move(rl), o.model_bytes, o.replay_time_scale, o.should_stop);
    if (o.tier == transports::Tier::kGpu) VIPER_RETURN_IF_ERROR(replay->MoveModelToDevice());
    work = std::move(replay);
  }
  const int64_t N = work->total_iterations();
  const int64_t W = WarmupOf(o, first_iteration, N);
  if (W < first_iteration || W >= N) {
    return InvalidArgumentError("warm-up " + std::to_string(W) + " must lie in [" +
                                std::to_string(first_iteration) + ", " + std::to_string(N) + ")");
  }
  s.warmup_iterations = W;
  s.total_iterations = N;

  transports::Publisher::Options po;
  po.tier = o.tier;
  po.mode = o.mode;
  po.notify = o.notify;
  po.fanout = o.fanout;
  po.host_protocol = o.host_protocol;
  po.peer_timeout_s = o.consumer_timeout_s;
  po.pfs_dir = o.pfs_dir;
  po.staging_bytes = ExpectedModelBytes(o) + (1 << 20);
  VIPER_ASSIGN_OR_RETURN(auto pub, transports::Publisher::Create(po));

  // Warm-up.
  LogRecord rec;
  double t_step0 = MonotonicSeconds();
  int64_t it = 0;
  // Drifting traffic: when each iteration ended (seconds since base), to
  // judge the consumers' estimates of the producer's iteration.
  const bool drifting = DriftChangesTraffic(o);
  std::vector<std::pair<double, int64_t>> timeline;
  while (it < W && !stop()) {
    VIPER_RETURN_IF_ERROR(work->Step(&rec));
    it = rec.iteration;
    s.log.records.push_back(rec);
    if (drifting) timeline.emplace_back(MonotonicSeconds() - base, it);
  }
  const double t_warm = MonotonicSeconds() - base;  // the time origin of the Summary
  s.seconds_per_iteration =
      (MonotonicSeconds() - t_step0) / static_cast<double>(std::max<int64_t>(1, it - first_iteration + 1));
  std::vector<Published> published;
  auto publish = [&](int64_t iteration) -> Status {
    Published p;
    p.iteration = iteration;
    p.start_s = MonotonicSeconds() - base - t_warm;
    const double t0 = MonotonicSeconds();
    VIPER_ASSIGN_OR_RETURN(p.report, pub->Publish(work->model(), iteration));
    work->Published();
    work->Paused(MonotonicSeconds() - t0);
    p.version = p.report.version;
    published.push_back(p);
    return Status::Ok();
  };
  VIPER_RETURN_IF_ERROR(publish(W));
  VIPER_RETURN_IF_ERROR(pub->Flush());
  // Measured cost of version 0: sigma = its stall, delta = the slowest
  // consumer's servable time when acknowledged, else snapshot + transfer
  // (+ half a poll period when polling).
  {
    auto reports = pub->Reports();
    const auto& r0 = reports.front();
    double servable = 0;
    for (const auto& c : r0.consumers) servable = std::max(servable, c.servable_s);
    double delta = servable > 0 ? servable : r0.snapshot_s + r0.transfer_s + r0.notify_s;
    if (o.notify == transports::Notify::kPoll) delta += 0.5 * o.poll_period_s;
    s.planned_stall_s = r0.stall_s;
    s.planned_delay_s = std::max(delta, r0.stall_s);
  }
  // Drifting traffic: the producer announces its iteration to the consumers
  // (kTagPace) at the end of warm-up and every kPacePeriodS after.
  std::deque<std::array<double, 4>> pace_sent;
  std::vector<MPI_Request> pace_requests;
  double last_pace = -1e300;
  auto announce = [&](int64_t iteration) {
    const double now = MonotonicSeconds();
    if (!drifting || now - last_pace < kPacePeriodS) return;
    last_pace = now;
    pace_sent.push_back({static_cast<double>(iteration), now - base, s.seconds_per_iteration, static_cast<double>(N)});
    for (int r = 1; r < size; ++r) {
      pace_requests.emplace_back();
      MPI_Isend(pace_sent.back().data(), 4, MPI_DOUBLE, r, kTagPace, comm, &pace_requests.back());
    }
  };
  announce(W);
  log("warm-up done: W=" + std::to_string(W) + " of N=" + std::to_string(N) + ", tau " +
      std::to_string(s.seconds_per_iteration * 1e3) + " ms, version 0 stall " +
      std::to_string(s.planned_stall_s * 1e3) + " ms, delay " + std::to_string(s.planned_delay_s * 1e3) +
      " ms");

  // Plan from the warm-up.
  const double t_plan0 = MonotonicSeconds();
  schedulers::ScenarioOptions sco;
  sco.warmup_iterations = W;
  sco.total_iterations = N;
  sco.seconds_per_iteration = s.seconds_per_iteration;
  sco.log_iteration_times = false;
  sco.request_interval_s = 1.0 / o.requests_per_s;
  sco.metric = ChooseMetric(s.log, W, sco.predictor.min_points);
  sco.tier.model_size_bytes = 1.0;
  sco.tier.snapshot_latency_s = s.planned_stall_s;
  sco.tier.transfer_latency_s = 0;
  sco.tier.load_latency_s = s.planned_delay_s - s.planned_stall_s;
  sco.tier.snapshot_bandwidth_bytes_per_s = sco.tier.transfer_bandwidth_bytes_per_s =
      sco.tier.load_bandwidth_bytes_per_s = 1e300;
  sco.tier.synchronous = false;
  TrainingLog warm = s.log;
  warm.source = "live warm-up";
  VIPER_ASSIGN_OR_RETURN(schedulers::Scenario sc, schedulers::MakeScenario(warm, sco));
  sc.iterations_per_epoch = work->iterations_per_epoch();
  s.metric = predictor::ToString(sc.metric);
  schedulers::Schedule plan;
  std::unique_ptr<schedulers::OnlinePlanner> online;
  std::optional<int64_t> next;
  // What the closed loop observes: every training loss and, as its planning
  // metric, the validation loss when the warm-up has enough of it.
  const auto metric_kind = sc.metric == predictor::LossMetric::kValLoss ? schedulers::ObservationKind::kValidation
                                                                         : schedulers::ObservationKind::kTraining;
  auto observe = [&](const LogRecord& r) -> Status {
    if (r.train_loss) VIPER_RETURN_IF_ERROR(online->Observe(r.iteration, *r.train_loss, schedulers::ObservationKind::kTraining));
    if (r.val_loss) VIPER_RETURN_IF_ERROR(online->Observe(r.iteration, *r.val_loss, schedulers::ObservationKind::kValidation));
    return Status::Ok();
  };
  if (o.strategy == schedulers::StrategyKind::kOnline) {
    schedulers::OnlinePlanner::Options oo;
    oo.metric = metric_kind;
    online = std::make_unique<schedulers::OnlinePlanner>(
        sc.problem, schedulers::PredictorForecasterFactory(sc.predictor_options), oo);
    for (const auto& r : s.log.records) VIPER_RETURN_IF_ERROR(observe(r));
    s.plan_report = "online: closed loop from iteration " + std::to_string(W);
  } else {
    VIPER_ASSIGN_OR_RETURN(auto p, schedulers::PlanStrategy(sc, o.strategy));
    plan = p.schedule;
    s.plan_report = p.summary.BriefReport();
    if (!plan.empty()) next = plan.front();
  }
  s.planning_s = MonotonicSeconds() - t_plan0;
  work->Paused(s.planning_s);
  log("plan: " + s.plan_report + " (" + predictor::ToString(sc.metric) + ", " + sc.predictor_report + ")");

  int64_t revalidations = 0;  // served version re-measured for the gate
  // Train and publish at the planned iterations.
  size_t plan_index = 0;
  while (it < N && !stop()) {
    VIPER_RETURN_IF_ERROR(work->Step(&rec));
    it = rec.iteration;
    s.log.records.push_back(rec);
    if (drifting) {
      timeline.emplace_back(MonotonicSeconds() - base, it);
      announce(it);
    }
    bool checkpoint = next && it >= *next;
    if (online) {
      const double t0 = MonotonicSeconds();
      VIPER_RETURN_IF_ERROR(observe(rec));
      // The gate compares with the served version's loss as measured when it
      // was published. When the current model measures no better than that,
      // either it regressed or the data changed under both: re-measure the
      // served version on today's validation sample (its time is a stall).
      // (Re-measuring whenever the gate would refuse cost 28 extra
      // validations in a 38-point run without drift and gained ~2% under
      // rotation: not worth it.)
      if (rec.val_loss && online->served_loss() && *rec.val_loss >= *online->served_loss()) {
        if (auto served = work->RevalidatePublished()) {
          VIPER_RETURN_IF_ERROR(online->ObserveServed(*served));
          ++revalidations;
        }
      }
      VIPER_ASSIGN_OR_RETURN(checkpoint, online->ShouldCheckpoint(it));
      s.planning_s += MonotonicSeconds() - t0;
      work->Paused(MonotonicSeconds() - t0);
    }
    if (checkpoint) {
      VIPER_RETURN_IF_ERROR(publish(it));
      s.schedule.push_back(it);
      if (online) {
        VIPER_RETURN_IF_ERROR(online->Commit(it));
      } else {
        while (plan_index < plan.size() && plan[plan_index] <= it) ++plan_index;
        next = plan_index < plan.size() ? std::optional<int64_t>(plan[plan_index]) : std::nullopt;
      }
      if (o.verbose && published.back().version % 10 == 0) {
        log("published version " + std::to_string(published.back().version) + " at iteration " +
            std::to_string(it));
      }
    }
  }
  if (online) {
    s.plan_report = online->summary().BriefReport(static_cast<int64_t>(online->taken().size())) + ", served version re-measured " +
                    std::to_string(revalidations) + "x";
  }
  s.iterations_done = it;
  s.training_end_s = MonotonicSeconds() - base - t_warm;
  s.termination = stop() ? "interrupted" : "completed";
  VIPER_RETURN_IF_ERROR(pub->Close());
  const auto reports = pub->Reports();
  const auto psum = pub->summary();
  s.lost_consumers = psum.lost_consumers;
  log("training done at " + std::to_string(s.training_end_s) + " s; " + psum.BriefReport());

  // Pace announcements: small (sent eagerly); one a lost consumer never
  // took is cancelled.
  const double pace_deadline = MonotonicSeconds() + 1.0;
  for (auto& pr : pace_requests) WaitRequest(&pr, pace_deadline);
  // Tell the consumers training is over and which version is the last.
  const double end_msg[2] = {published.empty() ? 0.0 : static_cast<double>(published.back().version),
                             static_cast<double>(s.lost_consumers.size())};
  for (int r = 1; r < size; ++r) {
    if (std::find(s.lost_consumers.begin(), s.lost_consumers.end(), r) != s.lost_consumers.end()) continue;
    MPI_Request er;
    MPI_Isend(end_msg, 2, MPI_DOUBLE, r, kTagEnd, comm, &er);
    if (!WaitRequest(&er, MonotonicSeconds() + o.consumer_timeout_s)) s.lost_consumers.push_back(r);
  }
  // Collect the consumers' records (times relative to the barrier at start;
  // the Summary's origin is the end of warm-up).
  std::map<int, std::vector<double>> reqs, swaps;
  for (int r = 1; r < size; ++r) {
    if (std::find(s.lost_consumers.begin(), s.lost_consumers.end(), r) != s.lost_consumers.end()) continue;
    const double deadline = MonotonicSeconds() + o.consumer_timeout_s + o.poll_period_s + 10;
    int64_t counts[2] = {0, 0};
    MPI_Request q;
    MPI_Irecv(counts, 2, MPI_INT64_T, r, kTagCounts, comm, &q);
    if (!WaitRequest(&q, deadline)) {
      s.lost_consumers.push_back(r);
      continue;
    }
    auto& rq = reqs[r];
    auto& sw = swaps[r];
    rq.resize(static_cast<size_t>(counts[0]) * kRequestFields);
    sw.resize(static_cast<size_t>(counts[1]) * kVersionFields);
    MPI_Request q2[2];
    MPI_Irecv(rq.data(), static_cast<int>(rq.size()), MPI_DOUBLE, r, kTagRequests, comm, &q2[0]);
    MPI_Irecv(sw.data(), static_cast<int>(sw.size()), MPI_DOUBLE, r, kTagVersions, comm, &q2[1]);
    if (!WaitRequest(&q2[0], deadline) || !WaitRequest(&q2[1], deadline)) {
      s.lost_consumers.push_back(r);
      reqs.erase(r);
      swaps.erase(r);
    }
  }
  std::sort(s.lost_consumers.begin(), s.lost_consumers.end());
  s.lost_consumers.erase(std::unique(s.lost_consumers.begin(), s.lost_consumers.end()),
                         s.lost_consumers.end());

  // Versions.
  std::map<uint64_t, size_t> index;
  for (const auto& p : published) {
    LiveRun::VersionStats v;
    v.version = p.version;
    v.iteration = p.iteration;
    v.checkpoint_s = p.version == 0 ? 0.0 : p.start_s;
    v.stall_s = p.report.stall_s;
    for (const auto& r : reports) {
      if (r.version == p.version) {
        v.snapshot_s = r.snapshot_s;
        v.transfer_s = r.transfer_s;
        v.notify_s = r.notify_s;
        v.superseded = r.superseded;
        v.bytes = r.bytes;
      }
    }
    if (p.version > 0) s.total_stall_s += v.stall_s;
    index[v.version] = s.versions.size();
    s.versions.push_back(v);
  }
  // Servable times per consumer: relative to warm-up end.
  std::map<uint64_t, double> start_of;  // version -> T_k (version 0: its actual publish start)
  for (const auto& p : published) start_of[p.version] = p.start_s;
  for (auto& [rank, sw] : swaps) {
    for (size_t i = 0; i + kVersionFields <= sw.size(); i += kVersionFields) {
      const uint64_t ver = static_cast<uint64_t>(sw[i]);
      auto f = index.find(ver);
      if (f == index.end()) continue;
      auto& v = s.versions[f->second];
      const double lat = sw[i + 1] - t_warm - start_of[ver];
      const double load = sw[i + 2] + sw[i + 3];
      v.delivered_to += 1;
      v.update_latency_s += lat;
      v.max_update_latency_s = std::max(v.max_update_latency_s, lat);
      v.load_s += load;
      const double sent = o.mode == transports::Mode::kSync ? v.stall_s : v.snapshot_s + v.transfer_s;
      v.discovery_s += std::max(0.0, lat - sent - load);
    }
  }
  const int reporting = static_cast<int>(swaps.size());
  double lat_sum = 0;
  int lat_n = 0;
  s.every_version_delivered = reporting == s.consumers;
  for (auto& v : s.versions) {
    if (v.delivered_to > 0) {
      v.update_latency_s /= v.delivered_to;
      v.load_s /= v.delivered_to;
      v.discovery_s /= v.delivered_to;
      if (v.version > 0) {
        lat_sum += v.update_latency_s;
        ++lat_n;
      }
    }
    if (!v.superseded && v.delivered_to < reporting) s.every_version_delivered = false;
  }
  if (lat_n > 0) s.mean_update_latency_s = lat_sum / lat_n;

  // Requests in the window [0, training end].
  double stale_sum = 0, bias_sum = 0, abs_sum = 0;
  int64_t judged = 0;
  for (auto& [rank, rq] : reqs) {
    for (size_t i = 0; i + kRequestFields <= rq.size(); i += kRequestFields) {
      LiveRun::Request q;
      q.consumer = rank;
      q.time_s = rq[i] - t_warm;
      if (q.time_s > s.training_end_s) continue;
      q.version = static_cast<uint64_t>(rq[i + 1]);
      q.iteration = static_cast<int64_t>(rq[i + 2]);
      q.loss = rq[i + 3];
      q.traffic_iteration = static_cast<int64_t>(rq[i + 4]);
      if (q.traffic_iteration >= 0 && !timeline.empty()) {
        // Iterations done at the request's time (base-relative: rq[i]).
        auto e = std::upper_bound(timeline.begin(), timeline.end(), std::make_pair(rq[i], std::numeric_limits<int64_t>::max()));
        q.true_iteration = e == timeline.begin() ? first_iteration - 1 : std::prev(e)->second;
        const double d = static_cast<double>(q.traffic_iteration - q.true_iteration);
        bias_sum += d;
        abs_sum += std::fabs(d);
        ++judged;
      }
      auto f = index.find(q.version);
      const double tk = f == index.end() ? 0.0 : s.versions[f->second].checkpoint_s;
      q.staleness_s = q.time_s - tk;
      stale_sum += q.staleness_s;
      s.cil += q.loss;
      if (f != index.end()) {
        s.versions[f->second].requests += 1;
        s.versions[f->second].loss_sum += q.loss;
      }
      s.request_log.push_back(q);
    }
  }
  s.requests = static_cast<int64_t>(s.request_log.size());
  if (s.requests > 0) s.mean_staleness_s = stale_sum / static_cast<double>(s.requests);
  if (judged > 0) {
    s.traffic_iteration_bias = bias_sum / static_cast<double>(judged);
    s.traffic_iteration_mae = abs_sum / static_cast<double>(judged);
  }
  s.cil_per_consumer = reporting > 0 ? s.cil / reporting : 0;
  s.no_checkpoint_training_s = s.training_end_s - s.total_stall_s - s.planning_s;
  s.slowdown_fraction = s.no_checkpoint_training_s > 0 ? s.total_stall_s / s.no_checkpoint_training_s : 0;
  s.peers_lost = !s.lost_consumers.empty();
  if (!s.lost_consumers.empty()) {
    s.message = "lost consumer(s):";
    for (int r : s.lost_consumers) s.message += " rank " + std::to_string(r);
    s.message += "; their requests are not counted";
  }
  s.log.source = "live run (producer)";
  return s;
}

}  // namespace

const char* LiveRun::ToString(Workload workload) {
  return workload == Workload::kTrainer ? "trainer" : "replay";
}

StatusOr<LiveRun::Workload> LiveRun::WorkloadFromString(const std::string& name) {
  if (name == "trainer") return Workload::kTrainer;
  if (name == "replay") return Workload::kReplay;
  return InvalidArgumentError("unknown workload '" + name + "' (expected trainer or replay)");
}

Trainer::Options LiveRun::DefaultTrainerOptions() {
  Trainer::Options o;
  o.epochs = 10;
  return o;
}

bool LiveRun::Options::IsValid(std::string* error) const {
  if (strategy == schedulers::StrategyKind::kOracle) {
    return Fail(error, "strategy: oracle needs the future curve; a live run cannot use it");
  }
  if (notify == transports::Notify::kPoll && tier != transports::Tier::kPfs) {
    return Fail(error, "notify: poll needs tier pfs (consumers scan the PFS directory)");
  }
  if (tier == transports::Tier::kPfs && pfs_dir.empty())
    return Fail(error, "pfs_dir: required with tier pfs");
  if (fanout == transports::Fanout::kTree && tier != transports::Tier::kHost) {
    return Fail(error, "fanout: tree needs tier host (consumers relay MPI messages)");
  }
  if (host_protocol == transports::HostProtocol::kOneSided) {
    return Fail(error, "host_protocol: a live run takes shm or two-sided");
  }
  if (!(poll_period_s > 0)) return Fail(error, "poll_period_s must be > 0");
  if (!(requests_per_s > 0)) return Fail(error, "requests_per_s must be > 0");
  if (warmup_iterations < 0) return Fail(error, "warmup_iterations must be >= 0");
  if (!(warmup_fraction > 0 && warmup_fraction < 1)) return Fail(error, "warmup_fraction must be in (0, 1)");
  if (workload == Workload::kReplay) {
    if (log_path.empty()) return Fail(error, "log_path: required with workload replay");
    if (model_bytes < 4) return Fail(error, "model_bytes must be >= 4");
    if (!(replay_time_scale > 0)) return Fail(error, "replay_time_scale must be > 0");
    if (replay_max_iterations < 0) return Fail(error, "replay_max_iterations must be >= 0");
  } else {
    if (!trainer.IsValid(error)) {
      if (error) *error = "trainer." + *error;
      return false;
    }
    if (trainer.test_samples <= 0) {
      return Fail(error, "trainer.test_samples must be > 0: the consumers answer requests from the test subset");
    }
    if (trainer.drift != Trainer::Drift::kNone) {
      // N as Trainer::Create will plan it (train_samples 0 = all 60,000 images).
      const int64_t pool = trainer.train_samples > 0 ? trainer.train_samples : kFashionMnistTrainImages;
      int64_t n = trainer.epochs * (pool / trainer.batch_size);
      if (trainer.max_iterations > 0) n = std::min(n, trainer.max_iterations);
      if (trainer.drift_at_iteration > n) {
        return Fail(error, "trainer.drift_at_iteration (" + std::to_string(trainer.drift_at_iteration) +
                               ") is after the run's last iteration (" + std::to_string(n) +
                               "): the drift would never happen");
      }
    }
  }
  if (workload == Workload::kReplay && trainer.drift != Trainer::Drift::kNone) {
    return Fail(error, "trainer.drift: a replay has no trainer to drift (the log's losses are replayed as recorded)");
  }
  if (!(producer_timeout_s > 0)) return Fail(error, "producer_timeout_s must be > 0");
  if (!(consumer_timeout_s > 0)) return Fail(error, "consumer_timeout_s must be > 0");
  return true;
}

StatusOr<LiveRun::Summary> LiveRun::Run(const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("live run: " + error);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return FailedPreconditionError("live run: MPI is not initialised (use transports::MpiSession)");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2)
    return InvalidArgumentError("live run: needs at least 2 MPI ranks (rank 0 produces, the others serve)");
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  // Clock alignment: the producer's clock at the barrier is the common base.
  // On the producer's host CLOCK_MONOTONIC is the same clock, so its base is
  // used as is; on other hosts each consumer estimates the producer's clock
  // from the fastest of a few ping-pongs (error <= half that round trip).
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
  } else if (!remote) {
    base = producer_base;
  } else {
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
    base = -offset;
  }
  auto result = rank == 0 ? RunProducer(options, comm, size, base) : RunConsumer(options, comm, rank, base);
  // Not freed collectively: a lost peer would hang MPI_Comm_free.
  return result;
}

// ----------------------------------------------------------------------------
// Output.

std::string LiveRun::Summary::BriefReport() const {
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "%s over %s%s%s/%s/%s (%s): %zu versions to %d consumer(s), CIL %.1f (%.1f per consumer) over %lld "
      "requests, update latency %.2f ms, stall %.3f s (%.2f%% slowdown), %s",
      strategy.c_str(), tier.c_str(), tier == "host" ? " " : "", tier == "host" ? host_protocol.c_str() : "",
      mode.c_str(), notify.c_str(), workload.c_str(), versions.size(),
      consumers, cil, cil_per_consumer, static_cast<long long>(requests),
      mean_update_latency_s.value_or(0) * 1e3, total_stall_s, slowdown_fraction * 100, termination.c_str());
  return buf;
}

std::string LiveRun::Summary::RequestCsv() const {
  std::string out = "consumer,time_s,version,iteration,loss,staleness_s\n";
  char buf[160];
  for (const auto& q : request_log) {
    std::snprintf(buf, sizeof(buf), "%d,%.6f,%llu,%lld,%.9g,%.6f\n", q.consumer, q.time_s,
                  static_cast<unsigned long long>(q.version), static_cast<long long>(q.iteration), q.loss,
                  q.staleness_s);
    out += buf;
  }
  return out;
}

std::string LiveRun::Summary::ChromeTrace() const {
  // Trace-event format, microseconds; pid 0 = producer side, pid r = consumer r.
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  char buf[320];
  auto add = [&](const char* name, int pid, int tid, double ts_s, double dur_s, const std::string& args) {
    std::snprintf(
        buf, sizeof(buf),
        "%s{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f,\"args\":{%s}}",
        first ? "" : ",\n", name, pid, tid, ts_s * 1e6, std::max(0.0, dur_s) * 1e6, args.c_str());
    out += buf;
    first = false;
  };
  auto meta = [&](int pid, int tid, const std::string& name) {
    std::snprintf(
        buf, sizeof(buf),
        "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
        first ? "" : ",\n", pid, tid, name.c_str());
    out += buf;
    first = false;
  };
  meta(0, 0, "producer");
  meta(0, 1, "transfer");
  meta(0, 2, "notification");
  add("train", 0, 0, 0, training_end_s, "");
  for (const auto& v : versions) {
    const std::string a =
        "\"version\":" + std::to_string(v.version) + ",\"iteration\":" + std::to_string(v.iteration);
    add("stall", 0, 0, v.checkpoint_s, v.stall_s, a);
    add("snapshot+transfer", 0, 1, v.checkpoint_s, v.snapshot_s + v.transfer_s, a);
    if (v.delivered_to > 0) {
      add("discovery+load", 0, 2, v.checkpoint_s + v.update_latency_s - v.discovery_s - v.load_s,
          v.discovery_s + v.load_s, a);
    }
  }
  // Consumer tracks: serving spans per version, from the request log.
  std::map<int, std::vector<const Request*>> by;
  for (const auto& q : request_log) by[q.consumer].push_back(&q);
  for (const auto& [rank, qs] : by) {
    meta(rank, 0, "consumer " + std::to_string(rank));
    size_t i = 0;
    while (i < qs.size()) {
      size_t j = i;
      while (j + 1 < qs.size() && qs[j + 1]->version == qs[i]->version) ++j;
      add(("serve v" + std::to_string(qs[i]->version)).c_str(), rank, 0, qs[i]->time_s,
          qs[j]->time_s - qs[i]->time_s, "\"requests\":" + std::to_string(j - i + 1));
      i = j + 1;
    }
  }
  out += "\n]}\n";
  return out;
}

std::string LiveSimulationComparison::BriefReport() const {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "CIL per consumer: simulated %.2f, measured %.2f (%+.1f%%); requests %.0f vs %.0f",
                predicted_cil_per_consumer, measured_cil_per_consumer, cil_error * 100, predicted_requests,
                measured_requests_per_consumer);
  return buf;
}

StatusOr<LiveSimulationComparison> CompareWithSimulation(const LiveRun::Summary& s,
                                                         const LiveRun::Options& o) {
  if (s.log.records.empty() || s.versions.empty())
    return FailedPreconditionError("no producer results to compare");
  schedulers::ScenarioOptions sco;
  sco.warmup_iterations = s.warmup_iterations;
  sco.total_iterations = s.iterations_done;
  sco.log_iteration_times = true;
  sco.request_interval_s = 1.0 / o.requests_per_s;
  sco.metric = s.metric == "val_loss" ? predictor::LossMetric::kValLoss : predictor::LossMetric::kTrainLoss;
  // Measured costs: mean stall of versions >= 1 (or version 0's), mean update latency.
  double stall = 0, n = 0;
  for (const auto& v : s.versions) {
    if (v.version > 0) {
      stall += v.stall_s;
      n += 1;
    }
  }
  stall = n > 0 ? stall / n : s.versions.front().stall_s;
  const double delay = std::max(stall, s.mean_update_latency_s.value_or(s.planned_delay_s));
  sco.tier.model_size_bytes = 1.0;
  sco.tier.snapshot_latency_s = stall;
  sco.tier.load_latency_s = delay - stall;
  sco.tier.snapshot_bandwidth_bytes_per_s = sco.tier.transfer_bandwidth_bytes_per_s =
      sco.tier.load_bandwidth_bytes_per_s = 1e300;
  sco.tier.synchronous = false;
  // The log's wall times include the stalls; the simulator adds its own, so
  // take them out of the iteration times.
  TrainingLog log = s.log;
  double removed = 0;
  size_t vi = 1;
  for (auto& r : log.records) {
    while (vi < s.versions.size() && s.versions[vi].iteration < r.iteration) {
      removed += s.versions[vi].stall_s;
      ++vi;
    }
    if (r.wall_time_s) r.wall_time_s = *r.wall_time_s - removed;
  }
  log.source = "live run log";
  VIPER_ASSIGN_OR_RETURN(schedulers::Scenario sc, schedulers::MakeScenario(log, sco));
  if (!sc.truth) return FailedPreconditionError("the live log does not cover N");
  auto so = simulator::SimulatorOptionsFor(sc);
  simulator::Simulator sim(so);
  VIPER_ASSIGN_OR_RETURN(auto r, sim.Run(*sc.truth, s.schedule));
  LiveSimulationComparison c;
  const int reporting = s.consumers - static_cast<int>(s.lost_consumers.size());
  c.predicted_cil_per_consumer = r.cil;
  c.measured_cil_per_consumer = s.cil_per_consumer;
  c.cil_error = s.cil_per_consumer > 0 ? r.cil / s.cil_per_consumer - 1 : 0;
  c.predicted_requests = static_cast<double>(r.requests);
  c.measured_requests_per_consumer = reporting > 0 ? static_cast<double>(s.requests) / reporting : 0;
  c.predicted_update_latency_s = r.mean_update_latency_s;
  c.measured_update_latency_s = s.mean_update_latency_s;
  c.simulator_report = r.BriefReport();
  return c;
}

}  // namespace workflow
}  // namespace viper
