// The real training workload: an MLP (mlp.h) trained on Fashion-MNIST with
// mini-batch SGD with momentum or Adam, optionally on a cosine learning-rate
// schedule and on a class-incremental stream (drift). Deterministic given a
// seed: the same options give the same losses, iteration by iteration.
//
// Iterations are numbered from 1. An epoch is one pass over the current
// training pool (the remainder that does not fill a batch is skipped); the
// pool is reshuffled at each epoch. The held-out validation set is a fixed
// subset (the first `val_samples` images of the test split, all 10 classes).
#pragma once

#include <Eigen/Core>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/core/training_log.h"
#include "viper/workflow/fashion_mnist.h"
#include "viper/workflow/mlp.h"
#include "viper/workflow/trainer_log.h"

namespace viper {
namespace workflow {

class Trainer {
 public:
  enum class Optimizer { kSgd, kAdam };
  static const char* ToString(Optimizer optimizer);
  static StatusOr<Optimizer> OptimizerFromString(const std::string& name);  // "sgd", "adam"

  enum class Drift {
    kNone,              // every iteration draws from all classes
    kClassIncremental,  // classes 0..drift_initial_classes-1 first, all classes from drift_at_iteration on
  };
  static const char* ToString(Drift drift);
  static StatusOr<Drift> DriftFromString(const std::string& name);  // "none", "class-incremental"

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
    // Stream of training data.
    Drift drift = Drift::kNone;
    // Classes 0..drift_initial_classes-1 are seen before the drift (1..9).
    int64_t drift_initial_classes = 5;
    // First iteration that draws from all classes (> 1; required with drift).
    int64_t drift_at_iteration = 0;
    // Seed of the weight initialisation and of the shuffling.
    uint64_t seed = 1;
    // Validate every this many iterations (and at the last one); 0 = never.
    int64_t val_every_iterations = 50;
    // Size of the fixed held-out subset (first images of the test split).
    int64_t val_samples = 1000;

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
    double seconds = 0.0;                 // wall time of the run
    double seconds_per_iteration = 0.0;   // seconds / iterations
    double samples_per_second = 0.0;      // training samples per second
    std::optional<float> first_train_loss, last_train_loss;
    std::optional<double> last_val_loss, last_val_accuracy;

    // One line: iterations, time, losses, accuracy.
    std::string BriefReport() const;
  };

  // Called after every iteration with its record; return false to stop.
  using IterationCallback = std::function<bool(const LogRecord& record, const Trainer& trainer)>;

  // Loads Fashion-MNIST from options.dataset_dir.
  static StatusOr<std::unique_ptr<Trainer>> Create(const Options& options);
  // Trains on `train` and validates on `validation` (options.dataset_dir,
  // train_samples and val_samples are ignored). Tests pass small sets.
  static StatusOr<std::unique_ptr<Trainer>> Create(const Options& options, Samples train, Samples validation);

  // One iteration: next mini-batch, forward, backward, update; validation
  // when due. Fills `record` (wall time since the first Step). Fails when
  // done().
  Status Step(LogRecord* record);
  // Steps until done() or the callback says stop, writing every record to
  // `log` when it is non-null.
  StatusOr<Summary> Run(TrainingLogWriter* log, const IterationCallback& callback = nullptr);

  const Options& options() const { return options_; }
  const Mlp& model() const { return model_; }
  int64_t planned_iterations() const { return planned_iterations_; }
  int64_t iterations_done() const { return iteration_; }
  bool done() const { return iteration_ >= planned_iterations_; }
  int64_t iterations_per_epoch() const;
  // Learning rate used by the last Step (or the first one's, before any).
  double learning_rate() const { return last_learning_rate_; }
  // Classes the stream draws from at iteration `iteration` (1-based).
  std::vector<int> ActiveClasses(int64_t iteration) const;
  // The held-out validation samples.
  const Samples& validation() const { return validation_; }
  // Loss and accuracy of the current parameters on the validation subset.
  Evaluation Validate() const;

 private:
  Trainer(const Options& options, Mlp model);
  void StartEpoch(bool all_classes);
  double LearningRateAt(int64_t iteration) const;
  void ApplyUpdate(double learning_rate);

  Options options_;
  Mlp model_;
  Samples train_;
  Samples validation_;
  Eigen::MatrixXf val_inputs_;
  std::vector<int32_t> val_labels_;
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
  std::chrono::steady_clock::time_point start_;
};

}  // namespace workflow
}  // namespace viper
