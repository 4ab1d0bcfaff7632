// The row pipeline every text log format shares (log_rows.h).
#include "log_rows.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

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

// 


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
Builder::Builder(const std::string& source, const LogReader::Options& options, BuildSpec spec)
    : source_(source), o_(options), spec_(std::move(spec)) {
  log_.source = source;
  log_.format = ToString(spec_.format);
  if (!spec_.column[kWallTime].empty()) log_.wall_time_column = spec_.column[kWallTime];
  log_.wall_time_from_durations = spec_.durations && !spec_.column[kWallTime].empty();
  ipe_ = o_.iterations_per_epoch > 0 ? o_.iterations_per_epoch : 1;
  if (spec_.epoch_level) log_.epoch_level_iterations_per_epoch = ipe_;
}


Status Builder::Add(const Values& v, const std::string& where, int64_t line) {
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
    if (o_.non_finite == NonFinitePolicy::kDiverged && f != kWallTime) {
      // A diverged model: its losses are +inf (never served), an accuracy of
      // NaN says nothing.
      ++log_.diverged_values;
      if (f == kValAcc || f == kTestAcc) {
        value->reset();
      } else {
        **value = std::numeric_limits<double>::infinity();
      }
      continue;
    }
    if (o_.non_finite == NonFinitePolicy::kDrop) {
      ++log_.dropped_non_finite;
      return Status::Ok();
    }
    return InvalidArgumentError(where + ": " + col(f) + ": " + kFieldInfo[f].what + " is not finite (" +
                                Num(**value) + (f == kWallTime ? ")" : "); pass --non-finite diverged to keep it as a "
                                                                        "diverged model (never served) or --non-finite "
                                                                        "drop to skip such rows"));
  }
  return Append(std::move(r), where, line);
}

StatusOr<TrainingLog> Builder::Finish() {
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

Status Builder::Append(LogRecord r, const std::string& where, int64_t line) {
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
                                        mine[k].second + " of " + Ref(lines_.back()) +
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
    if (r.iteration <= last.iteration && spec_.discard_orphans_on_restart) {
      // A restarted run (TensorBoard's purge of orphaned data): the earlier
      // rows from this step on belong to the abandoned continuation.
      while (!log_.records.empty() && log_.records.back().iteration >= r.iteration) {
        log_.records.pop_back();
        lines_.pop_back();
        ++log_.discarded_orphaned_rows;
      }
      ++log_.restarts;
    } else if (r.iteration <= last.iteration) {
      return InvalidArgumentError(where + ": iterations must be strictly increasing, but " +
                                  std::to_string(r.iteration) + " follows " + std::to_string(last.iteration) +
                                  " (" + Ref(lines_.back()) + ")");
    }
  }
  log_.records.push_back(std::move(r));
  lines_.push_back(line);
  return Status::Ok();
}

Status Builder::CheckWallTimes() {
  const std::string col = "column '" + spec_.column[kWallTime] + "'";
  auto where = [&](size_t k) { return Locate(lines_[k]); };
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
      if (!std::isfinite(clock)) {
        return InvalidArgumentError(where(k) + ": " + col + ": " + Num(d) +
                                    " seconds per iteration make the accumulated time overflow");
      }
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
    if (have_prev && *r.wall_time_s < *log_.records[prev].wall_time_s) {
      return InvalidArgumentError(
          where(k) + ": " + col + " goes back from " + Num(*log_.records[prev].wall_time_s) + " (" +
          Ref(lines_[prev]) + ") to " + Num(*r.wall_time_s) +
          ": it is not a clock (expected seconds since the start, never decreasing). If it holds seconds per "
          "iteration (as detectron2's 'time' does), pass --time-is-duration; to ignore it, name another column "
          "with --wall-time-column");
    }
    if (*r.wall_time_s < 0) {
      return InvalidArgumentError(where(k) + ": " + col + ": wall time " + Num(*r.wall_time_s) +
                                  " is negative (expected seconds since the start of training)");
    }
    prev = k;
    have_prev = true;
  }
  return Status::Ok();
}

std::string Builder::Locate(int64_t n) const {
  return spec_.row_word ? source_ + ": " + spec_.row_word + " " + std::to_string(n) : Where(source_, n);
}

std::string Builder::Ref(int64_t n) const {
  return std::string(spec_.row_word ? spec_.row_word : "line") + " " + std::to_string(n);
}

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
  spec.discard_orphans_on_restart = format == LogFormat::kTensorBoardCsv || format == LogFormat::kTensorBoardJson;
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

}  // namespace internal
}  // namespace datasets
}  // namespace viper
