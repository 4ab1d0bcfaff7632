// Writing a file so that a reader sees the old content or the new one, whole
// and durable, never a part: the bytes go to a temporary beside the target,
// which is fsynced, closed and renamed over the target, and the directory is
// fsynced so that the rename survives a crash. This is the project's one
// atomic-write routine: the safetensors codec (WriteFileAtomic), the PFS
// store (PfsStore::Write), every CLI output (--json, --trace, --requests-csv,
// --plot) and the Python module's save_file all write through it.
//
// The temporary is created with O_CREAT|O_EXCL|O_NOFOLLOW: a name planted
// beforehand (a file, or a symbolic link to somewhere else) is never opened,
// written or truncated. CreateFor picks the name itself, with 64 random bits
// in it, so that another user cannot predict it either; the file's mode is
// 0600 unless the caller asks for another.
//
//   VIPER_ASSIGN_OR_RETURN(auto file, AtomicFile::CreateFor(dir + "/x"));
//   VIPER_RETURN_IF_ERROR(file->Write(bytes.data(), bytes.size()));
//   VIPER_RETURN_IF_ERROR(file->CommitTo(dir + "/x"));   // else the temporary is removed
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "viper/core/status.h"

namespace viper {

class AtomicFile {
 public:
  struct Options {
    // Permission bits of the file. Applied exactly (fchmod, whatever the
    // umask) unless apply_umask, which lets the umask narrow them as open(2)
    // does (the CLI's reports: 0666 & ~umask, like any shell redirection).
    mode_t mode = 0600;
    bool apply_umask = false;
    // O_DIRECT: Unavailable where the file system refuses it.
    bool o_direct = false;
  };

  // A private temporary for `target` in target's directory, named
  // ".<target's name>.tmp-<16 random hex digits>" (retried on a clash).
  // NotFound when the directory does not exist.
  static StatusOr<std::unique_ptr<AtomicFile>> CreateFor(const std::string& target, const Options& options);
  static StatusOr<std::unique_ptr<AtomicFile>> CreateFor(const std::string& target) {
    return CreateFor(target, Options());
  }
  // Creates `temp_path`, a name the caller chose (exclusively, never through
  // a symbolic link; mode 0600 unless `mode` says otherwise).
  static StatusOr<std::unique_ptr<AtomicFile>> Create(const std::string& temp_path, bool o_direct = false,
                                                      mode_t mode = 0600);
  ~AtomicFile();  // unless committed: closes and removes the temporary
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::string& temp_path() const { return temp_path_; }

  // write(2)s all of `data`, retrying short writes and EINTR.
  Status Write(const void* data, std::size_t size);
  // fsync and close: the bytes are durable, not yet visible under the target.
  Status Sync();
  // Sync (if not done), rename over `path` and fsync `path`'s directory.
  // A symbolic link at `path` is replaced, never followed.
  Status CommitTo(const std::string& path);
  // Sync (if not done) and keep the temporary where it is (the caller moves
  // the directory holding it, e.g. with RenameDurably).
  Status Keep();

 private:
  AtomicFile(std::string temp_path, int fd) : temp_path_(std::move(temp_path)), fd_(fd) {}
  // `open_errno`, when given, receives open(2)'s errno (0 on success).
  static StatusOr<std::unique_ptr<AtomicFile>> Open(const std::string& temp_path, const Options& options,
                                                    int* open_errno);
  std::string temp_path_;
  int fd_ = -1;
  bool done_ = false;  // committed or kept: the destructor leaves the file alone
};

// `bytes` to `path` through AtomicFile::CreateFor: the old file or the new
// one, never a part, never through a link planted at a temporary name.
Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                           const AtomicFile::Options& options = AtomicFile::Options());

// fsync of directory `dir`: renames and removals in it become durable.
Status SyncDirectory(const std::string& dir);
// rename(from, to), then fsync of `to`'s directory.
Status RenameDurably(const std::string& from, const std::string& to);
// The directory part of `path` ("." when it has none).
std::string DirectoryOf(const std::string& path);
// 64 bits from the kernel's random source (getrandom), as 16 hex digits.
std::string RandomHex64();

}  // namespace viper
