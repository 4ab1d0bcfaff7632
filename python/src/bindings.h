// Shared pieces of the `viper._viper` extension module: Status -> Python
// exceptions, tensor specs -> ModelState, and a buffer object that keeps a
// received image alive while Python (torch.frombuffer) views it.
//
// The extension knows nothing of torch: the pure-Python package
// (python/viper/) turns torch tensors into specs (name, dtype, shape,
// data_ptr, nbytes, device) and the buffers back into torch tensors.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "viper/core/model_state.h"
#include "viper/core/status.h"

namespace viper {
namespace python {

namespace py = pybind11;

// Raises the Python exception for a failed `status` (never returns):
// InvalidArgument/OutOfRange -> ValueError, DataLoss -> viper.DataLossError
// (a ValueError), NotFound -> FileNotFoundError, IoError -> OSError,
// Unavailable -> viper.UnavailableError, the rest -> RuntimeError.
[[noreturn]] void Raise(const Status& status);

template <typename T>
T ValueOrRaise(StatusOr<T>&& s) {
  if (!s.ok()) Raise(s.status());
  return std::move(s).value();
}
inline void OkOrRaise(const Status& s) {
  if (!s.ok()) Raise(s);
}

// A ModelState of borrowed tensors from a list of specs, each a tuple
// (name: str, dtype: str as safetensors spells it, shape: list[int],
// data_ptr: int, nbytes: int, device: int, -1 = host memory, else the CUDA
// device). No bytes are copied: the caller keeps the tensors alive (and
// unmodified) while the state is used. Errors (ValueError) name the tensor.
ModelState StateFromSpecs(const py::list& specs);

// A read-only byte range that keeps its owner alive; exposes the buffer
// protocol (format "B"), so torch.frombuffer / numpy views share its bytes.
// Writable only where nobody else reads the bytes (a file just loaded); a
// served version is shared by every reader and is read-only.
// A typed buffer (TypedBuffer: `format` set) exposes one tensor instead, as
// a C-contiguous array of that element type and `shape`, so that
// numpy.asarray + torch.from_numpy view it in ~1 us (torch.frombuffer plus
// view costs ~3 us a tensor in Python).
struct Buffer {
  std::shared_ptr<const void> owner;
  const std::byte* data = nullptr;
  uint64_t size = 0;
  bool writable = false;
  const char* format = nullptr;       // struct-module format; null = bytes
  py::ssize_t itemsize = 1;
  const std::vector<int64_t>* shape = nullptr;  // with `format`: the tensor's, kept alive by `owner`
};

// `t` as a read-only Buffer kept alive by `owner`, typed where numpy and this
// torch both have its dtype (BOOL, U8, I8, I16, F16, I32, F32, I64, F64),
// plain bytes otherwise (BF16, F8, unsigned 16-64 bit).
Buffer TensorBuffer(std::shared_ptr<const void> owner, const Tensor& t);

// (name, dtype, shape, Buffer) per tensor of `state` (kept alive by
// `owner`): views of host memory; a state in device memory is first copied
// to host memory (the copy then owns the bytes).
py::list HostTensorTuples(std::shared_ptr<const void> owner, const ModelState& state);
// (name, dtype, shape, data_ptr, nbytes, device) per tensor of `state` in
// device memory (ValueError for host memory): for __cuda_array_interface__.
py::list DeviceTensorTuples(const ModelState& state, int device);

// Describes the tensors of a parsed image as (name, dtype, shape, offset,
// nbytes) tuples, offsets relative to `base`.
py::list DescribeTensors(const ModelState& state, const std::byte* base);

void BindFiles(py::module_& m);
void BindGroup(py::module_& m);
void BindPlanner(py::module_& m);
void BindStaleness(py::module_& m);
void BindTransports(py::module_& m);

}  // namespace python
}  // namespace viper
