// The log-reading options every subcommand that takes --log shares.
#pragma once

#include <string>

#include "cli_util.h"
#include "viper/datasets/log_reader.h"

namespace viper {
namespace cli {

struct LogOptions {
  std::string path;
  std::string format = "auto";
  // A NaN/inf loss is a model that diverged there (kept as +inf, never to be
  // served): planning and judging a run that diverges is what they are for.
  std::string non_finite = "diverged";
  datasets::LogReader::Options reader;
};

// Adds --log, --format, --non-finite, the column and tag overrides,
// --iterations-per-epoch, --time-is-duration and the reading limits.
void AddLogOptions(po::options_description* desc, LogOptions* options);
// The same without --log, for a command that names its logs itself (fit's
// --log takes several with --evaluate).
void AddLogReaderOptions(po::options_description* desc, LogOptions* options);
// Reads the log the options name, or `path` with the options' reader settings.
StatusOr<TrainingLog> ReadLog(LogOptions options);
StatusOr<TrainingLog> ReadLog(LogOptions options, const std::string& path);

}  // namespace cli
}  // namespace viper
