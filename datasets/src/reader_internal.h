// Internal pieces of the log readers: message excerpts and the TFRecord walk
// (tfevents.cc); the row pipeline is log_rows.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "viper/core/status.h"

namespace viper {
namespace datasets {
namespace internal {

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
