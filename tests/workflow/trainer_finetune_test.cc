// Tests of fine-tuning in the trainer: starting from saved parameters
// (Options::init_model_path) and frozen tensors (freeze_layers,
// freeze_tensors). Synthetic data only: no dataset needed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "viper/core/safetensors.h"
#include "viper/workflow/mlp.h"
#include "viper/workflow/trainer.h"
#include "synthetic_samples.h"

namespace viper {
namespace workflow {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / ("viper_finetune_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

using synthetic::Synthetic;

Trainer::Options SmallOptions() {
  Trainer::Options o;
  o.hidden_widths = {16, 16};
  o.batch_size = 8;
  o.epochs = 2;
  o.val_every_iterations = 10;
  return o;
}

std::vector<float> Values(const Mlp& m, int index) {
  return std::vector<float>(m.parameter(index), m.parameter(index) + m.parameter_size(index));
}

bool SameBytes(const std::vector<float>& a, const float* b) {
  return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

// Writes `state` to a temporary file; skips the test where the codec is
// unavailable (as trainer_test.cc does).
#define WRITE_OR_SKIP(state, path)                                                       \
  do {                                                                                   \
    Status st_ = safetensors::WriteFileAtomic(state, path);                              \
    if (st_.code() == StatusCode::kUnavailable) GTEST_SKIP() << st_.ToString();          \
    ASSERT_TRUE(st_.ok()) << st_.ToString();                                             \
  } while (0)

TEST(TrainerFinetuneTest, FreezeOptionsAreCheckedNamingTheField) {
  std::string error;
  Trainer::Options o = SmallOptions();  // 3 layers: 0, 2, 4
  o.freeze_layers = 2;
  o.freeze_tensors = {"4.bias"};
  EXPECT_TRUE(o.IsValid(&error)) << error;  // 4.weight still trains
  o.freeze_layers = 3;                      // the output layer too
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_EQ(error.rfind("freeze_layers must be in [0, 2]", 0), 0u) << error;
  o.freeze_layers = -1;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_EQ(error.rfind("freeze_layers", 0), 0u) << error;
  o.freeze_layers = 0;
  o.freeze_tensors = {"6.weight"};  // layer 3 does not exist
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_EQ(error.rfind("freeze_tensors", 0), 0u) << error;
  EXPECT_NE(error.find("'6.weight'"), std::string::npos) << error;
  EXPECT_NE(error.find("4.bias"), std::string::npos) << "the message lists the valid names: " << error;
  o.freeze_tensors = {"0.weight", "0.weight"};
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("twice"), std::string::npos) << error;
  o.freeze_layers = 2;
  o.freeze_tensors = {"4.weight", "4.bias"};  // everything
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("at least one must train"), std::string::npos) << error;
}

// The frozen tensors keep their bytes through every iteration, with SGD
// momentum and with Adam (whose moments would move them if they were kept),
// while the same run without freezing moves them (so the check can fail).
TEST(TrainerFinetuneTest, FrozenTensorsAreBitIdenticalAcrossIterations) {
  const Samples train = Synthetic(160, 12, 10, 5), val = Synthetic(40, 12, 10, 6);
  for (auto optimizer : {Trainer::Optimizer::kSgd, Trainer::Optimizer::kAdam}) {
    SCOPED_TRACE(Trainer::ToString(optimizer));
    Trainer::Options o = SmallOptions();
    o.optimizer = optimizer;
    if (optimizer == Trainer::Optimizer::kAdam) o.learning_rate = 0.003;
    o.freeze_layers = 1;             // 0.weight, 0.bias
    o.freeze_tensors = {"2.bias"};   // and one more by name
    auto t = Trainer::Create(o, train, val);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    Trainer& tr = **t;
    EXPECT_EQ(tr.frozen_tensors(), (std::vector<std::string>{"0.weight", "0.bias", "2.bias"}));
    EXPECT_EQ(tr.frozen_parameters(), 16 * 12 + 16 + 16);
    std::vector<std::vector<float>> before;
    for (int i = 0; i < tr.model().num_parameter_tensors(); ++i) before.push_back(Values(tr.model(), i));
    LogRecord r;
    while (!tr.done()) {
      ASSERT_TRUE(tr.Step(&r).ok());
      for (int i : {0, 1, 3}) {
        ASSERT_TRUE(SameBytes(before[static_cast<std::size_t>(i)], tr.model().parameter(i)))
            << "frozen tensor " << i << " changed at iteration " << r.iteration;
      }
    }
    EXPECT_EQ(tr.iterations_done(), 40);  // 2 epochs of 20 batches
    for (int i : {2, 4, 5}) {
      EXPECT_FALSE(SameBytes(before[static_cast<std::size_t>(i)], tr.model().parameter(i)))
          << "trainable tensor " << i << " never moved";
    }
    // Unfrozen, the same run moves every tensor.
    o.freeze_layers = 0;
    o.freeze_tensors.clear();
    auto u = Trainer::Create(o, train, val);
    ASSERT_TRUE(u.ok());
    ASSERT_TRUE((*u)->Run(nullptr).ok());
    for (int i = 0; i < (*u)->model().num_parameter_tensors(); ++i) {
      EXPECT_FALSE(SameBytes(before[static_cast<std::size_t>(i)], (*u)->model().parameter(i))) << "tensor " << i;
    }
  }
}

// A trainer started from a saved model holds its bytes exactly, so it
// reproduces the saved model's validation loss bit for bit whatever its own
// seed; training then goes on from there.
TEST(TrainerFinetuneTest, InitFromASavedModelReproducesItsLoss) {
  const Samples train = Synthetic(160, 12, 10, 5), val = Synthetic(40, 12, 10, 6);
  Trainer::Options o = SmallOptions();
  auto a = Trainer::Create(o, train, val);
  ASSERT_TRUE(a.ok());
  auto sa = (*a)->Run(nullptr);
  ASSERT_TRUE(sa.ok());
  const std::string path = TempPath("pretrained.safetensors");
  WRITE_OR_SKIP((*a)->model().state(), path);

  Trainer::Options f = o;
  f.seed = 77;  // another initialisation: the file must override it
  f.init_model_path = path;
  f.freeze_layers = 2;
  auto b = Trainer::Create(f, train, val);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (int i = 0; i < (*a)->model().num_parameter_tensors(); ++i) {
    EXPECT_TRUE(SameBytes(Values((*a)->model(), i), (*b)->model().parameter(i))) << "tensor " << i;
  }
  const Evaluation ea = (*a)->Validate(), eb = (*b)->Validate();
  EXPECT_EQ(ea.mean_loss, eb.mean_loss);
  EXPECT_EQ(ea.accuracy, eb.accuracy);
  ASSERT_TRUE(sa->last_val_loss.has_value());
  EXPECT_EQ(*sa->last_val_loss, eb.mean_loss) << "the saved model's last validation loss";
  // Fine-tuning the head from there: the backbone stays the file's.
  auto sb = (*b)->Run(nullptr);
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(sb->frozen_parameters, 16 * 12 + 16 + 16 * 16 + 16);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(SameBytes(Values((*a)->model(), i), (*b)->model().parameter(i)));
  EXPECT_NE(sb->BriefReport().find("parameters frozen"), std::string::npos) << sb->BriefReport();
  fs::remove(path);
}

// Every hostile or mismatched file is an error naming the file, the tensor
// and (for values) the position; the trainer is not created.
TEST(TrainerFinetuneTest, HostileInitModelsErrorCleanly) {
  const Samples train = Synthetic(80, 12, 10, 5), val = Synthetic(20, 12, 10, 6);
  Trainer::Options o = SmallOptions();
  auto create = [&](const std::string& path) {
    Trainer::Options f = o;
    f.init_model_path = path;
    return Trainer::Create(f, train, val);
  };
  auto expect_error = [&](const std::string& path, std::vector<std::string> parts) {
    auto t = create(path);
    ASSERT_FALSE(t.ok()) << path;
    const std::string m = t.status().message();
    parts.push_back(path);
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  };

  expect_error(TempPath("does-not-exist.safetensors"), {"init model"});

  // Another width: the message names the tensor, both shapes and the file's MLP.
  Mlp::Options wide;
  wide.input_features = 12;
  wide.hidden_widths = {32, 16};
  auto other = Mlp::Create(wide, 3);
  ASSERT_TRUE(other.ok());
  const std::string wrong_shape = TempPath("wrong-shape.safetensors");
  WRITE_OR_SKIP(other->state(), wrong_shape);
  expect_error(wrong_shape, {"tensor '0.weight'", "[32, 12]", "[16, 12]", "hidden 32,16", "hidden 16,16"});

  // Another depth: the first mismatch is 2.weight ([10, 16] there, [16, 16] here).
  Mlp::Options shallow = wide;
  shallow.hidden_widths = {16};
  auto two = Mlp::Create(shallow, 3);
  ASSERT_TRUE(two.ok());
  const std::string shallow_path = TempPath("shallow.safetensors");
  WRITE_OR_SKIP(two->state(), shallow_path);
  expect_error(shallow_path, {"tensor '2.weight' has shape [10, 16]", "expects [16, 16]", "the file holds an MLP of 12 inputs, hidden 16, 10 classes"});
  // A tensor that is not a parameter.
  Mlp::Options same = wide;
  same.hidden_widths = {16, 16};
  auto good = Mlp::Create(same, 3);
  ASSERT_TRUE(good.ok());
  // A tensor missing.
  ModelState partial;
  for (const Tensor& t : good->state().tensors()) {
    if (t.name == "4.bias") continue;
    ASSERT_TRUE(partial.Add(t).ok());
  }
  const std::string missing = TempPath("missing.safetensors");
  WRITE_OR_SKIP(partial, missing);
  expect_error(missing, {"tensor '4.bias' (shape [10]) is missing"});
  ModelState extra = good->Clone().state();
  ASSERT_TRUE(extra.Add(Tensor::Allocate("classifier.scale", DType::kF32, {1})).ok());
  const std::string extra_path = TempPath("extra.safetensors");
  WRITE_OR_SKIP(extra, extra_path);
  expect_error(extra_path, {"tensor 'classifier.scale' is not a parameter"});
  // A BF16 tensor in place of F32.
  ModelState bf16;
  for (const Tensor& t : good->state().tensors()) {
    ASSERT_TRUE(bf16.Add(t.name == "2.bias" ? Tensor::Allocate(t.name, DType::kBF16, t.shape)
                                            : *Tensor::FromBytes(t.name, t.dtype, t.shape, t.data, t.size_bytes))
                    .ok());
  }
  const std::string bf16_path = TempPath("bf16.safetensors");
  WRITE_OR_SKIP(bf16, bf16_path);
  expect_error(bf16_path, {"tensor '2.bias' is BF16, expected F32"});
  // A NaN and an infinity: the message gives the tensor, the element and its row and column.
  Mlp bad = good->Clone();
  bad.parameter(2)[16 * 3 + 5] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan_path = TempPath("nan.safetensors");
  WRITE_OR_SKIP(bad.state(), nan_path);
  expect_error(nan_path, {"tensor '2.weight' element 53 (row 3, column 5) is nan"});
  bad = good->Clone();
  bad.parameter(5)[7] = -std::numeric_limits<float>::infinity();
  WRITE_OR_SKIP(bad.state(), nan_path);
  expect_error(nan_path, {"tensor '4.bias' element 7 is -inf"});
  // Not a safetensors file at all, and a truncated one.
  const std::string junk = TempPath("junk.safetensors");
  { std::ofstream(junk) << "this is not a model"; }
  expect_error(junk, {"init model"});
  auto bytes = safetensors::Serialize(good->state());
  ASSERT_TRUE(bytes.ok());
  {
    std::ofstream out(junk, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size() - 100));
  }
  expect_error(junk, {"init model"});
  // The good file loads (so the errors above are about the damage).
  const std::string good_path = TempPath("good.safetensors");
  WRITE_OR_SKIP(good->state(), good_path);
  EXPECT_TRUE(create(good_path).ok());
  for (const auto& p : {wrong_shape, shallow_path, missing, extra_path, bf16_path, nan_path, junk, good_path}) fs::remove(p);
}

}  // namespace
}  // namespace workflow
}  // namespace viper
