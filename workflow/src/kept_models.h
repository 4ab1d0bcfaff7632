// Internal: the live producer's kept models, for re-publishing (issue 25):
// float32 copies of the trainer's parameters at chosen iterations (each one
// Mlp::Clone, model bytes), the validation loss each measured on each
// traffic state it was measured on (equal traffic, equal bits: measured
// once, as the staleness table reuses its evaluations), and the bytes to
// publish. Bounded by the caller: Retain frees every copy it no longer wants.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "viper/workflow/mlp.h"
#include "viper/workflow/trainer.h"

namespace viper {
namespace workflow {
namespace internal {

class KeptModels {
 public:
  // Keeps a copy of `model` as the model of `iteration` (no-op when one is held).
  void Keep(int64_t iteration, const Mlp& model);
  // The copy of `iteration`'s model; nullptr when none is kept.
  const Mlp* Find(int64_t iteration) const;
  // Frees every copy whose iteration is not in `wanted`.
  void Retain(const std::vector<int64_t>& wanted);
  // The loss of `iteration`'s model on `traffic`: measured before on equal
  // traffic, else `evaluate(model)` (and remembered); nullopt when the model
  // is not kept.
  std::optional<double> Loss(int64_t iteration, const TrafficState& traffic,
                             const std::function<double(const Mlp&)>& evaluate);
  // Beside training (LiveRun::Options::remeasure_beside): the loss measured
  // before on equal traffic, counted as reused (nullopt: not measured there,
  // or not kept); and a loss measured on a helper thread, remembered and
  // counted as an evaluation.
  std::optional<double> Known(int64_t iteration, const TrafficState& traffic);
  void Record(int64_t iteration, const TrafficState& traffic, double loss);

  int64_t size() const { return static_cast<int64_t>(kept_.size()); }
  // The most copies held at once, and their bytes (copies x model bytes).
  int64_t peak() const { return peak_; }
  uint64_t peak_bytes() const { return peak_bytes_; }
  int64_t evaluations() const { return evaluations_; }  // Loss calls that evaluated
  int64_t reused() const { return reused_; }            // Loss calls answered from an equal traffic

 private:
  struct Kept {
    int64_t iteration = 0;
    Mlp model;
    std::vector<std::pair<TrafficState, double>> measured;  // loss by traffic state
  };
  Kept* FindKept(int64_t iteration);
  // Each copy at a stable address: a helper reading one beside training
  // (LiveLoop) keeps its pointer while another is kept.
  std::vector<std::unique_ptr<Kept>> kept_;
  int64_t peak_ = 0;
  uint64_t peak_bytes_ = 0;
  int64_t evaluations_ = 0, reused_ = 0;
};

}  // namespace internal
}  // namespace workflow
}  // namespace viper
