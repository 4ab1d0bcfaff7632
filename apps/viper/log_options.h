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
  std::string non_finite = "reject";
  datasets::LogReader::Options reader;
};

// Adds --log, --format, --non-finite, the column and tag overrides,
// --iterations-per-epoch, --time-is-duration and the reading limits.
void AddLogOptions(po::options_description* desc, LogOptions* options);
// Reads the log the options name.
StatusOr<TrainingLog> ReadLog(LogOptions options);

}  // namespace cli
}  // namespace viper
