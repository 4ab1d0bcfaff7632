#include "viper/transports/private_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace viper {
namespace transports {
namespace {

std::string Octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Removes what directory `fd` holds, recursively, never following a link.
Status RemoveContents(int fd, const std::string& path) {
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return ErrnoError("cannot list " + path, errno);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
  }
  Status result = Status::Ok();
  for (const auto& name : names) {
    struct stat st;
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      const int sub = ::openat(::dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        Status s = RemoveContents(sub, path + "/" + name);
        if (!s.ok() && result.ok()) result = s;
      }
      if (::unlinkat(::dirfd(d), name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT && result.ok())
        result = ErrnoError("cannot remove " + path + "/" + name, errno);
    } else if (::unlinkat(::dirfd(d), name.c_str(), 0) != 0 && errno != ENOENT && result.ok()) {
      result = ErrnoError("cannot remove " + path + "/" + name, errno);
    }
  }
  ::closedir(d);
  return result;
}

}  // namespace

Status CheckPrivateDirectory(const std::string& dir, bool allow_root_owner) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return ErrnoError("cannot use the model directory " + dir, errno);
  if (S_ISLNK(st.st_mode)) {
    return FailedPreconditionError("the model directory " + dir +
                                 " is a symbolic link: refusing it (name the real directory)");
  }
  if (!S_ISDIR(st.st_mode)) return FailedPreconditionError("the model directory " + dir + " is not a directory");
  const uid_t me = ::geteuid();
  if (st.st_uid != me && !(allow_root_owner && st.st_uid == 0)) {
    return FailedPreconditionError("the model directory " + dir + " belongs to uid " + std::to_string(st.st_uid) +
                                 ", not to this user (uid " + std::to_string(me) +
                                 "): another user could replace or read the models in it; refusing it "
                                 "(remove it, or choose a directory of your own)");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return FailedPreconditionError("the model directory " + dir + " has mode " + Octal(st.st_mode) +
                                 ": group or others may write into it and replace a model; refusing it "
                                 "(chmod go-w " + dir + ", or choose a private directory)");
  }
  return Status::Ok();
}

Status EnsurePrivateDirectory(const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("the model directory: empty path");
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return ErrnoError("cannot use the model directory " + dir, errno);
    // Create each missing component, privately.
    std::string prefix;
    std::size_t pos = 0;
    while (pos != std::string::npos) {
      pos = dir.find('/', pos + 1);
      prefix = dir.substr(0, pos);
      if (prefix.empty()) continue;
      if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
        return ErrnoError("cannot create the model directory " + prefix, errno);
    }
    // mkdir's mode is masked by the umask: say 0700 explicitly.
    if (::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
        (st.st_mode & 0777) != 0700) {
      ::chmod(dir.c_str(), 0700);
    }
  }
  return CheckPrivateDirectory(dir);
}

StatusOr<std::string> MakePrivateDirectory(const std::string& parent, const std::string& prefix) {
  std::string templ = (parent.empty() ? std::string(".") : parent) + "/" + prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) return ErrnoError("cannot create a private directory in " + parent, errno);
  return std::string(buf.data());
}

Status RemoveTree(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Status::Ok() : ErrnoError("cannot open " + dir, errno);
  Status s = RemoveContents(fd, dir);
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT && s.ok()) s = ErrnoError("cannot remove " + dir, errno);
  return s;
}

std::string NewSessionId() {
  unsigned char bytes[16] = {0};
  std::size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

StatusOr<std::string> ReadKeyFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) return FailedPreconditionError("the key file " + path + " is a symbolic link: refused");
    return ErrnoError("cannot open the key file " + path, errno);
  }
  struct stat st;
  std::string key;
  Status bad = Status::Ok();
  if (::fstat(fd, &st) != 0) {
    bad = ErrnoError("fstat " + path, errno);
  } else if (!S_ISREG(st.st_mode)) {
    bad = FailedPreconditionError("the key file " + path + " is not a regular file");
  } else if (st.st_uid != ::geteuid()) {
    bad = FailedPreconditionError("the key file " + path + " belongs to uid " + std::to_string(st.st_uid) +
                                  ", not to this user: refused");
  } else if ((st.st_mode & 077) != 0) {
    bad = FailedPreconditionError("the key file " + path + " has mode " + Octal(st.st_mode) +
                                  ": others may read it; chmod 600 " + path);
  } else if (st.st_size < 16 || st.st_size > 4096) {
    bad = FailedPreconditionError("the key file " + path + " holds " + std::to_string(st.st_size) +
                                  " bytes; a key is 16 to 4096 bytes (e.g. head -c 32 /dev/urandom)");
  } else {
    key.resize(static_cast<std::size_t>(st.st_size));
    std::size_t got = 0;
    while (got < key.size()) {
      const ssize_t n = ::read(fd, &key[got], key.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        bad = IoError("cannot read the key file " + path);
        break;
      }
      got += static_cast<std::size_t>(n);
    }
  }
  ::close(fd);
  if (!bad.ok()) return bad;
  return key;
}

bool ProcessAlive(long pid) {
  if (pid <= 0) return true;  // not a pid: never treated as dead
  if (::kill(static_cast<pid_t>(pid), 0) == 0) return true;
  return errno != ESRCH;
}

}  // namespace transports
}  // namespace viper
