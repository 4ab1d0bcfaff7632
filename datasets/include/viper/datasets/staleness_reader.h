// The staleness-table reader (the table: viper/core/staleness_table.h; its
// writer: FormatStalenessCsv there).
//
// CSV, optionally gzip-compressed (a .gz suffix or the gzip magic), with one
// header line naming the columns
//   version_iteration,traffic_iteration,val_loss,val_accuracy,test_loss,test_accuracy
// in any order, case-insensitively; the two accuracy columns are optional,
// any other column is an error that lists the known ones. One row per
// measured pair v <= t:
//   - iterations are integers in 0..kMaxLogIteration (digits only: no sign,
//     fraction or exponent);
//   - losses are finite and >= 0, accuracies in [0, 1] or an empty cell;
//     a required cell may not be empty;
//   - a (v, t) pair appears once; rows may come in any order and are
//     returned sorted by (v, t);
//   - blank lines, \r\n line ends and a UTF-8 byte-order mark are accepted;
//     a table without rows is an error.
// Every error names the file, the 1-based line and the column, and quotes at
// most a bounded excerpt of the input. The limits are those of the
// training-log reader (LogReader::Options).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "viper/core/staleness_table.h"
#include "viper/core/status.h"
#include "viper/datasets/log_reader.h"

namespace viper {
namespace datasets {

class StalenessReader {
 public:
  struct Options {
    // The longest line, in bytes (without its line end).
    int64_t max_line_bytes = kDefaultMaxLineBytes;
    // The most data rows (the header and blank lines not counted).
    int64_t max_rows = kDefaultMaxRows;
    // The most bytes read, after decompression.
    int64_t max_bytes = kDefaultMaxBytes;
    // A NaN or infinite loss, as for training logs (LogReader::Options):
    // reject (an error naming the line), drop (skip the row: the pair is
    // missing and interpolated), or diverged (kept as +inf: a version whose
    // own-time loss is +inf is a diverged model, never served). A non-finite
    // accuracy is absent under drop and diverged.
    NonFinitePolicy non_finite = NonFinitePolicy::kReject;

    // False, with the field and the violated constraint in *error, when a
    // limit is not positive.
    bool IsValid(std::string* error) const;
  };

  // Reads the table at `path` (.gz or gzip magic: inflated), with the
  // training-log reader's file handling and limits.
  static StatusOr<StalenessTable> ReadFile(const std::string& path, const Options& options);
  // Parses a table already in memory (decompressed); `source` names it in
  // messages and becomes StalenessTable::source. The entry point for
  // fuzzing: never crashes, allocates within the limits.
  static StatusOr<StalenessTable> Parse(std::string_view text, const std::string& source,
                                        const Options& options);
};

}  // namespace datasets
}  // namespace viper
