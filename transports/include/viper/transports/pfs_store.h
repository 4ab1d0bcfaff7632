// The PFS tier: one safetensors file per version in a shared directory,
// `<dir>/model-v<version>.safetensors`. A version is written under a hidden
// temporary name, fsync'd, renamed and the directory fsync'd, so a reader
// only ever sees complete files under final names. Optional O_DIRECT with
// page-aligned buffers and several writer threads on disjoint ranges.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/transports/aligned_buffer.h"

namespace viper {
namespace transports {

class PfsStore {
 public:
  struct Options {
    // Directory holding the versions; must exist (it is never created here).
    std::string dir;
    // Open files with O_DIRECT (bypass the page cache). Buffers and sizes are
    // padded to AlignedBuffer::kAlignmentBytes; the file is truncated to its
    // real size before the fsync.
    bool o_direct = false;
    // Writer threads, each pwrite()ing a disjoint aligned range.
    int writer_threads = 1;
    // Bytes per pwrite()/pread() call.
    uint64_t io_chunk_bytes = 64ull << 20;
    // Versions kept after a write (older files are unlinked); 0 = keep all.
    int keep_versions = 2;

    bool IsValid(std::string* error) const;
  };

  struct WriteStats {
    std::string path;    // final path of the version
    uint64_t bytes = 0;  // file size
    double write_s = 0;  // pwrite calls
    double sync_s = 0;   // fsync of the file, rename, fsync of the directory
  };

  explicit PfsStore(Options options);
  const Options& options() const { return options_; }

  // "<dir>/model-v<version>.safetensors".
  std::string PathFor(uint64_t version) const;
  // Parses a file name ("model-v12.safetensors" -> 12); nullopt for anything
  // else, temporaries included.
  static std::optional<uint64_t> VersionFromFileName(const std::string& name);

  // Writes `size` bytes at `data` as version `version`. With o_direct,
  // `data` must be aligned to kAlignmentBytes and readable up to
  // RoundUp(size, kAlignmentBytes). On any failure (missing directory, full
  // disk) the temporary is removed and no file appears under the final name.
  StatusOr<WriteStats> Write(uint64_t version, const std::byte* data, uint64_t size) const;

  // Versions with a complete file under a final name, ascending.
  StatusOr<std::vector<uint64_t>> ListVersions() const;

  // Reads version `version` into `buffer` (grown when too small); returns the
  // file size. The bytes are not validated here (the Subscriber parses and
  // verifies them).
  StatusOr<uint64_t> Read(uint64_t version, AlignedBuffer* buffer) const;

 private:
  Options options_;
};

}  // namespace transports
}  // namespace viper
