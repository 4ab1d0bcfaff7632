// The safetensors codec: the one byte layout Viper moves in memory and writes
// to disk, so any received version is a valid .safetensors file PyTorch and
// the `safetensors` Python package can open.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON (padded with
// spaces to a multiple of 8), then the raw little-endian row-major tensor
// data. The JSON maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end)} (offsets relative to the start of the data section) and may
// hold "__metadata__", a string-to-string map. Viper writes the keys
// "viper.version", "viper.iteration", "viper.producer" and "viper.checksum"
// (XXH3-64 of the whole data section, 16 hex digits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "viper/core/model_state.h"
#include "viper/core/status.h"

namespace viper {

namespace safetensors {

// Largest header accepted by the parser (the reference implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct ParseOptions {
  // Verify viper.checksum when present (a mismatch is DataLoss).
  bool verify_checksum = true;
  // Reject a file without viper.checksum (consumers of Viper's own stream set this).
  bool require_checksum = false;
};

// The serialized header: the 8 length bytes plus padded JSON. Tensor data
// follows it in ModelState order. Host and device tensors alike only need
// their sizes here.
struct Header {
  std::string bytes;        // length prefix + JSON, size a multiple of 8
  uint64_t data_bytes = 0;  // size of the data section
  uint64_t TotalBytes() const { return bytes.size() + data_bytes; }
};

// Builds the header for `state`; `data_checksum` (XXH3-64 of the data section)
// goes in __metadata__ when given. Extra metadata entries are added as given.
StatusOr<Header> BuildHeader(const ModelState& state, const uint64_t* data_checksum = nullptr,
                             const std::map<std::string, std::string>& extra_metadata = {});

// XXH3-64 of the concatenated data of all (host) tensors in order.
StatusOr<uint64_t> DataChecksum(const ModelState& state);

// Total serialized size of `state` (header with checksum + data), i.e. what
// SerializeTo writes.
StatusOr<uint64_t> SerializedSize(const ModelState& state);

// Serializes a host-resident `state` into `out` (capacity must be at least
// SerializedSize), with the checksum. Returns the bytes written.
StatusOr<uint64_t> SerializeTo(const ModelState& state, std::byte* out, uint64_t capacity);
// Same, into a new buffer.
StatusOr<std::vector<std::byte>> Serialize(const ModelState& state);

// Parses `size` bytes at `data` without copying: the returned tensors are
// views into the buffer and share `owner`, which must keep it alive. Tensors
// come back in data-offset order; ModelState::metadata is filled from the
// viper.* keys present. Corrupt input is DataLoss (truncation, checksum) or
// InvalidArgument (malformed header), the message naming the tensor/field.
// The views are writable pointers: do not write through them into a buffer
// the caller meant to stay const.
StatusOr<ModelState> Parse(std::shared_ptr<const void> owner, const std::byte* data, uint64_t size,
                           const ParseOptions& options = {});
// Parses an image whose data section does not follow its header in host
// memory (a GPU-tier version: the data stays in device memory). `header`
// holds at least the image's length prefix and JSON (`header_size` bytes),
// `data` the `data_bytes`-byte data section in `memory`. Tensors are views
// into `data` marked `memory`, sharing `owner`. Validates the header exactly
// as Parse does; viper.checksum (XXH3) is verified only for host data.
StatusOr<ModelState> ParseExternalData(std::shared_ptr<const void> owner, const std::byte* header,
                                       uint64_t header_size, const std::byte* data, uint64_t data_bytes,
                                       MemoryKind memory);
// Parses a copy-free view of a vector the caller moves in.
StatusOr<ModelState> Parse(std::vector<std::byte> bytes, const ParseOptions& options = {});

// Reads only the metadata map (no data validation beyond the header); empty
// when the header has no __metadata__.
StatusOr<std::map<std::string, std::string>> ParseMetadata(const std::byte* data, uint64_t size);

// Whole-file helpers (the PFS tier has its own fsync'd, O_DIRECT path).
// ReadFile reads the whole file into one buffer the tensors then view;
// errors name the path (NotFound when it does not exist).
StatusOr<ModelState> ReadFile(const std::string& path, const ParseOptions& options = {});
// The whole file in one uninitialised-then-filled buffer: what ReadFile
// parses, for callers that also want ParseMetadata or the raw bytes.
struct FileBuffer {
  std::shared_ptr<std::byte[]> bytes;
  uint64_t size = 0;
};
StatusOr<FileBuffer> ReadFileBuffer(const std::string& path);
// Writes to `path`.tmp.<pid>, fsyncs, renames to `path`, fsyncs the
// directory. On failure the temporary file is removed and `path` is never left
// partially written (NotFound when the directory does not exist).
Status WriteFileAtomic(const ModelState& state, const std::string& path);

}  // namespace safetensors
}  // namespace viper
