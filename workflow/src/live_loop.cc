// The closed loop inside the live producer (live_loop.h): the planner's
// observations, the re-measurements on the training path or beside it, the
// kept models, and each validation point's decision.
#include "live_loop.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "viper/transports/publisher.h"

namespace viper {
namespace workflow {
namespace internal {

using transports::MonotonicSeconds;

LiveLoop::LiveLoop(const LiveRun::Options& o, ProducerWorkload* work, LiveRun::Summary* s,
                   std::function<void(double)> paused)
    : o_(o), work_(work), s_(s), paused_(std::move(paused)) {}

// The closed loop observes every training loss and, as its planning
// metric, the validation loss when the warm-up has any (online_metric).
Status LiveLoop::Start(const schedulers::Scenario& sc) {
  schedulers::OnlinePlanner::Options oo;
  oo.metric = schedulers::OnlineObservationKind(sc);
  oo.keep_versions = o_.keep_versions;
  oo.regime_ends = o_.regime_ends;
  oo.drift_prior = o_.drift_prior;
  oo.wait_guard = o_.wait_guard;
  oo.calm_decisions = o_.calm_decisions;
  oo.partial_waits = o_.partial_waits;
  oo.record_decisions = o_.record_decisions;
  // Kept models are re-measured on the validation sample: they compare
  // with the candidate only when that is the planning metric.
  keeping_ = o_.keep_versions > 0 && oo.metric == schedulers::ObservationKind::kValidation &&
             o_.workload == LiveRun::Workload::kTrainer;
  s_->remeasure_beside = o_.remeasure_beside && o_.workload == LiveRun::Workload::kTrainer;
  if (keeping_) {
    s_->keep_versions = o_.keep_versions;
    s_->regime_ends = schedulers::ToString(o_.regime_ends);
  }
  online_ = std::make_unique<schedulers::OnlinePlanner>(sc.problem, schedulers::OnlineForecasters(sc, oo), oo);
  for (const auto& r : s_->log.records) VIPER_RETURN_IF_ERROR(Observe(r));
  s_->plan_report = "online: closed loop from iteration " + std::to_string(sc.problem.warmup_iterations);
  return Status::Ok();
}

// Online: whether to checkpoint now. The gate compares with the served
// version's loss as measured when it was published. When the current
// model measures no better than that, either it regressed or the data
// changed under both: the served version is re-measured on today's
// validation sample (its time is a stall). (Re-measuring whenever the gate
// would refuse cost 28 extra validations in a 38-point run without drift
// and gained ~2% under rotation: not worth it on the path.) Beside
// training (Options::remeasure_beside) no re-measurement stalls, and the
// served version is re-measured at every point.
StatusOr<bool> LiveLoop::Ask(int64_t it, double step_s) {
  const double t0 = MonotonicSeconds();
  const LogRecord& rec = s_->log.records.back();
  VIPER_RETURN_IF_ERROR(Observe(rec));
  // On the path the served version is re-measured only where the gate
  // needs it (the candidate no better than its loss at publish, or a
  // return anticipated): each is a pause. Beside training it is
  // re-measured at every point, as the offline replay does.
  const bool served = rec.val_loss && online_->served_loss() &&
                      (s_->remeasure_beside || *rec.val_loss >= *online_->served_loss() ||
                       online_->anticipating());
  if (!s_->remeasure_beside) {
    // On the path: the served version first, so that the kept models the
    // planner asks for (KeptVersions) follow from its re-measurement, as
    // in the offline replay; one not kept (a regime's end from before the
    // recent points) is skipped.
    if (served) {
      const int64_t m = online_->served_model();
      VIPER_RETURN_IF_ERROR(ObserveRemeasured(true, {m}, {work_->RevalidateKept(m)}));
    }
    if (rec.val_loss && keeping_ && PrepareKept(it)) {
      const std::vector<int64_t> kept = online_->KeptVersions();
      std::vector<std::optional<double>> losses;
      for (int64_t m : kept) losses.push_back(work_->RevalidateKept(m));
      VIPER_RETURN_IF_ERROR(ObserveRemeasured(false, kept, losses));
    }
  } else {
    // Beside training: the candidate is copied aside and a helper
    // re-measures while training goes on; the decision waits for it
    // (Decide). As on the path and in the offline replay, the served
    // version comes first and the kept models the planner asks for
    // (KeptVersions, which reads that re-measurement: the ramp rule)
    // follow on the same sample (NextAside); what was measured before on
    // this traffic is answered at once.
    const bool keep = rec.val_loss && keeping_ && PrepareKept(it);
    // A calm point decides now, before its re-measurements
    // (OnlinePlanner::DecidesBeforeRemeasured, as the offline replay does):
    // nothing is copied aside, and the helper's answers reach the planner
    // once it is done (Decide), before anything newer.
    const bool calm = rec.val_loss && online_->DecidesBeforeRemeasured();
    // The kept copies cannot change while the helper reads them: the
    // candidate's copy comes first, and goes again when no helper is needed.
    const bool copied = !calm && (served || keep) && work_->KeepCurrentModel();
    // As many new evaluations as fit in the last validation gap at the
    // helper's latest time per model (all at first), so that it is done
    // by the next point; the kept models left out are asked for there
    // (the offline replay's budget, schedulers/src/strategy.cc).
    int64_t max_new = std::numeric_limits<int64_t>::max();
    const double each_s = work_->RemeasureSeconds();
    if (each_s > 0 && last_point_ > 0 && step_s > 0) {
      const double gap_s = static_cast<double>(it - last_point_) * step_s;
      max_new = std::max<int64_t>(1, static_cast<int64_t>(gap_s / each_s));
    }
    last_point_ = it;
    aside_ = Aside{it, served, keep, calm, max_new, {}, 0, {}};
    if (served) aside_->models.push_back(online_->served_model());
    bool helping = work_->BeginRemeasure(aside_->models, max_new);
    aside_->max_new -= work_->RemeasureNew();  // the served version's
    if (!helping) {
      VIPER_ASSIGN_OR_RETURN(helping, NextAside());
    }
    // What the decision waits for was answered at once: it goes out now,
    // and the other kept models' answers follow it.
    bool follows = false;
    if (!helping && !aside_->after.empty()) {
      VIPER_ASSIGN_OR_RETURN(follows, Follow());
    }
    if (!helping && !follows) {
      aside_.reset();
      if (copied) work_->RetainKept(WantedKept());
    } else if (helping && !calm) {
      paused_(MonotonicSeconds() - t0);
      aside_->begun_s = MonotonicSeconds();
      return false;
    } else if (calm) {
      ++s_->calm_points;  // decided below; the answers follow (Decide)
    }
  }
  VIPER_ASSIGN_OR_RETURN(bool checkpoint, online_->ShouldCheckpoint(it));
  paused_(MonotonicSeconds() - t0);
  return checkpoint;
}

// The helper's answers (one per model, the served version's first when
// `served`) to the planner, as the producer's own measurements would go.
Status LiveLoop::ObserveRemeasured(bool served, const std::vector<int64_t>& models,
                                   const std::vector<std::optional<double>>& losses) {
  for (size_t i = 0; i < models.size() && i < losses.size(); ++i) {
    if (!losses[i]) continue;  // not kept
    if (served && i == 0 && aside_ && aside_->calm) {  // after its point's decision
      VIPER_RETURN_IF_ERROR(online_->ObserveServedLate(models[0], *losses[i]));
      ++revalidations_;
    } else if (served && i == 0) {
      VIPER_RETURN_IF_ERROR(online_->ObserveServed(*losses[i]));
      ++revalidations_;
    } else if (models[i] != online_->served_model()) {
      VIPER_RETURN_IF_ERROR(online_->ObserveKept(models[i], *losses[i]));
    }
  }
  return Status::Ok();
}

// The served version's answers in (aside_->models, the helper done), the
// kept models the planner now asks for go to the helper, on the point's
// sample, with what is left of its budget; true when it measures any
// (aside_->models are theirs then; false: answered, and observed).
StatusOr<bool> LiveLoop::NextAside() {
  if (aside_->served) {
    VIPER_RETURN_IF_ERROR(ObserveRemeasured(true, aside_->models, work_->FinishRemeasure()));
  }
  aside_->served = false;
  size_t rivals = 0;
  aside_->models = aside_->keep ? online_->KeptVersions(&rivals) : std::vector<int64_t>{};
  aside_->after.clear();
  if (!aside_->calm && rivals < aside_->models.size()) {
    // A decision waits for the first `rivals` only (the offline replay's
    // split, schedulers/src/strategy.cc); the others follow it (Follow).
    aside_->after.assign(aside_->models.begin() + static_cast<std::ptrdiff_t>(rivals), aside_->models.end());
    aside_->models.resize(rivals);
  }
  aside_->keep = false;
  return MeasureKept();
}

// After a decision that did not wait for them: the kept models of
// aside_->after go to the helper; from here the point is answers only (as
// a calm one's). True when it measures any.
StatusOr<bool> LiveLoop::Follow() {
  aside_->models = std::move(aside_->after);
  aside_->after.clear();
  aside_->served = false;
  aside_->keep = false;
  aside_->calm = true;
  VIPER_ASSIGN_OR_RETURN(const bool helping, MeasureKept());
  if (helping) ++s_->followed_points;
  return helping;
}

// aside_->models (kept models) to the helper, on the point's sample, with
// what is left of its budget; true when it measures any (false: answered
// at once, and observed).
StatusOr<bool> LiveLoop::MeasureKept() {
  const bool helping = work_->RemeasureMore(aside_->models, std::max<int64_t>(0, aside_->max_new));
  aside_->max_new -= work_->RemeasureNew();
  if (helping) return true;
  VIPER_RETURN_IF_ERROR(ObserveRemeasured(false, aside_->models, work_->FinishRemeasure()));
  aside_->models.clear();
  return false;
}

// Whether the pending decision is to be taken now: once the helper is done
// with the kept models (the served version's answer starts them), at the
// latest at the next validation point (before that point's own) or at the
// end. Until then the planner sees nothing newer than its point.
StatusOr<bool> LiveLoop::Due(bool forced) {
  if (forced) return true;
  if (!work_->RemeasureDone()) return false;
  if (!aside_->keep) return true;
  const double t0 = MonotonicSeconds();
  VIPER_ASSIGN_OR_RETURN(bool helping, NextAside());
  paused_(MonotonicSeconds() - t0);
  return !helping;
}

// The decision of the validation point whose re-measurements ran beside
// training: once the helper is done, or at the next validation point
// (the producer waits out the rest: a pause) or the run's end. Its wait,
// from the point to now, goes to Summary::remeasure_waits (the
// simulation of the run delays the checkpoint by as much).
StatusOr<LiveLoop::Decision> LiveLoop::Decide() {
  const double t0 = MonotonicSeconds();
  if (aside_->keep) {  // the helper had the served version's only: the kept models now, waited for
    VIPER_ASSIGN_OR_RETURN(bool helping, NextAside());
    if (helping) VIPER_RETURN_IF_ERROR(ObserveRemeasured(false, aside_->models, work_->FinishRemeasure()));
  } else {
    VIPER_RETURN_IF_ERROR(ObserveRemeasured(aside_->served, aside_->models, work_->FinishRemeasure()));
  }
  Decision d{aside_->iteration, false, false};
  if (!aside_->calm) {  // a calm point decided at its point: the answers only
    VIPER_ASSIGN_OR_RETURN(d.publish, online_->ShouldCheckpoint(aside_->iteration));
    s_->remeasure_waits.emplace_back(aside_->iteration, MonotonicSeconds() - aside_->begun_s);
  }
  if (!aside_->after.empty()) {
    VIPER_ASSIGN_OR_RETURN(d.answers_follow, Follow());
    if (d.answers_follow) {  // the copies stay while the helper reads them
      paused_(MonotonicSeconds() - t0);
      return d;
    }
  }
  // The copy set aside, unless kept anyway (a calm point's frees, held
  // back while the helper read the copies).
  if (!d.publish) work_->RetainKept(WantedKept());
  aside_.reset();
  paused_(MonotonicSeconds() - t0);
  return d;
}

// Re-publishing, at a validation point: the current model is copied
// where the planner says (OnlinePlanner::CopyAt: before a predicted
// switch, at every point, or never; it may turn out to be the last of a
// regime, which the planner names only once it has detected the change,
// so the copies of the last keep_versions points are held for that), and
// the copies it no longer wants are freed; true when the kept models it
// wants (KeptVersions) are to be re-measured on today's validation
// sample (false: a workload that keeps nothing). Published models were
// kept as they went out. At most 2K + 1 copies: K the planner's, K
// recent, the served one.
bool LiveLoop::PrepareKept(int64_t it) {
  recent_.push_back(it);
  if (recent_.size() > static_cast<size_t>(o_.keep_versions)) recent_.erase(recent_.begin());
  work_->RetainKept(WantedKept());  // before keeping one more
  return !(online_->CopyAt(it) && !work_->KeepCurrentModel());
}

// The kept models still wanted: the planner's and the copies of the
// recent validation points (a regime's end is named a few points late).
std::vector<int64_t> LiveLoop::WantedKept() const {
  if (!keeping_) return {};
  std::vector<int64_t> wanted = online_->KeptVersions();
  const std::vector<int64_t>& copies = online_->copies();
  for (int64_t r : recent_) {
    if (std::binary_search(copies.begin(), copies.end(), r)) wanted.push_back(r);
  }
  return wanted;
}

Status LiveLoop::Observe(const LogRecord& r) {
  if (r.train_loss) {
    VIPER_RETURN_IF_ERROR(online_->Observe(r.iteration, *r.train_loss, schedulers::ObservationKind::kTraining));
  }
  if (r.val_loss) {
    VIPER_RETURN_IF_ERROR(online_->Observe(r.iteration, *r.val_loss, schedulers::ObservationKind::kValidation));
  }
  return Status::Ok();
}

Status LiveLoop::CatchUp(int64_t at) {
  const auto& records = s_->log.records;
  size_t first = records.size();
  while (first > 0 && records[first - 1].iteration > at) --first;
  for (size_t r = first; r + 1 < records.size(); ++r) VIPER_RETURN_IF_ERROR(Observe(records[r]));
  return Status::Ok();
}

Status LiveLoop::Committed(int64_t at) {
  VIPER_RETURN_IF_ERROR(online_->Commit(at));
  // After Commit: the version served before is kept now. Not while a
  // calm point's helper reads the kept copies (Decide frees them after).
  if (!aside_) work_->RetainKept(WantedKept());
  return Status::Ok();
}

void LiveLoop::Finish() {
  // The summary says "served version re-measured N times" when the
  // re-measurements reached the planner; say it here only otherwise.
  s_->plan_report = online_->summary().BriefReport(static_cast<int64_t>(online_->taken().size()));
  s_->decisions = online_->decisions();
  if (online_->summary().served_measurements == 0 && revalidations_ > 0) {
    s_->plan_report += ", served version re-measured " + std::to_string(revalidations_) + "x";
  }
}

}  // namespace internal
}  // namespace workflow
}  // namespace viper
