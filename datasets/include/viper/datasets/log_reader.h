// Training-log readers: plain CSV with a header, Keras CSVLogger, PyTorch
// Lightning metrics.csv, JSON lines, Hugging Face Trainer's trainer_state.json,
// TensorBoard scalar exports (CSV and JSON) and event files
// (events.out.tfevents.*), detectron2's metrics.json; gzip-compressed files
// (.gz) are read directly. Column, key and tag names match case-insensitively.
// Errors name the file, the line (or record), the column and what was
// expected, and quote at most a bounded excerpt of the input.
//
// Rows of one step: Lightning writes train, val and test metrics of one step
// on separate rows, which are merged. In JSON lines (and trainer_state.json,
// detectron2) two consecutive entries of the same step are merged when no
// metric appears in both (Hugging Face logs the training loss and the eval_*
// metrics in separate entries); otherwise iterations must strictly increase.
//
// TensorBoard of a restarted run (event files, and the scalar exports in CSV
// and JSON): when a step goes back or repeats, the run was resumed from an
// earlier checkpoint and the values logged before at that step and after it
// are orphaned. TensorBoard discards them and plots the rest (its
// purge_orphaned_data; in an event file per tag, as TensorBoard purges the
// tags of the event that went back); so does this reader, counting them in
// TrainingLog::discarded_orphaned_rows and ::restarts (log-info prints both,
// and a warning). Every other format still requires increasing iterations.
//
// Epoch-level logs (an epoch column and no iteration column, e.g. Keras):
// epoch e (0-based) becomes iteration (e + 1) * iterations_per_epoch.
//
// Wall time is a clock (seconds, non-decreasing). A column that goes back is
// refused with a hint unless time_is_duration says it holds seconds per
// iteration (detectron2's "time", read so by default in that format); the
// reader then accumulates it into a clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/core/training_log.h"

namespace viper {
namespace datasets {

enum class LogFormat {
  kAuto,             // from the file name and the content
  kCsv,              // one row per iteration: iteration/step, loss, ...
  kKeras,            // Keras CSVLogger: one row per epoch (epoch, loss, val_loss, ...)
  kLightning,        // Lightning metrics.csv: train and val metrics on separate rows
  kJsonLines,        // one JSON object per line
  kHuggingFace,      // Hugging Face Trainer trainer_state.json (log_history)
  kTensorBoardCsv,   // TensorBoard scalar export: Wall time,Step,Value
  kTensorBoardJson,  // TensorBoard scalar export: [[wall_time, step, value], ...]
  kTfEvents,         // TensorBoard event file (TFRecord of Event protos)
  kDetectron2,       // detectron2 metrics.json (JSON lines; time = seconds per iteration)
};
const char* ToString(LogFormat format);
StatusOr<LogFormat> LogFormatFromString(const std::string& name);
// "auto|csv|keras|..." for help texts and messages.
std::string LogFormatNames();

// What a NaN or infinite value in a log means.
//  kReject:   an error naming the file, line and column.
//  kDrop:     the row is skipped and counted (TrainingLog::dropped_non_finite).
//  kDiverged: the model diverged there: a non-finite train/val/test loss is
//             kept as +infinity (a version that must never be served; the
//             judge charges it +inf, the planners never publish it); a
//             non-finite accuracy is absent; a non-finite wall time is
//             still an error. Counted in TrainingLog::diverged_values.
enum class NonFinitePolicy { kReject, kDrop, kDiverged };
const char* ToString(NonFinitePolicy policy);
StatusOr<NonFinitePolicy> NonFinitePolicyFromString(const std::string& name);

// Defaults of the reading limits (LogReader::Options).
inline constexpr int64_t kDefaultMaxLineBytes = int64_t{1} << 20;   // 1 MiB
inline constexpr int64_t kDefaultMaxRows = 5'000'000;
inline constexpr int64_t kDefaultMaxBytes = int64_t{1} << 30;       // 1 GiB, after decompression
// The largest iteration or epoch a log may hold (2^53: exact in a double).
inline constexpr int64_t kMaxLogIteration = int64_t{1} << 53;

class LogReader {
 public:
  struct Options {
    // Input format; kAuto decides from the file name and the content.
    LogFormat format = LogFormat::kAuto;
    // Column-name (JSON: key) overrides, matched case-insensitively; empty =
    // recognise the common names (iteration|step|global_step, epoch,
    // loss|train_loss|total_loss, val_loss, val_accuracy|val_acc,
    // test_loss|test/loss, test_accuracy|test_acc, wall_time|time). Hugging
    // Face's eval_loss / eval_accuracy are the validation series where no
    // val_* column exists.
    std::string iteration_column;
    std::string epoch_column;
    std::string loss_column;
    std::string val_loss_column;
    std::string val_accuracy_column;
    // The loss and accuracy on a sample disjoint from the validation sample
    // (the inference traffic's truth; LogRecord::test_loss / test_accuracy).
    std::string test_loss_column;
    std::string test_accuracy_column;
    std::string wall_time_column;
    // TensorBoard event files: the scalar tags of the training and the
    // validation loss; empty = the common tags (loss, train/loss, train_loss,
    // ... and val/loss, eval/loss, val_loss, ...), else loss_column /
    // val_loss_column when set.
    std::string loss_tag;
    std::string val_tag;
    // Epoch-level logs (no iteration column): iterations per epoch, so that
    // epoch e (0-based) is iteration (e + 1) * iterations_per_epoch; 0 = 1.
    // Ignored for logs that have iterations.
    int64_t iterations_per_epoch = 0;
    // The wall-time column holds seconds per iteration (durations), not a
    // clock: the reader accumulates it. Always so for detectron2.
    bool time_is_duration = false;
    // What to do with a NaN or infinite loss: reject the file, drop the row
    // (counted in TrainingLog::dropped_non_finite), or keep it as a diverged
    // model (+inf, counted in TrainingLog::diverged_values).
    NonFinitePolicy non_finite = NonFinitePolicy::kReject;
    // Limits: the longest line of a text log, the most data rows (records
    // of an event file), the most bytes read (after decompression).
    int64_t max_line_bytes = kDefaultMaxLineBytes;
    int64_t max_rows = kDefaultMaxRows;
    int64_t max_bytes = kDefaultMaxBytes;
    // A pipe given as the log (`--log <(zcat run.csv.gz)`, /dev/stdin):
    // seconds to wait for its writer's first bytes before failing (a FIFO
    // that no writer opens must not hang the reader). Regular files are read
    // at once; devices and sockets are refused.
    double pipe_wait_s = 10;

    bool IsValid(std::string* error) const;
  };

  // Reads `path` (a .gz suffix or gzip magic means gzip). Stops with an
  // error at options.max_bytes, and for text formats at the first line
  // longer than options.max_line_bytes.
  static StatusOr<TrainingLog> ReadFile(const std::string& path, const Options& options);
  // Parses a log already in memory (any format, binary event files
  // included); `source` names it in messages and, with format kAuto, helps
  // detect the format (its extension / base name). The entry point for
  // fuzzing: never crashes, never allocates more than the limits allow.
  static StatusOr<TrainingLog> Parse(const std::string& text, const std::string& source, const Options& options);
  // The format kAuto resolves to for this content and source name.
  static LogFormat DetectFormat(const std::string& text, const std::string& source);
};

// CRC-32C (Castagnoli) of `data`, and TFRecord's masked form of it.
uint32_t Crc32c(const void* data, size_t size);
uint32_t MaskedCrc32c(const void* data, size_t size);

// Directory of the logs shipped in the source tree (datasets/logs).
std::string ShippedLogDirectory();
// The shipped logs (.csv, .csv.gz, .jsonl files in ShippedLogDirectory()),
// full paths, sorted; empty when the directory has none.
std::vector<std::string> ShippedLogFiles();
// Directory of the small real-shaped test logs, one per format and quirk
// (datasets/testdata).
std::string TestDataDirectory();

}  // namespace datasets
}  // namespace viper
