// Internal: what the live roles run. The producer steps a workload (the
// real trainer, or a replay of a logged run's times and losses); a consumer
// charges each request the loss of the version it served (the trainer's
// test subset, or the replayed curve).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "viper/core/status.h"
#include "viper/core/training_log.h"
#include "viper/transports/types.h"
#include "viper/workflow/live.h"

namespace viper {
namespace workflow {
namespace internal {

// The producer's training job, one iteration per Step.
class ProducerWorkload {
 public:
  virtual ~ProducerWorkload() = default;
  virtual int64_t first_iteration() const = 0;
  virtual int64_t total_iterations() const = 0;
  virtual int64_t iterations_per_epoch() const = 0;
  virtual Status Step(LogRecord* record) = 0;
  virtual const ModelState& model() const = 0;
  // The producer was blocked for `seconds` outside Step (a checkpoint stall,
  // planning): a replay shifts its remaining iterations by as much, as a real
  // training job would be delayed.
  virtual void Paused(double seconds) {}
  // A model was just published: remember it as the served version. It is
  // the current model (`model_iteration` = the current iteration) or, for a
  // re-publish, the kept model of `model_iteration` (KeptModel).
  virtual void Published(int64_t model_iteration) {}
  // Re-publishing (issue 25). The default keeps nothing (the replay).
  // Keeps a copy of the current model as the model of the current
  // iteration; false when the workload keeps no models.
  virtual bool KeepCurrentModel() { return false; }
  // The kept model of `model_iteration` (the served version's copy among
  // them) on the current validation sample, as the current model is
  // validated; nullopt when it is not kept.
  virtual std::optional<double> RevalidateKept(int64_t model_iteration) { return std::nullopt; }
  // Re-measuring beside training (LiveRun::Options::remeasure_beside):
  // starts a helper thread that measures the kept models `models` on the
  // current validation sample while Step() goes on; a model measured before
  // on an equal traffic state is answered without it, and of the others
  // only the first `max_new` are measured (the rest are left unanswered).
  // False when nothing is left to measure (FinishRemeasure answers at
  // once). The kept models must not change until FinishRemeasure.
  virtual bool BeginRemeasure(const std::vector<int64_t>& models, int64_t max_new) { return false; }
  // After FinishRemeasure: more models measured as BeginRemeasure does, on
  // the same validation sample and traffic state as its own (the point's,
  // however far training has gone since), so that the models to measure
  // next may follow from the answers so far (the served version's
  // re-measurement, then the kept models the planner asks for).
  virtual bool RemeasureMore(const std::vector<int64_t>& models, int64_t max_new) { return false; }
  // Seconds the helper took per model measured, its latest job's (0
  // before any).
  virtual double RemeasureSeconds() const { return 0; }
  // The new evaluations (models not measured before on the point's traffic
  // state) the latest BeginRemeasure or RemeasureMore gave the helper.
  virtual int64_t RemeasureNew() const { return 0; }
  // Whether the helper is done (true when none runs).
  virtual bool RemeasureDone() const { return true; }
  // Waits for the helper: one loss per model of BeginRemeasure (nullopt:
  // not kept, or a workload that cannot re-measure).
  virtual std::vector<std::optional<double>> FinishRemeasure() { return {}; }
  // The kept model of `model_iteration`, to publish; nullptr when not kept.
  virtual const ModelState* KeptModel(int64_t model_iteration) const { return nullptr; }
  // Frees the kept models not in `wanted` (the served version's copy stays).
  virtual void RetainKept(const std::vector<int64_t>& wanted) {}
  // What keeping cost: Summary::kept_evaluations, kept_reused, kept_peak, kept_peak_bytes.
  virtual void SummarizeKept(LiveRun::Summary* s) const {}
  // After training: the staleness table of the versions kept during the run
  // (trainer with Options::trainer.staleness_table), its cost in `s`;
  // nullopt without one.
  virtual std::optional<StalenessTable> FinishStalenessTable(LiveRun::Summary* s) { return std::nullopt; }
};

// The trainer, or the replay (its tensors on CUDA device 0 for the gpu tier).
StatusOr<std::unique_ptr<ProducerWorkload>> MakeProducerWorkload(const LiveRun::Options& o);

// A consumer's loss per request.
class LossOracle {
 public:
  virtual ~LossOracle() = default;
  // `traffic_iteration`: the producer iteration whose drift the request's
  // input carries (< 0: undrifted). An error when the version cannot be
  // evaluated (e.g. a device version that cannot be copied to the host).
  virtual StatusOr<double> Loss(const transports::ModelVersion& version, int64_t request,
                                int64_t traffic_iteration) = 0;
};

// Consumer `rank`'s oracle: the trainer's test subset (each consumer from
// its own offset), or the replayed log's planning metric.
StatusOr<std::unique_ptr<LossOracle>> MakeLossOracle(const LiveRun::Options& o, int rank);

// Warm-up W: warmup_iterations, else warmup_fraction of [first, last].
int64_t WarmupOf(const LiveRun::Options& o, int64_t first, int64_t last);

// Bytes of the published model (replay: model_bytes; trainer: its MLP's F32 parameters).
uint64_t ExpectedModelBytes(const LiveRun::Options& o);

// True when the trainer's traffic drifts (every drift kind does: see
// DriftedSamples): consumers then need the producer's iteration.
bool DriftChangesTraffic(const LiveRun::Options& o);

// Sleeps until monotonic time `t`, checking `stop` (may be empty) every 50 ms.
void SleepUntil(double t, const std::function<bool()>& stop);

}  // namespace internal
}  // namespace workflow
}  // namespace viper
