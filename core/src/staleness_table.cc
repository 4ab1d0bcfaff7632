#include "viper/core/staleness_table.h"

#include <zlib.h>

#include <cstdio>
#include <cstring>

#include "viper/core/atomic_file.h"

namespace viper {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// gzip (RFC 1952) of `text`, best compression.
StatusOr<std::string> Gzip(const std::string& text, const std::string& path) {
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  if (deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return InternalError("cannot compress staleness table '" + path + "': zlib's deflateInit2 failed");
  }
  std::string out(deflateBound(&zs, static_cast<uLong>(text.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  const std::size_t written = zs.total_out;
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    return InternalError("cannot compress staleness table '" + path + "': zlib's deflate failed (" +
                         std::to_string(rc) + ")");
  }
  out.resize(written);
  return out;
}

}  // namespace

std::string FormatStalenessCsv(const StalenessTable& table) {
  bool accuracy = false;
  for (const auto& r : table.records) accuracy = accuracy || r.val_accuracy || r.test_accuracy;
  std::string out = accuracy ? "version_iteration,traffic_iteration,val_loss,val_accuracy,test_loss,test_accuracy\n"
                             : "version_iteration,traffic_iteration,val_loss,test_loss\n";
  char buf[256];
  auto opt = [](const std::optional<double>& x, char* b, size_t n) {
    if (x) {
      std::snprintf(b, n, "%.9g", *x);
    } else {
      b[0] = '\0';
    }
  };
  for (const auto& r : table.records) {
    if (accuracy) {
      char va[40], ta[40];
      opt(r.val_accuracy, va, sizeof(va));
      opt(r.test_accuracy, ta, sizeof(ta));
      std::snprintf(buf, sizeof(buf), "%lld,%lld,%.9g,%s,%.9g,%s\n", static_cast<long long>(r.version_iteration),
                    static_cast<long long>(r.traffic_iteration), r.val_loss, va, r.test_loss, ta);
    } else {
      std::snprintf(buf, sizeof(buf), "%lld,%lld,%.9g,%.9g\n", static_cast<long long>(r.version_iteration),
                    static_cast<long long>(r.traffic_iteration), r.val_loss, r.test_loss);
    }
    out += buf;
  }
  return out;
}

Status WriteStalenessTable(const StalenessTable& table, const std::string& path) {
  std::string bytes = FormatStalenessCsv(table);
  if (EndsWith(path, ".gz")) {
    VIPER_ASSIGN_OR_RETURN(bytes, Gzip(bytes, path));
  }
  return WriteFileAtomically(path, bytes).WithContext("staleness table '" + path + "'");
}

}  // namespace viper
