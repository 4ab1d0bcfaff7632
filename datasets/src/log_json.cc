// JSON logs: JSON lines, Hugging Face trainer_state.json's log_history,
// detectron2 metrics.json, TensorBoard's JSON export. Rows go through the
// shared Builder (log_rows.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "log_rows.h"

namespace viper {
namespace datasets {
namespace internal {

namespace {

// One JSON entry's values of the recognised keys (by Columns position).
struct JsonRow {
  int64_t line = 0;  // line (JSON lines) or log_history index (trainer_state.json)
  std::vector<std::pair<int, double>> values;
};

// Where a JSON entry is, for messages.
std::string JsonWhere(const std::string& source, LogFormat format, int64_t line) {
  return format == LogFormat::kHuggingFace ? source + ": log_history[" + std::to_string(line) + "]"
                                           : Where(source, line);
}

// Collects the numeric values of recognised keys (and every key's name).
class JsonCollector {
 public:
  JsonCollector(const std::array<std::vector<std::string>, kNumFields>& names,
                const std::array<std::string, kNumFields>& overrides, const LogReader::Options& options)
      : options_(options) {
    cols_.kind = "key";
    for (const auto& list : names) {
      for (const auto& n : list) wanted_.insert({Lower(n), true});
    }
    for (const auto& o : overrides) {
      if (!o.empty()) wanted_.insert({Lower(o), true});
    }
  }

  // Adds one entry; summaries are counted and skipped.
  Status Add(const nlohmann::json& j, int64_t line, const std::string& where) {
    if (!j.is_object()) {
      return InvalidArgumentError(where + ": expected a JSON object, got " + std::string(j.type_name()));
    }
    for (const char* k : kSummaryKeys) {
      if (j.contains(k)) {
        ++summaries_;
        return Status::Ok();
      }
    }
    if (static_cast<int64_t>(rows_.size()) >= options_.max_rows) {
      return OutOfRangeError(where + ": more than " + std::to_string(options_.max_rows) +
                             " entries (the limit on rows; raise it with --max-rows)");
    }
    JsonRow row;
    row.line = line;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string low = Lower(it.key());
      if (cols_.names.size() < 100000) cols_.Add(it.key());
      if (!wanted_.count(low)) continue;
      const int c = cols_.Find(low);
      if (c < 0) continue;
      const auto& val = it.value();
      double v;
      if (val.is_null()) continue;
      if (val.is_number()) {
        v = val.get<double>();
      } else if (val.is_string()) {
        // "NaN" / "Infinity" are how some loggers write non-finite numbers.
        VIPER_ASSIGN_OR_RETURN(auto parsed, ParseNumber(val.get_ref<const std::string&>(), it.key(), where));
        if (!parsed) continue;
        v = *parsed;
      } else {
        return InvalidArgumentError(where + ": key " + Excerpt(it.key(), 40) + ": expected a number, got " +
                                    val.type_name());
      }
      for (const auto& [other, ignored] : row.values) {
        if (other == c) {
          return InvalidArgumentError(where + ": key " + Excerpt(it.key(), 40) +
                                      " appears twice (keys match case-insensitively)");
        }
      }
      row.values.emplace_back(c, v);
    }
    rows_.push_back(std::move(row));
    return Status::Ok();
  }

  StatusOr<TrainingLog> Build(const std::string& source, const LogReader::Options& options, LogFormat format,
                              const std::array<std::vector<std::string>, kNumFields>& names) {
    if (rows_.empty() && summaries_ == 0) {
      return InvalidArgumentError(source + ": no entries (expected JSON objects with a step and a loss)");
    }
    const std::string where = rows_.empty() ? source : JsonWhere(source, format, rows_.front().line);
    const auto overrides = Overrides(options, format);
    VIPER_ASSIGN_OR_RETURN(Selection sel, Select(cols_, names, overrides, where, format));
    VIPER_RETURN_IF_ERROR(CheckSelection(sel, cols_, names, where, format));
    // Per entry, each field is read from the first recognised key the entry
    // has (loggers spell one metric differently in different entries), or
    // from the override only.
    std::array<std::vector<int>, kNumFields> order;
    for (int f = 0; f < kNumFields; ++f) {
      if (!overrides[f].empty() || sel[f] < 0) {
        if (sel[f] >= 0) order[f] = {sel[f]};
        continue;
      }
      for (const auto& n : names[f]) {
        const int c = cols_.Find(n);
        if (c < 0) continue;
        bool taken = false;  // a key another field was given by override
        for (int g = 0; g < kNumFields; ++g) taken = taken || (g != f && !overrides[g].empty() && sel[g] == c);
        if (!taken) order[f].push_back(c);
      }
    }
    BuildSpec spec = MakeSpec(format, sel, cols_, options);
    if (format == LogFormat::kHuggingFace) spec.row_word = "log_history entry";
    Builder builder(source, options, std::move(spec));
    for (int64_t i = 0; i < summaries_; ++i) builder.CountSummary();
    for (const JsonRow& row : rows_) {
      Values v;
      for (int f = 0; f < kNumFields; ++f) {
        for (int c : order[f]) {
          for (const auto& [key, value] : row.values) {
            if (key == c) v[f] = value;
          }
          if (v[f]) break;
        }
      }
      if (!v[kIteration] && !v[kEpoch] && sel[kIteration] >= 0) {
        // Entries without a step (e.g. a config line) carry nothing to place.
        bool any = false;
        for (int f = kLoss; f < kNumFields; ++f) any = any || (f != kWallTime && v[f]);
        if (!any) continue;
      }
      VIPER_RETURN_IF_ERROR(builder.Add(v, JsonWhere(source, format, row.line), row.line));
    }
    return builder.Finish();
  }

 private:
  const LogReader::Options& options_;
  Columns cols_;
  std::unordered_map<std::string, bool> wanted_;
  std::vector<JsonRow> rows_;
  int64_t summaries_ = 0;
};

}  // namespace

StatusOr<TrainingLog> ParseJsonLines(std::string_view text, const std::string& source,
                                     const LogReader::Options& options, LogFormat format) {
  const auto names = NamesFor(format, source);
  JsonCollector collector(names, Overrides(options, format), options);
  LineReader lines(text, source, options.max_line_bytes);
  std::string_view line;
  bool any = false;
  while (true) {
    VIPER_ASSIGN_OR_RETURN(bool more, lines.Next(&line));
    if (!more) break;
    const std::string_view t = TrimView(line);
    if (t.empty()) continue;
    any = true;
    const std::string where = Where(source, lines.line_no());
    VIPER_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(t, where, "one JSON object per line"));
    VIPER_RETURN_IF_ERROR(collector.Add(j, lines.line_no(), where));
  }
  if (!any) return InvalidArgumentError(source + ": the file is empty (expected one JSON object per line)");
  return collector.Build(source, options, format, names);
}

StatusOr<TrainingLog> ParseHuggingFace(std::string_view text, const std::string& source,
                                       const LogReader::Options& options) {
  VIPER_ASSIGN_OR_RETURN(nlohmann::json doc,
                         ParseJson(text, source, "a Hugging Face trainer_state.json document"));
  if (!doc.is_object() || !doc.contains("log_history")) {
    return InvalidArgumentError(source + ": expected a Hugging Face trainer_state.json object with a 'log_history' "
                                "array");
  }
  const nlohmann::json& history = doc["log_history"];
  if (!history.is_array()) {
    return InvalidArgumentError(source + ": 'log_history' is " + std::string(history.type_name()) +
                                ", expected an array of entries");
  }
  if (history.empty()) return InvalidArgumentError(source + ": 'log_history' is empty (no logged steps)");
  const auto names = NamesFor(LogFormat::kHuggingFace, source);
  JsonCollector collector(names, Overrides(options, LogFormat::kHuggingFace), options);
  for (size_t i = 0; i < history.size(); ++i) {
    VIPER_RETURN_IF_ERROR(collector.Add(history[i], static_cast<int64_t>(i),
                                        source + ": log_history[" + std::to_string(i) + "]"));
  }
  return collector.Build(source, options, LogFormat::kHuggingFace, names);
}

// TensorBoard's JSON scalar export: [[wall_time, step, value], ...].
StatusOr<TrainingLog> ParseTensorBoardJson(std::string_view text, const std::string& source,
                                           const LogReader::Options& options) {
  VIPER_ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, source, "a TensorBoard export [[wall, step, value], ...]"));
  if (!doc.is_array()) {
    return InvalidArgumentError(source + ": expected a JSON array of [wall_time, step, value] (TensorBoard's scalar "
                                "export), got " + std::string(doc.type_name()));
  }
  Columns cols;
  cols.Add("wall time");
  cols.Add("step");
  cols.Add("value");
  const auto names = NamesFor(LogFormat::kTensorBoardJson, source);
  VIPER_ASSIGN_OR_RETURN(Selection sel, Select(cols, names, Overrides(options, LogFormat::kTensorBoardJson), source,
                                               LogFormat::kTensorBoardJson));
  VIPER_RETURN_IF_ERROR(CheckSelection(sel, cols, names, source, LogFormat::kTensorBoardJson));
  BuildSpec spec = MakeSpec(LogFormat::kTensorBoardJson, sel, cols, options);
  spec.row_word = "entry";
  Builder builder(source, options, std::move(spec));
  for (size_t i = 0; i < doc.size(); ++i) {
    const std::string where = source + ": entry " + std::to_string(i + 1);
    const auto& e = doc[i];
    if (!e.is_array() || e.size() != 3) {
      return InvalidArgumentError(where + ": expected [wall_time, step, value], got " +
                                  (e.is_array() ? "an array of " + std::to_string(e.size()) : std::string(e.type_name())));
    }
    std::array<double, 3> x{};
    for (size_t k = 0; k < 3; ++k) {
      if (!e[k].is_number()) {
        return InvalidArgumentError(where + ": element " + std::to_string(k + 1) + " (" + cols.names[k] +
                                    ") is " + e[k].type_name() + ", expected a number");
      }
      x[k] = e[k].get<double>();
    }
    Values v;
    for (int f = 0; f < kNumFields; ++f) {
      if (sel[f] >= 0) v[f] = x[static_cast<size_t>(sel[f])];
    }
    VIPER_RETURN_IF_ERROR(builder.Add(v, where, static_cast<int64_t>(i + 1)));
  }
  return builder.Finish();
}

}  // namespace internal
}  // namespace datasets
}  // namespace viper
