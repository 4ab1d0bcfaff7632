#include "viper/transports/pfs_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "viper/core/atomic_file.h"
#include "viper/core/checksum.h"
#include "viper/transports/private_dir.h"
#include "viper/transports/types.h"

namespace viper {
namespace transports {
namespace {

constexpr char kPrefix[] = "model-v";
constexpr char kSuffix[] = ".safetensors";
constexpr char kTfFileName[] = "model.safetensors";

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = other.Release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// pwrite()s [begin, end) of `data` to `fd` at the same offsets in `chunk` steps.
Status WriteRange(int fd, const std::byte* data, uint64_t begin, uint64_t end, uint64_t chunk,
                  const std::string& path) {
  uint64_t off = begin;
  while (off < end) {
    const uint64_t n = std::min(chunk, end - off);
    const ssize_t w = ::pwrite(fd, data + off, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("pwrite " + path + " at offset " + std::to_string(off), errno);
    }
    if (w == 0) return IoError("pwrite " + path + " wrote nothing at offset " + std::to_string(off));
    off += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}


// 8 hex digits naming this host in temporaries, so a shared directory's
// cleanup judges only the pids of its own host.
const std::string& HostTag() {
  static const std::string tag = [] {
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    const uint64_t h = Xxh3_64(reinterpret_cast<const std::byte*>(host), std::strlen(host));
    char buf[9];
    std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(h & 0xffffffffu));
    return std::string(buf);
  }();
  return tag;
}

// A temporary's writer: ".<anything>.tmp-<pid>-<n>[-<hosttag>]". Returns the
// pid when the name is a temporary of this host (or names no host: written
// before host tags), else 0.
long TemporaryPid(const std::string& name) {
  if (name.empty() || name[0] != '.') return 0;
  const std::size_t at = name.rfind(".tmp-");
  if (at == std::string::npos) return 0;
  std::size_t i = at + 5;
  long pid = 0;
  std::size_t digits = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 10) {
    pid = pid * 10 + (name[i] - '0');
    ++i, ++digits;
  }
  if (digits == 0 || i >= name.size() || name[i] != '-') return 0;
  ++i;
  std::size_t n = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i, ++n;
  if (n == 0) return 0;
  if (i == name.size()) return pid;  // no host tag
  if (name[i] != '-' || name.compare(i + 1, std::string::npos, HostTag()) != 0) return 0;
  return pid;
}

// Opens directory `dir` itself, never through a symbolic link.
int OpenDir(const std::string& dir) {
  return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}


}  // namespace

const char* PfsStore::ToString(Layout layout) {
  return layout == Layout::kTfServing ? "tf-serving" : "flat";
}

std::optional<PfsStore::Layout> PfsStore::LayoutFromString(const std::string& name) {
  if (name == "flat") return Layout::kFlat;
  if (name == "tf-serving") return Layout::kTfServing;
  return std::nullopt;
}

std::string PfsStore::Checked::TrustText() const {
  switch (info.checksum) {
    case safetensors::ChecksumKind::kDataAndHeader:
      return "verified (data+header)";
    case safetensors::ChecksumKind::kDataOnly:
      return "verified (data only, legacy)";
    case safetensors::ChecksumKind::kNone:
      break;
  }
  return "unverified (no Viper checksum)";
}

bool PfsStore::Options::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (dir.empty()) return fail("dir: must name a directory");
  if (writer_threads < 1 || writer_threads > 64) return fail("writer_threads: must be in [1, 64]");
  if (io_chunk_bytes == 0 || io_chunk_bytes % AlignedBuffer::kAlignmentBytes != 0) {
    return fail("io_chunk_bytes: must be a positive multiple of 4096");
  }
  if (io_chunk_bytes > (1ull << 30)) return fail("io_chunk_bytes: must be at most 1 GiB");
  if (keep_versions < 0) return fail("keep_versions: must be >= 0");
  return true;
}

PfsStore::PfsStore(Options options) : options_(std::move(options)) {}

std::string PfsStore::PathFor(uint64_t version) const {
  if (options_.layout == Layout::kTfServing) return options_.dir + "/" + std::to_string(version) + "/" + kTfFileName;
  return options_.dir + "/" + kPrefix + std::to_string(version) + kSuffix;
}

std::optional<uint64_t> PfsStore::VersionFromDirName(const std::string& name) {
  if (name.empty() || name.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

std::optional<uint64_t> PfsStore::VersionFromFileName(const std::string& name) {
  const std::size_t np = sizeof(kPrefix) - 1, ns = sizeof(kSuffix) - 1;
  if (name.size() <= np + ns || name.compare(0, np, kPrefix) != 0 ||
      name.compare(name.size() - ns, ns, kSuffix) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(np, name.size() - np - ns);
  if (digits.empty() || digits.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

StatusOr<PfsStore::WriteStats> PfsStore::Write(uint64_t version, const std::byte* data, uint64_t size) const {
  (void)RemoveDeadTemporaries();  // what a killed writer left (its pid is in the name)
  auto stats = WriteOnce(version, data, size);
  // A full disk at the keep-N limit: make room by pruning first (down to
  // keep_versions - 1 older ones, at least one), then try once more, so the
  // disk need not hold N + 1 versions at once.
  if (!stats.ok() && options_.keep_versions > 0 && stats.status().message().find(std::strerror(ENOSPC)) !=
                                                       std::string::npos) {
    if (PruneOlder(version, std::max(1, options_.keep_versions - 1)) > 0) stats = WriteOnce(version, data, size);
  }
  if (!stats.ok()) return stats;
  if (options_.keep_versions > 0) (void)PruneOlder(version, options_.keep_versions - 1);
  return stats;
}

std::size_t PfsStore::PruneOlder(uint64_t version, int keep_older) const {
  // Keeps `keep_older` newest versions older than `version`; newer versions
  // (another writer's) are left alone.
  auto versions = ListVersions();
  if (!versions.ok()) return 0;
  std::vector<uint64_t> older;
  for (uint64_t v : *versions) {
    if (v < version) older.push_back(v);
  }
  const std::size_t keep = static_cast<std::size_t>(std::max(0, keep_older));
  std::size_t removed = 0;
  for (std::size_t i = 0; i + keep < older.size(); ++i) {
    if (Remove(older[i]).ok()) ++removed;
  }
  return removed;
}

// (Over 80 lines: write and commit in the one order that keeps a version durable.)
StatusOr<PfsStore::WriteStats> PfsStore::WriteOnce(uint64_t version, const std::byte* data, uint64_t size) const {
  std::string error;
  if (!options_.IsValid(&error)) return InvalidArgumentError("PfsStore::Options::" + error);
  const uint64_t align = AlignedBuffer::kAlignmentBytes;
  if (options_.o_direct && reinterpret_cast<uintptr_t>(data) % align != 0) {
    return InvalidArgumentError("PfsStore::Write: O_DIRECT needs a 4096-aligned buffer");
  }
  WriteStats stats;
  stats.path = PathFor(version);
  stats.bytes = size;
  static std::atomic<uint64_t> counter{0};  // unique temporaries within a process
  // The writer's pid and host are in the name: a later run removes what a
  // killed writer left (RemoveDeadTemporaries).
  const std::string unique =
      ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + HostTag();
  const bool tf = options_.layout == Layout::kTfServing;
  // tf-serving: the file is written inside a hidden version directory that
  // is renamed into place whole.
  const std::string tmp_dir = options_.dir + "/." + std::to_string(version) + unique;
  const std::string tmp = tf ? tmp_dir + "/" + kTfFileName
                             : options_.dir + "/." + kPrefix + std::to_string(version) + kSuffix + unique;
  if (tf && ::mkdir(tmp_dir.c_str(), 0700) != 0) {
    return ErrnoError("cannot create " + tmp_dir + " (does the directory " + options_.dir + " exist?)", errno);
  }
  // The one atomic-write routine (viper/core/atomic_file.h): the temporary
  // is removed on every failure below.
  auto file = AtomicFile::Create(tmp, options_.o_direct);
  if (!file.ok()) {
    if (tf) ::rmdir(tmp_dir.c_str());
    if (file.status().code() == StatusCode::kUnavailable) return file.status();
    return file.status().WithContext("does the directory " + options_.dir + " exist?");
  }
  const int fd = (*file)->fd();
  auto fail = [&](Status s) {
    file->reset();  // closes and removes the temporary
    if (tf) ::rmdir(tmp_dir.c_str());
    return s;
  };
  // Models are private: 0600 whatever the umask (before any byte is written).
  if (::fchmod(fd, 0600) != 0) return fail(ErrnoError("fchmod " + tmp, errno));

  const double t0 = MonotonicSeconds();
  const uint64_t write_size = options_.o_direct ? RoundUp(size, align) : size;
  const int threads = static_cast<int>(
      std::max<uint64_t>(1, std::min<uint64_t>(options_.writer_threads, write_size / align)));
  if (threads <= 1) {
    Status s = WriteRange(fd, data, 0, write_size, options_.io_chunk_bytes, tmp);
    if (!s.ok()) return fail(s);
  } else {
    // Disjoint ranges aligned to `align`, one per thread.
    const uint64_t per = RoundUp((write_size + threads - 1) / threads, align);
    std::vector<Status> results(threads);
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; ++i) {
      const uint64_t b = std::min(write_size, per * i), e = std::min(write_size, per * (i + 1));
      workers.emplace_back(
          [&, i, b, e] { results[i] = WriteRange(fd, data, b, e, options_.io_chunk_bytes, tmp); });
    }
    for (auto& w : workers) w.join();
    for (auto& s : results) {
      if (!s.ok()) return fail(s);
    }
  }
  if (write_size != size && ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    return fail(ErrnoError("ftruncate " + tmp, errno));
  }
  const double t1 = MonotonicSeconds();
  if (tf) {
    // The file stays in its hidden directory, which moves into place whole.
    Status kept = (*file)->Keep();
    if (!kept.ok()) return fail(kept);
    const std::string final_dir = options_.dir + "/" + std::to_string(version);
    Status synced = SyncDirectory(tmp_dir);
    if (!synced.ok()) {
      ::unlink(tmp.c_str());
      return fail(synced);
    }
    // Rewriting a version: whatever holds its name goes first (rename() does
    // not replace a non-empty directory). Remove works relative to the
    // directory's own descriptor and never follows a link out of it.
    struct stat st;
    if (::lstat(final_dir.c_str(), &st) == 0) {
      Status removed = Remove(version, /*replace=*/true);
      if (!removed.ok()) {
        ::unlink(tmp.c_str());
        return fail(removed);
      }
    }
    Status moved = RenameDurably(tmp_dir, final_dir);
    if (!moved.ok()) {
      ::unlink(tmp.c_str());
      return fail(moved);
    }
  } else {
    Status committed = (*file)->CommitTo(stats.path);  // fsync, rename, directory fsync
    if (!committed.ok()) return fail(committed);
  }
  stats.write_s = t1 - t0;
  stats.sync_s = MonotonicSeconds() - t1;
  return stats;
}

Status PfsStore::Remove(uint64_t version) const { return Remove(version, false); }

Status PfsStore::Remove(uint64_t version, bool replace) const {
  const int dfd = OpenDir(options_.dir);
  if (dfd < 0) return ErrnoError("cannot open directory " + options_.dir, errno);
  Fd dir(dfd);
  if (options_.layout == Layout::kFlat) {
    // unlinkat never follows the last component: a link is removed, not its target.
    const std::string name = std::string(kPrefix) + std::to_string(version) + kSuffix;
    if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT)
      return ErrnoError("cannot remove " + PathFor(version), errno);
    return Status::Ok();
  }
  const std::string name = std::to_string(version);
  const std::string path = options_.dir + "/" + name;
  struct stat st;
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? Status::Ok() : ErrnoError("cannot stat " + path, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    // A link or file under a version's name is not a version: pruning leaves
    // it alone; rewriting removes the entry itself (never what it points to).
    if (!replace) return FailedPreconditionError(path + " is not a real directory; left alone");
    if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT)
      return ErrnoError("cannot remove " + path, errno);
    return Status::Ok();
  }
  const int vfd = ::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (vfd < 0) return ErrnoError("cannot open version directory " + path, errno);
  Fd vdir(vfd);
  if (::unlinkat(vdir.get(), kTfFileName, 0) != 0 && errno != ENOENT)
    return ErrnoError("cannot remove " + PathFor(version), errno);
  if (::unlinkat(dir.get(), name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return ErrnoError("cannot remove version directory " + path + " (other files in it?)", errno);
  }
  return Status::Ok();
}

StatusOr<std::vector<uint64_t>> PfsStore::Prune(int keep, const std::vector<uint64_t>& protect) const {
  std::vector<uint64_t> removed;
  (void)RemoveDeadTemporaries();
  if (keep <= 0) return removed;
  VIPER_ASSIGN_OR_RETURN(std::vector<uint64_t> versions, ListVersions());
  const std::size_t kept = std::min(versions.size(), static_cast<std::size_t>(keep));
  for (std::size_t i = 0; i + kept < versions.size(); ++i) {
    if (std::find(protect.begin(), protect.end(), versions[i]) != protect.end()) continue;
    VIPER_RETURN_IF_ERROR(Remove(versions[i]));
    removed.push_back(versions[i]);
  }
  if (!removed.empty()) VIPER_RETURN_IF_ERROR(SyncDirectory(options_.dir));
  return removed;
}

std::vector<std::string> PfsStore::RemoveDeadTemporaries() const {
  std::vector<std::string> removed;
  const int dfd = OpenDir(options_.dir);
  if (dfd < 0) return removed;
  DIR* d = ::fdopendir(dfd);
  if (d == nullptr) {
    ::close(dfd);
    return removed;
  }
  std::vector<std::string> dead;
  while (dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    const long pid = TemporaryPid(name);
    if (pid > 0 && pid != static_cast<long>(::getpid()) && !ProcessAlive(pid)) dead.push_back(name);
  }
  for (const auto& name : dead) {
    struct stat st;
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {  // tf-serving: a hidden version directory
      const int vfd = ::openat(::dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (vfd >= 0) {
        ::unlinkat(vfd, kTfFileName, 0);
        ::close(vfd);
      }
      if (::unlinkat(::dirfd(d), name.c_str(), AT_REMOVEDIR) == 0) removed.push_back(name);
    } else if (::unlinkat(::dirfd(d), name.c_str(), 0) == 0) {
      removed.push_back(name);
    }
  }
  ::closedir(d);
  return removed;
}

StatusOr<std::vector<uint64_t>> PfsStore::ListVersions() const {
  const int dfd = OpenDir(options_.dir);
  if (dfd < 0) return ErrnoError("cannot open directory " + options_.dir, errno);
  DIR* d = ::fdopendir(dfd);
  if (d == nullptr) {
    const int e = errno;
    ::close(dfd);
    return ErrnoError("cannot open directory " + options_.dir, e);
  }
  std::vector<uint64_t> versions;
  while (dirent* entry = ::readdir(d)) {
    if (options_.layout == Layout::kFlat) {
      if (auto v = VersionFromFileName(entry->d_name)) versions.push_back(*v);
    } else if (auto v = VersionFromDirName(entry->d_name)) {
      // A real numbered directory is a version once its regular file is there.
      struct stat st;
      if (::fstatat(::dirfd(d), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
      const int vfd = ::openat(::dirfd(d), entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (vfd < 0) continue;
      if (::fstatat(vfd, kTfFileName, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) versions.push_back(*v);
      ::close(vfd);
    }
  }
  ::closedir(d);
  std::sort(versions.begin(), versions.end());
  return versions;
}

StatusOr<int> PfsStore::OpenVersion(uint64_t version, bool o_direct) const {
  const std::string path = PathFor(version);
  const int dfd = OpenDir(options_.dir);
  if (dfd < 0) return ErrnoError("cannot open directory " + options_.dir, errno);
  Fd dir(dfd);
  int parent = dir.get();
  Fd vdir(-1);
  std::string name = std::string(kPrefix) + std::to_string(version) + kSuffix;
  if (options_.layout == Layout::kTfServing) {
    const std::string sub = std::to_string(version);
    vdir = Fd(::openat(dir.get(), sub.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (vdir.get() < 0) return ErrnoError("cannot open " + options_.dir + "/" + sub + " (a real directory)", errno);
    parent = vdir.get();
    name = kTfFileName;
  }
  // No link, no FIFO or device: O_NONBLOCK keeps a FIFO from blocking the
  // open, and anything but a regular file is refused before a byte is read.
  int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  if (o_direct) flags |= O_DIRECT;
  Fd fd(::openat(parent, name.c_str(), flags));
  if (fd.get() < 0) {
    if (errno == ELOOP) return FailedPreconditionError(path + " is a symbolic link, not a model file: refused");
    return ErrnoError("cannot open " + path, errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("fstat " + path, errno);
  if (!S_ISREG(st.st_mode)) return FailedPreconditionError(path + " is not a regular file: refused");
  return fd.Release();
}

StatusOr<PfsStore::FileId> PfsStore::Identify(uint64_t version) const {
  VIPER_ASSIGN_OR_RETURN(int raw, OpenVersion(version, false));
  Fd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("fstat " + PathFor(version), errno);
  FileId id;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id.inode = static_cast<uint64_t>(st.st_ino);
  return id;
}

StatusOr<uint64_t> PfsStore::Read(uint64_t version, AlignedBuffer* buffer) const {
  const std::string path = PathFor(version);
  VIPER_ASSIGN_OR_RETURN(int raw, OpenVersion(version, options_.o_direct));
  Fd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("fstat " + path, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t align = AlignedBuffer::kAlignmentBytes;
  const uint64_t need = RoundUp(size, align);
  if (buffer->capacity() < need) {
    VIPER_ASSIGN_OR_RETURN(*buffer, AlignedBuffer::Allocate(need));
  }
  uint64_t off = 0;
  while (off < size) {
    // O_DIRECT reads whole aligned blocks; the last one comes back short.
    const uint64_t n = std::min(options_.io_chunk_bytes, need - off);
    const ssize_t r = ::pread(fd.get(), buffer->data() + off, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("pread " + path + " at offset " + std::to_string(off), errno);
    }
    if (r == 0) {
      return DataLossError(path + ": file shrank while reading (" + std::to_string(off) + " of " +
                           std::to_string(size) + " bytes)");
    }
    off += static_cast<uint64_t>(r);
  }
  return size;
}

StatusOr<PfsStore::Checked> PfsStore::ReadChecked(uint64_t version, AlignedBuffer* buffer) const {
  const std::string path = PathFor(version);
  VIPER_ASSIGN_OR_RETURN(uint64_t size, Read(version, buffer));
  Checked out;
  out.bytes = size;
  safetensors::ParseOptions po;
  po.require_checksum = options_.require_checksum;
  auto state = safetensors::Parse(nullptr, buffer->data(), size, po, &out.info);
  if (!state.ok()) return state.status().WithContext(path);
  out.state = std::move(*state);
  if (!out.verified()) {
    out.state.metadata.version = version;  // another writer's file: the name is all there is
  } else if (out.state.metadata.version != version) {
    return DataLossError(path + ": the file name says version " + std::to_string(version) +
                         ", its metadata (viper.version) " + std::to_string(out.state.metadata.version));
  }
  return out;
}

}  // namespace transports
}  // namespace viper
