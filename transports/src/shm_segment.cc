#include "shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "viper/transports/private_dir.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

namespace viper {
namespace transports {
namespace internal {

namespace {

std::string Errno(const std::string& what, int err) { return what + ": " + std::strerror(err); }

}  // namespace

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name, uint64_t payload_bytes) {
  const uint64_t total = kShmControlBytes + payload_bytes;
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return UnavailableError(Errno("shm_open(" + name + ") to create it", errno));
  // Reserve every page now: a full /dev/shm fails here, not with SIGBUS on a
  // later store.
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (rc != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return IoError(Errno("cannot reserve " + std::to_string(total) +
                                            " bytes of shared memory for " + name +
                                            " (is /dev/shm large enough?)",
                                        rc));
  }
  // MAP_POPULATE: page tables filled now, not by faults in the first copy.
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return UnavailableError(Errno("mmap of " + name, map_err));
  }
  auto* control = new (base) ShmControl();
  control->magic = kShmMagic;
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, static_cast<std::byte*>(base), payload_bytes, true));
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name, uint64_t payload_bytes) {
  const uint64_t total = kShmControlBytes + payload_bytes;
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return UnavailableError(Errno("shm_open(" + name + ")", errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < total) {
    ::close(fd);
    return DataLossError("shared-memory segment " + name + " holds " + std::to_string(st.st_size) +
                         " bytes, the producer announced " + std::to_string(total));
  }
  void* base = ::mmap(nullptr, total, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (base == MAP_FAILED) return UnavailableError(Errno("mmap of " + name, map_err));
  auto segment =
      std::unique_ptr<ShmSegment>(new ShmSegment(name, static_cast<std::byte*>(base), payload_bytes, false));
  if (segment->control()->magic != kShmMagic) {
    return DataLossError("shared-memory segment " + name + " is not a Viper segment");
  }
  return segment;
}

ShmSegment::~ShmSegment() {
  if (owner_) Unlink();
  if (base_) ::munmap(base_, kShmControlBytes + payload_bytes_);
}

void ShmSegment::Unlink() {
  if (owner_ && linked_) ::shm_unlink(name_.c_str());
  linked_ = false;
}

ShmWriter::ShmWriter(ShmSegment* segment, std::vector<ByteRange> ranges, uint64_t header_bytes,
                     uint64_t version)
    : segment_(segment), ranges_(std::move(ranges)), header_bytes_(header_bytes), version_(version) {
  ShmControl* control = segment_->control();
  control->complete.store(0, std::memory_order_relaxed);
  control->data_bytes.store(0, std::memory_order_relaxed);
  control->version.store(version, std::memory_order_release);
  while (index_ < ranges_.size() && ranges_[index_].size == 0) ++index_;
}

bool ShmWriter::Step(uint64_t max_bytes) {
  if (done()) return false;
  std::byte* data = segment_->payload() + header_bytes_;
  uint64_t budget = max_bytes;
  while (budget > 0 && !done()) {
    const ByteRange& r = ranges_[index_];
    const uint64_t n = std::min(budget, r.size - offset_);
    CopyAndHash(data + written_, r.data + offset_, n, &hasher_);
    written_ += n;
    offset_ += n;
    budget -= n;
    if (offset_ == r.size) {
      offset_ = 0;
      ++index_;
      while (index_ < ranges_.size() && ranges_[index_].size == 0) ++index_;
    }
  }
  segment_->control()->data_bytes.store(written_, std::memory_order_release);
  return true;
}

void ShmWriter::Complete(const std::byte* header) {
  std::memcpy(segment_->payload(), header, header_bytes_);
  segment_->control()->complete.store(version_ + 1, std::memory_order_release);
}

void CopyAndHash(std::byte* dst, const std::byte* src, std::size_t bytes, Xxh3Hasher* hasher) {
  for (std::size_t off = 0; off < bytes; off += kCopyHashBlockBytes) {
    const std::size_t n = std::min(kCopyHashBlockBytes, bytes - off);
    std::memcpy(dst + off, src + off, n);
    hasher->Update(dst + off, n);
  }
}

std::vector<std::string> RemoveDeadSegments(const std::string& shm_dir) {
  std::vector<std::string> removed;
  DIR* d = ::opendir(shm_dir.c_str());
  if (d == nullptr) return removed;
  const uid_t me = ::geteuid();
  while (dirent* e = ::readdir(d)) {
    const char* n = e->d_name;
    if (std::strncmp(n, "viper-", 6) != 0) continue;
    const char* p = n + 6;
    long pid = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 10) pid = pid * 10 + (*p++ - '0'), ++digits;
    if (digits == 0 || *p != '-' || pid == static_cast<long>(::getpid())) continue;
    struct stat st;
    if (::fstatat(::dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_uid != me) continue;
    if (ProcessAlive(pid)) continue;
    if (::shm_unlink((std::string("/") + n).c_str()) == 0) removed.push_back(n);
  }
  ::closedir(d);
  return removed;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
