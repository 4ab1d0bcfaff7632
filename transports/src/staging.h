// Internal: what the producer sends. StagedVersion, the staging buffer
// (async mode; sync pfs and one-sided), layout [header reserve][data]:
// the safetensors header is padded with spaces to a multiple of 4096 and
// written just before the data, so the whole image (header + data) starts
// page-aligned and can go to O_DIRECT, MPI or the network as one range.
// DescribedVersion (sync two-sided): the caller's tensors in place.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "stream_hash.h"
#include "viper/config.h"
#include "viper/core/model_state.h"
#include "viper/core/status.h"
#include "viper/transports/aligned_buffer.h"

namespace viper {
namespace transports {
namespace internal {

// A few persistent threads that run one batch of jobs at a time together with
// the calling thread (the snapshot copy: no thread is created per snapshot).
class CopyPool {
 public:
  // `threads` counts the caller: threads - 1 workers are started (>= 1).
  explicit CopyPool(int threads);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs job(0) .. job(jobs - 1), each on its own thread, job(0) on the
  // caller's; returns when all have returned. 1 <= jobs <= threads().
  void Run(int jobs, const std::function<void(int)>& job);

 private:
  void Work(int id);

  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int)>* job_ = nullptr;  // the batch being run
  int jobs_ = 0;
  int busy_ = 0;        // workers of this batch not yet finished
  uint64_t batch_ = 0;  // incremented per batch
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// One memcpy of a snapshot: `bytes` from `src` to `dst`.
struct CopyPiece {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  std::size_t bytes = 0;
};

// Copies `bytes` from `src` to `dst` with non-temporal (streaming) stores on
// x86-64 (AVX2 where the CPU has it, else SSE2), memcpy elsewhere. For large
// copies whose destination is not read again soon: the stores bypass the
// caches and, unlike ordinary stores, do not first read each destination line
// from memory. The bytes are visible to other threads once it returns.
void StreamCopy(std::byte* dst, const std::byte* src, std::size_t bytes);
// The same stores in address order, without StreamCopy's interleaving of
// pages: for slices of a pass that has just read `src` into the cache (the
// delta's fused snapshot, delta::CopyHashAndFeed). On the 2-core EPYC VM
// (2026-11-26, load ~7), 600 MiB in 128 KiB slices: 80 ms, as one glibc
// memcpy of the whole; StreamCopy per slice 200 ms, memcpy per slice 130 ms
// (ordinary stores read each destination line first).
void StreamCopySequential(std::byte* dst, const std::byte* src, std::size_t bytes);

// Plans the copy of `state`'s tensors, back to back from `dst`, as `jobs`
// contiguous ranges of the destination of about equal size, cut at
// kCopyCutBytes boundaries of the offset from `dst` (a range may span several
// tensors and a tensor several ranges). Zero-byte tensors get no piece; a
// range can be empty when the data is small.
constexpr std::size_t kCopyCutBytes = 64 * 1024;
std::vector<std::vector<CopyPiece>> PlanCopy(const ModelState& state, std::byte* dst, int jobs);

// The gpu tier's staging memory on the device, behind no CUDA types:
// implemented with CUDA in tier_gpu.cc (the only tier that stages on the
// device), so StagedVersion needs no #if.
class DeviceImage {
 public:
  virtual ~DeviceImage() = default;
  virtual std::byte* data() const = 0;
  virtual uint64_t capacity() const = 0;
  // Frees the image, then allocates `bytes` (two large ones may not fit).
  virtual Status Reallocate(uint64_t bytes) = 0;
  // Copies the tensors of `state` (host or device memory) to `dst` in
  // order; complete on return (the caller may change them right after).
  virtual Status CopyTensors(const ModelState& state, std::byte* dst) = 0;
  // sum64 of `bytes` at device address `data` (device_checksum.h).
  virtual StatusOr<uint64_t> Sum64(const std::byte* data, uint64_t bytes) = 0;
  // Writes `n` host bytes at `src` to device address `dst`, then records
  // the image's ready event; complete on return.
  virtual Status WriteHeader(std::byte* dst, const void* src, uint64_t n) = 0;
};

// Host staging (host and pfs tiers) holds the image in an AlignedBuffer and
// checksums the data with XXH3 (viper.checksum). Device staging (gpu tier,
// after UseDevice) holds it in device memory, copies tensors with
// cudaMemcpyAsync from host or device, and checksums with sum64 on the GPU
// (viper.device_checksum, see device_checksum.h); image() is then a device
// pointer.
class StagedVersion {
 public:
  // Entries added to every header's __metadata__ (e.g. the run's session
  // id); covered by viper.header_checksum. Set before the first version.
  void set_extra_metadata(std::map<std::string, std::string> extra) { extra_metadata_ = std::move(extra); }
  // With a key, Finalize adds viper-run.hmac (hmac_sha256.h: VersionDigest
  // under `key`, with `session`) to the header. Host staging only.
  void set_hmac(std::string key, std::string session) {
    hmac_key_ = std::move(key);
    hmac_session_ = std::move(session);
  }
  StagedVersion() = default;
  ~StagedVersion();
  StagedVersion(const StagedVersion&) = delete;
  StagedVersion& operator=(const StagedVersion&) = delete;
  // Switches to device staging in `device` (the gpu tier makes it: its
  // stream, tier_gpu.cc). Call before the first Snapshot.
  void UseDevice(std::unique_ptr<DeviceImage> device);
  // Device staging: the allocation the image lives in (for
  // cudaIpcGetMemHandle), the image's offset in it, and the device memory.
  const void* device_allocation() const { return base(); }
  uint64_t image_offset() const { return reserve_ - header_bytes_; }
  DeviceImage* device() const { return device_.get(); }
  bool on_device() const { return on_device_; }
  // Copies the tensor bytes of `state` (host tensors) into the data region,
  // growing the buffer when needed. This is the producer's stall in async mode.
  // With `hash_while_copying` (sync mode) the checksum is computed block by
  // block right after each block is copied, while it is still in cache, and
  // Finalize does not read the data again. Otherwise host staging copies
  // snapshots of at least kStreamCopyMinBytes with StreamCopy, and splits the
  // copy over min(copy_threads, data bytes / kMinBytesPerCopyThread) threads
  // (at least 1: the caller, plus a pool this object keeps, started on the
  // first call that asks for more than one thread).
  Status Snapshot(const ModelState& state, uint64_t version, int64_t iteration, int32_t producer_id,
                  uint64_t min_capacity_bytes = 0, bool hash_while_copying = false, int copy_threads = 1);
  static constexpr uint64_t kStreamCopyMinBytes = 8ull << 20;
  static constexpr uint64_t kMinBytesPerCopyThread = 4ull << 20;
  // Checksums the data and writes the header in front of it.
  Status Finalize();
  // Writes the header in front of the data with `checksum`, which the caller
  // computed over data() (e.g. while sending it); the data is not read.
  Status Finalize(uint64_t checksum);
  // The padded header size Finalize will write for this snapshot.
  StatusOr<uint64_t> PlannedHeaderBytes() const;

  const std::byte* image() const { return base() + reserve_ - header_bytes_; }
  uint64_t image_bytes() const { return header_bytes_ + data_bytes_; }
  uint64_t header_bytes() const { return header_bytes_; }
  uint64_t data_bytes() const { return data_bytes_; }
  uint64_t checksum() const { return checksum_; }
  uint64_t version() const { return layout_.metadata.version; }
  int64_t iteration() const { return layout_.metadata.iteration; }
  std::byte* data() { return base() + reserve_; }

 private:
  std::byte* base() const;
  uint64_t capacity() const;
  Status Reallocate(uint64_t bytes);
  Status CopyTensors(const ModelState& state, bool hash_while_copying);
  void UseCopyThreads(int threads);

  bool on_device_ = false;
  AlignedBuffer buffer_;
  std::unique_ptr<CopyPool> pool_;  // copy_threads > 1
  int copy_threads_ = 1;
  std::unique_ptr<DeviceImage> device_;  // device staging (gpu tier)
  uint64_t reserve_ = 0;                 // bytes before the data (a multiple of 4096)
  uint64_t header_bytes_ = 0;            // padded header, a multiple of 4096
  uint64_t data_bytes_ = 0;
  uint64_t checksum_ = 0;
  bool checksum_ready_ = false;
  ModelState layout_;  // tensors as views into the data region
  std::map<std::string, std::string> extra_metadata_;
  std::string hmac_key_, hmac_session_;
};

// Metadata key of the sum64 checksum a device image carries instead of
// viper.checksum.
constexpr const char* kDeviceChecksumKey = "viper.device_checksum";

// A version described in place: the caller's host tensors, not copied. The
// tensors must stay unchanged until the version has been sent (sync mode:
// the caller is blocked in Publish).
class DescribedVersion {
 public:
  // Entries added to every header's __metadata__ (e.g. the run's session
  // id); covered by viper.header_checksum. Set before the first version.
  void set_extra_metadata(std::map<std::string, std::string> extra) { extra_metadata_ = std::move(extra); }
  // Validates `state` (host tensors, sizes matching shapes) and sizes the
  // header (one BuildHeader); the layout is reused while names, dtypes and
  // shapes are unchanged.
  Status Describe(const ModelState& state, uint64_t version, int64_t iteration, int32_t producer_id);

  // The data section: the tensors in order, as written after the header.
  const std::vector<ByteRange>& ranges() const { return ranges_; }
  uint64_t header_bytes() const { return header_bytes_; }
  uint64_t data_bytes() const { return data_bytes_; }
  uint64_t version() const { return layout_.metadata.version; }
  int64_t iteration() const { return layout_.metadata.iteration; }
  // Builds the padded header (header_bytes() long) with `checksum` of the
  // data section; the bytes live as long as the returned pointer.
  std::shared_ptr<const std::byte> Header(uint64_t checksum) const;

 private:
  ModelState layout_;  // tensor descriptions; data pointers are the caller's
  std::map<std::string, std::string> extra_metadata_;
  std::vector<ByteRange> ranges_;
  uint64_t header_bytes_ = 0;
  uint64_t data_bytes_ = 0;
};

// Re-pads a serialized safetensors header (length prefix + JSON) with spaces
// to a multiple of `alignment` bytes, rewriting the length prefix.
std::string PadHeader(std::string header, uint64_t alignment);

}  // namespace internal
}  // namespace transports
}  // namespace viper
