// The safetensors codec: the one byte layout Viper moves in memory and writes
// to disk, so any received version is a valid .safetensors file PyTorch and
// the `safetensors` Python package can open.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON (padded with
// spaces to a multiple of 8), then the raw little-endian row-major tensor
// data. The JSON maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end)} (offsets relative to the start of the data section) and may
// hold "__metadata__", a string-to-string map. Keys are unique at every level
// (the specification's rule; a duplicate is rejected, never last-one-wins).
//
// Viper's integrity keys in __metadata__ (format 2):
//   viper.version, viper.iteration, viper.producer  decimal integers
//   viper.checksum         XXH3-64 of the whole data section, 16 hex digits
//                          (an image in device memory carries
//                          viper.device_checksum instead, checked by transports)
//   viper.format           "2"
//   viper.header_checksum  XXH3-64 of the header's meaning (HeaderChecksum):
//                          every tensor's name, dtype, shape and offsets and
//                          every __metadata__ entry but itself, so a changed
//                          shape, dtype, name, offset, iteration or data
//                          checksum is detected.
// Files without viper.format (written before format 2) are read as legacy:
// only the data section is covered ("data only (legacy)"). Files without any
// viper.* key (another writer's) are valid but unverified. A file with some
// viper.* key but no data checksum, a case-damaged or unknown viper.* key, or
// viper.format without viper.header_checksum is corrupt (DataLoss): a flipped
// byte must not switch verification off.
//
// Hostile input is bounded: the JSON nests at most kMaxJsonDepth levels (a
// valid header needs 3), holds at most ParseOptions::max_tensors tensors and
// max_metadata_entries metadata entries, and is parsed in one linear SAX pass
// (no DOM); messages quote names and values as bounded excerpts.
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
// Deepest nesting of JSON objects/arrays accepted (a valid header needs 3:
// header object, tensor entry, shape array).
constexpr int kMaxJsonDepth = 64;
// Default caps on the entries of one header.
constexpr uint64_t kMaxTensors = 1'000'000;
constexpr uint64_t kMaxMetadataEntries = 100'000;

// Viper's metadata keys (see the top of this file).
constexpr const char* kVersionKey = "viper.version";
constexpr const char* kIterationKey = "viper.iteration";
constexpr const char* kProducerKey = "viper.producer";
constexpr const char* kChecksumKey = "viper.checksum";
constexpr const char* kDeviceChecksumKey = "viper.device_checksum";
constexpr const char* kFormatKey = "viper.format";
constexpr const char* kHeaderChecksumKey = "viper.header_checksum";
// The value of viper.format this build writes.
constexpr const char* kFormatVersion = "2";

// Which Viper checksums a header carries.
enum class ChecksumKind {
  kNone,           // no viper.* key: a plain safetensors file, unverified
  kDataOnly,       // viper.checksum without viper.format: a legacy file
  kDataAndHeader,  // format 2: viper.checksum and viper.header_checksum
};
// "none", "data only (legacy)", "data+header".
const char* ToString(ChecksumKind kind);

struct ParseOptions {
  // Hash the data section against viper.checksum when present (a mismatch is
  // DataLoss). viper.header_checksum is always verified when present.
  bool verify_checksum = true;
  // Reject a file without Viper's checksum (kNone): consumers of Viper's own
  // stream and `--require-checksum` set this.
  bool require_checksum = false;
  // Caps on the header's entries; more is InvalidArgument naming the cap.
  uint64_t max_tensors = kMaxTensors;
  uint64_t max_metadata_entries = kMaxMetadataEntries;
};

// What a successful parse found out about the file, for reports.
struct ParseInfo {
  uint64_t json_header_bytes = 0;  // N, the specification's header size (JSON incl. padding)
  uint64_t data_offset = 0;        // 8 + N: where the data section starts
  std::map<std::string, std::string> metadata;  // all of __metadata__
  ChecksumKind checksum = ChecksumKind::kNone;   // which checksums the header carries
  bool header_verified = false;  // viper.header_checksum matched
  bool data_verified = false;    // the data section was hashed and matched viper.checksum
};

// One row of a header's tensor table, as the JSON states it.
struct TableEntry {
  std::string name;
  std::string dtype;  // "F32", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets
};
// XXH3-64 over the meaning of a header (format 2's viper.header_checksum):
// after the 15 ASCII bytes "viper.header.v2", the tensors ordered by (begin,
// end, name), each as str(name), str(dtype), u64(rank), u64(dim)...,
// u64(begin), u64(end); then u64(count) and the __metadata__ entries but
// viper.header_checksum in byte order of their keys, each as str(key),
// str(value). u64 is 8 bytes little-endian, str(s) = u64(size) + bytes.
// JSON spelling (spacing, key order, escapes) does not change it.
uint64_t HeaderChecksum(std::vector<TableEntry> tensors, const std::map<std::string, std::string>& metadata);

// The serialized header: the 8 length bytes plus padded JSON. Tensor data
// follows it in ModelState order. Host and device tensors alike only need
// their sizes here.
struct Header {
  std::string bytes;        // length prefix + JSON, size a multiple of 8
  uint64_t data_bytes = 0;  // size of the data section
  uint64_t TotalBytes() const { return bytes.size() + data_bytes; }
};

// Builds the header for `state`; `data_checksum` (XXH3-64 of the data section)
// goes in __metadata__ when given. Extra metadata entries are added as given
// (keys starting with "viper." other than viper.device_checksum are
// reserved). viper.format and viper.header_checksum are always written.
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
// views into the buffer and share `owner`, which must keep it alive (an empty
// owner is fine when the caller keeps the buffer alive itself). Tensors
// come back in data-offset order; ModelState::metadata is filled from the
// viper.* keys present. Corrupt input is DataLoss (truncation, checksum) or
// InvalidArgument (malformed header), the message naming the tensor/field.
// `info`, when given, is filled on success. This is also the in-memory entry
// point for fuzzing: no filesystem, any bytes.
// The views are writable pointers: do not write through them into a buffer
// the caller meant to stay const.
StatusOr<ModelState> Parse(std::shared_ptr<const void> owner, const std::byte* data, uint64_t size,
                           const ParseOptions& options = {}, ParseInfo* info = nullptr);
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

// Reads only the metadata map (the header's JSON is fully checked, the data
// section and checksums are not); empty when the header has no __metadata__.
StatusOr<std::map<std::string, std::string>> ParseMetadata(const std::byte* data, uint64_t size);

// Whole-file helpers (the PFS tier has its own fsync'd, O_DIRECT path).
//
// Reading: the file is opened with O_NONBLOCK (a FIFO or device named like a
// model never blocks the reader) and, unless follow_symlinks, O_NOFOLLOW (a
// symbolic link as the last component is refused, InvalidArgument); only
// a regular file is read (anything else is InvalidArgument). Messages
// name the path, never the file's bytes before they parse as a header.
struct ReadFileOptions {
  // Follow a symbolic link at the last component of the path (the caller
  // named that path itself and trusts where it leads).
  bool follow_symlinks = false;
  // Refuse a larger file (OutOfRange) before allocating; 0 = no limit.
  uint64_t max_bytes = 0;
};
// ReadFile reads the whole file into one buffer the tensors then view;
// errors name the path (NotFound when it does not exist).
StatusOr<ModelState> ReadFile(const std::string& path, const ParseOptions& options = {},
                              ParseInfo* info = nullptr, const ReadFileOptions& read_options = {});
// The whole file in one uninitialised-then-filled buffer: what ReadFile
// parses, for callers that also want ParseMetadata or the raw bytes.
struct FileBuffer {
  std::shared_ptr<std::byte[]> bytes;
  uint64_t size = 0;
};
StatusOr<FileBuffer> ReadFileBuffer(const std::string& path, const ReadFileOptions& options = {});
// The same for `name` relative to the open directory `dir_fd` (openat: the
// directory cannot be swapped for a link elsewhere between listing and
// reading); `shown` is the path messages name.
StatusOr<FileBuffer> ReadFileBufferAt(int dir_fd, const std::string& name, const std::string& shown,
                                      const ReadFileOptions& options = {});
// Opens `name` relative to `dir_fd` (AT_FDCWD: the working directory) for
// reading as described above: O_NONBLOCK, O_NOFOLLOW unless follow_symlinks,
// a regular file or InvalidArgument. Returns the descriptor (the caller
// closes it), in blocking mode again.
StatusOr<int> OpenRegularFile(int dir_fd, const std::string& name, const std::string& shown,
                              const ReadFileOptions& options = {});
// Writes to a private temporary beside `path` (AtomicFile::CreateFor: a
// random name created with O_EXCL|O_NOFOLLOW, mode 0600), fsyncs, renames to
// `path`, fsyncs the directory. On failure the temporary file is removed and `path` is never left
// partially written (NotFound when the directory does not exist).
Status WriteFileAtomic(const ModelState& state, const std::string& path);

}  // namespace safetensors
}  // namespace viper
