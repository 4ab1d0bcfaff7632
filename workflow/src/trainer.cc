#include "viper/workflow/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace viper {
namespace workflow {
namespace {

// Separates the shuffling stream from the initialisation stream, so that a
// change of width does not change the order of the data.
constexpr uint64_t kDataSeedSalt = 0x9E3779B97F4A7C15ull;
constexpr double kPi = 3.14159265358979323846;

}  // namespace

const char* Trainer::ToString(Optimizer optimizer) { return optimizer == Optimizer::kSgd ? "sgd" : "adam"; }

StatusOr<Trainer::Optimizer> Trainer::OptimizerFromString(const std::string& name) {
  if (name == "sgd") return Optimizer::kSgd;
  if (name == "adam") return Optimizer::kAdam;
  return InvalidArgumentError("unknown optimizer '" + name + "' (expected sgd or adam)");
}

const char* Trainer::ToString(Drift drift) {
  switch (drift) {
    case Drift::kNone: return "none";
    case Drift::kClassIncremental: return "class-incremental";
    case Drift::kLabelSwap: return "label-swap";
    case Drift::kRotation: return "rotation";
  }
  return "?";
}

StatusOr<Trainer::Drift> Trainer::DriftFromString(const std::string& name) {
  for (Drift d : {Drift::kNone, Drift::kClassIncremental, Drift::kLabelSwap, Drift::kRotation}) {
    if (name == ToString(d)) return d;
  }
  return InvalidArgumentError("unknown drift '" + name +
                              "' (expected none, class-incremental, label-swap or rotation)");
}

double DriftRotationDegrees(const Trainer::Options& o, int64_t iteration) {
  if (o.drift != Trainer::Drift::kRotation || iteration < o.drift_at_iteration) return 0.0;
  if (o.drift_duration_iterations <= 0) return o.drift_rotation_degrees;
  const double progress = static_cast<double>(iteration - o.drift_at_iteration) /
                          static_cast<double>(o.drift_duration_iterations);
  return o.drift_rotation_degrees * std::min(1.0, progress);
}

bool DriftSwapsLabels(const Trainer::Options& o, int64_t iteration) {
  return o.drift == Trainer::Drift::kLabelSwap && iteration >= o.drift_at_iteration;
}

Samples DriftedSamples(const Trainer::Options& o, const Samples& samples, int64_t iteration) {
  if (DriftSwapsLabels(o, iteration)) return samples.WithLabelsSwapped(o.drift_swap_class_a, o.drift_swap_class_b);
  const double degrees = DriftRotationDegrees(o, iteration);
  if (degrees != 0.0) return samples.Rotated(degrees);
  return samples;
}

bool Trainer::Options::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  auto in_unit = [](double x) { return std::isfinite(x) && x >= 0.0 && x < 1.0; };
  if (train_samples < 0) return fail("train_samples must be >= 0 (0 = all)");
  for (std::size_t i = 0; i < hidden_widths.size(); ++i) {
    if (hidden_widths[i] <= 0) return fail("hidden_widths[" + std::to_string(i) + "] must be positive");
  }
  if (!(std::isfinite(learning_rate) && learning_rate > 0.0)) return fail("learning_rate must be positive");
  if (!in_unit(momentum)) return fail("momentum must be in [0, 1)");
  if (!in_unit(adam_beta1)) return fail("adam_beta1 must be in [0, 1)");
  if (!in_unit(adam_beta2)) return fail("adam_beta2 must be in [0, 1)");
  if (!(std::isfinite(adam_epsilon) && adam_epsilon > 0.0)) return fail("adam_epsilon must be positive");
  if (batch_size <= 0) return fail("batch_size must be positive");
  if (epochs <= 0) return fail("epochs must be positive");
  if (max_iterations < 0) return fail("max_iterations must be >= 0 (0 = no cap)");
  if (drift != Drift::kNone && drift_at_iteration < 2) {
    return fail(std::string("drift_at_iteration must be >= 2 with ") + ToString(drift) + " drift");
  }
  if (drift == Drift::kClassIncremental &&
      (drift_initial_classes < 1 || drift_initial_classes >= kFashionMnistClasses)) {
    return fail("drift_initial_classes must be in [1, 9]");
  }
  if (drift == Drift::kLabelSwap) {
    auto is_class = [](int c) { return c >= 0 && c < kFashionMnistClasses; };
    if (!is_class(drift_swap_class_a)) return fail("drift_swap_class_a must be a class in [0, 9]");
    if (!is_class(drift_swap_class_b)) return fail("drift_swap_class_b must be a class in [0, 9]");
    if (drift_swap_class_a == drift_swap_class_b) {
      return fail("drift_swap_class_b must differ from drift_swap_class_a (swapping a class with itself changes nothing)");
    }
  }
  if (drift == Drift::kRotation) {
    if (!(std::isfinite(drift_rotation_degrees) && std::abs(drift_rotation_degrees) <= 360.0)) {
      return fail("drift_rotation_degrees must be finite and in [-360, 360]");
    }
    if (drift_duration_iterations < 0) return fail("drift_duration_iterations must be >= 0 (0 = at once)");
  }
  if (val_every_iterations < 0) return fail("val_every_iterations must be >= 0 (0 = never)");
  if (val_every_iterations > 0 && val_samples <= 0) return fail("val_samples must be positive when validating");
  if (val_samples < 0) return fail("val_samples must be >= 0");
  if (test_samples < 0) return fail("test_samples must be >= 0 (0 = no test subset)");
  if (val_samples + test_samples > kFashionMnistTestImages) {
    return fail("val_samples + test_samples must be <= " + std::to_string(kFashionMnistTestImages) +
                " (both are taken from the Fashion-MNIST test split, disjoint), got " + std::to_string(val_samples) +
                " + " + std::to_string(test_samples));
  }
  return true;
}

std::string Trainer::Summary::BriefReport() const {
  char line[512];
  auto opt = [](const auto& v) { return v ? static_cast<double>(*v) : std::nan(""); };
  std::snprintf(line, sizeof line,
                "%s: %lld iterations in %.2f s (%.3f ms/iteration, %.0f samples/s; test evaluations %.2f s "
                "more), train loss %.4f -> %.4f, val loss %.4f, val accuracy %.4f, test loss %.4f, "
                "test accuracy %.4f, model %zu bytes",
                termination.c_str(), static_cast<long long>(iterations), seconds, 1e3 * seconds_per_iteration,
                samples_per_second, test_seconds, opt(first_train_loss), opt(last_train_loss), opt(last_val_loss),
                opt(last_val_accuracy), opt(last_test_loss), opt(last_test_accuracy), model_bytes);
  return line;
}

Trainer::Trainer(const Options& options, Mlp model) : options_(options), model_(std::move(model)) {}

StatusOr<Trainer::EvaluationSets> Trainer::LoadEvaluationSets(const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("Trainer::Options: " + error);
  EvaluationSets sets;
  const int64_t total = options.val_samples + options.test_samples;
  if (total == 0) return sets;
  VIPER_ASSIGN_OR_RETURN(Samples split, LoadFashionMnist(options.dataset_dir, FashionMnistSplit::kTest, total));
  if (split.size() < total) {
    return DataLossError("the Fashion-MNIST test split in '" + options.dataset_dir + "' holds " +
                         std::to_string(split.size()) + " images, fewer than val_samples + test_samples = " +
                         std::to_string(total));
  }
  std::vector<int64_t> indices(static_cast<std::size_t>(options.val_samples));
  for (int64_t i = 0; i < options.val_samples; ++i) indices[static_cast<std::size_t>(i)] = i;
  sets.validation = split.Subset(indices);
  indices.resize(static_cast<std::size_t>(options.test_samples));
  for (int64_t i = 0; i < options.test_samples; ++i) indices[static_cast<std::size_t>(i)] = options.val_samples + i;
  sets.test = split.Subset(indices);
  return sets;
}

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("Trainer::Options: " + error);
  VIPER_ASSIGN_OR_RETURN(Samples train,
                         LoadFashionMnist(options.dataset_dir, FashionMnistSplit::kTrain, options.train_samples));
  VIPER_ASSIGN_OR_RETURN(EvaluationSets sets, LoadEvaluationSets(options));
  return Create(options, std::move(train), std::move(sets.validation), std::move(sets.test));
}

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const Options& options, Samples train, Samples validation,
                                                   Samples test) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("Trainer::Options: " + error);
  if (train.size() < options.batch_size) {
    return InvalidArgumentError("training set holds " + std::to_string(train.size()) +
                                " samples, fewer than one batch (batch_size " + std::to_string(options.batch_size) +
                                ")");
  }
  if (options.val_every_iterations > 0 && validation.empty()) {
    return InvalidArgumentError("validation set is empty but val_every_iterations is " +
                                std::to_string(options.val_every_iterations));
  }
  if (options.drift == Drift::kRotation && !IsSquareImage(train.features)) {
    return InvalidArgumentError("rotation drift needs square images, but the samples have " +
                                std::to_string(train.features) + " features");
  }
  for (const Samples* s : {&validation, &test}) {
    if (!s->empty() && s->features != train.features) {
      return InvalidArgumentError(std::string(s == &test ? "test" : "validation") + " samples have " +
                                  std::to_string(s->features) + " features, the training samples " +
                                  std::to_string(train.features));
    }
  }
  Mlp::Options mlp_options;
  mlp_options.input_features = train.features;
  mlp_options.hidden_widths = options.hidden_widths;
  VIPER_ASSIGN_OR_RETURN(Mlp model, Mlp::Create(mlp_options, options.seed));

  std::unique_ptr<Trainer> t(new Trainer(options, std::move(model)));
  t->train_ = std::move(train);
  t->validation_ = std::move(validation);
  t->test_ = std::move(test);
  if (!t->validation_.empty()) t->validation_.GatherAll(&t->val_inputs_, &t->val_labels_);
  if (!t->test_.empty()) t->test_.GatherAll(&t->test_inputs_, &t->test_labels_);
  if (options.drift == Drift::kClassIncremental) {
    for (int64_t i = 0; i < t->train_.size(); ++i) {
      if (t->train_.labels[static_cast<std::size_t>(i)] < options.drift_initial_classes) t->initial_pool_.push_back(i);
    }
    if (static_cast<int64_t>(t->initial_pool_.size()) < options.batch_size) {
      return InvalidArgumentError("only " + std::to_string(t->initial_pool_.size()) +
                                  " training samples belong to the first " +
                                  std::to_string(options.drift_initial_classes) + " classes, fewer than one batch");
    }
  }
  t->planned_iterations_ = options.epochs * t->iterations_per_epoch();
  if (options.max_iterations > 0) t->planned_iterations_ = std::min(t->planned_iterations_, options.max_iterations);
  t->data_rng_.seed(options.seed ^ kDataSeedSalt);
  t->gradients_ = t->model_.ZeroBuffers();
  t->moment1_ = t->model_.ZeroBuffers();
  if (options.optimizer == Optimizer::kAdam) t->moment2_ = t->model_.ZeroBuffers();
  t->last_learning_rate_ = t->LearningRateAt(1);
  return t;
}

int64_t Trainer::iterations_per_epoch() const { return train_.size() / options_.batch_size; }

std::vector<int> Trainer::ActiveClasses(int64_t iteration) const {
  int count = kFashionMnistClasses;
  if (options_.drift == Drift::kClassIncremental && iteration < options_.drift_at_iteration) {
    count = static_cast<int>(options_.drift_initial_classes);
  }
  std::vector<int> classes;
  for (int c = 0; c < count; ++c) classes.push_back(c);
  return classes;
}

double Trainer::LearningRateAt(int64_t iteration) const {
  if (!options_.cosine_schedule || planned_iterations_ <= 0) return options_.learning_rate;
  const double progress = static_cast<double>(iteration - 1) / static_cast<double>(planned_iterations_);
  return options_.learning_rate * 0.5 * (1.0 + std::cos(kPi * progress));
}

void Trainer::StartEpoch(bool all_classes) {
  all_classes_ = all_classes;
  if (all_classes) {
    pool_.resize(static_cast<std::size_t>(train_.size()));
    for (int64_t i = 0; i < train_.size(); ++i) pool_[static_cast<std::size_t>(i)] = i;
  } else {
    pool_ = initial_pool_;
  }
  // Fisher-Yates with a plain modulo draw: the same order on every platform
  // (std::shuffle's algorithm is implementation-defined).
  for (std::size_t i = pool_.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(data_rng_() % i);
    std::swap(pool_[i - 1], pool_[j]);
  }
  pool_position_ = 0;
  ++epoch_;
}

void Trainer::ApplyUpdate(double learning_rate) {
  using Array = Eigen::Map<Eigen::ArrayXf>;
  const float lr = static_cast<float>(learning_rate);
  for (int k = 0; k < model_.num_parameter_tensors(); ++k) {
    const Eigen::Index n = model_.parameter_size(k);
    Array p(model_.parameter(k), n);
    Array g(gradients_.tensors[static_cast<std::size_t>(k)].data(), n);
    Array m(moment1_.tensors[static_cast<std::size_t>(k)].data(), n);
    if (options_.optimizer == Optimizer::kSgd) {
      const float mu = static_cast<float>(options_.momentum);
      m = mu * m + g;
      p -= lr * m;
    } else {
      Array v(moment2_.tensors[static_cast<std::size_t>(k)].data(), n);
      const float b1 = static_cast<float>(options_.adam_beta1), b2 = static_cast<float>(options_.adam_beta2);
      const double t = static_cast<double>(iteration_ + 1);
      const float correction1 = static_cast<float>(1.0 - std::pow(options_.adam_beta1, t));
      const float correction2 = static_cast<float>(1.0 - std::pow(options_.adam_beta2, t));
      const float eps = static_cast<float>(options_.adam_epsilon);
      m = b1 * m + (1.0f - b1) * g;
      v = b2 * v + (1.0f - b2) * g.square();
      p -= (lr / correction1) * m / ((v / correction2).sqrt() + eps);
    }
  }
}

Evaluation Trainer::EvaluateAt(const Samples& samples, const Eigen::MatrixXf& inputs,
                               const std::vector<int32_t>& labels, int64_t iteration) const {
  if (inputs.cols() == 0) return Evaluation{};
  if (DriftSwapsLabels(options_, iteration) || DriftRotationDegrees(options_, iteration) != 0.0) {
    // Exactly what a consumer evaluating DriftedSamples sees.
    Eigen::MatrixXf drifted_inputs;
    std::vector<int32_t> drifted_labels;
    DriftedSamples(options_, samples, iteration).GatherAll(&drifted_inputs, &drifted_labels);
    return Evaluate(model_, drifted_inputs, drifted_labels);
  }
  return Evaluate(model_, inputs, labels);
}

Samples Trainer::DriftedView(const Samples& samples, int64_t iteration) const {
  return DriftedSamples(options_, samples, iteration);
}

Evaluation Trainer::Validate() const { return EvaluateAt(validation_, val_inputs_, val_labels_, iteration_); }

Evaluation Trainer::Test() const { return EvaluateAt(test_, test_inputs_, test_labels_, iteration_); }

Status Trainer::Step(LogRecord* record) {
  if (done()) {
    return FailedPreconditionError("training is done after " + std::to_string(iteration_) + " iterations");
  }
  const int64_t iteration = iteration_ + 1;
  if (iteration == 1) start_ = std::chrono::steady_clock::now();
  const bool all_classes =
      options_.drift != Drift::kClassIncremental || iteration >= options_.drift_at_iteration;
  if (epoch_ < 0 || all_classes != all_classes_ ||
      pool_position_ + options_.batch_size > static_cast<int64_t>(pool_.size())) {
    StartEpoch(all_classes);
  }
  train_.GatherBatch(pool_.data() + pool_position_, options_.batch_size, &batch_inputs_, &batch_labels_);
  pool_position_ += options_.batch_size;
  if (DriftSwapsLabels(options_, iteration)) {
    for (int32_t& label : batch_labels_) {
      if (label == options_.drift_swap_class_a) {
        label = options_.drift_swap_class_b;
      } else if (label == options_.drift_swap_class_b) {
        label = options_.drift_swap_class_a;
      }
    }
  }
  RotateImages(&batch_inputs_, DriftRotationDegrees(options_, iteration));
  const float loss = model_.LossAndGradient(batch_inputs_, batch_labels_, &gradients_, &workspace_);
  if (!std::isfinite(loss)) {
    return AbortedError("training diverged at iteration " + std::to_string(iteration) + " (loss " +
                        std::to_string(loss) + "); try a lower learning rate");
  }
  last_learning_rate_ = LearningRateAt(iteration);
  ApplyUpdate(last_learning_rate_);
  iteration_ = iteration;
  model_.mutable_state().metadata.iteration = iteration;

  LogRecord r;
  r.iteration = iteration;
  r.epoch = epoch_;
  r.train_loss = loss;
  const int64_t every = options_.val_every_iterations;
  if (every > 0 && (iteration % every == 0 || iteration == planned_iterations_)) {
    const Evaluation e = Validate();
    r.val_loss = e.mean_loss;
    r.val_accuracy = e.accuracy;
  }
  // The wall time is the producer's: training and validation, not the test
  // evaluation (the stand-in for the consumers' traffic).
  const auto now = std::chrono::steady_clock::now();
  r.wall_time_s = std::chrono::duration<double>(now - start_).count() - test_seconds_;
  if (every > 0 && options_.log_test && !test_.empty() &&
      (iteration % every == 0 || iteration == planned_iterations_)) {
    const Evaluation e = Test();
    r.test_loss = e.mean_loss;
    r.test_accuracy = e.accuracy;
    test_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - now).count();
  }
  *record = r;
  return Status::Ok();
}

StatusOr<Trainer::Summary> Trainer::Run(TrainingLogWriter* log, const IterationCallback& callback) {
  Summary s;
  s.termination = "completed";
  LogRecord record;
  while (!done()) {
    VIPER_RETURN_IF_ERROR(Step(&record));
    if (log != nullptr) VIPER_RETURN_IF_ERROR(log->Append(record, last_learning_rate_));
    if (!s.first_train_loss) s.first_train_loss = static_cast<float>(*record.train_loss);
    s.last_train_loss = static_cast<float>(*record.train_loss);
    if (record.val_loss) {
      s.last_val_loss = record.val_loss;
      s.last_val_accuracy = record.val_accuracy;
    }
    if (record.test_loss) {
      s.last_test_loss = record.test_loss;
      s.last_test_accuracy = record.test_accuracy;
    }
    if (callback && !callback(record, *this)) {
      if (!done()) s.termination = "stopped by callback";
      break;
    }
  }
  if (s.termination == "completed" && options_.max_iterations > 0 &&
      planned_iterations_ < options_.epochs * iterations_per_epoch()) {
    s.termination = "max_iterations";
  }
  s.iterations = iteration_;
  s.epochs_started = epoch_ + 1;
  s.iterations_per_epoch = iterations_per_epoch();
  s.parameters = model_.NumParameters();
  s.model_bytes = model_.SizeBytes();
  if (iteration_ > 0) {
    s.test_seconds = test_seconds_;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() - test_seconds_;
    s.seconds_per_iteration = s.seconds / static_cast<double>(iteration_);
    s.samples_per_second = static_cast<double>(iteration_ * options_.batch_size) / s.seconds;
  }
  return s;
}

}  // namespace workflow
}  // namespace viper
