// viper._viper.write_staleness_table: the staleness table (issue 25) that
// viper.StalenessRecorder measured, formatted by core's FormatStalenessCsv
// and written by core's WriteStalenessTable, the trainer's writer too (an
// AtomicFile: a temporary beside the target, fsync, rename, fsync of the
// directory), with private permissions (0600), gzip when the name ends in
// ".gz".
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "viper/core/staleness_table.h"

namespace viper {
namespace python {
namespace {

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
          st = WriteStalenessTable(table, path);
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
