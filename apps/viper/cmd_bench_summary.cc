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
#include <sstream>

#include "cli_util.h"
#include "commands.h"
#include "viper/core/median.h"

namespace viper {
namespace cli {
namespace {

double Median(std::vector<double> v) { return viper::Median(std::move(v), 0.0); }

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
      ("json", po::value(&json_path), "write the summary tables as JSON ('-' = stdout only JSON, the tables go to stderr); schema viper.bench-summary/1");
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
  FILE* const table = JsonToStdout(json_path) ? stderr : stdout;
  if (j.contains("context")) {
    const auto& c = j["context"];
    std::fprintf(table, "viper-bench run %s on %s: %d CPUs at %.0f MHz\n\n", c.value("date", "?").c_str(),
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
    std::fprintf(table, "Strategies: median over %zu logs of the regret vs the oracle (CIL / oracle CIL - 1), simulated on each "
                "log's true curve\n%-13s", logs.size(), "strategy");
    for (const auto& c : columns) std::fprintf(table, " %9s", c.c_str());
    std::fprintf(table, "\n");
    for (const char* s : kStrategyOrder) {
      std::fprintf(table, "%-13s", s);
      for (const auto& c : columns) {
        const double m = Median(regret[c][s]);
        std::fprintf(table, " %+8.2f%%", 100 * m);
        out["strategies"]["median_regret"][c][s] = m;
        out["strategies"]["median_change_vs_epoch"][c][s] = Median(vs_epoch[c][s]);
      }
      std::fprintf(table, "\n");
    }
    std::fprintf(table, "\nStrategies: median change of CIL vs epoch-boundary updates\n%-13s", "strategy");
    for (const auto& c : columns) std::fprintf(table, " %9s", c.c_str());
    std::fprintf(table, "\n");
    for (const char* s : kStrategyOrder) {
      std::fprintf(table, "%-13s", s);
      for (const auto& c : columns) std::fprintf(table, " %+8.2f%%", 100 * Median(vs_epoch[c][s]));
      std::fprintf(table, "\n");
    }
    if (!per_log.empty()) {
      std::fprintf(table, "\nStrategies: regret vs the oracle per log (gpu tier, 20%% warm-up)\n%-18s", "log");
      for (const char* s : kStrategyOrder) std::fprintf(table, " %12s", s);
      std::fprintf(table, "\n");
      for (const auto& [log, m] : per_log) {
        std::fprintf(table, "%-18s", log.c_str());
        for (const char* s : kStrategyOrder) {
          auto it = m.find(s);
          if (it == m.end()) std::fprintf(table, " %12s", "-");
          else std::fprintf(table, " %+11.2f%%", 100 * it->second);
        }
        std::fprintf(table, "\n");
      }
    }
    std::fprintf(table, "\n");
  }
  for (const auto& [family, rows] : families) {
    std::fprintf(table, "%s\n", family.c_str());
    for (const auto* b : rows) {
      std::fprintf(table, "  %-58s %12.4g %s", b->value("name", "").c_str(), b->value("real_time", 0.0),
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
      std::fprintf(table, "%s\n", counters.c_str());
    }
    std::fprintf(table, "\n");
  }
  if (!json_path.empty()) {
    Status st = WriteJson(out, json_path, "bench-summary");
    if (!st.ok()) return Fail("bench-summary", st);
  }
  if (!plot.empty() && !columns.empty()) {
    std::vector<std::string> tiers;
    for (const auto& c : columns) {
      if (c.size() > 4 && c.substr(c.size() - 4) == "/w20") tiers.push_back(c);
    }
    if (tiers.empty()) tiers.push_back(*columns.begin());
    std::ostringstream data;
    data << "strategy";
    for (const auto& t : tiers) data << " " << t;
    data << "\n";
    double lowest = 0;
    for (const char* s : kStrategyOrder) {
      data << s;
      for (const auto& t : tiers) {
        const double v = 100 * Median(regret[t][s]);
        lowest = std::min(lowest, v);
        data << " " << v;
      }
      data << "\n";
    }
    // Bars start at zero (below it only when a regret is negative); each bar
    // carries its value. Cluster k of n sits at x = row + (k - (n-1)/2) / (n + gap);
    // $0 counts the header line, hence row = $0 - 1.
    const size_t n = tiers.size();
    std::ostringstream gp;
    gp << "$regret << EOD\n" << data.str() << "EOD\n"
       << "set title 'median regret vs oracle over the logs (20% warm-up), %; the axis starts at 0'\n"
       << "set style data histogram; set style histogram cluster gap 1; set style fill solid 0.8; set grid ytics\n"
       << "set ylabel 'regret %'; set key outside right top; set xzeroaxis lt -1\n"
       << "set yrange [" << (lowest < 0 ? lowest * 1.15 : 0.0) << ":*]; set offsets 0, 0, graph 0.1, 0\n"
       << "plot for [i=2:" << n + 1 << "] $regret using i:xtic(1) title columnheader(i), \\\n"
       << "     for [i=2:" << n + 1 << "] $regret using ($0 - 1 + (i - 2 - " << (static_cast<double>(n) - 1) / 2
       << ") / " << n + 1 << ".0):(column(i)):(sprintf('%+.1f', column(i))) with labels offset 0,0.7 font ',8' notitle\n";
    Status st = RunGnuplot("set terminal pngcairo noenhanced size 1100,550 font 'DejaVu Sans,10'", gp.str(), plot);
    if (!st.ok()) return Fail("bench-summary", st);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
