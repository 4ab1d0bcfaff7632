#include "viper/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace viper {

StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::Create(const std::string& temp_path, bool o_direct) {
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
  if (o_direct) flags |= O_DIRECT;
  const int fd = ::open(temp_path.c_str(), flags, 0644);
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL && o_direct) {
      return UnavailableError("O_DIRECT is not supported on " + DirectoryOf(temp_path));
    }
    return ErrnoError("cannot create " + temp_path, err);
  }
  return std::unique_ptr<AtomicFile>(new AtomicFile(temp_path, fd));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_) ::unlink(temp_path_.c_str());
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
