#include "viper/core/atomic_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace viper {

std::string RandomHex64() {
  uint64_t bits = 0;
  auto* p = reinterpret_cast<unsigned char*>(&bits);
  std::size_t got = 0;
  while (got < sizeof(bits)) {
    const ssize_t n = ::getrandom(p + got, sizeof(bits) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  if (got < sizeof(bits)) {
    // No getrandom (very old kernel): mix the clock, pid and an address.
    // Names stay unique (O_EXCL retries); only their secrecy is weaker.
    bits ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ull;
    bits ^= (static_cast<uint64_t>(::getpid()) << 32) ^ static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&bits));
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(bits));
  return text;
}

StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::Open(const std::string& temp_path, const Options& options,
                                                    int* open_errno) {
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  if (options.o_direct) flags |= O_DIRECT;
  const int fd = ::open(temp_path.c_str(), flags, options.mode);
  if (open_errno) *open_errno = fd < 0 ? errno : 0;
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL && options.o_direct) {
      return UnavailableError("O_DIRECT is not supported on " + DirectoryOf(temp_path));
    }
    if (err == EEXIST) {
      return ErrnoError("cannot create " + temp_path + " (something, maybe a symbolic link, is already there)", err);
    }
    if (err == ENOENT) {
      return NotFoundError("cannot create " + temp_path + ": the directory " + DirectoryOf(temp_path) +
                           " does not exist");
    }
    return ErrnoError("cannot create " + temp_path, err);
  }
  if (!options.apply_umask && ::fchmod(fd, options.mode) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp_path.c_str());
    return ErrnoError("cannot set the mode of " + temp_path, err);
  }
  return std::unique_ptr<AtomicFile>(new AtomicFile(temp_path, fd));
}

StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::Create(const std::string& temp_path, bool o_direct, mode_t mode) {
  Options options;
  options.o_direct = o_direct;
  options.mode = mode;
  return Open(temp_path, options, nullptr);
}

StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::CreateFor(const std::string& target, const Options& options) {
  const auto slash = target.find_last_of('/');
  const std::string name = slash == std::string::npos ? target : target.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    return InvalidArgumentError("cannot write '" + target + "': it names a directory, not a file");
  }
  const std::string prefix = (slash == std::string::npos ? std::string() : target.substr(0, slash + 1)) + "." +
                             name.substr(0, 200) + ".tmp-";
  StatusOr<std::unique_ptr<AtomicFile>> file = InternalError("no attempt");
  for (int attempt = 0; attempt < 16; ++attempt) {
    int err = 0;
    file = Open(prefix + RandomHex64(), options, &err);
    if (err != EEXIST) break;  // created, or an error a new name does not cure
  }
  return file;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_) ::unlink(temp_path_.c_str());
}

Status AtomicFile::Write(const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, std::min<std::size_t>(size, std::size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("writing " + temp_path_, errno);
    }
    if (n == 0) return IoError("writing " + temp_path_ + ": no progress");
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Status AtomicFile::Sync() {
  if (fd_ < 0) return Status::Ok();
  if (::fsync(fd_) != 0) return ErrnoError("fsync of " + temp_path_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return ErrnoError("closing " + temp_path_, errno);
  return Status::Ok();
}

Status AtomicFile::CommitTo(const std::string& path) {
  VIPER_RETURN_IF_ERROR(Sync());
  if (::rename(temp_path_.c_str(), path.c_str()) != 0) {
    return ErrnoError("renaming " + temp_path_ + " to " + path, errno);
  }
  done_ = true;
  return SyncDirectory(DirectoryOf(path));
}

Status AtomicFile::Keep() {
  VIPER_RETURN_IF_ERROR(Sync());
  done_ = true;
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes, const AtomicFile::Options& options) {
  VIPER_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file, AtomicFile::CreateFor(path, options));
  VIPER_RETURN_IF_ERROR(file->Write(bytes.data(), bytes.size()));
  return file->CommitTo(path);
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("opening directory " + dir + " to fsync it", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync of directory " + dir, err);
  return Status::Ok();
}

Status RenameDurably(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoError("renaming " + from + " to " + to, errno);
  return SyncDirectory(DirectoryOf(to));
}

std::string DirectoryOf(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace viper
