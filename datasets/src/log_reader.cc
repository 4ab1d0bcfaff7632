#include "viper/datasets/log_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <sys/stat.h>
#include <tuple>

namespace viper {
namespace datasets {
namespace {

// Recognised column names, in order of preference.
const std::vector<std::string> kIterationNames = {"iteration", "iter", "step", "global_step"};
const std::vector<std::string> kEpochNames = {"epoch"};
const std::vector<std::string> kLossNames = {"train_loss", "loss", "training_loss", "train_loss_step", "train/loss"};
// HuggingFace Trainer's eval_* names come last: they are the validation
// series only where no val_* column exists.
const std::vector<std::string> kValLossNames = {"val_loss", "validation_loss", "valid_loss", "val/loss",
                                                "val_loss_epoch", "eval_loss", "eval/loss"};
const std::vector<std::string> kValAccNames = {"val_accuracy", "val_acc",   "validation_accuracy", "valid_acc",
                                               "val/acc",      "val/accuracy", "val_acc_epoch", "eval_accuracy",
                                               "eval_acc",     "eval/accuracy", "eval/acc"};
const std::vector<std::string> kTestLossNames = {"test_loss", "test/loss", "test_loss_epoch"};
const std::vector<std::string> kTestAccNames = {"test_accuracy", "test_acc",           "test/acc",
                                                "test/accuracy", "test_accuracy_epoch", "test_acc_epoch"};
const std::vector<std::string> kWallTimeNames = {"wall_time", "wall_time_s", "time", "elapsed_s", "elapsed"};

std::string Where(const std::string& source, int64_t line) { return source + ":" + std::to_string(line); }

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Splits one CSV line; handles double-quoted fields with "" escapes.
std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(Trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(Trim(cur));
  return out;
}

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Finds the column for a field: the override when given (must exist), else
// the first recognised name present. Returns -1 when absent.
StatusOr<int> FindColumn(const std::vector<std::string>& header, const std::string& override_name,
                         const std::vector<std::string>& candidates, const std::string& source,
                         const char* option) {
  if (!override_name.empty()) {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == override_name) return static_cast<int>(i);
    }
    return NotFoundError(Where(source, 1) + ": unknown column '" + override_name + "' given by " + option +
                         " (the header has: " + Join(header) + ")");
  }
  for (const auto& name : candidates) {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return static_cast<int>(i);
    }
  }
  return -1;
}

// Parses a numeric field. Empty = absent. Non-numeric = error.
StatusOr<std::optional<double>> ParseNumber(const std::string& field, const std::string& column,
                                            const std::string& where) {
  if (field.empty() || field == "null" || field == "None") return std::optional<double>();
  const char* b = field.c_str();
  char* e = nullptr;
  errno = 0;
  const double v = std::strtod(b, &e);
  if (e == b || *e != '\0') {
    return InvalidArgumentError(where + ": column '" + column + "': expected a number, got '" + field + "'");
  }
  return std::optional<double>(v);
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFoundError("'" + path + "': no such file");
    return ErrnoError("'" + path + "'", errno);
  }
  if (S_ISDIR(st.st_mode)) return InvalidArgumentError("'" + path + "' is a directory, expected a log file");
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files transparently
  if (!f) return ErrnoError("cannot open '" + path + "'", errno);
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  int errnum = Z_OK;
  const char* msg = gzerror(f, &errnum);
  const std::string err = msg ? msg : "";
  gzclose(f);
  // A truncated stream reads as far as it can, then reports Z_BUF_ERROR.
  if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
    return DataLossError("'" + path + "': cannot decompress (" + err + "); is the .gz file truncated?");
  }
  return text;
}

struct Columns {
  int iteration = -1, epoch = -1, loss = -1, val_loss = -1, val_acc = -1, test_loss = -1, test_acc = -1,
      wall_time = -1;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The column (CSV) or key (JSON) each checked field was read from; empty
// where the log has none.
struct FieldNames {
  std::string train_loss, val_loss, val_accuracy, test_loss, test_accuracy, wall_time;
};

// Applies the NaN/inf policy to one record. Returns false if it is dropped.
StatusOr<bool> CheckFinite(LogRecord* r, const FieldNames& names, const std::string& where,
                           const LogReader::Options& options) {
  const std::tuple<std::optional<double>*, const char*, const std::string*> fields[] = {
      {&r->train_loss, "training loss", &names.train_loss},
      {&r->val_loss, "validation loss", &names.val_loss},
      {&r->val_accuracy, "validation accuracy", &names.val_accuracy},
      {&r->test_loss, "test loss", &names.test_loss},
      {&r->test_accuracy, "test accuracy", &names.test_accuracy},
      {&r->wall_time_s, "wall time", &names.wall_time}};
  for (const auto& [value, what, column] : fields) {
    if (!*value || std::isfinite(**value)) continue;
    if (options.non_finite == NonFinitePolicy::kDrop) return false;
    return InvalidArgumentError(where + ": " + (column->empty() ? "" : "column '" + *column + "': ") + what +
                                " is not finite (" + std::to_string(**value) +
                                "); pass --non-finite drop to skip such rows");
  }
  return true;
}

// How rows that repeat the previous row's iteration are treated.
enum class SameStep {
  kReject,    // an error: iterations must strictly increase
  kMerge,     // Lightning: train and val metrics of one step on separate rows; later values win
  kDisjoint,  // JSON lines (HuggingFace Trainer): merged when no metric appears in both rows
};

// The metrics `r` carries, for messages and for SameStep::kDisjoint.
std::vector<std::pair<std::optional<double>*, const char*>> Metrics(LogRecord* r) {
  return {{&r->train_loss, "training loss"}, {&r->val_loss, "validation loss"},
          {&r->val_accuracy, "validation accuracy"}, {&r->test_loss, "test loss"},
          {&r->test_accuracy, "test accuracy"}};
}

// Adds `r` to `log`, enforcing strictly increasing iterations (or merging
// rows of the same step as `same_step` says).
Status Append(TrainingLog* log, LogRecord r, const std::string& where, SameStep same_step,
              std::vector<int64_t>* lines, int64_t line) {
  if (!log->records.empty()) {
    LogRecord& last = log->records.back();
    bool merge = r.iteration == last.iteration && same_step != SameStep::kReject;
    if (merge && same_step == SameStep::kDisjoint) {
      const auto mine = Metrics(&r), theirs = Metrics(&last);
      for (std::size_t k = 0; k < mine.size(); ++k) {
        if (mine[k].first->has_value() && theirs[k].first->has_value()) {
          return InvalidArgumentError(where + ": iteration " + std::to_string(r.iteration) + " repeats the " +
                                      mine[k].second + " of line " + std::to_string(lines->back()) +
                                      " (rows of one step may only add metrics the other lacks)");
        }
      }
    }
    if (merge) {
      if (r.epoch && !last.epoch) last.epoch = r.epoch;
      if (r.wall_time_s && !last.wall_time_s) last.wall_time_s = r.wall_time_s;
      const auto mine = Metrics(&r), theirs = Metrics(&last);
      for (std::size_t k = 0; k < mine.size(); ++k) {
        if (mine[k].first->has_value()) *theirs[k].first = *mine[k].first;
      }
      return Status::Ok();
    }
    if (r.iteration <= last.iteration) {
      return InvalidArgumentError(where + ": iterations must be strictly increasing, but " +
                                  std::to_string(r.iteration) + " follows " + std::to_string(last.iteration) +
                                  " (line " + std::to_string(lines->back()) + ")");
    }
  }
  log->records.push_back(std::move(r));
  lines->push_back(line);
  return Status::Ok();
}

Status CheckHasLoss(const TrainingLog& log, const std::string& source) {
  if (log.records.empty()) {
    if (log.dropped_non_finite > 0) {
      return InvalidArgumentError(source + ": every row was dropped for a non-finite loss (" +
                                  std::to_string(log.dropped_non_finite) + " rows)");
    }
    return InvalidArgumentError(source + ": no data rows");
  }
  for (const auto& r : log.records) {
    if (r.train_loss || r.val_loss) return Status::Ok();
  }
  return InvalidArgumentError(source + ": no row has a training or validation loss");
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::string cur;
  std::istringstream in(text);
  while (std::getline(in, cur)) {
    if (!cur.empty() && cur.back() == '\r') cur.pop_back();
    lines.push_back(cur);
  }
  return lines;
}

StatusOr<TrainingLog> ParseCsv(const std::string& text, const std::string& source,
                               const LogReader::Options& options, LogFormat format) {
  const std::vector<std::string> lines = SplitLines(text);
  size_t h = 0;
  while (h < lines.size() && (Trim(lines[h]).empty() || Trim(lines[h])[0] == '#')) ++h;
  if (h == lines.size()) return InvalidArgumentError(source + ": the file is empty (expected a CSV header line)");
  const std::vector<std::string> header = SplitCsv(lines[h]);
  const int64_t header_line = static_cast<int64_t>(h) + 1;
  // A header must name columns, not hold numbers.
  for (const auto& name : header) {
    char* e = nullptr;
    std::strtod(name.c_str(), &e);
    if (!name.empty() && e && *e == '\0') {
      return InvalidArgumentError(Where(source, header_line) + ": missing header (the first line holds the number '" +
                                  name + "', expected column names such as iteration,train_loss)");
    }
  }

  Columns c;
  VIPER_ASSIGN_OR_RETURN(c.iteration, FindColumn(header, options.iteration_column, kIterationNames, source,
                                                  "--iteration-column"));
  VIPER_ASSIGN_OR_RETURN(c.epoch, FindColumn(header, options.epoch_column, kEpochNames, source, "--epoch-column"));
  std::vector<std::string> loss_names = kLossNames;
  if (format == LogFormat::kLightning) {
    loss_names.insert(loss_names.begin(), "train_loss_step");
  }
  VIPER_ASSIGN_OR_RETURN(c.loss, FindColumn(header, options.loss_column, loss_names, source, "--loss-column"));
  VIPER_ASSIGN_OR_RETURN(c.val_loss,
                         FindColumn(header, options.val_loss_column, kValLossNames, source, "--val-loss-column"));
  VIPER_ASSIGN_OR_RETURN(c.val_acc, FindColumn(header, options.val_accuracy_column, kValAccNames, source,
                                               "--val-accuracy-column"));
  VIPER_ASSIGN_OR_RETURN(c.test_loss, FindColumn(header, options.test_loss_column, kTestLossNames, source,
                                                 "--test-loss-column"));
  VIPER_ASSIGN_OR_RETURN(c.test_acc, FindColumn(header, options.test_accuracy_column, kTestAccNames, source,
                                                "--test-accuracy-column"));
  VIPER_ASSIGN_OR_RETURN(c.wall_time, FindColumn(header, options.wall_time_column, kWallTimeNames, source,
                                                 "--wall-time-column"));

  const bool keras = format == LogFormat::kKeras;
  if (keras && c.epoch < 0) {
    return InvalidArgumentError(Where(source, header_line) +
                                ": a Keras CSVLogger file needs an 'epoch' column (the header has: " + Join(header) +
                                ")");
  }
  if (!keras && c.iteration < 0) {
    return InvalidArgumentError(Where(source, header_line) + ": no iteration column (expected one of " +
                                Join(kIterationNames) + ", or name it with --iteration-column); the header has: " +
                                Join(header));
  }
  if (c.loss < 0 && c.val_loss < 0) {
    return InvalidArgumentError(Where(source, header_line) + ": no loss column (expected one of " + Join(kLossNames) +
                                " or " + Join(kValLossNames) + ", or name it with --loss-column); the header has: " +
                                Join(header));
  }

  auto column_name = [&](int col) { return col < 0 ? std::string() : header[static_cast<size_t>(col)]; };
  const FieldNames names{column_name(c.loss),      column_name(c.val_loss),  column_name(c.val_acc),
                         column_name(c.test_loss), column_name(c.test_acc), column_name(c.wall_time)};

  TrainingLog log;
  log.source = source;
  std::vector<int64_t> record_lines;
  for (size_t i = h + 1; i < lines.size(); ++i) {
    const std::string trimmed = Trim(lines[i]);
    if (trimmed.empty() || trimmed[0] == '#') continue;
    const int64_t line_no = static_cast<int64_t>(i) + 1;
    const std::string where = Where(source, line_no);
    const std::vector<std::string> fields = SplitCsv(lines[i]);
    if (fields.size() != header.size()) {
      return InvalidArgumentError(where + ": expected " + std::to_string(header.size()) + " fields as in the header, got " +
                                  std::to_string(fields.size()));
    }
    auto number = [&](int col) -> StatusOr<std::optional<double>> {
      if (col < 0) return std::optional<double>();
      return ParseNumber(fields[static_cast<size_t>(col)], header[static_cast<size_t>(col)], where);
    };
    LogRecord r;
    VIPER_ASSIGN_OR_RETURN(std::optional<double> epoch, number(c.epoch));
    if (keras) {
      if (!epoch) return InvalidArgumentError(where + ": column 'epoch' is empty");
      r.iteration = static_cast<int64_t>(*epoch) + 1;  // Keras epochs are 0-based; curves start at x = 1
    } else {
      VIPER_ASSIGN_OR_RETURN(std::optional<double> it, number(c.iteration));
      if (!it) {
        return InvalidArgumentError(where + ": column '" + header[static_cast<size_t>(c.iteration)] +
                                    "' is empty (expected an iteration number)");
      }
      if (*it != std::floor(*it) || *it < 0) {
        return InvalidArgumentError(where + ": column '" + header[static_cast<size_t>(c.iteration)] +
                                    "': expected a non-negative integer iteration, got '" +
                                    fields[static_cast<size_t>(c.iteration)] + "'");
      }
      r.iteration = static_cast<int64_t>(*it);
    }
    if (epoch) r.epoch = static_cast<int64_t>(*epoch);
    VIPER_ASSIGN_OR_RETURN(r.train_loss, number(c.loss));
    VIPER_ASSIGN_OR_RETURN(r.val_loss, number(c.val_loss));
    VIPER_ASSIGN_OR_RETURN(r.val_accuracy, number(c.val_acc));
    VIPER_ASSIGN_OR_RETURN(r.test_loss, number(c.test_loss));
    VIPER_ASSIGN_OR_RETURN(r.test_accuracy, number(c.test_acc));
    VIPER_ASSIGN_OR_RETURN(r.wall_time_s, number(c.wall_time));
    if (!r.train_loss && !r.val_loss && !r.val_accuracy && !r.test_loss && !r.test_accuracy &&
        format == LogFormat::kLightning) {
      continue;
    }
    VIPER_ASSIGN_OR_RETURN(bool keep, CheckFinite(&r, names, where, options));
    if (!keep) {
      ++log.dropped_non_finite;
      continue;
    }
    VIPER_RETURN_IF_ERROR(Append(&log, std::move(r), where,
                                 format == LogFormat::kLightning ? SameStep::kMerge : SameStep::kReject, &record_lines,
                                 line_no));
  }
  VIPER_RETURN_IF_ERROR(CheckHasLoss(log, source));
  return log;
}

StatusOr<TrainingLog> ParseJsonLines(const std::string& text, const std::string& source,
                                     const LogReader::Options& options) {
  const std::vector<std::string> lines = SplitLines(text);
  TrainingLog log;
  log.source = source;
  std::vector<int64_t> record_lines;
  bool any = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string trimmed = Trim(lines[i]);
    if (trimmed.empty()) continue;
    any = true;
    const int64_t line_no = static_cast<int64_t>(i) + 1;
    const std::string where = Where(source, line_no);
    nlohmann::json j = nlohmann::json::parse(trimmed, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return InvalidArgumentError(where + ": not valid JSON (expected one object per line)");
    if (!j.is_object()) return InvalidArgumentError(where + ": expected a JSON object, got " + std::string(j.type_name()));
    // HuggingFace Trainer ends with a summary of the whole run, not a step:
    // its train_loss is the mean over the run.
    if (j.contains("train_runtime")) continue;
    FieldNames names;
    // The first of `candidates` (or the override) present on this line;
    // `key` (when non-null) receives its name.
    auto field = [&](const std::string& override_name, const std::vector<std::string>& candidates,
                     std::string* key = nullptr) -> StatusOr<std::optional<double>> {
      std::vector<std::string> keys = candidates;
      if (!override_name.empty()) keys = {override_name};
      for (const auto& k : keys) {
        auto it = j.find(k);
        if (it == j.end()) continue;
        if (key != nullptr) *key = k;
        if (it->is_null()) return std::optional<double>();
        if (it->is_number()) return std::optional<double>(it->get<double>());
        if (it->is_string()) {
          // "NaN"/"Infinity" are how some loggers write non-finite numbers.
          return ParseNumber(it->get<std::string>(), k, where);
        }
        return InvalidArgumentError(where + ": key '" + k + "': expected a number, got " + it->type_name());
      }
      return std::optional<double>();
    };
    LogRecord r;
    VIPER_ASSIGN_OR_RETURN(auto it, field(options.iteration_column, kIterationNames));
    if (!it) {
      return InvalidArgumentError(where + ": no iteration (expected one of the keys " + Join(kIterationNames) + ")");
    }
    if (*it != std::floor(*it) || *it < 0) {
      return InvalidArgumentError(where + ": expected a non-negative integer iteration, got " + std::to_string(*it));
    }
    r.iteration = static_cast<int64_t>(*it);
    // HuggingFace writes fractional epochs (0.53): the epoch is its integer part.
    VIPER_ASSIGN_OR_RETURN(auto epoch, field(options.epoch_column, kEpochNames));
    if (epoch) r.epoch = static_cast<int64_t>(std::floor(*epoch));
    VIPER_ASSIGN_OR_RETURN(r.train_loss, field(options.loss_column, kLossNames, &names.train_loss));
    VIPER_ASSIGN_OR_RETURN(r.val_loss, field(options.val_loss_column, kValLossNames, &names.val_loss));
    VIPER_ASSIGN_OR_RETURN(r.val_accuracy,
                           field(options.val_accuracy_column, kValAccNames, &names.val_accuracy));
    VIPER_ASSIGN_OR_RETURN(r.test_loss, field(options.test_loss_column, kTestLossNames, &names.test_loss));
    VIPER_ASSIGN_OR_RETURN(r.test_accuracy,
                           field(options.test_accuracy_column, kTestAccNames, &names.test_accuracy));
    VIPER_ASSIGN_OR_RETURN(r.wall_time_s, field(options.wall_time_column, kWallTimeNames, &names.wall_time));
    VIPER_ASSIGN_OR_RETURN(bool keep, CheckFinite(&r, names, where, options));
    if (!keep) {
      ++log.dropped_non_finite;
      continue;
    }
    VIPER_RETURN_IF_ERROR(Append(&log, std::move(r), where, SameStep::kDisjoint, &record_lines, line_no));
  }
  if (!any) return InvalidArgumentError(source + ": the file is empty (expected one JSON object per line)");
  VIPER_RETURN_IF_ERROR(CheckHasLoss(log, source));
  return log;
}

LogFormat Detect(const std::string& text, const std::string& source) {
  std::string name = source;
  if (EndsWith(name, ".gz")) name = name.substr(0, name.size() - 3);
  if (EndsWith(name, ".jsonl") || EndsWith(name, ".json") || EndsWith(name, ".ndjson")) return LogFormat::kJsonLines;
  size_t p = text.find_first_not_of(" \t\r\n");
  if (p != std::string::npos && text[p] == '{') return LogFormat::kJsonLines;
  const std::string base = name.substr(name.find_last_of('/') == std::string::npos ? 0 : name.find_last_of('/') + 1);
  // Header line, to tell Keras and Lightning from plain CSV.
  std::string first;
  std::istringstream in(text);
  while (std::getline(in, first)) {
    if (!Trim(first).empty() && Trim(first)[0] != '#') break;
  }
  const std::vector<std::string> header = SplitCsv(Trim(first));
  auto has = [&](const std::string& n) { return std::find(header.begin(), header.end(), n) != header.end(); };
  bool lightning_names = false;
  for (const auto& h : header) {
    if (EndsWith(h, "_step") || EndsWith(h, "_epoch")) lightning_names = true;
  }
  // Lightning's metrics.csv: a 'step' column, train and val metrics on
  // separate rows of the same step.
  if (base == "metrics.csv" || (has("step") && (lightning_names || (has("epoch") && !has("iteration"))))) {
    return LogFormat::kLightning;
  }
  bool has_iteration = false;
  for (const auto& n : kIterationNames) has_iteration = has_iteration || has(n);
  if (has("epoch") && !has_iteration) return LogFormat::kKeras;
  return LogFormat::kCsv;
}

}  // namespace

const char* ToString(LogFormat format) {
  switch (format) {
    case LogFormat::kAuto: return "auto";
    case LogFormat::kCsv: return "csv";
    case LogFormat::kKeras: return "keras";
    case LogFormat::kLightning: return "lightning";
    case LogFormat::kJsonLines: return "jsonl";
  }
  return "?";
}

StatusOr<LogFormat> LogFormatFromString(const std::string& name) {
  for (LogFormat f : {LogFormat::kAuto, LogFormat::kCsv, LogFormat::kKeras, LogFormat::kLightning,
                      LogFormat::kJsonLines}) {
    if (name == ToString(f)) return f;
  }
  return InvalidArgumentError("unknown log format '" + name + "' (expected auto, csv, keras, lightning or jsonl)");
}

const char* ToString(NonFinitePolicy policy) { return policy == NonFinitePolicy::kReject ? "reject" : "drop"; }

StatusOr<NonFinitePolicy> NonFinitePolicyFromString(const std::string& name) {
  if (name == "reject") return NonFinitePolicy::kReject;
  if (name == "drop") return NonFinitePolicy::kDrop;
  return InvalidArgumentError("unknown non-finite policy '" + name + "' (expected reject or drop)");
}

bool LogReader::Options::IsValid(std::string* error) const {
  const std::pair<const std::string*, const char*> overrides[] = {
      {&iteration_column, "iteration_column"}, {&epoch_column, "epoch_column"},
      {&loss_column, "loss_column"},           {&val_loss_column, "val_loss_column"},
      {&val_accuracy_column, "val_accuracy_column"}, {&test_loss_column, "test_loss_column"},
      {&test_accuracy_column, "test_accuracy_column"}, {&wall_time_column, "wall_time_column"}};
  for (const auto& [value, name] : overrides) {
    if (value->find_first_of(",\n\"") != std::string::npos) {
      if (error) *error = std::string(name) + " must be a plain column name (no comma, quote or newline)";
      return false;
    }
  }
  if (format == LogFormat::kKeras && !iteration_column.empty()) {
    if (error) *error = "iteration_column cannot be set for the keras format (rows are epochs)";
    return false;
  }
  return true;
}

StatusOr<TrainingLog> LogReader::Parse(const std::string& text, const std::string& source, const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("log reader options: " + error);
  const LogFormat format = options.format == LogFormat::kAuto ? Detect(text, source) : options.format;
  if (format == LogFormat::kJsonLines) return ParseJsonLines(text, source, options);
  return ParseCsv(text, source, options, format);
}

StatusOr<TrainingLog> LogReader::ReadFile(const std::string& path, const Options& options) {
  VIPER_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  return Parse(text, path, options);
}

std::string ShippedLogDirectory() {
  if (const char* env = std::getenv("VIPER_LOG_DIR")) return env;
  return std::string(VIPER_DATASETS_DIR) + "/logs";
}

std::vector<std::string> ShippedLogFiles() {
  std::vector<std::string> logs;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(ShippedLogDirectory(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(".csv") != std::string::npos || name.find(".jsonl") != std::string::npos) {
      logs.push_back(e.path().string());
    }
  }
  std::sort(logs.begin(), logs.end());
  return logs;
}

}  // namespace datasets
}  // namespace viper
