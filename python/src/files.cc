// viper.save_file / viper.load_file: the safetensors codec of viper::core
// (byte-compatible files with Viper's checksum in __metadata__).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>

#include "bindings.h"
#include "viper/core/safetensors.h"

namespace viper {
namespace python {
namespace {

Status WriteAll(int fd, const void* data, uint64_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min<uint64_t>(size, 1ull << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write " + path, errno);
    }
    p += n;
    size -= static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

std::string DirectoryOf(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Header (with the data checksum and `metadata`) then the tensors' bytes, to
// `path`.tmp.<pid>, fsync, rename, fsync of the directory: `path` is never
// left half-written.
Status SaveFile(const ModelState& state, const std::string& path, const std::map<std::string, std::string>& metadata) {
  VIPER_ASSIGN_OR_RETURN(const uint64_t checksum, safetensors::DataChecksum(state));
  VIPER_ASSIGN_OR_RETURN(const safetensors::Header header, safetensors::BuildHeader(state, &checksum, metadata));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError(path + ": the directory " + DirectoryOf(path) + " does not exist");
    return ErrnoError("open " + tmp, errno);
  }
  Status st = WriteAll(fd, header.bytes.data(), header.bytes.size(), tmp);
  for (const Tensor& t : state.tensors()) {
    if (!st.ok()) break;
    st = WriteAll(fd, t.data, t.size_bytes, tmp);
  }
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoError("fsync " + tmp, errno);
  if (::close(fd) != 0 && st.ok()) st = ErrnoError("close " + tmp, errno);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = ErrnoError("rename " + tmp + " to " + path, errno);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  const int dir = ::open(DirectoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return Status::Ok();
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
          file = safetensors::ReadFileBuffer(path);
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
