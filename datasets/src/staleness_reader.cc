// The staleness-table reader (staleness_reader.h): the header's columns, each
// row's cells checked in turn, then the rows sorted by (v, t) and checked for
// repeated pairs. The file is read, and inflated, by the training-log
// reader's ReadWholeFile; lines, CSV fields and numbers by its pieces
// (log_rows.h).
#include "viper/datasets/staleness_reader.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "log_rows.h"
#include "reader_internal.h"

namespace viper {
namespace datasets {

namespace {

// The training-log reader's pieces (log_rows.h, reader_internal.h).
using internal::Excerpt;
using internal::JoinNames;
using internal::LineReader;
using internal::Lower;
using internal::ParseNumber;
using internal::ReadWholeFile;
using internal::SplitCsv;
using internal::TrimView;
using internal::Where;

enum Column { kVersion, kTraffic, kValLoss, kValAcc, kTestLoss, kTestAcc, kNumColumns };
constexpr const char* kColumnNames[kNumColumns] = {"version_iteration", "traffic_iteration", "val_loss",
                                                   "val_accuracy",      "test_loss",         "test_accuracy"};
constexpr bool kRequired[kNumColumns] = {true, true, true, false, true, false};

std::string KnownColumns() {
  std::string s;
  for (int c = 0; c < kNumColumns; ++c) {
    s += (c == 0 ? "" : ", ") + std::string(kColumnNames[c]) + (kRequired[c] ? "" : " (optional)");
  }
  return s;
}

// The header: which column each field is, and where each column is.
struct Header {
  std::vector<std::string> names;      // as spelt in the file, one per field
  std::array<int, kNumColumns> field;  // column -> field index, -1 = absent
};

StatusOr<Header> ParseHeader(std::string_view line, const std::string& where) {
  Header h;
  h.names = SplitCsv(line);
  h.field.fill(-1);
  for (size_t i = 0; i < h.names.size(); ++i) {
    const std::string low = Lower(h.names[i]);
    int c = 0;
    while (c < kNumColumns && low != kColumnNames[c]) ++c;
    if (c == kNumColumns) {
      const std::string number_hint =
          !low.empty() && low.find_first_not_of("0123456789.-+eE") == std::string::npos
              ? "; the first line holds a number: is the header missing?"
              : "";
      return InvalidArgumentError(where + ": column " + std::to_string(i + 1) + ": unknown column " +
                                  Excerpt(h.names[i], 40) + " (a staleness table has the columns " +
                                  KnownColumns() + ")" + number_hint);
    }
    if (h.field[c] >= 0) {
      return InvalidArgumentError(where + ": column '" + h.names[i] + "' appears twice (columns " +
                                  std::to_string(h.field[c] + 1) + " and " + std::to_string(i + 1) + ")");
    }
    h.field[c] = static_cast<int>(i);
  }
  for (int c = 0; c < kNumColumns; ++c) {
    if (kRequired[c] && h.field[c] < 0) {
      return InvalidArgumentError(where + ": no column '" + kColumnNames[c] +
                                  "' (required; the header has: " + JoinNames(h.names) +
                                  "; a staleness table has " + KnownColumns() + ")");
    }
  }
  return h;
}

// An iteration: decimal digits only (no sign, fraction or exponent), in
// 0..kMaxLogIteration.
StatusOr<int64_t> ParseIteration(std::string_view cell, const std::string& column, const std::string& where) {
  const std::string range = "an integer in 0.." + std::to_string(kMaxLogIteration);
  const std::string at = where + ": column '" + column + "': ";
  if (cell.empty()) return InvalidArgumentError(at + "empty cell (expected an iteration, " + range + ")");
  if (cell[0] == '-' && cell.size() > 1 &&
      cell.find_first_not_of("0123456789", 1) == std::string_view::npos) {
    return InvalidArgumentError(at + "iteration " + Excerpt(cell) + " is negative (expected " + range + ")");
  }
  if (cell.find_first_not_of("0123456789") != std::string_view::npos) {
    return InvalidArgumentError(at + "expected an iteration (" + range + ", digits only), got " +
                                Excerpt(cell));
  }
  int64_t v = 0;
  for (const char d : cell) {
    v = v * 10 + (d - '0');  // v <= 2^53 before this step: no overflow
    if (v > kMaxLogIteration) {
      return InvalidArgumentError(at + "iteration " + Excerpt(cell) + " is out of range (expected " + range +
                                  ")");
    }
  }
  return v;
}

// A loss (finite, >= 0) or an accuracy (in [0, 1]); an empty cell is absent,
// an error where `required`.
// Under NonFinitePolicy kDiverged a NaN/inf loss is +inf and a NaN/inf
// accuracy absent; under kDrop either sets *drop.
StatusOr<std::optional<double>> ParseMeasure(std::string_view cell, const std::string& column, bool accuracy,
                                             bool required, const std::string& where, NonFinitePolicy policy,
                                             bool* drop) {
  const std::string at = where + ": column '" + column + "': ";
  const char* expected = accuracy ? "an accuracy in [0, 1]" : "a finite loss >= 0";
  if (cell.empty()) {
    if (required) return InvalidArgumentError(at + "empty cell (expected " + expected + ")");
    return std::optional<double>();
  }
  VIPER_ASSIGN_OR_RETURN(std::optional<double> v, ParseNumber(cell, column, where));
  // ParseNumber reads null / None as absent: here they are not numbers.
  if (!v) return InvalidArgumentError(at + "expected " + expected + ", got " + Excerpt(cell));
  const char* wrong = nullptr;
  if (!std::isfinite(*v) && policy != NonFinitePolicy::kReject) {
    if (policy == NonFinitePolicy::kDrop) {
      *drop = true;
      return std::optional<double>();
    }
    if (accuracy) return std::optional<double>();
    return std::optional<double>(std::numeric_limits<double>::infinity());
  }
  if (std::isnan(*v)) {
    wrong = "not a number";
  } else if (*v < 0) {
    wrong = "negative";
  } else if (accuracy && *v > 1) {
    wrong = "above 1";
  } else if (!std::isfinite(*v)) {
    wrong = "not finite";
  }
  if (wrong) {
    const bool non_finite = !std::isfinite(*v);
    return InvalidArgumentError(at + (accuracy ? "accuracy " : "loss ") + Excerpt(cell) + " is " + wrong +
                                " (expected " + expected +
                                (non_finite ? "; pass --non-finite diverged to keep it as a diverged model, never "
                                              "served, or --non-finite drop to skip the row)"
                                            : ")"));
  }
  return v;
}

struct Row {
  StalenessRecord record;
  int64_t line = 0;
};

}  // namespace

bool StalenessReader::Options::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (max_line_bytes <= 0) return fail("max_line_bytes must be > 0, got " + std::to_string(max_line_bytes));
  if (max_rows <= 0) return fail("max_rows must be > 0, got " + std::to_string(max_rows));
  if (max_bytes <= 0) return fail("max_bytes must be > 0, got " + std::to_string(max_bytes));
  return true;
}

StatusOr<StalenessTable> StalenessReader::Parse(std::string_view text, const std::string& source,
                                                const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("staleness reader options: " + error);
  if (static_cast<int64_t>(text.size()) > options.max_bytes) {
    return OutOfRangeError(source + ": larger than the limit of " + std::to_string(options.max_bytes) +
                           " bytes");
  }
  // A UTF-8 byte-order mark is not part of the first column's name.
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  LineReader lines(text, source, options.max_line_bytes);
  std::string_view line;
  auto next_nonblank = [&]() -> StatusOr<bool> {
    while (true) {
      VIPER_ASSIGN_OR_RETURN(bool more, lines.Next(&line));
      if (!more || !TrimView(line).empty()) return more;
    }
  };

  VIPER_ASSIGN_OR_RETURN(bool found, next_nonblank());
  if (!found) {
    return InvalidArgumentError(source + ": the file is empty (expected the header " +
                                std::string(kColumnNames[kVersion]) + "," + kColumnNames[kTraffic] +
                                ",... and rows)");
  }
  const int64_t header_line = lines.line_no();
  VIPER_ASSIGN_OR_RETURN(const Header header, ParseHeader(line, Where(source, header_line)));

  std::vector<Row> rows;
  while (true) {
    VIPER_ASSIGN_OR_RETURN(bool more, next_nonblank());
    if (!more) break;
    const std::string where = Where(source, lines.line_no());
    if (static_cast<int64_t>(rows.size()) >= options.max_rows) {
      return OutOfRangeError(where + ": more than " + std::to_string(options.max_rows) +
                             " rows (the limit on rows, max_rows)");
    }
    const std::vector<std::string> cells = SplitCsv(line);
    if (cells.size() != header.names.size()) {
      return InvalidArgumentError(where + ": expected " + std::to_string(header.names.size()) +
                                  " fields as in the header, got " + std::to_string(cells.size()) + ": " +
                                  Excerpt(line));
    }
    auto cell = [&](Column c) -> const std::string& { return cells[static_cast<size_t>(header.field[c])]; };
    auto name = [&](Column c) -> const std::string& {
      return header.names[static_cast<size_t>(header.field[c])];
    };
    Row row;
    row.line = lines.line_no();
    StalenessRecord& r = row.record;
    VIPER_ASSIGN_OR_RETURN(r.version_iteration, ParseIteration(cell(kVersion), name(kVersion), where));
    VIPER_ASSIGN_OR_RETURN(r.traffic_iteration, ParseIteration(cell(kTraffic), name(kTraffic), where));
    if (r.version_iteration > r.traffic_iteration) {
      return InvalidArgumentError(where + ": column '" + name(kVersion) + "': version " +
                                  std::to_string(r.version_iteration) + " is after the traffic's iteration " +
                                  std::to_string(r.traffic_iteration) + " (column '" + name(kTraffic) +
                                  "'); expected version_iteration <= traffic_iteration");
    }
    bool drop = false;
    for (const Column c : {kValLoss, kValAcc, kTestLoss, kTestAcc}) {
      if (header.field[c] < 0) continue;
      const bool accuracy = c == kValAcc || c == kTestAcc;
      VIPER_ASSIGN_OR_RETURN(std::optional<double> v, ParseMeasure(cell(c), name(c), accuracy, kRequired[c], where,
                                                                   options.non_finite, &drop));
      if (drop) break;
      switch (c) {
        case kValLoss:
          r.val_loss = *v;
          break;
        case kTestLoss:
          r.test_loss = *v;
          break;
        case kValAcc:
          r.val_accuracy = v;
          break;
        default:
          r.test_accuracy = v;
          break;
      }
    }
    if (drop) continue;
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    return InvalidArgumentError(Where(source, header_line) +
                                ": the header is followed by no rows (a staleness table holds at least one "
                                "measured pair)");
  }

  // Sorted by (v, t); a stable sort keeps repeated pairs in file order.
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::make_pair(a.record.version_iteration, a.record.traffic_iteration) <
           std::make_pair(b.record.version_iteration, b.record.traffic_iteration);
  });
  for (size_t i = 1; i < rows.size(); ++i) {
    const StalenessRecord& a = rows[i - 1].record;
    const StalenessRecord& b = rows[i].record;
    if (a.version_iteration == b.version_iteration && a.traffic_iteration == b.traffic_iteration) {
      return InvalidArgumentError(
          Where(source, rows[i].line) + ": column '" +
          header.names[static_cast<size_t>(header.field[kVersion])] + "': the pair version_iteration " +
          std::to_string(b.version_iteration) + ", traffic_iteration " + std::to_string(b.traffic_iteration) +
          " repeats line " + std::to_string(rows[i - 1].line) + " (one row per measured pair)");
    }
  }
  StalenessTable table;
  table.source = source;
  table.records.reserve(rows.size());
  for (Row& row : rows) table.records.push_back(row.record);
  return table;
}

StatusOr<StalenessTable> StalenessReader::ReadFile(const std::string& path, const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("staleness reader options: " + error);
  // The training-log reader's file handling: the same opening, gzip
  // inflation and byte / line limits.
  LogReader::Options file_options;
  file_options.format = LogFormat::kCsv;
  file_options.max_line_bytes = options.max_line_bytes;
  file_options.max_rows = options.max_rows;
  file_options.max_bytes = options.max_bytes;
  VIPER_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, file_options, /*binary=*/false));
  return Parse(text, path, options);
}

}  // namespace datasets
}  // namespace viper
