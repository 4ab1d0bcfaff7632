// viper._viper.write_staleness_table: the staleness table (issue 25) that
// viper.StalenessRecorder measured, formatted by core's FormatStalenessCsv
// (one writer for the format) and written the way every Viper file is
// (core's AtomicFile: a temporary beside the target, fsync, rename, fsync of
// the directory), with private permissions (0600), gzip when the name ends
// in ".gz".
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "viper/core/atomic_file.h"
#include "viper/core/staleness_table.h"

namespace viper {
namespace python {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

StatusOr<std::string> Gzip(const std::string& text, const std::string& path) {
  z_stream zs{};
  if (deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return IoError("cannot compress " + path + ": zlib would not start");
  }
  std::string out(deflateBound(&zs, static_cast<uLong>(text.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  const auto n = zs.total_out;
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return IoError("cannot compress " + path + " (zlib error " + std::to_string(rc) + ")");
  out.resize(n);
  return out;
}

Status WriteTable(const StalenessTable& table, const std::string& path) {
  std::string bytes = FormatStalenessCsv(table);
  if (EndsWith(path, ".gz")) {
    VIPER_ASSIGN_OR_RETURN(bytes, Gzip(bytes, path));
  }
  const std::string dir = DirectoryOf(path);
  const auto slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  VIPER_ASSIGN_OR_RETURN(auto file, AtomicFile::Create(dir + "/." + base + ".tmp." + std::to_string(::getpid())));
  if (::fchmod(file->fd(), 0600) != 0) return ErrnoError("chmod 0600 of " + file->temp_path(), errno);
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(file->fd(), p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write " + file->temp_path(), errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return file->CommitTo(path);
}

using Row = std::tuple<int64_t, int64_t, double, std::optional<double>, double, std::optional<double>>;

}  // namespace

void BindStaleness(py::module_& m) {
  m.def(
      "write_staleness_table",
      [](const std::string& path, const std::vector<Row>& rows) {
        StalenessTable table;
        table.source = path;
        table.records.reserve(rows.size());
        for (const Row& row : rows) {
          StalenessRecord r;
          std::tie(r.version_iteration, r.traffic_iteration, r.val_loss, r.val_accuracy, r.test_loss,
                   r.test_accuracy) = row;
          const std::string pair =
              "(" + std::to_string(r.version_iteration) + ", " + std::to_string(r.traffic_iteration) + ")";
          if (r.version_iteration < 0 || r.traffic_iteration < r.version_iteration) {
            throw py::value_error("write_staleness_table: pair " + pair + " needs 0 <= version <= traffic");
          }
          if (!table.records.empty()) {
            const StalenessRecord& b = table.records.back();
            if (std::make_pair(b.version_iteration, b.traffic_iteration) >=
                std::make_pair(r.version_iteration, r.traffic_iteration)) {
              throw py::value_error("write_staleness_table: pair " + pair +
                                    " is not after the previous one (rows sorted by version, then traffic, no duplicate)");
            }
          }
          for (const auto& [name, x] : {std::pair<const char*, double>{"val_loss", r.val_loss},
                                        std::pair<const char*, double>{"test_loss", r.test_loss}}) {
            if (!std::isfinite(x)) {
              throw py::value_error("write_staleness_table: " + std::string(name) + " of pair " + pair +
                                    " is not finite (" + std::to_string(x) + "); the table's readers refuse it");
            }
          }
          for (const auto& [name, x] : {std::pair<const char*, std::optional<double>>{"val_accuracy", r.val_accuracy},
                                        std::pair<const char*, std::optional<double>>{"test_accuracy", r.test_accuracy}}) {
            if (x && !(*x >= 0.0 && *x <= 1.0)) {
              throw py::value_error("write_staleness_table: " + std::string(name) + " of pair " + pair +
                                    " is not in [0, 1] (" + std::to_string(*x) + ")");
            }
          }
          table.records.push_back(r);
        }
        Status st;
        {
          py::gil_scoped_release release;
          st = WriteTable(table, path);
        }
        OkOrRaise(st);
      },
      py::arg("path"), py::arg("rows"),
      "Writes rows (version_iteration, traffic_iteration, val_loss, val_accuracy|None, test_loss, "
      "test_accuracy|None), sorted by (version, traffic), as a staleness table (CSV, gzip for .gz), "
      "atomically with mode 0600.");
}

}  // namespace python
}  // namespace viper
