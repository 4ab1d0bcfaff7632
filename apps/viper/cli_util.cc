#include "cli_util.h"

#include <fstream>
#include <iostream>

#include "commands.h"

namespace viper {
namespace cli {

int ParseOrHelp(const std::vector<std::string>& args, const po::options_description& desc,
                po::variables_map* vm, const std::string& usage, const std::string& description) {
  try {
    po::store(po::command_line_parser(args).options(desc).run(), *vm);
    if (vm->count("help")) {
      std::cout << "Usage: " << usage << "\n\n" << description << "\n\n" << desc << "\n";
      return -1;
    }
    po::notify(*vm);
  } catch (const po::error& e) {
    std::cerr << "viper: " << e.what() << "\nUsage: " << usage << "\nTry '--help' for the options.\n";
    return kExitUsage;
  }
  return 0;
}

int Fail(const std::string& command, const Status& status) {
  std::cerr << "viper " << command << ": " << status.message() << "\n";
  return kExitFailure;
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) return IoError("cannot open '" + path + "' for writing");
  out << text;
  out.close();
  if (!out) return IoError("failed writing '" + path + "'");
  return Status::Ok();
}

Status WriteJson(const nlohmann::json& j, const std::string& path) {
  if (path == "-") {
    std::cout << j.dump(2) << "\n";
    return Status::Ok();
  }
  std::ofstream out(path);
  if (!out) return IoError("cannot open '" + path + "' for writing");
  out << j.dump(2) << "\n";
  out.close();
  if (!out) return IoError("failed writing '" + path + "'");
  return Status::Ok();
}

}  // namespace cli
}  // namespace viper
