#include "viper/core/staleness_table.h"

#include <cstdio>

namespace viper {

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

}  // namespace viper
