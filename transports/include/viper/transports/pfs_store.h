// The PFS tier: one safetensors file per version in a shared directory, in
// one of two layouts:
//   flat        <dir>/model-v<version>.safetensors
//   tf-serving  <dir>/<version>/model.safetensors (TensorFlow Serving's
//               numbered version directories)
// A version is written under a hidden temporary name, fsync'd, renamed and
// the directory fsync'd, so a reader only ever sees complete versions under
// final names (tf-serving renames the whole version directory). Optional
// O_DIRECT with page-aligned buffers and several writer threads on disjoint
// ranges.
//
// Delta versions (flat layout only): WriteDelta writes
//   <dir>/model-v<version>.delta
// a delta (viper/transports/delta.h; not a safetensors file, so tools that
// load every *.safetensors never take it for weights) naming its base by
// version and checksum, when the delta is smaller than the image, the base is
// in the store with that checksum, and the chain stays within
// Options::delta_chain_max deltas; otherwise the full version. Read and
// ReadChecked rebuild a delta version from its chain (the full version it
// rests on, then each delta, each rebuilt image verified against its
// checksum); a missing or damaged link is an error, never an image. Keep-N
// never removes a version a kept delta's chain needs. A version has one file:
// writing it as one kind removes the other.
//
// ReadChecked reads a version and says how far it can be trusted: verified
// by Viper's checksums (data+header, or data only for legacy files), or a
// valid safetensors file without Viper's checksum (another writer's), served
// as "unverified" unless Options::require_checksum.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "viper/core/safetensors.h"
#include "viper/core/status.h"
#include "viper/transports/aligned_buffer.h"
#include "viper/transports/delta.h"

namespace viper {
namespace transports {

class PfsStore {
 public:
  // Where each version's file lives.
  enum class Layout {
    kFlat,       // <dir>/model-v<version>.safetensors
    kTfServing,  // <dir>/<version>/model.safetensors
  };
  static const char* ToString(Layout layout);  // "flat", "tf-serving"
  static std::optional<Layout> LayoutFromString(const std::string& name);

  struct Options {
    // Directory holding the versions; must exist (it is never created here:
    // the Publisher creates it, privately, see private_dir.h).
    std::string dir;
    // File naming (see the top of this file).
    Layout layout = Layout::kFlat;
    // Open files with O_DIRECT (bypass the page cache). Buffers and sizes are
    // padded to AlignedBuffer::kAlignmentBytes; the file is truncated to its
    // real size before the fsync.
    bool o_direct = false;
    // Writer threads, each pwrite()ing a disjoint aligned range.
    int writer_threads = 1;
    // Bytes per pwrite()/pread() call.
    uint64_t io_chunk_bytes = 64ull << 20;
    // Versions kept after a write (older ones are removed, except the bases
    // a kept delta's chain needs); 0 = keep all.
    int keep_versions = 2;
    // WriteDelta: at most this many deltas between a version and the full
    // version its chain rests on (a reader applies that many); then a full one.
    int delta_chain_max = 8;
    // ReadChecked refuses a file without Viper's checksum (DataLoss) instead
    // of returning it as unverified.
    bool require_checksum = false;

    bool IsValid(std::string* error) const;
  };

  struct WriteStats {
    std::string path;    // final path of the version
    uint64_t bytes = 0;  // file size
    double write_s = 0;  // pwrite calls
    double sync_s = 0;   // fsync of the file, rename, fsync of the directory
    // WriteDelta: a delta was written (else the full image), against
    // base_version; encode_s is the diff and encoding; delta_report the
    // codec's BriefReport (why a full version, when one was written).
    bool delta = false;
    uint64_t base_version = 0;
    double encode_s = 0;
    std::string delta_report;
  };

  // One version's file, as Describe reads it.
  struct VersionFile {
    uint64_t version = 0;
    std::string path;
    uint64_t bytes = 0;         // file size
    bool delta = false;         // a delta file (else a full image)
    uint64_t base_version = 0;  // delta: the version it applies to
    uint64_t base_checksum = 0;
    uint64_t checksum = 0;      // the (rebuilt) image's viper.checksum; 0 when the file has none
    uint64_t image_bytes = 0;   // size of the (rebuilt) image
  };

  // A version read and checked by ReadChecked.
  struct Checked {
    ModelState state;               // tensors are views into the buffer given to ReadChecked
    safetensors::ParseInfo info;    // header size, metadata, which checksums were verified
    uint64_t bytes = 0;             // image size (the file's, for a full version)
    std::vector<uint64_t> chain;    // versions read: the full one, then each delta applied
    bool verified() const { return info.checksum != safetensors::ChecksumKind::kNone; }
    // "verified (data+header)", "verified (data only, legacy)" or "unverified
    // (no Viper checksum)".
    std::string TrustText() const;
  };

  explicit PfsStore(Options options);
  const Options& options() const { return options_; }

  // The final path of version `version` in the configured layout.
  std::string PathFor(uint64_t version) const;
  // The path of version `version`'s delta file (flat layout).
  std::string DeltaPathFor(uint64_t version) const;
  // Parses a flat-layout file name ("model-v12.safetensors" -> 12); nullopt
  // for anything else, temporaries included.
  static std::optional<uint64_t> VersionFromFileName(const std::string& name);
  // The same for a delta file name ("model-v12.delta" -> 12).
  static std::optional<uint64_t> VersionFromDeltaFileName(const std::string& name);
  // Parses a tf-serving version directory name ("12" -> 12); nullopt for
  // anything but 1 to 19 decimal digits.
  static std::optional<uint64_t> VersionFromDirName(const std::string& name);

  // Writes `size` bytes at `data` as version `version`, mode 0600 whatever
  // the umask. Removes first what dead writers of this host left
  // (RemoveDeadTemporaries). With o_direct,
  // `data` must be aligned to kAlignmentBytes and readable up to
  // RoundUp(size, kAlignmentBytes). On any failure (missing directory, full
  // disk) the temporary is removed and no file appears under the final name.
  // Afterwards keeps `version` and the keep_versions - 1 newest older ones;
  // when the disk is full (ENOSPC), prunes to that many older ones (at least
  // one) first and tries once more, so the disk need not hold N + 1.
  StatusOr<WriteStats> Write(uint64_t version, const std::byte* data, uint64_t size) const;

  // Writes version `version`, whose full image is `data` (`size` bytes), as
  // a delta against `base` (`base_size` bytes: the full image of an earlier
  // version, e.g. the producer's previous one), or as a full version (see
  // the top of this file for when); WriteStats says which and why. Same
  // file rules, pruning and failure behaviour as Write. InvalidArgument when
  // either image is not a Viper format-2 image.
  StatusOr<WriteStats> WriteDelta(uint64_t version, const std::byte* data, uint64_t size, const std::byte* base,
                                  uint64_t base_size) const;

  // Versions with a complete file (full or delta) under a final name, ascending.
  StatusOr<std::vector<uint64_t>> ListVersions() const;

  // What version `version`'s file is: full or a delta of which base, its
  // image's checksum (read from the file's header; the data is not read).
  StatusOr<VersionFile> Describe(uint64_t version) const;
  // The versions a reader of `version` reads: the full version its chain
  // rests on, then each delta up to `version` ({version} for a full one).
  // NotFound naming the missing link; DataLoss for a damaged delta header or
  // a chain that does not go back in versions.
  StatusOr<std::vector<uint64_t>> Chain(uint64_t version) const;

  // Removes the temporaries (".<name>.tmp-<pid>-<n>[-<host>]") whose writer,
  // a process of this host, is dead; returns their names. Write and Prune
  // call it.
  std::vector<std::string> RemoveDeadTemporaries() const;

  // What identifies a version's file on disk: a rejected version is read
  // again once this changes (the file was fixed or replaced).
  struct FileId {
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    uint64_t inode = 0;
    bool operator==(const FileId& o) const { return size == o.size && mtime_ns == o.mtime_ns && inode == o.inode; }
    bool operator!=(const FileId& o) const { return !(*this == o); }
  };
  StatusOr<FileId> Identify(uint64_t version) const;

  // Reads version `version` into `buffer` (grown when too small); returns the
  // image size. The bytes of a full version are not validated here (the
  // Subscriber parses and verifies them); a delta version is rebuilt from
  // its chain, each step verified (delta::Apply). Only a regular file is read: a symbolic link (the file's
  // or, tf-serving, the version directory's), a FIFO or a device is refused
  // (FailedPrecondition) without blocking and without reading a byte.
  StatusOr<uint64_t> Read(uint64_t version, AlignedBuffer* buffer) const;

  // The version-aware read of a consumer whose `buffer` holds version
  // `held`'s image (`held_size` bytes, e.g. its back buffer): when
  // `version`'s chain passes through `held`, only the deltas after it are
  // read and applied in place (each rebuilt image verified); otherwise the
  // version is read whole (Read). Returns the image size and sets `*chain`
  // to the versions whose files were read. After an error the buffer holds
  // no version. `verified`, when given, is set when the image was rebuilt
  // from at least one delta: the last Apply's parse of it (data_offset, the
  // metadata's viper.checksum, data_verified), so that a reader need not hash
  // the data again; left untouched (data_verified false) when it was read
  // whole. `written`, when given, is cleared, then set when the last delta
  // applied rebuilt an image of its base's size: the (offset, bytes) ranges
  // of the image it wrote (the header and the tensors it has records for,
  // ascending, merged; every other byte is that delta's base's: the held
  // image when `*chain` is one version), which a consumer copies to bring a
  // buffer holding the base forward to this image.
  StatusOr<uint64_t> ReadFrom(uint64_t version, uint64_t held, uint64_t held_size, AlignedBuffer* buffer,
                              std::vector<uint64_t>* chain, safetensors::ParseInfo* verified = nullptr,
                              std::vector<std::pair<uint64_t, uint64_t>>* written = nullptr) const;

  // Reads version `version` into `buffer` and checks it: a well-formed
  // safetensors file, Viper's checksums when it carries any (a damaged
  // viper.* key is DataLoss), and viper.version equal to the version in its
  // name. A file without Viper's checksum is returned unverified, with the
  // version taken from its name, unless options().require_checksum. Errors
  // name the path. The returned tensors view `buffer`: keep it alive and
  // unchanged while using them.
  StatusOr<Checked> ReadChecked(uint64_t version, AlignedBuffer* buffer) const;

  // Removes every version but the `keep` newest and those in `protect`
  // (keep 0 removes nothing); returns the versions removed, ascending.
  StatusOr<std::vector<uint64_t>> Prune(int keep, const std::vector<uint64_t>& protect = {}) const;

 private:
  // Removes version `version` (its file; in tf-serving, then its directory),
  // relative to the directory's own descriptor: nothing outside it is ever
  // touched. A tf-serving name that is not a real directory is left alone,
  // unless `replace` (the rewrite path), which removes the entry itself.
  Status Remove(uint64_t version) const;
  Status Remove(uint64_t version, bool replace) const;
  // Removes version `version`'s file of the other kind than `delta` (flat).
  Status RemoveKind(uint64_t version, bool delta) const;
  StatusOr<WriteStats> WriteOnce(uint64_t version, const std::byte* data, uint64_t size, bool delta = false) const;
  // Write's ENOSPC retry and pruning around WriteOnce.
  StatusOr<WriteStats> WriteFile(uint64_t version, const std::byte* data, uint64_t size, bool delta) const;
  // Whether version `version` is a delta file only (flat layout: its delta
  // file exists as a regular file and its full file does not).
  bool IsDeltaVersion(uint64_t version) const;
  // Adds to `keep` every version the chains of the versions in it need.
  void AddChainBases(std::vector<uint64_t>* keep) const;
  // Read with the chain it followed.
  StatusOr<uint64_t> ReadImage(uint64_t version, AlignedBuffer* buffer, std::vector<uint64_t>* chain) const;
  // Rebuilds delta version `version` from its chain into `buffer`.
  StatusOr<uint64_t> ReadChain(uint64_t version, AlignedBuffer* buffer, std::vector<uint64_t>* chain) const;
  // Applies the delta files of `versions` in order to the `size`-byte image
  // in `buffer`; `verified` and `written` as ReadFrom's.
  StatusOr<uint64_t> ApplyDeltas(const std::vector<uint64_t>& versions, uint64_t size, AlignedBuffer* buffer,
                                 safetensors::ParseInfo* verified = nullptr,
                                 std::vector<std::pair<uint64_t, uint64_t>>* written = nullptr) const;
  // The whole delta file of `version` (at most `max_bytes`, else DataLoss).
  StatusOr<std::vector<std::byte>> ReadDeltaFile(uint64_t version, uint64_t max_bytes) const;
  // Removes all but the `keep_older` newest versions older than `version`;
  // returns how many it removed.
  std::size_t PruneOlder(uint64_t version, int keep_older) const;
  // Opens version `version`'s file (its delta file when `delta`) for reading
  // (see Read); returns the fd.
  StatusOr<int> OpenVersion(uint64_t version, bool o_direct, bool delta = false) const;

  Options options_;
};

}  // namespace transports
}  // namespace viper
