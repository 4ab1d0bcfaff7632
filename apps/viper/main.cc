// viper: the command-line tool. `viper <command> --help` explains each command.
#include <cstring>
#include <exception>
#include <new>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "viper/config.h"

namespace {

using viper::cli::Command;

constexpr Command kCommands[] = {
    {"log-info", "summarise a training log (rows, iterations, epochs, losses)", viper::cli::RunLogInfo},
    {"inspect", "list the tensors and metadata of a .safetensors file, verify its checksum", viper::cli::RunInspect},
    {"train", "train an MLP on Fashion-MNIST for real and write its log", viper::cli::RunTrain},
    {"plan", "plan checkpoint schedules (epoch, viper-fixed/greedy, fixed, optimal, online, oracle)", viper::cli::RunPlan},
    {"simulate", "fit, plan every strategy, judge each in the simulator on the log's true curve", viper::cli::RunSimulate},
    {"evaluate", "every strategy over logs x tiers x warm-ups x windows, judged on the truth: median/worst regret", viper::cli::RunEvaluate},
    {"bench-summary", "tables and a chart from viper-bench's JSON output", viper::cli::RunBenchSummary},
    {"fit", "fit learning-curve families to a log's warm-up, select/ensemble, extrapolate; --evaluate scores them", viper::cli::RunFit},
    {"model-dir", "list and verify the versions in a PFS model directory; name the one a consumer serves", viper::cli::RunModelDir},
    {"run", "the live workflow under mpirun: rank 0 trains and publishes on schedule, the others serve", viper::cli::RunRun},
};

void PrintHelp() {
  std::cout << "viper " << VIPER_VERSION
            << " - decide when to update a served model, and move it fast\n\n"
               "Usage: viper <command> [options]      viper <command> --help\n\nCommands:\n";
  for (const auto& c : kCommands) {
    std::cout << "  " << c.name << std::string(14 - std::strlen(c.name), ' ') << c.summary << "\n";
  }
  std::cout << "\nExit codes: 0 success; 1 bad input or failure (the message names the file, line and value);\n"
               "2 bad usage (unknown option, bad option value: the message names the option, the value and the\n"
               "accepted values); 3 `viper run` finished but lost consumers (its 'lost consumer(s)' line says which).\n"
               "--json - writes only JSON to stdout (tables go to stderr); every JSON document has a \"schema\" key.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    PrintHelp();
    return viper::cli::kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintHelp();
    return viper::cli::kExitOk;
  }
  if (name == "--version") {
    std::cout << "viper " << VIPER_VERSION << "\n";
    return viper::cli::kExitOk;
  }
  for (const auto& c : kCommands) {
    if (name != c.name) continue;
    // Every error path returns a code; an exception reaching here is a bug or
    // an exhausted resource. Report it and exit 1 instead of aborting.
    try {
      return c.run(std::vector<std::string>(argv + 2, argv + argc));
    } catch (const std::bad_alloc&) {
      std::cerr << "viper " << name << ": out of memory\n";
    } catch (const std::exception& e) {
      std::cerr << "viper " << name << ": unexpected error: " << e.what() << "\n";
    } catch (...) {
      std::cerr << "viper " << name << ": unexpected error of unknown type\n";
    }
    return viper::cli::kExitFailure;
  }
  std::cerr << "viper: unknown command '" << name << "'. Try 'viper --help'.\n";
  return viper::cli::kExitUsage;
}
