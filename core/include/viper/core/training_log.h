// Training-log records: what a producer logged per iteration. Optional fields
// stay absent (std::nullopt), never zero.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace viper {

struct LogRecord {
  int64_t iteration = 0;                // global iteration (step), strictly increasing in a log
  std::optional<int64_t> epoch;         // epoch the iteration belongs to (0-based or as logged)
  std::optional<double> wall_time_s;    // seconds since the start of training
  std::optional<double> train_loss;     // training loss at this iteration
  std::optional<double> val_loss;       // validation loss, where evaluated
  std::optional<double> val_accuracy;   // validation accuracy in [0, 1], where evaluated
  // The same model measured on a sample disjoint from the validation sample,
  // standing for the inference traffic (the judge's truth; planners never read it).
  std::optional<double> test_loss;      // test loss, where evaluated
  std::optional<double> test_accuracy;  // test accuracy in [0, 1], where evaluated
};

// A whole log, in iteration order.
struct TrainingLog {
  std::string source;               // file it was read from (for messages)
  std::string format;               // the format it was read as ("csv", "tfevents", ...; empty = unknown)
  std::vector<LogRecord> records;
  int64_t dropped_non_finite = 0;   // rows dropped for NaN/inf losses (when allowed)
  // NaN/inf losses kept as +inf: the model diverged there (--non-finite diverged).
  int64_t diverged_values = 0;
  // Entries that summarise the run rather than log a step (Hugging Face's
  // final train_loss/train_runtime entry): skipped, never a loss point.
  int64_t skipped_summary_rows = 0;
  // TensorBoard formats (event files and scalar exports) of a restarted run:
  // when a step goes back, the values logged earlier at that step and after
  // it are orphaned (the run was resumed from an earlier checkpoint) and
  // discarded, as TensorBoard itself does; the rest is kept. How many values
  // (rows of an export) were discarded, and at how many restarts.
  int64_t discarded_orphaned_rows = 0;
  int64_t restarts = 0;
  // The column, key or tag the wall times came from; empty = the log has no
  // wall time (a caller that needs seconds per iteration must ask the user).
  std::string wall_time_column;
  // The wall-time column held seconds per iteration and was accumulated.
  bool wall_time_from_durations = false;
  // > 0: the log's rows were epochs, mapped to iterations with this many
  // iterations per epoch (epoch e -> iteration (e + 1) * iterations_per_epoch).
  int64_t epoch_level_iterations_per_epoch = 0;

  bool empty() const { return records.empty(); }
  // Rows with a wall time; HasWallTime() = at least two (a time span).
  int64_t TimedRows() const;
  bool HasWallTime() const { return TimedRows() >= 2; }
  // Rows with a training loss / a validation loss.
  int64_t TrainLossPoints() const;
  int64_t ValLossPoints() const;
  // Evaluation-only: validation points and no training loss at all.
  bool EvaluationOnly() const { return TrainLossPoints() == 0 && ValLossPoints() > 0; }
};

// What `viper log-info` prints.
struct LogSummary {
  int64_t rows = 0;
  int64_t first_iteration = 0;
  int64_t last_iteration = 0;
  std::optional<int64_t> epochs;                // distinct epochs seen
  std::optional<double> iterations_per_epoch;   // median length of the complete epochs
  std::optional<double> seconds_per_iteration;  // mean, from wall times
  std::optional<double> first_loss, last_loss, min_loss;  // training loss
  std::optional<int64_t> min_loss_iteration;
  int64_t val_points = 0;                       // rows with a validation loss
  int64_t train_points = 0;                     // rows with a training loss
  int64_t timed_rows = 0;                       // rows with a wall time
  int64_t dropped_non_finite = 0;
  int64_t diverged_values = 0;                  // losses kept as +inf (a diverged model)
  std::optional<int64_t> first_diverged_iteration;
};

LogSummary Summarize(const TrainingLog& log);

}  // namespace viper
