// The viper subcommands. Each lives in its own cmd_<name>.cc and returns the
// process exit code: 0 success, 1 bad input or failure, 2 bad usage (an
// unknown option or a bad option value), 3 `viper run` finished but lost
// consumers on the way (its summary says which).
#pragma once

#include <string>
#include <vector>

namespace viper {
namespace cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitLostConsumers = 3;

// `args` excludes the program and subcommand names.
using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
};

int RunLogInfo(const std::vector<std::string>& args);
int RunInspect(const std::vector<std::string>& args);
int RunTrain(const std::vector<std::string>& args);
int RunPlan(const std::vector<std::string>& args);
int RunSimulate(const std::vector<std::string>& args);
int RunBenchSummary(const std::vector<std::string>& args);
int RunFit(const std::vector<std::string>& args);
int RunModelDir(const std::vector<std::string>& args);
int RunRun(const std::vector<std::string>& args);
int RunEvaluate(const std::vector<std::string>& args);

// Parse-only entry points of `simulate` and `plan`: parse `args` and
// validate every value, reading no file and fitting nothing. Return 0 when
// the options are valid, 2 on bad usage (message on stderr), -1 after
// --help. The fuzz harness fuzz/options_fuzz.cc drives them.
int ParseSimulateOptions(const std::vector<std::string>& args);
int ParsePlanOptions(const std::vector<std::string>& args);

}  // namespace cli
}  // namespace viper
