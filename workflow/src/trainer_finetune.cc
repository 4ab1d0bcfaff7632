// Fine-tuning (Trainer::Options::init_model_path, freeze_layers,
// freeze_tensors): which parameter tensors are frozen, and loading a saved
// MLP's parameters with errors that name the file, the tensor and the value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "viper/core/safetensors.h"
#include "viper/workflow/trainer.h"

namespace viper {
namespace workflow {

StatusOr<std::vector<bool>> FrozenTensorMask(const Trainer::Options& o, int layers) {
  std::vector<bool> mask(static_cast<std::size_t>(2 * layers), false);
  if (o.freeze_layers < 0 || o.freeze_layers >= layers) {
    return InvalidArgumentError("freeze_layers must be in [0, " + std::to_string(layers - 1) + "] (this MLP has " +
                                std::to_string(layers) + " layers and the output layer always trains), got " +
                                std::to_string(o.freeze_layers));
  }
  for (int64_t k = 0; k < o.freeze_layers; ++k) mask[2 * k] = mask[2 * k + 1] = true;
  std::string names;
  for (int k = 0; k < layers; ++k) names += (k ? ", " : "") + MlpWeightName(k) + ", " + MlpBiasName(k);
  std::set<std::string> seen;
  for (const std::string& name : o.freeze_tensors) {
    int index = -1;
    for (int k = 0; k < layers && index < 0; ++k) {
      if (name == MlpWeightName(k)) index = 2 * k;
      if (name == MlpBiasName(k)) index = 2 * k + 1;
    }
    if (index < 0) {
      return InvalidArgumentError("freeze_tensors: '" + name + "' is not a tensor of this MLP (its tensors: " + names + ")");
    }
    if (!seen.insert(name).second) return InvalidArgumentError("freeze_tensors names '" + name + "' twice");
    mask[static_cast<std::size_t>(index)] = true;
  }
  if (std::all_of(mask.begin(), mask.end(), [](bool f) { return f; })) {
    return InvalidArgumentError("freeze_tensors: with freeze_layers " + std::to_string(o.freeze_layers) +
                                " every tensor is frozen (" + names + "); at least one must train");
  }
  return mask;
}

namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// "784 inputs, hidden 256,256, 10 classes".
std::string DescribeMlp(const Mlp::Options& o) {
  std::string hidden;
  for (std::size_t i = 0; i < o.hidden_widths.size(); ++i) hidden += (i ? "," : "") + std::to_string(o.hidden_widths[i]);
  return std::to_string(o.input_features) + " inputs, hidden " + (hidden.empty() ? "none" : hidden) + ", " +
         std::to_string(o.num_classes) + " classes";
}

}  // namespace

Status LoadMlpParameters(const std::string& path, Mlp* model) {
  const std::string where = "init model " + path;
  auto read = safetensors::ReadFile(path);
  if (!read.ok()) return read.status().WithContext(where);
  const ModelState& file = *read;
  // What the file's tensors describe, when they form an MLP at all (for messages).
  std::string file_mlp;
  if (auto m = Mlp::FromModelState(file); m.ok()) file_mlp = " (the file holds an MLP of " + DescribeMlp(m->options()) + ")";
  const std::string this_mlp = "this trainer's MLP (" + DescribeMlp(model->options()) + ")";
  for (const Tensor& t : file.tensors()) {
    if (model->state().Find(t.name) == nullptr) {
      return InvalidArgumentError(where + ": tensor '" + t.name + "' is not a parameter of " + this_mlp + file_mlp);
    }
  }
  std::vector<std::vector<float>> staged(static_cast<std::size_t>(model->num_parameter_tensors()));
  for (int i = 0; i < model->num_parameter_tensors(); ++i) {
    const Tensor& want = model->state().tensors()[static_cast<std::size_t>(i)];
    const Tensor* got = file.Find(want.name);
    if (got == nullptr) {
      return InvalidArgumentError(where + ": tensor '" + want.name + "' (shape " + ShapeString(want.shape) +
                                  ") is missing; " + this_mlp + " needs it" + file_mlp);
    }
    if (got->dtype != DType::kF32) {
      return InvalidArgumentError(where + ": tensor '" + want.name + "' is " + ToString(got->dtype) +
                                  ", expected F32");
    }
    if (got->shape != want.shape) {
      return InvalidArgumentError(where + ": tensor '" + want.name + "' has shape " + ShapeString(got->shape) + ", " +
                                  this_mlp + " expects " + ShapeString(want.shape) + file_mlp);
    }
    if (got->data == nullptr || got->size_bytes != want.size_bytes) {
      return InvalidArgumentError(where + ": tensor '" + want.name + "' holds " + std::to_string(got->size_bytes) +
                                  " bytes, expected " + std::to_string(want.size_bytes));
    }
    auto& values = staged[static_cast<std::size_t>(i)];
    values.resize(static_cast<std::size_t>(want.NumElements()));
    std::memcpy(values.data(), got->data, want.size_bytes);  // the file's offsets need not be 4-aligned
    for (std::size_t e = 0; e < values.size(); ++e) {
      if (std::isfinite(values[e])) continue;
      std::string at = "element " + std::to_string(e);
      if (want.shape.size() == 2) {
        const auto cols = static_cast<std::size_t>(want.shape[1]);
        at += " (row " + std::to_string(e / cols) + ", column " + std::to_string(e % cols) + ")";
      }
      return InvalidArgumentError(where + ": tensor '" + want.name + "' " + at + " is " +
                                  (std::isnan(values[e]) ? "nan" : values[e] > 0 ? "inf" : "-inf") +
                                  "; parameters must be finite");
    }
  }
  for (int i = 0; i < model->num_parameter_tensors(); ++i) {
    const auto& values = staged[static_cast<std::size_t>(i)];
    std::memcpy(model->parameter(i), values.data(), values.size() * sizeof(float));
  }
  return Status::Ok();
}

}  // namespace workflow
}  // namespace viper
