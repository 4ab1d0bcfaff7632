// A made-up run with a label swap and its staleness table, for tests: N =
// 3000 iterations, 0.1 s each, a validation point every 50, a swap at 1500.
// Diagonal: 0.3 + 2 exp(-i/300), plus, after the swap, a spike the training
// recovers from (1.5 exp(-(i - 1500)/100)). A version from before the swap
// costs 1.5 more on traffic after it, for good. Validation and test samples
// carry independent noise (sd 0.01, seeded). `alter_after` > 0 scales every
// loss measured on traffic after that iteration (log rows and table rows) by
// random factors in [0.3, 3]: what a planner must not have read before then.
#pragma once

#include <cmath>
#include <random>
#include <utility>

#include "viper/core/staleness_table.h"
#include "viper/core/training_log.h"

namespace viper {
namespace testing {

inline std::pair<TrainingLog, StalenessTable> SwapRun(uint64_t seed, int64_t alter_after = 0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.01);
  std::mt19937_64 alter_rng(seed + 1000);
  std::uniform_real_distribution<double> factor(0.3, 3.0);
  auto base = [](int64_t i) { return 0.3 + 2.0 * std::exp(-static_cast<double>(i) / 300.0); };
  auto diag = [&](int64_t i) { return base(i) + (i >= 1500 ? 1.5 * std::exp(-(i - 1500) / 100.0) : 0.0); };
  auto loss = [&](int64_t v, int64_t t) { return diag(v) + (v < 1500 && t >= 1500 ? 1.5 : 0.0); };
  auto scaled = [&](int64_t t, double x) { return alter_after > 0 && t > alter_after ? x * factor(alter_rng) : x; };
  StalenessTable table;
  table.source = "swap-run.staleness.csv";
  TrainingLog log;
  log.source = "swap-run.csv";
  // Table rows first (every pair of validation points), so the log's
  // diagonal can be copied from them.
  std::vector<std::pair<double, double>> diagonal(61);
  for (int64_t v = 0; v <= 3000; v += 50) {
    for (int64_t t = v; t <= 3000; t += 50) {
      StalenessRecord r;
      r.version_iteration = v;
      r.traffic_iteration = t;
      r.val_loss = std::max(0.0, scaled(t, loss(v, t) + noise(rng)));
      r.test_loss = std::max(0.0, scaled(t, loss(v, t) + noise(rng)));
      if (v == t) diagonal[static_cast<size_t>(v / 50)] = {r.val_loss, r.test_loss};
      table.records.push_back(r);
    }
  }
  for (int64_t i = 1; i <= 3000; ++i) {
    LogRecord r;
    r.iteration = i;
    r.wall_time_s = 0.1 * static_cast<double>(i);
    r.train_loss = scaled(i, diag(i) * (1.0 + 5 * noise(rng)));
    r.epoch = (i - 1) / 500;
    if (i % 50 == 0) {
      r.val_loss = diagonal[static_cast<size_t>(i / 50)].first;
      r.test_loss = diagonal[static_cast<size_t>(i / 50)].second;
    }
    log.records.push_back(r);
  }
  return {log, table};
}

}  // namespace testing
}  // namespace viper
