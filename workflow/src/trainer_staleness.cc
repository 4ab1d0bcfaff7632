// The staleness table (Trainer::Options::staleness_table, DESIGN.md §1):
// the versions kept at validation points (thinned evenly over
// staleness_max_versions) and KeepCurrentVersion's, each evaluated on the
// drifted validation and test samples of every later validation point (at
// once, or deferred to FinishStalenessTable with knots around each step of
// the traffic), an evaluation reused where the traffic state is equal.
#include <algorithm>
#include <chrono>

#include "trainer_drift.h"
#include "viper/workflow/trainer.h"

namespace viper {
namespace workflow {

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
    for (int64_t s : internal::TrafficSteps(options_, first, last)) {
      knots.push_back(s - 1);
      knots.push_back(s);
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

void Trainer::SummarizeStaleness(Summary* s) const {
  if (options_.staleness_table) {
    s->staleness_rows = static_cast<int64_t>(staleness_rows_.size());
    s->staleness_versions_kept = static_cast<int64_t>(kept_.size());
    s->staleness_versions_peak = staleness_peak_;
    s->staleness_bytes_peak = static_cast<std::size_t>(staleness_peak_) * model_.SizeBytes();
    s->staleness_seconds = staleness_seconds_;
    s->staleness_evaluations = staleness_evaluations_;
    s->staleness_evaluations_reused = staleness_reused_;
  }
}

}  // namespace workflow
}  // namespace viper
