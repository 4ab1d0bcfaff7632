// RunGnuplot (cli_util.h): gnuplot in a private directory, without a shell.
//
// Everything gnuplot touches lives in a directory made by mkdtemp (mode
// 0700, so no other user can plant, read or replace a name in it): the
// script, written with AtomicFile; gnuplot's stdout and stderr, a file
// created there with O_EXCL|O_NOFOLLOW; the image it draws. gnuplot runs
// through posix_spawnp with an argument vector (no shell, no quoting). The
// image is then written to its destination through AtomicFile as well.
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli_util.h"
#include "viper/core/atomic_file.h"
#include "viper/core/safetensors.h"

extern char** environ;

namespace viper {
namespace cli {
namespace {

// A mkdtemp directory, emptied (its regular files only: nothing else can be
// in it) and removed on scope exit.
class PrivateDir {
 public:
  static StatusOr<PrivateDir> Make(const std::string& stem) {
    const char* env = std::getenv("TMPDIR");
    std::string base = env && *env ? env : "/tmp";
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    std::vector<char> name(base.begin(), base.end());
    const std::string tail = "/" + stem + "-XXXXXX";
    name.insert(name.end(), tail.begin(), tail.end());
    name.push_back('\0');
    if (::mkdtemp(name.data()) == nullptr) return ErrnoError("cannot create a private directory in " + base, errno);
    PrivateDir dir;
    dir.path_ = name.data();
    dir.fd_ = ::open(dir.path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir.fd_ < 0) return ErrnoError("cannot open " + dir.path_, errno);
    return StatusOr<PrivateDir>(std::move(dir));
  }
  PrivateDir() = default;
  PrivateDir(PrivateDir&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) {
    o.path_.clear();
    o.fd_ = -1;
  }
  PrivateDir& operator=(PrivateDir&&) = delete;
  ~PrivateDir() {
    if (fd_ < 0) {
      if (!path_.empty()) ::rmdir(path_.c_str());  // made, but not opened: empty
      return;
    }
    const int scan = ::dup(fd_);
    if (DIR* d = scan >= 0 ? ::fdopendir(scan) : nullptr) {
      std::vector<std::string> names;
      while (dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
      }
      ::closedir(d);
      for (const std::string& n : names) ::unlinkat(fd_, n.c_str(), 0);
    } else if (scan >= 0) {
      ::close(scan);
    }
    ::close(fd_);
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Up to `max` bytes of the file open at `fd`, from its start.
std::string ReadSome(int fd, size_t max) {
  std::string out(max, '\0');
  size_t done = 0;
  while (done < max) {
    const ssize_t n = ::pread(fd, out.data() + done, max - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace

std::string GnuplotQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "''";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out + "'";
}

Status RunGnuplot(const std::string& terminal, const std::string& script, const std::string& png) {
  VIPER_ASSIGN_OR_RETURN(PrivateDir dir, PrivateDir::Make("viper-gnuplot"));
  const std::string script_path = dir.path() + "/plot.gp";
  const std::string image_path = dir.path() + "/plot.png";
  VIPER_RETURN_IF_ERROR(
      WriteFileAtomically(script_path, terminal + "\nset output " + GnuplotQuote(image_path) + "\n" + script));
  const int err_fd = ::openat(dir.fd(), "gnuplot.err", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (err_fd < 0) return ErrnoError("cannot create gnuplot's error file in " + dir.path(), errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 1);  // stdout holds only our JSON
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  std::string program = "gnuplot";
  std::vector<char*> argv = {program.data(), const_cast<char*>(script_path.c_str()), nullptr};
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    ::close(err_fd);
    return UnavailableError(std::string("cannot run gnuplot: ") + std::strerror(spawned) +
                            " (install gnuplot-nox, or drop --plot)");
  }
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  std::string err = ReadSome(err_fd, 2001);
  ::close(err_fd);
  if (err.size() > 2000) err = err.substr(0, 2000) + "...";
  const bool ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  if (!ok) {
    const std::string how = WIFEXITED(wstatus) ? "exit " + std::to_string(WEXITSTATUS(wstatus))
                                               : "signal " + std::to_string(WTERMSIG(wstatus));
    const std::string hint = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 127 ? " (install gnuplot-nox, or drop --plot)" : "";
    return UnavailableError("gnuplot failed (" + how + ") drawing '" + png + "': " + err + hint);
  }
  // The image: a regular file gnuplot made in our directory, copied to `png`
  // atomically (a report: 0666 narrowed by the umask).
  safetensors::ReadFileOptions read_options;
  read_options.max_bytes = uint64_t{1} << 30;
  auto image = safetensors::ReadFileBufferAt(dir.fd(), "plot.png", image_path, read_options);
  if (!image.ok()) return IoError("gnuplot wrote no image for '" + png + "': " + image.status().message());
  AtomicFile::Options options;
  options.mode = 0666;
  options.apply_umask = true;
  Status written = WriteFileAtomically(
      png, std::string_view(reinterpret_cast<const char*>(image->bytes.get()), image->size), options);
  if (!written.ok()) return IoError("cannot write the plot to '" + png + "': " + written.message());
  return Status::Ok();
}

}  // namespace cli
}  // namespace viper
