// The `viper._viper` extension module: exceptions, the Buffer type and the
// tensor-spec conversion shared by the files, planner and transport bindings.
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.h"
#include "viper/config.h"
#include "viper/transports/device_memory.h"

namespace viper {
namespace python {
namespace {

// Module-owned exception types (created in PYBIND11_MODULE, never freed).
PyObject* g_data_loss_error = nullptr;
PyObject* g_unavailable_error = nullptr;

[[noreturn]] void SetAndThrow(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

}  // namespace

void Raise(const Status& status) {
  const std::string& m = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      throw py::value_error(m);
    case StatusCode::kDataLoss:
      SetAndThrow(g_data_loss_error, m);
    case StatusCode::kNotFound:
      SetAndThrow(PyExc_FileNotFoundError, m);
    case StatusCode::kIoError:
      SetAndThrow(PyExc_OSError, m);
    case StatusCode::kUnavailable:
      SetAndThrow(g_unavailable_error, m);
    default:
      throw std::runtime_error(status.ToString());
  }
}

ModelState StateFromSpecs(const py::list& specs) {
  ModelState state;
  for (const py::handle item : specs) {
    const auto spec = item.cast<py::tuple>();
    if (spec.size() != 6) throw py::value_error("a tensor spec has 6 fields (name, dtype, shape, data_ptr, nbytes, device)");
    Tensor t;
    t.name = spec[0].cast<std::string>();
    const auto dtype_name = spec[1].cast<std::string>();
    const auto dtype = DTypeFromString(dtype_name);
    if (!dtype) throw py::value_error("tensor '" + t.name + "': unknown dtype " + dtype_name);
    t.dtype = *dtype;
    t.shape = spec[2].cast<std::vector<int64_t>>();
    t.data = reinterpret_cast<std::byte*>(spec[3].cast<uintptr_t>());
    t.size_bytes = spec[4].cast<std::size_t>();
    const int device = spec[5].cast<int>();
    t.memory = device < 0 ? MemoryKind::kHost : MemoryKind::kDevice;
    for (int64_t d : t.shape) {
      if (d < 0) throw py::value_error("tensor '" + t.name + "': negative dimension in its shape");
    }
    if (t.size_bytes != t.ExpectedBytes()) {
      throw py::value_error("tensor '" + t.name + "': " + std::to_string(t.size_bytes) + " bytes, expected " +
                            std::to_string(t.ExpectedBytes()) + " for its shape and dtype " + dtype_name);
    }
    if (t.data == nullptr && t.size_bytes > 0) throw py::value_error("tensor '" + t.name + "': null data pointer");
    OkOrRaise(state.Add(std::move(t)));
  }
  return state;
}

Buffer TensorBuffer(std::shared_ptr<const void> owner, const Tensor& t) {
  Buffer b;
  b.owner = std::shared_ptr<const void>(std::move(owner), t.data);
  b.data = t.data;
  b.size = t.size_bytes;
  const char* format = nullptr;
  switch (t.dtype) {
    case DType::kBool: format = "?"; break;
    case DType::kU8: format = "B"; break;
    case DType::kI8: format = "b"; break;
    case DType::kI16: format = "h"; break;
    case DType::kF16: format = "e"; break;
    case DType::kI32: format = "i"; break;
    case DType::kF32: format = "f"; break;
    case DType::kI64: format = "q"; break;
    case DType::kF64: format = "d"; break;
    default: return b;  // no numpy or no torch dtype: bytes (the caller's torch.frombuffer path)
  }
  b.format = format;
  b.itemsize = static_cast<py::ssize_t>(DTypeSize(t.dtype));
  b.shape = &t.shape;
  return b;
}

py::list DescribeTensors(const ModelState& state, const std::byte* base) {
  py::list out;
  for (const Tensor& t : state.tensors()) {
    out.append(py::make_tuple(t.name, ToString(t.dtype), py::cast(t.shape),
                              static_cast<uint64_t>(t.data - base), static_cast<uint64_t>(t.size_bytes)));
  }
  return out;
}

namespace {
bool InDeviceMemory(const ModelState& state) {
  for (const Tensor& t : state.tensors()) {
    if (t.memory == MemoryKind::kDevice) return true;
  }
  return false;
}
}  // namespace

py::list HostTensorTuples(std::shared_ptr<const void> owner, const ModelState& state) {
  const ModelState* host = &state;
  std::shared_ptr<ModelState> copy;
  if (InDeviceMemory(state)) {
    StatusOr<ModelState> copied = InternalError("not copied");
    {
      py::gil_scoped_release release;
      copied = transports::CopyToHost(state);
    }
    copy = std::make_shared<ModelState>(ValueOrRaise(std::move(copied)));
    owner = copy;
    host = copy.get();
  }
  py::list out;
  for (const Tensor& t : host->tensors()) {
    out.append(py::make_tuple(t.name, ToString(t.dtype), py::cast(t.shape), TensorBuffer(owner, t)));
  }
  return out;
}

py::list DeviceTensorTuples(const ModelState& state, int device) {
  if (!InDeviceMemory(state)) throw py::value_error("this version is in host memory");
  py::list out;
  for (const Tensor& t : state.tensors()) {
    out.append(py::make_tuple(t.name, ToString(t.dtype), py::cast(t.shape), reinterpret_cast<uintptr_t>(t.data),
                              t.size_bytes, device));
  }
  return out;
}

}  // namespace python
}  // namespace viper

PYBIND11_MODULE(_viper, m) {
  namespace py = pybind11;
  using viper::python::Buffer;
  m.doc() = "Viper's C++ core (pybind11). Use the `viper` package, not this module.";
  m.attr("__version__") = VIPER_VERSION;
  m.attr("HAVE_MPI") = static_cast<bool>(VIPER_HAVE_MPI);
  m.attr("HAVE_CUDA") = static_cast<bool>(VIPER_HAVE_CUDA);

  static py::exception<void> data_loss(m, "DataLossError", PyExc_ValueError);
  static py::exception<void> unavailable(m, "UnavailableError", PyExc_RuntimeError);
  viper::python::g_data_loss_error = data_loss.ptr();
  viper::python::g_unavailable_error = unavailable.ptr();

  py::class_<Buffer>(m, "Buffer", py::buffer_protocol(),
                     "Read-only bytes that keep their owner (a received version, a file) alive.")
      .def_buffer([](Buffer& b) {
        if (b.format == nullptr) {
          return py::buffer_info(const_cast<std::byte*>(b.data), 1, py::format_descriptor<uint8_t>::format(), 1,
                                 {static_cast<py::ssize_t>(b.size)}, {1}, /*readonly=*/!b.writable);
        }
        const std::vector<py::ssize_t> shape(b.shape->begin(), b.shape->end());
        std::vector<py::ssize_t> strides(shape.size());
        py::ssize_t stride = b.itemsize;
        for (size_t i = shape.size(); i-- > 0;) {
          strides[i] = stride;
          stride *= shape[i];
        }
        return py::buffer_info(const_cast<std::byte*>(b.data), b.itemsize, b.format,
                               static_cast<py::ssize_t>(shape.size()), shape, strides, /*readonly=*/!b.writable);
      })
      .def_property_readonly("typed", [](const Buffer& b) { return b.format != nullptr; })
      .def("__len__", [](const Buffer& b) { return b.size; })
      .def_property_readonly("address", [](const Buffer& b) { return reinterpret_cast<uintptr_t>(b.data); });

  viper::python::BindFiles(m);
  viper::python::BindPlanner(m);
  viper::python::BindStaleness(m);
  viper::python::BindTransports(m);
  viper::python::BindGroup(m);
}
