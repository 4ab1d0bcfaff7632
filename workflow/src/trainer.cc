// The training loop (Trainer): options, creation, the optimiser's update,
// evaluation on the (drifted) validation and test subsets, Step and Run.
// The drifting stream lives in trainer_drift.cc, the staleness table in
// trainer_staleness.cc, fine-tuning in trainer_finetune.cc.
#include "viper/workflow/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

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
  for (std::size_t i = 0; i < lr_milestones.size(); ++i) {
    const LrMilestone& m = lr_milestones[i];
    const std::string at = "lr_milestones[" + std::to_string(i) + "]";
    if (m.iteration < 2) return fail(at + ": iteration must be >= 2, got " + std::to_string(m.iteration));
    if (i > 0 && m.iteration <= lr_milestones[i - 1].iteration) {
      return fail(at + ": iterations must increase, got " + std::to_string(m.iteration) + " after " +
                  std::to_string(lr_milestones[i - 1].iteration));
    }
    if (!(std::isfinite(m.factor) && m.factor > 0.0)) return fail(at + ": factor must be finite and > 0");
  }
  if (!in_unit(momentum)) return fail("momentum must be in [0, 1)");
  if (!in_unit(adam_beta1)) return fail("adam_beta1 must be in [0, 1)");
  if (!in_unit(adam_beta2)) return fail("adam_beta2 must be in [0, 1)");
  if (!(std::isfinite(adam_epsilon) && adam_epsilon > 0.0)) return fail("adam_epsilon must be positive");
  if (batch_size <= 0) return fail("batch_size must be positive");
  if (epochs <= 0) return fail("epochs must be positive");
  if (max_iterations < 0) return fail("max_iterations must be >= 0 (0 = no cap)");
  if (!Trainer::DriftOptionsValid(*this, error)) return false;
  {
    auto mask = FrozenTensorMask(*this, static_cast<int>(hidden_widths.size()) + 1);
    if (!mask.ok()) return fail(mask.status().message());
  }
  if (val_every_iterations < 0) return fail("val_every_iterations must be >= 0 (0 = never)");
  if (staleness_max_versions < 0 || staleness_max_versions == 1) {
    return fail("staleness_max_versions must be 0 (all) or >= 2 (the newest and at least one older version)");
  }
  if (staleness_table && val_every_iterations <= 0) {
    return fail("val_every_iterations must be positive with staleness_table (versions are kept at validation points)");
  }
  if (staleness_deferred && !staleness_table) return fail("staleness_deferred needs staleness_table");
  if (staleness_table && test_samples <= 0) {
    return fail("test_samples must be positive with staleness_table (its test_loss is the traffic's truth)");
  }
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
  std::string out = line;
  if (frozen_parameters > 0) {
    out += " (" + std::to_string(frozen_parameters) + " of " + std::to_string(parameters) + " parameters frozen)";
  }
  if (staleness_rows > 0) {
    std::snprintf(line, sizeof line,
                  "; staleness table %lld rows, %lld versions kept (at most %lld, %zu bytes), %.2f s more "
                  "evaluating (%lld evaluations, %lld reused)",
                  static_cast<long long>(staleness_rows), static_cast<long long>(staleness_versions_kept),
                  static_cast<long long>(staleness_versions_peak), staleness_bytes_peak, staleness_seconds,
                  static_cast<long long>(staleness_evaluations), static_cast<long long>(staleness_evaluations_reused));
    out += line;
  }
  return out;
}

std::vector<std::string> Trainer::frozen_tensors() const {
  std::vector<std::string> names;
  for (int i = 0; i < model_.num_parameter_tensors(); ++i) {
    if (frozen(i)) names.push_back(model_.state().tensors()[static_cast<std::size_t>(i)].name);
  }
  return names;
}

int64_t Trainer::frozen_parameters() const {
  int64_t n = 0;
  for (int i = 0; i < model_.num_parameter_tensors(); ++i) {
    if (frozen(i)) n += model_.parameter_size(i);
  }
  return n;
}

struct Trainer::Traffic {
  bool valid = false;
  TrafficState state;
  Eigen::MatrixXf inputs;
  std::vector<int32_t> labels;
};

Trainer::Trainer(const Options& options, Mlp model) : options_(options), model_(std::move(model)) {}

Trainer::~Trainer() = default;

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
  VIPER_RETURN_IF_ERROR(CheckDriftTrainingSamples(options, train));
  if (options.staleness_table && test.empty()) {
    return InvalidArgumentError("the staleness table needs a test subset (its test_loss is the traffic's truth)");
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
  if (!options.init_model_path.empty()) VIPER_RETURN_IF_ERROR(LoadMlpParameters(options.init_model_path, &model));
  VIPER_ASSIGN_OR_RETURN(std::vector<bool> frozen, FrozenTensorMask(options, model.num_layers()));

  std::unique_ptr<Trainer> t(new Trainer(options, std::move(model)));
  t->frozen_ = std::move(frozen);
  t->train_ = std::move(train);
  t->validation_ = std::move(validation);
  t->test_ = std::move(test);
  if (!t->validation_.empty()) t->validation_.GatherAll(&t->val_inputs_, &t->val_labels_);
  if (!t->test_.empty()) t->test_.GatherAll(&t->test_inputs_, &t->test_labels_);
  VIPER_RETURN_IF_ERROR(t->SetUpDriftPools());
  t->val_traffic_ = std::make_unique<Traffic>();
  t->test_traffic_ = std::make_unique<Traffic>();
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

double Trainer::LearningRateAt(int64_t iteration) const {
  double step = 1.0;
  for (const Options::LrMilestone& m : options_.lr_milestones) {
    if (iteration >= m.iteration) step *= m.factor;
  }
  if (!options_.cosine_schedule || planned_iterations_ <= 0) return options_.learning_rate * step;
  const double progress = static_cast<double>(iteration - 1) / static_cast<double>(planned_iterations_);
  return options_.learning_rate * step * 0.5 * (1.0 + std::cos(kPi * progress));
}

void Trainer::ApplyUpdate(double learning_rate) {
  using Array = Eigen::Map<Eigen::ArrayXf>;
  const float lr = static_cast<float>(learning_rate);
  for (int k = 0; k < model_.num_parameter_tensors(); ++k) {
    if (frozen(k)) continue;  // no step and no moments: the bytes stay as they are
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

Evaluation Trainer::EvaluateOn(const Mlp& model, bool test, int64_t iteration) const {
  const Eigen::MatrixXf& base_inputs = test ? test_inputs_ : val_inputs_;
  if (base_inputs.cols() == 0) return Evaluation{};
  const TrafficState state = DriftTrafficState(options_, iteration);
  if (state.Identity()) return Evaluate(model, base_inputs, test ? test_labels_ : val_labels_);
  const Traffic& traffic = Gathered(test, state);
  if (traffic.inputs.cols() == 0) return Evaluation{};
  return Evaluate(model, traffic.inputs, traffic.labels);
}

// Exactly what a consumer evaluating DriftedSamples sees; gathered once per
// traffic state and kept until the state changes.
const Trainer::Traffic& Trainer::Gathered(bool test, const TrafficState& state) const {
  Traffic& traffic = test ? *test_traffic_ : *val_traffic_;
  if (!traffic.valid || !(traffic.state == state)) {
    DriftedSamples(options_, test ? test_ : validation_, state).GatherAll(&traffic.inputs, &traffic.labels);
    traffic.state = state;
    traffic.valid = true;
  }
  return traffic;
}

Samples Trainer::DriftedView(const Samples& samples, int64_t iteration) const {
  return DriftedSamples(options_, samples, iteration);
}

Evaluation Trainer::Validate() const { return EvaluateOn(model_, false, iteration_); }

Evaluation Trainer::Test() const { return EvaluateOn(model_, true, iteration_); }

Evaluation Trainer::Validate(const Mlp& model) const { return EvaluateOn(model, false, iteration_); }

std::pair<Eigen::MatrixXf, std::vector<int32_t>> Trainer::ValidationSampleNow() const {
  const TrafficState state = DriftTrafficState(options_, iteration_);
  if (state.Identity() || val_inputs_.cols() == 0) return {val_inputs_, val_labels_};
  const Traffic& traffic = Gathered(false, state);
  return {traffic.inputs, traffic.labels};
}

Status Trainer::Step(LogRecord* record) {
  if (done()) {
    return FailedPreconditionError("training is done after " + std::to_string(iteration_) + " iterations");
  }
  const int64_t iteration = iteration_ + 1;
  if (iteration == 1) start_ = std::chrono::steady_clock::now();
  NextBatch(iteration);
  const float loss = model_.LossAndGradient(batch_inputs_, batch_labels_, &gradients_, &workspace_);
  if (!std::isfinite(loss) && !options_.continue_after_divergence) {
    return AbortedError("training diverged at iteration " + std::to_string(iteration) + " (loss " +
                        std::to_string(loss) + "); try a lower learning rate, or --on-divergence continue to log the diverged run");
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
  const bool validating = every > 0 && (iteration % every == 0 || iteration == planned_iterations_);
  if (validating) {
    ++validation_points_;
    const Evaluation e = Validate();
    r.val_loss = e.mean_loss;
    r.val_accuracy = e.accuracy;
  }
  // The wall time is the producer's: training and validation, not the test
  // evaluation (the stand-in for the consumers' traffic) nor the staleness
  // table's evaluations of kept versions.
  const auto now = std::chrono::steady_clock::now();
  r.wall_time_s = std::chrono::duration<double>(now - start_).count() - test_seconds_ - staleness_seconds_;
  if (validating && options_.log_test && !test_.empty()) {
    const Evaluation e = Test();
    r.test_loss = e.mean_loss;
    r.test_accuracy = e.accuracy;
    test_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - now).count();
  }
  if (validating && options_.staleness_table) {
    const auto begin = std::chrono::steady_clock::now();
    RecordStaleness(iteration);
    staleness_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
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
  if (options_.staleness_deferred) FinishStalenessTable();
  s.iterations = iteration_;
  s.epochs_started = epoch_ + 1;
  s.iterations_per_epoch = iterations_per_epoch();
  s.parameters = model_.NumParameters();
  s.model_bytes = model_.SizeBytes();
  s.frozen_parameters = frozen_parameters();
  SummarizeStaleness(&s);
  if (iteration_ > 0) {
    s.test_seconds = test_seconds_;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() - test_seconds_ -
                staleness_seconds_;
    s.seconds_per_iteration = s.seconds / static_cast<double>(iteration_);
    s.samples_per_second = static_cast<double>(iteration_ * options_.batch_size) / s.seconds;
  }
  return s;
}

}  // namespace workflow
}  // namespace viper
