// libFuzzer harness: the option parsing of `viper simulate` and `viper plan`
// (apps/viper: Boost.Program_options, the --warmup N|P% parser, the enum
// notifiers, the range and size checks of ValidatePlanningOptions). The input
// is split into argv tokens at whitespace (a NUL byte or a newline ends a
// token too, so tokens may hold any other byte, invalid UTF-8 included); the
// first byte picks the command. Parse + validate only: ParseSimulateOptions /
// ParsePlanOptions read no file and fit nothing. They must return -1
// (--help), 0 (valid) or 2 (bad usage): any other result, an exception
// escaping, a crash, a leak or a sanitizer report (float-cast-overflow
// included) is a finding. scripts/fuzz.sh runs it; fuzz/README.md says how.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands.h"

namespace {

std::vector<std::string> Tokens(const uint8_t* data, size_t size) {
  std::vector<std::string> out;
  std::string token;
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\0') {
      if (!token.empty()) out.push_back(token);
      token.clear();
    } else {
      token += c;
    }
  }
  if (!token.empty()) out.push_back(token);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // --help prints the whole option list on stdout: send it to /dev/null
  // (usage errors go to stderr, where libFuzzer and the sanitizers report;
  // run with -close_fd_mask=2 to silence them). VIPER_FUZZ_VERBOSE keeps it.
  if (std::getenv("VIPER_FUZZ_VERBOSE") == nullptr) {
    std::freopen("/dev/null", "w", stdout);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool simulate = (data[0] & 1) != 0;
  const std::vector<std::string> args = Tokens(data + 1, size - 1);
  const int rc = simulate ? viper::cli::ParseSimulateOptions(args) : viper::cli::ParsePlanOptions(args);
  if (rc != 0 && rc != -1 && rc != viper::cli::kExitUsage) {
    std::fprintf(stderr, "options_fuzz: %s parse returned %d (expected -1, 0 or 2)\n", simulate ? "simulate" : "plan",
                 rc);
    std::abort();
  }
  return 0;
}
