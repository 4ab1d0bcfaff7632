// CSV logs: plain, Keras CSVLogger, Lightning metrics.csv, TensorBoard's scalar
// export. Rows go through the shared Builder (log_rows.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "log_rows.h"

namespace viper {
namespace datasets {
namespace internal {

StatusOr<TrainingLog> ParseCsv(std::string_view text, const std::string& source, const LogReader::Options& options,
                               LogFormat format) {
  LineReader lines(text, source, options.max_line_bytes);
  std::string_view line;
  bool found = false;
  while (true) {
    VIPER_ASSIGN_OR_RETURN(bool more, lines.Next(&line));
    if (!more) break;
    const std::string_view t = TrimView(line);
    if (!t.empty() && t[0] != '#') {
      found = true;
      break;
    }
  }
  if (!found) return InvalidArgumentError(source + ": the file is empty (expected a CSV header line)");
  const int64_t header_line = lines.line_no();
  const std::string where_header = Where(source, header_line);
  const std::vector<std::string> header = SplitCsv(line);
  // A header must name columns, not hold numbers.
  for (const auto& name : header) {
    if (name.empty()) continue;
    const std::string copy = name;
    char* e = nullptr;
    std::strtod(copy.c_str(), &e);
    if (e == copy.c_str() + copy.size()) {
      return InvalidArgumentError(where_header + ": missing header (the first line holds the number " +
                                  Excerpt(name) + ", expected column names such as iteration,train_loss)");
    }
  }
  Columns cols;
  std::vector<int> first_of(header.size());  // column -> first column of the same (lower-case) name
  for (size_t i = 0; i < header.size(); ++i) {
    first_of[i] = cols.Add(header[i]);
    if (first_of[i] != static_cast<int>(i)) {
      // A repeated name (case-insensitive): only an error if it is read.
      cols.names.push_back(header[i]);
    }
  }
  const auto names = NamesFor(format, source);
  VIPER_ASSIGN_OR_RETURN(Selection sel, Select(cols, names, Overrides(options, format), where_header, format));
  VIPER_RETURN_IF_ERROR(CheckSelection(sel, cols, names, where_header, format));
  for (int f = 0; f < kNumFields; ++f) {
    if (sel[f] < 0) continue;
    for (size_t i = 0; i < header.size(); ++i) {
      if (static_cast<int>(i) != sel[f] && first_of[i] == sel[f]) {
        return InvalidArgumentError(where_header + ": column " + Excerpt(header[i], 40) + " appears twice (columns " +
                                    std::to_string(sel[f] + 1) + " and " + std::to_string(i + 1) +
                                    "); which one is the " + kFieldInfo[f].what + "?");
      }
    }
  }
  Builder builder(source, options, MakeSpec(format, sel, cols, options));
  while (true) {
    VIPER_ASSIGN_OR_RETURN(bool more, lines.Next(&line));
    if (!more) break;
    const std::string_view t = TrimView(line);
    if (t.empty() || t[0] == '#') continue;
    const int64_t line_no = lines.line_no();
    const std::string where = Where(source, line_no);
    const std::vector<std::string> fields = SplitCsv(line);
    if (fields.size() != header.size()) {
      return InvalidArgumentError(where + ": expected " + std::to_string(header.size()) +
                                  " fields as in the header, got " + std::to_string(fields.size()) + ": " +
                                  Excerpt(line));
    }
    Values v;
    for (int f = 0; f < kNumFields; ++f) {
      if (sel[f] < 0) continue;
      const auto c = static_cast<size_t>(sel[f]);
      VIPER_ASSIGN_OR_RETURN(v[f], ParseNumber(fields[c], header[c], where));
    }
    VIPER_RETURN_IF_ERROR(builder.Add(v, where, line_no));
  }
  return builder.Finish();
}

}  // namespace internal
}  // namespace datasets
}  // namespace viper
