// Training-log readers: plain CSV with a header, Keras CSVLogger, PyTorch
// Lightning metrics.csv, and JSON lines (HuggingFace Trainer's log history
// among them); gzip-compressed files (.gz) are read directly. Errors name the
// file, the line, the column and what was expected.
//
// Rows of one step: Lightning writes train, val and test metrics of one step
// on separate rows, which are merged. In JSON lines two consecutive lines of
// the same step are merged when no metric appears in both (HuggingFace logs
// the training loss and the eval_* metrics on separate lines); otherwise
// iterations must strictly increase.
#pragma once

#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/core/training_log.h"

namespace viper {
namespace datasets {

enum class LogFormat {
  kAuto,       // from the extension and the header
  kCsv,        // one row per iteration: iteration/step, loss, ...
  kKeras,      // Keras CSVLogger: one row per epoch (epoch, loss, val_loss, ...)
  kLightning,  // Lightning metrics.csv: train and val metrics on separate rows
  kJsonLines,  // one JSON object per line
};
const char* ToString(LogFormat format);
StatusOr<LogFormat> LogFormatFromString(const std::string& name);

enum class NonFinitePolicy { kReject, kDrop };
const char* ToString(NonFinitePolicy policy);
StatusOr<NonFinitePolicy> NonFinitePolicyFromString(const std::string& name);

class LogReader {
 public:
  struct Options {
    // Input format; kAuto decides from the extension and the header.
    LogFormat format = LogFormat::kAuto;
    // Column-name (JSON: key) overrides; empty = recognise the common names
    // (iteration|step|global_step, epoch, loss|train_loss, val_loss,
    // val_accuracy|val_acc, test_loss|test/loss, test_accuracy|test_acc,
    // wall_time|time). HuggingFace Trainer's eval_loss / eval_accuracy are the
    // validation series where no val_* column exists.
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
    // What to do with a NaN or infinite loss: reject the file, or drop the
    // row and count it in TrainingLog::dropped_non_finite.
    NonFinitePolicy non_finite = NonFinitePolicy::kReject;

    bool IsValid(std::string* error) const;
  };

  // Reads `path` (a .gz suffix means gzip).
  static StatusOr<TrainingLog> ReadFile(const std::string& path, const Options& options);
  // Parses text already in memory; `source` names it in messages.
  static StatusOr<TrainingLog> Parse(const std::string& text, const std::string& source, const Options& options);
};

// Directory of the logs shipped in the source tree (datasets/logs).
std::string ShippedLogDirectory();
// The shipped logs (.csv, .csv.gz, .jsonl files in ShippedLogDirectory()),
// full paths, sorted; empty when the directory has none.
std::vector<std::string> ShippedLogFiles();

}  // namespace datasets
}  // namespace viper
