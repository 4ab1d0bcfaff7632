// Internal: the row pipeline every text log format shares (log_rows.cc):
// the fields a row carries and the names they are recognised by, column
// selection, and the Builder that turns rows into a TrainingLog with the
// same checks for every format (ranges, non-finite values, increasing
// iterations, merged steps, wall times). The formats themselves are
// log_csv.cc, log_json.cc and tfevents.cc; log_reader.cc detects and
// dispatches.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reader_internal.h"
#include "viper/core/status.h"
#include "viper/datasets/log_reader.h"

namespace viper {
namespace datasets {
namespace internal {

// The fields a row can carry.
enum Field { kIteration, kEpoch, kLoss, kValLoss, kValAcc, kTestLoss, kTestAcc, kWallTime, kNumFields };
using Values = std::array<std::optional<double>, kNumFields>;

struct FieldInfo {
  const char* what;    // in messages
  const char* option;  // the CLI option naming its column
};
inline const FieldInfo kFieldInfo[kNumFields] = {
    {"iteration", "--iteration-column"},          {"epoch", "--epoch-column"},
    {"training loss", "--loss-column"},           {"validation loss", "--val-loss-column"},
    {"validation accuracy", "--val-accuracy-column"}, {"test loss", "--test-loss-column"},
    {"test accuracy", "--test-accuracy-column"},  {"wall time", "--wall-time-column"}};

// Recognised names (lower case), in order of preference. Hugging Face's
// eval_* names come after the val_* ones: they are the validation series
// only where no val_* column exists.
inline const std::vector<std::string> kNames[kNumFields] = {
    {"iteration", "iter", "step", "global_step"},
    {"epoch"},
    {"train_loss", "loss", "training_loss", "train_loss_step", "train/loss", "total_loss", "loss/train",
     "train/loss_step", "epoch_loss"},
    {"val_loss", "validation_loss", "valid_loss", "val/loss", "val_loss_epoch", "validation/loss", "loss/val",
     "loss/validation", "loss/valid", "eval_loss", "eval/loss", "epoch_val_loss"},
    {"val_accuracy", "val_acc", "validation_accuracy", "valid_acc", "val/acc", "val/accuracy", "val_acc_epoch",
     "accuracy/val", "eval_accuracy", "eval_acc", "eval/accuracy", "eval/acc"},
    {"test_loss", "test/loss", "test_loss_epoch", "loss/test"},
    {"test_accuracy", "test_acc", "test/acc", "test/accuracy", "test_accuracy_epoch", "test_acc_epoch",
     "accuracy/test"},
    {"wall_time", "wall_time_s", "time", "elapsed_s", "elapsed", "wall time"},
};

// Keys that mark a summary of the whole run, not a logged step (Hugging
// Face Trainer's last log_history entry: its train_loss is the run's mean).
inline const char* const kSummaryKeys[] = {"train_runtime", "total_flos", "train_samples_per_second",
                                    "train_steps_per_second"};

constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxNamesListed = 24;

inline std::string Where(const std::string& source, int64_t line) { return source + ":" + std::to_string(line); }
std::string Num(double v);
// Names for a message: bounded in count and in length.
std::string JoinNames(const std::vector<std::string>& names);
std::string_view TrimView(std::string_view s);
bool EndsWith(const std::string& s, const std::string& suffix);
// The file name without its directory and a .gz suffix.
std::string BaseName(const std::string& source);
// Splits one CSV line; handles double-quoted fields with "" escapes.
std::vector<std::string> SplitCsv(std::string_view line);
// Parses a whole field as a decimal number (NaN/inf spelled out are numbers;
// the non-finite policy decides). Empty / null / None = absent.
StatusOr<std::optional<double>> ParseNumber(std::string_view field, const std::string& column,
                                            const std::string& where);
// Deepest nesting of JSON arrays/objects in `s` (strings skipped).
int JsonDepth(std::string_view s);
// `text` as JSON, refusing nesting deeper than kMaxJsonDepth; errors name `where`.
StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& where, const char* expected);

// Reads `text` line by line: \n, \r\n and a lone \r (old Mac files) end a
// line; a line longer than the limit is an error naming it.
class LineReader {
 public:
  LineReader(std::string_view text, const std::string& source, int64_t max_line_bytes)
      : text_(text), source_(source), max_(max_line_bytes) {}
  // Next line into *line (without its end); false at the end of the text.
  StatusOr<bool> Next(std::string_view* line) {
    if (pos_ >= text_.size()) return false;
    size_t e = pos_;
    while (e < text_.size() && text_[e] != '\n' && text_[e] != '\r') ++e;
    ++line_no_;
    if (static_cast<int64_t>(e - pos_) > max_) {
      return OutOfRangeError(Where(source_, line_no_) + ": line longer than the limit of " + std::to_string(max_) +
                             " bytes (--max-line-bytes); not a text log, or a wrong --format?");
    }
    *line = text_.substr(pos_, e - pos_);
    if (e >= text_.size()) {
      pos_ = e;
    } else if (text_[e] == '\r' && e + 1 < text_.size() && text_[e + 1] == '\n') {
      pos_ = e + 2;
    } else {
      pos_ = e + 1;
    }
    return true;
  }
  int64_t line_no() const { return line_no_; }

 private:
  std::string_view text_;
  const std::string& source_;
  int64_t max_;
  size_t pos_ = 0;
  int64_t line_no_ = 0;
};


// The columns (CSV header, JSON keys, event-file tags) a log offers.
struct Columns {
  std::vector<std::string> names;               // original spelling, first seen
  std::unordered_map<std::string, int> index;   // lower case -> position in names
  const char* kind = "column";                  // column | key | tag

  int Add(const std::string& name) {
    std::string low = Lower(name);
    auto [it, inserted] = index.emplace(std::move(low), static_cast<int>(names.size()));
    if (inserted) names.push_back(name);
    return it->second;
  }
  int Find(const std::string& name) const {
    auto it = index.find(Lower(name));
    return it == index.end() ? -1 : it->second;
  }
};

using Selection = std::array<int, kNumFields>;  // column per field, -1 = none

// The overrides from the options, per field ("" = none).
std::array<std::string, kNumFields> Overrides(const LogReader::Options& o, LogFormat format);
// Picks the column of each field: the override (which must exist) or the
// first recognised name present.
StatusOr<Selection> Select(const Columns& cols, const std::array<std::vector<std::string>, kNumFields>& names,
                           const std::array<std::string, kNumFields>& overrides, const std::string& where,
                           LogFormat format);
// The names each field is recognised by in `format` (lower case).
std::array<std::vector<std::string>, kNumFields> NamesFor(LogFormat format, const std::string& source);
// Requires an iteration (or, epoch-level, an epoch) and a loss.
Status CheckSelection(const Selection& sel, const Columns& cols,
                      const std::array<std::vector<std::string>, kNumFields>& names, const std::string& where,
                      LogFormat format);

// ---------------------------------------------------------------------------
// Building the log from rows, the same for every format.

enum class SameStep {
  kReject,    // an error: iterations must strictly increase
  kMerge,     // Lightning: train and val metrics of one step on separate rows; later values win
  kDisjoint,  // JSON (Hugging Face, detectron2): merged when no metric appears in both rows
};

struct BuildSpec {
  LogFormat format = LogFormat::kCsv;
  SameStep same_step = SameStep::kReject;
  bool epoch_level = false;          // rows are epochs
  bool durations = false;            // the wall-time column holds seconds per iteration
  bool rebase_wall_time = false;     // wall times are Unix times: subtract the first
  bool skip_rows_without_metrics = false;  // Lightning's rows of other metrics
  // TensorBoard's exports: a step that goes back (or repeats) is a restart;
  // the rows at that step and after it are discarded (orphaned), as
  // TensorBoard does, and counted in TrainingLog::discarded_orphaned_rows.
  bool discard_orphans_on_restart = false;
  std::array<std::string, kNumFields> column;  // the selected column names ("" = none)
  // How a row number reads in messages: "line N" (text) or "record N" etc.
  const char* row_word = nullptr;  // nullptr = "file:N" (a line)
};

BuildSpec MakeSpec(LogFormat format, const Selection& sel, const Columns& cols, const LogReader::Options& o);

// Turns rows into a TrainingLog: every check a row needs, whatever its format.
class Builder {
 public:
  Builder(const std::string& source, const LogReader::Options& options, BuildSpec spec);

  void CountSummary() { ++log_.skipped_summary_rows; }
  // Adds one row; `where` names it in messages, `line` is its line (record).
  Status Add(const Values& v, const std::string& where, int64_t line);
  // The log, after the wall-time checks; an error when no row has a loss.
  StatusOr<TrainingLog> Finish();

 private:
  // Adds `r`, enforcing strictly increasing iterations (or merging rows of
  // the same step as the format allows).
  Status Append(LogRecord r, const std::string& where, int64_t line);
  // Wall times: durations accumulated into a clock, Unix times rebased, and
  // the clock checked (>= 0, never going back).
  Status CheckWallTimes();
  // Where row `n` is, and how another row is referred to in a message.
  std::string Locate(int64_t n) const;
  std::string Ref(int64_t n) const;


  const std::string& source_;
  const LogReader::Options& o_;
  BuildSpec spec_;
  TrainingLog log_;
  std::vector<int64_t> lines_;  // line (or record) of each record, for messages
  int64_t rows_ = 0;
  int64_t ipe_ = 1;
};

// ---------------------------------------------------------------------------
// The formats, each a text (or the bytes of an event file) to a TrainingLog.

// CSV (log_csv.cc): plain, Keras, Lightning, TensorBoard's scalar export.
StatusOr<TrainingLog> ParseCsv(std::string_view text, const std::string& source, const LogReader::Options& options,
                               LogFormat format);
// JSON (log_json.cc): JSON lines and detectron2 (`format`), trainer_state.json,
// TensorBoard's JSON export.
StatusOr<TrainingLog> ParseJsonLines(std::string_view text, const std::string& source,
                                     const LogReader::Options& options, LogFormat format);
StatusOr<TrainingLog> ParseHuggingFace(std::string_view text, const std::string& source,
                                       const LogReader::Options& options);
StatusOr<TrainingLog> ParseTensorBoardJson(std::string_view text, const std::string& source,
                                           const LogReader::Options& options);
// TensorBoard event files (tfevents.cc).
StatusOr<TrainingLog> ParseTfEvents(std::string_view data, const std::string& source,
                                    const LogReader::Options& options);

}  // namespace internal
}  // namespace datasets
}  // namespace viper
