#include "viper/datasets/log_reader.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sys/stat.h>
#include <unordered_map>

#include "reader_internal.h"

namespace viper {
namespace datasets {
namespace internal {

std::string Excerpt(std::string_view s, size_t max_chars) {
  std::string out = "'";
  size_t shown = 0;
  for (size_t i = 0; i < s.size() && shown < max_chars; ++i, ++shown) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  out += "'";
  if (s.size() > shown) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace internal

namespace {

using internal::Excerpt;
using internal::Lower;

// The fields a row can carry.
enum Field { kIteration, kEpoch, kLoss, kValLoss, kValAcc, kTestLoss, kTestAcc, kWallTime, kNumFields };
using Values = std::array<std::optional<double>, kNumFields>;

struct FieldInfo {
  const char* what;    // in messages
  const char* option;  // the CLI option naming its column
};
const FieldInfo kFieldInfo[kNumFields] = {
    {"iteration", "--iteration-column"},          {"epoch", "--epoch-column"},
    {"training loss", "--loss-column"},           {"validation loss", "--val-loss-column"},
    {"validation accuracy", "--val-accuracy-column"}, {"test loss", "--test-loss-column"},
    {"test accuracy", "--test-accuracy-column"},  {"wall time", "--wall-time-column"}};

// Recognised names (lower case), in order of preference. Hugging Face's
// eval_* names come after the val_* ones: they are the validation series
// only where no val_* column exists.
const std::vector<std::string> kNames[kNumFields] = {
    {"iteration", "iter", "step", "global_step"},
    {"epoch"},
    {"train_loss", "loss", "training_loss", "train_loss_step", "train/loss", "total_loss", "loss/train",
     "train/loss_step", "epoch_loss"},
    {"val_loss", "validation_loss", "valid_loss", "val/loss", "val_loss_epoch", "validation/loss", "loss/val",
     "loss/validation", "loss/valid", "eval_loss", "eval/loss", "epoch_val_loss"},
    {"val_accuracy", "val_acc", "validation_accuracy", "valid_acc", "val/acc", "val/accuracy", "val_acc_epoch",
     "accuracy/val", "eval_accuracy", "eval_acc", "eval/accuracy", "eval/acc"},
    {"test_loss", "test/loss", "test_loss_epoch", "loss/test"},
    {"test_accuracy", "test_acc", "test/acc", "test/accuracy", "test_accuracy_epoch", "test_acc_epoch",
     "accuracy/test"},
    {"wall_time", "wall_time_s", "time", "elapsed_s", "elapsed", "wall time"},
};

// Keys that mark a summary of the whole run, not a logged step (Hugging
// Face Trainer's last log_history entry: its train_loss is the run's mean).
const char* const kSummaryKeys[] = {"train_runtime", "total_flos", "train_samples_per_second",
                                    "train_steps_per_second"};

constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxNamesListed = 24;

std::string Where(const std::string& source, int64_t line) { return source + ":" + std::to_string(line); }

std::string Num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// Names for a message: bounded in count and in length.
std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < kMaxNamesListed; ++i) {
    std::string n = names[i].size() > 40 || names[i].find_first_of("\r\n\t") != std::string::npos
                        ? Excerpt(names[i], 40)
                        : names[i];
    s += (s.empty() ? "" : ", ") + n;
  }
  if (names.size() > kMaxNamesListed) s += ", ... (" + std::to_string(names.size()) + " in all)";
  if (s.empty()) s = "(none)";
  return s;
}

std::string_view TrimView(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string BaseName(const std::string& source) {
  const size_t slash = source.find_last_of('/');
  std::string base = slash == std::string::npos ? source : source.substr(slash + 1);
  if (EndsWith(base, ".gz")) base.resize(base.size() - 3);
  return base;
}

// Splits one CSV line; handles double-quoted fields with "" escapes.
std::vector<std::string> SplitCsv(std::string_view line) {
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
      out.emplace_back(TrimView(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.emplace_back(TrimView(cur));
  return out;
}

// Parses a whole field as a decimal number (NaN/inf spelled out are numbers;
// the non-finite policy decides). Empty / null / None = absent.
StatusOr<std::optional<double>> ParseNumber(std::string_view field, const std::string& column,
                                            const std::string& where) {
  if (field.empty() || field == "null" || field == "None") return std::optional<double>();
  auto bad = [&] {
    return InvalidArgumentError(where + ": column '" + column + "': expected a number, got " + Excerpt(field));
  };
  // Whole field, no embedded NUL, no hexadecimal (strtod would read "2\0.0" as 2 and "0x10" as 16).
  if (field.size() > 64 || field.find('\0') != std::string_view::npos || field.find_first_of("xX") != std::string_view::npos) {
    return bad();
  }
  const std::string copy(field);
  char* e = nullptr;
  const double v = std::strtod(copy.c_str(), &e);
  if (e != copy.c_str() + copy.size() || e == copy.c_str()) return bad();
  return std::optional<double>(v);
}

// Reads `text` line by line: \n, \r\n and a lone \r (old Mac files) end a
// line; a line longer than the limit is an error naming it.
class LineReader {
 public:
  LineReader(std::string_view text, const std::string& source, int64_t max_line_bytes)
      : text_(text), source_(source), max_(max_line_bytes) {}
  // Next line into *line (without its end); false at the end of the text.
  StatusOr<bool> Next(std::string_view* line) {
    if (pos_ >= text_.size()) return false;
    size_t e = pos_;
    while (e < text_.size() && text_[e] != '\n' && text_[e] != '\r') ++e;
    ++line_no_;
    if (static_cast<int64_t>(e - pos_) > max_) {
      return OutOfRangeError(Where(source_, line_no_) + ": line longer than the limit of " + std::to_string(max_) +
                             " bytes (--max-line-bytes); not a text log, or a wrong --format?");
    }
    *line = text_.substr(pos_, e - pos_);
    if (e >= text_.size()) {
      pos_ = e;
    } else if (text_[e] == '\r' && e + 1 < text_.size() && text_[e + 1] == '\n') {
      pos_ = e + 2;
    } else {
      pos_ = e + 1;
    }
    return true;
  }
  int64_t line_no() const { return line_no_; }

 private:
  std::string_view text_;
  const std::string& source_;
  int64_t max_;
  size_t pos_ = 0;
  int64_t line_no_ = 0;
};

// Deepest nesting of JSON arrays/objects in `s` (strings skipped).
int JsonDepth(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}

StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& where, const char* expected) {
  if (JsonDepth(text) > kMaxJsonDepth) {
    return InvalidArgumentError(where + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                " levels (expected " + expected + ")");
  }
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return InvalidArgumentError(where + ": not valid JSON (expected " + expected + "): " + Excerpt(text));
  }
  return j;
}

// ---------------------------------------------------------------------------
// Column selection.

// The columns (CSV header, JSON keys, event-file tags) a log offers.
struct Columns {
  std::vector<std::string> names;               // original spelling, first seen
  std::unordered_map<std::string, int> index;   // lower case -> position in names
  const char* kind = "column";                  // column | key | tag

  int Add(const std::string& name) {
    const std::string low = Lower(name);
    auto [it, inserted] = index.emplace(low, static_cast<int>(names.size()));
    if (inserted) names.push_back(name);
    return it->second;
  }
  int Find(const std::string& name) const {
    auto it = index.find(Lower(name));
    return it == index.end() ? -1 : it->second;
  }
};

using Selection = std::array<int, kNumFields>;  // column per field, -1 = none

// The overrides from the options, per field ("" = none).
std::array<std::string, kNumFields> Overrides(const LogReader::Options& o, LogFormat format) {
  std::array<std::string, kNumFields> ov = {o.iteration_column, o.epoch_column,     o.loss_column,
                                            o.val_loss_column,  o.val_accuracy_column, o.test_loss_column,
                                            o.test_accuracy_column, o.wall_time_column};
  if (format == LogFormat::kTfEvents) {
    if (!o.loss_tag.empty()) ov[kLoss] = o.loss_tag;
    if (!o.val_tag.empty()) ov[kValLoss] = o.val_tag;
  }
  return ov;
}

// Picks the column of each field: the override (which must exist) or the
// first recognised name present. `skip` fields are never selected.
StatusOr<Selection> Select(const Columns& cols, const std::array<std::vector<std::string>, kNumFields>& names,
                           const std::array<std::string, kNumFields>& overrides, const std::string& where,
                           LogFormat format) {
  Selection sel;
  sel.fill(-1);
  for (int f = 0; f < kNumFields; ++f) {
    if (!overrides[f].empty()) {
      sel[f] = cols.Find(overrides[f]);
      if (sel[f] < 0) {
        const bool tag = format == LogFormat::kTfEvents && (f == kLoss || f == kValLoss);
        return NotFoundError(where + ": unknown " + cols.kind + " " + Excerpt(overrides[f], 80) + " given by " +
                             (tag ? (f == kLoss ? "--loss-tag" : "--val-tag") : kFieldInfo[f].option) + " (the " +
                             (format == LogFormat::kTfEvents ? "file has the scalar tags" : "log has") + ": " +
                             JoinNames(cols.names) + ")");
      }
      continue;
    }
    for (const auto& n : names[f]) {
      const int c = cols.Find(n);
      if (c >= 0) {
        sel[f] = c;
        break;
      }
    }
  }
  // One column for one field only (an override may name a column that is
  // also another field's default).
  for (int f = 0; f < kNumFields; ++f) {
    for (int g = 0; g < kNumFields; ++g) {
      if (f != g && sel[f] >= 0 && sel[f] == sel[g] && overrides[g].empty()) sel[g] = -1;
    }
  }
  return sel;
}

// ---------------------------------------------------------------------------
// Building the log from rows, the same for every format.

enum class SameStep {
  kReject,    // an error: iterations must strictly increase
  kMerge,     // Lightning: train and val metrics of one step on separate rows; later values win
  kDisjoint,  // JSON (Hugging Face, detectron2): merged when no metric appears in both rows
};

struct BuildSpec {
  LogFormat format = LogFormat::kCsv;
  SameStep same_step = SameStep::kReject;
  bool epoch_level = false;          // rows are epochs
  bool durations = false;            // the wall-time column holds seconds per iteration
  bool rebase_wall_time = false;     // wall times are Unix times: subtract the first
  bool skip_rows_without_metrics = false;  // Lightning's rows of other metrics
  std::array<std::string, kNumFields> column;  // the selected column names ("" = none)
};

class Builder {
 public:
  Builder(const std::string& source, const LogReader::Options& options, BuildSpec spec)
      : source_(source), o_(options), spec_(std::move(spec)) {
    log_.source = source;
    log_.format = ToString(spec_.format);
    if (!spec_.column[kWallTime].empty()) log_.wall_time_column = spec_.column[kWallTime];
    log_.wall_time_from_durations = spec_.durations && !spec_.column[kWallTime].empty();
    ipe_ = o_.iterations_per_epoch > 0 ? o_.iterations_per_epoch : 1;
    if (spec_.epoch_level) log_.epoch_level_iterations_per_epoch = ipe_;
  }

  void CountSummary() { ++log_.skipped_summary_rows; }

  // Adds one row; `where` names it in messages.
  Status Add(const Values& v, const std::string& where, int64_t line) {
    if (++rows_ > o_.max_rows) {
      return OutOfRangeError(where + ": more than " + std::to_string(o_.max_rows) +
                             " rows (the limit on rows; raise it with --max-rows)");
    }
    LogRecord r;
    auto col = [&](Field f) { return "column '" + spec_.column[f] + "'"; };
    // Epoch: an integer >= 0 (Hugging Face writes fractions: the integer part).
    if (v[kEpoch]) {
      const double e = *v[kEpoch];
      if (!(e >= 0 && e <= static_cast<double>(kMaxLogIteration))) {
        return InvalidArgumentError(where + ": " + col(kEpoch) + ": epoch " + Num(e) +
                                    " is out of range (expected a number in 0.." +
                                    std::to_string(kMaxLogIteration) + ")");
      }
      r.epoch = static_cast<int64_t>(std::floor(e));
    }
    if (spec_.epoch_level) {
      if (!v[kEpoch]) return InvalidArgumentError(where + ": " + col(kEpoch) + " is empty (expected an epoch number)");
      if (*v[kEpoch] != std::floor(*v[kEpoch])) {
        return InvalidArgumentError(where + ": " + col(kEpoch) + ": expected an integer epoch, got " + Num(*v[kEpoch]));
      }
      const int64_t e = *r.epoch;
      if (e + 1 > kMaxLogIteration / ipe_) {
        return InvalidArgumentError(where + ": epoch " + std::to_string(e) + " times " + std::to_string(ipe_) +
                                    " iterations per epoch is beyond the largest iteration " +
                                    std::to_string(kMaxLogIteration));
      }
      r.iteration = (e + 1) * ipe_;  // 0-based epochs; epoch e ends at iteration (e + 1) * ipe
    } else {
      if (!v[kIteration]) {
        return InvalidArgumentError(where + ": " + col(kIteration) + " is empty (expected an iteration number)");
      }
      const double it = *v[kIteration];
      if (!(it >= 0 && it <= static_cast<double>(kMaxLogIteration))) {
        return InvalidArgumentError(where + ": " + col(kIteration) + ": iteration " + Num(it) +
                                    " is out of range (expected an integer in 0.." +
                                    std::to_string(kMaxLogIteration) + ")");
      }
      if (it != std::floor(it)) {
        return InvalidArgumentError(where + ": " + col(kIteration) +
                                    ": expected a non-negative integer iteration, got " + Num(it));
      }
      r.iteration = static_cast<int64_t>(it);
    }
    r.train_loss = v[kLoss];
    r.val_loss = v[kValLoss];
    r.val_accuracy = v[kValAcc];
    r.test_loss = v[kTestLoss];
    r.test_accuracy = v[kTestAcc];
    r.wall_time_s = v[kWallTime];
    const bool metrics = r.train_loss || r.val_loss || r.val_accuracy || r.test_loss || r.test_accuracy;
    if (!metrics && spec_.skip_rows_without_metrics) return Status::Ok();
    // NaN / inf.
    const std::pair<std::optional<double>*, Field> checked[] = {
        {&r.train_loss, kLoss},   {&r.val_loss, kValLoss},   {&r.val_accuracy, kValAcc},
        {&r.test_loss, kTestLoss}, {&r.test_accuracy, kTestAcc}, {&r.wall_time_s, kWallTime}};
    for (const auto& [value, f] : checked) {
      if (!*value || std::isfinite(**value)) continue;
      if (o_.non_finite == NonFinitePolicy::kDrop) {
        ++log_.dropped_non_finite;
        return Status::Ok();
      }
      return InvalidArgumentError(where + ": " + col(f) + ": " + kFieldInfo[f].what + " is not finite (" +
                                  Num(**value) + "); pass --non-finite drop to skip such rows");
    }
    return Append(std::move(r), where, line);
  }

  StatusOr<TrainingLog> Finish() {
    VIPER_RETURN_IF_ERROR(CheckWallTimes());
    if (log_.records.empty()) {
      if (log_.dropped_non_finite > 0) {
        return InvalidArgumentError(source_ + ": every row was dropped for a non-finite value (" +
                                    std::to_string(log_.dropped_non_finite) + " rows)");
      }
      return InvalidArgumentError(source_ + ": no data rows");
    }
    bool any = false;
    for (const auto& r : log_.records) any = any || r.train_loss || r.val_loss;
    if (!any) {
      return InvalidArgumentError(source_ + ": no row has a training or validation loss (" +
                                  std::to_string(log_.records.size()) + " rows read)");
    }
    return std::move(log_);
  }

 private:
  // Adds `r`, enforcing strictly increasing iterations (or merging rows of
  // the same step as the format allows).
  Status Append(LogRecord r, const std::string& where, int64_t line) {
    if (!log_.records.empty()) {
      LogRecord& last = log_.records.back();
      const bool same = r.iteration == last.iteration && spec_.same_step != SameStep::kReject;
      auto metrics = [](LogRecord* x) {
        return std::array<std::pair<std::optional<double>*, const char*>, 5>{
            {{&x->train_loss, "training loss"},
             {&x->val_loss, "validation loss"},
             {&x->val_accuracy, "validation accuracy"},
             {&x->test_loss, "test loss"},
             {&x->test_accuracy, "test accuracy"}}};
      };
      if (same) {
        const auto mine = metrics(&r), theirs = metrics(&last);
        if (spec_.same_step == SameStep::kDisjoint) {
          for (size_t k = 0; k < mine.size(); ++k) {
            if (mine[k].first->has_value() && theirs[k].first->has_value()) {
              return InvalidArgumentError(where + ": iteration " + std::to_string(r.iteration) + " repeats the " +
                                          mine[k].second + " of line " + std::to_string(lines_.back()) +
                                          " (entries of one step may only add metrics the other lacks)");
            }
          }
        }
        if (r.epoch && !last.epoch) last.epoch = r.epoch;
        if (r.wall_time_s && !last.wall_time_s) {
          last.wall_time_s = r.wall_time_s;
          lines_.back() = line;
        }
        for (size_t k = 0; k < mine.size(); ++k) {
          if (mine[k].first->has_value()) *theirs[k].first = *mine[k].first;
        }
        return Status::Ok();
      }
      if (r.iteration <= last.iteration) {
        return InvalidArgumentError(where + ": iterations must be strictly increasing, but " +
                                    std::to_string(r.iteration) + " follows " + std::to_string(last.iteration) +
                                    " (line " + std::to_string(lines_.back()) + ")");
      }
    }
    log_.records.push_back(std::move(r));
    lines_.push_back(line);
    return Status::Ok();
  }

  // Wall times: durations accumulated into a clock, Unix times rebased, and
  // the clock checked (>= 0, never going back).
  Status CheckWallTimes() {
    const std::string col = "column '" + spec_.column[kWallTime] + "'";
    auto where = [&](size_t k) { return Where(source_, lines_[k]); };
    if (spec_.durations) {
      // Row k's value is the seconds per iteration over the iterations since
      // the previous row: the clock advances by value x iterations.
      double clock = 0;
      bool started = false;
      int64_t prev_iteration = 0;
      for (size_t k = 0; k < log_.records.size(); ++k) {
        LogRecord& r = log_.records[k];
        if (!r.wall_time_s) continue;
        const double d = *r.wall_time_s;
        if (d < 0) {
          return InvalidArgumentError(where(k) + ": " + col + ": " + Num(d) +
                                      " seconds per iteration is negative (expected a duration >= 0)");
        }
        if (started) clock += d * static_cast<double>(r.iteration - prev_iteration);
        started = true;
        prev_iteration = r.iteration;
        r.wall_time_s = clock;
      }
      return Status::Ok();
    }
    std::optional<double> base;
    size_t prev = 0;
    bool have_prev = false;
    for (size_t k = 0; k < log_.records.size(); ++k) {
      LogRecord& r = log_.records[k];
      if (!r.wall_time_s) continue;
      if (spec_.rebase_wall_time) {
        if (!base) base = *r.wall_time_s;
        r.wall_time_s = *r.wall_time_s - *base;
      }
      if (*r.wall_time_s < 0) {
        return InvalidArgumentError(where(k) + ": " + col + ": wall time " + Num(*r.wall_time_s) +
                                    " is negative (expected seconds since the start of training)");
      }
      if (have_prev && *r.wall_time_s < *log_.records[prev].wall_time_s) {
        return InvalidArgumentError(
            where(k) + ": " + col + " goes back from " + Num(*log_.records[prev].wall_time_s) + " (line " +
            std::to_string(lines_[prev]) + ") to " + Num(*r.wall_time_s) +
            ": it is not a clock (expected seconds since the start, never decreasing). If it holds seconds per "
            "iteration (as detectron2's 'time' does), pass --time-is-duration; to ignore it, name another column "
            "with --wall-time-column");
      }
      prev = k;
      have_prev = true;
    }
    return Status::Ok();
  }

  const std::string& source_;
  const LogReader::Options& o_;
  BuildSpec spec_;
  TrainingLog log_;
  std::vector<int64_t> lines_;  // line (or record) of each record, for messages
  int64_t rows_ = 0;
  int64_t ipe_ = 1;
};

// The names each field is recognised by in `format` (lower case).
std::array<std::vector<std::string>, kNumFields> NamesFor(LogFormat format, const std::string& source) {
  std::array<std::vector<std::string>, kNumFields> names;
  for (int f = 0; f < kNumFields; ++f) names[f] = kNames[f];
  if (format == LogFormat::kLightning) names[kLoss].insert(names[kLoss].begin(), "train_loss_step");
  if (format == LogFormat::kKeras) names[kIteration].clear();  // rows are epochs
  if (format == LogFormat::kTensorBoardCsv || format == LogFormat::kTensorBoardJson) {
    // One series per file: its 'Value' is the loss the file name's tag says
    // (TensorBoard names downloads run-<run>-tag-<tag>.csv).
    std::string tag = Lower(BaseName(source));
    const size_t t = tag.find("-tag-");
    tag = t == std::string::npos ? std::string() : tag.substr(t + 5);
    Field role = kLoss;
    if (tag.find("test") != std::string::npos) {
      role = tag.find("acc") != std::string::npos ? kTestAcc : kTestLoss;
    } else if (tag.find("val") != std::string::npos || tag.find("eval") != std::string::npos) {
      role = tag.find("acc") != std::string::npos ? kValAcc : kValLoss;
    }
    names[role].insert(names[role].begin(), "value");
  }
  return names;
}

// Requires an iteration (or, epoch-level, an epoch) and a loss.
Status CheckSelection(const Selection& sel, const Columns& cols, const std::array<std::vector<std::string>, kNumFields>& names,
                      const std::string& where, LogFormat format) {
  if (sel[kIteration] < 0 && sel[kEpoch] < 0) {
    return InvalidArgumentError(where + ": no iteration " + cols.kind + " (expected one of " +
                                JoinNames(kNames[kIteration]) +
                                ", or an epoch column for an epoch-level log; or name it with --iteration-column); the log has: " +
                                JoinNames(cols.names));
  }
  if (format == LogFormat::kKeras && sel[kEpoch] < 0) {
    return InvalidArgumentError(where + ": a Keras CSVLogger file needs an 'epoch' column (the header has: " +
                                JoinNames(cols.names) + ")");
  }
  if (sel[kLoss] < 0 && sel[kValLoss] < 0) {
    if (format == LogFormat::kTfEvents) {
      return InvalidArgumentError(where + ": no scalar tag holds a training loss (" + JoinNames(names[kLoss]) +
                                  ") or a validation loss (" + JoinNames(names[kValLoss]) +
                                  "); choose them with --loss-tag / --val-tag; the file has the scalar tags: " +
                                  JoinNames(cols.names));
    }
    return InvalidArgumentError(where + ": no loss " + cols.kind + " (expected one of " + JoinNames(names[kLoss]) +
                                " or " + JoinNames(names[kValLoss]) +
                                ", or name it with --loss-column / --val-loss-column); the log has: " +
                                JoinNames(cols.names));
  }
  return Status::Ok();
}

BuildSpec MakeSpec(LogFormat format, const Selection& sel, const Columns& cols, const LogReader::Options& o) {
  BuildSpec spec;
  spec.format = format;
  for (int f = 0; f < kNumFields; ++f) {
    if (sel[f] >= 0) spec.column[f] = cols.names[static_cast<size_t>(sel[f])];
  }
  spec.epoch_level = sel[kIteration] < 0;
  spec.rebase_wall_time = format == LogFormat::kTensorBoardCsv || format == LogFormat::kTensorBoardJson ||
                          format == LogFormat::kTfEvents;
  // TensorBoard's wall times are Unix times, never durations.
  spec.durations = (o.time_is_duration && !spec.rebase_wall_time) || format == LogFormat::kDetectron2;
  switch (format) {
    case LogFormat::kLightning:
      spec.same_step = SameStep::kMerge;
      spec.skip_rows_without_metrics = true;
      break;
    case LogFormat::kJsonLines:
    case LogFormat::kHuggingFace:
    case LogFormat::kDetectron2: spec.same_step = SameStep::kDisjoint; break;
    default: spec.same_step = SameStep::kReject; break;
  }
  return spec;
}

// ---------------------------------------------------------------------------
// CSV: plain, Keras, Lightning, TensorBoard's scalar export.

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
  for (size_t i = 0; i < header.size(); ++i) {
    if (cols.Add(header[i]) != static_cast<int>(i)) {
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
      if (static_cast<int>(i) != sel[f] && Lower(header[i]) == Lower(header[static_cast<size_t>(sel[f])])) {
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

// ---------------------------------------------------------------------------
// JSON objects: JSON lines, trainer_state.json's log_history, detectron2.

// One JSON entry's values of the recognised keys (by Columns position).
struct JsonRow {
  int64_t line = 0;
  std::string where;
  std::vector<std::pair<int, double>> values;
};

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
    row.where = where;
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
    const std::string where = rows_.empty() ? source : rows_.front().where;
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
    Builder builder(source, options, MakeSpec(format, sel, cols_, options));
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
      VIPER_RETURN_IF_ERROR(builder.Add(v, row.where, row.line));
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
  Builder builder(source, options, MakeSpec(LogFormat::kTensorBoardJson, sel, cols, options));
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

// ---------------------------------------------------------------------------
// TensorBoard event files.

StatusOr<TrainingLog> ParseTfEvents(std::string_view data, const std::string& source,
                                    const LogReader::Options& options) {
  if (data.empty()) return InvalidArgumentError(source + ": the event file is empty");
  // Pass 1: the scalar tags.
  Columns cols;
  cols.kind = "tag";
  VIPER_RETURN_IF_ERROR(internal::ForEachTfScalar(data, source, options.max_rows, [&](const internal::TfScalar& s) {
    if (cols.names.size() < 100000) cols.Add(s.tag);
    return Status::Ok();
  }));
  if (cols.names.empty()) {
    return InvalidArgumentError(source + ": the event file holds no scalar values (expected scalars logged with "
                                "add_scalar / tf.summary.scalar)");
  }
  const auto names = NamesFor(LogFormat::kTfEvents, source);
  VIPER_ASSIGN_OR_RETURN(Selection sel, Select(cols, names, Overrides(options, LogFormat::kTfEvents), source,
                                               LogFormat::kTfEvents));
  sel[kIteration] = sel[kWallTime] = -1;  // from the Event itself, not tags
  // A tag must not serve twice.
  Columns step_cols = cols;
  const int step_col = step_cols.Add("step");
  Selection check = sel;
  check[kIteration] = step_col;
  VIPER_RETURN_IF_ERROR(CheckSelection(check, step_cols, names, source, LogFormat::kTfEvents));

  // Pass 2: the selected tags' values by step.
  struct Step {
    Values v;
    int64_t record = 0;
    std::array<int64_t, kNumFields> from{};
  };
  std::map<int64_t, Step> steps;
  VIPER_RETURN_IF_ERROR(internal::ForEachTfScalar(data, source, options.max_rows, [&](const internal::TfScalar& s) {
    int field = -1;
    const int c = cols.Find(s.tag);
    for (int f = 0; f < kNumFields; ++f) {
      if (sel[f] >= 0 && sel[f] == c) field = f;
    }
    if (field < 0) return Status::Ok();
    const std::string where = source + ": record " + std::to_string(s.record);
    if (s.step < 0) {
      return InvalidArgumentError(where + ": tag " + Excerpt(s.tag, 40) + ": step " + std::to_string(s.step) +
                                  " is negative");
    }
    if (s.step > kMaxLogIteration) {
      return InvalidArgumentError(where + ": tag " + Excerpt(s.tag, 40) + ": step " + std::to_string(s.step) +
                                  " is out of range (expected 0.." + std::to_string(kMaxLogIteration) + ")");
    }
    if (!steps.count(s.step) && static_cast<int64_t>(steps.size()) >= options.max_rows) {
      return OutOfRangeError(where + ": more than " + std::to_string(options.max_rows) +
                             " steps (the limit on rows; raise it with --max-rows)");
    }
    Step& st = steps[s.step];
    if (st.v[field]) {
      return InvalidArgumentError(where + ": tag " + Excerpt(s.tag, 40) + " has a second value at step " +
                                  std::to_string(s.step) + " (the first is in record " +
                                  std::to_string(st.from[field]) +
                                  "): a restarted run, or two runs in one file? Split them, or keep the part you "
                                  "mean");
    }
    st.v[field] = s.value;
    st.from[field] = s.record;
    if (st.record == 0) {
      st.record = s.record;
      st.v[kWallTime] = s.wall_time;
    }
    return Status::Ok();
  }));
  Selection spec_sel = sel;
  Columns spec_cols = cols;
  spec_sel[kWallTime] = spec_cols.Add("wall_time");
  spec_sel[kIteration] = spec_cols.Add("step");
  Builder builder(source, options, MakeSpec(LogFormat::kTfEvents, spec_sel, spec_cols, options));
  for (auto& [step, st] : steps) {
    st.v[kIteration] = static_cast<double>(step);
    VIPER_RETURN_IF_ERROR(builder.Add(st.v, source + ": record " + std::to_string(st.record), st.record));
  }
  return builder.Finish();
}

// ---------------------------------------------------------------------------

StatusOr<std::string> ReadWholeFile(const std::string& path, const LogReader::Options& options, bool binary) {
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
  int64_t line_len = 0, line_no = 1;
  bool checked_binary = binary;
  Status limit = Status::Ok();
  while ((n = gzread(f, buf, sizeof(buf))) > 0) {
    if (static_cast<int64_t>(text.size()) + n > options.max_bytes) {
      limit = OutOfRangeError("'" + path + "': larger than the limit of " + std::to_string(options.max_bytes) +
                              " bytes (--max-log-bytes; after decompression)");
      break;
    }
    text.append(buf, static_cast<size_t>(n));
    if (!checked_binary && text.size() >= 12) {
      binary = internal::LooksLikeTfRecord(text);  // an event file under another name
      checked_binary = true;
    }
    if (binary) continue;
    for (int i = 0; i < n; ++i) {
      if (buf[i] == '\n' || buf[i] == '\r') {
        if (buf[i] == '\n' || i + 1 >= n || buf[i + 1] != '\n') ++line_no;
        line_len = 0;
      } else if (++line_len > options.max_line_bytes) {
        limit = OutOfRangeError(Where(path, line_no) + ": line longer than the limit of " +
                                std::to_string(options.max_line_bytes) +
                                " bytes (--max-line-bytes); not a text log, or a wrong --format?");
        break;
      }
    }
    if (!limit.ok()) break;
  }
  int errnum = Z_OK;
  const char* msg = gzerror(f, &errnum);
  const std::string err = msg ? msg : "";
  gzclose(f);
  if (!limit.ok()) return limit;
  // A truncated stream reads as far as it can, then reports Z_BUF_ERROR.
  if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
    return DataLossError("'" + path + "': cannot decompress (" + err + "); is the .gz file truncated?");
  }
  return text;
}

}  // namespace

LogFormat LogReader::DetectFormat(const std::string& text_in, const std::string& source) {
  std::string_view text = text_in;
  const std::string base = Lower(BaseName(source));
  if (base.find("tfevents") != std::string::npos || internal::LooksLikeTfRecord(text)) return LogFormat::kTfEvents;
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  const size_t p = text.find_first_not_of(" \t\r\n");
  if (p != std::string_view::npos && text[p] == '[') return LogFormat::kTensorBoardJson;
  if (p != std::string_view::npos && text[p] == '{') {
    if (base == "trainer_state.json" || text.find("\"log_history\"") != std::string_view::npos) {
      return LogFormat::kHuggingFace;
    }
    // detectron2: metrics.json lines with total_loss / eta_seconds / data_time.
    const size_t e = text.find_first_of("\r\n", p);
    const std::string_view first = text.substr(p, e == std::string_view::npos ? std::string_view::npos : e - p);
    if (JsonDepth(first) <= kMaxJsonDepth) {
      const nlohmann::json j = nlohmann::json::parse(first.begin(), first.end(), nullptr, false);
      if (j.is_object() && (j.contains("total_loss") || j.contains("eta_seconds") || j.contains("data_time"))) {
        return LogFormat::kDetectron2;
      }
    }
    return LogFormat::kJsonLines;
  }
  if (EndsWith(base, ".jsonl") || EndsWith(base, ".ndjson")) return LogFormat::kJsonLines;
  // The header line tells Keras, Lightning and TensorBoard exports from plain CSV.
  size_t pos = 0;
  std::string_view first;
  while (pos < text.size()) {
    size_t e = text.find_first_of("\r\n", pos);
    if (e == std::string_view::npos) e = text.size();
    const std::string_view l = TrimView(text.substr(pos, std::min<size_t>(e - pos, 1 << 20)));
    pos = e + 1;
    if (!l.empty() && l[0] != '#') {
      first = l;
      break;
    }
  }
  std::vector<std::string> header = SplitCsv(first);
  for (auto& h : header) h = Lower(h);
  auto has = [&](const std::string& n) { return std::find(header.begin(), header.end(), n) != header.end(); };
  if (has("wall time") && has("step") && has("value")) return LogFormat::kTensorBoardCsv;
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
  for (const auto& n : kNames[kIteration]) has_iteration = has_iteration || has(n);
  if (has("epoch") && !has_iteration) return LogFormat::kKeras;
  return LogFormat::kCsv;
}

const char* ToString(LogFormat format) {
  switch (format) {
    case LogFormat::kAuto: return "auto";
    case LogFormat::kCsv: return "csv";
    case LogFormat::kKeras: return "keras";
    case LogFormat::kLightning: return "lightning";
    case LogFormat::kJsonLines: return "jsonl";
    case LogFormat::kHuggingFace: return "hf-trainer-state";
    case LogFormat::kTensorBoardCsv: return "tensorboard-csv";
    case LogFormat::kTensorBoardJson: return "tensorboard-json";
    case LogFormat::kTfEvents: return "tfevents";
    case LogFormat::kDetectron2: return "detectron2";
  }
  return "?";
}

namespace {
constexpr LogFormat kAllFormats[] = {LogFormat::kAuto,           LogFormat::kCsv,          LogFormat::kKeras,
                                     LogFormat::kLightning,      LogFormat::kJsonLines,    LogFormat::kHuggingFace,
                                     LogFormat::kTensorBoardCsv, LogFormat::kTensorBoardJson, LogFormat::kTfEvents,
                                     LogFormat::kDetectron2};
}  // namespace

std::string LogFormatNames() {
  std::string s;
  for (LogFormat f : kAllFormats) s += (s.empty() ? "" : "|") + std::string(ToString(f));
  return s;
}

StatusOr<LogFormat> LogFormatFromString(const std::string& name) {
  for (LogFormat f : kAllFormats) {
    if (Lower(name) == ToString(f)) return f;
  }
  return InvalidArgumentError("unknown log format " + Excerpt(name, 40) + " (expected " + LogFormatNames() + ")");
}

const char* ToString(NonFinitePolicy policy) { return policy == NonFinitePolicy::kReject ? "reject" : "drop"; }

StatusOr<NonFinitePolicy> NonFinitePolicyFromString(const std::string& name) {
  if (name == "reject") return NonFinitePolicy::kReject;
  if (name == "drop") return NonFinitePolicy::kDrop;
  return InvalidArgumentError("unknown non-finite policy " + Excerpt(name, 40) + " (expected reject or drop)");
}

bool LogReader::Options::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  const std::pair<const std::string*, const char*> overrides[] = {
      {&iteration_column, "iteration_column"},       {&epoch_column, "epoch_column"},
      {&loss_column, "loss_column"},                 {&val_loss_column, "val_loss_column"},
      {&val_accuracy_column, "val_accuracy_column"}, {&test_loss_column, "test_loss_column"},
      {&test_accuracy_column, "test_accuracy_column"}, {&wall_time_column, "wall_time_column"},
      {&loss_tag, "loss_tag"},                       {&val_tag, "val_tag"}};
  for (const auto& [value, name] : overrides) {
    if (value->find_first_of(",\n\r\"", 0) != std::string::npos || value->find('\0') != std::string::npos) {
      return fail(std::string(name) + " must be a plain column name (no comma, quote, newline or NUL)");
    }
    if (value->size() > 1024) return fail(std::string(name) + " is longer than 1024 bytes");
  }
  if (format == LogFormat::kKeras && !iteration_column.empty()) {
    return fail("iteration_column cannot be set for the keras format (rows are epochs)");
  }
  if (iterations_per_epoch < 0 || iterations_per_epoch > kMaxLogIteration) {
    return fail("iterations_per_epoch must be in 0.." + std::to_string(kMaxLogIteration) + " (0 = 1), got " +
                std::to_string(iterations_per_epoch));
  }
  if (max_line_bytes <= 0) return fail("max_line_bytes must be > 0");
  if (max_rows <= 0) return fail("max_rows must be > 0");
  if (max_bytes <= 0) return fail("max_bytes must be > 0");
  return true;
}

StatusOr<TrainingLog> LogReader::Parse(const std::string& text_in, const std::string& source, const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("log reader options: " + error);
  if (static_cast<int64_t>(text_in.size()) > options.max_bytes) {
    return OutOfRangeError(source + ": larger than the limit of " + std::to_string(options.max_bytes) +
                           " bytes (--max-log-bytes)");
  }
  const LogFormat format = options.format == LogFormat::kAuto ? DetectFormat(text_in, source) : options.format;
  std::string_view text = text_in;
  if (format == LogFormat::kTfEvents) return ParseTfEvents(text, source, options);
  // A UTF-8 byte-order mark is not part of the first column's name.
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  switch (format) {
    case LogFormat::kJsonLines:
    case LogFormat::kDetectron2: return ParseJsonLines(text, source, options, format);
    case LogFormat::kHuggingFace: return ParseHuggingFace(text, source, options);
    case LogFormat::kTensorBoardJson: return ParseTensorBoardJson(text, source, options);
    default: return ParseCsv(text, source, options, format);
  }
}

StatusOr<TrainingLog> LogReader::ReadFile(const std::string& path, const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("log reader options: " + error);
  const bool binary = options.format == LogFormat::kTfEvents ||
                      (options.format == LogFormat::kAuto && Lower(BaseName(path)).find("tfevents") != std::string::npos);
  VIPER_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, options, binary));
  return Parse(text, path, options);
}

std::string ShippedLogDirectory() {
  if (const char* env = std::getenv("VIPER_LOG_DIR")) return env;
  return std::string(VIPER_DATASETS_DIR) + "/logs";
}

std::string TestDataDirectory() { return std::string(VIPER_DATASETS_DIR) + "/testdata"; }

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
