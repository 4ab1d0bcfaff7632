// libFuzzer harness: the staleness-table reader
// (datasets/src/staleness_reader.cc) on arbitrary text, in memory
// (StalenessReader::Parse), with the default limits and with tight ones (a
// few rows, short lines, few bytes) so that every limit is reached. An input
// that starts like gzip also goes through ReadFile as a .csv.gz file. Every
// table it accepts is checked against the reader's contract (iterations in
// 0..2^53 with v <= t, sorted by (v, t) without a repeated pair, losses
// finite and >= 0, or +inf under --non-finite diverged, accuracies in
// [0, 1]; also read with the drop and diverged policies) and must read back from its own
// FormatStalenessCsv text as the same pairs. Every error's message is
// formatted and bounded. A crash, leak, hang or sanitizer report is a
// finding; scripts/fuzz.sh runs it, fuzz/README.md says how.
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "viper/core/staleness_table.h"
#include "viper/datasets/staleness_reader.h"

namespace {

using viper::StalenessRecord;
using viper::StalenessTable;
using viper::datasets::kMaxLogIteration;
using viper::datasets::StalenessReader;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "staleness_fuzz: %s\n", what.c_str());
  std::abort();
}

bool Accuracy(const std::optional<double>& a) { return !a || (*a >= 0 && *a <= 1); }

void Check(const viper::StatusOr<StalenessTable>& table, std::size_t input_size, bool reread,
           bool diverged = false) {
  if (!table.ok()) {
    const std::string message = table.status().ToString();
    // A person reads it: it quotes a bounded excerpt of the input, never all of it.
    if (message.size() > 64 * 1024) {
      Fail("error message of " + std::to_string(message.size()) + " bytes for a " +
           std::to_string(input_size) + "-byte input: " + message.substr(0, 200));
    }
    return;
  }
  const auto& records = table->records;
  if (records.empty()) Fail("accepted a table without rows");
  for (std::size_t i = 0; i < records.size(); ++i) {
    const StalenessRecord& r = records[i];
    if (r.version_iteration < 0 || r.version_iteration > r.traffic_iteration ||
        r.traffic_iteration > kMaxLogIteration) {
      Fail("accepted iterations v=" + std::to_string(r.version_iteration) +
           " t=" + std::to_string(r.traffic_iteration) + " at record " + std::to_string(i));
    }
    // Under --non-finite diverged a loss may be +inf (a diverged model), never NaN or negative.
    const double top = diverged ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::max();
    if (!(r.val_loss >= 0 && r.val_loss <= top && r.test_loss >= 0 && r.test_loss <= top)) {
      Fail("accepted a loss that is negative, NaN or (not diverged) infinite at record " + std::to_string(i));
    }
    if (!Accuracy(r.val_accuracy) || !Accuracy(r.test_accuracy)) {
      Fail("accepted an accuracy outside [0, 1] at record " + std::to_string(i));
    }
    if (i > 0) {
      const StalenessRecord& p = records[i - 1];
      if (p.version_iteration > r.version_iteration ||
          (p.version_iteration == r.version_iteration && p.traffic_iteration >= r.traffic_iteration)) {
        Fail("records not strictly sorted by (v, t) at record " + std::to_string(i));
      }
    }
  }
  if (!reread) return;
  // What the writer makes of an accepted table reads back: the same pairs.
  const std::string text = viper::FormatStalenessCsv(*table);
  StalenessReader::Options options;
  options.max_bytes = static_cast<int64_t>(text.size()) + 1;
  if (diverged) options.non_finite = viper::datasets::NonFinitePolicy::kDiverged;
  const auto again = StalenessReader::Parse(text, "rewritten.csv", options);
  if (!again.ok()) Fail("the writer's text of an accepted table is refused: " + again.status().ToString());
  if (again->records.size() != records.size()) Fail("the writer's text reads back with another row count");
  for (std::size_t i = 0; i < records.size(); ++i) {
    const StalenessRecord& a = records[i];
    const StalenessRecord& b = again->records[i];
    if (a.version_iteration != b.version_iteration || a.traffic_iteration != b.traffic_iteration ||
        a.val_accuracy.has_value() != b.val_accuracy.has_value() ||
        a.test_accuracy.has_value() != b.test_accuracy.has_value()) {
      Fail("the writer's text reads back as another table at record " + std::to_string(i));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Check(StalenessReader::Parse(text, "fuzz.csv", {}), size, /*reread=*/true);
  StalenessReader::Options tight;
  tight.max_rows = 3;
  tight.max_line_bytes = 48;
  tight.max_bytes = 512;
  Check(StalenessReader::Parse(text, "fuzz.csv", tight), size, /*reread=*/false);
  // NaN/inf as a diverged model (+inf) or dropped rows, as the planning commands may read them.
  StalenessReader::Options diverged;
  diverged.non_finite = viper::datasets::NonFinitePolicy::kDiverged;
  Check(StalenessReader::Parse(text, "fuzz.csv", diverged), size, /*reread=*/true, /*diverged=*/true);
  StalenessReader::Options drop;
  drop.non_finite = viper::datasets::NonFinitePolicy::kDrop;
  Check(StalenessReader::Parse(text, "fuzz.csv", drop), size, /*reread=*/true);

  // gzip: through a file, the way a .csv.gz table is read.
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    // A private file per input (mkstemps: O_EXCL, mode 0600, an
    // unpredictable name), never a name another user could plant.
    const char* dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string name = std::string(dir) + "/viper-staleness-fuzz-XXXXXX.csv.gz";
    const int fd = ::mkstemps(name.data(), 7);
    const std::string path = name;
    if (FILE* f = fd >= 0 ? ::fdopen(fd, "wb") : nullptr) {
      const bool written = std::fwrite(data, 1, size, f) == size;
      std::fclose(f);
      if (written) Check(StalenessReader::ReadFile(path, {}), size, /*reread=*/true);
      std::remove(path.c_str());
    }
  }
  return 0;
}
