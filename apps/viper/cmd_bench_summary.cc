// viper bench-summary: turns viper-bench's --benchmark_format=json output
// into one human table per section and a PNG chart (gnuplot).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "cli_util.h"
#include "commands.h"

namespace viper {
namespace cli {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

const char* kStrategyOrder[] = {"epoch", "viper-fixed", "viper-greedy", "fixed", "optimal", "online", "oracle"};

}  // namespace

int RunBenchSummary(const std::vector<std::string>& args) {
  po::options_description desc("Options");
  std::string input, plot, json_path;
  desc.add_options()("help,h", "print this help")
      ("input", po::value(&input)->required(), "viper-bench output written with --benchmark_format=json (or --benchmark_out=FILE --benchmark_out_format=json)")
      ("plot", po::value(&plot), "PNG bar chart: median regret vs oracle per strategy and tier (gnuplot)")
      ("json", po::value(&json_path), "write the summary tables as JSON ('-' = stdout)");
  po::variables_map vm;
  const int rc = ParseOrHelp(args, desc, &vm, "viper bench-summary --input bench.json [--plot PATH.png]",
                             "Prints, from one viper-bench run: the strategy comparison (median over the logs of the "
                             "regret vs the oracle and the change vs epoch, per tier and warm-up, and the winners), "
                             "and one table per other benchmark family with its counters (the *_ratio counters are "
                             "measured against the raw reference in the same run).");
  if (rc != 0) return rc < 0 ? kExitOk : rc;
  std::ifstream in(input);
  if (!in) return Fail("bench-summary", NotFoundError("cannot open '" + input + "'"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("benchmarks") || !j["benchmarks"].is_array()) {
    return Fail("bench-summary", InvalidArgumentError(input + ": not Google Benchmark JSON (no \"benchmarks\" array); run "
                                                      "viper-bench --benchmark_format=json"));
  }
  if (j.contains("context")) {
    const auto& c = j["context"];
    std::printf("viper-bench run %s on %s: %d CPUs at %.0f MHz\n\n", c.value("date", "?").c_str(),
                c.value("host_name", "?").c_str(), c.value("num_cpus", 0), c.value("mhz_per_cpu", 0.0));
  }

  // Strategies: strategies/<log>/<tier>/w<pct>/<strategy>.
  std::map<std::string, std::map<std::string, std::vector<double>>> regret, vs_epoch;  // column -> strategy -> values
  std::map<std::string, std::map<std::string, double>> per_log;  // "<log>" -> strategy -> regret at gpu/w20
  std::set<std::string> columns, logs;
  // Other families: prefix -> rows of (name, time, counters).
  std::map<std::string, std::vector<const nlohmann::json*>> families;
  for (const auto& b : j["benchmarks"]) {
    const std::string name = b.value("name", "");
    if (b.value("error_occurred", false)) continue;
    const auto parts = Split(name, '/');
    if (parts.size() >= 5 && parts[0] == "strategies") {
      const std::string column = parts[2] + "/" + parts[3];
      std::string strategy = parts[4];
      columns.insert(column);
      logs.insert(parts[1]);
      regret[column][strategy].push_back(b.value("regret_vs_oracle", 0.0));
      vs_epoch[column][strategy].push_back(b.value("change_vs_epoch", 0.0));
      if (column == "gpu/w20") per_log[parts[1]][strategy] = b.value("regret_vs_oracle", 0.0);
    } else if (b.value("run_type", "iteration") == "iteration") {
      families[parts[0]].push_back(&b);
    }
  }
  nlohmann::json out;
  if (!columns.empty()) {
    std::printf("Strategies: median over %zu logs of the regret vs the oracle (CIL / oracle CIL - 1), simulated on each "
                "log's true curve\n%-13s", logs.size(), "strategy");
    for (const auto& c : columns) std::printf(" %9s", c.c_str());
    std::printf("\n");
    for (const char* s : kStrategyOrder) {
      std::printf("%-13s", s);
      for (const auto& c : columns) {
        const double m = Median(regret[c][s]);
        std::printf(" %+8.2f%%", 100 * m);
        out["strategies"]["median_regret"][c][s] = m;
        out["strategies"]["median_change_vs_epoch"][c][s] = Median(vs_epoch[c][s]);
      }
      std::printf("\n");
    }
    std::printf("\nStrategies: median change of CIL vs epoch-boundary updates\n%-13s", "strategy");
    for (const auto& c : columns) std::printf(" %9s", c.c_str());
    std::printf("\n");
    for (const char* s : kStrategyOrder) {
      std::printf("%-13s", s);
      for (const auto& c : columns) std::printf(" %+8.2f%%", 100 * Median(vs_epoch[c][s]));
      std::printf("\n");
    }
    if (!per_log.empty()) {
      std::printf("\nStrategies: regret vs the oracle per log (gpu tier, 20%% warm-up)\n%-18s", "log");
      for (const char* s : kStrategyOrder) std::printf(" %12s", s);
      std::printf("\n");
      for (const auto& [log, m] : per_log) {
        std::printf("%-18s", log.c_str());
        for (const char* s : kStrategyOrder) {
          auto it = m.find(s);
          if (it == m.end()) std::printf(" %12s", "-");
          else std::printf(" %+11.2f%%", 100 * it->second);
        }
        std::printf("\n");
      }
    }
    std::printf("\n");
  }
  for (const auto& [family, rows] : families) {
    std::printf("%s\n", family.c_str());
    for (const auto* b : rows) {
      std::printf("  %-58s %12.4g %s", b->value("name", "").c_str(), b->value("real_time", 0.0),
                  b->value("time_unit", "").c_str());
      std::string counters;
      for (auto it = b->begin(); it != b->end(); ++it) {
        static const std::set<std::string> kStandard = {
            "name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
            "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit", "label",
            "aggregate_name", "aggregate_unit", "error_occurred", "error_message"};
        if (kStandard.count(it.key()) || !it.value().is_number()) continue;
        char buf[64];
        std::snprintf(buf, sizeof(buf), "  %s=%.4g", it.key().c_str(), it.value().get<double>());
        counters += buf;
        out["families"][family][b->value("name", "")][it.key()] = it.value();
      }
      std::printf("%s\n", counters.c_str());
    }
    std::printf("\n");
  }
  if (!json_path.empty()) {
    Status st = WriteJson(out, json_path, "bench-summary");
    if (!st.ok()) return Fail("bench-summary", st);
  }
  if (!plot.empty() && !columns.empty()) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("viper-bench-plot-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::vector<std::string> tiers;
    for (const auto& c : columns) {
      if (c.size() > 4 && c.substr(c.size() - 4) == "/w20") tiers.push_back(c);
    }
    if (tiers.empty()) tiers.push_back(*columns.begin());
    std::ofstream data(dir / "regret.dat");
    data << "strategy";
    for (const auto& t : tiers) data << " " << t;
    data << "\n";
    for (const char* s : kStrategyOrder) {
      data << s;
      for (const auto& t : tiers) data << " " << 100 * Median(regret[t][s]);
      data << "\n";
    }
    data.close();
    std::ofstream gp(dir / "plot.gp");
    gp << "set terminal pngcairo noenhanced size 1000,500 font 'DejaVu Sans,10'\nset output '" << plot << "'\n"
       << "set title 'median regret vs oracle over the shipped logs (20% warm-up), %'\n"
       << "set style data histogram; set style histogram cluster gap 1; set style fill solid 0.8; set grid ytics\n"
       << "set ylabel 'regret %'; set key top left\n"
       << "plot for [i=2:" << tiers.size() + 1 << "] '" << (dir / "regret.dat").string()
       << "' using i:xtic(1) title columnheader(i)\n";
    gp.close();
    const int prc = std::system(("gnuplot '" + (dir / "plot.gp").string() + "'").c_str());
    fs::remove_all(dir);
    if (prc != 0) return Fail("bench-summary", UnavailableError("gnuplot failed; install gnuplot-nox or drop --plot"));
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
