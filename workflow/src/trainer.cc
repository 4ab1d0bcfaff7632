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

const char* Trainer::ToString(Drift drift) {
  switch (drift) {
    case Drift::kNone: return "none";
    case Drift::kClassIncremental: return "class-incremental";
    case Drift::kLabelSwap: return "label-swap";
    case Drift::kRotation: return "rotation";
    case Drift::kRecurring: return "recurring";
    case Drift::kPriorShift: return "prior-shift";
  }
  return "?";
}

StatusOr<Trainer::Drift> Trainer::DriftFromString(const std::string& name) {
  for (Drift d : {Drift::kNone, Drift::kClassIncremental, Drift::kLabelSwap, Drift::kRotation, Drift::kRecurring,
                  Drift::kPriorShift}) {
    if (name == ToString(d)) return d;
  }
  return InvalidArgumentError("unknown drift '" + name +
                              "' (expected none, class-incremental, label-swap, rotation, recurring or prior-shift)");
}

double DriftRotationDegrees(const Trainer::Options& o, int64_t iteration) {
  if (iteration < o.drift_at_iteration) return 0.0;
  if (o.drift == Trainer::Drift::kRecurring) {
    // Periods 0, 2, 4, ... after the drift point are rotated, 1, 3, ... upright.
    const int64_t period = (iteration - o.drift_at_iteration) / std::max<int64_t>(1, o.drift_period_iterations);
    return period % 2 == 0 ? o.drift_rotation_degrees : 0.0;
  }
  if (o.drift != Trainer::Drift::kRotation) return 0.0;
  if (o.drift_duration_iterations <= 0) return o.drift_rotation_degrees;
  const double progress = static_cast<double>(iteration - o.drift_at_iteration) /
                          static_cast<double>(o.drift_duration_iterations);
  return o.drift_rotation_degrees * std::min(1.0, progress);
}

bool DriftSwapsLabels(const Trainer::Options& o, int64_t iteration) {
  return o.drift == Trainer::Drift::kLabelSwap && iteration >= o.drift_at_iteration;
}

double DriftPriorProgress(const Trainer::Options& o, int64_t iteration) {
  if (o.drift != Trainer::Drift::kPriorShift || iteration < o.drift_at_iteration) return 0.0;
  if (o.drift_duration_iterations <= 0) return 1.0;
  return std::min(1.0, static_cast<double>(iteration - o.drift_at_iteration) /
                           static_cast<double>(o.drift_duration_iterations));
}

std::vector<double> DriftClassPrior(const Trainer::Options& o, const std::vector<double>& own, double progress) {
  VIPER_CHECK(own.size() == static_cast<std::size_t>(kFashionMnistClasses));
  std::vector<bool> favoured(kFashionMnistClasses, false);
  for (int c : o.drift_prior_classes) favoured[static_cast<std::size_t>(c)] = true;
  const double n_favoured = static_cast<double>(o.drift_prior_classes.size());
  const double n_other = kFashionMnistClasses - n_favoured;
  std::vector<double> prior(own.size());
  for (std::size_t c = 0; c < own.size(); ++c) {
    const double target = favoured[c] ? o.drift_prior_mass / n_favoured : (1.0 - o.drift_prior_mass) / n_other;
    prior[c] = (1.0 - progress) * own[c] + progress * target;
  }
  return prior;
}

TrafficState DriftTrafficState(const Trainer::Options& o, int64_t iteration) {
  TrafficState s;
  s.only_initial_classes = o.drift == Trainer::Drift::kClassIncremental && iteration < o.drift_at_iteration;
  s.swapped = DriftSwapsLabels(o, iteration);
  s.rotation_degrees = DriftRotationDegrees(o, iteration);
  s.prior_progress = DriftPriorProgress(o, iteration);
  return s;
}

namespace {

// Class frequencies of `labels` (10 values summing to 1; zeros when empty).
std::vector<double> ClassShares(const std::vector<uint8_t>& labels) {
  std::vector<double> shares(kFashionMnistClasses, 0.0);
  for (uint8_t l : labels) shares[l] += 1.0;
  for (double& x : shares) x /= std::max<double>(1.0, static_cast<double>(labels.size()));
  return shares;
}

// Prior shift on a set: the same number of samples, class c holding its share
// of the prior (largest remainder), taken from class c's samples in order and
// cycling; classes interleaved evenly (each slot goes to the class furthest
// behind its quota's schedule, ties to the lower class).
Samples ResampleToPrior(const Trainer::Options& o, const Samples& samples, double progress) {
  const int64_t n = samples.size();
  std::vector<std::vector<int64_t>> by_class(kFashionMnistClasses);
  for (int64_t i = 0; i < n; ++i) by_class[samples.labels[static_cast<std::size_t>(i)]].push_back(i);
  std::vector<double> prior = DriftClassPrior(o, ClassShares(samples.labels), progress);
  double total = 0.0;
  for (int c = 0; c < kFashionMnistClasses; ++c) {
    if (by_class[static_cast<std::size_t>(c)].empty()) prior[static_cast<std::size_t>(c)] = 0.0;  // cannot be drawn
    total += prior[static_cast<std::size_t>(c)];
  }
  if (n == 0 || total <= 0.0) return samples;
  std::vector<int64_t> quota(kFashionMnistClasses, 0);
  std::vector<std::pair<double, int>> remainders;
  int64_t assigned = 0;
  for (int c = 0; c < kFashionMnistClasses; ++c) {
    const double exact = static_cast<double>(n) * prior[static_cast<std::size_t>(c)] / total;
    quota[static_cast<std::size_t>(c)] = static_cast<int64_t>(std::floor(exact));
    assigned += quota[static_cast<std::size_t>(c)];
    if (prior[static_cast<std::size_t>(c)] > 0.0) remainders.push_back({exact - std::floor(exact), c});
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t k = 0; assigned < n && k < remainders.size(); ++k, ++assigned) {
    ++quota[static_cast<std::size_t>(remainders[k].second)];
  }
  std::vector<int64_t> taken(kFashionMnistClasses, 0);
  std::vector<int64_t> indices;
  indices.reserve(static_cast<std::size_t>(n));
  for (int64_t slot = 0; slot < n; ++slot) {
    int best = -1;
    double best_lag = 0.0;
    for (int c = 0; c < kFashionMnistClasses; ++c) {
      const auto uc = static_cast<std::size_t>(c);
      if (taken[uc] >= quota[uc]) continue;
      const double lag = static_cast<double>(quota[uc]) * static_cast<double>(slot + 1) / static_cast<double>(n) -
                         static_cast<double>(taken[uc]);
      if (best < 0 || lag > best_lag) {
        best = c;
        best_lag = lag;
      }
    }
    VIPER_CHECK(best >= 0);
    const auto& pool = by_class[static_cast<std::size_t>(best)];
    indices.push_back(pool[static_cast<std::size_t>(taken[static_cast<std::size_t>(best)]++ %
                                                    static_cast<int64_t>(pool.size()))]);
  }
  return samples.Subset(indices);
}

std::vector<int> FirstClasses(int64_t count) {
  std::vector<int> classes;
  for (int c = 0; c < count; ++c) classes.push_back(c);
  return classes;
}

// A uniform draw in [0, 1) from 53 bits: the same on every platform.
double UnitDraw(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Fisher-Yates with a plain modulo draw: the same order on every platform
// (std::shuffle's algorithm is implementation-defined).
void Shuffle(std::vector<int64_t>* v, std::mt19937_64& rng) {
  for (std::size_t i = v->size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng() % i);
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

}  // namespace

Samples DriftedSamples(const Trainer::Options& o, const Samples& samples, const TrafficState& state) {
  if (state.Identity()) return samples;
  Samples out = state.only_initial_classes ? samples.FilterClasses(FirstClasses(o.drift_initial_classes)) : samples;
  if (state.prior_progress > 0.0) out = ResampleToPrior(o, out, state.prior_progress);
  if (state.swapped) out = out.WithLabelsSwapped(o.drift_swap_class_a, o.drift_swap_class_b);
  if (state.rotation_degrees != 0.0) out = out.Rotated(state.rotation_degrees);
  return out;
}

Samples DriftedSamples(const Trainer::Options& o, const Samples& samples, int64_t iteration) {
  return DriftedSamples(o, samples, DriftTrafficState(o, iteration));
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
  if (drift == Drift::kRotation || drift == Drift::kRecurring) {
    if (!(std::isfinite(drift_rotation_degrees) && std::abs(drift_rotation_degrees) <= 360.0)) {
      return fail("drift_rotation_degrees must be finite and in [-360, 360]");
    }
  }
  if ((drift == Drift::kRotation || drift == Drift::kPriorShift) && drift_duration_iterations < 0) {
    return fail("drift_duration_iterations must be >= 0 (0 = at once)");
  }
  if (drift == Drift::kRecurring && drift_period_iterations < 1) {
    return fail("drift_period_iterations must be >= 1");
  }
  if (drift == Drift::kPriorShift) {
    std::vector<bool> seen(kFashionMnistClasses, false);
    for (int c : drift_prior_classes) {
      if (c < 0 || c >= kFashionMnistClasses) return fail("drift_prior_classes must hold classes in [0, 9], got " + std::to_string(c));
      if (seen[static_cast<std::size_t>(c)]) return fail("drift_prior_classes names class " + std::to_string(c) + " twice");
      seen[static_cast<std::size_t>(c)] = true;
    }
    if (drift_prior_classes.empty() || drift_prior_classes.size() >= static_cast<std::size_t>(kFashionMnistClasses)) {
      return fail("drift_prior_classes must name between 1 and 9 classes (all ten would leave the prior uniform)");
    }
    if (!(std::isfinite(drift_prior_mass) && drift_prior_mass > 0.0 && drift_prior_mass <= 1.0)) {
      return fail("drift_prior_mass must be in (0, 1]");
    }
  }
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
  if ((options.drift == Drift::kRotation || options.drift == Drift::kRecurring) && !IsSquareImage(train.features)) {
    return InvalidArgumentError(std::string(ToString(options.drift)) + " drift rotates images and needs square ones, but the samples have " +
                                std::to_string(train.features) + " features");
  }
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
  if (options.drift == Drift::kPriorShift) {
    t->class_pools_.resize(kFashionMnistClasses);
    for (int64_t i = 0; i < t->train_.size(); ++i) {
      t->class_pools_[t->train_.labels[static_cast<std::size_t>(i)]].push_back(i);
    }
    // Every pool starts exhausted: it is shuffled when first drawn from.
    t->class_positions_.resize(kFashionMnistClasses);
    for (int c = 0; c < kFashionMnistClasses; ++c) t->class_positions_[c] = t->class_pools_[c].size();
    t->train_class_shares_ = ClassShares(t->train_.labels);
  }
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

std::vector<int> Trainer::ActiveClasses(int64_t iteration) const {
  if (options_.drift == Drift::kClassIncremental && iteration < options_.drift_at_iteration) {
    return FirstClasses(options_.drift_initial_classes);
  }
  return FirstClasses(kFashionMnistClasses);
}

double Trainer::LearningRateAt(int64_t iteration) const {
  double step = 1.0;
  for (const Options::LrMilestone& m : options_.lr_milestones) {
    if (iteration >= m.iteration) step *= m.factor;
  }
  if (!options_.cosine_schedule || planned_iterations_ <= 0) return options_.learning_rate * step;
  const double progress = static_cast<double>(iteration - 1) / static_cast<double>(planned_iterations_);
  return options_.learning_rate * step * 0.5 * (1.0 + std::cos(kPi * progress));
}

void Trainer::StartEpoch(bool all_classes) {
  all_classes_ = all_classes;
  if (all_classes) {
    pool_.resize(static_cast<std::size_t>(train_.size()));
    for (int64_t i = 0; i < train_.size(); ++i) pool_[static_cast<std::size_t>(i)] = i;
  } else {
    pool_ = initial_pool_;
  }
  Shuffle(&pool_, data_rng_);
  pool_position_ = 0;
  ++epoch_;
}

void Trainer::DrawPriorBatch(int64_t iteration) {
  std::vector<double> prior = DriftClassPrior(options_, train_class_shares_, DriftPriorProgress(options_, iteration));
  double total = 0.0;
  for (int c = 0; c < kFashionMnistClasses; ++c) {
    if (class_pools_[static_cast<std::size_t>(c)].empty()) prior[static_cast<std::size_t>(c)] = 0.0;
    total += prior[static_cast<std::size_t>(c)];
  }
  batch_indices_.resize(static_cast<std::size_t>(options_.batch_size));
  for (int64_t k = 0; k < options_.batch_size; ++k) {
    const double u = UnitDraw(data_rng_) * total;
    double cumulative = 0.0;
    int c = -1;
    for (int k2 = 0; k2 < kFashionMnistClasses; ++k2) {
      if (prior[static_cast<std::size_t>(k2)] <= 0.0) continue;
      c = k2;  // the last class with weight, should rounding leave u past the end
      cumulative += prior[static_cast<std::size_t>(k2)];
      if (u < cumulative) break;
    }
    VIPER_CHECK(c >= 0);
    auto& pool = class_pools_[static_cast<std::size_t>(c)];
    std::size_t& position = class_positions_[static_cast<std::size_t>(c)];
    if (position >= pool.size()) {
      Shuffle(&pool, data_rng_);
      position = 0;
    }
    batch_indices_[static_cast<std::size_t>(k)] = pool[position++];
  }
  train_.GatherBatch(batch_indices_.data(), options_.batch_size, &batch_inputs_, &batch_labels_);
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
  // Exactly what a consumer evaluating DriftedSamples sees; gathered once per
  // traffic state and kept until the state changes.
  Traffic& traffic = test ? *test_traffic_ : *val_traffic_;
  if (!traffic.valid || !(traffic.state == state)) {
    DriftedSamples(options_, test ? test_ : validation_, state).GatherAll(&traffic.inputs, &traffic.labels);
    traffic.state = state;
    traffic.valid = true;
  }
  if (traffic.inputs.cols() == 0) return Evaluation{};
  return Evaluate(model, traffic.inputs, traffic.labels);
}

Samples Trainer::DriftedView(const Samples& samples, int64_t iteration) const {
  return DriftedSamples(options_, samples, iteration);
}

Evaluation Trainer::Validate() const { return EvaluateOn(model_, false, iteration_); }

Evaluation Trainer::Test() const { return EvaluateOn(model_, true, iteration_); }

Evaluation Trainer::Validate(const Mlp& model) const { return EvaluateOn(model, false, iteration_); }

void Trainer::RecordStaleness(int64_t iteration) {
  KeepStalenessVersion(iteration);
  if (options_.staleness_deferred) {
    staleness_pending_.push_back(iteration);
    return;
  }
  EvaluateKeptVersions(iteration);
}

void Trainer::KeepStalenessVersion(int64_t iteration) {
  const int64_t point = validation_points_ - 1;
  // The previous newest stays only if it is on the stride's grid.
  if (!kept_.empty() && kept_.back().point % staleness_stride_ != 0) kept_.pop_back();
  kept_.push_back(KeptVersion{iteration, point, model_.Clone(), {}});
  const auto max_versions = static_cast<std::size_t>(options_.staleness_max_versions);
  while (max_versions > 0 && kept_.size() > max_versions) {
    // Thin evenly: double the stride, keep its multiples and the newest.
    // Point 0 is always a multiple, so this ends with at most 2 versions.
    staleness_stride_ *= 2;
    std::vector<KeptVersion> thinned;
    for (std::size_t k = 0; k < kept_.size(); ++k) {
      if (kept_[k].point % staleness_stride_ == 0 || k + 1 == kept_.size()) thinned.push_back(std::move(kept_[k]));
    }
    kept_ = std::move(thinned);
  }
  staleness_peak_ = std::max(staleness_peak_, static_cast<int64_t>(kept_.size()));
}

// One row per kept version v <= iteration, on the traffic of `iteration`.
void Trainer::EvaluateKeptVersions(int64_t iteration) {
  for (KeptVersion& v : kept_) {
    if (v.iteration > iteration) break;  // kept_ is oldest first
    EvaluateVersion(v, iteration);
  }
  for (KeptVersion& v : extra_kept_) {
    if (v.iteration > iteration) break;  // extra_kept_ too
    EvaluateVersion(v, iteration);
  }
}

// The row (version, iteration): `version` on the traffic of `iteration`,
// reusing an evaluation made on the same traffic.
void Trainer::EvaluateVersion(KeptVersion& v, int64_t iteration) {
  const TrafficState traffic = DriftTrafficState(options_, iteration);
  const KeptVersion::Measured* m = nullptr;
  for (const auto& earlier : v.measured) {
    if (earlier.traffic == traffic) m = &earlier;
  }
  if (m != nullptr) {
    ++staleness_reused_;
  } else {
    v.measured.push_back({traffic, EvaluateOn(v.model, false, iteration), EvaluateOn(v.model, true, iteration)});
    m = &v.measured.back();
    ++staleness_evaluations_;
  }
  StalenessRecord r;
  r.version_iteration = v.iteration;
  r.traffic_iteration = iteration;
  r.val_loss = m->val.mean_loss;
  r.val_accuracy = m->val.accuracy;
  r.test_loss = m->test.mean_loss;
  r.test_accuracy = m->test.accuracy;
  staleness_rows_.push_back(r);
}

int64_t Trainer::staleness_extra_versions() const { return static_cast<int64_t>(extra_kept_.size()); }

void Trainer::KeepCurrentVersion() {
  if (!options_.staleness_table || !options_.staleness_deferred || options_.staleness_max_versions != 0) return;
  if (iteration_ == 0 || (!kept_.empty() && kept_.back().iteration == iteration_)) return;
  if (!extra_kept_.empty() && extra_kept_.back().iteration == iteration_) return;
  const auto begin = std::chrono::steady_clock::now();
  extra_kept_.push_back(KeptVersion{iteration_, -1, model_.Clone(), {}});
  staleness_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

StalenessTable Trainer::FinishStalenessTable() {
  const auto begin = std::chrono::steady_clock::now();
  // A step of the traffic between two validation points (a label swap, the
  // class-incremental traffic growing, a recurring domain switching; not
  // every iteration of a ramp) gets knots on both sides of it, s - 1 and s,
  // so that a surface linear between knots holds the step where it is
  // rather than spreading it over the points around it. Their traffic equals
  // a neighbour's, so their evaluations are mostly reused.
  if (!staleness_pending_.empty()) {
    std::vector<int64_t> knots = staleness_pending_;
    const int64_t first = staleness_pending_.front(), last = staleness_pending_.back();
    for (int64_t i = first + 2; i <= last; ++i) {
      const TrafficState before = DriftTrafficState(options_, i - 1), at = DriftTrafficState(options_, i);
      if (at == before) continue;
      const bool ramp = !(DriftTrafficState(options_, i - 2) == before) &&
                        (i + 1 > last || !(DriftTrafficState(options_, i + 1) == at));
      if (ramp) continue;
      knots.push_back(i - 1);
      knots.push_back(i);
    }
    std::sort(knots.begin(), knots.end());
    knots.erase(std::unique(knots.begin(), knots.end()), knots.end());
    staleness_pending_ = std::move(knots);
  }
  // KeepCurrentVersion's versions on their own traffic (the diagonal; once:
  // a version published on a knot gets that row below), then every version
  // on every validation point's and knot's.
  for (KeptVersion& v : extra_kept_) {
    if (v.measured.empty() &&
        !std::binary_search(staleness_pending_.begin(), staleness_pending_.end(), v.iteration)) {
      EvaluateVersion(v, v.iteration);
    }
  }
  for (int64_t t : staleness_pending_) EvaluateKeptVersions(t);
  staleness_pending_.clear();
  staleness_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return staleness_table();
}

StalenessTable Trainer::staleness_table() const {
  StalenessTable table;
  table.source = "viper train";
  table.records = staleness_rows_;
  std::sort(table.records.begin(), table.records.end(), [](const StalenessRecord& a, const StalenessRecord& b) {
    return a.version_iteration != b.version_iteration ? a.version_iteration < b.version_iteration
                                                      : a.traffic_iteration < b.traffic_iteration;
  });
  return table;
}

std::vector<int64_t> Trainer::staleness_versions() const {
  std::vector<int64_t> versions;
  for (const auto& v : kept_) versions.push_back(v.iteration);
  return versions;
}

std::size_t Trainer::staleness_bytes() const { return kept_.size() * model_.SizeBytes(); }

Status Trainer::Step(LogRecord* record) {
  if (done()) {
    return FailedPreconditionError("training is done after " + std::to_string(iteration_) + " iterations");
  }
  const int64_t iteration = iteration_ + 1;
  if (iteration == 1) start_ = std::chrono::steady_clock::now();
  if (options_.drift == Drift::kPriorShift && iteration >= options_.drift_at_iteration) {
    // Drawn by class from the shifting prior; an epoch is as many samples as
    // the pool holds, the first one starting at the drift point.
    if (!class_draws_ || pool_position_ + options_.batch_size > train_.size()) {
      class_draws_ = true;
      pool_position_ = 0;
      ++epoch_;
    }
    DrawPriorBatch(iteration);
    pool_position_ += options_.batch_size;
  } else {
    const bool all_classes =
        options_.drift != Drift::kClassIncremental || iteration >= options_.drift_at_iteration;
    if (epoch_ < 0 || all_classes != all_classes_ ||
        pool_position_ + options_.batch_size > static_cast<int64_t>(pool_.size())) {
      StartEpoch(all_classes);
    }
    train_.GatherBatch(pool_.data() + pool_position_, options_.batch_size, &batch_inputs_, &batch_labels_);
    pool_position_ += options_.batch_size;
  }
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
  if (options_.staleness_table) {
    s.staleness_rows = static_cast<int64_t>(staleness_rows_.size());
    s.staleness_versions_kept = static_cast<int64_t>(kept_.size());
    s.staleness_versions_peak = staleness_peak_;
    s.staleness_bytes_peak = static_cast<std::size_t>(staleness_peak_) * model_.SizeBytes();
    s.staleness_seconds = staleness_seconds_;
    s.staleness_evaluations = staleness_evaluations_;
    s.staleness_evaluations_reused = staleness_reused_;
  }
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
