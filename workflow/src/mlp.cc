#include "viper/workflow/mlp.h"

#include <cmath>
#include <cstring>
#include <random>

namespace viper {
namespace workflow {
namespace {

using ConstRowMap = Eigen::Map<const Mlp::RowMatrix>;
using RowMap = Eigen::Map<Mlp::RowMatrix>;
using ConstVecMap = Eigen::Map<const Eigen::VectorXf>;
using VecMap = Eigen::Map<Eigen::VectorXf>;

// Uniform in [0, 1) from the top 53 bits: identical on every platform, unlike
// std::uniform_real_distribution whose algorithm is implementation-defined.
double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Softmax cross-entropy of column j of `logits`; writes the softmax into
// `probs` (may alias logits' column). Returns the loss in nats.
template <typename In, typename Out>
double SoftmaxColumn(const In& logits, Out&& probs, int label) {
  const float max = logits.maxCoeff();
  probs = (logits.array() - max).exp().matrix();
  const double sum = probs.template cast<double>().sum();
  probs *= static_cast<float>(1.0 / sum);
  return std::log(sum) - static_cast<double>(logits(label) - max);
}

}  // namespace

// Layer k is module 2k of torch.nn.Sequential(Linear, ReLU, Linear, ...).
std::string MlpWeightName(int k) { return std::to_string(2 * k) + ".weight"; }
std::string MlpBiasName(int k) { return std::to_string(2 * k) + ".bias"; }

bool Mlp::Options::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (input_features <= 0) return fail("input_features must be positive, got " + std::to_string(input_features));
  if (num_classes < 2) return fail("num_classes must be at least 2, got " + std::to_string(num_classes));
  for (std::size_t i = 0; i < hidden_widths.size(); ++i) {
    if (hidden_widths[i] <= 0) {
      return fail("hidden_widths[" + std::to_string(i) + "] must be positive, got " +
                  std::to_string(hidden_widths[i]));
    }
  }
  return true;
}

int64_t Mlp::in_features(int k) const {
  return k == 0 ? options_.input_features : options_.hidden_widths[static_cast<std::size_t>(k - 1)];
}

int64_t Mlp::out_features(int k) const {
  return k == num_layers() - 1 ? options_.num_classes : options_.hidden_widths[static_cast<std::size_t>(k)];
}

StatusOr<Mlp> Mlp::Create(const Options& options, uint64_t seed) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("Mlp::Options: " + error);
  Mlp mlp;
  mlp.options_ = options;
  std::mt19937_64 rng(seed);
  for (int k = 0; k < mlp.num_layers(); ++k) {
    const int64_t in = mlp.in_features(k), out = mlp.out_features(k);
    Tensor w = Tensor::Allocate(MlpWeightName(k), DType::kF32, {out, in});
    const double bound = std::sqrt(6.0 / static_cast<double>(in));
    float* p = w.As<float>();
    for (int64_t i = 0; i < out * in; ++i) p[i] = static_cast<float>((2.0 * Uniform01(rng) - 1.0) * bound);
    VIPER_RETURN_IF_ERROR(mlp.state_.Add(std::move(w)));
    VIPER_RETURN_IF_ERROR(mlp.state_.Add(Tensor::Allocate(MlpBiasName(k), DType::kF32, {out})));
  }
  return mlp;
}

StatusOr<Mlp> Mlp::FromModelState(const ModelState& state) {
  if (state.size() == 0 || state.size() % 2 != 0) {
    return InvalidArgumentError("not an MLP: expected pairs of <2k>.weight/<2k>.bias tensors (torch.nn.Sequential keys), got " +
                                std::to_string(state.size()) + " tensors");
  }
  Mlp mlp;
  mlp.options_.hidden_widths.clear();
  const int layers = static_cast<int>(state.size() / 2);
  int64_t previous_out = -1;
  for (int k = 0; k < layers; ++k) {
    const Tensor* w = state.Find(MlpWeightName(k));
    const Tensor* b = state.Find(MlpBiasName(k));
    if (w == nullptr || b == nullptr) {
      return InvalidArgumentError("not an MLP: tensor '" + (w ? MlpBiasName(k) : MlpWeightName(k)) + "' is missing");
    }
    for (const Tensor* t : {w, b}) {
      if (t->dtype != DType::kF32) {
        return InvalidArgumentError("tensor '" + t->name + "' is " + ToString(t->dtype) + ", expected F32");
      }
      if (t->memory != MemoryKind::kHost) {
        return InvalidArgumentError("tensor '" + t->name + "' is in device memory; evaluation needs host memory");
      }
      if (t->data == nullptr || t->size_bytes != t->ExpectedBytes()) {
        return InvalidArgumentError("tensor '" + t->name + "' holds no data or the wrong number of bytes");
      }
    }
    if (w->shape.size() != 2 || b->shape.size() != 1 || b->shape[0] != w->shape[0] || w->shape[0] <= 0 ||
        w->shape[1] <= 0) {
      return InvalidArgumentError("tensors '" + w->name + "' and '" + b->name +
                                  "' must have shapes [out, in] and [out] with out, in > 0");
    }
    if (previous_out >= 0 && w->shape[1] != previous_out) {
      return InvalidArgumentError("tensor '" + w->name + "' takes " + std::to_string(w->shape[1]) +
                                  " inputs but the previous layer gives " + std::to_string(previous_out));
    }
    if (k == 0) mlp.options_.input_features = w->shape[1];
    if (k + 1 < layers) {
      mlp.options_.hidden_widths.push_back(w->shape[0]);
    } else {
      mlp.options_.num_classes = w->shape[0];
    }
    previous_out = w->shape[0];
    VIPER_RETURN_IF_ERROR(mlp.state_.Add(*w));
    VIPER_RETURN_IF_ERROR(mlp.state_.Add(*b));
  }
  mlp.options_.hidden_widths.resize(static_cast<std::size_t>(layers - 1));
  std::string error;
  if (!mlp.options_.IsValid(&error)) return InvalidArgumentError("not a valid MLP: " + error);
  mlp.state_.metadata = state.metadata;
  return mlp;
}

int64_t Mlp::NumParameters() const {
  int64_t n = 0;
  for (const auto& t : state_.tensors()) n += t.NumElements();
  return n;
}

Mlp Mlp::Clone() const {
  Mlp copy;
  copy.options_ = options_;
  copy.state_.metadata = state_.metadata;
  for (const auto& t : state_.tensors()) {
    Tensor c = Tensor::Allocate(t.name, t.dtype, t.shape);
    std::memcpy(c.data, t.data, t.size_bytes);
    VIPER_CHECK(copy.state_.Add(std::move(c)).ok());
  }
  return copy;
}

double Mlp::ForwardFlopsPerSample() const {
  double flops = 0;
  for (int k = 0; k < num_layers(); ++k) flops += 2.0 * static_cast<double>(in_features(k) * out_features(k));
  return flops;
}

double Mlp::TrainingFlopsPerSample() const {
  double flops = 2.0 * ForwardFlopsPerSample();  // forward + weight gradients
  for (int k = 1; k < num_layers(); ++k) flops += 2.0 * static_cast<double>(in_features(k) * out_features(k));
  return flops;
}

Mlp::Buffers Mlp::ZeroBuffers() const {
  Buffers buffers;
  for (const auto& t : state_.tensors()) buffers.tensors.emplace_back(static_cast<std::size_t>(t.NumElements()), 0.0f);
  return buffers;
}

void Mlp::ForwardInto(const Eigen::Ref<const Eigen::MatrixXf>& inputs, Workspace* ws) const {
  VIPER_CHECK(inputs.rows() == options_.input_features);
  const int layers = num_layers();
  ws->activations.resize(static_cast<std::size_t>(layers));
  for (int k = 0; k < layers; ++k) {
    ConstRowMap w(parameter(2 * k), out_features(k), in_features(k));
    ConstVecMap b(parameter(2 * k + 1), out_features(k));
    Eigen::MatrixXf& z = ws->activations[static_cast<std::size_t>(k)];
    z.resize(out_features(k), inputs.cols());
    if (k == 0) {
      z.noalias() = w * inputs;
    } else {
      z.noalias() = w * ws->activations[static_cast<std::size_t>(k - 1)];
    }
    z.colwise() += b;
    if (k + 1 < layers) z = z.cwiseMax(0.0f);
  }
}

void Mlp::Forward(const Eigen::Ref<const Eigen::MatrixXf>& inputs, Workspace* workspace, Eigen::MatrixXf* logits) const {
  ForwardInto(inputs, workspace);
  *logits = workspace->activations.back();
}

float Mlp::LossAndGradient(const Eigen::Ref<const Eigen::MatrixXf>& inputs, const std::vector<int32_t>& labels, Buffers* gradients,
                           Workspace* ws) const {
  const int64_t batch = inputs.cols();
  VIPER_CHECK(static_cast<int64_t>(labels.size()) == batch && batch > 0);
  ForwardInto(inputs, ws);
  const int layers = num_layers();
  ws->deltas.resize(static_cast<std::size_t>(layers));
  if (gradients->tensors.size() != state_.size()) *gradients = ZeroBuffers();

  // Output layer: d loss / d logits = (softmax - one_hot) / batch.
  const Eigen::MatrixXf& logits = ws->activations.back();
  Eigen::MatrixXf& top = ws->deltas.back();
  top.resize(logits.rows(), batch);
  double loss = 0.0;
  for (int64_t j = 0; j < batch; ++j) {
    const int label = labels[static_cast<std::size_t>(j)];
    VIPER_CHECK(label >= 0 && label < logits.rows());
    loss += SoftmaxColumn(logits.col(j), top.col(j), label);
    top(label, j) -= 1.0f;
  }
  top *= 1.0f / static_cast<float>(batch);

  for (int k = layers - 1; k >= 0; --k) {
    const Eigen::MatrixXf& delta = ws->deltas[static_cast<std::size_t>(k)];
    RowMap dw(gradients->tensors[static_cast<std::size_t>(2 * k)].data(), out_features(k), in_features(k));
    VecMap db(gradients->tensors[static_cast<std::size_t>(2 * k + 1)].data(), out_features(k));
    if (k == 0) {
      dw.noalias() = delta * inputs.transpose();
    } else {
      const Eigen::MatrixXf& input = ws->activations[static_cast<std::size_t>(k - 1)];
      dw.noalias() = delta * input.transpose();
      ConstRowMap w(parameter(2 * k), out_features(k), in_features(k));
      Eigen::MatrixXf& below = ws->deltas[static_cast<std::size_t>(k - 1)];
      below.resize(in_features(k), batch);
      below.noalias() = w.transpose() * delta;
      // ReLU: the gradient passes where the activation was positive.
      below = (input.array() > 0.0f).select(below, 0.0f);
    }
    db = delta.rowwise().sum();
  }
  return static_cast<float>(loss / static_cast<double>(batch));
}

Evaluation Evaluate(const Mlp& model, const Eigen::MatrixXf& inputs, const std::vector<int32_t>& labels,
                    int64_t batch_size) {
  VIPER_CHECK(inputs.cols() == static_cast<int64_t>(labels.size()) && batch_size > 0);
  Evaluation result;
  Mlp::Workspace ws;
  Eigen::MatrixXf logits;
  Eigen::VectorXf probs;
  double loss = 0.0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < inputs.cols(); begin += batch_size) {
    const int64_t n = std::min(batch_size, inputs.cols() - begin);
    model.Forward(inputs.middleCols(begin, n), &ws, &logits);
    for (int64_t j = 0; j < n; ++j) {
      const int label = labels[static_cast<std::size_t>(begin + j)];
      probs.resize(logits.rows());
      loss += SoftmaxColumn(logits.col(j), probs, label);
      Eigen::Index arg_max = 0;
      logits.col(j).maxCoeff(&arg_max);
      if (arg_max == label) ++correct;
    }
  }
  result.samples = inputs.cols();
  if (result.samples > 0) {
    result.mean_loss = loss / static_cast<double>(result.samples);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(result.samples);
  }
  return result;
}

StatusOr<Evaluation> Evaluate(const ModelState& state, const Samples& samples, int64_t batch_size) {
  if (samples.empty()) return InvalidArgumentError("Evaluate: no samples");
  if (batch_size <= 0) return InvalidArgumentError("Evaluate: batch_size must be positive");
  VIPER_ASSIGN_OR_RETURN(Mlp model, Mlp::FromModelState(state));
  if (model.options().input_features != samples.features) {
    return InvalidArgumentError("model takes " + std::to_string(model.options().input_features) +
                                " input features but the samples have " + std::to_string(samples.features));
  }
  for (uint8_t label : samples.labels) {
    if (label >= model.options().num_classes) {
      return InvalidArgumentError("sample label " + std::to_string(label) + " is not below the model's " +
                                  std::to_string(model.options().num_classes) + " classes");
    }
  }
  Eigen::MatrixXf inputs;
  std::vector<int32_t> labels;
  Evaluation total;
  double loss_sum = 0.0, correct_sum = 0.0;
  // Gather in chunks so that a large test set does not need one big float copy.
  constexpr int64_t kChunk = 10000;
  std::vector<int64_t> indices;
  for (int64_t begin = 0; begin < samples.size(); begin += kChunk) {
    const int64_t n = std::min(kChunk, samples.size() - begin);
    indices.resize(static_cast<std::size_t>(n));
    for (int64_t j = 0; j < n; ++j) indices[static_cast<std::size_t>(j)] = begin + j;
    samples.GatherBatch(indices.data(), n, &inputs, &labels);
    const Evaluation part = Evaluate(model, inputs, labels, batch_size);
    loss_sum += part.mean_loss * static_cast<double>(n);
    correct_sum += part.accuracy * static_cast<double>(n);
    total.samples += n;
  }
  total.mean_loss = loss_sum / static_cast<double>(total.samples);
  total.accuracy = correct_sum / static_cast<double>(total.samples);
  return total;
}

}  // namespace workflow
}  // namespace viper
