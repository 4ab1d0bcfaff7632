// Writing a file so that a reader sees the old content or the new one, whole
// and durable, never a part: the bytes go to a temporary beside the target,
// which is fsynced, closed and renamed over the target, and the directory is
// fsynced so that the rename survives a crash. The safetensors codec
// (WriteFileAtomic) and the PFS store (PfsStore::Write) both write this way.
//
//   VIPER_ASSIGN_OR_RETURN(auto file, AtomicFile::Create(dir + "/.x.tmp", false));
//   ... write(file->fd(), ...) ...
//   VIPER_RETURN_IF_ERROR(file->CommitTo(dir + "/x"));   // else the temporary is removed
#pragma once

#include <memory>
#include <string>

#include "viper/core/status.h"

namespace viper {

class AtomicFile {
 public:
  // Creates `temp_path` (exclusively; with O_DIRECT when asked: Unavailable
  // where the file system refuses it).
  static StatusOr<std::unique_ptr<AtomicFile>> Create(const std::string& temp_path, bool o_direct = false);
  ~AtomicFile();  // unless committed: closes and removes the temporary
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::string& temp_path() const { return temp_path_; }

  // fsync and close: the bytes are durable, not yet visible under the target.
  Status Sync();
  // Sync (if not done), rename over `path` and fsync `path`'s directory.
  Status CommitTo(const std::string& path);
  // Sync (if not done) and keep the temporary where it is (the caller moves
  // the directory holding it, e.g. with RenameDurably).
  Status Keep();

 private:
  AtomicFile(std::string temp_path, int fd) : temp_path_(std::move(temp_path)), fd_(fd) {}
  std::string temp_path_;
  int fd_ = -1;
  bool done_ = false;  // committed or kept: the destructor leaves the file alone
};

// fsync of directory `dir`: renames and removals in it become durable.
Status SyncDirectory(const std::string& dir);
// rename(from, to), then fsync of `to`'s directory.
Status RenameDurably(const std::string& from, const std::string& to);
// The directory part of `path` ("." when it has none).
std::string DirectoryOf(const std::string& path);

}  // namespace viper
