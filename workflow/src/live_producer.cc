// The live producer role (rank 0), top to bottom: warm up, publish version
// 0 and measure its cost, plan, train and publish, tell the consumers it is
// over, gather their results, summarise.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "live_exchange.h"
#include "live_loop.h"
#include "live_roles.h"
#include "live_summary.h"
#include "live_workloads.h"
#include "viper/core/log.h"
#include "viper/schedulers/online.h"
#include "viper/schedulers/scenario.h"
#include "viper/transports/publisher.h"

namespace viper {
namespace workflow {
namespace internal {
namespace {

using transports::MonotonicSeconds;


class Producer {
 public:
  Producer(const LiveRun::Options& o, MPI_Comm comm, int size, double base, std::string session)
      : o_(o), comm_(comm), size_(size), base_(base), session_(std::move(session)), pace_(comm, size, base) {}

  StatusOr<LiveRun::Summary> Run() {
    VIPER_RETURN_IF_ERROR(SetUp());
    VIPER_RETURN_IF_ERROR(WarmUp());
    VIPER_RETURN_IF_ERROR(Publish(W_, W_));
    VIPER_RETURN_IF_ERROR(pub_->Flush());
    const schedulers::CheckpointCost cost = MeasuredCost();
    if (drifting_) pace_.Announce(W_, s_.seconds_per_iteration, N_);
    Info("warm-up done: W=" + std::to_string(W_) + " of N=" + std::to_string(N_) + ", tau " +
         std::to_string(s_.seconds_per_iteration * 1e3) + (o_.plan_cost ? " ms, planning with stall " : " ms, version 0 stall ") +
         std::to_string(cost.stall_s * 1e3) + " ms, delay " + std::to_string(cost.delay_s * 1e3) + " ms");
    VIPER_RETURN_IF_ERROR(Plan(cost));
    VIPER_RETURN_IF_ERROR(Train());
    VIPER_RETURN_IF_ERROR(pub_->Close());
    s_.lost_consumers = pub_->summary().lost_consumers;
    Info("training done at " + std::to_string(s_.training_end_s) + " s; " + pub_->summary().BriefReport());
    const auto results = EndAndGather();
    index_ = SummarizeVersions(published_, pub_->Reports(), results, t_warm_, o_.mode, &s_);
    VIPER_RETURN_IF_ERROR(EveryConsumerGotThisRun(results));
    SummarizeRequests(results, t_warm_, index_, timeline_, first_, &s_);
    SummarizeRun(static_cast<int>(results.size()));
    work_->SummarizeKept(&s_);
    if (loop_ && loop_->keeping()) s_.copies = loop_->planner().copies();
    FinishStalenessTable();
    return s_;
  }

 private:
  void Info(const std::string& line) const {
    if (o_.verbose) Log(LogLevel::kInfo, "producer", line);
  }
  bool Stop() const { return o_.should_stop && o_.should_stop(); }
  double Now() const { return MonotonicSeconds() - base_; }  // since the common origin

  // The workload, W and N, the publisher.
  Status SetUp() {
    s_.workload = LiveRun::ToString(o_.workload);
    s_.tier = ToString(o_.tier);
    s_.mode = ToString(o_.mode);
    s_.notify = ToString(o_.notify);
    s_.fanout = transports::ToString(o_.fanout);
    s_.host_protocol = transports::ToString(o_.host_protocol);
    s_.strategy = schedulers::ToString(o_.strategy);
    s_.consumers = size_ - 1;
    VIPER_ASSIGN_OR_RETURN(work_, MakeProducerWorkload(o_));
    first_ = work_->first_iteration();
    N_ = work_->total_iterations();
    W_ = WarmupOf(o_, first_, N_);
    if (W_ < first_ || W_ >= N_) {
      return InvalidArgumentError("warm-up " + std::to_string(W_) + " must lie in [" + std::to_string(first_) +
                                  ", " + std::to_string(N_) + ")");
    }
    s_.warmup_iterations = W_;
    s_.total_iterations = N_;
    transports::Publisher::Options po;
    po.tier = o_.tier;
    po.mode = o_.mode;
    po.notify = o_.notify;
    po.fanout = o_.fanout;
    po.host_protocol = o_.host_protocol;
    po.peer_timeout_s = o_.consumer_timeout_s;
    po.pfs_dir = o_.pfs_dir;
    po.session_id = session_;  // each version carries the run's identity
    po.hmac_key_file = o_.hmac_key_file;
    po.pfs_delta = o_.pfs_delta;
    po.delta = o_.delta;
    po.staging_bytes = ExpectedModelBytes(o_) + (1 << 20);
    VIPER_ASSIGN_OR_RETURN(pub_, transports::Publisher::Create(po));
    return Status::Ok();
  }

  // One training iteration, logged (and, with drifting traffic, timed).
  Status Step() {
    LogRecord rec;
    const double t0 = MonotonicSeconds();
    VIPER_RETURN_IF_ERROR(work_->Step(&rec));
    // The producer's pace: the seconds of its latest W iterations (stalls and
    // planning pauses are outside Step), for the closed loop's SetPace.
    step_s_.push_back(MonotonicSeconds() - t0);
    step_sum_ += step_s_.back();
    if (step_s_.size() > static_cast<size_t>(std::max<int64_t>(1, W_ - first_ + 1))) {
      step_sum_ -= step_s_.front();
      step_s_.pop_front();
    }
    it_ = rec.iteration;
    s_.log.records.push_back(rec);
    if (drifting_) timeline_.emplace_back(Now(), it_);
    return Status::Ok();
  }

  // The producer's recent seconds per iteration (Step's own; 0 before any).
  double StepSeconds() const {
    return step_s_.empty() || !(step_sum_ > 0) ? 0.0 : step_sum_ / static_cast<double>(step_s_.size());
  }

  Status WarmUp() {
    const double t0 = MonotonicSeconds();
    while (it_ < W_ && !Stop()) VIPER_RETURN_IF_ERROR(Step());
    t_warm_ = Now();  // the time origin of the Summary
    s_.seconds_per_iteration =
        (MonotonicSeconds() - t0) / static_cast<double>(std::max<int64_t>(1, it_ - first_ + 1));
    return Status::Ok();
  }

  // Publishes, as the version of `iteration`, the current model
  // (`model_iteration` == `iteration`) or the kept model of `model_iteration`
  // (a re-publish: the same stall and delivery, the older model's bytes).
  Status Publish(int64_t iteration, int64_t model_iteration) {
    const ModelState* model = &work_->model();
    // An older model (a re-publish), or the model of a decision taken
    // beside training, copied aside at its validation point.
    if (model_iteration != it_) {
      model = work_->KeptModel(model_iteration);
      if (model == nullptr) {
        return InternalError("publishing at iteration " + std::to_string(iteration) +
                             ": the model of iteration " + std::to_string(model_iteration) + " is not kept");
      }
    }
    Published p;
    p.iteration = iteration;
    p.model_iteration = model_iteration;
    p.start_s = Now() - t_warm_;
    const double t0 = MonotonicSeconds();
    VIPER_ASSIGN_OR_RETURN(p.report, pub_->Publish(*model, iteration));
    work_->Published(model_iteration);
    work_->Paused(MonotonicSeconds() - t0);
    p.version = p.report.version;
    published_.push_back(p);
    return Status::Ok();
  }

  // sigma and delta as measured on version 0: sigma = its stall, delta = the
  // slowest consumer's servable time when acknowledged, else snapshot +
  // transfer (+ half a poll period when polling).
  // Version 0's measured cost, or LiveRun::Options::plan_cost when given.
  schedulers::CheckpointCost MeasuredCost() {
    const schedulers::CheckpointCost cost = o_.plan_cost ? *o_.plan_cost : CostOf(pub_->Reports().front());
    s_.planned_stall_s = cost.stall_s;
    s_.planned_delay_s = cost.delay_s;
    return cost;
  }

  // sigma and delta of one version as measured (see MeasuredCost).
  schedulers::CheckpointCost CostOf(const transports::Publisher::VersionReport& r) const {
    double servable = 0;
    for (const auto& c : r.consumers) servable = std::max(servable, c.servable_s);
    double delta = servable > 0 ? servable : r.snapshot_s + r.transfer_s + r.notify_s;
    if (o_.notify == transports::Notify::kPoll) delta += 0.5 * o_.poll_period_s;
    schedulers::CheckpointCost cost;
    cost.stall_s = r.stall_s;
    cost.delay_s = std::max(delta, r.stall_s);
    return cost;
  }

  // Delta versions cost what they move, not what the model weighs: once the
  // latest version sent moved less than its image (a delta file, or a
  // consumer that took a delta), the closed loop re-plans with its measured
  // cost as the next update's (issue 27 item 4). Runs without deltas keep
  // version 0's cost, as the simulation they are compared with does.
  // Checked after each commit and at each validation point until the
  // latest version has been sent (async: a commit's own version is still in
  // flight), each version at most once.
  Status UpdateOnlineCost() {
    if (!loop_ || published_.empty() || costed_version_ >= published_.back().version) return Status::Ok();
    const auto reports = pub_->Reports();
    for (auto r = reports.rbegin(); r != reports.rend(); ++r) {
      if (r->version <= costed_version_) break;
      if (!r->sent || r->superseded) continue;
      costed_version_ = r->version;
      bool moved_less = r->written_bytes > 0 && r->written_bytes < r->bytes;
      for (const auto& c : r->consumers) moved_less = moved_less || (c.bytes_moved > 0 && c.bytes_moved < r->bytes);
      if (!moved_less) return Status::Ok();
      return loop_->planner().SetCost(CostOf(*r));
    }
    return Status::Ok();
  }

  // The planning context from the warm-up (the scenario picks the metric and
  // fits the curve), planned on the measured cost.
  Status Plan(const schedulers::CheckpointCost& cost) {
    const double t0 = MonotonicSeconds();
    schedulers::ScenarioOptions sco;
    sco.warmup_iterations = W_;
    sco.total_iterations = N_;
    sco.seconds_per_iteration = s_.seconds_per_iteration;
    sco.log_iteration_times = false;
    sco.request_interval_s = 1.0 / o_.requests_per_s;
    // sigma and delta as measured (delta already holds the poll wait).
    sco.tier = schedulers::MeasuredCost{cost.stall_s, cost.delay_s};
    // The consumers drift their requests to the producer's iteration (the
    // pace messages): this harness's traffic follows the producer's clock.
    sco.problem_template.requests.traffic_clock = schedulers::TrafficClock::kProducer;
    TrainingLog warm = s_.log;
    warm.source = "live warm-up";
    VIPER_ASSIGN_OR_RETURN(schedulers::Scenario sc, schedulers::MakeScenario(warm, sco));
    sc.iterations_per_epoch = work_->iterations_per_epoch();
    s_.metric = predictor::ToString(sc.metric);
    if (o_.strategy == schedulers::StrategyKind::kOnline) {
      s_.online_metric = predictor::ToString(sc.online_metric);
      loop_ = std::make_unique<LiveLoop>(o_, work_.get(), &s_, [this](double pause) { Paused(pause); });
      VIPER_RETURN_IF_ERROR(loop_->Start(sc));
    } else {
      VIPER_ASSIGN_OR_RETURN(auto p, schedulers::PlanStrategy(sc, o_.strategy));
      plan_ = p.schedule;
      s_.plan_report = p.summary.BriefReport();
    }
    s_.planning_s = MonotonicSeconds() - t0;
    work_->Paused(s_.planning_s);
    Info("plan: " + s_.plan_report + " (" + predictor::ToString(sc.metric) +
         (o_.strategy == schedulers::StrategyKind::kOnline && sc.online_metric != sc.metric
              ? std::string(", online observes ") + predictor::ToString(sc.online_metric)
              : std::string()) +
         ", " + sc.predictor_report + ")");
    return Status::Ok();
  }

  // Planning time on the training path: the version of this iteration
  // leaves after its decision, so the log's time of the iteration includes
  // it (the next iteration's includes it anyway), and a simulation of the
  // log publishes when the producer did. Re-measuring kept models on the
  // path makes this pause longest where the traffic just changed (a new
  // traffic state: each evaluated afresh), where the stale version serving
  // meanwhile costs most.
  void Paused(double pause) {
    s_.planning_s += pause;
    work_->Paused(pause);
    if (s_.log.records.back().wall_time_s) *s_.log.records.back().wall_time_s += pause;
  }

  // Publishes as the version of iteration `at` (now, or a decision taken
  // beside training since) what the plan or the closed loop says: the model
  // of `at`, or an older kept one (publishing()). `next`: the plan's next
  // checkpoint, moved past the current iteration.
  Status PublishAt(int64_t at, size_t* next) {
    if (drifting_) pace_.Hold(it_, s_.seconds_per_iteration, N_);  // the publish's stall
    const int64_t model = loop_ ? loop_->publishing() : at;
    VIPER_RETURN_IF_ERROR(Publish(at, model));
    s_.schedule.push_back(at);
    s_.published.push_back(model);
    if (model != at) {
      ++s_.republished;
      Info("re-published the model of iteration " + std::to_string(model) + " at iteration " +
           std::to_string(at) + " (version " + std::to_string(published_.back().version) + ")");
    }
    if (loop_) {
      VIPER_RETURN_IF_ERROR(loop_->Committed(at));
      VIPER_RETURN_IF_ERROR(UpdateOnlineCost());
    }
    while (*next < plan_.size() && plan_[*next] <= it_) ++*next;
    if (published_.back().version % 10 == 0) {
      Info("published version " + std::to_string(published_.back().version) + " at iteration " +
           std::to_string(at));
    }
    return Status::Ok();
  }

  // The pending decision (LiveLoop::Decide), its publish, then the
  // training losses since its point to the planner.
  // Where its kept models' answers follow the decision (Decision::
  // answers_follow), the losses wait for them; `forced` (at the next
  // validation point or the end) waits for them now.
  Status FinishAside(size_t* next, bool forced) {
    VIPER_ASSIGN_OR_RETURN(const LiveLoop::Decision d, loop_->Decide());
    if (d.publish) VIPER_RETURN_IF_ERROR(PublishAt(d.at, next));
    if (!d.answers_follow) return loop_->CatchUp(d.at);
    return forced ? FinishAside(next, forced) : Status::Ok();
  }

  // Trains to N, publishing where the plan (or the closed loop) says.
  Status Train() {
    size_t next = 0;  // the plan's next checkpoint
    while (it_ < N_ && !Stop()) {
      VIPER_RETURN_IF_ERROR(Step());
      if (drifting_) pace_.Announce(it_, s_.seconds_per_iteration, N_);
      const bool at_point = s_.log.records.back().val_loss.has_value();
      // A decision waiting for re-measurements beside training: taken once
      // the helper is done, at the latest at the next validation point
      // (before that point's own) or at the end. Until then the planner
      // sees nothing newer than its point.
      if (loop_ && loop_->waiting()) {
        VIPER_ASSIGN_OR_RETURN(const bool due, loop_->Due(at_point || it_ >= N_));
        if (!due) continue;
        VIPER_RETURN_IF_ERROR(FinishAside(&next, at_point || it_ >= N_));
        if (loop_->waiting()) continue;  // its kept models' answers follow
      }
      bool checkpoint = next < plan_.size() && it_ >= plan_[next];
      if (loop_) {
        if (at_point) {
          VIPER_RETURN_IF_ERROR(UpdateOnlineCost());
          if (StepSeconds() > 0) VIPER_RETURN_IF_ERROR(loop_->planner().SetPace(StepSeconds()));
        }
        // A validation point is where the loop re-fits, re-plans and
        // re-measures: the consumers hold their estimate meanwhile.
        if (drifting_ && at_point) pace_.Hold(it_, s_.seconds_per_iteration, N_);
        VIPER_ASSIGN_OR_RETURN(checkpoint, loop_->Ask(it_, StepSeconds()));
      }
      if (checkpoint) VIPER_RETURN_IF_ERROR(PublishAt(it_, &next));
    }
    if (loop_ && loop_->waiting()) VIPER_RETURN_IF_ERROR(FinishAside(&next, true));  // stopped early: as at the end
    if (loop_) loop_->Finish();
    s_.iterations_done = it_;
    s_.training_end_s = Now() - t_warm_;
    s_.termination = Stop() ? "interrupted" : "completed";
    return Status::Ok();
  }

  bool Lost(int rank) const {
    return std::find(s_.lost_consumers.begin(), s_.lost_consumers.end(), rank) != s_.lost_consumers.end();
  }

  // Tells every consumer training is over and which version is the last,
  // then gathers their results; a consumer that does not answer in time is
  // lost (its requests are not counted).
  std::map<int, ConsumerResults> EndAndGather() {
    pace_.Finish(MonotonicSeconds() + 1.0);
    EndMessage end;
    end.last_version = published_.empty() ? 0 : static_cast<int64_t>(published_.back().version);
    end.ranks_lost = static_cast<int32_t>(s_.lost_consumers.size());
    for (int r = 1; r < size_; ++r) {
      if (Lost(r)) continue;
      if (!SendEnd(comm_, r, end, MonotonicSeconds() + o_.consumer_timeout_s)) s_.lost_consumers.push_back(r);
    }
    std::map<int, ConsumerResults> results;
    for (int r = 1; r < size_; ++r) {
      if (Lost(r)) continue;
      const double deadline = MonotonicSeconds() + o_.consumer_timeout_s + o_.poll_period_s + 10;
      auto got = ReceiveResults(comm_, r, deadline);
      if (got.ok()) {
        results[r] = std::move(*got);
      } else {
        Log(LogLevel::kWarning, "producer", got.status().ToString());
        s_.lost_consumers.push_back(r);
      }
    }
    auto& lost = s_.lost_consumers;
    std::sort(lost.begin(), lost.end());
    lost.erase(std::unique(lost.begin(), lost.end()), lost.end());
    return results;
  }

  // A consumer that answered but never swapped in one of this run's versions
  // served nothing of this run (before the session id, another run's files
  // were served while the run said "completed"): the run fails, naming it.
  Status EveryConsumerGotThisRun(const std::map<int, ConsumerResults>& results) const {
    std::string starved;
    for (const auto& [rank, res] : results) {
      bool got = false;
      for (const auto& sw : res.swaps) got = got || index_.count(sw.version) > 0;
      if (!got) starved += (starved.empty() ? "" : ", ") + std::to_string(rank);
    }
    if (starved.empty()) return Status::Ok();
    return FailedPreconditionError(
        "consumer rank(s) " + starved + " never received a version of this run (session " + session_ + ", " +
        std::to_string(published_.size()) + " versions published" +
        (o_.pfs_dir.empty() ? std::string() : " to " + o_.pfs_dir) +
        "): the run failed; see the consumers' warnings for the versions they refused");
  }

  // After the run (the consumers are done, the window closed): the kept
  // versions evaluated on every validation point's traffic; the log's test
  // columns are the table's diagonal.
  void FinishStalenessTable() {
    s_.staleness = work_->FinishStalenessTable(&s_);
    if (!s_.staleness) return;
    std::map<int64_t, const StalenessRecord*> diagonal;
    for (const auto& r : s_.staleness->records) {
      if (r.version_iteration == r.traffic_iteration) diagonal[r.version_iteration] = &r;
    }
    for (auto& rec : s_.log.records) {
      auto d = diagonal.find(rec.iteration);
      if (d == diagonal.end()) continue;
      rec.test_loss = d->second->test_loss;
      rec.test_accuracy = d->second->test_accuracy;
    }
    Info("staleness table: " + std::to_string(s_.staleness->records.size()) + " rows, " +
         std::to_string(s_.staleness_versions_kept) + " versions kept, copies " +
         std::to_string(s_.staleness_keep_s) + " s during the run, evaluation " +
         std::to_string(s_.staleness_evaluate_s) + " s after it");
  }

  void SummarizeRun(int reporting) {
    s_.cil_per_consumer = reporting > 0 ? s_.cil / reporting : 0;
    s_.no_checkpoint_training_s = s_.training_end_s - s_.total_stall_s - s_.planning_s;
    s_.slowdown_fraction = s_.no_checkpoint_training_s > 0 ? s_.total_stall_s / s_.no_checkpoint_training_s : 0;
    s_.peers_lost = !s_.lost_consumers.empty();
    if (!s_.lost_consumers.empty()) {
      s_.message = "lost consumer(s):";
      for (int r : s_.lost_consumers) s_.message += " rank " + std::to_string(r);
      s_.message += "; their requests are not counted";
    }
    s_.log.source = "live run (producer)";
  }

  const LiveRun::Options& o_;
  MPI_Comm comm_;
  const int size_;
  const double base_;
  const std::string session_;  // the run's identity (ShareSessionId)
  const bool drifting_ = DriftChangesTraffic(o_);
  PaceAnnouncer pace_;
  LiveRun::Summary s_;
  std::unique_ptr<ProducerWorkload> work_;
  std::unique_ptr<transports::Publisher> pub_;
  int64_t first_ = 1, W_ = 0, N_ = 0, it_ = 0;
  double t_warm_ = 0;
  std::vector<Published> published_;
  std::map<uint64_t, size_t> index_;  // version -> position in s_.versions
  // Drifting traffic: when each iteration ended (since the common origin),
  // to judge the consumers' estimates of the producer's iteration.
  std::vector<std::pair<double, int64_t>> timeline_;
  schedulers::Schedule plan_;
  std::unique_ptr<LiveLoop> loop_;  // online: the closed loop
  uint64_t costed_version_ = 0;  // the latest version whose cost UpdateOnlineCost looked at
  std::deque<double> step_s_;  // the seconds of the latest W iterations' Step()
  double step_sum_ = 0;        // their sum
};

}  // namespace

StatusOr<LiveRun::Summary> RunProducer(const LiveRun::Options& o, MPI_Comm comm, int size, double base) {
  const std::string session = ShareSessionId(comm, 0);
  return Producer(o, comm, size, base, session).Run();
}

}  // namespace internal
}  // namespace workflow
}  // namespace viper
