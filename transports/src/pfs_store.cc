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
#include <memory>
#include <new>
#include <thread>
#include <utility>

#include "delta_ranges.h"
#include "viper/core/atomic_file.h"
#include "viper/core/checksum.h"
#include "viper/transports/private_dir.h"
#include "viper/transports/types.h"

namespace viper {
namespace transports {
namespace {

constexpr char kPrefix[] = "model-v";
constexpr char kSuffix[] = ".safetensors";
constexpr char kDeltaSuffix[] = ".delta";
// Longest chain a reader follows (Options::delta_chain_max is at most this).
constexpr int kMaxChain = 1000;
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
  if (delta_chain_max < 1 || delta_chain_max > kMaxChain) return fail("delta_chain_max: must be in [1, 1000]");
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

namespace {
// "model-v<digits><suffix>" -> digits (1 to 19 of them).
std::optional<uint64_t> VersionBetween(const std::string& name, const char* suffix) {
  const std::size_t np = sizeof(kPrefix) - 1, ns = std::strlen(suffix);
  if (name.size() <= np + ns || name.compare(0, np, kPrefix) != 0 ||
      name.compare(name.size() - ns, ns, suffix) != 0) {
    return std::nullopt;
  }
  return PfsStore::VersionFromDirName(name.substr(np, name.size() - np - ns));
}
}  // namespace

std::optional<uint64_t> PfsStore::VersionFromFileName(const std::string& name) {
  return VersionBetween(name, kSuffix);
}

std::optional<uint64_t> PfsStore::VersionFromDeltaFileName(const std::string& name) {
  return VersionBetween(name, kDeltaSuffix);
}

std::string PfsStore::DeltaPathFor(uint64_t version) const {
  return options_.dir + "/" + kPrefix + std::to_string(version) + kDeltaSuffix;
}

StatusOr<PfsStore::WriteStats> PfsStore::Write(uint64_t version, const std::byte* data, uint64_t size) const {
  return WriteFile(version, data, size, /*delta=*/false);
}

StatusOr<PfsStore::WriteStats> PfsStore::WriteFile(uint64_t version, const std::byte* data, uint64_t size,
                                                   bool delta) const {
  (void)RemoveDeadTemporaries();  // what a killed writer left (its pid is in the name)
  auto stats = WriteOnce(version, data, size, delta);
  // A full disk at the keep-N limit: make room by pruning first (down to
  // keep_versions - 1 older ones, at least one), then try once more, so the
  // disk need not hold N + 1 versions at once.
  if (!stats.ok() && options_.keep_versions > 0 && stats.status().message().find(std::strerror(ENOSPC)) !=
                                                       std::string::npos) {
    if (PruneOlder(version, std::max(1, options_.keep_versions - 1)) > 0) stats = WriteOnce(version, data, size, delta);
  }
  if (!stats.ok()) return stats;
  // A version has one file: the other kind (an earlier write of it) goes.
  if (options_.layout == Layout::kFlat) (void)RemoveKind(version, delta);
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
  // What stays: `version`, newer ones, the newest `keep` older ones, and
  // every base their chains need.
  std::vector<uint64_t> kept;
  for (uint64_t v : *versions) {
    if (v >= version) kept.push_back(v);
  }
  for (std::size_t i = older.size() > keep ? older.size() - keep : 0; i < older.size(); ++i) kept.push_back(older[i]);
  AddChainBases(&kept);
  std::size_t removed = 0;
  for (uint64_t v : older) {
    if (std::find(kept.begin(), kept.end(), v) == kept.end() && Remove(v).ok()) ++removed;
  }
  return removed;
}

// (Over 80 lines: write and commit in the one order that keeps a version durable.)
StatusOr<PfsStore::WriteStats> PfsStore::WriteOnce(uint64_t version, const std::byte* data, uint64_t size,
                                                   bool delta) const {
  std::string error;
  if (!options_.IsValid(&error)) return InvalidArgumentError("PfsStore::Options::" + error);
  const uint64_t align = AlignedBuffer::kAlignmentBytes;
  if (options_.o_direct && reinterpret_cast<uintptr_t>(data) % align != 0) {
    return InvalidArgumentError("PfsStore::Write: O_DIRECT needs a 4096-aligned buffer");
  }
  WriteStats stats;
  stats.path = delta ? DeltaPathFor(version) : PathFor(version);
  stats.bytes = size;
  static std::atomic<uint64_t> counter{0};  // unique temporaries within a process
  // The writer's pid and host are in the name: a later run removes what a
  // killed writer left (RemoveDeadTemporaries).
  const std::string unique =
      ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + HostTag();
  const bool tf = options_.layout == Layout::kTfServing;
  if (tf && delta) return InternalError("PfsStore: delta files exist in the flat layout only");
  // tf-serving: the file is written inside a hidden version directory that
  // is renamed into place whole.
  const std::string tmp_dir = options_.dir + "/." + std::to_string(version) + unique;
  const std::string tmp = tf ? tmp_dir + "/" + kTfFileName
                             : options_.dir + "/." + kPrefix + std::to_string(version) +
                                   (delta ? kDeltaSuffix : kSuffix) + unique;
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
    // unlinkat never follows the last component: a link is removed, not its
    // target. Both kinds of file the version may have go.
    for (const char* suffix : {kSuffix, kDeltaSuffix}) {
      const std::string name = std::string(kPrefix) + std::to_string(version) + suffix;
      if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT)
        return ErrnoError("cannot remove " + options_.dir + "/" + name, errno);
    }
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
  std::vector<uint64_t> stay(protect);
  stay.insert(stay.end(), versions.end() - static_cast<std::ptrdiff_t>(kept), versions.end());
  AddChainBases(&stay);  // a kept delta's bases stay too
  for (std::size_t i = 0; i + kept < versions.size(); ++i) {
    if (std::find(stay.begin(), stay.end(), versions[i]) != stay.end()) continue;
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
      if (auto v = VersionFromDeltaFileName(entry->d_name)) versions.push_back(*v);
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
  versions.erase(std::unique(versions.begin(), versions.end()), versions.end());
  return versions;
}

StatusOr<int> PfsStore::OpenVersion(uint64_t version, bool o_direct, bool delta) const {
  const std::string path = delta ? DeltaPathFor(version) : PathFor(version);
  const int dfd = OpenDir(options_.dir);
  if (dfd < 0) return ErrnoError("cannot open directory " + options_.dir, errno);
  Fd dir(dfd);
  int parent = dir.get();
  Fd vdir(-1);
  std::string name = std::string(kPrefix) + std::to_string(version) + (delta ? kDeltaSuffix : kSuffix);
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

bool PfsStore::IsDeltaVersion(uint64_t version) const {
  if (options_.layout != Layout::kFlat) return false;
  const int dfd = OpenDir(options_.dir);
  if (dfd < 0) return false;
  Fd dir(dfd);
  struct stat st;
  const std::string base = std::string(kPrefix) + std::to_string(version);
  if (::fstatat(dir.get(), (base + kSuffix).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return false;
  return ::fstatat(dir.get(), (base + kDeltaSuffix).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

Status PfsStore::RemoveKind(uint64_t version, bool delta) const {
  const int dfd = OpenDir(options_.dir);
  if (dfd < 0) return ErrnoError("cannot open directory " + options_.dir, errno);
  Fd dir(dfd);
  const std::string name = std::string(kPrefix) + std::to_string(version) + (delta ? kSuffix : kDeltaSuffix);
  if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT) {
    return ErrnoError("cannot remove " + options_.dir + "/" + name, errno);
  }
  return Status::Ok();
}

void PfsStore::AddChainBases(std::vector<uint64_t>* keep) const {
  if (options_.layout != Layout::kFlat) return;
  const std::size_t n = keep->size();
  for (std::size_t i = 0; i < n; ++i) {
    // A broken chain keeps what it still has (its reader reports the gap).
    uint64_t v = (*keep)[i];
    for (int depth = 0; depth <= kMaxChain && IsDeltaVersion(v); ++depth) {
      auto file = Describe(v);
      if (!file.ok() || !file->delta || file->base_version >= v) break;
      v = file->base_version;
      if (std::find(keep->begin(), keep->end(), v) == keep->end()) keep->push_back(v);
    }
  }
}

StatusOr<PfsStore::VersionFile> PfsStore::Describe(uint64_t version) const {
  VersionFile f;
  f.version = version;
  f.delta = IsDeltaVersion(version);
  f.path = f.delta ? DeltaPathFor(version) : PathFor(version);
  VIPER_ASSIGN_OR_RETURN(int raw, OpenVersion(version, false, f.delta));
  Fd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("fstat " + f.path, errno);
  f.bytes = static_cast<uint64_t>(st.st_size);
  auto read_at = [&](std::byte* out, uint64_t n, uint64_t off) -> Status {
    uint64_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd.get(), out + done, n - done, static_cast<off_t>(off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoError("pread " + f.path, errno);
      if (r == 0) return DataLossError(f.path + ": file shorter than its header says");
      done += static_cast<uint64_t>(r);
    }
    return Status::Ok();
  };
  if (f.delta) {
    std::byte head[delta::kFixedHeaderBytes];
    if (f.bytes < sizeof(head)) {
      return DataLossError(f.path + ": " + std::to_string(f.bytes) + " bytes, shorter than a delta's fixed header");
    }
    VIPER_RETURN_IF_ERROR(read_at(head, sizeof(head), 0));
    auto h = delta::ReadHeader(head, sizeof(head));
    if (!h.ok()) return h.status().WithContext(f.path);
    if (h->target_version != version || h->base_version >= version) {
      return DataLossError(f.path + ": the delta says it rebuilds version " + std::to_string(h->target_version) +
                           " from version " + std::to_string(h->base_version) + " (a delta rebuilds its own version "
                           "from an older one)");
    }
    f.base_version = h->base_version;
    f.base_checksum = h->base_checksum;
    f.checksum = h->target_checksum;
    f.image_bytes = h->target_image_bytes;
    return f;
  }
  f.image_bytes = f.bytes;
  std::byte prefix[8];
  if (f.bytes < 8) return DataLossError(f.path + ": " + std::to_string(f.bytes) + " bytes, no safetensors header");
  VIPER_RETURN_IF_ERROR(read_at(prefix, 8, 0));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(prefix[i]) << (8 * i);
  if (n > safetensors::kMaxHeaderBytes || n > f.bytes - 8) {
    return DataLossError(f.path + ": header length " + std::to_string(n) + " does not fit the file");
  }
  std::vector<std::byte> header(8 + n);
  VIPER_RETURN_IF_ERROR(read_at(header.data(), header.size(), 0));
  auto meta = safetensors::ParseMetadata(header.data(), header.size());
  if (!meta.ok()) return meta.status().WithContext(f.path);
  auto it = meta->find(safetensors::kChecksumKey);
  if (it != meta->end()) {
    if (auto sum = ChecksumFromHex(it->second)) f.checksum = *sum;
  }
  return f;
}

StatusOr<std::vector<uint64_t>> PfsStore::Chain(uint64_t version) const {
  std::vector<uint64_t> chain{version};
  uint64_t v = version;
  while (IsDeltaVersion(v)) {
    if (chain.size() > static_cast<std::size_t>(kMaxChain)) {
      return DataLossError(DeltaPathFor(version) + ": a chain of more than " + std::to_string(kMaxChain) + " deltas");
    }
    VIPER_ASSIGN_OR_RETURN(VersionFile f, Describe(v));
    v = f.base_version;
    chain.push_back(v);
    struct stat st;
    if (::lstat(PathFor(v).c_str(), &st) != 0 && !IsDeltaVersion(v)) {
      return NotFoundError("version " + std::to_string(chain[chain.size() - 2]) + " (" + f.path +
                           ") is a delta of version " + std::to_string(v) + ", which is not in " + options_.dir);
    }
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

StatusOr<std::vector<std::byte>> PfsStore::ReadDeltaFile(uint64_t version, uint64_t max_bytes) const {
  const std::string path = DeltaPathFor(version);
  VIPER_ASSIGN_OR_RETURN(int raw, OpenVersion(version, false, /*delta=*/true));
  Fd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("fstat " + path, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    return DataLossError(path + ": a delta of " + std::to_string(size) + " bytes for an image of at most " +
                         std::to_string(max_bytes));
  }
  std::vector<std::byte> bytes(size);
  uint64_t off = 0;
  while (off < size) {
    const ssize_t r = ::pread(fd.get(), bytes.data() + off, std::min(options_.io_chunk_bytes, size - off),
                              static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("pread " + path, errno);
    if (r == 0) return DataLossError(path + ": file shrank while reading");
    off += static_cast<uint64_t>(r);
  }
  return bytes;
}

StatusOr<uint64_t> PfsStore::ReadFrom(uint64_t version, uint64_t held, uint64_t held_size,
                                      AlignedBuffer* buffer, std::vector<uint64_t>* chain,
                                      safetensors::ParseInfo* verified,
                                      std::vector<std::pair<uint64_t, uint64_t>>* written) const {
  if (written != nullptr) written->clear();
  auto full_chain = Chain(version);
  if (!full_chain.ok() || held_size > buffer->capacity()) return ReadImage(version, buffer, chain);
  auto at = std::find(full_chain->begin(), full_chain->end(), held);
  if (at == full_chain->end()) return ReadImage(version, buffer, chain);
  chain->assign(at + 1, full_chain->end());
  if (chain->empty()) return held_size;  // already there
  return ApplyDeltas(*chain, held_size, buffer, verified, written);
}

StatusOr<uint64_t> PfsStore::ApplyDeltas(const std::vector<uint64_t>& versions, uint64_t size,
                                         AlignedBuffer* buffer, safetensors::ParseInfo* verified,
                                         std::vector<std::pair<uint64_t, uint64_t>>* written) const {
  for (uint64_t v : versions) {
    VIPER_ASSIGN_OR_RETURN(VersionFile f, Describe(v));
    if (!f.delta) return InternalError(f.path + " is not a delta");
    if (f.image_bytes > size + f.bytes) {
      return DataLossError(f.path + ": says its image has " + std::to_string(f.image_bytes) +
                           " bytes, more than its base and the delta can make");
    }
    if (buffer->capacity() < f.image_bytes) {
      // A larger header: grow, keeping the base's bytes.
      VIPER_ASSIGN_OR_RETURN(AlignedBuffer bigger, AlignedBuffer::Allocate(f.image_bytes));
      std::memcpy(bigger.data(), buffer->data(), size);
      *buffer = std::move(bigger);
    }
    VIPER_ASSIGN_OR_RETURN(std::vector<std::byte> d, ReadDeltaFile(v, f.image_bytes + delta::kFixedHeaderBytes));
    auto applied = delta::Apply(buffer->data(), size, buffer->capacity(), d.data(), d.size());
    if (!applied.ok()) {
      return applied.status().WithContext(f.path + " (version " + std::to_string(v) + ", a delta of version " +
                                          std::to_string(f.base_version) + ")");
    }
    if (written != nullptr && v == versions.back()) {
      // What the last delta wrote (its record headers; Apply checked it whole).
      auto contents = delta::ReadContents(d.data(), d.size());
      auto ranges = contents.ok() ? internal::RangesWritten(*applied, buffer->data(), size, contents->records)
                                  : std::nullopt;
      if (ranges) *written = std::move(*ranges);
    }
    size = applied->image_bytes;
    if (verified != nullptr) *verified = std::move(applied->info);
  }
  return size;
}

StatusOr<uint64_t> PfsStore::ReadChain(uint64_t version, AlignedBuffer* buffer, std::vector<uint64_t>* chain) const {
  VIPER_ASSIGN_OR_RETURN(*chain, Chain(version));
  // The full version the chain rests on, then each delta in place.
  std::vector<uint64_t> base_chain;
  VIPER_ASSIGN_OR_RETURN(uint64_t size, ReadImage(chain->front(), buffer, &base_chain));
  return ApplyDeltas(std::vector<uint64_t>(chain->begin() + 1, chain->end()), size, buffer);
}

// (Over 80 lines: the choice between a delta and a full version, in one place.)
StatusOr<PfsStore::WriteStats> PfsStore::WriteDelta(uint64_t version, const std::byte* data, uint64_t size,
                                                    const std::byte* base, uint64_t base_size) const {
  std::string error;
  if (!options_.IsValid(&error)) return InvalidArgumentError("PfsStore::Options::" + error);
  auto full = [&](const std::string& why) -> StatusOr<WriteStats> {
    VIPER_ASSIGN_OR_RETURN(WriteStats stats, WriteFile(version, data, size, /*delta=*/false));
    stats.delta_report = "full v" + std::to_string(version) + ": " + why;
    return stats;
  };
  if (options_.layout != Layout::kFlat) return full("the tf-serving layout holds full versions only");
  VIPER_ASSIGN_OR_RETURN(delta::ImageId base_id, delta::Identify(base, base_size));
  // The base must be in the store as that very image, and the chain short enough.
  const std::string base_name = "base v" + std::to_string(base_id.version);
  auto stored = Describe(base_id.version);
  if (!stored.ok()) return full(base_name + " is not readable in the store: " + stored.status().message());
  auto chain = Chain(base_id.version);
  if (!chain.ok()) return full(base_name + " is not readable in the store: " + chain.status().message());
  if (static_cast<int>(chain->size()) > options_.delta_chain_max) {
    return full("every " + std::to_string(options_.delta_chain_max + 1) + " versions a full one");
  }
  if (stored->checksum != base_id.checksum) {
    return full("the store's v" + std::to_string(base_id.version) + " is not the base image given (checksum)");
  }
  // Room for the whole image: a delta is only written when smaller. Not
  // pre-touched: only the delta's bytes are written.
  const uint64_t align = AlignedBuffer::kAlignmentBytes;
  const uint64_t room = RoundUp(std::max<uint64_t>(size, 1), align);
  std::unique_ptr<std::byte[], void (*)(std::byte*)> out(
      static_cast<std::byte*>(::operator new[](room, std::align_val_t{align})),
      [](std::byte* p) { ::operator delete[](p, std::align_val_t{AlignedBuffer::kAlignmentBytes}); });
  const double t0 = MonotonicSeconds();
  VIPER_ASSIGN_OR_RETURN(delta::EncodeSummary summary, delta::Encode(base, base_size, data, size, out.get(), room));
  const double encode_s = MonotonicSeconds() - t0;
  if (summary.full) {
    auto stats = full(summary.reason);
    if (stats.ok()) stats->encode_s = encode_s;
    return stats;
  }
  // O_DIRECT writes whole blocks: the padding is zeroed (it is truncated away).
  if (options_.o_direct) std::memset(out.get() + summary.delta_bytes, 0, RoundUp(summary.delta_bytes, align) - summary.delta_bytes);
  VIPER_ASSIGN_OR_RETURN(WriteStats stats, WriteFile(version, out.get(), summary.delta_bytes, /*delta=*/true));
  stats.delta = true;
  stats.base_version = base_id.version;
  stats.encode_s = encode_s;
  stats.delta_report = summary.BriefReport();
  return stats;
}

StatusOr<PfsStore::FileId> PfsStore::Identify(uint64_t version) const {
  auto opened = OpenVersion(version, false);
  if (!opened.ok() && IsDeltaVersion(version)) opened = OpenVersion(version, false, /*delta=*/true);
  VIPER_ASSIGN_OR_RETURN(int raw, std::move(opened));
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
  std::vector<uint64_t> chain;
  return ReadImage(version, buffer, &chain);
}

StatusOr<uint64_t> PfsStore::ReadImage(uint64_t version, AlignedBuffer* buffer, std::vector<uint64_t>* chain) const {
  if (IsDeltaVersion(version)) return ReadChain(version, buffer, chain);
  *chain = {version};
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
  const std::string path = IsDeltaVersion(version) ? DeltaPathFor(version) : PathFor(version);
  Checked out;
  VIPER_ASSIGN_OR_RETURN(uint64_t size, ReadImage(version, buffer, &out.chain));
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
