// Internal: the closed loop inside the live producer (live_producer.cc),
// `online`'s side of a run. It feeds the planner what a live producer sees
// (every training loss, each validation point, the served version and the
// kept models re-measured on today's validation sample, on the training
// path or by a helper beside it) and says, at each validation point,
// whether to publish and which model. The producer trains, publishes and
// accounts; this decides.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "live_workloads.h"
#include "viper/core/status.h"
#include "viper/core/training_log.h"
#include "viper/schedulers/online.h"
#include "viper/schedulers/scenario.h"
#include "viper/workflow/live.h"

namespace viper {
namespace workflow {
namespace internal {

class LiveLoop {
 public:
  // `work`: the producer's workload (its kept models and helper); `s`: the
  // run's Summary (its log, which the producer appends to, and the loop's
  // fields); `paused`: seconds the loop held the training path, for the
  // producer's accounting (planning time, the log's clock).
  LiveLoop(const LiveRun::Options& o, ProducerWorkload* work, LiveRun::Summary* s,
           std::function<void(double)> paused);

  // The planner, from the warm-up's scenario, having observed the log so far.
  Status Start(const schedulers::Scenario& sc);

  schedulers::OnlinePlanner& planner() { return *online_; }
  // Kept models are re-published (keep_versions > 0 on the validation loss,
  // a trainer): Summary::copies are the planner's.
  bool keeping() const { return keeping_; }

  // At the log's newest record, iteration `it` (a validation point or not):
  // whether to publish now. Beside training (Summary::remeasure_beside) a
  // validation point whose re-measurements went to the helper answers false
  // and leaves a decision pending (waiting()); a calm one
  // (OnlinePlanner::DecidesBeforeRemeasured) decides now and leaves only
  // the helper's answers pending. `step_s`: the producer's recent seconds
  // per iteration (0: none yet).
  StatusOr<bool> Ask(int64_t it, double step_s);

  // A decision pending beside training.
  bool waiting() const { return aside_.has_value(); }
  // Whether it is to be taken now: once the helper is done with the kept
  // models (the served version's answer starts them), or at once when
  // `forced` (the next validation point, before its own, or the run's end).
  StatusOr<bool> Due(bool forced);
  // The pending decision: its point's iteration, and whether to publish
  // there (the model of publishing(); never for a calm point, decided
  // already). No longer waiting() after it.
  // `answers_follow`: the kept models a decision does not wait for
  // (OnlinePlanner::Options::partial_waits) are on the helper, still
  // waiting() (answers only): CatchUp after their Decide.
  struct Decision {
    int64_t at = 0;
    bool publish = false;
    bool answers_follow = false;
  };
  StatusOr<Decision> Decide();
  // After a decision of point `at` (and its publish): the training losses
  // logged since, before the newest record's (which Ask observes), in order.
  Status CatchUp(int64_t at);

  // The model a publish decided now sends: the candidate's own iteration or
  // an older kept one (a re-publish).
  int64_t publishing() const { return online_->publishing(); }
  // A publish at `at` went out: committed, and the kept models no longer
  // wanted freed (the version served before is kept now).
  Status Committed(int64_t at);

  // After training: the plan report and the decisions into the Summary.
  void Finish();

 private:
  Status Observe(const LogRecord& r);
  Status ObserveRemeasured(bool served, const std::vector<int64_t>& models,
                           const std::vector<std::optional<double>>& losses);
  StatusOr<bool> NextAside();
  StatusOr<bool> Follow();
  StatusOr<bool> MeasureKept();
  bool PrepareKept(int64_t it);
  std::vector<int64_t> WantedKept() const;

  const LiveRun::Options& o_;
  ProducerWorkload* work_;
  LiveRun::Summary* s_;
  std::function<void(double)> paused_;
  std::unique_ptr<schedulers::OnlinePlanner> online_;
  int64_t revalidations_ = 0;  // served version re-measured for the gate
  bool keeping_ = false;       // online with keep_versions > 0 on the validation loss: re-publishing
  std::vector<int64_t> recent_;  // the last keep_versions validation points whose models are kept
  // A validation point whose re-measurements run beside training
  // (Options::remeasure_beside): its iteration, whether `models` (the
  // helper's) are the served version alone, whether the kept models are to
  // follow, whether the point was calm (decided already: the answers only),
  // the new evaluations the budget still allows, when the helper began,
  // and the kept models whose answers follow the decision (`after`:
  // OnlinePlanner::Options::partial_waits).
  struct Aside {
    int64_t iteration = 0;
    bool served = false;
    bool keep = false;
    bool calm = false;
    int64_t max_new = 0;
    std::vector<int64_t> models;
    double begun_s = 0;
    std::vector<int64_t> after;
  };
  std::optional<Aside> aside_;
  int64_t last_point_ = 0;  // the last validation point that re-measured beside training
};

}  // namespace internal
}  // namespace workflow
}  // namespace viper
