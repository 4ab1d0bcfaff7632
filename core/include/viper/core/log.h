// Diagnostics from library code go through one sink, which the application
// may replace (a CLI, a service's own logger, a test that checks them).
// Library code never prints itself. The default sink writes one line per
// message to stderr: "viper <component>: <message>" for warnings and errors,
// "[<component>] <message>" for progress (info, debug).
//
//   viper::Log(viper::LogLevel::kWarning, "transports", "consumer rank 2 dropped: ...");
//   viper::SetLogLevel(viper::LogLevel::kError);         // quieter
//   viper::SetLogSink([](LogLevel l, const std::string& c, const std::string& m) {...});
#pragma once

#include <functional>
#include <string>

namespace viper {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };
const char* ToString(LogLevel level);  // "debug", "info", "warning", "error", "off"

// Called for each message at or above the level, from whichever thread
// logged it (calls are serialised: a sink need not lock).
using LogSink = std::function<void(LogLevel level, const std::string& component, const std::string& message)>;

// Installs `sink` (nullptr: the default stderr sink) and returns the one it
// replaces (nullptr when that was the default).
LogSink SetLogSink(LogSink sink);

// Messages below `level` are dropped before the sink sees them (default: kInfo).
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
bool LogEnabled(LogLevel level);

void Log(LogLevel level, const std::string& component, const std::string& message);

}  // namespace viper
