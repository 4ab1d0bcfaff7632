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
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include "log_rows.h"
#include "reader_internal.h"

namespace viper {
namespace datasets {

namespace {

using namespace internal;  // the row pipeline and the formats (log_rows.h)

}  // namespace

// ---------------------------------------------------------------------------

namespace internal {
namespace {

// Where the gzip members of the regular file `fd` end, checked against its
// `size`: zlib's gzread stops at data after a member that is not another
// member and says nothing, so a file with trailing garbage (two writers at
// once, a copy over a longer file) read as the part before it. Decompresses
// the members again (output discarded) to find the end of the last one.
Status CheckGzipEnd(int fd, const std::string& path, uint64_t size) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return InternalError("'" + path + "': zlib inflateInit2 failed");
  std::vector<unsigned char> in(1 << 16), out(1 << 16);
  uint64_t fed = 0, member_end = 0;
  bool between = false;  // after a member's end: the next bytes must start another
  bool failed = false;   // bytes that are not a gzip member
  Status st = Status::Ok();
  while (!failed) {
    const ssize_t got = ::pread(fd, in.data(), in.size(), static_cast<off_t>(fed));
    if (got < 0) {
      if (errno == EINTR) continue;
      st = ErrnoError("'" + path + "': re-reading to check the end of the gzip data", errno);
      break;
    }
    if (got == 0) break;
    fed += static_cast<uint64_t>(got);
    z.next_in = in.data();
    z.avail_in = static_cast<uInt>(got);
    bool pending = false;  // the output buffer filled: inflate may hold more
    while (z.avail_in > 0 || pending) {
      if (between) {
        inflateReset(&z);
        between = false;
      }
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      const int r = inflate(&z, Z_NO_FLUSH);
      pending = z.avail_out == 0;
      if (r == Z_STREAM_END) {
        member_end = fed - z.avail_in;
        between = true;
        pending = false;
      } else if (r == Z_BUF_ERROR) {
        pending = false;  // no progress possible: more input needed
        if (z.avail_in > 0) failed = true;
        break;
      } else if (r != Z_OK) {
        failed = true;  // not a gzip member from here
        break;
      }
    }
  }
  inflateEnd(&z);
  if (!st.ok()) return st;
  if (member_end < size) {
    return DataLossError("'" + path + "': " + std::to_string(size - member_end) +
                         " bytes after the end of the gzip data at byte " + std::to_string(member_end) +
                         " are not a gzip member (a damaged file: written by two writers at once, or copied over "
                         "a longer one?); only the first " + std::to_string(member_end) + " bytes decompress");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::string> ReadWholeFile(const std::string& path, const LogReader::Options& options, bool binary) {
  // Opened without blocking and judged by the descriptor itself (no
  // stat-then-open race). A regular file is read. A pipe (`--log
  // <(zcat run.csv.gz)`, `--log /dev/stdin`) is read once a writer has sent
  // something: a FIFO that no writer ever opens used to hang the reader
  // forever, and now fails after options.pipe_wait_s. Anything else (a
  // device, a socket) is refused. A symlink the user named is followed (it
  // is their own path); what it leads to is judged the same way.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError("'" + path + "': no such file");
    return ErrnoError("cannot open '" + path + "'", errno);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return ErrnoError("'" + path + "'", e);
  }
  if (S_ISFIFO(st.st_mode)) {
    struct pollfd p = {fd, POLLIN, 0};
    int ready;
    do ready = ::poll(&p, 1, static_cast<int>(options.pipe_wait_s * 1000));
    while (ready < 0 && errno == EINTR);
    if (ready <= 0) {
      ::close(fd);
      char wait[32];
      std::snprintf(wait, sizeof(wait), "%g", options.pipe_wait_s);
      return UnavailableError("'" + path + "' is a pipe and nothing was written to it within " + wait +
                              " s; expected a log file");
    }
  } else if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) return InvalidArgumentError("'" + path + "' is a directory, expected a log file");
    return InvalidArgumentError("'" + path + "' is not a regular file or a pipe (a device or socket), expected a log file");
  }
  // Blocking reads from here: the writer of a pipe is known to be there.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  // A second descriptor of the same open file, to check that a regular
  // gzip file ends where its last member does (CheckGzipEnd).
  const int check_fd = S_ISREG(st.st_mode) ? ::dup(fd) : -1;
  gzFile f = gzdopen(fd, "rb");  // reads plain files transparently; owns fd from here
  if (!f) {
    const int e = errno;
    ::close(fd);
    if (check_fd >= 0) ::close(check_fd);
    return ErrnoError("cannot open '" + path + "'", e);
  }
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
  const bool compressed = gzdirect(f) == 0;
  gzclose(f);
  Status end = Status::Ok();
  if (check_fd >= 0) {
    if (limit.ok() && n == 0 && compressed) end = CheckGzipEnd(check_fd, path, static_cast<uint64_t>(st.st_size));
    ::close(check_fd);
  }
  if (!limit.ok()) return limit;
  // A truncated stream reads as far as it can, then reports Z_BUF_ERROR.
  if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
    return DataLossError("'" + path + "': cannot decompress (" + err + "); is the .gz file truncated?");
  }
  if (!end.ok()) return end;
  return text;
}

}  // namespace internal

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

const char* ToString(NonFinitePolicy policy) {
  switch (policy) {
    case NonFinitePolicy::kReject: return "reject";
    case NonFinitePolicy::kDrop: return "drop";
    case NonFinitePolicy::kDiverged: return "diverged";
  }
  return "?";
}

StatusOr<NonFinitePolicy> NonFinitePolicyFromString(const std::string& name) {
  if (name == "reject") return NonFinitePolicy::kReject;
  if (name == "drop") return NonFinitePolicy::kDrop;
  if (name == "diverged") return NonFinitePolicy::kDiverged;
  return InvalidArgumentError("unknown non-finite policy " + Excerpt(name, 40) +
                              " (expected reject, drop or diverged)");
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
  if (!(pipe_wait_s >= 0 && pipe_wait_s <= 86400)) return fail("pipe_wait_s must be in [0, 86400] seconds");
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

namespace {

// A run directory (TensorBoard's log dir, Lightning's version_N, a Hugging
// Face checkpoint, a detectron2 output dir): the one log file it holds.
StatusOr<std::string> LogInDirectory(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file(ec)) continue;
    if (name.rfind("events.out.tfevents", 0) == 0 || name == "metrics.csv" || name == "trainer_state.json" ||
        name == "metrics.json") {
      found.push_back(e.path().string());
    }
  }
  if (ec) return ErrnoError("'" + dir + "'", ec.value());
  std::sort(found.begin(), found.end());
  if (found.size() == 1) return found[0];
  if (found.empty()) {
    return InvalidArgumentError("'" + dir + "' is a directory, expected a log file (a run directory must hold one "
                                "events.out.tfevents.*, metrics.csv, trainer_state.json or metrics.json)");
  }
  return InvalidArgumentError("'" + dir + "' is a directory with " + std::to_string(found.size()) +
                              " log files; give one: " + JoinNames(found));
}

}  // namespace

StatusOr<TrainingLog> LogReader::ReadFile(const std::string& path_in, const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("log reader options: " + error);
  std::string path = path_in;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    VIPER_ASSIGN_OR_RETURN(path, LogInDirectory(path));
  }
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
    // Staleness tables live beside their logs (<stem>.staleness.csv.gz): not logs.
    if (name.find(".staleness.") != std::string::npos) continue;
    if (name.find(".csv") != std::string::npos || name.find(".jsonl") != std::string::npos) {
      logs.push_back(e.path().string());
    }
  }
  std::sort(logs.begin(), logs.end());
  return logs;
}

}  // namespace datasets
}  // namespace viper
