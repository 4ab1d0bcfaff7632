// Trainer benchmarks: training samples per second, and the GFLOP/s of the
// MLP's forward+backward pass against Eigen's own matrix-multiply rate on the
// same shapes, measured in the same run (counter gemm_ratio; goal >= 0.6 for
// the wide model).
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <chrono>
#include <random>
#include <vector>

#include "viper/workflow/fashion_mnist.h"
#include "viper/workflow/mlp.h"
#include "viper/workflow/trainer.h"

namespace {

using viper::workflow::Mlp;
using Clock = std::chrono::steady_clock;

std::vector<int64_t> Widths(int64_t id) {
  switch (id) {
    case 0: return {32};          // narrow
    case 1: return {256};         // the main job's model
    default: return {1024, 1024};  // wide
  }
}

const char* WidthsLabel(int64_t id) { return id == 0 ? "h32" : id == 1 ? "h256" : "h1024x1024"; }

// Random stand-in images (the pass costs the same on any pixels).
viper::workflow::Samples RandomSamples(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  viper::workflow::Samples s;
  s.pixels.resize(static_cast<std::size_t>(n * s.features));
  s.labels.resize(static_cast<std::size_t>(n));
  for (auto& p : s.pixels) p = static_cast<uint8_t>(rng());
  for (auto& l : s.labels) l = static_cast<uint8_t>(rng() % 10);
  return s;
}

// Eigen's GEMM rate (FLOP/s) on the products one training step computes:
// per layer W[out,in] * A[in,B], D[out,B] * A^T, and W^T * D for layers > 0.
double EigenGemmRate(const Mlp& mlp, int64_t batch) {
  struct Layer {
    Eigen::MatrixXf w, a, z, d, dw, da;
  };
  std::vector<Layer> layers(static_cast<std::size_t>(mlp.num_layers()));
  double flops = 0;
  for (int k = 0; k < mlp.num_layers(); ++k) {
    Layer& l = layers[static_cast<std::size_t>(k)];
    const int64_t in = mlp.in_features(k), out = mlp.out_features(k);
    l.w = Eigen::MatrixXf::Random(out, in);
    l.a = Eigen::MatrixXf::Random(in, batch);
    l.d = Eigen::MatrixXf::Random(out, batch);
    l.z.resize(out, batch);
    l.dw.resize(out, in);
    l.da.resize(in, batch);
    flops += 2.0 * static_cast<double>(out * in * batch) * (k > 0 ? 3.0 : 2.0);
  }
  auto pass = [&] {
    for (std::size_t k = 0; k < layers.size(); ++k) {
      Layer& l = layers[k];
      l.z.noalias() = l.w * l.a;
      l.dw.noalias() = l.d * l.a.transpose();
      if (k > 0) l.da.noalias() = l.w.transpose() * l.d;
      benchmark::DoNotOptimize(l.z.data());
      benchmark::DoNotOptimize(l.dw.data());
      benchmark::DoNotOptimize(l.da.data());
    }
  };
  pass();  // warm up
  int64_t reps = 0;
  const auto start = Clock::now();
  double seconds = 0;
  do {
    pass();
    ++reps;
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  } while (seconds < 0.3);
  return flops * static_cast<double>(reps) / seconds;
}

// One forward+backward pass (LossAndGradient) on a batch; args: model, batch.
void BM_MlpForwardBackward(benchmark::State& state) {
  Mlp::Options o;
  o.hidden_widths = Widths(state.range(0));
  const int64_t batch = state.range(1);
  Mlp mlp = Mlp::Create(o, 1).value();
  const auto samples = RandomSamples(batch, 2);
  Eigen::MatrixXf inputs;
  std::vector<int32_t> labels;
  samples.GatherAll(&inputs, &labels);
  Mlp::Buffers grad = mlp.ZeroBuffers();
  Mlp::Workspace ws;
  mlp.LossAndGradient(inputs, labels, &grad, &ws);  // warm up the workspace

  const double gemm_before = EigenGemmRate(mlp, batch);
  const auto start = Clock::now();
  for (auto _ : state) {
    benchmark::DoNotOptimize(mlp.LossAndGradient(inputs, labels, &grad, &ws));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double gemm_after = EigenGemmRate(mlp, batch);
  // The faster of the two reference measurements: a conservative ratio on a
  // machine shared with other jobs.
  const double gemm = std::max(gemm_before, gemm_after);
  const double rate = mlp.TrainingFlopsPerSample() * static_cast<double>(batch) *
                      static_cast<double>(state.iterations()) / seconds;
  state.counters["GFLOPs"] = rate / 1e9;
  state.counters["eigen_GFLOPs"] = gemm / 1e9;
  state.counters["gemm_ratio"] = rate / gemm;
  state.counters["model_MB"] = static_cast<double>(mlp.SizeBytes()) / 1e6;
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetLabel(WidthsLabel(state.range(0)));
}
BENCHMARK(BM_MlpForwardBackward)
    ->ArgNames({"model", "batch"})
    ->Args({0, 64})
    ->Args({1, 64})
    ->Args({2, 64})
    ->Args({2, 256})
    ->Unit(benchmark::kMillisecond);

// Whole training steps (batch gathering, forward, backward, SGD-momentum
// update) on 10,000 stand-in images; Time = one iteration of batch 64,
// items/s = training samples per second.
void BM_TrainerStep(benchmark::State& state) {
  viper::workflow::Trainer::Options o;
  o.hidden_widths = Widths(state.range(0));
  o.batch_size = 64;
  o.epochs = 1000000;
  o.val_every_iterations = 0;
  auto trainer = viper::workflow::Trainer::Create(o, RandomSamples(10000, 3), {}).value();
  viper::LogRecord record;
  for (auto _ : state) {
    if (!trainer->Step(&record).ok()) state.SkipWithError("Step failed");
    benchmark::DoNotOptimize(record.train_loss);
  }
  state.SetItemsProcessed(state.iterations() * o.batch_size);
  state.SetLabel(WidthsLabel(state.range(0)));
}
BENCHMARK(BM_TrainerStep)->ArgName("model")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

}  // namespace
