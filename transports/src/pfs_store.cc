#include "viper/transports/pfs_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>
#include <utility>

#include "viper/transports/types.h"

namespace viper {
namespace transports {
namespace {

constexpr char kPrefix[] = "model-v";
constexpr char kSuffix[] = ".safetensors";

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
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

}  // namespace

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
  return options_.dir + "/" + kPrefix + std::to_string(version) + kSuffix;
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
  const std::string tmp = options_.dir + "/." + kPrefix + std::to_string(version) + kSuffix + ".tmp-" +
                          std::to_string(::getpid()) + "-" + std::to_string(counter++);
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
  if (options_.o_direct) flags |= O_DIRECT;
  Fd fd(::open(tmp.c_str(), flags, 0644));
  if (fd.get() < 0) {
    const int e = errno;
    if (e == EINVAL && options_.o_direct) {
      return UnavailableError("O_DIRECT is not supported on " + options_.dir);
    }
    return ErrnoError("cannot create " + tmp + " (does the directory " + options_.dir + " exist?)", e);
  }
  auto fail = [&](Status s) {
    ::unlink(tmp.c_str());
    return s;
  };

  const double t0 = MonotonicSeconds();
  const uint64_t write_size = options_.o_direct ? RoundUp(size, align) : size;
  const int threads = static_cast<int>(
      std::max<uint64_t>(1, std::min<uint64_t>(options_.writer_threads, write_size / align)));
  if (threads <= 1) {
    Status s = WriteRange(fd.get(), data, 0, write_size, options_.io_chunk_bytes, tmp);
    if (!s.ok()) return fail(s);
  } else {
    // Disjoint ranges aligned to `align`, one per thread.
    const uint64_t per = RoundUp((write_size + threads - 1) / threads, align);
    std::vector<Status> results(threads);
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; ++i) {
      const uint64_t b = std::min(write_size, per * i), e = std::min(write_size, per * (i + 1));
      workers.emplace_back(
          [&, i, b, e] { results[i] = WriteRange(fd.get(), data, b, e, options_.io_chunk_bytes, tmp); });
    }
    for (auto& w : workers) w.join();
    for (auto& s : results) {
      if (!s.ok()) return fail(s);
    }
  }
  if (write_size != size && ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return fail(ErrnoError("ftruncate " + tmp, errno));
  }
  const double t1 = MonotonicSeconds();
  if (::fsync(fd.get()) != 0) return fail(ErrnoError("fsync " + tmp, errno));
  if (::close(fd.Release()) != 0) return fail(ErrnoError("close " + tmp, errno));
  if (::rename(tmp.c_str(), stats.path.c_str()) != 0) {
    return fail(ErrnoError("rename " + tmp + " -> " + stats.path, errno));
  }
  Fd dir(::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0 || ::fsync(dir.get()) != 0) {
    return ErrnoError("fsync of directory " + options_.dir, errno);
  }
  stats.write_s = t1 - t0;
  stats.sync_s = MonotonicSeconds() - t1;

  if (options_.keep_versions > 0) {
    auto versions = ListVersions();
    if (versions.ok()) {
      std::vector<uint64_t> older;
      for (uint64_t v : *versions) {
        if (v < version) older.push_back(v);
      }
      const std::size_t keep = static_cast<std::size_t>(options_.keep_versions - 1);
      for (std::size_t i = 0; i + keep < older.size(); ++i) ::unlink(PathFor(older[i]).c_str());
    }
  }
  return stats;
}

StatusOr<std::vector<uint64_t>> PfsStore::ListVersions() const {
  DIR* d = ::opendir(options_.dir.c_str());
  if (d == nullptr) return ErrnoError("cannot open directory " + options_.dir, errno);
  std::vector<uint64_t> versions;
  while (dirent* entry = ::readdir(d)) {
    if (auto v = VersionFromFileName(entry->d_name)) versions.push_back(*v);
  }
  ::closedir(d);
  std::sort(versions.begin(), versions.end());
  return versions;
}

StatusOr<uint64_t> PfsStore::Read(uint64_t version, AlignedBuffer* buffer) const {
  const std::string path = PathFor(version);
  int flags = O_RDONLY | O_CLOEXEC;
  if (options_.o_direct) flags |= O_DIRECT;
  Fd fd(::open(path.c_str(), flags));
  if (fd.get() < 0) return ErrnoError("cannot open " + path, errno);
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

}  // namespace transports
}  // namespace viper
