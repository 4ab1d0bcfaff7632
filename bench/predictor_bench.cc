// Predictor speed: fitting every curve family on a 10,000-point learning curve
// (goal: under 0.5 s on one core) against one family's fit in the same run.
// Compare BM_PredictorFitAll/* with BM_PredictorFitOne/* side by side.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>

#include "viper/predictor/learning_curve.h"

namespace {

using viper::predictor::CurveData;
using viper::predictor::CurveFamily;
using viper::predictor::LearningCurvePredictor;
using viper::predictor::Selection;

// 10,000 noisy points of a pow3 curve (noise 0.03 on a loss falling 2.5 -> 0.35).
const CurveData& Curve10k() {
  static const CurveData d = [] {
    CurveData c;
    std::mt19937 rng(1);
    std::normal_distribution<double> noise(0.0, 0.03);
    for (int i = 1; i <= 10000; ++i) {
      c.iterations.push_back(i);
      c.losses.push_back(0.3 + 2.2 * std::pow(i, -0.4) + noise(rng));
    }
    return c;
  }();
  return d;
}

// arg0: selection (0 best-mse, 1 validation, 2 ensemble); arg1: max_fit_points (0 = no binning).
void BM_PredictorFitAll(benchmark::State& state) {
  LearningCurvePredictor::Options o;
  o.selection = static_cast<Selection>(state.range(0));
  o.max_fit_points = static_cast<int>(state.range(1));
  for (auto _ : state) {
    auto p = LearningCurvePredictor::Fit(Curve10k(), o);
    if (!p.ok()) state.SkipWithError(p.status().message().c_str());
    benchmark::DoNotOptimize(p);
  }
  state.SetLabel(std::string(viper::predictor::ToString(o.selection)) + ", 15 families");
}
BENCHMARK(BM_PredictorFitAll)->Args({0, 400})->Args({2, 400})->Args({0, 0})->Unit(benchmark::kMillisecond);

// One family (exp3), best-mse: the unit the all-family fit is made of.
void BM_PredictorFitOne(benchmark::State& state) {
  LearningCurvePredictor::Options o;
  o.selection = Selection::kBestMse;
  o.families = {CurveFamily::kExp3};
  o.max_fit_points = static_cast<int>(state.range(0));
  for (auto _ : state) {
    auto p = LearningCurvePredictor::Fit(Curve10k(), o);
    if (!p.ok()) state.SkipWithError(p.status().message().c_str());
    benchmark::DoNotOptimize(p);
  }
  state.SetLabel("exp3 only");
}
BENCHMARK(BM_PredictorFitOne)->Arg(400)->Arg(0)->Unit(benchmark::kMillisecond);

// Online re-planning: a warm-started Refit on a grown curve (5,000 -> 10,000 points).
void BM_PredictorRefit(benchmark::State& state) {
  LearningCurvePredictor::Options o;
  const CurveData& all = Curve10k();
  auto first = LearningCurvePredictor::Fit(all.Prefix(5000), o);
  if (!first.ok()) {
    state.SkipWithError(first.status().message().c_str());
    return;
  }
  for (auto _ : state) {
    state.PauseTiming();
    LearningCurvePredictor p = *first;
    state.ResumeTiming();
    benchmark::DoNotOptimize(p.Refit(all));
  }
}
BENCHMARK(BM_PredictorRefit)->Unit(benchmark::kMillisecond);

// Bulk prediction for planners: 10,000 iterations from an ensemble.
void BM_PredictorPredictRange(benchmark::State& state) {
  auto p = LearningCurvePredictor::Fit(Curve10k(), LearningCurvePredictor::Options());
  if (!p.ok()) {
    state.SkipWithError(p.status().message().c_str());
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(p->PredictRange(10001, 20000));
  state.SetItemsProcessed(state.iterations() * 10000);
}
BENCHMARK(BM_PredictorPredictRange)->Unit(benchmark::kMicrosecond);

}  // namespace
