// viper fit: fit the learning-curve predictor to the warm-up part of a
// training log, show every family, the selected model and, where the log goes
// on, its honest error against the truth. --evaluate scores every selection
// rule on every shipped log at several warm-up fractions.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "viper/datasets/log_reader.h"
#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"

namespace viper {
namespace cli {
namespace {

namespace pr = predictor;
using json = nlohmann::json;

constexpr const char* kUsage =
    "viper fit --log FILE --warmup N|P% [--metric train_loss|val_loss] [--select best-mse|validation|ensemble]\n"
    "          [--families LIST] [--predict-at ITER,...] [--json PATH] [--plot PATH.png]\n"
    "       viper fit --evaluate [--log FILE ...] [--warmup-fractions 0.1,0.2,0.4] [--json PATH]";

constexpr const char* kDescription =
    "Fits learning-curve families (Viper's exp2/exp3/lin2/expd3 and Domhan et al.'s eleven) with Ceres to the\n"
    "first N iterations of the log, selects or combines them, and extrapolates with an uncertainty band.\n"
    "Where the log continues past the warm-up, every family and the selected model are scored on the unseen\n"
    "part: extrapolation RMSE and relative error of the final loss (mean of the last few points).\n"
    "JSON output (--json): {log, metric, warmup_iterations, selection, summary, families[], selected,\n"
    "truth{points, rmse, final_loss, predicted_final_loss, final_relative_error} (only if the log continues),\n"
    "predictions[{iteration, loss, low, high}] (from --predict-at)}.\n"
    "--evaluate: for every log (default: all shipped logs) and warm-up fraction, fits with each selection rule\n"
    "and prints the final-loss relative error and unseen-part RMSE, then the median per rule and fraction.";

StatusOr<std::vector<double>> ParseNumberList(const std::string& text, const std::string& option) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      out.push_back(std::stod(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      return InvalidArgumentError("--" + option + ": '" + item + "' is not a number");
    }
  }
  if (out.empty()) return InvalidArgumentError("--" + option + ": empty list");
  return out;
}

// "500" -> 500 iterations; "20%" -> 20% of the last iteration of the curve.
StatusOr<double> ParseWarmup(const std::string& text, double last_iteration) {
  if (text.empty()) return InvalidArgumentError("--warmup is required (iterations, or a percentage like 20%)");
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && v > 0) return v;
    if (used + 1 == text.size() && text.back() == '%' && v > 0 && v <= 100) return std::floor(v / 100 * last_iteration);
  } catch (const std::exception&) {
  }
  return InvalidArgumentError("--warmup: expected a positive iteration count or a percentage in (0, 100], got '" + text + "'");
}

std::string Fmt(double v, int precision = 4) {
  std::ostringstream os;
  os << std::setprecision(precision) << v;
  return os.str();
}

std::string ParamsText(const pr::LearningCurvePredictor::FamilyFit& f) {
  std::string s;
  const auto names = pr::ParamNames(f.family);
  for (size_t i = 0; i < f.params.size() && i < names.size(); ++i)
    s += (i ? " " : "") + names[i] + "=" + Fmt(f.params[i]);
  return s;
}


Status Plot(const std::string& png, const pr::CurveData& all, double warmup, const pr::LearningCurvePredictor& p,
            const std::string& title) {
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string base = (tmp / ("viper-fit-" + std::to_string(::getpid()))).string();
  const std::string data_path = base + ".data", fit_path = base + ".fit", script_path = base + ".gp";
  {
    std::ofstream d(data_path);
    for (size_t i = 0; i < all.size(); ++i) d << all.iterations[i] << " " << all.losses[i] << "\n";
    std::ofstream f(fit_path);
    const auto members = p.Members();
    const double last = std::max(all.iterations.back(), warmup);
    for (int k = 0; k <= 400; ++k) {
      const double x = std::max(1.0, all.iterations.front() + (last - all.iterations.front()) * k / 400.0);
      auto [lo, hi] = p.Band(x);
      f << x << " " << p.Predict(x) << " " << lo << " " << hi;
      for (const auto& [c, w] : members) f << " " << c.Evaluate(x);
      f << "\n";
    }
    std::ofstream s(script_path);
    s << "set terminal pngcairo size 1100,700 noenhanced\nset output '" << png << "'\n"
      << "set title '" << title << "' noenhanced\nset xlabel 'iteration'\nset ylabel 'loss'\nset key top right\n"
      << "set arrow from " << warmup << ", graph 0 to " << warmup << ", graph 1 nohead dt 2 lc rgb 'gray40'\n"
      << "set label 'end of warm-up' at " << warmup << ", graph 0.95 offset 1,0\n"
      << "plot '" << fit_path << "' using 1:3:4 with filledcurves lc rgb '#c6dbef' title 'band', "
      << "'" << data_path << "' using 1:2 with points pt 7 ps 0.2 lc rgb '#808080' title 'log', ";
    for (size_t m = 0; m < members.size(); ++m)
      s << "'" << fit_path << "' using 1:" << (5 + m) << " with lines dt 3 lw 1 title '" << pr::ToString(members[m].first.family)
        << " (w=" << Fmt(members[m].second, 2) << ")', ";
    s << "'" << fit_path << "' using 1:2 with lines lw 2 lc rgb '#08519c' title 'prediction'\n";
  }
  const std::string cmd = "gnuplot '" + script_path + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::remove(data_path.c_str());
  std::remove(fit_path.c_str());
  std::remove(script_path.c_str());
  if (rc != 0) return IoError("gnuplot failed (exit " + std::to_string(rc) + ") drawing '" + png + "'");
  return Status::Ok();
}

double MedianOf(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int Evaluate(const std::vector<std::string>& logs_in, const std::string& fractions_text, pr::LossMetric metric,
             const pr::LearningCurvePredictor::Options& base, const std::string& json_path) {
  std::vector<std::string> logs = logs_in;
  if (logs.empty()) {
    logs = datasets::ShippedLogFiles();
    if (logs.empty()) return Fail("fit", NotFoundError("no logs given and none shipped in " + datasets::ShippedLogDirectory()));
  }
  auto fractions = ParseNumberList(fractions_text, "warmup-fractions");
  if (!fractions.ok()) return Fail("fit", fractions.status());
  for (double f : *fractions)
    if (!(f > 0 && f < 1)) return Fail("fit", InvalidArgumentError("--warmup-fractions: each must be in (0, 1)"));
  const pr::Selection rules[] = {pr::Selection::kBestMse, pr::Selection::kValidation, pr::Selection::kEnsemble};
  json rows = json::array();
  std::map<std::pair<int, double>, std::vector<double>> rel, rmse;
  std::cout << std::left << std::setw(26) << "log" << std::setw(7) << "warmup" << std::setw(12) << "select"
            << std::setw(12) << "final_rel" << std::setw(12) << "rmse" << std::setw(10) << "fit_s" << "selected\n";
  for (const std::string& path : logs) {
    auto log = datasets::LogReader::ReadFile(path, datasets::LogReader::Options());
    if (!log.ok()) return Fail("fit", log.status());
    auto curve = pr::ExtractCurve(*log, metric);
    if (!curve.ok()) return Fail("fit", curve.status());
    const std::string name = std::filesystem::path(path).filename().string();
    for (double frac : *fractions) {
      const double warm = std::floor(frac * curve->iterations.back());
      for (int r = 0; r < 3; ++r) {
        auto o = base;
        o.selection = rules[r];
        o.horizon_iteration = curve->iterations.back();
        auto p = pr::LearningCurvePredictor::Fit(curve->Prefix(warm), o);
        json row = {{"log", name}, {"warmup_fraction", frac}, {"warmup_iterations", warm}, {"selection", pr::ToString(rules[r])}};
        std::cout << std::setw(26) << name << std::setw(7) << Fmt(frac, 2) << std::setw(12) << pr::ToString(rules[r]);
        if (!p.ok()) {
          std::cout << "failed: " << p.status().message() << "\n";
          row["error"] = p.status().message();
          rows.push_back(row);
          continue;
        }
        auto e = pr::ScoreExtrapolation(*p, *curve);
        if (!e.ok()) return Fail("fit", e.status());
        rel[{r, frac}].push_back(e->final_relative_error);
        rmse[{r, frac}].push_back(e->rmse);
        const auto& s = p->summary();
        const std::string sel = s.selected >= 0 ? pr::ToString(s.families[s.selected].family) : "ensemble";
        std::cout << std::setw(12) << Fmt(e->final_relative_error, 3) << std::setw(12) << Fmt(e->rmse, 3)
                  << std::setw(10) << Fmt(s.fit_time_s, 3) << sel << "\n";
        row["final_relative_error"] = e->final_relative_error;
        row["rmse"] = e->rmse;
        row["fit_time_s"] = s.fit_time_s;
        row["selected"] = sel;
        rows.push_back(row);
      }
    }
  }
  std::cout << "\nmedian over " << logs.size() << " logs (final-loss relative error / unseen-part RMSE):\n";
  json medians = json::array();
  for (double frac : *fractions) {
    std::cout << "  warm-up " << std::setw(5) << Fmt(100 * frac, 3) + "%";
    for (int r = 0; r < 3; ++r) {
      const double mr = MedianOf(rel[{r, frac}]), mm = MedianOf(rmse[{r, frac}]);
      std::cout << "  " << pr::ToString(rules[r]) << " " << Fmt(mr, 3) << " / " << Fmt(mm, 3);
      medians.push_back({{"warmup_fraction", frac}, {"selection", pr::ToString(rules[r])},
                         {"median_final_relative_error", mr}, {"median_rmse", mm}, {"logs", rel[{r, frac}].size()}});
    }
    std::cout << "\n";
  }
  if (!json_path.empty()) {
    Status st = WriteJson(json{{"metric", pr::ToString(metric)}, {"runs", rows}, {"medians", medians}}, json_path);
    if (!st.ok()) return Fail("fit", st);
  }
  return kExitOk;
}

}  // namespace

int RunFit(const std::vector<std::string>& args) {
  pr::LearningCurvePredictor::Options o;
  std::vector<std::string> logs;
  std::string warmup, metric = "train_loss", select = pr::ToString(o.selection), families = "all", predict_at,
                      json_path, plot, robust = pr::ToString(o.robust_loss), fractions = "0.1,0.2,0.4";
  std::string non_finite = "reject";
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("log", po::value(&logs)->multitoken(), "training log (CSV/JSON lines/Keras/Lightning, .gz read directly); with --evaluate, one or more (default: every shipped log)")
      ("warmup", po::value(&warmup), "warm-up length: iterations (e.g. 500) or a percentage of the log's last iteration (e.g. 20%); only points up to it are fitted")
      ("metric", po::value(&metric)->default_value(metric), "loss to fit: train_loss | val_loss")
      ("select", po::value(&select)->default_value(select), "model selection: best-mse (Viper: lowest warm-up MSE) | validation (fit on the first part, score the rest, refit the winner) | ensemble (weights 1/validation MSE)")
      ("families", po::value(&families)->default_value(families), "comma-separated families, or 'all' / 'viper' (exp2,exp3,lin2,expd3)")
      ("validation-fraction", po::value(&o.validation_fraction)->default_value(o.validation_fraction), "share of the warm-up points fitted when scoring on the rest, in (0, 1)")
      ("robust-loss", po::value(&robust)->default_value(robust), "robust loss on residuals: none | huber | cauchy (scale = factor x noise sigma from a running-median MAD)")
      ("robust-scale", po::value(&o.robust_scale_factor)->default_value(o.robust_scale_factor), "robust-loss scale in noise standard deviations")
      ("starts", po::value(&o.starts_per_family)->default_value(o.starts_per_family), "starting points per family, 1..8")
      ("max-fit-points", po::value(&o.max_fit_points)->default_value(o.max_fit_points), "bin the warm-up into at most this many log-spaced points before fitting (0 = never)")
      ("band-z", po::value(&o.band_z)->default_value(o.band_z), "band half-width in standard deviations")
      ("horizon", po::value(&o.horizon_iteration)->default_value(0), "iteration up to which a fit must stay finite, >= 0 and non-increasing (0 = the log's last iteration or the largest --predict-at, at least 4 x warm-up)")
      ("predict-at", po::value(&predict_at), "comma-separated iterations to predict (printed, and written under the JSON key \"predictions\")")
      ("non-finite", po::value(&non_finite)->default_value(non_finite), "NaN/inf losses in the log: reject | drop")
      ("json", po::value(&json_path), "write the results as JSON to PATH ('-' = stdout)")
      ("plot", po::value(&plot), "draw the log, the members, the prediction and its band to PATH.png (gnuplot, pngcairo)")
      ("evaluate", "score best-mse/validation/ensemble on every log at each --warmup-fractions value")
      ("warmup-fractions", po::value(&fractions)->default_value(fractions), "with --evaluate: warm-up fractions of each log's length");
  po::variables_map vm;
  const int parsed = ParseOrHelp(args, desc, &vm, kUsage, kDescription);
  if (parsed != 0) return parsed < 0 ? kExitOk : parsed;

  auto usage = [](const std::string& m) {
    std::cerr << "viper fit: " << m << "\nUsage: " << kUsage << "\n";
    return kExitUsage;
  };
  auto metric_v = pr::LossMetricFromString(metric);
  if (!metric_v.ok()) return usage("--metric: " + metric_v.status().message());
  auto select_v = pr::SelectionFromString(select);
  if (!select_v.ok()) return usage("--select: " + select_v.status().message());
  auto families_v = pr::ParseCurveFamilies(families);
  if (!families_v.ok()) return usage("--families: " + families_v.status().message());
  auto robust_v = pr::RobustLossFromString(robust);
  if (!robust_v.ok()) return usage("--robust-loss: " + robust_v.status().message());
  o.selection = *select_v;
  o.families = *families_v;
  o.robust_loss = *robust_v;
  std::string error;
  if (!o.IsValid(&error)) return usage(error);

  if (vm.count("evaluate")) return Evaluate(logs, fractions, *metric_v, o, json_path);
  if (logs.size() != 1) return usage("give exactly one --log (several only with --evaluate)");

  datasets::LogReader::Options ro;
  auto nf = datasets::NonFinitePolicyFromString(non_finite);
  if (!nf.ok()) return usage("--non-finite: " + nf.status().message());
  ro.non_finite = *nf;
  auto log = datasets::LogReader::ReadFile(logs[0], ro);
  if (!log.ok()) return Fail("fit", log.status());
  auto curve = pr::ExtractCurve(*log, *metric_v);
  if (!curve.ok()) return Fail("fit", curve.status());
  auto warm = ParseWarmup(warmup, curve->iterations.back());
  if (!warm.ok()) return usage(warm.status().message());
  std::vector<double> at;
  if (!predict_at.empty()) {
    auto v = ParseNumberList(predict_at, "predict-at");
    if (!v.ok()) return usage(v.status().message());
    at = *v;
  }
  const pr::CurveData head = curve->Prefix(*warm);
  const pr::CurveData unseen = curve->Suffix(*warm);
  if (o.horizon_iteration == 0) {
    double h = std::max(curve->iterations.back(), 4 * *warm);
    for (double x : at) h = std::max(h, x);
    o.horizon_iteration = h;
  }
  auto p = pr::LearningCurvePredictor::Fit(head, o);
  if (!p.ok()) return Fail("fit", p.status().WithContext(logs[0] + ", warm-up " + Fmt(*warm) + " iterations"));
  const auto& s = p->summary();

  std::cout << "log " << logs[0] << ": " << curve->size() << " points of " << pr::ToString(*metric_v) << ", warm-up "
            << Fmt(*warm, 8) << " iterations (" << head.size() << " points), " << unseen.size() << " unseen\n\n";
  std::cout << std::left << std::setw(15) << "family" << std::setw(10) << "fit_rmse" << std::setw(10) << "val_rmse"
            << std::setw(8) << "weight" << std::setw(11) << "ext_rmse" << std::setw(11) << "final_rel" << "parameters / why dropped\n";
  json jf = json::array();
  for (const auto& f : s.families) {
    json j = {{"family", pr::ToString(f.family)}, {"formula", pr::FamilyFormula(f.family)}, {"usable", f.usable},
              {"param_names", pr::ParamNames(f.family)}, {"params", f.params}, {"fit_rmse", f.fit_rmse},
              {"weight", f.weight}, {"solver_iterations", f.solver_iterations}};
    if (!f.drop_reason.empty()) j["drop_reason"] = f.drop_reason;
    if (f.validation_rmse) j["validation_rmse"] = *f.validation_rmse;
    std::cout << std::setw(15) << pr::ToString(f.family);
    if (!f.usable) {
      std::cout << std::setw(50) << "-" << "dropped: " << f.drop_reason << "\n";
      jf.push_back(j);
      continue;
    }
    std::cout << std::setw(10) << Fmt(f.fit_rmse, 3) << std::setw(10) << (f.validation_rmse ? Fmt(*f.validation_rmse, 3) : "-")
              << std::setw(8) << Fmt(f.weight, 2);
    auto sc = pr::ScoreExtrapolation(pr::FittedCurve{f.family, f.params, s.x_scale}, unseen);
    if (sc.ok()) {
      std::cout << std::setw(11) << Fmt(sc->rmse, 3) << std::setw(11) << Fmt(sc->final_relative_error, 3);
      j["extrapolation_rmse"] = sc->rmse;
      j["final_relative_error"] = sc->final_relative_error;
    } else {
      std::cout << std::setw(22) << "-";
    }
    std::cout << ParamsText(f) << "\n";
    jf.push_back(j);
  }
  std::cout << "\n(t = iteration / " << Fmt(s.x_scale, 8) << "; ext_rmse / final_rel: error on the unseen part of the log)\n";
  std::cout << "selected: " << s.BriefReport() << "\n";
  json out = {{"log", logs[0]}, {"metric", pr::ToString(*metric_v)}, {"warmup_iterations", *warm},
              {"selection", pr::ToString(s.selection)}, {"families", jf}, {"x_scale", s.x_scale},
              {"summary", {{"brief", s.BriefReport()}, {"message", s.message}, {"noise_sigma", s.noise_sigma},
                           {"points", s.num_points}, {"fit_time_s", s.fit_time_s}}}};
  out["selected"] = s.selected >= 0 ? json(pr::ToString(s.families[s.selected].family)) : json("ensemble");
  auto truth = pr::ScoreExtrapolation(*p, *curve);
  if (truth.ok()) {
    std::cout << "against the truth (" << truth->points << " unseen points): RMSE " << Fmt(truth->rmse, 4)
              << ", final loss predicted " << Fmt(truth->predicted_final_loss) << " vs " << Fmt(truth->final_loss)
              << " (relative error " << Fmt(100 * truth->final_relative_error, 3) << "%)\n";
    out["truth"] = {{"points", truth->points}, {"rmse", truth->rmse}, {"final_loss", truth->final_loss},
                    {"predicted_final_loss", truth->predicted_final_loss},
                    {"final_relative_error", truth->final_relative_error}};
  } else {
    std::cout << "the log ends at the warm-up: no truth to score against\n";
  }
  json preds = json::array();
  for (double x : at) {
    auto [lo, hi] = p->Band(x);
    const double v = p->Predict(x);
    std::cout << "predict iteration " << Fmt(x, 10) << ": loss " << Fmt(v) << "  band [" << Fmt(lo) << ", " << Fmt(hi) << "]\n";
    preds.push_back({{"iteration", x}, {"loss", v}, {"low", lo}, {"high", hi}});
  }
  out["predictions"] = preds;
  if (!json_path.empty()) {
    Status st = WriteJson(out, json_path);
    if (!st.ok()) return Fail("fit", st);
  }
  if (!plot.empty()) {
    Status st = Plot(plot, *curve, *warm, *p, logs[0] + " (" + pr::ToString(s.selection) + ")");
    if (!st.ok()) return Fail("fit", st);
    std::cout << "plot: " << plot << "\n";
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
