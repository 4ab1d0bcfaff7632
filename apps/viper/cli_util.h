// Small shared pieces of the viper subcommands: option parsing with the
// usage exit code, error printing, JSON output.
#pragma once

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "viper/core/status.h"

namespace viper {
namespace cli {

namespace po = boost::program_options;

// Parses `args` against `desc`. Returns 0 on success; prints help and returns
// -1 when --help was given; prints the error and returns 2 on bad usage.
// `usage` is the first help line ("viper log-info --log FILE [options]").
int ParseOrHelp(const std::vector<std::string>& args, const po::options_description& desc,
                po::variables_map* vm, const std::string& usage, const std::string& description);

// Prints "viper <cmd>: <status message>" to stderr and returns 1 (bad input
// or failure). Bad usage is caught earlier by ParseOrHelp and returns 2.
int Fail(const std::string& command, const Status& status);

// A Program_options notifier that rejects (as bad usage, exit 2) a value the
// enum's FromString does not accept, with that function's message.
template <auto FromString>
auto CheckEnum(const char* option) {
  return [option](const std::string& value) {
    auto parsed = FromString(value);
    if (!parsed.ok()) {
      throw po::invalid_option_value(std::string("--") + option + " " + value + ": " + parsed.status().message());
    }
  };
}

// Writes `text` to the file `path`.
Status WriteText(const std::string& path, const std::string& text);

// Writes `j` (indented) to `path` ("-" = stdout).
Status WriteJson(const nlohmann::json& j, const std::string& path);

}  // namespace cli
}  // namespace viper
