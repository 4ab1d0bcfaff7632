#include "log_options.h"

namespace viper {
namespace cli {

void AddLogOptions(po::options_description* desc, LogOptions* o) {
  desc->add_options()
      ("log", po::value(&o->path)->required(), "training log: CSV, Keras CSVLogger, Lightning metrics.csv or JSON lines (.gz read directly)")
      ("format", po::value(&o->format)->default_value(o->format)->notifier(CheckEnum<datasets::LogFormatFromString>("format")), "log format: auto|csv|keras|lightning|jsonl")
      ("non-finite", po::value(&o->non_finite)->default_value(o->non_finite)->notifier(CheckEnum<datasets::NonFinitePolicyFromString>("non-finite")), "NaN/inf losses: reject (error naming the line) or drop (skip the row, count it)")
      ("iteration-column", po::value(&o->reader.iteration_column), "name of the iteration column (default: iteration|iter|step|global_step)")
      ("epoch-column", po::value(&o->reader.epoch_column), "name of the epoch column (default: epoch)")
      ("loss-column", po::value(&o->reader.loss_column), "name of the training-loss column (default: train_loss|loss|training_loss)")
      ("val-loss-column", po::value(&o->reader.val_loss_column), "name of the validation-loss column (default: val_loss|validation_loss|val/loss, else HuggingFace's eval_loss|eval/loss)")
      ("val-accuracy-column", po::value(&o->reader.val_accuracy_column), "name of the validation-accuracy column (default: val_accuracy|val_acc, else eval_accuracy)")
      ("test-loss-column", po::value(&o->reader.test_loss_column), "name of the test-loss column: the loss on a sample disjoint from validation, standing for the inference traffic (default: test_loss|test/loss|test_loss_epoch)")
      ("test-accuracy-column", po::value(&o->reader.test_accuracy_column), "name of the test-accuracy column (default: test_accuracy|test_acc|test/acc)")
      ("wall-time-column", po::value(&o->reader.wall_time_column), "name of the wall-time column, seconds (default: wall_time|time)");
}

StatusOr<TrainingLog> ReadLog(LogOptions o) {
  VIPER_ASSIGN_OR_RETURN(o.reader.format, datasets::LogFormatFromString(o.format));
  VIPER_ASSIGN_OR_RETURN(o.reader.non_finite, datasets::NonFinitePolicyFromString(o.non_finite));
  return datasets::LogReader::ReadFile(o.path, o.reader);
}

}  // namespace cli
}  // namespace viper
