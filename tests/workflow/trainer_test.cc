// Tests of the Fashion-MNIST trainer: data loading, the MLP's backward pass,
// the optimisers, the drift stream, evaluation of a ModelState, and that the
// trainer reproduces the shipped logs. Tests that need the real dataset skip
// when the Debian package dataset-fashion-mnist is not installed.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "viper/core/safetensors.h"
#include "viper/datasets/log_reader.h"
#include "viper/workflow/fashion_mnist.h"
#include "viper/workflow/mlp.h"
#include "viper/workflow/trainer.h"
#include "viper/workflow/trainer_log.h"
#include "synthetic_samples.h"

namespace viper {
namespace workflow {
namespace {

namespace fs = std::filesystem;

bool HaveDataset() {
  return fs::exists(DefaultFashionMnistDir() + "/train-images-idx3-ubyte.gz") &&
         fs::exists(DefaultFashionMnistDir() + "/t10k-labels-idx1-ubyte.gz");
}

#define SKIP_WITHOUT_DATASET()                                                                  \
  if (!HaveDataset()) GTEST_SKIP() << "Fashion-MNIST not found in " << DefaultFashionMnistDir() \
                                   << " (install the Debian package dataset-fashion-mnist)"

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / ("viper_workflow_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

using synthetic::Synthetic;

TEST(TrainerTest, DefaultOptionsAreValid) {
  std::string error;
  EXPECT_TRUE(Mlp::Options().IsValid(&error)) << error;
  EXPECT_TRUE(Trainer::Options().IsValid(&error)) << error;
}

TEST(TrainerTest, InvalidOptionsNameTheField) {
  std::string error;
  Trainer::Options o;
  o.momentum = 1.0;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("momentum"), std::string::npos) << error;
  o = Trainer::Options();
  o.drift = Trainer::Drift::kClassIncremental;  // drift_at_iteration left 0
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_at_iteration"), std::string::npos) << error;
  o.drift = Trainer::Drift::kRotation;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_at_iteration"), std::string::npos) << error;
  o.drift_at_iteration = 10;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.drift_rotation_degrees = std::nan("");
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_rotation_degrees"), std::string::npos) << error;
  o.drift_rotation_degrees = 45;
  o.drift_duration_iterations = -1;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_duration_iterations"), std::string::npos) << error;
  o = Trainer::Options();
  o.drift = Trainer::Drift::kLabelSwap;
  o.drift_at_iteration = 10;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.drift_swap_class_b = 10;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_swap_class_b"), std::string::npos) << error;
  o.drift_swap_class_b = o.drift_swap_class_a;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_swap_class_b must differ"), std::string::npos) << error;
  o = Trainer::Options();
  o.drift = Trainer::Drift::kRecurring;
  o.drift_at_iteration = 10;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.drift_period_iterations = 0;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_period_iterations"), std::string::npos) << error;
  o.drift_period_iterations = 500;
  for (int64_t domains : {1, 9}) {
    o.drift_domains = domains;
    EXPECT_FALSE(o.IsValid(&error)) << domains;
    EXPECT_NE(error.find("drift_domains must be in [2, 8], got " + std::to_string(domains)), std::string::npos) << error;
  }
  o.drift_domains = 8;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.drift_period_iterations = 0;
  o.drift = Trainer::Drift::kPriorShift;
  EXPECT_TRUE(o.IsValid(&error)) << error;  // the period is not a prior shift's
  o.drift_prior_classes = {2, 2};
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_prior_classes names class 2 twice"), std::string::npos) << error;
  o.drift_prior_classes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_prior_classes"), std::string::npos) << error;
  o.drift_prior_classes = {10};
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_prior_classes"), std::string::npos) << error;
  o.drift_prior_classes = {3};
  o.drift_prior_mass = 0.0;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("drift_prior_mass"), std::string::npos) << error;
  o = Trainer::Options();
  o.staleness_table = true;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.staleness_max_versions = 1;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("staleness_max_versions"), std::string::npos) << error;
  o.staleness_max_versions = 2;
  o.val_every_iterations = 0;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("val_every_iterations must be positive with staleness_table"), std::string::npos) << error;
  o = Trainer::Options();
  o.val_samples = 6000;  // + 5000 test > the 10,000 images of the test split
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("val_samples + test_samples"), std::string::npos) << error;
  o.test_samples = -1;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("test_samples"), std::string::npos) << error;
  Mlp::Options m;
  m.hidden_widths = {8, 0};
  EXPECT_FALSE(m.IsValid(&error));
  EXPECT_NE(error.find("hidden_widths[1]"), std::string::npos) << error;
}

TEST(TrainerTest, EnumsRoundTrip) {
  for (auto o : {Trainer::Optimizer::kSgd, Trainer::Optimizer::kAdam}) {
    EXPECT_EQ(*Trainer::OptimizerFromString(Trainer::ToString(o)), o);
  }
  for (auto d : {Trainer::Drift::kNone, Trainer::Drift::kClassIncremental, Trainer::Drift::kLabelSwap,
                 Trainer::Drift::kRotation, Trainer::Drift::kRecurring, Trainer::Drift::kPriorShift}) {
    EXPECT_EQ(*Trainer::DriftFromString(Trainer::ToString(d)), d);
  }
  EXPECT_EQ(std::string(Trainer::ToString(Trainer::Drift::kLabelSwap)), "label-swap");
  EXPECT_EQ(std::string(Trainer::ToString(Trainer::Drift::kRecurring)), "recurring");
  EXPECT_EQ(std::string(Trainer::ToString(Trainer::Drift::kPriorShift)), "prior-shift");
  EXPECT_FALSE(Trainer::DriftFromString("shuffle").ok());
  EXPECT_FALSE(Trainer::OptimizerFromString("rmsprop").ok());
  EXPECT_EQ(*FashionMnistSplitFromString("t10k"), FashionMnistSplit::kTest);
}

TEST(MlpTest, TensorsAreNamedAndShapedLikePyTorch) {
  Mlp::Options o;
  o.hidden_widths = {32, 16};
  auto mlp = Mlp::Create(o, 7);
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  const ModelState& s = mlp->state();
  ASSERT_EQ(s.size(), 6u);
  // nn.Linear(784, 32).weight is [out, in] = [32, 784].
  EXPECT_EQ(s.tensors()[0].name, "0.weight");
  EXPECT_EQ(s.tensors()[0].shape, (std::vector<int64_t>{32, 784}));
  EXPECT_EQ(s.tensors()[1].name, "0.bias");
  EXPECT_EQ(s.tensors()[1].shape, (std::vector<int64_t>{32}));
  EXPECT_EQ(s.tensors()[4].shape, (std::vector<int64_t>{10, 16}));
  for (const auto& t : s.tensors()) EXPECT_EQ(t.dtype, DType::kF32);
  // 784*32+32 + 32*16+16 + 16*10+10 parameters, 4 bytes each.
  EXPECT_EQ(mlp->NumParameters(), 784 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10);
  EXPECT_EQ(mlp->SizeBytes(), static_cast<std::size_t>(mlp->NumParameters()) * 4);
  // He-uniform bound for layer 0 is sqrt(6/784) = 0.0875.
  const Tensor& w0 = s.tensors()[0];
  float max_abs = 0;
  for (int64_t i = 0; i < w0.NumElements(); ++i) max_abs = std::max(max_abs, std::abs(w0.As<float>()[i]));
  EXPECT_LE(max_abs, std::sqrt(6.0f / 784.0f));
  EXPECT_GT(max_abs, 0.9f * std::sqrt(6.0f / 784.0f));  // 25k draws reach near the bound
}

// The backward pass against central finite differences on a tiny MLP.
TEST(MlpTest, GradientMatchesFiniteDifferences) {
  Mlp::Options o;
  o.input_features = 5;
  o.hidden_widths = {6, 4};
  o.num_classes = 3;
  auto created = Mlp::Create(o, 3);
  ASSERT_TRUE(created.ok());
  Mlp mlp = std::move(created).value();
  // Non-zero biases, so that their gradients are exercised away from 0.
  std::mt19937_64 rng(13);
  for (int k : {1, 3, 5}) {
    for (int64_t i = 0; i < mlp.parameter_size(k); ++i) {
      mlp.parameter(k)[i] = static_cast<float>(static_cast<double>(rng() % 1000) / 5000.0 - 0.1);
    }
  }
  Eigen::MatrixXf inputs(5, 4);
  for (int64_t i = 0; i < inputs.size(); ++i) inputs.data()[i] = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
  const std::vector<int32_t> labels = {0, 2, 1, 2};
  // Guard: a pre-activation within a perturbation (eps * max|input| + eps) of
  // the ReLU kink would make the finite difference meaningless there.
  {
    Eigen::MatrixXf a = inputs;
    for (int k = 0; k < 2; ++k) {
      Eigen::Map<const Mlp::RowMatrix> w(mlp.parameter(2 * k), mlp.out_features(k), mlp.in_features(k));
      Eigen::Map<const Eigen::VectorXf> b(mlp.parameter(2 * k + 1), mlp.out_features(k));
      Eigen::MatrixXf z = w * a;
      z.colwise() += b;
      ASSERT_GT(z.cwiseAbs().minCoeff(), 1e-2f) << "layer " << k << " sits on a ReLU kink; change the seed";
      a = z.cwiseMax(0.0f);
    }
  }
  Mlp::Buffers grad;
  Mlp::Workspace ws;
  mlp.LossAndGradient(inputs, labels, &grad, &ws);
  Mlp::Buffers scratch;
  const float eps = 1e-3f;
  int checked = 0;
  for (int k = 0; k < mlp.num_parameter_tensors(); ++k) {
    for (int64_t i = 0; i < mlp.parameter_size(k); ++i) {
      float& p = mlp.parameter(k)[i];
      const float saved = p;
      p = saved + eps;
      const double plus = mlp.LossAndGradient(inputs, labels, &scratch, &ws);
      p = saved - eps;
      const double minus = mlp.LossAndGradient(inputs, labels, &scratch, &ws);
      p = saved;
      const double numeric = (plus - minus) / (2.0 * eps);
      const double analytic = grad.tensors[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)];
      // float32 losses: rounding error ~1e-7/eps = 1e-4 on the difference quotient.
      EXPECT_NEAR(analytic, numeric, 5e-4 + 1e-2 * std::abs(numeric))
          << mlp.state().tensors()[static_cast<std::size_t>(k)].name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 5 * 6 + 6 + 6 * 4 + 4 + 4 * 3 + 3);
}

TEST(MlpTest, EvaluateKnownModels) {
  // Four samples with features 4 and labels {0, 1, 2, 0}.
  Samples s;
  s.features = 4;
  s.labels = {0, 1, 2, 0};
  s.pixels = {255, 0, 0, 0,  0, 255, 0, 0,  0, 0, 255, 0,  255, 0, 0, 0};
  Mlp::Options o;
  o.input_features = 4;
  o.hidden_widths = {};
  o.num_classes = 3;
  auto mlp = Mlp::Create(o, 1);
  ASSERT_TRUE(mlp.ok());
  // All-zero weights: uniform softmax, loss ln(3) for every sample; ties go to
  // class 0, which is the label of 2 of the 4 samples.
  for (int k = 0; k < 2; ++k) std::fill_n(mlp->parameter(k), mlp->parameter_size(k), 0.0f);
  auto e = Evaluate(mlp->state(), s);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_NEAR(e->mean_loss, std::log(3.0), 1e-6);
  EXPECT_DOUBLE_EQ(e->accuracy, 0.5);
  EXPECT_EQ(e->samples, 4);
  // Weight 10 from feature c to class c: every sample right, logit margin 10,
  // loss ln(1 + 2 e^-10) = 9.08e-5.
  for (int c = 0; c < 3; ++c) mlp->parameter(0)[c * 4 + c] = 10.0f;
  e = Evaluate(mlp->state(), s, /*batch_size=*/3);  // batches of 3 and 1
  ASSERT_TRUE(e.ok());
  EXPECT_DOUBLE_EQ(e->accuracy, 1.0);
  EXPECT_NEAR(e->mean_loss, std::log1p(2.0 * std::exp(-10.0)), 1e-6);
}

TEST(MlpTest, FromModelStateRejectsWhatIsNotAnMlp) {
  Mlp::Options o;
  o.hidden_widths = {8};
  auto mlp = Mlp::Create(o, 1);
  ASSERT_TRUE(mlp.ok());
  ModelState missing;
  ASSERT_TRUE(missing.Add(mlp->state().tensors()[0]).ok());
  ASSERT_TRUE(missing.Add(mlp->state().tensors()[1]).ok());
  ASSERT_TRUE(missing.Add(mlp->state().tensors()[3]).ok());
  ASSERT_TRUE(missing.Add(Tensor::Allocate("other", DType::kF32, {1})).ok());
  auto r = Mlp::FromModelState(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("2.weight"), std::string::npos) << r.status().message();

  ModelState wrong_dtype;
  ASSERT_TRUE(wrong_dtype.Add(Tensor::Allocate("0.weight", DType::kF64, {10, 784})).ok());
  ASSERT_TRUE(wrong_dtype.Add(Tensor::Allocate("0.bias", DType::kF32, {10})).ok());
  r = Mlp::FromModelState(wrong_dtype);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("F64, expected F32"), std::string::npos) << r.status().message();

  ModelState mismatch;
  ASSERT_TRUE(mismatch.Add(Tensor::Allocate("0.weight", DType::kF32, {8, 784})).ok());
  ASSERT_TRUE(mismatch.Add(Tensor::Allocate("0.bias", DType::kF32, {8})).ok());
  ASSERT_TRUE(mismatch.Add(Tensor::Allocate("2.weight", DType::kF32, {10, 9})).ok());
  ASSERT_TRUE(mismatch.Add(Tensor::Allocate("2.bias", DType::kF32, {10})).ok());
  r = Mlp::FromModelState(mismatch);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("2.weight' takes 9 inputs"), std::string::npos)
      << r.status().message();

  // Evaluate on samples of the wrong size names both sizes.
  Samples s;
  s.features = 5;
  s.labels = {0};
  s.pixels = {0, 0, 0, 0, 0};
  auto e = Evaluate(mlp->state(), s);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("784"), std::string::npos);
}

TEST(MlpTest, CloneOwnsItsBytes) {
  auto mlp = Mlp::Create(Mlp::Options(), 1);
  ASSERT_TRUE(mlp.ok());
  Mlp copy = mlp->Clone();
  copy.parameter(0)[0] += 1.0f;
  EXPECT_NE(copy.parameter(0)[0], mlp->parameter(0)[0]);
}

Trainer::Options SyntheticOptions() {
  Trainer::Options o;
  o.hidden_widths = {16};
  o.batch_size = 8;
  o.epochs = 4;
  o.learning_rate = 0.05;
  o.val_every_iterations = 10;
  return o;
}

std::vector<float> Losses(const Trainer::Options& o, Samples train, Samples val) {
  auto t = Trainer::Create(o, std::move(train), std::move(val));
  VIPER_CHECK(t.ok());
  std::vector<float> losses;
  LogRecord r;
  while (!(*t)->done()) {
    VIPER_CHECK((*t)->Step(&r).ok());
    losses.push_back(static_cast<float>(*r.train_loss));
    if (r.val_loss) losses.push_back(static_cast<float>(*r.val_loss));
  }
  return losses;
}

TEST(TrainerTest, SameSeedGivesIdenticalLosses) {
  const Samples train = Synthetic(200, 12, 10, 5), val = Synthetic(50, 12, 10, 6);
  for (auto optimizer : {Trainer::Optimizer::kSgd, Trainer::Optimizer::kAdam}) {
    Trainer::Options o = SyntheticOptions();
    o.optimizer = optimizer;
    if (optimizer == Trainer::Optimizer::kAdam) o.learning_rate = 0.003;
    o.cosine_schedule = true;
    const auto a = Losses(o, train, val), b = Losses(o, train, val);
    ASSERT_EQ(a.size(), 4u * 25u + 10u);  // 25 iterations per epoch; validation every 10
    EXPECT_EQ(a, b) << Trainer::ToString(optimizer);  // bit for bit
    o.seed = 2;
    EXPECT_NE(Losses(o, train, val), a) << "another seed must change the initialisation and the order";
  }
}

TEST(TrainerTest, CosineScheduleAndLengths) {
  Trainer::Options o = SyntheticOptions();
  o.cosine_schedule = true;
  o.max_iterations = 60;
  auto t = Trainer::Create(o, Synthetic(200, 12, 10, 5), Synthetic(20, 12, 10, 6));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->iterations_per_epoch(), 25);  // floor(200 / 8)
  EXPECT_EQ((*t)->planned_iterations(), 60);    // min(4 * 25, 60)
  std::vector<double> lrs;
  std::vector<int64_t> epochs;
  auto s = (*t)->Run(nullptr, [&](const LogRecord& r, const Trainer& tr) {
    lrs.push_back(tr.learning_rate());
    epochs.push_back(*r.epoch);
    return true;
  });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->termination, "max_iterations");
  ASSERT_EQ(lrs.size(), 60u);
  EXPECT_DOUBLE_EQ(lrs[0], 0.05);                                     // cos(0) = 1
  EXPECT_NEAR(lrs[30], 0.05 * 0.5 * (1 + std::cos(M_PI * 0.5)), 1e-12);  // iteration 31: half way
  EXPECT_EQ(epochs[24], 0);
  EXPECT_EQ(epochs[25], 1);  // iteration 26 starts the second pass
  EXPECT_TRUE(s->last_val_loss.has_value());  // the last iteration validates
}

// Milestones multiply the rate from their iteration on, cumulatively and on
// top of the cosine schedule; bad ones are refused with the index.
TEST(TrainerTest, LearningRateMilestones) {
  Trainer::Options o = SyntheticOptions();
  o.cosine_schedule = true;
  o.max_iterations = 60;
  o.lr_milestones = {{20, 0.1}, {40, 60.0}};
  auto t = Trainer::Create(o, Synthetic(200, 12, 10, 5), Synthetic(20, 12, 10, 6));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<double> lrs;
  ASSERT_TRUE((*t)->Run(nullptr, [&](const LogRecord&, const Trainer& tr) {
                  lrs.push_back(tr.learning_rate());
                  return true;
                }).ok());
  ASSERT_EQ(lrs.size(), 60u);
  auto cosine = [](int64_t i) { return 0.05 * 0.5 * (1 + std::cos(M_PI * static_cast<double>(i - 1) / 60.0)); };
  EXPECT_NEAR(lrs[18], cosine(19), 1e-12);              // iteration 19: before the first milestone
  EXPECT_NEAR(lrs[19], cosine(20) * 0.1, 1e-12);        // iteration 20: x 0.1
  EXPECT_NEAR(lrs[39], cosine(40) * 0.1 * 60.0, 1e-12);  // iteration 40: x 6 in all
  std::string error;
  o.lr_milestones = {{20, 0.1}, {20, 2.0}};
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("lr_milestones[1]: iterations must increase"), std::string::npos) << error;
  o.lr_milestones = {{1, 0.1}};
  EXPECT_FALSE(o.IsValid(&error));
  o.lr_milestones = {{5, 0.0}};
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("factor must be finite and > 0"), std::string::npos) << error;
}

TEST(TrainerTest, StopsWhenTheCallbackSaysSo) {
  auto t = Trainer::Create(SyntheticOptions(), Synthetic(200, 12, 10, 5), Synthetic(20, 12, 10, 6));
  ASSERT_TRUE(t.ok());
  auto s = (*t)->Run(nullptr, [](const LogRecord& r, const Trainer&) { return r.iteration < 7; });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->iterations, 7);
  EXPECT_EQ(s->termination, "stopped by callback");
  LogRecord r;
  EXPECT_TRUE((*t)->Step(&r).ok());  // training can go on
}

TEST(TrainerTest, DriftStateFollowsTheIteration) {
  Trainer::Options o;
  o.drift = Trainer::Drift::kRotation;
  o.drift_at_iteration = 10;
  o.drift_duration_iterations = 20;
  o.drift_rotation_degrees = 90;
  // Linear from 0 at the drift point to 90 twenty iterations later, then flat.
  EXPECT_EQ(DriftRotationDegrees(o, 9), 0.0);
  EXPECT_EQ(DriftRotationDegrees(o, 10), 0.0);
  EXPECT_DOUBLE_EQ(DriftRotationDegrees(o, 20), 45.0);
  EXPECT_DOUBLE_EQ(DriftRotationDegrees(o, 30), 90.0);
  EXPECT_DOUBLE_EQ(DriftRotationDegrees(o, 5000), 90.0);
  EXPECT_FALSE(DriftSwapsLabels(o, 5000));
  o.drift_duration_iterations = 0;  // at once
  EXPECT_DOUBLE_EQ(DriftRotationDegrees(o, 10), 90.0);
  EXPECT_EQ(DriftRotationDegrees(o, 9), 0.0);

  Samples s;
  s.features = 4;
  s.labels = {0, 6, 2};
  s.pixels = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  o.drift = Trainer::Drift::kLabelSwap;  // default pair: 0 and 6
  EXPECT_FALSE(DriftSwapsLabels(o, 9));
  EXPECT_TRUE(DriftSwapsLabels(o, 10));
  EXPECT_EQ(DriftRotationDegrees(o, 100), 0.0);
  EXPECT_EQ(DriftedSamples(o, s, 9).labels, s.labels);
  EXPECT_EQ(DriftedSamples(o, s, 10).labels, (std::vector<uint8_t>{6, 0, 2}));
  EXPECT_EQ(DriftedSamples(o, s, 10).pixels, s.pixels);
  // Several swaps: undone and redone every 7 iterations from the drift point
  // (swapped 10-16, original 17-23, swapped 24-30, ...): the traffic's state
  // steps at each of them (where a staleness table puts its knots).
  o.drift_swap_period_iterations = 7;
  EXPECT_FALSE(DriftSwapsLabels(o, 9));
  EXPECT_TRUE(DriftSwapsLabels(o, 10));
  EXPECT_TRUE(DriftSwapsLabels(o, 16));
  EXPECT_FALSE(DriftSwapsLabels(o, 17));
  EXPECT_FALSE(DriftSwapsLabels(o, 23));
  EXPECT_TRUE(DriftSwapsLabels(o, 24));
  EXPECT_EQ(DriftedSamples(o, s, 20).labels, s.labels);
  EXPECT_EQ(DriftedSamples(o, s, 24).labels, (std::vector<uint8_t>{6, 0, 2}));
  std::vector<int64_t> steps;
  for (int64_t i = 2; i <= 40; ++i) {
    if (!(DriftTrafficState(o, i) == DriftTrafficState(o, i - 1))) steps.push_back(i);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{10, 17, 24, 31, 38}));
  std::string why;
  EXPECT_TRUE(o.IsValid(&why)) << why;
  o.drift_swap_period_iterations = -1;
  EXPECT_FALSE(o.IsValid(&why));
  EXPECT_NE(why.find("drift_swap_period_iterations must be >= 0"), std::string::npos) << why;
  o.drift_swap_period_iterations = 0;
  // Classes arriving: before the drift the traffic holds only the classes
  // seen so far (0..4 here: the samples of class 6 drop out), from it on all.
  o.drift = Trainer::Drift::kClassIncremental;
  o.drift_initial_classes = 5;
  EXPECT_EQ(DriftedSamples(o, s, 9).labels, (std::vector<uint8_t>{0, 2}));
  EXPECT_EQ(DriftedSamples(o, s, 9).pixels, (std::vector<uint8_t>{1, 2, 3, 4, 9, 10, 11, 12}));
  EXPECT_EQ(DriftedSamples(o, s, 10).labels, s.labels);
  EXPECT_EQ(DriftedSamples(o, s, 10).pixels, s.pixels);
}

// Losses of the first `n` iterations.
std::vector<float> FirstLosses(Trainer* t, int n) {
  std::vector<float> losses;
  LogRecord r;
  for (int i = 0; i < n; ++i) {
    VIPER_CHECK(t->Step(&r).ok());
    losses.push_back(static_cast<float>(*r.train_loss));
  }
  return losses;
}

// From the drift point on, the stream's labels 0 and 6 are exchanged: the
// model learns the swapped mapping, and validation and test are judged on it.
TEST(TrainerTest, LabelSwapSwapsTheStreamAndTheEvaluations) {
  const Samples train = Synthetic(400, 12, 10, 5), val = Synthetic(200, 12, 10, 6), test = Synthetic(200, 12, 10, 7);
  Trainer::Options o = SyntheticOptions();
  o.epochs = 10;
  o.val_every_iterations = 25;
  auto plain = Trainer::Create(o, train, val, test);
  o.drift = Trainer::Drift::kLabelSwap;
  o.drift_at_iteration = 30;
  auto swapped = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(plain.ok() && swapped.ok()) << swapped.status().ToString();
  // The same stream before the drift, bit for bit; another one after it.
  EXPECT_EQ(FirstLosses(plain->get(), 29), FirstLosses(swapped->get(), 29));
  EXPECT_NE(FirstLosses(plain->get(), 20), FirstLosses(swapped->get(), 20));
  Trainer& t = **swapped;
  std::optional<LogRecord> last;
  auto s = t.Run(nullptr, [&](const LogRecord& r, const Trainer&) {
    last = r;
    return true;
  });
  ASSERT_TRUE(s.ok());
  // The logged evaluations are those of the swapped subsets, exactly.
  auto val_now = Evaluate(t.model().state(), t.DriftedView(t.validation(), t.iterations_done()));
  auto test_now = Evaluate(t.model().state(), DriftedSamples(o, t.test(), t.iterations_done()));
  ASSERT_TRUE(val_now.ok() && test_now.ok());
  EXPECT_EQ(*last->val_loss, val_now->mean_loss);
  EXPECT_EQ(*last->test_loss, test_now->mean_loss);
  EXPECT_EQ(*last->test_accuracy, test_now->accuracy);
  EXPECT_EQ(t.Test().mean_loss, test_now->mean_loss);
  EXPECT_GT(test_now->accuracy, 0.8) << s->BriefReport();
  // Judged on the old labels, the model gets classes 0 and 6 wrong: it learnt
  // the swap from the stream.
  auto old_truth = Evaluate(t.model().state(), t.test().FilterClasses({0, 6}));
  auto new_truth = Evaluate(t.model().state(), t.test().FilterClasses({0, 6}).WithLabelsSwapped(0, 6));
  ASSERT_TRUE(old_truth.ok() && new_truth.ok());
  EXPECT_LT(old_truth->accuracy, 0.2);
  EXPECT_GT(new_truth->accuracy, 0.8);
}

// Synthetic 4x4 images (16 features).
TEST(TrainerTest, RotationDriftRotatesTheStreamAndTheEvaluations) {
  const Samples train = Synthetic(400, 16, 10, 5), val = Synthetic(100, 16, 10, 6), test = Synthetic(100, 16, 10, 7);
  Trainer::Options o = SyntheticOptions();
  o.val_every_iterations = 20;
  auto plain = Trainer::Create(o, train, val, test);
  o.drift = Trainer::Drift::kRotation;
  o.drift_at_iteration = 10;  // angle 0 at 10, 45 at 20, 90 from 30 on
  o.drift_duration_iterations = 20;
  o.drift_rotation_degrees = 90;
  auto rotated = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(plain.ok() && rotated.ok()) << rotated.status().ToString();
  EXPECT_EQ(FirstLosses(plain->get(), 10), FirstLosses(rotated->get(), 10));  // angle 0 through 10
  EXPECT_NE(FirstLosses(plain->get(), 9), FirstLosses(rotated->get(), 9));    // 4.5 to 40.5 degrees
  Trainer& t = **rotated;
  LogRecord r;
  ASSERT_TRUE(t.Step(&r).ok());  // 45 degrees, validated and tested
  ASSERT_EQ(r.iteration, 20);
  ASSERT_TRUE(r.val_loss && r.test_loss);
  auto val45 = Evaluate(t.model().state(), t.validation().Rotated(45.0));
  auto test45 = Evaluate(t.model().state(), t.test().Rotated(45.0));
  ASSERT_TRUE(val45.ok() && test45.ok());
  EXPECT_EQ(*r.val_loss, val45->mean_loss);
  EXPECT_EQ(*r.test_loss, test45->mean_loss);
  EXPECT_EQ(t.DriftedView(t.test(), 40).pixels, t.test().Rotated(90.0).pixels);
  // Images that are not square cannot rotate.
  auto flat = Trainer::Create(o, Synthetic(200, 12, 10, 5), Synthetic(20, 12, 10, 6));
  ASSERT_FALSE(flat.ok());
  EXPECT_NE(flat.status().message().find("square"), std::string::npos) << flat.status().message();
}

// Class-incremental traffic on a synthetic set: before the drift the
// validation and test samples the trainer evaluates are exactly those of the
// seen classes, in order; from the drift on, all of them.
TEST(TrainerTest, ClassIncrementalTrafficHoldsOnlySeenClasses) {
  const Samples train = Synthetic(400, 12, 10, 5), val = Synthetic(200, 12, 10, 6), test = Synthetic(300, 12, 10, 7);
  Trainer::Options o = SyntheticOptions();
  o.drift = Trainer::Drift::kClassIncremental;
  o.drift_initial_classes = 3;
  o.drift_at_iteration = 30;
  auto t = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const Samples before = (*t)->DriftedView(test, 29), after = (*t)->DriftedView(test, 30);
  int64_t seen = 0;
  for (uint8_t l : test.labels) seen += l < 3 ? 1 : 0;
  ASSERT_GT(seen, 0);
  ASSERT_LT(seen, test.size());
  EXPECT_EQ(before.size(), seen);
  for (uint8_t l : before.labels) EXPECT_LT(l, 3);
  EXPECT_EQ(before.pixels, test.FilterClasses({0, 1, 2}).pixels);
  EXPECT_EQ(after.labels, test.labels);
  // The logged test loss at 20 (before the drift) is the seen classes' one.
  LogRecord r;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*t)->Step(&r).ok());
  ASSERT_TRUE(r.test_loss.has_value());
  auto seen_only = Evaluate((*t)->model().state(), test.FilterClasses({0, 1, 2}));
  auto all = Evaluate((*t)->model().state(), test);
  ASSERT_TRUE(seen_only.ok() && all.ok());
  EXPECT_EQ(*r.test_loss, seen_only->mean_loss);
  EXPECT_NE(*r.test_loss, all->mean_loss);
}

// Recurring drift from iteration 20 on the synthetic options: `domains`
// domains taking turns every `period` iterations, `degrees` apart.
Trainer::Options RecurringOptions(int64_t period, double degrees, int64_t domains) {
  Trainer::Options o = SyntheticOptions();
  o.drift = Trainer::Drift::kRecurring;
  o.drift_at_iteration = 20;
  o.drift_period_iterations = period;
  o.drift_rotation_degrees = degrees;
  o.drift_domains = domains;
  return o;
}

// Recurring: rotated during periods 0, 2, 4, ... after the drift point,
// upright during 1, 3, ...; the traffic two periods later is the same images,
// byte for byte, one period later the other domain.
TEST(TrainerTest, RecurringDriftReturnsToTheSameImages) {
  const Trainer::Options o = RecurringOptions(15, 90, 2);
  EXPECT_EQ(DriftRotationDegrees(o, 19), 0.0);
  EXPECT_EQ(DriftRotationDegrees(o, 20), 90.0);
  EXPECT_EQ(DriftRotationDegrees(o, 34), 90.0);
  EXPECT_EQ(DriftRotationDegrees(o, 35), 0.0);
  EXPECT_EQ(DriftRotationDegrees(o, 49), 0.0);
  EXPECT_EQ(DriftRotationDegrees(o, 50), 90.0);
  const Samples train = Synthetic(400, 16, 10, 5), val = Synthetic(100, 16, 10, 6), test = Synthetic(100, 16, 10, 7);
  auto t = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (int64_t it : {22, 30, 41, 47}) {
    const Samples now = (*t)->DriftedView(test, it), later = (*t)->DriftedView(test, it + 30);
    EXPECT_EQ(now.pixels, later.pixels) << it;
    EXPECT_EQ(now.labels, later.labels) << it;
    EXPECT_NE(now.pixels, (*t)->DriftedView(test, it + 15).pixels) << it;
  }
  EXPECT_EQ((*t)->DriftedView(test, 25).pixels, test.Rotated(90).pixels);
  EXPECT_EQ((*t)->DriftedView(test, 40).pixels, test.pixels);  // the original domain is back
  // The training stream too: the same as without drift before 20, not after.
  Trainer::Options plain_options = SyntheticOptions();
  auto plain = Trainer::Create(plain_options, train, val, test);
  auto again = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(plain.ok() && again.ok());
  EXPECT_EQ(FirstLosses(plain->get(), 19), FirstLosses(again->get(), 19));
  EXPECT_NE(FirstLosses(plain->get(), 5), FirstLosses(again->get(), 5));
  // Non-square images cannot rotate.
  EXPECT_FALSE(Trainer::Create(o, Synthetic(200, 12, 10, 5), Synthetic(20, 12, 10, 6)).ok());
}

// Three recurring domains: 1x, 2x the angle, then upright, in turn; each
// comes back three periods later, byte for byte, and the periods between
// are the other two.
TEST(TrainerTest, RecurringDriftTakesThreeDomainsInTurn) {
  const Trainer::Options o = RecurringOptions(10, 60, 3);
  EXPECT_EQ(DriftRotationDegrees(o, 19), 0.0);
  EXPECT_EQ(DriftRotationDegrees(o, 20), 60.0);
  EXPECT_EQ(DriftRotationDegrees(o, 29), 60.0);
  EXPECT_EQ(DriftRotationDegrees(o, 30), 120.0);
  EXPECT_EQ(DriftRotationDegrees(o, 40), 0.0);
  EXPECT_EQ(DriftRotationDegrees(o, 50), 60.0);
  const Samples train = Synthetic(400, 16, 10, 5), val = Synthetic(100, 16, 10, 6), test = Synthetic(100, 16, 10, 7);
  auto t = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (int64_t it : {22, 35, 41}) {
    const Samples now = (*t)->DriftedView(test, it);
    EXPECT_EQ(now.pixels, (*t)->DriftedView(test, it + 30).pixels) << it;
    EXPECT_NE(now.pixels, (*t)->DriftedView(test, it + 10).pixels) << it;
    EXPECT_NE(now.pixels, (*t)->DriftedView(test, it + 20).pixels) << it;
  }
  EXPECT_EQ((*t)->DriftedView(test, 35).pixels, test.Rotated(120).pixels);
  EXPECT_EQ((*t)->DriftedView(test, 45).pixels, test.pixels);
}

std::vector<int64_t> ClassCounts(const Samples& s) {
  std::vector<int64_t> counts(10, 0);
  for (uint8_t l : s.labels) ++counts[l];
  return counts;
}

// Prior shift: the traffic keeps its size while the favoured classes' share
// grows linearly from the sample's own to drift_prior_mass.
TEST(TrainerTest, PriorShiftChangesClassFrequenciesGradually) {
  Trainer::Options o = SyntheticOptions();
  o.drift = Trainer::Drift::kPriorShift;
  o.drift_at_iteration = 20;
  o.drift_duration_iterations = 40;
  o.drift_prior_classes = {1, 7};
  o.drift_prior_mass = 0.8;
  EXPECT_EQ(DriftPriorProgress(o, 19), 0.0);
  EXPECT_EQ(DriftPriorProgress(o, 20), 0.0);
  EXPECT_DOUBLE_EQ(DriftPriorProgress(o, 30), 0.25);
  EXPECT_DOUBLE_EQ(DriftPriorProgress(o, 60), 1.0);
  EXPECT_DOUBLE_EQ(DriftPriorProgress(o, 600), 1.0);
  // Target: 0.4 for classes 1 and 7, 0.2 / 8 = 0.025 for each other class.
  const std::vector<double> own(10, 0.1);
  const std::vector<double> half = DriftClassPrior(o, own, 0.5);
  EXPECT_DOUBLE_EQ(half[1], 0.25);
  EXPECT_DOUBLE_EQ(half[0], 0.0625);

  const Samples test = Synthetic(1000, 12, 10, 7);
  EXPECT_EQ(DriftedSamples(o, test, 19).labels, test.labels);
  EXPECT_EQ(DriftedSamples(o, test, 20).labels, test.labels);  // progress 0: unchanged
  const auto own_counts = ClassCounts(test);
  const double own_share = static_cast<double>(own_counts[1] + own_counts[7]) / 1000.0;
  double previous = own_share;
  for (int64_t it : {25, 30, 40, 50, 60, 100}) {
    const Samples drifted = DriftedSamples(o, test, it);
    ASSERT_EQ(drifted.size(), test.size()) << it;
    const auto counts = ClassCounts(drifted);
    const double p = DriftPriorProgress(o, it);
    const double share = static_cast<double>(counts[1] + counts[7]) / 1000.0;
    // Largest remainder: each class within one sample of its quota.
    EXPECT_NEAR(share, (1 - p) * own_share + p * 0.8, 2.0 / 1000.0) << it;
    for (int c = 0; c < 10; ++c) {
      const double own_c = static_cast<double>(own_counts[static_cast<std::size_t>(c)]) / 1000.0;
      const double target = (c == 1 || c == 7) ? 0.4 : 0.025;
      EXPECT_NEAR(static_cast<double>(counts[static_cast<std::size_t>(c)]), 1000.0 * ((1 - p) * own_c + p * target), 1.0)
          << "class " << c << " at " << it;
    }
    EXPECT_GE(share, previous) << it;
    previous = share;
    // Resampled from the set: every image is one of the originals of its class.
    for (int64_t i = 0; i < drifted.size(); i += 97) {
      bool found = false;
      for (int64_t j = 0; j < test.size() && !found; ++j) {
        found = test.labels[static_cast<std::size_t>(j)] == drifted.labels[static_cast<std::size_t>(i)] &&
                std::equal(drifted.pixels.begin() + i * 12, drifted.pixels.begin() + (i + 1) * 12,
                           test.pixels.begin() + j * 12);
      }
      EXPECT_TRUE(found) << "sample " << i << " at " << it;
    }
  }
  EXPECT_NEAR(previous, 0.8, 2.0 / 1000.0);
  // Deterministic, and the classes are interleaved: the first 100 of the
  // fully shifted sample already hold the favoured classes at about 80%.
  EXPECT_EQ(DriftedSamples(o, test, 70).labels, DriftedSamples(o, test, 90).labels);
  const auto head = ClassCounts(DriftedSamples(o, test, 70).Subset([] {
    std::vector<int64_t> v(100);
    for (int64_t i = 0; i < 100; ++i) v[static_cast<std::size_t>(i)] = i;
    return v;
  }()));
  EXPECT_NEAR(static_cast<double>(head[1] + head[7]), 80.0, 2.0);

  // The training stream: the plain one before the drift, then drawn by class.
  const Samples train = Synthetic(400, 12, 10, 5), val = Synthetic(100, 12, 10, 6);
  auto plain = Trainer::Create(SyntheticOptions(), train, val, test);
  auto shifted = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(plain.ok() && shifted.ok()) << shifted.status().ToString();
  EXPECT_EQ(FirstLosses(plain->get(), 19), FirstLosses(shifted->get(), 19));
  EXPECT_NE(FirstLosses(plain->get(), 20), FirstLosses(shifted->get(), 20));
  auto again = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(again.ok());
  auto third = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(FirstLosses(again->get(), 80), FirstLosses(third->get(), 80));  // deterministic
}

// A labelled run under a label swap with the staleness table on: the table's
// diagonal is the log's validation and test columns bit for bit, an entry off
// the diagonal is the kept version evaluated on the later traffic (checked
// against an independent evaluation of a copy taken during the run), and a
// version from before the swap costs more on the swapped traffic than it did
// on its own.
TEST(TrainerTest, StalenessTableDiagonalIsTheLogAndOldVersionsDecay) {
  const Samples train = Synthetic(400, 12, 10, 5), val = Synthetic(200, 12, 10, 6), test = Synthetic(200, 12, 10, 7);
  Trainer::Options o = SyntheticOptions();
  o.epochs = 3;  // 50 iterations per epoch (400 / 8): 150
  o.drift = Trainer::Drift::kLabelSwap;
  o.drift_at_iteration = 61;
  o.staleness_table = true;
  auto t = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<LogRecord> points;
  std::optional<ModelState> at40;
  auto s = (*t)->Run(nullptr, [&](const LogRecord& r, const Trainer& tr) {
    if (r.val_loss) points.push_back(r);
    if (r.iteration == 40) at40 = tr.model().Clone().state();
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(points.size(), 15u);  // 10, 20, ..., 150
  const StalenessTable table = (*t)->staleness_table();
  // One row per pair v <= t of validation points: 15 * 16 / 2.
  ASSERT_EQ(table.records.size(), 120u);
  EXPECT_EQ(s->staleness_rows, 120);
  EXPECT_EQ(s->staleness_versions_kept, 15);
  EXPECT_EQ(s->staleness_bytes_peak, 15 * (*t)->model().SizeBytes());
  EXPECT_GT(s->staleness_evaluations_reused, 0);  // the traffic is the same before 61 and after
  EXPECT_EQ(s->staleness_evaluations + s->staleness_evaluations_reused, 120);
  std::map<std::pair<int64_t, int64_t>, StalenessRecord> cell;
  for (std::size_t k = 0; k < table.records.size(); ++k) {
    const auto& r = table.records[k];
    EXPECT_LE(r.version_iteration, r.traffic_iteration);
    if (k > 0) {
      const auto& p = table.records[k - 1];
      EXPECT_TRUE(std::make_pair(p.version_iteration, p.traffic_iteration) <
                  std::make_pair(r.version_iteration, r.traffic_iteration));
    }
    cell[{r.version_iteration, r.traffic_iteration}] = r;
  }
  auto at = [&](int64_t v, int64_t traffic) { return cell.at({v, traffic}); };
  for (const LogRecord& p : points) {
    ASSERT_TRUE(cell.count({p.iteration, p.iteration})) << p.iteration;
    const StalenessRecord& d = cell[{p.iteration, p.iteration}];
    EXPECT_EQ(d.val_loss, *p.val_loss) << p.iteration;
    EXPECT_EQ(d.test_loss, *p.test_loss) << p.iteration;
    EXPECT_EQ(*d.val_accuracy, *p.val_accuracy) << p.iteration;
    EXPECT_EQ(*d.test_accuracy, *p.test_accuracy) << p.iteration;
  }
  // Version 40 on the traffic of 100 (swapped), recomputed from the copy.
  ASSERT_TRUE(at40.has_value());
  auto independent = Evaluate(*at40, DriftedSamples(o, test, 100));
  ASSERT_TRUE(independent.ok());
  EXPECT_EQ(at(40, 100).test_loss, independent->mean_loss);
  // Before the swap the traffic does not change: version 40 costs the same at 60.
  EXPECT_EQ(at(40, 60).test_loss, at(40, 40).test_loss);
  // After it, the old version is worse than on its own traffic (from the
  // first point after the swap on), and worse than a version that has trained
  // on the swapped labels for 40 iterations or more.
  for (int64_t later : {70, 100, 150}) {
    EXPECT_GT(at(40, later).test_loss, at(40, 40).test_loss) << later;
    EXPECT_GT(at(40, later).val_loss, at(40, 40).val_loss) << later;
    EXPECT_LT(*at(40, later).test_accuracy, *at(40, 40).test_accuracy) << later;
    if (later >= 100) {
      EXPECT_GT(at(40, later).test_loss, at(later, later).test_loss) << later;
    }
  }
  // The table writer: plain and gzip, the same text.
  for (const std::string name : {"table.csv", "table.csv.gz"}) {
    const std::string path = TempPath(name);
    ASSERT_TRUE(WriteStalenessTable(table, path).ok());
    gzFile f = gzopen(path.c_str(), "rb");  // reads plain files transparently
    ASSERT_NE(f, nullptr);
    std::string text;
    char buf[4096];
    int n = 0;
    while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
    gzclose(f);
    EXPECT_EQ(text, FormatStalenessCsv(table)) << name;
    EXPECT_EQ(text.substr(0, text.find('\n')),
              "version_iteration,traffic_iteration,val_loss,val_accuracy,test_loss,test_accuracy");
    fs::remove(path);
  }
}

// Deferred (the live producer's way): versions are only kept during the run
// and evaluated after it. Unbounded, the table is the immediate one bit for
// bit; bounded, it holds the immediate table's rows of the versions kept at
// the end, and no others.
TEST(TrainerTest, DeferredStalenessTableEqualsTheImmediateOne) {
  const Samples train = Synthetic(400, 12, 10, 5), val = Synthetic(60, 12, 10, 6), test = Synthetic(60, 12, 10, 7);
  for (int64_t max_versions : {0, 4}) {
    Trainer::Options o = SyntheticOptions();
    o.epochs = 2;  // 100 iterations, 10 validation points
    o.drift = Trainer::Drift::kPriorShift;  // the traffic changes at every point from 31 to 71
    o.drift_at_iteration = 31;
    o.drift_duration_iterations = 40;
    o.staleness_table = true;
    o.staleness_max_versions = max_versions;
    auto immediate = Trainer::Create(o, train, val, test);
    o.staleness_deferred = true;
    auto deferred = Trainer::Create(o, train, val, test);
    ASSERT_TRUE(immediate.ok() && deferred.ok()) << deferred.status().ToString();
    ASSERT_TRUE((*immediate)->Run(nullptr).ok());
    LogRecord r;
    while (!(*deferred)->done()) ASSERT_TRUE((*deferred)->Step(&r).ok());
    EXPECT_TRUE((*deferred)->staleness_table().records.empty()) << "nothing evaluated during the run";
    StalenessTable d = (*deferred)->FinishStalenessTable();
    const std::size_t all_rows = d.records.size();
    const StalenessTable i = (*immediate)->staleness_table();
    // The deferred table adds knots around the prior shift's kinks (its
    // start at 31/32 and end at 70/71, off the validation points): rows on
    // traffic that is not a validation point are compared apart.
    std::vector<StalenessRecord> at_points;
    int64_t knots = 0;
    for (const auto& row : d.records) {
      if (row.traffic_iteration % 10 == 0) {
        at_points.push_back(row);
      } else {
        ++knots;
        EXPECT_TRUE(row.traffic_iteration == 31 || row.traffic_iteration == 32 || row.traffic_iteration == 70 ||
                    row.traffic_iteration == 71) << row.traffic_iteration;
      }
    }
    EXPECT_GT(knots, 0);
    d.records = at_points;
    const std::vector<int64_t> kept = (*deferred)->staleness_versions();
    std::vector<StalenessRecord> expected;
    for (const auto& row : i.records) {
      if (std::find(kept.begin(), kept.end(), row.version_iteration) != kept.end()) expected.push_back(row);
    }
    if (max_versions == 0) {
      EXPECT_EQ(expected.size(), i.records.size());
    }
    EXPECT_EQ(FormatStalenessCsv(d), FormatStalenessCsv(StalenessTable{i.source, expected})) << max_versions;
    EXPECT_EQ((*deferred)->FinishStalenessTable().records.size(), all_rows) << "idempotent";
  }
}

// KeepCurrentVersion (the live producer's published versions): a version
// kept between validation points gets its own row on its own traffic and on
// every later point's, each the kept copy evaluated on that traffic; a
// validation point is kept already, and a bounded table keeps no extras.
TEST(TrainerTest, KeepCurrentVersionAddsExactRowsOffTheValidationGrid) {
  const Samples train = Synthetic(400, 12, 10, 5), val = Synthetic(60, 12, 10, 6), test = Synthetic(60, 12, 10, 7);
  Trainer::Options o = SyntheticOptions();
  o.epochs = 2;  // 100 iterations, validation every 10
  o.drift = Trainer::Drift::kPriorShift;
  o.drift_at_iteration = 31;
  o.drift_duration_iterations = 40;
  o.staleness_table = true;
  o.staleness_deferred = true;
  for (int64_t max_versions : {0, 4}) {
    o.staleness_max_versions = max_versions;
    auto t = Trainer::Create(o, train, val, test);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    LogRecord r;
    std::optional<ModelState> at33;
    while (!(*t)->done()) {
      ASSERT_TRUE((*t)->Step(&r).ok());
      // 40 is a validation point; 71 is the knot after the shift's end (a
      // version published there once got its diagonal row twice).
      if (r.iteration == 33 || r.iteration == 40 || r.iteration == 71) (*t)->KeepCurrentVersion();
      if (r.iteration == 33) at33 = (*t)->model().Clone().state();
    }
    const StalenessTable table = (*t)->FinishStalenessTable();
    std::map<int64_t, double> row33;
    int64_t rows40 = 0, rows71 = 0;
    std::set<std::pair<int64_t, int64_t>> pairs;
    for (const auto& x : table.records) {
      if (x.version_iteration == 33) row33[x.traffic_iteration] = x.test_loss;
      if (x.version_iteration == 40) ++rows40;
      if (x.version_iteration == 71) ++rows71;
      EXPECT_TRUE(pairs.insert({x.version_iteration, x.traffic_iteration}).second)
          << "pair (" << x.version_iteration << ", " << x.traffic_iteration << ") twice";
    }
    if (max_versions != 0) {
      EXPECT_TRUE(row33.empty()) << "a bounded table keeps no extra versions";
      EXPECT_EQ((*t)->staleness_extra_versions(), 0);
      continue;
    }
    EXPECT_EQ((*t)->staleness_extra_versions(), 2) << "40 was kept as a validation point already";
    EXPECT_EQ(rows71, 4);  // 71 (once), 80, 90, 100
    EXPECT_EQ(rows40, 8);  // 40, 50, ..., 100 and 71 (the knot after the shift's end at 70/71)
    // 33 on its own traffic, on 40, 50, ..., 100 and on 71.
    ASSERT_EQ(row33.size(), 9u);
    EXPECT_EQ(row33.begin()->first, 33);
    ASSERT_TRUE(at33.has_value());
    for (int64_t traffic : {33, 60, 100}) {
      auto independent = Evaluate(*at33, DriftedSamples(o, test, traffic));
      ASSERT_TRUE(independent.ok());
      EXPECT_EQ(row33.at(traffic), independent->mean_loss) << traffic;
    }
  }
}

// With a bound on the kept versions the table thins them evenly and always
// keeps the newest; without one it keeps them all.
TEST(TrainerTest, StalenessMaxVersionsBoundsTheKeptVersions) {
  const Samples train = Synthetic(400, 12, 10, 5), val = Synthetic(50, 12, 10, 6), test = Synthetic(50, 12, 10, 7);
  Trainer::Options o = SyntheticOptions();
  o.epochs = 4;                // 50 iterations per epoch (400 / 8): 200
  o.val_every_iterations = 5;  // 40 validation points
  o.staleness_table = true;
  o.staleness_max_versions = 6;
  auto t = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  int64_t rows_expected = 0;
  auto s = (*t)->Run(nullptr, [&](const LogRecord& r, const Trainer& tr) {
    if (!r.val_loss) return true;
    const std::vector<int64_t> kept = tr.staleness_versions();
    EXPECT_LE(kept.size(), 6u) << r.iteration;
    EXPECT_LE(tr.staleness_bytes(), 6 * tr.model().SizeBytes());
    EXPECT_EQ(kept.back(), r.iteration);  // the newest is always kept
    EXPECT_EQ(kept.front(), 5);           // the first point is on every stride
    // Evenly spaced, apart from the newest.
    for (std::size_t k = 2; k + 1 < kept.size(); ++k) {
      EXPECT_EQ(kept[k] - kept[k - 1], kept[1] - kept[0]) << r.iteration;
    }
    rows_expected += static_cast<int64_t>(kept.size());
    return true;
  });
  ASSERT_TRUE(s.ok());
  EXPECT_LE(s->staleness_versions_peak, 6);
  EXPECT_GE(s->staleness_versions_peak, 5);
  EXPECT_EQ(s->staleness_rows, rows_expected);
  EXPECT_EQ(static_cast<int64_t>((*t)->staleness_table().records.size()), rows_expected);
  EXPECT_LT(rows_expected, 40 * 41 / 2);
  // Kept at the end: the stride has doubled to 8 points (40 iterations).
  EXPECT_EQ((*t)->staleness_versions(), (std::vector<int64_t>{5, 45, 85, 125, 165, 200}));
  // Unbounded: all 40 versions, all 820 pairs.
  o.staleness_max_versions = 0;
  auto all = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(all.ok());
  auto s_all = (*all)->Run(nullptr);
  ASSERT_TRUE(s_all.ok());
  EXPECT_EQ(s_all->staleness_versions_kept, 40);
  EXPECT_EQ(s_all->staleness_rows, 40 * 41 / 2);
  // Without the option there is no table.
  o.staleness_table = false;
  auto none = Trainer::Create(o, train, val, test);
  ASSERT_TRUE(none.ok());
  ASSERT_TRUE((*none)->Run(nullptr).ok());
  EXPECT_TRUE((*none)->staleness_table().empty());
}

TEST(TrainerTest, LogWriterWritesGzipCsvTheReaderAccepts) {
  const std::string path = TempPath("log.csv.gz");
  {
    Trainer::Options o = SyntheticOptions();
    o.max_iterations = 30;
    auto t = Trainer::Create(o, Synthetic(200, 12, 10, 5), Synthetic(20, 12, 10, 6), Synthetic(30, 12, 10, 7));
    ASSERT_TRUE(t.ok());
    auto log = TrainingLogWriter::Open(path);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    ASSERT_TRUE((*t)->Run(log->get()).ok());
    ASSERT_TRUE((*log)->Close().ok());
  }
  // The file really is gzip (magic 1f 8b) ...
  std::ifstream raw(path, std::ios::binary);
  unsigned char magic[2] = {};
  raw.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
  // ... and the datasets reader parses it: 30 rows, validation at 10, 20, 30.
  auto log = datasets::LogReader::ReadFile(path, {});
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  ASSERT_EQ(log->records.size(), 30u);
  EXPECT_EQ(log->records[0].iteration, 1);
  EXPECT_FALSE(log->records[0].val_loss.has_value());
  EXPECT_TRUE(log->records[9].val_loss.has_value());
  EXPECT_TRUE(log->records[29].val_accuracy.has_value());
  EXPECT_TRUE(log->records[29].wall_time_s.has_value());
  // The test columns sit next to the validation ones, filled at the same rows.
  EXPECT_FALSE(log->records[0].test_loss.has_value());
  EXPECT_TRUE(log->records[9].test_loss.has_value());
  EXPECT_TRUE(log->records[29].test_accuracy.has_value());
  EXPECT_NE(*log->records[29].test_loss, *log->records[29].val_loss);  // another sample
  fs::remove(path);
}

// A 28x28 image with distinct values everywhere (no symmetry hides a wrong map).
Samples Gradient28(int count) {
  Samples s;
  s.labels.assign(static_cast<std::size_t>(count), 3);
  for (int i = 0; i < count; ++i) {
    for (int64_t p = 0; p < kFashionMnistFeatures; ++p) s.pixels.push_back(static_cast<uint8_t>((p * 7 + i * 13) % 251));
  }
  return s;
}

TEST(FashionMnistTest, RotationByZeroIsTheIdentity) {
  const Samples s = Gradient28(2);
  EXPECT_EQ(s.Rotated(0.0).pixels, s.pixels);
  Eigen::MatrixXf in, out;
  std::vector<int32_t> labels;
  s.GatherAll(&in, &labels);
  out = in;
  RotateImages(&out, 0.0);
  EXPECT_EQ(out, in);
  // 360 degrees lands on the same pixels up to sin/cos rounding.
  const Samples back = s.Rotated(360.0);
  for (std::size_t k = 0; k < s.pixels.size(); ++k) EXPECT_NEAR(back.pixels[k], s.pixels[k], 1) << k;
}

// 90 degrees counter-clockwise as displayed: out[r][c] = in[c][27 - r]
// (transpose of the image flipped left-right; numpy's rot90); 180 degrees
// flips both axes.
TEST(FashionMnistTest, RotationBy90IsATransposeAndFlip) {
  const Samples s = Gradient28(2);
  const int64_t n = kFashionMnistImageSide;
  const Samples r90 = s.Rotated(90.0), r180 = s.Rotated(180.0), rm90 = s.Rotated(-90.0);
  Eigen::MatrixXf floats;
  std::vector<int32_t> labels;
  s.GatherAll(&floats, &labels);
  RotateImages(&floats, 90.0);
  for (int i = 0; i < 2; ++i) {
    const uint8_t* in = s.pixels.data() + i * kFashionMnistFeatures;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        const std::size_t at = static_cast<std::size_t>(i * kFashionMnistFeatures + r * n + c);
        EXPECT_NEAR(r90.pixels[at], in[c * n + (n - 1 - r)], 1) << "image " << i << " (" << r << ", " << c << ")";
        EXPECT_NEAR(rm90.pixels[at], in[(n - 1 - c) * n + r], 1) << "image " << i << " (" << r << ", " << c << ")";
        EXPECT_NEAR(r180.pixels[at], in[(n - 1 - r) * n + (n - 1 - c)], 1);
        EXPECT_NEAR(floats(r * n + c, i), in[c * n + (n - 1 - r)] / 255.0f, 1e-4f);
      }
    }
  }
  EXPECT_EQ(r90.labels, s.labels);  // rotation leaves labels alone
}

TEST(FashionMnistTest, RotationBy45KeepsTheCentreAndBlanksTheCorners) {
  Samples s;
  s.labels = {0};
  s.pixels.assign(static_cast<std::size_t>(kFashionMnistFeatures), 200);
  const Samples r = s.Rotated(45.0);
  EXPECT_EQ(r.pixels[14 * 28 + 14], 200);  // inside the rotated square
  EXPECT_EQ(r.pixels[0], 0);                // the corner comes from outside the image
  EXPECT_EQ(r.pixels[27 * 28 + 27], 0);
}

TEST(FashionMnistTest, WithLabelsSwappedExchangesTwoClasses) {
  Samples s;
  s.features = 1;
  s.labels = {0, 6, 3, 6, 0, 9};
  s.pixels = {1, 2, 3, 4, 5, 6};
  const Samples w = s.WithLabelsSwapped(0, 6);
  EXPECT_EQ(w.labels, (std::vector<uint8_t>{6, 0, 3, 0, 6, 9}));
  EXPECT_EQ(w.pixels, s.pixels);
}

TEST(FashionMnistTest, MissingDirectoryGivesAClearError) {
  auto r = LoadFashionMnist("/nonexistent/fashion", FashionMnistSplit::kTrain);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("/nonexistent/fashion/train-images-idx3-ubyte.gz"), std::string::npos) << m;
  EXPECT_NE(m.find("dataset-fashion-mnist"), std::string::npos) << m;
  Trainer::Options o;
  o.dataset_dir = "/nonexistent/fashion";
  EXPECT_FALSE(Trainer::Create(o).ok());
}

TEST(FashionMnistTest, CorruptFilesAreRejectedNamingFileAndExpectation) {
  const std::string images = TempPath("images.gz"), labels = TempPath("labels.gz");
  auto write_gz = [](const std::string& path, const std::vector<uint8_t>& bytes) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    gzclose(f);
  };
  // Two 28x28 images, two labels: valid.
  std::vector<uint8_t> img = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28};
  img.resize(16 + 2 * 784, 7);
  std::vector<uint8_t> lab = {0, 0, 8, 1, 0, 0, 0, 2, 3, 9};
  write_gz(images, img);
  write_gz(labels, lab);
  auto ok = LoadIdxPair(images, labels);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->size(), 2);
  EXPECT_EQ(ok->labels[1], 9);

  auto expect_error = [&](const std::string& file, const char* what) {
    auto r = LoadIdxPair(images, labels);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(file), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  std::vector<uint8_t> bad = img;
  bad[3] = 1;  // magic 2049 is a label file
  write_gz(images, bad);
  expect_error(images, "expected 2051");
  bad = img;
  bad.resize(bad.size() - 1);  // truncated pixels
  write_gz(images, bad);
  expect_error(images, "header announces 2 images");
  write_gz(images, img);
  std::vector<uint8_t> bad_labels = lab;
  bad_labels[9] = 10;  // not a class
  write_gz(labels, bad_labels);
  expect_error(labels, "label 10 of sample 1");
  bad_labels = {0, 0, 8, 1, 0, 0, 0, 1, 3};  // one label for two images
  write_gz(labels, bad_labels);
  expect_error(labels, "holds 1 labels");
  fs::remove(images);
  fs::remove(labels);
}

TEST(FashionMnistTest, RealFilesLoad) {
  SKIP_WITHOUT_DATASET();
  auto train = LoadFashionMnist(DefaultFashionMnistDir(), FashionMnistSplit::kTrain);
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  EXPECT_EQ(train->size(), 60000);  // the published split sizes
  auto test = LoadFashionMnist(DefaultFashionMnistDir(), FashionMnistSplit::kTest, 1000);
  ASSERT_TRUE(test.ok());
  EXPECT_EQ(test->size(), 1000);
  // Fashion-MNIST is balanced: 6,000 training images per class.
  std::vector<int> counts(10, 0);
  for (uint8_t l : train->labels) ++counts[l];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[static_cast<std::size_t>(c)], 6000) << FashionMnistClassName(c);
}

TEST(TrainerTest, LearnsOnARealSubset) {
  SKIP_WITHOUT_DATASET();
  Trainer::Options o;
  o.train_samples = 3000;
  o.val_samples = 500;
  o.hidden_widths = {64};
  o.epochs = 3;  // 3 * 46 = 138 iterations
  o.val_every_iterations = 1000;
  auto t = Trainer::Create(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const Evaluation before = (*t)->Validate();
  auto s = (*t)->Run(nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->iterations, 138);
  // Chance is 10% accuracy and ln(10) = 2.30 loss; an MLP on 3,000 images
  // reaches about 75-80% after 3 epochs. 0.65 leaves room for platform noise.
  EXPECT_LT(before.accuracy, 0.3);
  EXPECT_GT(*s->last_val_accuracy, 0.65) << s->BriefReport();
  EXPECT_LT(*s->last_val_loss, 0.5 * before.mean_loss) << s->BriefReport();
}

// Validation and test are disjoint slices of the test split: the first
// val_samples images, then the next test_samples.
TEST(TrainerTest, EvaluationSetsAreDisjointSlicesOfTheTestSplit) {
  SKIP_WITHOUT_DATASET();
  Trainer::Options o;
  o.val_samples = 300;
  o.test_samples = 500;
  auto sets = Trainer::LoadEvaluationSets(o);
  ASSERT_TRUE(sets.ok()) << sets.status().ToString();
  auto split = LoadFashionMnist(DefaultFashionMnistDir(), FashionMnistSplit::kTest, 800);
  ASSERT_TRUE(split.ok());
  ASSERT_EQ(sets->validation.size(), 300);
  ASSERT_EQ(sets->test.size(), 500);
  std::vector<int64_t> first(300), next(500);
  for (int64_t i = 0; i < 300; ++i) first[static_cast<std::size_t>(i)] = i;
  for (int64_t i = 0; i < 500; ++i) next[static_cast<std::size_t>(i)] = 300 + i;
  EXPECT_EQ(sets->validation.pixels, split->Subset(first).pixels);
  EXPECT_EQ(sets->test.pixels, split->Subset(next).pixels);
  EXPECT_EQ(sets->test.labels, split->Subset(next).labels);
  // The trainer holds the same subsets and evaluates both when it validates.
  o.train_samples = 640;
  o.hidden_widths = {16};
  o.epochs = 1;
  o.val_every_iterations = 5;
  auto t = Trainer::Create(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->test().pixels, sets->test.pixels);
  EXPECT_EQ((*t)->validation().pixels, sets->validation.pixels);
  auto s = (*t)->Run(nullptr);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->last_test_loss.has_value());
  EXPECT_EQ(*s->last_test_loss, (*t)->Test().mean_loss);
  EXPECT_NE(*s->last_test_loss, *s->last_val_loss);
  EXPECT_GT(s->test_seconds, 0.0);
  // Without log_test the subset stays available but the records leave it out.
  o.log_test = false;
  t = Trainer::Create(o);
  ASSERT_TRUE(t.ok());
  s = (*t)->Run(nullptr);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->last_test_loss.has_value());
  EXPECT_TRUE(s->last_val_loss.has_value());
  EXPECT_EQ((*t)->test().size(), 500);
}

// Before the drift the stream holds classes 0-4 only, so the model cannot
// predict classes 5-9: its accuracy on the whole 10-class validation set stays
// at or below the share of classes 0-4 in it. The logged validation (the
// traffic before the drift) holds only classes 0-4, on which it does well.
// After the drift it learns them all.
TEST(TrainerTest, ClassIncrementalDriftReallyHidesClasses) {
  SKIP_WITHOUT_DATASET();
  Trainer::Options o;
  o.train_samples = 4000;
  o.val_samples = 1000;
  o.hidden_widths = {64};
  o.epochs = 4;
  o.drift = Trainer::Drift::kClassIncremental;
  o.drift_at_iteration = 80;
  o.val_every_iterations = 79;  // validate right before the drift
  auto t = Trainer::Create(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->ActiveClasses(79), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ((*t)->ActiveClasses(80).size(), 10u);
  double share_old = 0;
  for (uint8_t l : (*t)->validation().labels) share_old += l < 5 ? 1.0 : 0.0;
  share_old /= static_cast<double>((*t)->validation().size());
  std::optional<double> acc_before_drift, logged_before_drift, logged_loss_before_drift, seen_loss_before_drift;
  auto s = (*t)->Run(nullptr, [&](const LogRecord& r, const Trainer& tr) {
    if (r.iteration == 79) {
      auto all = Evaluate(tr.model().state(), tr.validation());
      auto seen = Evaluate(tr.model().state(), tr.validation().FilterClasses({0, 1, 2, 3, 4}));
      VIPER_CHECK(all.ok() && seen.ok());
      acc_before_drift = all->accuracy;
      seen_loss_before_drift = seen->mean_loss;
      logged_before_drift = r.val_accuracy;
      logged_loss_before_drift = r.val_loss;
    }
    return true;
  });
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(acc_before_drift.has_value());
  EXPECT_LE(*acc_before_drift, share_old + 1e-9);
  EXPECT_GT(*acc_before_drift, 0.6 * share_old);  // it did learn the old classes
  // The log's validation before the drift is that of the seen classes only.
  EXPECT_EQ(*logged_loss_before_drift, *seen_loss_before_drift);
  EXPECT_GT(*logged_before_drift, 0.6);
  EXPECT_GT(*logged_before_drift, *acc_before_drift + 0.1);
  EXPECT_GT(*s->last_val_accuracy, share_old + 0.1) << s->BriefReport();
}

TEST(TrainerTest, ModelStateSurvivesSafetensorsAndEvaluatesTheSame) {
  SKIP_WITHOUT_DATASET();
  auto val = LoadFashionMnist(DefaultFashionMnistDir(), FashionMnistSplit::kTest, 300);
  ASSERT_TRUE(val.ok());
  Mlp::Options o;
  o.hidden_widths = {32};
  auto mlp = Mlp::Create(o, 9);
  ASSERT_TRUE(mlp.ok());
  auto bytes = safetensors::Serialize(mlp->state());
  if (!bytes.ok() && bytes.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << bytes.status().ToString();
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto parsed = safetensors::Parse(std::move(bytes).value());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto a = Evaluate(mlp->state(), *val);
  auto b = Evaluate(*parsed, *val);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->mean_loss, b->mean_loss);  // the same bytes give the same numbers
  EXPECT_EQ(a->accuracy, b->accuracy);
}

// The shipped main log was made with (datasets/README.md, logs/make_logs.sh):
//   viper train --hidden 256 --optimizer sgd --lr 0.05 --momentum 0.9
//     --batch 64 --epochs 5 --seed 1 --val-every 50 --val-samples 2000
//     --test-samples 5000
// Re-running its first 50 iterations must give the same losses: float32
// rounding differences between compilers/CPUs are far below 1e-4.
TEST(TrainerTest, ReproducesTheShippedMainLog) {
  SKIP_WITHOUT_DATASET();
  const std::string path = std::string(VIPER_TEST_SOURCE_DIR) + "/datasets/logs/sgd-h256.csv.gz";
  ASSERT_TRUE(fs::exists(path)) << path << " is missing";
  auto log = datasets::LogReader::ReadFile(path, {});
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  ASSERT_GE(log->records.size(), 50u);
  Trainer::Options o;
  o.hidden_widths = {256};
  o.optimizer = Trainer::Optimizer::kSgd;
  o.learning_rate = 0.05;
  o.momentum = 0.9;
  o.batch_size = 64;
  o.epochs = 5;
  o.seed = 1;
  o.val_every_iterations = 50;
  o.val_samples = 2000;
  o.test_samples = 5000;
  auto t = Trainer::Create(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  LogRecord r;
  for (std::size_t i = 0; i < 50; ++i) {
    ASSERT_TRUE((*t)->Step(&r).ok());
    const LogRecord& shipped = log->records[i];
    ASSERT_EQ(r.iteration, shipped.iteration);
    EXPECT_EQ(*r.epoch, *shipped.epoch);
    EXPECT_NEAR(*r.train_loss, *shipped.train_loss, 1e-4 * std::abs(*shipped.train_loss))
        << "iteration " << r.iteration;
    EXPECT_EQ(r.val_loss.has_value(), shipped.val_loss.has_value()) << "iteration " << r.iteration;
    EXPECT_EQ(r.test_loss.has_value(), shipped.test_loss.has_value()) << "iteration " << r.iteration;
  }
  const LogRecord& at50 = log->records[49];
  ASSERT_TRUE(r.val_loss && at50.val_loss);
  EXPECT_NEAR(*r.val_loss, *at50.val_loss, 1e-4);
  EXPECT_NEAR(*r.val_accuracy, *at50.val_accuracy, 1.5e-3);  // at most 3 samples of 2000 flip
  ASSERT_TRUE(r.test_loss && at50.test_loss) << "the shipped log lacks the test column";
  EXPECT_NEAR(*r.test_loss, *at50.test_loss, 1e-4);
  EXPECT_NEAR(*r.test_accuracy, *at50.test_accuracy, 1e-3);  // at most 5 samples of 5000 flip
}

}  // namespace
}  // namespace workflow
}  // namespace viper
