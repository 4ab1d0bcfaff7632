// viper model-dir: list the versions in a PFS-tier model directory, check
// each one as a consumer would, name the version a polling consumer would
// serve, and optionally prune old versions.
//
// The directory may be writable by others (a shared scratch space) and this
// command may run as root, so everything in it is handled relative to the
// directory's own descriptor and nothing is followed: entries are judged by
// fstatat(AT_SYMLINK_NOFOLLOW), version files are opened with openat and
// O_NOFOLLOW|O_NONBLOCK (a FIFO never blocks) and read only when they are
// regular files, tf-serving version directories are opened with O_NOFOLLOW
// and their file removed with unlinkat relative to that descriptor. A
// symbolic link, FIFO, socket or device under a version's name is listed as
// skipped and never read nor removed.
//
// Delta versions (flat layout, model-v<N>.delta; PfsStore::WriteDelta) are
// judged as a consumer reads them: rebuilt from their chain through
// PfsStore::ReadChecked (the same no-follow rules), each step verified; the
// status names the chain. --keep never removes a base a kept delta needs.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>

#include "cli_util.h"
#include "commands.h"
#include "viper/core/safetensors.h"
#include "viper/transports/aligned_buffer.h"
#include "viper/transports/pfs_store.h"

namespace viper {
namespace cli {
namespace {

using transports::AlignedBuffer;
using transports::PfsStore;

constexpr char kTfFileName[] = "model.safetensors";

// Closes a descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// What lstat says an entry is, for messages.
const char* KindOf(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

// One version found in the directory.
struct Found {
  uint64_t version = 0;
  std::string entry;    // the name in the directory: the file (flat) or the version directory (tf-serving)
  std::string path;     // what messages show
  std::string skipped;  // non-empty: not a regular file/directory (why); never read nor removed
  bool delta = false;   // a delta file (flat layout)
};

// The version entries of directory `dir_fd` in `layout`, ascending.
// Temporaries (hidden names) are not versions; a tf-serving directory
// without its file is not one yet.
StatusOr<std::vector<Found>> ListVersions(int dir_fd, const std::string& dir, PfsStore::Layout layout) {
  const int scan_fd = ::dup(dir_fd);
  DIR* d = scan_fd >= 0 ? ::fdopendir(scan_fd) : nullptr;
  if (d == nullptr) {
    const int err = errno;
    if (scan_fd >= 0) ::close(scan_fd);
    return ErrnoError("cannot list directory " + dir, err);
  }
  std::vector<Found> found;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    Found f;
    f.entry = name;
    if (layout == PfsStore::Layout::kFlat) {
      auto v = PfsStore::VersionFromFileName(name);
      if (!v) {
        v = PfsStore::VersionFromDeltaFileName(name);
        f.delta = true;
      }
      if (!v) continue;
      f.version = *v;
      f.path = dir + "/" + name;
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone since readdir
      if (!S_ISREG(st.st_mode)) f.skipped = KindOf(st.st_mode);
    } else {
      auto v = PfsStore::VersionFromDirName(name);
      if (!v) continue;
      f.version = *v;
      f.path = dir + "/" + name + "/" + kTfFileName;
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (!S_ISDIR(st.st_mode)) {
        f.skipped = std::string("the version directory is ") + KindOf(st.st_mode);
      } else {
        Fd vfd(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (vfd.get() < 0) {
          f.skipped = std::string("the version directory cannot be opened: ") + std::strerror(errno);
        } else if (::fstatat(vfd.get(), kTfFileName, &st, AT_SYMLINK_NOFOLLOW) != 0) {
          continue;  // a numbered directory is a version once its file is there
        } else if (!S_ISREG(st.st_mode)) {
          f.skipped = KindOf(st.st_mode);
        }
      }
    }
    found.push_back(std::move(f));
  }
  ::closedir(d);
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.version != b.version ? a.version < b.version : a.delta < b.delta;
  });
  // A version with both files is read from its full one (as a consumer does).
  found.erase(std::unique(found.begin(), found.end(),
                          [](const Found& a, const Found& b) { return a.version == b.version; }),
              found.end());
  return found;
}

// Reads the regular file `name` of directory `dir_fd` (never through a link,
// never blocking on a FIFO) into `buffer`, with O_DIRECT when asked.
StatusOr<uint64_t> ReadVersion(int dir_fd, const std::string& name, const std::string& shown, bool o_direct,
                               AlignedBuffer* buffer) {
  VIPER_ASSIGN_OR_RETURN(const int raw_fd, safetensors::OpenRegularFile(dir_fd, name, shown));
  Fd fd(raw_fd);
  if (o_direct) {
    const int fl = ::fcntl(fd.get(), F_GETFL);
    if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl | O_DIRECT) != 0) {
      return UnavailableError("O_DIRECT is not supported for " + shown + ": " + std::strerror(errno));
    }
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("fstat " + shown, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t align = AlignedBuffer::kAlignmentBytes;
  const uint64_t need = (size + align - 1) / align * align;
  if (buffer->capacity() < need) {
    VIPER_ASSIGN_OR_RETURN(*buffer, AlignedBuffer::Allocate(need));
  }
  uint64_t off = 0;
  while (off < size) {
    const uint64_t n = std::min<uint64_t>(uint64_t{64} << 20, need - off);  // aligned chunks
    const ssize_t r = ::pread(fd.get(), buffer->data() + off, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("pread " + shown + " at offset " + std::to_string(off), errno);
    }
    if (r == 0) {
      return DataLossError(shown + ": file shrank while reading (" + std::to_string(off) + " of " +
                           std::to_string(size) + " bytes)");
    }
    off += static_cast<uint64_t>(r);
  }
  return size;
}

// A version read and judged as a consumer judges it: a well-formed
// safetensors file, Viper's checksums when it carries any, viper.version
// equal to the name's version; without Viper's checksum refused unless
// `accept_unverified` (a consumer with pfs_require_checksum false).
struct Judged {
  bool ok = false;
  bool verified = false;
  uint64_t bytes = 0;
  int64_t iteration = -1;
  std::string status;  // TrustText, or the reason it is refused
  std::optional<safetensors::ChecksumKind> checksum;
  std::vector<uint64_t> chain;  // a delta: the versions read to rebuild it
};

// A delta version, rebuilt from its chain exactly as a consumer's PfsStore does.
Judged JudgeDelta(const std::string& dir, const Found& f, bool accept_unverified, bool o_direct,
                  AlignedBuffer* buffer) {
  Judged j;
  PfsStore::Options options;
  options.dir = dir;
  options.require_checksum = !accept_unverified;
  options.o_direct = o_direct;
  PfsStore store(options);
  auto checked = store.ReadChecked(f.version, buffer);
  if (!checked.ok()) {
    j.status = checked.status().ToString();
    return j;
  }
  j.ok = true;
  j.verified = checked->verified();
  j.bytes = checked->bytes;
  j.iteration = checked->state.metadata.iteration;
  j.checksum = checked->info.checksum;
  j.chain = checked->chain;
  std::string chain;
  for (uint64_t v : j.chain) chain += (chain.empty() ? "v" : " -> v") + std::to_string(v);
  j.status = checked->TrustText() + ", delta of v" + std::to_string(j.chain.size() >= 2 ? j.chain[j.chain.size() - 2] : 0) +
             " (rebuilt: " + chain + ")";
  return j;
}

Judged Judge(int dir_fd, const Found& f, PfsStore::Layout layout, bool accept_unverified, bool o_direct,
             AlignedBuffer* buffer) {
  Judged j;
  if (!f.skipped.empty()) {
    j.status = "skipped: " + f.path + " is " + f.skipped + " (not read, never removed)";
    return j;
  }
  Fd version_dir;
  int parent = dir_fd;
  std::string name = f.entry;
  if (layout == PfsStore::Layout::kTfServing) {
    // tf-serving: the file inside the version directory, opened through it.
    version_dir = Fd(::openat(dir_fd, f.entry.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (version_dir.get() < 0) {
      j.status = ErrnoError("cannot open the version directory of " + f.path, errno).ToString();
      return j;
    }
    parent = version_dir.get();
    name = kTfFileName;
  }
  auto size = ReadVersion(parent, name, f.path, o_direct, buffer);
  if (!size.ok()) {
    j.status = size.status().ToString();
    return j;
  }
  j.bytes = *size;
  safetensors::ParseOptions po;
  po.require_checksum = !accept_unverified;
  safetensors::ParseInfo info;
  auto state = safetensors::Parse(nullptr, buffer->data(), *size, po, &info);
  if (!state.ok()) {
    j.status = state.status().WithContext(f.path).ToString();
    if (!accept_unverified && state.status().message().find("no 'viper.checksum'") != std::string::npos) {
      j.status += " (refused by a default consumer, pfs_require_checksum; --accept-unverified judges as one "
                  "that serves such files)";
    }
    return j;
  }
  j.verified = info.checksum != safetensors::ChecksumKind::kNone;
  if (j.verified && state->metadata.version != f.version) {
    j.status = DataLossError(f.path + ": the file name says version " + std::to_string(f.version) +
                             ", its metadata (viper.version) " + std::to_string(state->metadata.version))
                   .ToString();
    return j;
  }
  j.ok = true;
  j.iteration = state->metadata.iteration;
  j.checksum = info.checksum;
  PfsStore::Checked checked;
  checked.info = info;
  j.status = checked.TrustText();
  return j;
}

// Removes version `f` (never through a link: the file by unlinkat relative
// to its directory's descriptor, a tf-serving version directory opened with
// O_NOFOLLOW first); anything that is not a regular file is left alone.
Status RemoveVersion(int dir_fd, const Found& f, PfsStore::Layout layout) {
  struct stat st {};
  if (layout == PfsStore::Layout::kFlat) {
    if (::fstatat(dir_fd, f.entry.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return errno == ENOENT ? Status::Ok() : ErrnoError("cannot stat " + f.path, errno);
    }
    if (!S_ISREG(st.st_mode)) return FailedPreconditionError(f.path + " is now " + KindOf(st.st_mode) + ": not removed");
    if (::unlinkat(dir_fd, f.entry.c_str(), 0) != 0 && errno != ENOENT) {
      return ErrnoError("cannot remove " + f.path, errno);
    }
    return Status::Ok();
  }
  Fd vfd(::openat(dir_fd, f.entry.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (vfd.get() < 0) {
    return ErrnoError("cannot open the version directory of " + f.path + " (not a real directory? not removed)",
                      errno);
  }
  if (::fstatat(vfd.get(), kTfFileName, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode)) return FailedPreconditionError(f.path + " is now " + KindOf(st.st_mode) + ": not removed");
    if (::unlinkat(vfd.get(), kTfFileName, 0) != 0 && errno != ENOENT) {
      return ErrnoError("cannot remove " + f.path, errno);
    }
    (void)::fsync(vfd.get());
  }
  if (::unlinkat(dir_fd, f.entry.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return ErrnoError("cannot remove version directory " + f.path.substr(0, f.path.size() - std::strlen(kTfFileName) - 1) +
                          " (other files in it?)",
                      errno);
  }
  return Status::Ok();
}

}  // namespace

int RunModelDir(const std::vector<std::string>& args) {
  po::options_description desc("Options");
  std::string dir;
  std::string json_path;
  std::string layout = "flat";
  bool require_checksum = false;
  bool accept_unverified = false;
  bool o_direct = false;
  int keep = 0;
  desc.add_options()("help,h", "print this help")("dir", po::value(&dir)->required(), "model directory (required)")(
      "layout", po::value(&layout)->default_value(layout),
      "flat: <dir>/model-v<version>.safetensors (what viper run writes) | tf-serving: "
      "<dir>/<version>/model.safetensors (TensorFlow Serving's numbered version directories)")(
      "accept-unverified", po::bool_switch(&accept_unverified),
      "judge as a consumer with pfs_require_checksum=false does: serve versions without Viper's checksum "
      "(e.g. written by the safetensors library), listed as unverified. Default: judge as a default consumer, "
      "which refuses them")(
      "require-checksum", po::bool_switch(&require_checksum),
      "refuse versions without Viper's checksum: the default (kept for older scripts)")(
      "keep", po::value(&keep)->default_value(keep),
      "after listing, keep the N newest versions a consumer would accept (invalid versions do not count) and "
      "remove every version older than the oldest of them; the served version, newer versions, the bases a "
      "kept delta version is rebuilt from and anything that is not a regular file are never removed "
      "(default 0: remove nothing)")(
      "o-direct", po::bool_switch(&o_direct),
      "read with O_DIRECT (bypass the page cache), as a consumer configured so would; default off")(
      "json", po::value(&json_path),
      "also write the listing as JSON to this path ('-' = stdout); keys: dir, layout, judged_as, versions "
      "[{version, path, kind (full|delta), chain and base_version (delta), bytes, iteration, ok, verified, "
      "checksum (none|data only (legacy)|data+header), status}], valid_versions, served_version, "
      "served_verified, removed");
  po::variables_map vm;
  const int rc = ParseOrHelp(
      args, desc, &vm,
      "viper model-dir --dir DIR [--layout flat|tf-serving] [--accept-unverified] [--keep N]",
      "Lists the complete versions in a PFS-tier model directory (temporaries are ignored), reads each one, "
      "checks it as a consumer does (safetensors header, Viper's data and header checksums, viper.version "
      "against the file name; by default a file without Viper's checksum is refused, as a default consumer "
      "refuses it) and prints version, iteration, size and status: verified (data+header), verified (data "
      "only, legacy), unverified (with --accept-unverified), or the reason it is refused. A delta version "
      "(model-v<N>.delta) is rebuilt from its chain as a consumer does, and its status says which version it "
      "is a delta of and the chain read (e.g. v4 -> v5 -> v6). The served version "
      "is the newest valid one, as a polling consumer picks it. Nothing is followed: a symbolic link, FIFO or "
      "device under a version's name is skipped, never read nor removed. Exit 1 when a version is refused or "
      "skipped, or none is valid.");
  if (rc != 0) return rc < 0 ? kExitOk : rc;
  auto parsed_layout = PfsStore::LayoutFromString(layout);
  if (!parsed_layout) {
    std::cerr << "viper model-dir: --layout: expected flat or tf-serving, got '" << layout << "'\n";
    return kExitUsage;
  }
  if (keep < 0) {
    std::cerr << "viper model-dir: --keep: must be >= 0 (0 = remove nothing), got " << keep << "\n";
    return kExitUsage;
  }
  if (require_checksum && accept_unverified) {
    return UsageError("model-dir", "--require-checksum and --accept-unverified contradict each other");
  }
  if (dir.empty()) return Fail("model-dir", InvalidArgumentError("--dir: must name a directory"));
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) return Fail("model-dir", ErrnoError("cannot open directory " + dir, errno));
  auto versions = ListVersions(dir_fd.get(), dir, *parsed_layout);
  if (!versions.ok()) return Fail("model-dir", versions.status());

  nlohmann::json j;
  j["dir"] = dir;
  j["layout"] = layout;
  j["judged_as"] = accept_unverified ? "consumer with pfs_require_checksum=false"
                                     : "default consumer (pfs_require_checksum=true)";
  j["versions"] = nlohmann::json::array();
  AlignedBuffer buffer;
  bool any_bad = false;
  std::vector<uint64_t> valid;  // ascending
  std::optional<uint64_t> served;
  bool served_verified = false;
  // --json -: stdout holds only the JSON document; the table goes to stderr.
  FILE* const table = JsonToStdout(json_path) ? stderr : stdout;
  std::fprintf(table, "%-10s %-12s %-14s %s\n", "version", "iteration", "bytes", "status");
  std::vector<std::pair<uint64_t, std::vector<uint64_t>>> chains;  // valid deltas' chains
  for (const Found& f : *versions) {
    const Judged judged = f.delta && f.skipped.empty()
                              ? JudgeDelta(dir, f, accept_unverified, o_direct, &buffer)
                              : Judge(dir_fd.get(), f, *parsed_layout, accept_unverified, o_direct, &buffer);
    nlohmann::json row;
    row["version"] = f.version;
    row["path"] = f.path;
    row["kind"] = f.delta ? "delta" : "full";
    if (f.delta) {
      row["chain"] = judged.chain;
      if (judged.chain.size() >= 2) row["base_version"] = judged.chain[judged.chain.size() - 2];
    }
    if (judged.ok && f.delta) chains.emplace_back(f.version, judged.chain);
    if (judged.ok) {
      valid.push_back(f.version);
      served = f.version;
      served_verified = judged.verified;
    } else {
      any_bad = true;
      std::fprintf(stderr, "viper model-dir: %s\n", judged.status.c_str());
    }
    row["verified"] = judged.ok && judged.verified;
    row["checksum"] = judged.checksum ? nlohmann::json(safetensors::ToString(*judged.checksum)) : nlohmann::json(nullptr);
    row["bytes"] = judged.bytes;
    row["iteration"] = judged.iteration;
    row["ok"] = judged.ok;
    row["status"] = judged.status;
    std::fprintf(table, "%-10llu %-12lld %-14llu %s\n", static_cast<unsigned long long>(f.version),
                 static_cast<long long>(judged.iteration), static_cast<unsigned long long>(judged.bytes),
                 judged.status.c_str());
    j["versions"].push_back(row);
  }
  j["valid_versions"] = valid;
  std::string served_path;
  for (const Found& f : *versions) {
    if (served && f.version == *served) served_path = f.path;
  }
  if (served) {
    std::fprintf(table, "served: version %llu (%s)%s\n", static_cast<unsigned long long>(*served), served_path.c_str(),
                 served_verified ? "" : " UNVERIFIED: no Viper checksum");
    j["served_version"] = *served;
    j["served_verified"] = served_verified;
  } else {
    std::fprintf(table, "served: none (no valid version)\n");
    j["served_version"] = nullptr;
    j["served_verified"] = false;
  }
  j["removed"] = nlohmann::json::array();
  if (keep > 0 && !valid.empty()) {
    // The N newest valid versions stay (the served one is the newest); every
    // version older than the oldest of them goes, valid or not. Newer
    // versions, even refused ones, are another writer's business.
    const std::size_t kept = std::min(valid.size(), static_cast<std::size_t>(keep));
    const uint64_t horizon = valid[valid.size() - kept];
    // The bases a kept delta is rebuilt from stay too.
    std::vector<uint64_t> needed;
    for (const auto& [version, chain] : chains) {
      if (version >= horizon) needed.insert(needed.end(), chain.begin(), chain.end());
    }
    std::vector<uint64_t> removed;
    for (const Found& f : *versions) {
      if (f.version >= horizon || !f.skipped.empty()) continue;
      if (std::find(needed.begin(), needed.end(), f.version) != needed.end()) continue;
      Status st = RemoveVersion(dir_fd.get(), f, *parsed_layout);
      if (!st.ok()) {
        any_bad = true;
        std::fprintf(stderr, "viper model-dir: %s\n", st.ToString().c_str());
        continue;
      }
      removed.push_back(f.version);
      std::fprintf(table, "removed: version %llu (%s)\n", static_cast<unsigned long long>(f.version), f.path.c_str());
    }
    if (!removed.empty() && ::fsync(dir_fd.get()) != 0) {
      return Fail("model-dir", ErrnoError("fsync of directory " + dir, errno));
    }
    j["removed"] = removed;
  }
  if (!json_path.empty()) {
    Status st = WriteJson(j, json_path, "model-dir");
    if (!st.ok()) return Fail("model-dir", st);
  }
  return (any_bad || !served) ? kExitFailure : kExitOk;
}

}  // namespace cli
}  // namespace viper
