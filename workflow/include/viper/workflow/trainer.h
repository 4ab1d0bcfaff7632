// The real training workload: an MLP (mlp.h) trained on Fashion-MNIST with
// mini-batch SGD with momentum or Adam, optionally on a cosine learning-rate
// schedule and on a drifting stream (classes arriving, two labels swapped,
// inputs rotating, a recurring rotated domain, or a shifting class prior).
// Deterministic given a seed: the same options give the same losses,
// iteration by iteration. Fine-tuning: start from saved parameters
// (Options::init_model_path) and keep some tensors frozen
// (Options::freeze_layers, freeze_tensors).
//
// Iterations are numbered from 1. An epoch is one pass over the current
// training pool (the remainder that does not fill a batch is skipped); the
// pool is reshuffled at each epoch.
//
// Observed versus truth (DESIGN.md §1): two disjoint fixed subsets of the
// Fashion-MNIST test split are evaluated. Validation = the first
// `val_samples` images: what the producer sees. Test = the next
// `test_samples` images: what the inference traffic costs (consumers answer
// requests from it). Both see the drift of the iteration they are evaluated
// at (DriftedSamples): the traffic drifts with the training stream.
//
// Staleness table (DESIGN.md §1, core/staleness_table.h): with
// Options::staleness_table the trainer keeps a float32 copy of the parameters
// at every validation point and evaluates every kept version on that point's
// drifted validation and test samples, off the timed training path.
#pragma once

#include <Eigen/Core>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "viper/core/staleness_table.h"
#include "viper/core/status.h"
#include "viper/core/training_log.h"
#include "viper/workflow/fashion_mnist.h"
#include "viper/workflow/mlp.h"
#include "viper/workflow/trainer_log.h"

namespace viper {
namespace workflow {

struct TrafficState;  // below: the traffic as the drift has it at an iteration

class Trainer {
 public:
  enum class Optimizer { kSgd, kAdam };
  static const char* ToString(Optimizer optimizer);
  static StatusOr<Optimizer> OptimizerFromString(const std::string& name);  // "sgd", "adam"

  // Every kind drifts the training stream and the traffic (validation and
  // test samples) alike; see DriftedSamples for the traffic side.
  enum class Drift {
    kNone,              // every iteration draws from all classes
    kClassIncremental,  // classes 0..drift_initial_classes-1 first, all classes from drift_at_iteration on
                        // (the traffic holds only the classes seen so far)
    kLabelSwap,         // from drift_at_iteration on, the labels of drift_swap_classes are exchanged
    kRotation,          // inputs rotated counter-clockwise by an angle growing linearly from 0 at
                        // drift_at_iteration to drift_rotation_degrees drift_duration_iterations later
    kRecurring,         // a domain that comes back: inputs rotated by drift_rotation_degrees during
                        // alternate periods of drift_period_iterations from drift_at_iteration on
                        // (drift_domains > 2: by 1, 2, ... times it in turn, then upright)
                        // (rotated, upright, rotated, ...), so an older version can measure better again
    kPriorShift,        // the class prior moves linearly from the data's own frequencies to one that puts
                        // drift_prior_mass on drift_prior_classes, over drift_duration_iterations from
                        // drift_at_iteration (training draws by class; the traffic is resampled)
  };
  static const char* ToString(Drift drift);
  // "none", "class-incremental", "label-swap", "rotation", "recurring", "prior-shift".
  static StatusOr<Drift> DriftFromString(const std::string& name);

  struct Options {
    // Directory with the Fashion-MNIST idx.gz files.
    std::string dataset_dir = DefaultFashionMnistDir();
    // Use only the first N training images (0 = all 60,000).
    int64_t train_samples = 0;
    // Hidden-layer widths of the MLP, input side first.
    std::vector<int64_t> hidden_widths = {256};
    // Update rule.
    Optimizer optimizer = Optimizer::kSgd;
    // Peak learning rate (per-step multiplier of the update).
    double learning_rate = 0.05;
    // SGD momentum coefficient in [0, 1) (PyTorch convention: v = m*v + g; p -= lr*v).
    double momentum = 0.9;
    // Adam first- and second-moment decay rates in [0, 1), and epsilon > 0.
    double adam_beta1 = 0.9;
    double adam_beta2 = 0.999;
    double adam_epsilon = 1e-8;
    // Samples per mini-batch.
    int64_t batch_size = 64;
    // Length of the run in epochs of the full training set
    // (epochs * floor(train_samples / batch_size) iterations).
    int64_t epochs = 3;
    // Stop after this many iterations (0 = no cap).
    int64_t max_iterations = 0;
    // Cosine decay of the learning rate from learning_rate to 0 over the
    // planned iterations: lr_i = lr * (1 + cos(pi * (i - 1) / N)) / 2.
    bool cosine_schedule = false;
    // Step changes of the learning rate (PyTorch's MultiStepLR, with a factor
    // per milestone): from iteration `iteration` on, the rate is multiplied
    // by `factor` (cumulative, on top of the cosine schedule). Iterations
    // strictly increasing and >= 2, factors finite and > 0. A factor above
    // 1 can make the run diverge: that is how the shipped collapse run was
    // made (a model that must never be published).
    struct LrMilestone {
      int64_t iteration = 0;
      double factor = 1.0;
    };
    std::vector<LrMilestone> lr_milestones;
    // A non-finite training loss: false = stop with an error naming the
    // iteration; true = go on training the diverged model as a PyTorch loop
    // without a NaN check would (its weights turn NaN and stay so), logging
    // its non-finite losses, so that a log and a staleness table of a run
    // that diverges can be made (read them with --non-finite diverged).
    bool continue_after_divergence = false;
    // Stream of training data.
    Drift drift = Drift::kNone;
    // First iteration of the drift (>= 2; required with any drift): the first
    // that draws from all classes, that sees the swapped labels, that starts
    // rotating, that is rotated (recurring) or whose class prior starts moving.
    int64_t drift_at_iteration = 0;
    // Class-incremental: classes 0..drift_initial_classes-1 are seen before
    // the drift (1..9).
    int64_t drift_initial_classes = 5;
    // Label swap: the two classes whose labels are exchanged (0..9, distinct).
    // Default T-shirt/top (0) and Shirt (6).
    int drift_swap_class_a = 0;
    int drift_swap_class_b = 6;
    // Label swap, several: the swap is undone and redone every
    // drift_swap_period_iterations from drift_at_iteration on (swapped,
    // original, swapped, ...; the labels return, as a recurring domain's
    // inputs do). 0 (the default) = swapped once, for good; else >= 1.
    int64_t drift_swap_period_iterations = 0;
    // Rotation: final angle in degrees, counter-clockwise (finite, |angle| <= 360),
    // reached drift_duration_iterations after drift_at_iteration (>= 0; 0 =
    // at once). Bilinear interpolation about the image centre, 0 outside.
    // Recurring: the angle of the rotated periods. Prior shift: the duration
    // of the move from the data's prior to the target prior.
    double drift_rotation_degrees = 90.0;
    int64_t drift_duration_iterations = 1000;
    // Recurring: length in iterations of each rotated or upright period (>= 1).
    int64_t drift_period_iterations = 500;
    // Recurring: how many domains take turns, in [2, 8]: the upright one and
    // the inputs rotated by 1, 2, ..., drift_domains - 1 times
    // drift_rotation_degrees. From drift_at_iteration the periods run 1x,
    // 2x, ..., then upright, then 1x again (2: rotated, upright, rotated, ...).
    int64_t drift_domains = 2;
    // Prior shift: the classes that gain weight (distinct, 0..9, at least one,
    // not all ten; default the upper-body garments T-shirt/top, Pullover, Coat,
    // Shirt) and the share of the target prior they hold together, in
    // (0, 1] (the other classes share the rest equally).
    std::vector<int> drift_prior_classes = {0, 2, 4, 6};
    double drift_prior_mass = 0.9;
    // Seed of the weight initialisation and of the shuffling.
    uint64_t seed = 1;
    // Fine-tuning: start from the parameters in this .safetensors file
    // instead of the seeded initialisation (empty = fresh parameters). It
    // must hold exactly this MLP's tensors ("0.weight", "0.bias", ...), F32,
    // with the shapes the input size, hidden_widths and classes imply (e.g. a
    // file of `viper train --save-model` with the same --hidden), every value
    // finite. Create fails naming the file, the tensor and the value.
    std::string init_model_path;
    // Frozen tensors take no step: no gradient update and no optimiser state
    // (no momentum, no Adam moments), so their bytes are identical in every
    // version. freeze_layers = N freezes layers 0..N-1 (weight and bias each,
    // input side first; fewer than the MLP's layers, so the output layer
    // always trains); freeze_tensors names tensors to freeze in addition
    // ("0.weight", "2.bias", ...: MlpWeightName / MlpBiasName of an existing
    // layer, each once). At least one tensor must stay trainable.
    int64_t freeze_layers = 0;
    std::vector<std::string> freeze_tensors;
    // Validate (and test) every this many iterations and at the last one; 0 = never.
    int64_t val_every_iterations = 50;
    // Validation subset: the first val_samples images of the test split.
    int64_t val_samples = 2000;
    // Test subset: the next test_samples images of the test split (disjoint
    // from validation; val_samples + test_samples <= 10,000). 0 = none.
    int64_t test_samples = 5000;
    // Evaluate the test subset whenever validating and log it (test_loss,
    // test_accuracy). False keeps the subset (test(), Test()) but leaves the
    // log's test fields empty, e.g. where the consumers measure the truth.
    bool log_test = true;
    // Record the staleness table (staleness_table()): needs validation
    // (val_every_iterations > 0) and a test subset (test_samples > 0).
    bool staleness_table = false;
    // Versions the table keeps at most (0 = all; else >= 2). Over the bound
    // the kept versions are thinned evenly: only validation points whose
    // index is a multiple of a stride that doubles each time, plus the newest.
    // Each kept version costs model_bytes of float32 copies.
    int64_t staleness_max_versions = 0;
    // Staleness table, deferred: at each validation point only keep the
    // version (a float32 copy of the parameters) and remember the point;
    // FinishStalenessTable() evaluates every pair after training, off the
    // training path (the live producer: after its timed window). The rows on
    // validation points are those of the immediate table restricted to the
    // versions still kept at the end (with staleness_max_versions 0 all of
    // them, bit for bit; with a bound, versions thinned away during the run
    // have no rows, their diagonal included). It adds traffic knots s - 1 and
    // s around each step of the traffic between validation points (see
    // FinishStalenessTable), and KeepCurrentVersion's versions.
    bool staleness_deferred = false;

    // False (and a message naming the field) when a value is out of range.
    bool IsValid(std::string* error) const;
  };

  struct Summary {
    std::string termination;              // "completed", "max_iterations", "stopped by callback"
    int64_t iterations = 0;               // iterations run
    int64_t epochs_started = 0;           // passes over the pool begun
    int64_t iterations_per_epoch = 0;     // over the full training pool
    int64_t parameters = 0;               // number of parameters
    std::size_t model_bytes = 0;          // parameter bytes (float32)
    int64_t frozen_parameters = 0;        // parameters of frozen tensors (never updated)
    double seconds = 0.0;                 // wall time of the run, less test_seconds
    double seconds_per_iteration = 0.0;   // seconds / iterations
    double samples_per_second = 0.0;      // training samples per second
    std::optional<float> first_train_loss, last_train_loss;
    std::optional<double> last_val_loss, last_val_accuracy;
    std::optional<double> last_test_loss, last_test_accuracy;
    // Seconds spent evaluating the test subset. They stand for the
    // consumers' traffic, not for the producer's work: `seconds` and the
    // records' wall_time_s exclude them (validation is included).
    double test_seconds = 0.0;
    // Staleness table (only with Options::staleness_table): its rows, the
    // versions kept at the end and at most at once, the bytes those copies
    // took at most (peak versions x model_bytes), the seconds spent
    // evaluating kept versions (excluded from `seconds` and wall_time_s like
    // test_seconds), the evaluations run and those reused because the
    // traffic was the same as at an earlier point (identical bits).
    int64_t staleness_rows = 0;
    int64_t staleness_versions_kept = 0;
    int64_t staleness_versions_peak = 0;
    std::size_t staleness_bytes_peak = 0;
    double staleness_seconds = 0.0;
    int64_t staleness_evaluations = 0;
    int64_t staleness_evaluations_reused = 0;

    // One line: iterations, time, losses, accuracy.
    std::string BriefReport() const;
  };

  // Called after every iteration with its record; return false to stop.
  using IterationCallback = std::function<bool(const LogRecord& record, const Trainer& trainer)>;

  // The validation and test subsets Create(options) uses: images
  // [0, val_samples) and [val_samples, val_samples + test_samples) of the
  // Fashion-MNIST test split, undrifted. Consumers that answer requests load
  // the test subset with this.
  struct EvaluationSets {
    Samples validation;
    Samples test;
  };
  static StatusOr<EvaluationSets> LoadEvaluationSets(const Options& options);

  // Loads Fashion-MNIST from options.dataset_dir.
  static StatusOr<std::unique_ptr<Trainer>> Create(const Options& options);
  // Trains on `train`, validates on `validation` and tests on `test`
  // (options.dataset_dir, train_samples, val_samples and test_samples are
  // ignored; `test` may be empty). Tests pass small sets.
  static StatusOr<std::unique_ptr<Trainer>> Create(const Options& options, Samples train, Samples validation,
                                                   Samples test = Samples());
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One iteration: next mini-batch, forward, backward, update; validation
  // when due. Fills `record` (wall time since the first Step). Fails when
  // done().
  Status Step(LogRecord* record);
  // Steps until done() or the callback says stop, writing every record to
  // `log` when it is non-null.
  StatusOr<Summary> Run(TrainingLogWriter* log, const IterationCallback& callback = nullptr);

  const Options& options() const { return options_; }
  const Mlp& model() const { return model_; }
  // Whether parameter tensor `index` (model().state() order) is frozen, and
  // the names of the frozen tensors in that order.
  bool frozen(int index) const { return frozen_[static_cast<std::size_t>(index)]; }
  std::vector<std::string> frozen_tensors() const;
  int64_t frozen_parameters() const;
  int64_t planned_iterations() const { return planned_iterations_; }
  int64_t iterations_done() const { return iteration_; }
  bool done() const { return iteration_ >= planned_iterations_; }
  int64_t iterations_per_epoch() const;
  // Learning rate used by the last Step (or the first one's, before any).
  double learning_rate() const { return last_learning_rate_; }
  // Classes the stream draws from at iteration `iteration` (1-based).
  std::vector<int> ActiveClasses(int64_t iteration) const;
  // The held-out validation and test samples, undrifted.
  const Samples& validation() const { return validation_; }
  const Samples& test() const { return test_; }
  // Loss and accuracy of the current parameters on the validation / test
  // subset as the drift has it at iterations_done() (empty Evaluation when
  // the subset is empty).
  Evaluation Validate() const;
  Evaluation Test() const;
  // Another model (a kept copy) on the validation subset as drifted at
  // iterations_done(): the same evaluation as Validate(), so its loss
  // compares with the current model's bit for bit.
  Evaluation Validate(const Mlp& model) const;
  // A copy of the validation subset as drifted at iterations_done() (inputs
  // one column per sample, labels): what Validate(model) evaluates on, for a
  // helper thread that re-measures kept models while training goes on
  // (LiveRun::Options::remeasure_beside).
  std::pair<Eigen::MatrixXf, std::vector<int32_t>> ValidationSampleNow() const;
  // `samples` as the drift has it at `iteration`: see DriftedSamples.
  Samples DriftedView(const Samples& samples, int64_t iteration) const;
  // The staleness table so far (Options::staleness_table), rows sorted by
  // (version_iteration, traffic_iteration); empty without it.
  StalenessTable staleness_table() const;
  // Deferred table, unbounded (staleness_max_versions 0): keeps the current
  // parameters as one more version of the table, never thinned, when the
  // current iteration is not a validation point (those are kept already):
  // the live producer keeps each version it publishes, so that every served
  // version is an exact row rather than interpolated between validation
  // points. FinishStalenessTable evaluates it on its own iteration's traffic
  // (its diagonal) and on every later validation point's. One model copy
  // each. No-op otherwise.
  void KeepCurrentVersion();
  // Versions kept by KeepCurrentVersion.
  int64_t staleness_extra_versions() const;
  // Deferred table (Options::staleness_deferred): evaluates every kept
  // version at every validation point seen so far (v <= t) and returns the
  // table (staleness_table()). Its seconds count in staleness_seconds().
  StalenessTable FinishStalenessTable();
  // Seconds spent on the staleness table so far (copies and evaluations),
  // and the most versions it has kept at once.
  double staleness_seconds() const { return staleness_seconds_; }
  int64_t staleness_versions_peak() const { return staleness_peak_; }
  // Iterations of the versions kept now, oldest first.
  std::vector<int64_t> staleness_versions() const;
  // Bytes of the kept versions' parameters now (versions x model bytes).
  std::size_t staleness_bytes() const;

 private:
  struct Traffic;      // a drifted sample, gathered
  struct KeptVersion;  // a version the staleness table keeps
  Trainer(const Options& options, Mlp model);
  // `model` on the validation (test = false) or test subset as drifted at `iteration`.
  Evaluation EvaluateOn(const Mlp& model, bool test, int64_t iteration) const;
  // The validation (test = false) or test subset drifted to `state`.
  const Traffic& Gathered(bool test, const TrafficState& state) const;
  double LearningRateAt(int64_t iteration) const;
  void ApplyUpdate(double learning_rate);
  // The drifting stream (trainer_drift.cc): the drift's fields of
  // Options::IsValid; Create's check of the training samples against the
  // drift (rotation needs square images) and its pools of the drift's classes
  // (an error when the pre-drift classes fill no batch); iteration
  // `iteration`'s batch into batch_inputs_ / batch_labels_ as the drift has
  // it (class-incremental epochs, draws by class from the shifting prior,
  // labels swapped, images rotated).
  static bool DriftOptionsValid(const Options& options, std::string* error);
  static Status CheckDriftTrainingSamples(const Options& options, const Samples& train);
  Status SetUpDriftPools();
  void NextBatch(int64_t iteration);
  void StartEpoch(bool all_classes);
  void DrawPriorBatch(int64_t iteration);
  // The staleness table (trainer_staleness.cc).
  void RecordStaleness(int64_t iteration);
  void KeepStalenessVersion(int64_t iteration);
  void EvaluateKeptVersions(int64_t iteration);
  void EvaluateVersion(KeptVersion& version, int64_t iteration);
  void SummarizeStaleness(Summary* summary) const;  // Run's staleness fields

  Options options_;
  Mlp model_;
  Samples train_;
  Samples validation_;
  Samples test_;
  Eigen::MatrixXf val_inputs_, test_inputs_;  // undrifted, gathered once
  std::vector<int32_t> val_labels_, test_labels_;
  double test_seconds_ = 0.0;
  mutable std::unique_ptr<Traffic> val_traffic_, test_traffic_;  // the last drifted samples gathered
  std::vector<KeptVersion> kept_;                                // staleness table: kept versions
  std::vector<KeptVersion> extra_kept_;                          // KeepCurrentVersion's, by iteration
  std::vector<StalenessRecord> staleness_rows_;
  std::vector<int64_t> staleness_pending_;  // deferred: validation points not evaluated yet
  int64_t staleness_stride_ = 1;  // kept: validation points whose index is a multiple of it, and the newest
  int64_t staleness_peak_ = 0;
  int64_t staleness_evaluations_ = 0, staleness_reused_ = 0;
  double staleness_seconds_ = 0.0;
  int64_t validation_points_ = 0;  // validation points so far
  std::vector<std::vector<int64_t>> class_pools_;  // prior shift: training indices per class, shuffled
  std::vector<std::size_t> class_positions_;
  std::vector<double> train_class_shares_;  // prior shift: the training pool's own class frequencies
  std::vector<int64_t> batch_indices_;
  bool class_draws_ = false;  // prior shift: batches are drawn by class
  std::vector<int64_t> initial_pool_;  // indices of the pre-drift classes
  std::vector<int64_t> pool_;          // indices of the current epoch, shuffled
  int64_t pool_position_ = 0;
  bool all_classes_ = true;
  int64_t epoch_ = -1;
  int64_t iteration_ = 0;
  int64_t planned_iterations_ = 0;
  double last_learning_rate_ = 0.0;
  std::mt19937_64 data_rng_;
  Mlp::Buffers gradients_, moment1_, moment2_;
  Mlp::Workspace workspace_;
  Eigen::MatrixXf batch_inputs_;
  std::vector<int32_t> batch_labels_;
  std::vector<bool> frozen_;  // per parameter tensor: no update (Options::freeze_*)
  std::chrono::steady_clock::time_point start_;
};

// The parameters of `path` (a .safetensors file) checked against the MLP
// `expected` describes and copied into it: exactly its tensors, F32, the
// same shapes, every value finite. Errors name the file, the tensor and,
// for a bad value, its position and value. Trainer::Create uses it for
// Options::init_model_path.
Status LoadMlpParameters(const std::string& path, Mlp* expected);
// Which parameter tensors of an MLP with `layers` layers the options freeze
// (MlpWeightName/MlpBiasName order: 0.weight, 0.bias, 2.weight, ...); an
// unknown or repeated name is InvalidArgument naming it and the valid ones.
StatusOr<std::vector<bool>> FrozenTensorMask(const Trainer::Options& options, int layers);

// What the drift does to the traffic at one iteration. Equal states give
// equal drifted samples, bit for bit (DriftedSamples is a function of it),
// so an evaluation on one can stand for the other.
struct TrafficState {
  bool only_initial_classes = false;  // class-incremental before the drift: classes 0..k-1 only
  bool swapped = false;               // label swap
  double rotation_degrees = 0.0;      // rotation, recurring
  double prior_progress = 0.0;        // prior shift: 0 = the data's own prior .. 1 = the target
  bool Identity() const {
    return !only_initial_classes && !swapped && rotation_degrees == 0.0 && prior_progress == 0.0;
  }
  bool operator==(const TrafficState& o) const {
    return only_initial_classes == o.only_initial_classes && swapped == o.swapped &&
           rotation_degrees == o.rotation_degrees && prior_progress == o.prior_progress;
  }
};
TrafficState DriftTrafficState(const Trainer::Options& options, int64_t iteration);

// The drift of `options` at `iteration` (1-based) applied to a set of samples
// (the traffic as it is then). Class-incremental: before drift_at_iteration
// only the samples of classes 0..drift_initial_classes-1, in order (the
// traffic holds only the classes seen so far), all from it on. Label swap:
// the two labels exchanged from drift_at_iteration on. Rotation, recurring:
// every image rotated by DriftRotationDegrees (pixels rounded back to
// bytes). Prior shift: the same number of samples, resampled so that class c
// has its share of DriftClassPrior (largest remainder), taking class c's
// samples in their order and cycling when it needs more than it has, classes
// interleaved evenly; at progress 0 `samples` unchanged. Class-incremental
// and prior shift act on the set as a whole (a consumer drifts the whole
// traffic sample, then draws requests from it). Rotation needs square images.
Samples DriftedSamples(const Trainer::Options& options, const Samples& samples, int64_t iteration);
Samples DriftedSamples(const Trainer::Options& options, const Samples& samples, const TrafficState& state);
// The rotation angle in degrees at `iteration` (0 unless Drift::kRotation or
// Drift::kRecurring).
double DriftRotationDegrees(const Trainer::Options& options, int64_t iteration);
// With Drift::kLabelSwap: true from drift_at_iteration on, or, with a swap
// period, during every other period from it (the first swapped).
bool DriftSwapsLabels(const Trainer::Options& options, int64_t iteration);
// Prior shift: how far the prior has moved at `iteration`, in [0, 1]
// (0 before drift_at_iteration, 1 from drift_duration_iterations later on;
// 0 unless Drift::kPriorShift).
double DriftPriorProgress(const Trainer::Options& options, int64_t iteration);
// Prior shift: the class prior at `progress` for data whose own class
// frequencies are `own` (10 values summing to 1): (1 - progress) * own +
// progress * target, target = drift_prior_mass shared equally by
// drift_prior_classes, the rest shared equally by the other classes.
std::vector<double> DriftClassPrior(const Trainer::Options& options, const std::vector<double>& own, double progress);

// Private to Trainer, not part of the API: a version the staleness table
// keeps (trainer_staleness.cc fills Trainer::kept_ with them). Defined here,
// after TrafficState, because Trainer's constructor and destructor
// (trainer.cc) need it complete.
struct Trainer::KeptVersion {
  int64_t iteration = 0;  // the version: the model as after this iteration
  int64_t point = 0;      // index of its validation point (0 = the first)
  Mlp model;
  // Evaluations already made, by the traffic they were made on (equal
  // traffic, equal bits: reused rather than recomputed).
  struct Measured {
    TrafficState traffic;
    Evaluation val, test;
  };
  std::vector<Measured> measured;
};

}  // namespace workflow
}  // namespace viper
