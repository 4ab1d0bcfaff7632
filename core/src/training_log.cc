#include "viper/core/training_log.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace viper {

int64_t TrainingLog::TimedRows() const {
  int64_t n = 0;
  for (const auto& r : records) n += r.wall_time_s.has_value() ? 1 : 0;
  return n;
}

int64_t TrainingLog::TrainLossPoints() const {
  int64_t n = 0;
  for (const auto& r : records) n += r.train_loss.has_value() ? 1 : 0;
  return n;
}

int64_t TrainingLog::ValLossPoints() const {
  int64_t n = 0;
  for (const auto& r : records) n += r.val_loss.has_value() ? 1 : 0;
  return n;
}

LogSummary Summarize(const TrainingLog& log) {
  LogSummary s;
  s.rows = static_cast<int64_t>(log.records.size());
  s.dropped_non_finite = log.dropped_non_finite;
  s.diverged_values = log.diverged_values;
  if (log.records.empty()) return s;
  for (const auto& r : log.records) {
    auto inf = [](const std::optional<double>& x) { return x && !std::isfinite(*x); };
    if (inf(r.train_loss) || inf(r.val_loss) || inf(r.test_loss)) {
      s.first_diverged_iteration = r.iteration;
      break;
    }
  }
  s.first_iteration = log.records.front().iteration;
  s.last_iteration = log.records.back().iteration;

  // Epochs: iterations per epoch is the median count of distinct iterations
  // over the complete epochs (all but the last, which may be partial).
  std::map<int64_t, std::pair<int64_t, int64_t>> epoch_range;  // epoch -> (min it, max it)
  for (const auto& r : log.records) {
    if (!r.epoch) continue;
    auto [it, inserted] = epoch_range.try_emplace(*r.epoch, r.iteration, r.iteration);
    if (!inserted) {
      it->second.first = std::min(it->second.first, r.iteration);
      it->second.second = std::max(it->second.second, r.iteration);
    }
  }
  if (!epoch_range.empty()) {
    s.epochs = static_cast<int64_t>(epoch_range.size());
    std::vector<double> lengths;
    int64_t prev_end = -1;
    bool first = true;
    for (const auto& [epoch, range] : epoch_range) {
      // Epoch length = last iteration of this epoch - last iteration of the previous one.
      if (!first) lengths.push_back(static_cast<double>(range.second - prev_end));
      prev_end = range.second;
      first = false;
    }
    if (lengths.size() >= 2) lengths.pop_back();  // the last epoch may be partial
    if (lengths.empty() && epoch_range.size() == 1) {
      const auto& r = epoch_range.begin()->second;
      lengths.push_back(static_cast<double>(r.second - r.first + 1));
    }
    if (!lengths.empty()) {
      std::nth_element(lengths.begin(), lengths.begin() + lengths.size() / 2, lengths.end());
      s.iterations_per_epoch = lengths[lengths.size() / 2];
    }
  }

  // Seconds per iteration: wall-time span over iteration span.
  const LogRecord* first_t = nullptr;
  const LogRecord* last_t = nullptr;
  for (const auto& r : log.records) {
    if (!r.wall_time_s) continue;
    if (!first_t) first_t = &r;
    last_t = &r;
  }
  if (first_t && last_t && last_t->iteration > first_t->iteration) {
    s.seconds_per_iteration =
        (*last_t->wall_time_s - *first_t->wall_time_s) / static_cast<double>(last_t->iteration - first_t->iteration);
  }

  for (const auto& r : log.records) {
    if (r.val_loss) ++s.val_points;
    if (r.wall_time_s) ++s.timed_rows;
    if (!r.train_loss) continue;
    ++s.train_points;
    if (!s.first_loss) s.first_loss = r.train_loss;
    s.last_loss = r.train_loss;
    if (!s.min_loss || *r.train_loss < *s.min_loss) {
      s.min_loss = r.train_loss;
      s.min_loss_iteration = r.iteration;
    }
  }
  return s;
}

}  // namespace viper
