#include "viper/transports/types.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>

namespace viper {
namespace transports {
namespace {

template <typename E, std::size_t N>
std::optional<E> Lookup(const std::pair<E, const char*> (&table)[N], const std::string& name) {
  for (const auto& [value, text] : table) {
    if (name == text) return value;
  }
  return std::nullopt;
}
template <typename E, std::size_t N>
const char* Name(const std::pair<E, const char*> (&table)[N], E value) {
  for (const auto& [v, text] : table) {
    if (v == value) return text;
  }
  return "?";
}

const std::pair<HostProtocol, const char*> kProtocols[] = {{HostProtocol::kTwoSided, "two-sided"},
                                                           {HostProtocol::kOneSided, "one-sided"},
                                                           {HostProtocol::kShm, "shm"}};
const std::pair<Fanout, const char*> kFanouts[] = {
    {Fanout::kNode, "node"}, {Fanout::kDirect, "direct"}, {Fanout::kTree, "tree"}};

}  // namespace

const char* ToString(HostProtocol protocol) { return Name(kProtocols, protocol); }
std::optional<HostProtocol> HostProtocolFromString(const std::string& name) {
  return Lookup(kProtocols, name);
}
const char* ToString(Fanout fanout) { return Name(kFanouts, fanout); }
std::optional<Fanout> FanoutFromString(const std::string& name) { return Lookup(kFanouts, name); }

Status WriteCostSamplesCsv(const std::string& path, const std::vector<CostSample>& samples, bool append) {
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  if (!out) return IoError("cannot open " + path + " for writing");
  if (!(append && exists)) out << "tier,mode,phase,bytes,seconds\n";
  for (const auto& s : samples) {
    char seconds[64];
    std::snprintf(seconds, sizeof(seconds), "%.9g", s.seconds);
    out << ToString(s.tier) << ',' << ToString(s.mode) << ',' << s.phase << ',' << s.bytes << ',' << seconds
        << '\n';
  }
  out.flush();
  if (!out) return IoError("write to " + path + " failed");
  return Status::Ok();
}

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace transports
}  // namespace viper
