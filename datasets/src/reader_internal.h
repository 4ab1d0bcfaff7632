// Internal pieces of the log readers: reading a file, message excerpts and
// the TFRecord walk (tfevents.cc); the row pipeline is log_rows.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "viper/core/status.h"
#include "viper/datasets/log_reader.h"

namespace viper {
namespace datasets {
namespace internal {

// The whole file at `path` (log_reader.cc), gzip inflated (by its magic,
// whatever the name): an error past options.max_bytes (after decompression)
// and, unless `binary` or the content is a TFRecord, at the first line longer
// than options.max_line_bytes; a truncated or corrupt .gz is DataLoss. Every
// reader of a file goes through it (the training logs, the staleness table).
StatusOr<std::string> ReadWholeFile(const std::string& path, const LogReader::Options& options, bool binary);

// At most `max_chars` characters of `s`, quoted, non-printable bytes as \xNN,
// with the total length when cut: never an unbounded piece of input in a message.
std::string Excerpt(std::string_view s, size_t max_chars = 60);
// Lower-case ASCII copy.
std::string Lower(std::string_view s);

// One scalar of a TensorBoard event file.
struct TfScalar {
  int64_t record = 0;       // 1-based record number in the file
  uint64_t offset = 0;      // byte offset of the record
  double wall_time = 0;     // Event.wall_time (seconds since the Unix epoch)
  int64_t step = 0;         // Event.step
  std::string tag;          // Summary.Value.tag
  double value = 0;         // simple_value, or the scalar tensor's value
};

// Walks the TFRecord framing of `data` (both CRCs checked) and decodes each
// Event; calls `visit` for every scalar value (simple_value or a one-element
// numeric tensor). `max_records` bounds the records read.
Status ForEachTfScalar(std::string_view data, const std::string& source, int64_t max_records,
                       const std::function<Status(const TfScalar&)>& visit);
// Whether `data` starts with a TFRecord header whose length CRC matches.
bool LooksLikeTfRecord(std::string_view data);

}  // namespace internal
}  // namespace datasets
}  // namespace viper
