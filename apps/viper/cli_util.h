// Small shared pieces of the viper subcommands: option parsing with the
// usage exit code, option-value checks, error printing, atomic file output.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "viper/core/status.h"

namespace viper {
namespace cli {

namespace po = boost::program_options;

// A bad option value found while parsing: what() is the whole sentence
// ("--transport nvme: unknown transport tier ... (expected gpu, host or pfs)"),
// printed as is and answered with the usage exit code 2.
class OptionValueError : public po::error {
 public:
  explicit OptionValueError(const std::string& message) : po::error(message) {}
};

// Parses `args` against `desc`. Returns 0 on success; prints help and returns
// -1 when --help was given; prints one sentence naming the option, the value
// and what is accepted, and returns 2 on bad usage. `usage` is the first help
// line ("viper log-info --log FILE [options]"); its second word names the
// command in messages.
int ParseOrHelp(const std::vector<std::string>& args, const po::options_description& desc,
                po::variables_map* vm, const std::string& usage, const std::string& description);

// Prints "viper <cmd>: <status message>" to stderr and returns 1 (bad input
// or failure). Bad usage is caught earlier by ParseOrHelp and returns 2.
int Fail(const std::string& command, const Status& status);
// Prints "viper <cmd>: <message>" to stderr and returns 2 (bad usage).
int UsageError(const std::string& command, const std::string& message);

// A Program_options notifier that rejects (as bad usage, exit 2) a value the
// enum's FromString does not accept, with that function's message.
template <auto FromString>
auto CheckEnum(const char* option) {
  return [option](const std::string& value) {
    auto parsed = FromString(value);
    if (!parsed.ok()) throw OptionValueError(std::string("--") + option + " " + value + ": " + parsed.status().message());
  };
}

// A real-valued option whose --help default reads as written (0.05), not as
// the binary double (0.050000000000000003).
inline po::typed_value<double>* RealOption(double* value) {
  return po::value(value)->default_value(*value, (std::ostringstream() << *value).str());
}

// Range checks of numeric option values. Each returns an InvalidArgument
// status naming the option, the value and the valid range, e.g.
// "--requests -1 is out of range: expected an integer in [0, 50000000] (0 = ...)".
// NaN and infinities are always out of range. `note` explains special values.
Status CheckReal(const std::string& option, double value, double min, double max, bool min_open = false,
                 const std::string& note = "");
Status CheckInteger(const std::string& option, int64_t value, int64_t min, int64_t max, const std::string& note = "");
constexpr double kInf = std::numeric_limits<double>::infinity();

// Limits on what an option may make the tool allocate (issue: absurd values
// exhausted memory). Stated in --help and in the errors.
constexpr int64_t kMaxRequests = 50'000'000;          // simulated requests (~16 B each)
constexpr double kMaxModelBytes = 1125899906842624.0;  // 1 PiB, modelled sizes
constexpr int64_t kMaxIterations = 1'000'000'000;     // an iteration number (W, spacing)
constexpr int64_t kMaxPlannedIterations = 10'000'000;  // N - W: each is a point of the planned curves

// The warm-up, `--warmup N|P%`: N iterations after the log's first iteration,
// or P% of the logged iteration span (first..last). Exactly one is set.
struct Warmup {
  int64_t iterations = 0;  // > 0: the warm-up ends at this iteration (as logged)
  double fraction = 0;     // > 0: of the span, in (0, 1)
  std::string text;        // as given ("20%", "500")
  // The last warm-up iteration for a log running first..last: P% -> first +
  // round(P/100 * (last - first)); N -> N (an iteration number, as logged).
  int64_t Resolve(int64_t first, int64_t last) const;
  static Warmup Fraction(double f);
};
// Parses "500" or "20%" (percentage in (0, 100)); the error names --warmup.
StatusOr<Warmup> ParseWarmup(const std::string& text);
// Boost.Program_options hook so that po::value<Warmup> parses --warmup.
void validate(boost::any& v, const std::vector<std::string>& values, Warmup*, int);

// Writes `text` to `path` atomically through the project's one atomic-write
// routine (viper/core/atomic_file.h): a private temporary beside it (random
// name, O_EXCL|O_NOFOLLOW: a link planted in the directory is never written
// through), fsync, rename (a failure never leaves a truncated file; the old
// file stays; a link at `path` itself is replaced, not followed). Mode 0666
// narrowed by the umask. A FIFO or device named directly, and /dev/stdout,
// /dev/stderr, /dev/fd/N, are written in place, never created (a FIFO
// without a reader is an error at once); any other symbolic link is replaced.
Status WriteText(const std::string& path, const std::string& text);

// Writes `j` (indented) to `path` ("-" = stdout) atomically, with the key
// "schema": "viper.<schema>/<version>" added. Strings that are not valid
// UTF-8 (a Latin-1 file name) are written with U+FFFD in place of the bad
// bytes instead of failing.
Status WriteJson(nlohmann::json j, const std::string& path, const std::string& schema, int version = 1);

// Writes a Chrome trace-event JSON document (`text`, an object with
// "traceEvents") atomically with the "schema" key added (trace viewers
// ignore unknown top-level keys).
Status WriteTrace(const std::string& text, const std::string& path, const std::string& schema);

// `text` as a gnuplot single-quoted string ('it''s').
std::string GnuplotQuote(const std::string& text);
// Runs gnuplot on `script` (which must not set the output) drawing to `png`
// (gnuplot.cc). Everything gnuplot reads and writes lives in a private
// directory (mkdtemp, 0700, removed afterwards): the script (written with
// AtomicFile), its stderr (a file created O_EXCL|O_NOFOLLOW there) and the
// image, which is then copied to `png` atomically; gnuplot is started with
// posix_spawnp, no shell. A failed plot leaves no partial PNG. `terminal` is
// the "set terminal ..." line.
Status RunGnuplot(const std::string& terminal, const std::string& script, const std::string& png);

// True when `path` is "-" (JSON to stdout): the command then prints its
// table to stderr so that stdout holds only JSON.
inline bool JsonToStdout(const std::string& path) { return path == "-"; }

}  // namespace cli
}  // namespace viper
