// viper.save_file / viper.load_file: the safetensors codec of viper::core
// (byte-compatible files with Viper's checksum in __metadata__).
#include <map>
#include <string>

#include "bindings.h"
#include "viper/core/atomic_file.h"
#include "viper/core/safetensors.h"

namespace viper {
namespace python {
namespace {

// Header (with the data checksum and `metadata`) then the tensors' bytes,
// through the project's one atomic-write routine (viper/core/atomic_file.h):
// a private temporary beside `path` (random name, O_EXCL|O_NOFOLLOW, mode
// 0600), fsync, rename, fsync of the directory. `path` is never left
// half-written and a link planted in the directory is never written through.
Status SaveFile(const ModelState& state, const std::string& path, const std::map<std::string, std::string>& metadata) {
  VIPER_ASSIGN_OR_RETURN(const uint64_t checksum, safetensors::DataChecksum(state));
  VIPER_ASSIGN_OR_RETURN(const safetensors::Header header, safetensors::BuildHeader(state, &checksum, metadata));
  auto file = AtomicFile::CreateFor(path);
  if (!file.ok()) {
    if (file.status().code() == StatusCode::kNotFound) {
      return NotFoundError(path + ": the directory " + DirectoryOf(path) + " does not exist");
    }
    return file.status();
  }
  VIPER_RETURN_IF_ERROR((*file)->Write(header.bytes.data(), header.bytes.size()));
  for (const Tensor& t : state.tensors()) {
    if (t.size_bytes) VIPER_RETURN_IF_ERROR((*file)->Write(t.data, t.size_bytes));
  }
  return (*file)->CommitTo(path);  // the temporary goes on any failure
}

}  // namespace

void BindFiles(py::module_& m) {
  m.def(
      "save_file",
      [](const py::list& specs, const std::string& path, const std::map<std::string, std::string>& metadata) {
        for (const auto& [key, value] : metadata) {
          if (key.rfind("viper.", 0) == 0) {
            throw py::value_error("metadata key '" + key + "' is reserved (Viper writes the viper.* keys itself)");
          }
        }
        const ModelState state = StateFromSpecs(specs);
        for (const Tensor& t : state.tensors()) {
          if (t.memory != MemoryKind::kHost) {
            throw py::value_error("tensor '" + t.name + "' is in device memory; save_file takes CPU tensors");
          }
        }
        Status st;
        {
          py::gil_scoped_release release;
          st = SaveFile(state, path, metadata);
        }
        OkOrRaise(st);
      },
      py::arg("specs"), py::arg("path"), py::arg("metadata"),
      "Writes host tensor specs as a .safetensors file with Viper's checksum.");

  m.def(
      "load_file",
      [](const std::string& path, bool verify_checksum, bool require_checksum) {
        safetensors::ParseOptions options;
        options.verify_checksum = verify_checksum;
        options.require_checksum = require_checksum;
        StatusOr<safetensors::FileBuffer> file = InternalError("not read");
        StatusOr<ModelState> state = InternalError("not parsed");
        {
          py::gil_scoped_release release;
          // Like safetensors.torch.load_file, a symbolic link is followed
          // (the Hugging Face cache is links into blobs/); a FIFO or device
          // is still refused without blocking.
          safetensors::ReadFileOptions read_options;
          read_options.follow_symlinks = true;
          file = safetensors::ReadFileBuffer(path, read_options);
          if (file.ok()) {
            state = safetensors::Parse(std::shared_ptr<const void>(file->bytes, file->bytes.get()),
                                       file->bytes.get(), file->size, options);
          }
        }
        if (!file.ok()) Raise(file.status());
        if (!state.ok()) Raise(state.status().WithContext(path));
        auto metadata = ValueOrRaise(safetensors::ParseMetadata(file->bytes.get(), file->size));
        Buffer buffer;
        buffer.owner = std::shared_ptr<const void>(file->bytes, file->bytes.get());
        buffer.data = file->bytes.get();
        buffer.size = file->size;
        buffer.writable = true;
        return py::make_tuple(py::cast(std::move(buffer)), DescribeTensors(*state, file->bytes.get()),
                              py::cast(metadata));
      },
      py::arg("path"), py::arg("verify_checksum") = true, py::arg("require_checksum") = false,
      "Reads a .safetensors file: (Buffer, [(name, dtype, shape, offset, nbytes)], metadata). "
      "viper.checksum is verified when present.");
}

}  // namespace python
}  // namespace viper
