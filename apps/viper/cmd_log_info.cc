// viper log-info: read a training log and print its summary.
#include <cstdio>
#include <iostream>

#include "cli_util.h"
#include "commands.h"
#include "log_options.h"
#include "viper/core/training_log.h"
#include "viper/datasets/log_reader.h"

namespace viper {
namespace cli {

nlohmann::json SummaryToJson(const TrainingLog& log, const LogSummary& s) {
  nlohmann::json j;
  j["log"] = log.source;
  j["rows"] = s.rows;
  j["first_iteration"] = s.first_iteration;
  j["last_iteration"] = s.last_iteration;
  auto opt = [&](const char* key, const auto& value) {
    if (value) j[key] = *value; else j[key] = nullptr;
  };
  opt("epochs", s.epochs);
  opt("iterations_per_epoch", s.iterations_per_epoch);
  opt("seconds_per_iteration", s.seconds_per_iteration);
  opt("first_loss", s.first_loss);
  opt("last_loss", s.last_loss);
  opt("min_loss", s.min_loss);
  opt("min_loss_iteration", s.min_loss_iteration);
  j["validation_points"] = s.val_points;
  j["dropped_non_finite_rows"] = s.dropped_non_finite;
  return j;
}

int RunLogInfo(const std::vector<std::string>& args) {
  po::options_description desc("Options");
  std::string json_path;
  LogOptions log_options;
  desc.add_options()("help,h", "print this help");
  AddLogOptions(&desc, &log_options);
  desc.add_options()("json", po::value(&json_path), "also write the summary as JSON to this path ('-' = stdout)");
  po::variables_map vm;
  const int rc = ParseOrHelp(args, desc, &vm, "viper log-info --log FILE [options]",
                             "Reads a training log (CSV, Keras CSVLogger, Lightning metrics.csv, JSON lines; .gz "
                             "read directly) and prints rows, iteration range, epochs, iterations per epoch, mean "
                             "seconds per iteration, and first/last/min training loss.");
  if (rc != 0) return rc < 0 ? kExitOk : rc;

  auto log = ReadLog(log_options);
  if (!log.ok()) return Fail("log-info", log.status());
  const LogSummary s = Summarize(*log);

  std::printf("log                    %s\n", log->source.c_str());
  std::printf("rows                   %lld\n", static_cast<long long>(s.rows));
  std::printf("iterations             %lld .. %lld\n", static_cast<long long>(s.first_iteration),
              static_cast<long long>(s.last_iteration));
  if (s.epochs) std::printf("epochs                 %lld\n", static_cast<long long>(*s.epochs));
  if (s.iterations_per_epoch) std::printf("iterations per epoch   %.0f\n", *s.iterations_per_epoch);
  if (s.seconds_per_iteration) std::printf("seconds per iteration  %.6f\n", *s.seconds_per_iteration);
  if (s.first_loss) {
    std::printf("training loss          first %.6g, last %.6g, min %.6g (iteration %lld)\n", *s.first_loss,
                *s.last_loss, *s.min_loss, static_cast<long long>(*s.min_loss_iteration));
  }
  std::printf("validation points      %lld\n", static_cast<long long>(s.val_points));
  if (s.dropped_non_finite) {
    std::printf("dropped rows           %lld (non-finite values)\n", static_cast<long long>(s.dropped_non_finite));
  }
  if (!json_path.empty()) {
    Status st = WriteJson(SummaryToJson(*log, s), json_path, "log-info");
    if (!st.ok()) return Fail("log-info", st);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
