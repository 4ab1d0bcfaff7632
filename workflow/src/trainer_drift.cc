// The drifting stream (Trainer::Options::drift): what the drift does to the
// traffic at an iteration (DriftTrafficState, DriftedSamples: the validation
// and test samples, and the consumers' requests) and to the training batches
// (the Trainer members below: the class-incremental epochs, the prior
// shift's draws by class, the label swap and the rotation of each batch).
#include "trainer_drift.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace viper {
namespace workflow {

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
    // Period p after the drift point is domain (p + 1) mod D, rotated by that
    // many times the angle: with two domains periods 0, 2, 4, ... are
    // rotated and 1, 3, ... upright; with three, 1x, 2x, upright, 1x, ...
    const int64_t period = (iteration - o.drift_at_iteration) / std::max<int64_t>(1, o.drift_period_iterations);
    const int64_t domains = std::max<int64_t>(2, o.drift_domains);
    return static_cast<double>((period + 1) % domains) * o.drift_rotation_degrees;
  }
  if (o.drift != Trainer::Drift::kRotation) return 0.0;
  if (o.drift_duration_iterations <= 0) return o.drift_rotation_degrees;
  const double progress = static_cast<double>(iteration - o.drift_at_iteration) /
                          static_cast<double>(o.drift_duration_iterations);
  return o.drift_rotation_degrees * std::min(1.0, progress);
}

bool DriftSwapsLabels(const Trainer::Options& o, int64_t iteration) {
  if (o.drift != Trainer::Drift::kLabelSwap || iteration < o.drift_at_iteration) return false;
  if (o.drift_swap_period_iterations <= 0) return true;
  return ((iteration - o.drift_at_iteration) / o.drift_swap_period_iterations) % 2 == 0;
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

bool Trainer::DriftOptionsValid(const Options& o, std::string* error) {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (o.drift != Drift::kNone && o.drift_at_iteration < 2) {
    return fail(std::string("drift_at_iteration must be >= 2 with ") + ToString(o.drift) + " drift");
  }
  if (o.drift == Drift::kClassIncremental &&
      (o.drift_initial_classes < 1 || o.drift_initial_classes >= kFashionMnistClasses)) {
    return fail("drift_initial_classes must be in [1, 9]");
  }
  if (o.drift == Drift::kLabelSwap) {
    auto is_class = [](int c) { return c >= 0 && c < kFashionMnistClasses; };
    if (!is_class(o.drift_swap_class_a)) return fail("drift_swap_class_a must be a class in [0, 9]");
    if (!is_class(o.drift_swap_class_b)) return fail("drift_swap_class_b must be a class in [0, 9]");
    if (o.drift_swap_period_iterations < 0) {
      return fail("drift_swap_period_iterations must be >= 0 (0 = swapped once), got " +
                  std::to_string(o.drift_swap_period_iterations));
    }
    if (o.drift_swap_class_a == o.drift_swap_class_b) {
      return fail(
          "drift_swap_class_b must differ from drift_swap_class_a (swapping a class with itself changes "
          "nothing)");
    }
  }
  if (o.drift == Drift::kRotation || o.drift == Drift::kRecurring) {
    if (!(std::isfinite(o.drift_rotation_degrees) && std::abs(o.drift_rotation_degrees) <= 360.0)) {
      return fail("drift_rotation_degrees must be finite and in [-360, 360]");
    }
  }
  if ((o.drift == Drift::kRotation || o.drift == Drift::kPriorShift) && o.drift_duration_iterations < 0) {
    return fail("drift_duration_iterations must be >= 0 (0 = at once)");
  }
  if (o.drift == Drift::kRecurring && o.drift_period_iterations < 1) {
    return fail("drift_period_iterations must be >= 1");
  }
  if (o.drift == Drift::kRecurring && (o.drift_domains < 2 || o.drift_domains > 8)) {
    return fail("drift_domains must be in [2, 8], got " + std::to_string(o.drift_domains));
  }
  if (o.drift == Drift::kPriorShift) {
    std::vector<bool> seen(kFashionMnistClasses, false);
    for (int c : o.drift_prior_classes) {
      if (c < 0 || c >= kFashionMnistClasses) {
        return fail("drift_prior_classes must hold classes in [0, 9], got " + std::to_string(c));
      }
      if (seen[static_cast<std::size_t>(c)]) {
        return fail("drift_prior_classes names class " + std::to_string(c) + " twice");
      }
      seen[static_cast<std::size_t>(c)] = true;
    }
    if (o.drift_prior_classes.empty() ||
        o.drift_prior_classes.size() >= static_cast<std::size_t>(kFashionMnistClasses)) {
      return fail(
          "drift_prior_classes must name between 1 and 9 classes (all ten would leave the prior uniform)");
    }
    if (!(std::isfinite(o.drift_prior_mass) && o.drift_prior_mass > 0.0 && o.drift_prior_mass <= 1.0)) {
      return fail("drift_prior_mass must be in (0, 1]");
    }
  }
  return true;
}

Status Trainer::CheckDriftTrainingSamples(const Options& options, const Samples& train) {
  if ((options.drift == Drift::kRotation || options.drift == Drift::kRecurring) &&
      !IsSquareImage(train.features)) {
    return InvalidArgumentError(std::string(ToString(options.drift)) +
                                " drift rotates images and needs square ones, but the samples have " +
                                std::to_string(train.features) + " features");
  }
  return Status::Ok();
}

namespace internal {

std::vector<int64_t> TrafficSteps(const Trainer::Options& o, int64_t first, int64_t last) {
  std::vector<int64_t> steps;
  for (int64_t i = first + 2; i <= last; ++i) {
    const TrafficState before = DriftTrafficState(o, i - 1), at = DriftTrafficState(o, i);
    if (at == before) continue;
    const bool ramp = !(DriftTrafficState(o, i - 2) == before) &&
                      (i + 1 > last || !(DriftTrafficState(o, i + 1) == at));
    if (ramp) continue;
    steps.push_back(i);
  }
  return steps;
}

}  // namespace internal

Status Trainer::SetUpDriftPools() {
  if (options_.drift == Drift::kClassIncremental) {
    for (int64_t i = 0; i < train_.size(); ++i) {
      if (train_.labels[static_cast<std::size_t>(i)] < options_.drift_initial_classes) initial_pool_.push_back(i);
    }
    if (static_cast<int64_t>(initial_pool_.size()) < options_.batch_size) {
      return InvalidArgumentError("only " + std::to_string(initial_pool_.size()) +
                                  " training samples belong to the first " +
                                  std::to_string(options_.drift_initial_classes) + " classes, fewer than one batch");
    }
  }
  if (options_.drift == Drift::kPriorShift) {
    class_pools_.resize(kFashionMnistClasses);
    for (int64_t i = 0; i < train_.size(); ++i) {
      class_pools_[train_.labels[static_cast<std::size_t>(i)]].push_back(i);
    }
    // Every pool starts exhausted: it is shuffled when first drawn from.
    class_positions_.resize(kFashionMnistClasses);
    for (int c = 0; c < kFashionMnistClasses; ++c) class_positions_[c] = class_pools_[c].size();
    train_class_shares_ = ClassShares(train_.labels);
  }
  return Status::Ok();
}

std::vector<int> Trainer::ActiveClasses(int64_t iteration) const {
  if (options_.drift == Drift::kClassIncremental && iteration < options_.drift_at_iteration) {
    return FirstClasses(options_.drift_initial_classes);
  }
  return FirstClasses(kFashionMnistClasses);
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

void Trainer::NextBatch(int64_t iteration) {
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
}

}  // namespace workflow
}  // namespace viper
