// A multilayer perceptron for classification: Linear -> ReLU -> ... ->
// Linear, trained with softmax cross-entropy. Its parameters live in a
// ModelState, one float32 tensor per weight and bias, named exactly as the
// state_dict keys of the equivalent torch.nn.Sequential(Linear, ReLU, Linear,
// ..., Linear): layer k is module 2k, so "<2k>.weight" [out, in] (row-major)
// and "<2k>.bias" [out] ("0.weight", "0.bias", "2.weight", ...). A snapshot
// serialises to a .safetensors file that the Sequential loads with
// load_state_dict(strict=True), no renaming (tests/python/test_mlp_names.py).
//
// Batches are column-major matrices with one sample per column (features x
// batch); every product is an Eigen matrix product.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <string>
#include <vector>

#include "viper/core/model_state.h"
#include "viper/core/status.h"
#include "viper/workflow/fashion_mnist.h"

namespace viper {
namespace workflow {

// Name of the tensors of layer `k` (module 2k of the nn.Sequential).
std::string MlpWeightName(int k);
std::string MlpBiasName(int k);

class Mlp {
 public:
  using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  struct Options {
    // Values per input sample (784 for 28x28 images).
    int64_t input_features = kFashionMnistFeatures;
    // Width of each hidden layer, input side first; empty = a linear classifier.
    std::vector<int64_t> hidden_widths = {256};
    // Number of classes (outputs).
    int64_t num_classes = kFashionMnistClasses;

    // False (and a message naming the field) when a size is not positive.
    bool IsValid(std::string* error) const;
  };

  // Buffers shaped like the parameters (same order as state().tensors()):
  // gradients, optimiser moments.
  struct Buffers {
    std::vector<std::vector<float>> tensors;
  };

  // Per-batch scratch space, reused between calls to avoid allocations.
  struct Workspace {
    std::vector<Eigen::MatrixXf> activations;  // output of layer k (after ReLU for hidden layers)
    std::vector<Eigen::MatrixXf> deltas;       // d loss / d pre-activation of layer k
  };

  // Fresh parameters: weights He-uniform U(-sqrt(6/in), sqrt(6/in)), biases
  // zero, drawn from std::mt19937_64(seed) with a portable conversion (the
  // same bits on every platform).
  static StatusOr<Mlp> Create(const Options& options, uint64_t seed);
  // Wraps the tensors of `state` (shares their bytes, no copy) after checking
  // that they form an MLP: weight/bias pairs of layers 0..L-1 ("0.", "2.", ...), F32, host memory,
  // consistent shapes. Errors name the offending tensor.
  static StatusOr<Mlp> FromModelState(const ModelState& state);

  const Options& options() const { return options_; }
  int num_layers() const { return static_cast<int>(options_.hidden_widths.size()) + 1; }
  int64_t in_features(int k) const;
  int64_t out_features(int k) const;
  const ModelState& state() const { return state_; }
  ModelState& mutable_state() { return state_; }
  int64_t NumParameters() const;
  std::size_t SizeBytes() const { return state_.TotalBytes(); }
  // A copy with its own parameter bytes (a ModelState copy shares them).
  Mlp Clone() const;

  // Multiply-adds counted twice (FLOPs) per sample for forward alone and for
  // forward + backward (the backward pass skips the input gradient of layer 0).
  double ForwardFlopsPerSample() const;
  double TrainingFlopsPerSample() const;

  // Logits (num_classes x batch) of `inputs` (input_features x batch).
  void Forward(const Eigen::Ref<const Eigen::MatrixXf>& inputs, Workspace* workspace, Eigen::MatrixXf* logits) const;

  // Mean softmax cross-entropy of the batch; fills `gradients` with its
  // gradient with respect to every parameter (resized as needed).
  float LossAndGradient(const Eigen::Ref<const Eigen::MatrixXf>& inputs, const std::vector<int32_t>& labels, Buffers* gradients,
                        Workspace* workspace) const;

  // Buffers of zeros shaped like the parameters.
  Buffers ZeroBuffers() const;

  // Raw parameter pointers, in state().tensors() order (weights of layer k at
  // 2k, bias at 2k+1).
  float* parameter(int index) { return state_.mutable_tensors()[static_cast<std::size_t>(index)].As<float>(); }
  const float* parameter(int index) const { return state_.tensors()[static_cast<std::size_t>(index)].As<float>(); }
  int64_t parameter_size(int index) const { return state_.tensors()[static_cast<std::size_t>(index)].NumElements(); }
  int num_parameter_tensors() const { return static_cast<int>(state_.size()); }

 private:
  Mlp() = default;
  void ForwardInto(const Eigen::Ref<const Eigen::MatrixXf>& inputs, Workspace* workspace) const;

  Options options_;
  ModelState state_;
};

// Loss and accuracy of one model version on a set of samples.
struct Evaluation {
  double mean_loss = 0.0;  // mean softmax cross-entropy (nats)
  double accuracy = 0.0;   // fraction of samples whose arg-max logit is the label, in [0, 1]
  int64_t samples = 0;     // samples evaluated
};

// Evaluates any model version (e.g. one a consumer received) on `samples`,
// `batch_size` samples at a time. Fails when `state` is not an MLP with
// matching input size, or when `samples` is empty.
StatusOr<Evaluation> Evaluate(const ModelState& state, const Samples& samples, int64_t batch_size = 1000);
// Same, for a model already wrapped, on pre-gathered inputs (features x n).
Evaluation Evaluate(const Mlp& model, const Eigen::MatrixXf& inputs, const std::vector<int32_t>& labels,
                    int64_t batch_size = 1000);

}  // namespace workflow
}  // namespace viper
