// Writes a trainer's per-iteration log as CSV with the header
//   iteration,epoch,wall_time,train_loss,val_loss,val_accuracy,test_loss,test_accuracy,lr
// (validation and test fields empty where not evaluated), gzip-compressed
// when the path ends in ".gz". datasets::LogReader reads both forms.
// A trainer's staleness table: core's WriteStalenessTable (staleness_table.h).
#pragma once

#include <memory>
#include <string>

#include "viper/core/staleness_table.h"
#include "viper/core/status.h"
#include "viper/core/training_log.h"

namespace viper {
namespace workflow {

class TrainingLogWriter {
 public:
  // Creates (truncates) `path` and writes the header.
  static StatusOr<std::unique_ptr<TrainingLogWriter>> Open(const std::string& path);
  ~TrainingLogWriter();
  TrainingLogWriter(const TrainingLogWriter&) = delete;
  TrainingLogWriter& operator=(const TrainingLogWriter&) = delete;

  // Appends one row. Losses are written with 9 significant digits (enough to
  // round-trip a float32), wall time in seconds with microsecond resolution.
  Status Append(const LogRecord& record, double learning_rate);
  // Flushes and closes; further appends fail. Called by the destructor too.
  Status Close();
  const std::string& path() const { return path_; }

 private:
  TrainingLogWriter() = default;
  std::string path_;
  void* file_ = nullptr;  // gzFile (zlib writes plain text in transparent mode)
};

}  // namespace workflow
}  // namespace viper
