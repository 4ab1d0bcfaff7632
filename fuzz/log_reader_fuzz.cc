// libFuzzer harness: the training-log reader (datasets/src/log_reader.cc) on
// arbitrary text, in memory, in every format it reads: auto-detection from
// the extension (.csv, .jsonl, none) and the header, and each format forced
// (plain CSV, Keras CSVLogger, Lightning metrics.csv, JSON lines); both
// non-finite policies. An input that starts like gzip also goes through
// ReadFile as a .csv.gz file (the decompressor and its limits). For every
// log it accepts, the summary log-info prints is computed and the records
// checked: iterations strictly increase. Every error's message is formatted.
// A crash, leak, hang or sanitizer report (float-cast-overflow included) is
// a finding; scripts/fuzz.sh runs it, fuzz/README.md says how.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "viper/core/training_log.h"
#include "viper/datasets/log_reader.h"

namespace {

using viper::datasets::LogFormat;
using viper::datasets::LogReader;
using viper::datasets::NonFinitePolicy;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "log_reader_fuzz: %s\n", what.c_str());
  std::abort();
}

void Check(const viper::StatusOr<viper::TrainingLog>& log, std::size_t input_size) {
  if (!log.ok()) {
    const std::string message = log.status().ToString();
    // A person reads it: it quotes a bounded excerpt of the input, never all of it.
    if (message.size() > 64 * 1024) {
      Fail("error message of " + std::to_string(message.size()) + " bytes for a " + std::to_string(input_size) +
           "-byte input: " + message.substr(0, 200));
    }
    return;
  }
  const auto& records = log->records;
  for (std::size_t i = 1; i < records.size(); ++i) {
    if (records[i].iteration <= records[i - 1].iteration) {
      Fail("accepted a log whose iterations do not increase at record " + std::to_string(i));
    }
  }
  (void)viper::Summarize(*log);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  struct Case {
    LogFormat format;
    const char* source;
  };
  static const Case kCases[] = {
      {LogFormat::kAuto, "fuzz.csv"},       {LogFormat::kAuto, "fuzz.jsonl"},
      {LogFormat::kAuto, "fuzz"},           {LogFormat::kCsv, "fuzz.csv"},
      {LogFormat::kKeras, "fuzz.csv"},      {LogFormat::kLightning, "metrics.csv"},
      {LogFormat::kJsonLines, "fuzz.jsonl"},
  };
  for (const Case& c : kCases) {
    LogReader::Options options;
    options.format = c.format;
    options.non_finite = size % 3 == 0 ? NonFinitePolicy::kReject
                         : size % 3 == 1 ? NonFinitePolicy::kDrop
                                         : NonFinitePolicy::kDiverged;
    Check(LogReader::Parse(text, c.source, options), size);
  }

  // gzip: through a file, the way `--log x.csv.gz` is read.
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    // A private file per input (mkstemps: O_EXCL, mode 0600, an
    // unpredictable name), never a name another user could plant.
    const char* dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string name = std::string(dir) + "/viper-log-reader-fuzz-XXXXXX.csv.gz";
    const int fd = ::mkstemps(name.data(), 7);
    const std::string path = name;
    if (FILE* f = fd >= 0 ? ::fdopen(fd, "wb") : nullptr) {
      const bool written = std::fwrite(data, 1, size, f) == size;
      std::fclose(f);
      if (written) {
        LogReader::Options options;
        Check(LogReader::ReadFile(path, options), size);
      }
      std::remove(path.c_str());
    }
  }
  return 0;
}
