#include "commands.h"
namespace viper { namespace cli { int RunLogInfo(const std::vector<std::string>&) { return kExitFailure; } } }
