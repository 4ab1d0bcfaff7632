#include "kept_models.h"

#include <algorithm>
#include <memory>

namespace viper {
namespace workflow {
namespace internal {

void KeptModels::Keep(int64_t iteration, const Mlp& model) {
  if (FindKept(iteration) != nullptr) return;
  kept_.push_back(std::make_unique<Kept>(Kept{iteration, model.Clone(), {}}));
  if (size() > peak_) {
    peak_ = size();
    peak_bytes_ = static_cast<uint64_t>(peak_) * model.SizeBytes();
  }
}

KeptModels::Kept* KeptModels::FindKept(int64_t iteration) {
  for (auto& k : kept_) {
    if (k->iteration == iteration) return k.get();
  }
  return nullptr;
}

const Mlp* KeptModels::Find(int64_t iteration) const {
  for (const auto& k : kept_) {
    if (k->iteration == iteration) return &k->model;
  }
  return nullptr;
}

void KeptModels::Retain(const std::vector<int64_t>& wanted) {
  kept_.erase(std::remove_if(kept_.begin(), kept_.end(),
                             [&](const std::unique_ptr<Kept>& k) {
                               return std::find(wanted.begin(), wanted.end(), k->iteration) == wanted.end();
                             }),
              kept_.end());
}

std::optional<double> KeptModels::Known(int64_t iteration, const TrafficState& traffic) {
  Kept* k = FindKept(iteration);
  if (k == nullptr) return std::nullopt;
  for (const auto& [state, loss] : k->measured) {
    if (state == traffic) {
      ++reused_;
      return loss;
    }
  }
  return std::nullopt;
}

void KeptModels::Record(int64_t iteration, const TrafficState& traffic, double loss) {
  Kept* k = FindKept(iteration);
  if (k == nullptr) return;
  ++evaluations_;
  k->measured.emplace_back(traffic, loss);
}

std::optional<double> KeptModels::Loss(int64_t iteration, const TrafficState& traffic,
                                       const std::function<double(const Mlp&)>& evaluate) {
  Kept* k = FindKept(iteration);
  if (k == nullptr) return std::nullopt;
  if (auto known = Known(iteration, traffic)) return known;
  const double loss = evaluate(k->model);
  Record(iteration, traffic, loss);
  return loss;
}

}  // namespace internal
}  // namespace workflow
}  // namespace viper
