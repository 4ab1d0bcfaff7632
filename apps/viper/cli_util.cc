#include "cli_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "viper/core/atomic_file.h"

namespace viper {
namespace cli {
namespace {

// "viper simulate --log ..." -> "simulate".
std::string CommandOf(const std::string& usage) {
  std::istringstream in(usage);
  std::string viper, command;
  in >> viper >> command;
  return command;
}

// What a typed option accepts, from its value semantic.
std::string Expected(const po::value_semantic* s) {
  if (dynamic_cast<const po::typed_value<double>*>(s)) return "a number (e.g. 0.5 or 1e-3)";
  if (dynamic_cast<const po::typed_value<int64_t>*>(s) || dynamic_cast<const po::typed_value<int>*>(s)) {
    return "a whole number (e.g. 100)";
  }
  if (dynamic_cast<const po::typed_value<uint64_t>*>(s)) return "a non-negative whole number";
  return "a value of the documented form";
}

// The value given for `option` on the command line ("--x v" or "--x=v").
std::string ValueGiven(const std::vector<std::string>& args, const std::string& option) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == option && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind(option + "=", 0) == 0) return args[i].substr(option.size() + 1);
  }
  return "";
}

std::string Num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

}  // namespace

int ParseOrHelp(const std::vector<std::string>& args, const po::options_description& desc,
                po::variables_map* vm, const std::string& usage, const std::string& description) {
  const std::string command = CommandOf(usage);
  std::string message;
  // Boost.Program_options (1.74) formats its messages by replacing
  // placeholders like %value% with the user's text until none is left: an
  // argument that holds a placeholder never stops being replaced (found by
  // fuzz/options_fuzz.cc). Refuse such an argument before parsing.
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    for (const char* placeholder : {"%canonical_option%", "%value%", "%prefix%", "%option%", "%original_token%"}) {
      if (a.find(placeholder) != std::string::npos) {
        // Name the option: the argument itself (--opt=...), or the one before it.
        const std::string& option = a.rfind("--", 0) == 0 || i == 0 ? a : args[i - 1];
        std::cerr << "viper " << command << ": " << option.substr(0, option.find('=')).substr(0, 80)
                  << ": the argument '" << a.substr(0, 200) << "' contains '" << placeholder
                  << "', which the option parser cannot quote\n";
        return kExitUsage;
      }
    }
  }
  try {
    const po::parsed_options parsed = po::command_line_parser(args).options(desc).run();
    // Boost converts "-1" to an unsigned option as 2^64 - 1 without a word:
    // refuse a negative text for every unsigned option before storing it.
    for (const po::option& o : parsed.options) {
      const po::option_description* d = desc.find_nothrow(o.string_key, false);
      if (d == nullptr || o.value.empty()) continue;
      const po::value_semantic* semantic = d->semantic().get();
      const bool is_unsigned = dynamic_cast<const po::typed_value<unsigned long>*>(semantic) != nullptr ||
                               dynamic_cast<const po::typed_value<unsigned long long>*>(semantic) != nullptr ||
                               dynamic_cast<const po::typed_value<unsigned int>*>(semantic) != nullptr;
      const std::string& text = o.value.front();
      const size_t first = text.find_first_not_of(" \t");
      if (is_unsigned && first != std::string::npos && text[first] == '-') {
        std::cerr << "viper " << command << ": --" << o.string_key << " '" << text.substr(0, 80)
                  << "' is not valid: expected a non-negative integer\nTry 'viper " << command
                  << " --help' for the options.\n";
        return kExitUsage;
      }
    }
    po::store(parsed, *vm);
    if (vm->count("help")) {
      std::cout << "Usage: " << usage << "\n\n" << description << "\n\n" << desc << "\n";
      return -1;
    }
    po::notify(*vm);
    return 0;
  } catch (const OptionValueError& e) {
    message = e.what();
  } catch (const po::validation_error& e) {
    // A typed option whose text does not convert ("--requests lots").
    const std::string option = e.get_option_name();
    if (option.empty()) {  // thrown by a notifier that did not name its option
      message = e.what();
      std::cerr << "viper " << command << ": " << message << "\nTry 'viper " << command << " --help' for the options.\n";
      return kExitUsage;
    }
    const size_t name_at = option.find_first_not_of('-');
    const po::option_description* d =
        name_at == std::string::npos ? nullptr : desc.find_nothrow(option.substr(name_at), false);
    message = option + " '" + ValueGiven(args, option) + "' is not valid: expected " +
              (d ? Expected(d->semantic().get()) : std::string("a value of the documented form"));
  } catch (const po::error& e) {
    message = e.what();
  }
  std::cerr << "viper " << command << ": " << message << "\nUsage: " << usage << "\nTry 'viper " << command
            << " --help' for the options.\n";
  return kExitUsage;
}

int Fail(const std::string& command, const Status& status) {
  std::cerr << "viper " << command << ": " << status.message() << "\n";
  return kExitFailure;
}

int UsageError(const std::string& command, const std::string& message) {
  std::cerr << "viper " << command << ": " << message << "\nTry 'viper " << command << " --help' for the options.\n";
  return kExitUsage;
}

Status CheckReal(const std::string& option, double value, double min, double max, bool min_open,
                 const std::string& note) {
  const bool ok = std::isfinite(value) && (min_open ? value > min : value >= min) && value <= max;
  if (ok) return Status::Ok();
  std::string range = std::string(min_open ? "(" : "[") + Num(min) + ", " + Num(max) + (std::isinf(max) ? ")" : "]");
  return InvalidArgumentError(option + " " + Num(value) + " is out of range: expected a finite number in " + range +
                              (note.empty() ? "" : " (" + note + ")"));
}

Status CheckInteger(const std::string& option, int64_t value, int64_t min, int64_t max, const std::string& note) {
  if (value >= min && value <= max) return Status::Ok();
  return InvalidArgumentError(option + " " + std::to_string(value) + " is out of range: expected an integer in [" +
                              std::to_string(min) + ", " + std::to_string(max) + "]" +
                              (note.empty() ? "" : " (" + note + ")"));
}

int64_t Warmup::Resolve(int64_t first, int64_t last) const {
  if (iterations > 0) return iterations;
  return first + static_cast<int64_t>(std::llround(fraction * static_cast<double>(last - first)));
}

Warmup Warmup::Fraction(double f) {
  Warmup w;
  w.fraction = f;
  std::ostringstream os;
  os << f * 100 << "%";
  w.text = os.str();
  return w;
}

StatusOr<Warmup> ParseWarmup(const std::string& text) {
  Warmup w;
  w.text = text;
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  if (!text.empty() && text.back() == '%') {
    const double p = std::strtod(begin, &end);
    if (end != begin && end == begin + text.size() - 1 && std::isfinite(p) && p > 0 && p < 100) {
      w.fraction = p / 100;
      return w;
    }
  } else if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    const long long n = std::strtoll(begin, &end, 10);
    if (errno == 0 && n > 0 && n <= kMaxIterations) {
      w.iterations = n;
      return w;
    }
  }
  return InvalidArgumentError("--warmup '" + text + "' is not valid: expected N|P%, an iteration N in [1, " +
                              std::to_string(kMaxIterations) +
                              "] where the warm-up ends, or a percentage P in (0, 100) of the logged iteration span");
}

void validate(boost::any& v, const std::vector<std::string>& values, Warmup*, int) {
  po::validators::check_first_occurrence(v);
  auto w = ParseWarmup(po::validators::get_single_string(values));
  if (!w.ok()) throw OptionValueError(w.status().message());
  v = boost::any(*w);
}

Status WriteText(const std::string& path, const std::string& text) {
  // Written in place, never created (no O_CREAT): a FIFO or device named
  // directly, and /dev/stdout, /dev/stderr, /dev/fd/N (links into /proc,
  // process substitution). A symbolic link
  // anywhere else is replaced like a regular file, never written through: a
  // link planted at the output's name cannot send the report into a device.
  // (/dev/stdout is written in place even when it leads to a regular file,
  // the shell's redirection: replacing it would replace /dev/stdout itself.)
  struct stat lst {};
  const bool exists = ::lstat(path.c_str(), &lst) == 0;
  const bool dev_name = path == "/dev/stdout" || path == "/dev/stderr" || path.rfind("/dev/fd/", 0) == 0 ||
                        path.rfind("/proc/self/fd/", 0) == 0;
  const bool in_place = dev_name || (exists && !S_ISREG(lst.st_mode) && !S_ISLNK(lst.st_mode));
  if (exists && S_ISDIR(lst.st_mode)) return IoError("cannot write '" + path + "': it is a directory");
  if (in_place) {
    // /dev/stdout and friends: the descriptor itself, after what stdio holds,
    // so that the JSON lands after the table, at the shell's offset (opening
    // /proc/self/fd/1 anew would start a regular file over at offset 0).
    int fd = -1;
    bool own = true;
    if (dev_name) {
      const std::string n = path == "/dev/stdout"   ? "1"
                            : path == "/dev/stderr" ? "2"
                                                    : path.substr(path.find_last_of('/') + 1);
      if (!n.empty() && n.size() < 9 && n.find_first_not_of("0123456789") == std::string::npos) {
        fd = std::stoi(n);
        own = false;
        std::cout.flush();
        std::fflush(nullptr);
      }
    }
    // O_NONBLOCK: a FIFO nobody reads fails at once (ENXIO) instead of
    // hanging; writes then block as usual.
    if (own) fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return IoError("cannot open '" + path + "' for writing: " + std::strerror(errno));
    if (own) {
      const int fl = ::fcntl(fd, F_GETFL);
      if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    if (own) ::close(fd);
    if (done != text.size()) return IoError("failed writing '" + path + "'");
    return Status::Ok();
  }
  // A report, not a model: 0666 narrowed by the umask, like a shell's `>`.
  AtomicFile::Options options;
  options.mode = 0666;
  options.apply_umask = true;
  auto file = AtomicFile::CreateFor(path, options);
  if (!file.ok()) return IoError("cannot open '" + path + "' for writing: " + file.status().message());
  Status written = (*file)->Write(text.data(), text.size());
  if (written.ok()) written = (*file)->CommitTo(path);  // the temporary goes on failure
  if (!written.ok()) return IoError("failed writing '" + path + "': " + written.message());
  return Status::Ok();
}

Status WriteJson(nlohmann::json j, const std::string& path, const std::string& schema, int version) {
  j["schema"] = "viper." + schema + "/" + std::to_string(version);
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (JsonToStdout(path)) {
    std::cout << text << std::flush;
    if (!std::cout) return IoError("failed writing JSON to stdout");
    return Status::Ok();
  }
  return WriteText(path, text);
}

Status WriteTrace(const std::string& text, const std::string& path, const std::string& schema) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InternalError("the trace to write to '" + path + "' is not a JSON object");
  return WriteJson(std::move(j), path, schema);
}

}  // namespace cli
}  // namespace viper
