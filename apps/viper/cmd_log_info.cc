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
  j["diverged_values"] = s.diverged_values;
  j["first_diverged_iteration"] = s.first_diverged_iteration ? nlohmann::json(*s.first_diverged_iteration) : nlohmann::json();
  j["format"] = log.format;
  j["training_points"] = s.train_points;
  j["evaluation_only"] = log.EvaluationOnly();
  j["timed_rows"] = s.timed_rows;
  if (log.wall_time_column.empty()) j["wall_time_column"] = nullptr; else j["wall_time_column"] = log.wall_time_column;
  j["wall_time_from_durations"] = log.wall_time_from_durations;
  j["skipped_summary_rows"] = log.skipped_summary_rows;
  j["discarded_orphaned_rows"] = log.discarded_orphaned_rows;
  j["restarts"] = log.restarts;
  if (log.epoch_level_iterations_per_epoch > 0) {
    j["epoch_level_iterations_per_epoch"] = log.epoch_level_iterations_per_epoch;
  } else {
    j["epoch_level_iterations_per_epoch"] = nullptr;
  }
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
                             "Reads a training log (CSV, Keras CSVLogger, Lightning metrics.csv, JSON lines, Hugging "
                             "Face trainer_state.json, TensorBoard exports and event files, detectron2 metrics.json; "
                             ".gz read directly) and prints its format, rows, iteration range, epochs, iterations "
                             "per epoch, mean seconds per iteration (wall-time span / iteration span) or that the log "
                             "has no wall time, first/last/min training loss and the validation points.");
  if (rc != 0) return rc < 0 ? kExitOk : rc;

  auto log = ReadLog(log_options);
  if (!log.ok()) return Fail("log-info", log.status());
  const LogSummary s = Summarize(*log);
  // With --json - stdout carries only the JSON document; the table goes to stderr.
  FILE* out = json_path == "-" ? stderr : stdout;

  std::fprintf(out, "log                    %s\n", log->source.c_str());
  std::fprintf(out, "format                 %s\n", log->format.c_str());
  std::fprintf(out, "rows                   %lld\n", static_cast<long long>(s.rows));
  if (log->epoch_level_iterations_per_epoch > 0) {
    std::fprintf(out, "epoch-level            epoch e -> iteration (e+1) x %lld%s\n",
                static_cast<long long>(log->epoch_level_iterations_per_epoch),
                log->epoch_level_iterations_per_epoch == 1 ? " (give --iterations-per-epoch to map epochs to iterations)" : "");
  }
  std::fprintf(out, "iterations             %lld .. %lld\n", static_cast<long long>(s.first_iteration),
              static_cast<long long>(s.last_iteration));
  if (s.epochs) std::fprintf(out, "epochs                 %lld\n", static_cast<long long>(*s.epochs));
  if (s.iterations_per_epoch) std::fprintf(out, "iterations per epoch   %.0f\n", *s.iterations_per_epoch);
  if (s.seconds_per_iteration) {
    std::fprintf(out, "seconds per iteration  %.6f (from '%s'%s)\n", *s.seconds_per_iteration, log->wall_time_column.c_str(),
                log->wall_time_from_durations ? ", seconds per iteration accumulated" : "");
  } else if (log->wall_time_column.empty()) {
    std::fprintf(out, "wall time              none in the log (give --seconds-per-iteration where a tau is needed)\n");
  } else {
    std::fprintf(out, "wall time              '%s' on %lld rows: too few to measure seconds per iteration\n",
                log->wall_time_column.c_str(), static_cast<long long>(s.timed_rows));
  }
  std::fprintf(out, "training-loss points   %lld\n", static_cast<long long>(s.train_points));
  if (s.first_loss) {
    std::fprintf(out, "training loss          first %.6g, last %.6g, min %.6g (iteration %lld)\n", *s.first_loss,
                *s.last_loss, *s.min_loss, static_cast<long long>(*s.min_loss_iteration));
  }
  std::fprintf(out, "validation points      %lld%s\n", static_cast<long long>(s.val_points),
              log->EvaluationOnly() ? " (evaluation-only log: fit, plan and simulate use the validation series)" : "");
  if (log->skipped_summary_rows) {
    std::fprintf(out, "summary entries        %lld skipped (a run summary such as Hugging Face's train_loss mean is not a "
                "loss point)\n",
                static_cast<long long>(log->skipped_summary_rows));
  }
  if (log->restarts) {
    std::fprintf(out, "restarts               %lld (steps went back): %lld orphaned values discarded, as TensorBoard "
                "does\n",
                static_cast<long long>(log->restarts), static_cast<long long>(log->discarded_orphaned_rows));
  }
  if (s.dropped_non_finite) {
    std::fprintf(out, "dropped rows           %lld (non-finite values)\n", static_cast<long long>(s.dropped_non_finite));
  }
  if (s.diverged_values) {
    std::fprintf(out, "diverged               %lld non-finite losses kept as +inf (never served), the first at iteration "
                "%lld\n",
                static_cast<long long>(s.diverged_values), static_cast<long long>(*s.first_diverged_iteration));
  }
  if (!json_path.empty()) {
    Status st = WriteJson(SummaryToJson(*log, s), json_path, "log-info");
    if (!st.ok()) return Fail("log-info", st);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
