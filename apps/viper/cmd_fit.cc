// viper fit: fit the learning-curve predictor to the warm-up part of a
// training log, show every family, the selected model and, where the log goes
// on, its honest error against the truth. --evaluate scores every selection
// rule on every shipped log at several warm-up fractions.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
#include "viper/core/median.h"
#include "viper/datasets/log_reader.h"
#include "viper/predictor/curve.h"
#include "viper/predictor/learning_curve.h"
#include "viper/schedulers/scenario.h"

namespace viper {
namespace cli {
namespace {

namespace pr = predictor;
using json = nlohmann::json;

constexpr const char* kUsage =
    "viper fit --log FILE [--warmup N|P%] [--metric train_loss|val_loss] [--select best-mse|validation|ensemble]\n"
    "          [--families LIST] [--predict-at ITER,...] [--json PATH] [--plot PATH.png [--plot-scale logy]]\n"
    "       viper fit --evaluate [--log FILE ...] [--warmups 10%,20%,40%] [--json PATH]";

constexpr const char* kDescription =
    "Fits learning-curve families (Viper's exp2/exp3/lin2/expd3 and Domhan et al.'s eleven) with Ceres to the\n"
    "warm-up of the log (--warmup N|P%: up to iteration N, or P% of the logged iteration span from the first\n"
    "logged iteration), selects or combines them, and extrapolates with an uncertainty band.\n"
    "Where the log continues past the warm-up, every family and the selected model are scored on the unseen\n"
    "part: extrapolation RMSE and relative error of the final loss (mean of the last few points).\n"
    "JSON output (--json; '-' = stdout only JSON, the table goes to stderr): {schema: \"viper.fit/1\", log, metric, warmup_iterations, selection, summary, families[], selected,\n"
    "truth{points, rmse, final_loss, predicted_final_loss, final_relative_error} (only if the log continues),\n"
    "predictions[{iteration, loss, low, high}] (from --predict-at)}.\n"
    "--evaluate: for every log (default: all shipped logs) and warm-up (--warmups), fits with each selection\n"
    "rule and prints the final-loss relative error and unseen-part RMSE, then the median per rule and warm-up\n"
    "(schema viper.fit-evaluate/1).\n"
    "Exit codes: 0 ok, 1 bad input (the log, too few warm-up points), 2 bad usage (an option value).";

StatusOr<std::vector<double>> ParseNumberList(const std::string& text, const std::string& option) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      const double v = std::stod(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      if (!(v >= 1 && v <= 1e12)) {
        return InvalidArgumentError("--" + option + " " + item + " is out of range: expected iterations in [1, 1e12]");
      }
      out.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgumentError("--" + option + " '" + item + "' is not a number (expected iterations, e.g. 1000,5000)");
    }
  }
  if (out.empty()) return InvalidArgumentError("--" + option + ": empty list");
  return out;
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


// Draws the log, the members, the prediction and its band. `scale`:
// linear | logy | loglog. The legend sits outside the plot area, right of it.
Status Plot(const std::string& png, const pr::CurveData& all, double warmup, const pr::LearningCurvePredictor& p,
            const std::string& title, const std::string& scale) {
  std::ostringstream d, f;
  d.precision(10);
  f.precision(10);
  for (size_t i = 0; i < all.size(); ++i) d << all.iterations[i] << " " << all.losses[i] << "\n";
  const auto members = p.Members();
  const double last = std::max(all.iterations.back(), warmup);
  for (int k = 0; k <= 400; ++k) {
    const double x = std::max(1.0, all.iterations.front() + (last - all.iterations.front()) * k / 400.0);
    auto [lo, hi] = p.Band(x);
    f << x << " " << p.Predict(x) << " " << lo << " " << hi;
    for (const auto& [c, w] : members) f << " " << c.Evaluate(x);
    f << "\n";
  }
  // Inline data blocks: no side files.
  std::ostringstream s;
  s << "$log << EOD\n" << d.str() << "EOD\n$fit << EOD\n" << f.str() << "EOD\n"
    << "set title " << GnuplotQuote(title) << "\nset xlabel 'iteration'\n"
    << "set ylabel " << (scale == "linear" ? "'loss'" : "'loss (log scale)'") << "\n"
    << "set key outside right top vertical box\nset grid\n"
    << (scale == "logy" || scale == "loglog" ? "set logscale y\n" : "")
    << (scale == "loglog" ? "set logscale x\n" : "")
    << "set arrow from " << warmup << ", graph 0 to " << warmup << ", graph 1 nohead dt 2 lc rgb 'gray40'\n"
    << "set label 'end of warm-up' at " << warmup << ", graph 0.95 offset 1,0\n"
    << "plot $fit using 1:3:4 with filledcurves lc rgb '#c6dbef' title 'band', "
    << "$log using 1:2 with points pt 7 ps 0.2 lc rgb '#808080' title 'log', ";
  for (size_t m = 0; m < members.size(); ++m) {
    s << "$fit using 1:" << (5 + m) << " with lines dt 3 lw 1 title "
      << GnuplotQuote(std::string(pr::ToString(members[m].first.family)) + " (w=" + Fmt(members[m].second, 2) + ")") << ", ";
  }
  s << "$fit using 1:2 with lines lw 2 lc rgb '#08519c' title 'prediction'\n";
  return RunGnuplot("set terminal pngcairo size 1300,700 noenhanced", s.str(), png);
}

int Evaluate(const std::vector<std::string>& logs_in, const std::vector<Warmup>& warmups, pr::LossMetric metric,
             const pr::LearningCurvePredictor::Options& base, const std::string& json_path) {
  std::vector<std::string> logs = logs_in;
  if (logs.empty()) {
    logs = datasets::ShippedLogFiles();
    if (logs.empty()) return Fail("fit", NotFoundError("no logs given and none shipped in " + datasets::ShippedLogDirectory()));
  }
  std::ostream& out = JsonToStdout(json_path) ? std::cerr : std::cout;
  const pr::Selection rules[] = {pr::Selection::kBestMse, pr::Selection::kValidation, pr::Selection::kEnsemble};
  json rows = json::array();
  std::map<std::pair<int, size_t>, std::vector<double>> rel, rmse;
  out << std::left << std::setw(26) << "log" << std::setw(7) << "warmup" << std::setw(12) << "select"
      << std::setw(12) << "final_rel" << std::setw(12) << "rmse" << std::setw(10) << "fit_s" << "selected\n";
  for (const std::string& path : logs) {
    auto log = datasets::LogReader::ReadFile(path, datasets::LogReader::Options());
    if (!log.ok()) return Fail("fit", log.status());
    if (log->records.empty()) return Fail("fit", InvalidArgumentError(path + ": the log has no rows"));
    auto curve = pr::ExtractCurve(*log, metric);
    if (!curve.ok()) return Fail("fit", curve.status());
    const std::string name = std::filesystem::path(path).filename().string();
    for (size_t wi = 0; wi < warmups.size(); ++wi) {
      const double warm =
          static_cast<double>(warmups[wi].Resolve(log->records.front().iteration, log->records.back().iteration));
      for (int r = 0; r < 3; ++r) {
        auto o = base;
        o.selection = rules[r];
        o.horizon_iteration = curve->iterations.back();
        auto p = pr::LearningCurvePredictor::Fit(curve->Prefix(warm), o);
        json row = {{"log", name}, {"warmup", warmups[wi].text}, {"warmup_iterations", warm}, {"selection", pr::ToString(rules[r])}};
        out << std::setw(26) << name << std::setw(7) << warmups[wi].text << std::setw(12) << pr::ToString(rules[r]);
        if (!p.ok()) {
          out << "failed: " << p.status().message() << "\n";
          row["error"] = p.status().message();
          rows.push_back(row);
          continue;
        }
        auto e = pr::ScoreExtrapolation(*p, *curve);
        if (!e.ok()) return Fail("fit", e.status());
        rel[{r, wi}].push_back(e->final_relative_error);
        rmse[{r, wi}].push_back(e->rmse);
        const auto& s = p->summary();
        const std::string sel = s.selected >= 0 ? pr::ToString(s.families[s.selected].family) : "ensemble";
        out << std::setw(12) << Fmt(e->final_relative_error, 3) << std::setw(12) << Fmt(e->rmse, 3)
            << std::setw(10) << Fmt(s.fit_time_s, 3) << sel << "\n";
        row["final_relative_error"] = e->final_relative_error;
        row["rmse"] = e->rmse;
        row["fit_time_s"] = s.fit_time_s;
        row["selected"] = sel;
        rows.push_back(row);
      }
    }
  }
  out << "\nmedian over " << logs.size() << " logs (final-loss relative error / unseen-part RMSE):\n";
  json medians = json::array();
  for (size_t wi = 0; wi < warmups.size(); ++wi) {
    out << "  warm-up " << std::setw(5) << warmups[wi].text;
    for (int r = 0; r < 3; ++r) {
      const double mr = Median(rel[{r, wi}]), mm = Median(rmse[{r, wi}]);
      out << "  " << pr::ToString(rules[r]) << " " << Fmt(mr, 3) << " / " << Fmt(mm, 3);
      medians.push_back({{"warmup", warmups[wi].text}, {"selection", pr::ToString(rules[r])},
                         {"median_final_relative_error", mr}, {"median_rmse", mm}, {"logs", rel[{r, wi}].size()}});
    }
    out << "\n";
  }
  if (!json_path.empty()) {
    Status st = WriteJson(json{{"metric", pr::ToString(metric)}, {"runs", rows}, {"medians", medians}}, json_path,
                          "fit-evaluate");
    if (!st.ok()) return Fail("fit", st);
  }
  return kExitOk;
}

}  // namespace

int RunFit(const std::vector<std::string>& args) {
  pr::LearningCurvePredictor::Options o;
  std::vector<std::string> logs;
  // One warm-up definition and default across commands: the scenario's.
  Warmup warmup = Warmup::Fraction(schedulers::ScenarioOptions().warmup_fraction);
  std::string metric = "train_loss", select = pr::ToString(o.selection), families = "all", predict_at,
              json_path, plot, plot_scale = "linear", robust = pr::ToString(o.robust_loss), warmups_text = "10%,20%,40%";
  std::string non_finite = "reject";
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("log", po::value(&logs)->multitoken(), "training log (CSV/JSON lines/Keras/Lightning, .gz read directly); with --evaluate, one or more (default: every shipped log)")
      ("warmup", po::value(&warmup)->default_value(warmup, warmup.text), "warm-up, N|P%: up to iteration N (as logged), or P% of the logged iteration span from the first logged iteration; only points up to it are fitted")
      ("metric", po::value(&metric)->default_value(metric), "loss to fit: train_loss | val_loss")
      ("select", po::value(&select)->default_value(select), "model selection: best-mse (Viper: lowest warm-up MSE) | validation (fit on the first part, score the rest, refit the winner) | ensemble (weights 1/validation MSE)")
      ("families", po::value(&families)->default_value(families), "comma-separated families, or 'all' / 'viper' (exp2,exp3,lin2,expd3)")
      ("validation-fraction", RealOption(&o.validation_fraction), "share of the warm-up points fitted when scoring on the rest, in (0, 1)")
      ("robust-loss", po::value(&robust)->default_value(robust), "robust loss on residuals: none | huber | cauchy (scale = factor x noise sigma from a running-median MAD)")
      ("robust-scale", po::value(&o.robust_scale_factor)->default_value(o.robust_scale_factor), "robust-loss scale in noise standard deviations, in (0, 1000]")
      ("starts", po::value(&o.starts_per_family)->default_value(o.starts_per_family), "starting points per family, 1..8")
      ("max-fit-points", po::value(&o.max_fit_points)->default_value(o.max_fit_points), "bin the warm-up into at most this many log-spaced points before fitting, 0 or in [16, 1000000] (0 = never)")
      ("band-z", po::value(&o.band_z)->default_value(o.band_z), "band half-width in standard deviations, in [0, 100]")
      ("horizon", po::value(&o.horizon_iteration)->default_value(o.horizon_iteration), "iteration up to which a fit must stay finite and non-increasing, in [0, 1e12] (0 = the log's last iteration or the largest --predict-at, at least 4 x warm-up)")
      ("predict-at", po::value(&predict_at), "comma-separated iterations to predict, each in [1, 1e12] (printed, and written under the JSON key \"predictions\")")
      ("non-finite", po::value(&non_finite)->default_value(non_finite)->notifier(CheckEnum<datasets::NonFinitePolicyFromString>("non-finite")), "NaN/inf losses in the log: reject | drop")
      ("json", po::value(&json_path), "write the results as JSON to PATH ('-' = stdout only JSON, the table goes to stderr); schema viper.fit/1")
      ("plot", po::value(&plot), "draw the log, the members, the prediction and its band to PATH.png (gnuplot, pngcairo)")
      ("plot-scale", po::value(&plot_scale)->default_value(plot_scale), "axes of --plot: linear | logy (log loss axis) | loglog")
      ("evaluate", "score best-mse/validation/ensemble on every log at each --warmups value")
      ("warmups", po::value(&warmups_text)->default_value(warmups_text), "with --evaluate: comma-separated warm-ups, each N|P% as --warmup");
  po::variables_map vm;
  const int parsed = ParseOrHelp(args, desc, &vm, kUsage, kDescription);
  if (parsed != 0) return parsed < 0 ? kExitOk : parsed;

  auto usage = [](const std::string& m) { return UsageError("fit", m); };
  auto metric_v = pr::LossMetricFromString(metric);
  if (!metric_v.ok()) return usage("--metric " + metric + ": " + metric_v.status().message());
  auto select_v = pr::SelectionFromString(select);
  if (!select_v.ok()) return usage("--select " + select + ": " + select_v.status().message());
  auto families_v = pr::ParseCurveFamilies(families);
  if (!families_v.ok()) return usage("--families " + families + ": " + families_v.status().message());
  auto robust_v = pr::RobustLossFromString(robust);
  if (!robust_v.ok()) return usage("--robust-loss " + robust + ": " + robust_v.status().message());
  if (plot_scale != "linear" && plot_scale != "logy" && plot_scale != "loglog") {
    return usage("--plot-scale " + plot_scale + ": expected linear, logy or loglog");
  }
  o.selection = *select_v;
  o.families = *families_v;
  o.robust_loss = *robust_v;
  for (const Status& st : {CheckReal("--validation-fraction", o.validation_fraction, 0, 1, true),
                           CheckReal("--robust-scale", o.robust_scale_factor, 0, 1000, true),
                           CheckInteger("--starts", o.starts_per_family, 1, 8),
                           CheckInteger("--max-fit-points", o.max_fit_points, 0, 1000000, "0 = never; else >= 16"),
                           CheckReal("--band-z", o.band_z, 0, 100),
                           CheckReal("--horizon", o.horizon_iteration, 0, 1e12, false, "0 = automatic")}) {
    if (!st.ok()) return usage(st.message());
  }
  if (o.validation_fraction >= 1) return usage("--validation-fraction 1 is out of range: expected (0, 1)");
  std::string error;
  if (!o.IsValid(&error)) {
    // Name the flag, not the field.
    static const std::pair<const char*, const char*> kFlags[] = {
        {"validation_fraction", "--validation-fraction"}, {"robust_scale_factor", "--robust-scale"},
        {"starts_per_family", "--starts"}, {"max_fit_points", "--max-fit-points"},
        {"horizon_iteration", "--horizon"}, {"band_z", "--band-z"}, {"families", "--families:"}};
    for (const auto& [field, flag] : kFlags) {
      if (error.rfind(field, 0) == 0) {
        error = std::string(flag) + error.substr(std::strlen(field));
        break;
      }
    }
    return usage(error);
  }
  std::vector<double> at;
  if (!predict_at.empty()) {
    auto v = ParseNumberList(predict_at, "predict-at");
    if (!v.ok()) return usage(v.status().message());
    at = *v;
  }

  if (vm.count("evaluate")) {
    std::vector<Warmup> warmups;
    std::stringstream ss(warmups_text);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty()) continue;
      auto w = ParseWarmup(item);
      if (!w.ok()) return usage("--warmups: " + w.status().message());
      warmups.push_back(*w);
    }
    if (warmups.empty()) return usage("--warmups '" + warmups_text + "' lists no warm-up");
    return Evaluate(logs, warmups, *metric_v, o, json_path);
  }
  if (logs.size() != 1) return usage("give exactly one --log (several only with --evaluate)");

  datasets::LogReader::Options ro;
  ro.non_finite = *datasets::NonFinitePolicyFromString(non_finite);
  auto log = datasets::LogReader::ReadFile(logs[0], ro);
  if (!log.ok()) return Fail("fit", log.status());
  if (log->records.empty()) return Fail("fit", InvalidArgumentError(logs[0] + ": the log has no rows"));
  auto curve = pr::ExtractCurve(*log, *metric_v);
  if (!curve.ok()) return Fail("fit", curve.status());
  const int64_t first = log->records.front().iteration, last = log->records.back().iteration;
  auto warm = std::optional<double>(static_cast<double>(warmup.Resolve(first, last)));
  std::ostream& out = JsonToStdout(json_path) ? std::cerr : std::cout;
  const pr::CurveData head = curve->Prefix(*warm);
  const pr::CurveData unseen = curve->Suffix(*warm);
  if (o.horizon_iteration == 0) {
    double h = std::max(curve->iterations.back(), 4 * *warm);
    for (double x : at) h = std::max(h, x);
    o.horizon_iteration = h;
  }
  if (head.size() < static_cast<size_t>(o.min_points)) {
    // Say what the minimum is and what to change.
    std::string hint;
    if (curve->size() >= static_cast<size_t>(o.min_points)) {
      const double it = curve->iterations[static_cast<size_t>(o.min_points) - 1];
      const double pct = last > first ? std::ceil(100.0 * (it - static_cast<double>(first)) / static_cast<double>(last - first)) : 100;
      hint = ": give a longer warm-up, --warmup " + Fmt(it, 12) + (pct < 100 ? " or --warmup " + Fmt(std::max(1.0, pct), 3) + "%" : "");
    } else {
      hint = ", and the whole log has only " + std::to_string(curve->size());
    }
    const auto ls = Summarize(*log);
    const bool epoch_level = ls.epochs && static_cast<size_t>(*ls.epochs) + 1 >= curve->size();
    return Fail("fit", InvalidArgumentError(
                           logs[0] + ": the warm-up (--warmup " + warmup.text + ", up to iteration " + Fmt(*warm, 12) +
                           ") holds " + std::to_string(head.size()) + " " + pr::ToString(*metric_v) +
                           " points; fitting needs at least " + std::to_string(o.min_points) + hint +
                           (epoch_level ? " (an epoch-level log has one point per epoch: the warm-up needs at least " +
                                              std::to_string(o.min_points) +
                                              " epochs; --iterations-per-epoch maps epochs to iterations)"
                                        : "")));
  }
  auto p = pr::LearningCurvePredictor::Fit(head, o);
  if (!p.ok()) return Fail("fit", p.status().WithContext(logs[0] + ", warm-up " + Fmt(*warm) + " iterations"));
  const auto& s = p->summary();

  out << "log " << logs[0] << ": " << curve->size() << " points of " << pr::ToString(*metric_v) << ", warm-up "
            << Fmt(*warm, 8) << " iterations (" << head.size() << " points), " << unseen.size() << " unseen\n\n";
  out << std::left << std::setw(15) << "family" << std::setw(10) << "fit_rmse" << std::setw(10) << "val_rmse"
            << std::setw(8) << "weight" << std::setw(11) << "ext_rmse" << std::setw(11) << "final_rel" << "parameters / why dropped\n";
  json jf = json::array();
  for (const auto& f : s.families) {
    json j = {{"family", pr::ToString(f.family)}, {"formula", pr::FamilyFormula(f.family)}, {"usable", f.usable},
              {"param_names", pr::ParamNames(f.family)}, {"params", f.params}, {"fit_rmse", f.fit_rmse},
              {"weight", f.weight}, {"solver_iterations", f.solver_iterations}};
    if (!f.drop_reason.empty()) j["drop_reason"] = f.drop_reason;
    if (f.validation_rmse) j["validation_rmse"] = *f.validation_rmse;
    out << std::setw(15) << pr::ToString(f.family);
    if (!f.usable) {
      out << std::setw(50) << "-" << "dropped: " << f.drop_reason << "\n";
      jf.push_back(j);
      continue;
    }
    out << std::setw(10) << Fmt(f.fit_rmse, 3) << std::setw(10) << (f.validation_rmse ? Fmt(*f.validation_rmse, 3) : "-")
              << std::setw(8) << Fmt(f.weight, 2);
    auto sc = pr::ScoreExtrapolation(pr::FittedCurve{f.family, f.params, s.x_scale}, unseen);
    if (sc.ok()) {
      out << std::setw(11) << Fmt(sc->rmse, 3) << std::setw(11) << Fmt(sc->final_relative_error, 3);
      j["extrapolation_rmse"] = sc->rmse;
      j["final_relative_error"] = sc->final_relative_error;
    } else {
      out << std::setw(22) << "-";
    }
    out << ParamsText(f) << "\n";
    jf.push_back(j);
  }
  out << "\n(t = iteration / " << Fmt(s.x_scale, 8) << "; ext_rmse / final_rel: error on the unseen part of the log)\n";
  out << "selected: " << s.BriefReport() << "\n";
  json result = {{"log", logs[0]}, {"warmup", warmup.text}, {"metric", pr::ToString(*metric_v)}, {"warmup_iterations", *warm},
              {"selection", pr::ToString(s.selection)}, {"families", jf}, {"x_scale", s.x_scale},
              {"summary", {{"brief", s.BriefReport()}, {"message", s.message}, {"noise_sigma", s.noise_sigma},
                           {"points", s.num_points}, {"fit_time_s", s.fit_time_s}}}};
  result["selected"] = s.selected >= 0 ? json(pr::ToString(s.families[s.selected].family)) : json("ensemble");
  auto truth = pr::ScoreExtrapolation(*p, *curve);
  if (truth.ok()) {
    out << "against the truth (" << truth->points << " unseen points): RMSE " << Fmt(truth->rmse, 4)
              << ", final loss predicted " << Fmt(truth->predicted_final_loss) << " vs " << Fmt(truth->final_loss)
              << " (relative error " << Fmt(100 * truth->final_relative_error, 3) << "%)\n";
    result["truth"] = {{"points", truth->points}, {"rmse", truth->rmse}, {"final_loss", truth->final_loss},
                    {"predicted_final_loss", truth->predicted_final_loss},
                    {"final_relative_error", truth->final_relative_error}};
  } else {
    out << "the log ends at the warm-up: no truth to score against\n";
  }
  json preds = json::array();
  for (double x : at) {
    auto [lo, hi] = p->Band(x);
    const double v = p->Predict(x);
    out << "predict iteration " << Fmt(x, 10) << ": loss " << Fmt(v) << "  band [" << Fmt(lo) << ", " << Fmt(hi) << "]\n";
    preds.push_back({{"iteration", x}, {"loss", v}, {"low", lo}, {"high", hi}});
  }
  result["predictions"] = preds;
  if (!json_path.empty()) {
    Status st = WriteJson(result, json_path, "fit");
    if (!st.ok()) return Fail("fit", st);
  }
  if (!plot.empty()) {
    Status st = Plot(plot, *curve, *warm, *p, logs[0] + " (" + pr::ToString(s.selection) + ")", plot_scale);
    if (!st.ok()) return Fail("fit", st);
    out << "plot: " << plot << "\n";
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
