#include "viper/core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace viper {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

// The sink and the lock that serialises calls to it.
std::mutex& SinkMutex() {
  static std::mutex mu;
  return mu;
}
LogSink& Sink() {
  static LogSink sink;
  return sink;
}

}  // namespace

const char* ToString(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "?";
}

LogSink SetLogSink(LogSink sink) {
  std::lock_guard<std::mutex> lock(SinkMutex());
  LogSink previous = std::move(Sink());
  Sink() = std::move(sink);
  return previous;
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }
bool LogEnabled(LogLevel level) { return level != LogLevel::kOff && static_cast<int>(level) >= g_level.load(); }

void Log(LogLevel level, const std::string& component, const std::string& message) {
  if (!LogEnabled(level)) return;
  std::lock_guard<std::mutex> lock(SinkMutex());
  if (Sink()) {
    Sink()(level, component, message);
    return;
  }
  if (level <= LogLevel::kInfo) {
    std::fprintf(stderr, "[%s] %s\n", component.c_str(), message.c_str());
  } else {
    std::fprintf(stderr, "viper %s: %s\n", component.c_str(), message.c_str());
  }
}

}  // namespace viper
