#include "viper/core/model_state.h"

#include <cstring>

namespace viper {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  std::size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, "BOOL", 1}, {DType::kU8, "U8", 1},       {DType::kI8, "I8", 1},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1}, {DType::kI16, "I16", 2},
    {DType::kU16, "U16", 2},   {DType::kF16, "F16", 2},     {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4},   {DType::kU32, "U32", 4},     {DType::kF32, "F32", 4},
    {DType::kI64, "I64", 8},   {DType::kU64, "U64", 8},     {DType::kF64, "F64", 8},
};

const DTypeInfo& Info(DType dtype) {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  VIPER_CHECK(false && "unknown DType");
  return kDTypes[0];
}

}  // namespace

const char* ToString(DType dtype) { return Info(dtype).name; }
std::size_t DTypeSize(DType dtype) { return Info(dtype).size; }

std::optional<DType> DTypeFromString(const std::string& name) {
  for (const auto& info : kDTypes) {
    if (name == info.name) return info.dtype;
  }
  return std::nullopt;
}

const char* ToString(MemoryKind kind) { return kind == MemoryKind::kHost ? "host" : "device"; }

int64_t Tensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::size_t Tensor::ExpectedBytes() const {
  return static_cast<std::size_t>(NumElements()) * DTypeSize(dtype);
}

Tensor Tensor::Allocate(std::string name, DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.size_bytes = t.ExpectedBytes();
  // Allocate at least one byte so that `data` is never null for a host tensor.
  std::shared_ptr<std::byte[]> buffer(new std::byte[t.size_bytes ? t.size_bytes : 1]());
  t.data = buffer.get();
  t.owner = std::shared_ptr<void>(buffer, buffer.get());
  return t;
}

StatusOr<Tensor> Tensor::FromBytes(std::string name, DType dtype, std::vector<int64_t> shape,
                                   const void* bytes, std::size_t size_bytes) {
  Tensor t = Allocate(std::move(name), dtype, std::move(shape));
  if (t.size_bytes != size_bytes) {
    return InvalidArgumentError("tensor '" + t.name + "': shape needs " + std::to_string(t.size_bytes) +
                                " bytes but " + std::to_string(size_bytes) + " were given");
  }
  if (size_bytes) std::memcpy(t.data, bytes, size_bytes);
  return t;
}

Status ModelState::Add(Tensor tensor) {
  if (tensor.name.empty()) return InvalidArgumentError("tensor name must not be empty");
  if (tensor.name == "__metadata__") return InvalidArgumentError("tensor name '__metadata__' is reserved");
  if (Find(tensor.name)) return InvalidArgumentError("duplicate tensor name '" + tensor.name + "'");
  for (int64_t d : tensor.shape) {
    if (d < 0) return InvalidArgumentError("tensor '" + tensor.name + "' has a negative dimension");
  }
  if (tensor.size_bytes != tensor.ExpectedBytes()) {
    return InvalidArgumentError("tensor '" + tensor.name + "': shape needs " +
                                std::to_string(tensor.ExpectedBytes()) + " bytes but holds " +
                                std::to_string(tensor.size_bytes));
  }
  tensors_.push_back(std::move(tensor));
  return Status::Ok();
}

const Tensor* ModelState::Find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Tensor* ModelState::FindMutable(const std::string& name) {
  for (auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::size_t ModelState::TotalBytes() const {
  std::size_t total = 0;
  for (const auto& t : tensors_) total += t.size_bytes;
  return total;
}

}  // namespace viper
