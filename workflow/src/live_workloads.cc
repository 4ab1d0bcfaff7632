// The live roles' workloads (live_workloads.h): the trainer and the replay
// on the producer, the loss oracles on the consumers.
#include "live_workloads.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <utility>

#include "kept_models.h"
#include "viper/datasets/log_reader.h"
#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"
#include "viper/schedulers/scenario.h"
#include "viper/transports/device_memory.h"
#include "viper/workflow/mlp.h"
#include "viper/workflow/trainer.h"

namespace viper {
namespace workflow {
namespace internal {
namespace {

using transports::MonotonicSeconds;

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

class TrainerWorkload : public ProducerWorkload {
 public:
  // `keep_served`: keep a copy of the served version (the closed loop
  // re-measures it; other strategies never ask).
  TrainerWorkload(std::unique_ptr<Trainer> t, bool keep_served)
      : trainer_(std::move(t)), keep_served_(keep_served) {}
  int64_t first_iteration() const override { return 1; }
  int64_t total_iterations() const override { return trainer_->planned_iterations(); }
  int64_t iterations_per_epoch() const override { return trainer_->iterations_per_epoch(); }
  Status Step(LogRecord* record) override { return trainer_->Step(record); }
  const ModelState& model() const override { return trainer_->model().state(); }
  // The served version is a kept copy (a ModelState copy would share the
  // parameters the trainer goes on updating). A helper may be reading kept
  // copies (a calm point's publish): keeping one more leaves theirs where
  // they are (KeptModels).
  void Published(int64_t model_iteration) override {
    served_ = model_iteration;
    if (model_iteration != trainer_->iterations_done()) return;  // a re-publish: kept already
    if (keep_served_) kept_.Keep(model_iteration, trainer_->model());
    // The table keeps every published version (an exact row for each served version).
    trainer_->KeepCurrentVersion();
  }
  bool KeepCurrentModel() override {
    VIPER_CHECK(!aside_.job.valid());
    kept_.Keep(trainer_->iterations_done(), trainer_->model());
    return true;
  }
  std::optional<double> RevalidateKept(int64_t model_iteration) override {
    const TrafficState now = DriftTrafficState(trainer_->options(), trainer_->iterations_done());
    return kept_.Loss(model_iteration, now, [&](const Mlp& m) { return trainer_->Validate(m).mean_loss; });
  }
  bool BeginRemeasure(const std::vector<int64_t>& models, int64_t max_new) override {
    VIPER_CHECK(!aside_.job.valid());
    aside_ = Aside{};
    aside_.point = trainer_->iterations_done();
    aside_.state = DriftTrafficState(trainer_->options(), aside_.point);
    return StartRemeasure(models, max_new);
  }
  bool RemeasureMore(const std::vector<int64_t>& models, int64_t max_new) override {
    VIPER_CHECK(!aside_.job.valid());
    aside_.todo.clear();
    return StartRemeasure(models, max_new);
  }
  double RemeasureSeconds() const override {
    return aside_.job.valid() ? 0.0 : each_s_;  // written by the helper, read once it is joined
  }
  int64_t RemeasureNew() const override { return static_cast<int64_t>(aside_.todo.size()); }
  bool RemeasureDone() const override {
    return !aside_.job.valid() || aside_.job.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  std::vector<std::optional<double>> FinishRemeasure() override {
    if (aside_.job.valid()) {
      const std::vector<double> measured = aside_.job.get();
      for (size_t j = 0; j < measured.size(); ++j) {
        const auto [i, model] = aside_.todo[j];
        kept_.Record(model, aside_.state, measured[j]);
        aside_.losses[i] = measured[j];
      }
    }
    return std::move(aside_.losses);
  }
  const ModelState* KeptModel(int64_t model_iteration) const override {
    const Mlp* m = kept_.Find(model_iteration);
    return m == nullptr ? nullptr : &m->state();
  }
  void RetainKept(const std::vector<int64_t>& wanted) override {
    VIPER_CHECK(!aside_.job.valid());
    std::vector<int64_t> keep = wanted;
    if (served_) keep.push_back(*served_);
    kept_.Retain(keep);
  }
  void SummarizeKept(LiveRun::Summary* s) const override {
    s->kept_evaluations = kept_.evaluations();
    s->kept_reused = kept_.reused();
    s->kept_peak = kept_.peak();
    s->kept_peak_bytes = kept_.peak_bytes();
  }
  std::optional<StalenessTable> FinishStalenessTable(LiveRun::Summary* s) override {
    if (!trainer_->options().staleness_table) return std::nullopt;
    const double keep_s = trainer_->staleness_seconds();
    StalenessTable table = trainer_->FinishStalenessTable();
    table.source = "viper run";
    s->staleness_keep_s = keep_s;
    s->staleness_evaluate_s = trainer_->staleness_seconds() - keep_s;
    const int64_t extra = trainer_->staleness_extra_versions();
    s->staleness_versions_kept = static_cast<int64_t>(trainer_->staleness_versions().size()) + extra;
    s->staleness_bytes_peak =
        static_cast<uint64_t>(trainer_->staleness_versions_peak() + extra) * trainer_->model().SizeBytes();
    return table;
  }

 private:
  // The helper on `models` (those measured before on the point's traffic
  // state answered at once, at most `max_new` others), on the point's
  // sample: taken when the first job starts, still at the point (a later
  // one reuses it).
  bool StartRemeasure(const std::vector<int64_t>& models, int64_t max_new) {
    aside_.losses.assign(models.size(), std::nullopt);
    std::vector<const Mlp*> todo;
    for (size_t i = 0; i < models.size(); ++i) {
      if ((aside_.losses[i] = kept_.Known(models[i], aside_.state))) continue;
      if (static_cast<int64_t>(todo.size()) >= max_new) continue;
      if (const Mlp* m = kept_.Find(models[i])) {
        todo.push_back(m);
        aside_.todo.emplace_back(i, models[i]);
      }
    }
    if (todo.empty()) return false;
    if (!aside_.sample) {
      // The trainer re-gathers its own sample at the next validation point.
      VIPER_CHECK(trainer_->iterations_done() == aside_.point);
      aside_.sample = std::make_shared<const Sample>(trainer_->ValidationSampleNow());
    }
    // The helper reads the kept copies (none freed until FinishRemeasure)
    // and the point's sample.
    aside_.job = std::async(std::launch::async, [this, todo, sample = aside_.sample] {
      const double t0 = MonotonicSeconds();
      std::vector<double> losses;
      for (const Mlp* m : todo) losses.push_back(Evaluate(*m, sample->first, sample->second).mean_loss);
      each_s_ = (MonotonicSeconds() - t0) / static_cast<double>(todo.size());
      return losses;
    });
    return true;
  }
  std::unique_ptr<Trainer> trainer_;
  const bool keep_served_;
  KeptModels kept_;                // the served version's copy and those kept for re-publishing
  double each_s_ = 0;  // seconds per model, the helper's latest job (RemeasureSeconds)
  // The re-measurement running beside training (BeginRemeasure,
  // RemeasureMore): the point's iteration, traffic state and sample (once a
  // helper needed it), the answers so far, and for the helper's, (position,
  // model) and its job.
  using Sample = std::pair<Eigen::MatrixXf, std::vector<int32_t>>;
  struct Aside {
    int64_t point = 0;
    TrafficState state;
    std::shared_ptr<const Sample> sample;
    std::vector<std::optional<double>> losses;
    std::vector<std::pair<size_t, int64_t>> todo;
    std::future<std::vector<double>> job;
  } aside_;  // after each_s_: its job (which writes each_s_) is joined when it goes
  std::optional<int64_t> served_;  // the served model's iteration
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
  int64_t first_iteration() const override { return log_.first; }
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


// Requests cycle over the trainer's test subset as drifted at the request's
// traffic iteration: request j gets the kTestImagesPerRequest images from
// (j x kTestImagesPerRequest + offset) mod n of DriftedSamples(test,
// traffic), n its size, and its loss is their mean (live.h). A drift that acts on each image
// alone (label swap, rotation, recurring) drifts just that image (the same
// bits as the image of the drifted subset; a rotation of one image is cheap);
// one that acts on the set (class-incremental before its drift, a prior
// shift) drifts the whole subset, kept until the traffic state changes.
class TrainerLoss : public LossOracle {
 public:
  TrainerLoss(Trainer::Options trainer, Samples test, int64_t offset)
      : trainer_(std::move(trainer)), test_(std::move(test)), offset_(offset) {
    test_.GatherAll(&inputs_, &labels_);
  }
  StatusOr<double> Loss(const transports::ModelVersion& version, int64_t request,
                        int64_t traffic_iteration) override {
    if (!model_ || cached_version_ != version.state.metadata.version) {
      const std::string what = "version " + std::to_string(version.state.metadata.version);
      // gpu tier: the served version is in device memory; evaluate a host copy.
      StatusOr<ModelState> host = ModelState();
      if (version.memory == MemoryKind::kDevice) host = transports::CopyToHost(version.state);
      if (!host.ok()) return host.status().WithContext(what + ": copying it to host memory to serve it");
      auto m = Mlp::FromModelState(version.memory == MemoryKind::kDevice ? *host : version.state);
      if (!m.ok()) return m.status().WithContext(what + ": not a model of this trainer");
      model_ = std::make_unique<Mlp>(std::move(*m));
      cached_version_ = version.state.metadata.version;
    }
    Eigen::MatrixXf x;
    std::vector<int32_t> y;
    const TrafficState state =
        traffic_iteration >= 0 ? DriftTrafficState(trainer_, traffic_iteration) : TrafficState();
    // The request's images: kTestImagesPerRequest in a row of the n, cycling.
    auto images = [&](int64_t n) {
      std::vector<int64_t> at(kTestImagesPerRequest);
      for (int64_t i = 0; i < kTestImagesPerRequest; ++i) {
        at[static_cast<size_t>(i)] = (request * kTestImagesPerRequest + offset_ + i) % n;
      }
      return at;
    };
    if (state.Identity()) {
      const std::vector<int64_t> at = images(static_cast<int64_t>(labels_.size()));
      x.resize(inputs_.rows(), static_cast<Eigen::Index>(at.size()));
      for (size_t i = 0; i < at.size(); ++i) {
        x.col(static_cast<Eigen::Index>(i)) = inputs_.col(at[i]);
        y.push_back(labels_[static_cast<size_t>(at[i])]);
      }
    } else if (!state.only_initial_classes && state.prior_progress == 0.0) {
      DriftedSamples(trainer_, test_.Subset(images(test_.size())), state).GatherAll(&x, &y);
    } else {
      if (!drifted_ || !(drifted_state_ == state)) {
        drifted_ = DriftedSamples(trainer_, test_, state);
        drifted_state_ = state;
      }
      if (drifted_->empty()) return FailedPreconditionError("the drifted test subset is empty");
      drifted_->Subset(images(drifted_->size())).GatherAll(&x, &y);
    }
    return Evaluate(*model_, x, y, kTestImagesPerRequest).mean_loss;
  }

 private:
  Trainer::Options trainer_;
  Samples test_;
  Eigen::MatrixXf inputs_;
  std::vector<int32_t> labels_;
  int64_t offset_ = 0;
  std::unique_ptr<Mlp> model_;
  uint64_t cached_version_ = 0;
  std::optional<Samples> drifted_;  // the whole subset drifted as at drifted_state_
  TrafficState drifted_state_;
};

class ReplayLoss : public LossOracle {
 public:
  explicit ReplayLoss(schedulers::LossCurve curve) : curve_(std::move(curve)) {}
  StatusOr<double> Loss(const transports::ModelVersion& version, int64_t, int64_t) override {
    const int64_t it = version.state.metadata.iteration;
    const int64_t c = std::clamp(it, curve_.first_iteration(), curve_.last_iteration());
    return curve_.at(c);
  }

 private:
  schedulers::LossCurve curve_;
};


}  // namespace

StatusOr<std::unique_ptr<ProducerWorkload>> MakeProducerWorkload(const LiveRun::Options& o) {
  if (o.workload == LiveRun::Workload::kTrainer) {
    Trainer::Options to = o.trainer;
    to.log_test = false;  // the consumers measure the truth on the test subset
    // The table's evaluations wait until training is over (FinishStalenessTable).
    to.staleness_deferred = to.staleness_table;
    VIPER_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(to));
    return std::unique_ptr<ProducerWorkload>(std::make_unique<TrainerWorkload>(
        std::move(trainer), o.strategy == schedulers::StrategyKind::kOnline));
  }
  VIPER_ASSIGN_OR_RETURN(ReplayLog rl, LoadReplayLog(o));
  auto replay = std::make_unique<ReplayWorkload>(std::move(rl), o.model_bytes, o.replay_time_scale, o.should_stop);
  if (o.tier == transports::Tier::kGpu) VIPER_RETURN_IF_ERROR(replay->MoveModelToDevice());
  return std::unique_ptr<ProducerWorkload>(std::move(replay));
}

StatusOr<std::unique_ptr<LossOracle>> MakeLossOracle(const LiveRun::Options& o, int rank) {
  if (o.workload == LiveRun::Workload::kTrainer) {
    // The test subset only: disjoint from the validation subset the producer plans on.
    VIPER_ASSIGN_OR_RETURN(Trainer::EvaluationSets sets, Trainer::LoadEvaluationSets(o.trainer));
    if (sets.test.empty()) return InvalidArgumentError("consumer: the trainer's test subset is empty");
    const int64_t offset = (static_cast<int64_t>(rank) - 1) * 997 % sets.test.size();
    return std::unique_ptr<LossOracle>(std::make_unique<TrainerLoss>(o.trainer, std::move(sets.test), offset));
  }
  VIPER_ASSIGN_OR_RETURN(ReplayLog rl, LoadReplayLog(o));
  predictor::LearningCurvePredictor::Options po;
  const auto metric = ChooseMetric(rl.log, WarmupOf(o, rl.first, rl.last), po.min_points);
  VIPER_ASSIGN_OR_RETURN(auto points, predictor::ExtractCurve(rl.log, metric));
  VIPER_ASSIGN_OR_RETURN(auto curve, schedulers::InterpolateCurve(points, rl.first, rl.last));
  return std::unique_ptr<LossOracle>(std::make_unique<ReplayLoss>(std::move(curve)));
}

int64_t WarmupOf(const LiveRun::Options& o, int64_t first, int64_t last) {
  if (o.warmup_iterations > 0) return o.warmup_iterations;
  return first + static_cast<int64_t>(std::llround(o.warmup_fraction * static_cast<double>(last - first)));
}


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


bool DriftChangesTraffic(const LiveRun::Options& o) {
  return o.workload == LiveRun::Workload::kTrainer && o.trainer.drift != Trainer::Drift::kNone;
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

// Replay model: F32 tensors of at most 256 MiB summing to `bytes` (rounded
// down to 4 bytes), filled (pre-touched) with a pattern.

}  // namespace internal
}  // namespace workflow
}  // namespace viper
