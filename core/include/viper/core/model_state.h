// ModelState: an ordered set of named tensors plus version metadata. This is
// what a producer publishes and a consumer serves. Tensor bytes live in host
// or device memory and are shared (a parsed checkpoint hands out views into
// its buffer without copying).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"

namespace viper {

// The safetensors dtypes.
enum class DType { kBool, kU8, kI8, kF8E4M3, kF8E5M2, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kI64, kU64, kF64 };

// "F32", "BF16", ... exactly as safetensors spells them.
const char* ToString(DType dtype);
std::optional<DType> DTypeFromString(const std::string& name);
// Bytes per element.
std::size_t DTypeSize(DType dtype);

enum class MemoryKind { kHost, kDevice };
const char* ToString(MemoryKind kind);

// A named tensor. `data` points to `size_bytes` bytes in `memory`; `owner`
// keeps them alive (a view into a larger buffer shares that buffer's owner).
struct Tensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major; empty = rank 0 (one element)
  MemoryKind memory = MemoryKind::kHost;
  std::shared_ptr<void> owner;
  std::byte* data = nullptr;
  std::size_t size_bytes = 0;

  // Product of the shape (1 for rank 0).
  int64_t NumElements() const;
  // NumElements() * DTypeSize(dtype).
  std::size_t ExpectedBytes() const;

  // A host tensor owning a fresh zero-filled buffer of the right size.
  static Tensor Allocate(std::string name, DType dtype, std::vector<int64_t> shape);
  // A host tensor owning a copy of `bytes` (size must match the shape).
  static StatusOr<Tensor> FromBytes(std::string name, DType dtype, std::vector<int64_t> shape,
                                    const void* bytes, std::size_t size_bytes);

  template <typename T>
  T* As() { return reinterpret_cast<T*>(data); }
  template <typename T>
  const T* As() const { return reinterpret_cast<const T*>(data); }
};

struct ModelMetadata {
  uint64_t version = 0;     // 0 = the warm-up model; increases by one per publish
  int64_t iteration = 0;    // training iteration the snapshot was taken after
  int32_t producer_id = 0;  // rank or id of the producer
};

class ModelState {
 public:
  ModelState() = default;

  // Appends a tensor; names must be unique and non-empty.
  Status Add(Tensor tensor);
  const std::vector<Tensor>& tensors() const { return tensors_; }
  std::vector<Tensor>& mutable_tensors() { return tensors_; }
  const Tensor* Find(const std::string& name) const;
  Tensor* FindMutable(const std::string& name);

  std::size_t TotalBytes() const;
  std::size_t size() const { return tensors_.size(); }

  ModelMetadata metadata;

 private:
  std::vector<Tensor> tensors_;
};

}  // namespace viper
