// viper train: train an MLP on Fashion-MNIST for real and write its log.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>

#include "cli_util.h"
#include "commands.h"
#include "drift_options.h"
#include "finetune_options.h"
#include "viper/core/safetensors.h"
#include "viper/workflow/trainer.h"
#include "viper/workflow/trainer_log.h"

namespace viper {
namespace cli {
namespace {

using workflow::Trainer;

StatusOr<std::vector<int64_t>> ParseWidths(const std::string& text) {
  std::vector<int64_t> widths;
  if (text.empty() || text == "none") return widths;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > 1000000) {
      return InvalidArgumentError("--hidden '" + item + "' is not a width in [1, 1000000] (expected e.g. 256 or 1024,1024)");
    }
    widths.push_back(v);
  }
  return widths;
}

std::string JoinWidths(const std::vector<int64_t>& widths) {
  std::string s;
  for (std::size_t i = 0; i < widths.size(); ++i) s += (i ? "," : "") + std::to_string(widths[i]);
  return s.empty() ? "none" : s;
}

}  // namespace

int RunTrain(const std::vector<std::string>& args) {
  Trainer::Options o;
  std::string dataset = "fashion-mnist", hidden = JoinWidths(o.hidden_widths), optimizer = "sgd", drift = "none";
  std::string swap_classes = std::to_string(o.drift_swap_class_a) + "," + std::to_string(o.drift_swap_class_b);
  std::string prior_classes;
  std::string lr_milestones;
  std::string on_divergence = "stop";
  for (int c : o.drift_prior_classes) prior_classes += (prior_classes.empty() ? "" : ",") + std::to_string(c);
  std::string log_out, save_model, json_path, staleness_out, freeze;
  double progress_every_s = 2.0;
  int64_t save_every = 0;
  po::options_description desc("Options");
  desc.add_options()("help,h", "print this help")
      ("dataset", po::value(&dataset)->default_value(dataset), "data set (only fashion-mnist)")
      ("data-dir", po::value(&o.dataset_dir)->default_value(o.dataset_dir),
       "directory with the Fashion-MNIST {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz files")
      ("train-samples", po::value(&o.train_samples)->default_value(o.train_samples),
       "use only the first N training images (0 = all 60,000)")
      ("hidden", po::value(&hidden)->default_value(hidden),
       "hidden-layer widths, comma-separated, input side first (e.g. 1024,1024; 'none' = linear)")
      ("optimizer", po::value(&optimizer)->default_value(optimizer), "sgd (with momentum) or adam")
      ("lr", RealOption(&o.learning_rate), "peak learning rate")
      ("momentum", RealOption(&o.momentum), "SGD momentum in [0, 1)")
      ("beta1", RealOption(&o.adam_beta1), "Adam first-moment decay in [0, 1)")
      ("beta2", RealOption(&o.adam_beta2), "Adam second-moment decay in [0, 1)")
      ("adam-eps", RealOption(&o.adam_epsilon), "Adam epsilon (> 0)")
      ("batch", po::value(&o.batch_size)->default_value(o.batch_size), "samples per mini-batch")
      ("epochs", po::value(&o.epochs)->default_value(o.epochs),
       "length in epochs of the full training set (epochs * floor(samples / batch) iterations)")
      ("max-iterations", po::value(&o.max_iterations)->default_value(o.max_iterations),
       "stop after N iterations (0 = no cap)")
      ("cosine", po::bool_switch(&o.cosine_schedule),
       "cosine learning-rate decay from --lr to 0 over the planned iterations")
      ("lr-milestones", po::value(&lr_milestones)->default_value(""),
       "step changes of the learning rate, 'ITER:FACTOR[,ITER:FACTOR...]': from iteration ITER on the rate is "
       "multiplied by FACTOR (> 0; cumulative, on top of --cosine; iterations increasing, >= 2); e.g. 1500:0.1 "
       "decays it, 1500:60 makes an SGD run diverge (the shipped collapse run)")
      ("on-divergence", po::value(&on_divergence)->default_value(on_divergence),
       "a NaN/inf training loss: stop (an error naming the iteration) or continue (train the diverged model on, "
       "as a loop without a NaN check would, logging NaN losses: a run to test that a planner never publishes "
       "it; read its log with --non-finite diverged)")
      ("drift", po::value(&drift)->default_value(drift),
       "data stream; every kind drifts training, validation and test (the traffic) alike: none; "
       "class-incremental (classes 0..k-1 first, then all 10; before the drift the validation and test samples "
       "hold only classes 0..k-1); label-swap (the labels of two classes exchanged from --drift-at-iteration "
       "on, or back and forth with --drift-swap-period); rotation (inputs rotated by an angle growing from 0 "
       "to --drift-rotation-degrees over --drift-duration iterations); recurring (inputs rotated by "
       "--drift-rotation-degrees during alternate "
       "periods of --drift-period iterations from --drift-at-iteration on: rotated, upright, rotated, ...; "
       "with --drift-domains D > 2, rotated by 1, 2, ..., D-1 times that angle in turn, then upright); "
       "prior-shift (the class prior moves linearly from the data's own to one giving --drift-prior-mass to "
       "--drift-prior-classes over --drift-duration iterations; training draws by class, validation and test "
       "are resampled deterministically to that prior)")
      ("drift-at-iteration", po::value(&o.drift_at_iteration)->default_value(o.drift_at_iteration),
       "first iteration of the drift (>= 2; required with any --drift)")
      ("drift-initial-classes", po::value(&o.drift_initial_classes)->default_value(o.drift_initial_classes),
       "class-incremental: k, classes 0..k-1 are seen before the drift (1..9)")
      ("drift-swap-classes", po::value(&swap_classes)->default_value(swap_classes),
       "label-swap: the two classes whose labels are exchanged, 'a,b' (0 = T-shirt/top, 6 = Shirt)")
      ("drift-swap-period",
       po::value(&o.drift_swap_period_iterations)->default_value(o.drift_swap_period_iterations),
       "label-swap: undo and redo the swap every this many iterations from --drift-at-iteration (swapped, "
       "original, swapped, ...: several swaps whose labels come back); 0 = swapped once, for good")
      ("drift-rotation-degrees", po::value(&o.drift_rotation_degrees)->default_value(o.drift_rotation_degrees),
       "rotation: final angle; recurring: the angle of the rotated periods; degrees counter-clockwise "
       "(|angle| <= 360)")
      ("drift-duration", po::value(&o.drift_duration_iterations)->default_value(o.drift_duration_iterations),
       "rotation: iterations over which the angle grows from 0 to its final value; prior-shift: iterations over "
       "which the prior moves to its target (0 = at once)")
      ("drift-period", po::value(&o.drift_period_iterations)->default_value(o.drift_period_iterations),
       "recurring: length of each rotated or upright period, in iterations (>= 1)")
      ("drift-domains", po::value(&o.drift_domains)->default_value(o.drift_domains),
       "recurring: how many domains take turns, 2-8 (the upright one and rotations by 1, 2, ... times "
       "--drift-rotation-degrees)")
      ("drift-prior-classes", po::value(&prior_classes)->default_value(prior_classes),
       "prior-shift: the classes that gain weight, comma-separated (1 to 9 distinct classes in 0..9; default the "
       "upper-body garments T-shirt/top, Pullover, Coat, Shirt)")
      ("drift-prior-mass", RealOption(&o.drift_prior_mass),
       "prior-shift: the share of the target prior that --drift-prior-classes hold together, in (0, 1] (the other "
       "classes share the rest equally)")
      ("seed", po::value(&o.seed)->default_value(o.seed), "seed of the initialisation and the shuffling")
      ("val-every", po::value(&o.val_every_iterations)->default_value(o.val_every_iterations),
       "validate and test every N iterations and at the last one (0 = never)")
      ("val-samples", po::value(&o.val_samples)->default_value(o.val_samples),
       "validation images (what the producer sees): the first N of the Fashion-MNIST test split")
      ("test-samples", po::value(&o.test_samples)->default_value(o.test_samples),
       "test images (the inference traffic's truth): the next N of the test split, disjoint from validation "
       "(val + test <= 10000; 0 = no test columns)")
      ("log-out", po::value(&log_out), "write the per-iteration log (CSV; gzip when it ends in .gz)")
      ("staleness-table", po::value(&staleness_out),
       "write the staleness table (CSV version_iteration,traffic_iteration,val_loss,val_accuracy,test_loss,"
       "test_accuracy; gzip when it ends in .gz; written atomically at the end): at every validation point t the "
       "trainer keeps a float32 copy of the parameters (version t) and evaluates every kept version v <= t on "
       "t's drifted validation and test samples, one row per (v, t); the diagonal v = t equals the log's "
       "val/test columns bit for bit. Memory: one copy of the parameters per kept version (4 bytes per "
       "parameter: 814,120 bytes for --hidden 256; a 4,685-iteration run at --val-every 50 keeps 94 versions, "
       "76.5 MB, unless --staleness-max-versions bounds it). Time: up to (versions kept) x (val + test "
       "samples) image evaluations per validation point, kept out of wall_time; an evaluation on traffic "
       "identical to an earlier point's (same drift state) is reused, not recomputed (same bits)")
      ("staleness-max-versions", po::value(&o.staleness_max_versions)->default_value(o.staleness_max_versions),
       "bound on the versions the staleness table keeps (0 = all; else >= 2): over it the kept versions are "
       "thinned evenly (validation points on a stride that doubles each time, plus the newest), so memory is at "
       "most K x the model's bytes")
      ("save-model", po::value(&save_model),
       "write the final parameters as a .safetensors file (the tensors of torch.nn.Sequential(Linear, ReLU, ..., "
       "Linear): 0.weight, 0.bias, 2.weight, ...; --init-model reads it back)")
      ("save-every", po::value(&save_every)->default_value(save_every),
       "also write the parameters every N iterations, as <--save-model without .safetensors>-it<iteration>"
       ".safetensors (the versions a producer would publish; 0 = only the final one)")
      ("init-model", po::value(&o.init_model_path), kInitModelHelp)
      ("freeze", po::value(&freeze), kFreezeHelp)
      ("progress-every", po::value(&progress_every_s)->default_value(progress_every_s),
       "seconds between progress lines on stderr (0 = none)")
      ("json", po::value(&json_path), "also write the summary as JSON to this path ('-' = stdout only JSON, the summary line goes to stderr); schema viper.train/1");
  po::variables_map vm;
  const int rc = ParseOrHelp(
      args, desc, &vm, "viper train [--hidden 256] [--optimizer sgd|adam] [--log-out run.csv.gz] [options]",
      "Trains a multilayer perceptron (ReLU, softmax cross-entropy) on Fashion-MNIST for real, on the CPU with "
      "Eigen, deterministically for a given seed. Logs every iteration (iteration, epoch, wall_time in seconds, "
      "train_loss) and, every --val-every iterations, val_loss and val_accuracy on the validation subset and "
      "test_loss and test_accuracy on the disjoint test subset (the inference traffic's truth; its evaluation "
      "time is not counted in wall_time); the columns are "
      "iteration,epoch,wall_time,train_loss,val_loss,val_accuracy,test_loss,test_accuracy,lr.");
  if (rc != 0) return rc < 0 ? kExitOk : rc;

  auto usage_error = [](const std::string& m) { return UsageError("train", m); };
  if (dataset != "fashion-mnist") return usage_error("--dataset: only fashion-mnist is supported, got '" + dataset + "'");
  auto widths = ParseWidths(hidden);
  if (!widths.ok()) return usage_error(widths.status().message());
  o.hidden_widths = *widths;
  auto opt = Trainer::OptimizerFromString(optimizer);
  if (!opt.ok()) return usage_error("--optimizer: " + opt.status().message());
  o.optimizer = *opt;
  auto dr = Trainer::DriftFromString(drift);
  if (!dr.ok()) return usage_error("--drift: " + dr.status().message());
  o.drift = *dr;
  Status swap = ParseSwapClasses(swap_classes, &o);
  if (!swap.ok()) return usage_error(swap.message());
  Status prior = ParsePriorClasses(prior_classes, &o);
  if (!prior.ok()) return usage_error(prior.message());
  Status milestones = ParseLrMilestones(lr_milestones, &o);
  if (!milestones.ok()) return usage_error(milestones.message());
  if (on_divergence != "stop" && on_divergence != "continue") {
    return usage_error("--on-divergence: expected stop or continue, got '" + on_divergence + "'");
  }
  o.continue_after_divergence = on_divergence == "continue";
  Status frozen = ParseFreeze(freeze, &o);
  if (!frozen.ok()) return usage_error(frozen.message());
  o.staleness_table = !staleness_out.empty();
  {
    // Parameters the widths imply (784 inputs, 10 classes), before allocating.
    constexpr double kMaxParameters = 250e6;  // 1 GB of float32 weights; the optimiser keeps more copies
    double params = 0, in = 784;
    for (int64_t w : o.hidden_widths) {
      params += (in + 1) * static_cast<double>(w);
      in = static_cast<double>(w);
    }
    params += (in + 1) * 10;
    if (params > kMaxParameters) {
      return usage_error("--hidden " + hidden + " implies " + std::to_string(static_cast<int64_t>(params)) +
                         " parameters; the limit is 250000000 (1 GB of float32 weights)");
    }
  }
  if (save_every > 0 && save_model.empty()) return usage_error("--save-every: needs --save-model (the files' prefix)");
  for (const Status& st : {CheckInteger("--batch", o.batch_size, 1, 60000),
                           CheckInteger("--save-every", save_every, 0, 1000000000),
                           CheckReal("--progress-every", progress_every_s, 0, 86400, false, "0 = none")}) {
    if (!st.ok()) return usage_error(st.message());
  }
  std::string error;
  if (!o.IsValid(&error)) {
    if (NameFinetuneFlag("", &error)) return usage_error(error);
    // Name the flag, not the field.
    static const std::pair<const char*, const char*> kFlags[] = {
        {"learning_rate", "--lr"}, {"lr_milestones", "--lr-milestones"}, {"momentum", "--momentum"}, {"adam_beta1", "--beta1"},
        {"adam_beta2", "--beta2"}, {"adam_epsilon", "--adam-eps"}, {"batch_size", "--batch"},
        {"epochs", "--epochs"}, {"max_iterations", "--max-iterations"}, {"train_samples", "--train-samples"},
        {"hidden_widths", "--hidden"}, {"drift_at_iteration", "--drift-at-iteration"},
        {"drift_initial_classes", "--drift-initial-classes"}, {"drift_swap_class_a", "--drift-swap-classes (a)"},
        {"drift_swap_class_b", "--drift-swap-classes (b)"},
        {"drift_swap_period_iterations", "--drift-swap-period"},
        {"drift_rotation_degrees", "--drift-rotation-degrees"},
        {"drift_duration_iterations", "--drift-duration"}, {"drift_period_iterations", "--drift-period"},
        {"drift_domains", "--drift-domains"},
        {"drift_prior_classes", "--drift-prior-classes"}, {"drift_prior_mass", "--drift-prior-mass"},
        {"staleness_max_versions", "--staleness-max-versions"}, {"val_every_iterations", "--val-every"},
        {"val_samples + test_samples", "--val-samples + --test-samples"}, {"val_samples", "--val-samples"},
        {"test_samples", "--test-samples"}};
    for (const auto& [field, flag] : kFlags) {
      if (error.rfind(field, 0) == 0) {
        error = std::string(flag) + error.substr(std::strlen(field));
        break;
      }
    }
    return usage_error(error);
  }

  auto trainer = Trainer::Create(o);
  if (!trainer.ok()) return Fail("train", trainer.status());
  Trainer& t = **trainer;
  std::unique_ptr<workflow::TrainingLogWriter> log;
  if (!log_out.empty()) {
    auto opened = workflow::TrainingLogWriter::Open(log_out);
    if (!opened.ok()) return Fail("train", opened.status());
    log = std::move(opened).value();
  }
  std::fprintf(stderr, "viper train: %s, hidden %s, %lld parameters (%zu bytes), %lld iterations (%lld per epoch)\n",
               Trainer::ToString(o.optimizer), JoinWidths(o.hidden_widths).c_str(),
               static_cast<long long>(t.model().NumParameters()), t.model().SizeBytes(),
               static_cast<long long>(t.planned_iterations()), static_cast<long long>(t.iterations_per_epoch()));
  if (!o.init_model_path.empty()) std::fprintf(stderr, "viper train: parameters from %s\n", o.init_model_path.c_str());
  if (t.frozen_parameters() > 0) {
    std::string names;
    for (const auto& n : t.frozen_tensors()) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "viper train: frozen %s (%lld of %lld parameters)\n", names.c_str(),
                 static_cast<long long>(t.frozen_parameters()), static_cast<long long>(t.model().NumParameters()));
  }
  const bool tty = isatty(STDERR_FILENO);
  double next_progress_s = progress_every_s, last_wall = 0;
  int64_t last_iteration = 0;
  std::optional<double> val_loss, val_acc, test_loss;
  std::string save_prefix = save_model;
  if (const std::string ext = ".safetensors";
      save_prefix.size() > ext.size() && save_prefix.compare(save_prefix.size() - ext.size(), ext.size(), ext) == 0) {
    save_prefix.resize(save_prefix.size() - ext.size());
  }
  Status save_status;
  int64_t saved = 0;
  auto progress = [&](const LogRecord& r, const Trainer& tr) {
    if (save_every > 0 && r.iteration % save_every == 0) {
      const std::string path = save_prefix + "-it" + std::to_string(r.iteration) + ".safetensors";
      save_status = safetensors::WriteFileAtomic(tr.model().state(), path);
      if (!save_status.ok()) {
        save_status = save_status.WithContext("--save-every");
        return false;
      }
      ++saved;
    }
    if (r.val_loss) {
      val_loss = r.val_loss;
      val_acc = r.val_accuracy;
    }
    if (r.test_loss) test_loss = r.test_loss;
    if (progress_every_s > 0 && (*r.wall_time_s >= next_progress_s || tr.done())) {
      const double rate = static_cast<double>(r.iteration - last_iteration) / std::max(1e-9, *r.wall_time_s - last_wall);
      std::fprintf(stderr, "%siteration %lld/%lld  epoch %lld  loss %.4f", tty ? "\r" : "",
                   static_cast<long long>(r.iteration), static_cast<long long>(tr.planned_iterations()),
                   static_cast<long long>(*r.epoch), *r.train_loss);
      if (val_loss) std::fprintf(stderr, "  val loss %.4f  val acc %.3f", *val_loss, *val_acc);
      if (test_loss) std::fprintf(stderr, "  test loss %.4f", *test_loss);
      std::fprintf(stderr, "  %.1f it/s%s", rate, tty ? "   " : "\n");
      next_progress_s = *r.wall_time_s + progress_every_s;
      last_wall = *r.wall_time_s;
      last_iteration = r.iteration;
    }
    return true;
  };
  auto summary = t.Run(log.get(), progress);
  if (tty && progress_every_s > 0) std::fprintf(stderr, "\n");
  if (!summary.ok()) return Fail("train", summary.status());
  if (!save_status.ok()) return Fail("train", save_status);
  if (saved > 0) {
    std::fprintf(stderr, "viper train: wrote %lld intermediate models (%s-it<N>.safetensors)\n",
                 static_cast<long long>(saved), save_prefix.c_str());
  }
  if (log) {
    Status st = log->Close();
    if (!st.ok()) return Fail("train", st);
  }
  if (!staleness_out.empty()) {
    Status st = WriteStalenessTable(t.staleness_table(), staleness_out);
    if (!st.ok()) return Fail("train", st.WithContext("--staleness-table"));
  }
  if (!save_model.empty()) {
    Status st = safetensors::WriteFileAtomic(t.model().state(), save_model);
    if (!st.ok()) return Fail("train", st.WithContext("--save-model"));
  }
  std::fprintf(JsonToStdout(json_path) ? stderr : stdout, "%s\n", summary->BriefReport().c_str());
  if (!json_path.empty()) {
    nlohmann::json j;
    j["command"] = "train";
    j["dataset"] = dataset;
    j["hidden"] = o.hidden_widths;
    j["optimizer"] = Trainer::ToString(o.optimizer);
    j["learning_rate"] = o.learning_rate;
    j["momentum"] = o.momentum;
    j["batch_size"] = o.batch_size;
    j["epochs"] = o.epochs;
    j["cosine_schedule"] = o.cosine_schedule;
    if (!o.lr_milestones.empty()) {
      nlohmann::json ms = nlohmann::json::array();
      for (const auto& m : o.lr_milestones) ms.push_back({{"iteration", m.iteration}, {"factor", m.factor}});
      j["lr_milestones"] = ms;
    }
    j["drift"] = Trainer::ToString(o.drift);
    if (o.drift != Trainer::Drift::kNone) j["drift_at_iteration"] = o.drift_at_iteration;
    if (o.drift == Trainer::Drift::kClassIncremental) j["drift_initial_classes"] = o.drift_initial_classes;
    if (o.drift == Trainer::Drift::kLabelSwap) {
      j["drift_swap_classes"] = {o.drift_swap_class_a, o.drift_swap_class_b};
      if (o.drift_swap_period_iterations > 0) {
        j["drift_swap_period_iterations"] = o.drift_swap_period_iterations;
      }
    }
    if (o.drift == Trainer::Drift::kRotation || o.drift == Trainer::Drift::kRecurring) {
      j["drift_rotation_degrees"] = o.drift_rotation_degrees;
    }
    if (o.drift == Trainer::Drift::kRotation || o.drift == Trainer::Drift::kPriorShift) {
      j["drift_duration_iterations"] = o.drift_duration_iterations;
    }
    if (o.drift == Trainer::Drift::kRecurring) {
      j["drift_period_iterations"] = o.drift_period_iterations;
      j["drift_domains"] = o.drift_domains;
    }
    if (o.drift == Trainer::Drift::kPriorShift) {
      j["drift_prior_classes"] = o.drift_prior_classes;
      j["drift_prior_mass"] = o.drift_prior_mass;
    }
    j["val_every_iterations"] = o.val_every_iterations;
    j["val_samples"] = o.val_samples;
    j["test_samples"] = o.test_samples;
    j["seed"] = o.seed;
    if (!o.init_model_path.empty()) j["init_model"] = o.init_model_path;
    j["frozen_tensors"] = t.frozen_tensors();
    j["frozen_parameters"] = t.frozen_parameters();
    const auto& s = *summary;
    j["termination"] = s.termination;
    j["iterations"] = s.iterations;
    j["iterations_per_epoch"] = s.iterations_per_epoch;
    j["epochs_started"] = s.epochs_started;
    j["parameters"] = s.parameters;
    j["model_bytes"] = s.model_bytes;
    j["seconds"] = s.seconds;
    j["seconds_per_iteration"] = s.seconds_per_iteration;
    j["samples_per_second"] = s.samples_per_second;
    j["first_train_loss"] = s.first_train_loss ? nlohmann::json(*s.first_train_loss) : nlohmann::json();
    j["last_train_loss"] = s.last_train_loss ? nlohmann::json(*s.last_train_loss) : nlohmann::json();
    j["last_val_loss"] = s.last_val_loss ? nlohmann::json(*s.last_val_loss) : nlohmann::json();
    j["last_val_accuracy"] = s.last_val_accuracy ? nlohmann::json(*s.last_val_accuracy) : nlohmann::json();
    j["last_test_loss"] = s.last_test_loss ? nlohmann::json(*s.last_test_loss) : nlohmann::json();
    j["last_test_accuracy"] = s.last_test_accuracy ? nlohmann::json(*s.last_test_accuracy) : nlohmann::json();
    j["test_seconds"] = s.test_seconds;
    if (!staleness_out.empty()) {
      nlohmann::json st;
      st["path"] = staleness_out;
      st["rows"] = s.staleness_rows;
      st["versions_kept"] = s.staleness_versions_kept;
      st["versions_kept_peak"] = s.staleness_versions_peak;
      st["max_versions"] = o.staleness_max_versions;
      st["bytes_kept_peak"] = s.staleness_bytes_peak;
      st["seconds"] = s.staleness_seconds;
      st["evaluations"] = s.staleness_evaluations;
      st["evaluations_reused"] = s.staleness_evaluations_reused;
      j["staleness_table"] = st;
    }
    if (!log_out.empty()) j["log"] = log_out;
    if (!save_model.empty()) j["model"] = save_model;
    Status st = WriteJson(j, json_path, "train");
    if (!st.ok()) return Fail("train", st);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
