#include "viper/workflow/trainer_log.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>

namespace viper {
namespace workflow {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

StatusOr<std::unique_ptr<TrainingLogWriter>> TrainingLogWriter::Open(const std::string& path) {
  // "wb9": best compression (the shipped logs are gzip); "wT": plain text.
  const char* mode = EndsWith(path, ".gz") ? "wb9" : "wT";
  errno = 0;
  gzFile file = gzopen(path.c_str(), mode);
  if (file == nullptr) {
    if (errno != 0) return ErrnoError("cannot create log '" + path + "'", errno);
    return IoError("cannot create log '" + path + "'");
  }
  std::unique_ptr<TrainingLogWriter> writer(new TrainingLogWriter());
  writer->path_ = path;
  writer->file_ = file;
  static const char kHeader[] =
      "iteration,epoch,wall_time,train_loss,val_loss,val_accuracy,test_loss,test_accuracy,lr\n";
  if (gzputs(file, kHeader) < 0) return IoError("cannot write the header of log '" + path + "'");
  return writer;
}

TrainingLogWriter::~TrainingLogWriter() { (void)Close(); }

Status TrainingLogWriter::Append(const LogRecord& r, double learning_rate) {
  if (file_ == nullptr) return FailedPreconditionError("log '" + path_ + "' is closed");
  char line[320];
  int n = std::snprintf(line, sizeof line, "%lld,%lld,%.6f,%.9g", static_cast<long long>(r.iteration),
                        static_cast<long long>(r.epoch.value_or(0)), r.wall_time_s.value_or(0.0),
                        r.train_loss.value_or(0.0));
  // Losses with 9 significant digits, accuracies with 6; empty where absent.
  auto field = [&](const std::optional<double>& value, const char* format) {
    line[n++] = ',';
    if (value) n += std::snprintf(line + n, sizeof line - static_cast<std::size_t>(n), format, *value);
  };
  field(r.val_loss, "%.9g");
  field(r.val_accuracy, "%.6g");
  field(r.test_loss, "%.9g");
  field(r.test_accuracy, "%.6g");
  n += std::snprintf(line + n, sizeof line - static_cast<std::size_t>(n), ",%.9g\n", learning_rate);
  if (gzwrite(static_cast<gzFile>(file_), line, static_cast<unsigned>(n)) != n) {
    return IoError("cannot append to log '" + path_ + "' (disk full?)");
  }
  return Status::Ok();
}

Status TrainingLogWriter::Close() {
  if (file_ == nullptr) return Status::Ok();
  const int rc = gzclose(static_cast<gzFile>(file_));
  file_ = nullptr;
  if (rc != Z_OK) return IoError("cannot finish log '" + path_ + "' (zlib error " + std::to_string(rc) + ")");
  return Status::Ok();
}

}  // namespace workflow
}  // namespace viper
