#include "viper/core/safetensors.h"

#include "viper/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>

#include "safetensors_header.h"
#include "viper/core/checksum.h"

namespace viper {
namespace safetensors {
namespace {

using Json = nlohmann::json;
using internal::GetLe64;
using internal::kMaxQuotedChars;
using internal::kMetadataKey;
using internal::Quote;
using internal::RawEntry;
using internal::RawHeader;
using internal::ParseRawHeader;

constexpr char kViperPrefix[] = "viper.";
// Every key Viper reads or writes; another key with the viper. prefix (in
// any case) is a damaged one.
constexpr const char* kViperKeys[] = {kVersionKey, kIterationKey,      kProducerKey,      kChecksumKey,
                                      kFormatKey,  kDeviceChecksumKey, kHeaderChecksumKey};

// Bytes hashed per step when copying and hashing in one pass: small enough
// that the freshly copied chunk is still in L2 when it is hashed.
constexpr std::size_t kFusedChunkBytes = 256 * 1024;

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
    if (out.size() > kMaxQuotedChars && i + 1 < shape.size()) {
      return out + ", ... (" + std::to_string(shape.size()) + " dimensions)]";
    }
  }
  return out + "]";
}

bool StartsWithViper(const std::string& key, bool ignore_case) {
  const std::size_t n = sizeof(kViperPrefix) - 1;
  if (key.size() < n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    char c = key[i];
    if (ignore_case && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kViperPrefix[i]) return false;
  }
  return true;
}

void PutLe64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}


// Checks what the header needs from each tensor: a valid name, non-negative
// dims and a byte count that matches the shape.
Status ValidateForHeader(const ModelState& state) {
  std::unordered_set<std::string> names;
  for (const Tensor& t : state.tensors()) {
    if (t.name.empty()) return InvalidArgumentError("a tensor has an empty name");
    if (t.name == kMetadataKey) return InvalidArgumentError("tensor name '__metadata__' is reserved");
    if (!names.insert(t.name).second) return InvalidArgumentError("duplicate tensor name " + Quote(t.name));
    for (int64_t d : t.shape) {
      if (d < 0) {
        return InvalidArgumentError("tensor " + Quote(t.name) + " has a negative dimension in shape " +
                                    ShapeString(t.shape));
      }
    }
    if (t.size_bytes != t.ExpectedBytes()) {
      return InvalidArgumentError("tensor " + Quote(t.name) + ": shape " + ShapeString(t.shape) + " of " +
                                  ToString(t.dtype) + " needs " + std::to_string(t.ExpectedBytes()) +
                                  " bytes but the tensor holds " + std::to_string(t.size_bytes));
    }
  }
  return Status::Ok();
}

Status RequireHost(const ModelState& state, const char* what) {
  for (const Tensor& t : state.tensors()) {
    if (t.memory != MemoryKind::kHost) {
      return FailedPreconditionError(std::string(what) + " needs host tensors, but tensor " + Quote(t.name) +
                                     " is in " + ToString(t.memory) + " memory (copy it to the host first)");
    }
    if (t.size_bytes > 0 && t.data == nullptr) {
      return FailedPreconditionError(std::string(what) + ": tensor " + Quote(t.name) + " has " +
                                     std::to_string(t.size_bytes) + " bytes but no data pointer");
    }
  }
  return Status::Ok();
}


template <typename T>
Status ParseMetadataInt(const std::map<std::string, std::string>& metadata, const char* key, T* out) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return Status::Ok();
  const std::string& text = it->second;
  errno = 0;
  char* end = nullptr;
  T value{};
  bool ok = !text.empty() && text.size() <= 64 && text.find('\0') == std::string::npos;
  if (ok && std::numeric_limits<T>::is_signed) {
    const long long v = std::strtoll(text.c_str(), &end, 10);
    ok = errno == 0 && *end == '\0' && v >= static_cast<long long>(std::numeric_limits<T>::min()) &&
         v <= static_cast<long long>(std::numeric_limits<T>::max());
    value = static_cast<T>(v);
  } else if (ok) {
    ok = text[0] != '-';
    const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    ok = ok && errno == 0 && *end == '\0' &&
         v <= static_cast<unsigned long long>(std::numeric_limits<T>::max());
    value = static_cast<T>(v);
  }
  if (!ok) {
    return InvalidArgumentError("__metadata__ key " + Quote(key) + " must be a decimal integer, got " +
                                Quote(text));
  }
  *out = value;
  return Status::Ok();
}

// One checked tensor entry of a parsed header.
struct Entry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  std::size_t json_index = 0;  // order in the header, to keep sorting stable
};

StatusOr<Entry> CheckEntry(RawEntry& raw, uint64_t data_bytes) {
  const std::string who = "tensor " + Quote(raw.name);
  if (!raw.has_dtype) return InvalidArgumentError(who + ": missing field 'dtype'");
  if (!raw.has_shape) return InvalidArgumentError(who + ": missing field 'shape'");
  if (!raw.has_offsets) return InvalidArgumentError(who + ": missing field 'data_offsets'");
  Entry e;
  e.name = std::move(raw.name);
  auto dtype = DTypeFromString(raw.dtype);
  if (!dtype) return InvalidArgumentError(who + ": unknown dtype " + Quote(raw.dtype));
  e.dtype = *dtype;
  uint64_t elements = 1;
  bool overflow = false;
  e.shape.reserve(raw.shape.size());
  for (uint64_t d : raw.shape) {
    e.shape.push_back(static_cast<int64_t>(d));  // <= INT64_MAX, checked while reading
    overflow = overflow || __builtin_mul_overflow(elements, d, &elements);
  }
  uint64_t expected_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(elements, DTypeSize(e.dtype), &expected_bytes);
  if (overflow) {
    std::string compact = ShapeString(e.shape);
    compact.erase(std::remove(compact.begin(), compact.end(), ' '), compact.end());
    return InvalidArgumentError(who + ": shape " + compact + " overflows 64-bit byte counts");
  }
  e.begin = raw.offsets[0];
  e.end = raw.offsets[1];
  const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
  if (e.end < e.begin) {
    return InvalidArgumentError(who + ": data_offsets " + range + " end before they begin");
  }
  if (e.end > data_bytes) {
    return DataLossError(who + ": data_offsets " + range + " are out of range: the data section has " +
                         std::to_string(data_bytes) + " bytes");
  }
  if (e.end - e.begin != expected_bytes) {
    return InvalidArgumentError(who + ": shape " + ShapeString(e.shape) + " of " + raw.dtype + " needs " +
                                std::to_string(expected_bytes) + " bytes but data_offsets " + range +
                                " span " + std::to_string(e.end - e.begin));
  }
  return e;
}

// Orders a tensor table by (begin, end, name): data order, and a canonical
// order for empty tensors sharing an offset.
bool TableOrder(const TableEntry& a, const TableEntry& b) {
  if (a.begin != b.begin) return a.begin < b.begin;
  if (a.end != b.end) return a.end < b.end;
  return a.name < b.name;
}

// Checks the integrity keys of `metadata` (see the top of safetensors.h):
// which checksums the header carries, the header checksum over `table`, and
// (when `data` is host memory and options say so) the data checksum.
Status VerifyIntegrity(const std::map<std::string, std::string>& metadata, std::vector<TableEntry> table,
                       const std::byte* data, uint64_t data_bytes, MemoryKind memory,
                       const ParseOptions& options, ParseInfo* info) {
  bool claims_viper = false;
  for (const auto& [key, value] : metadata) {
    if (!StartsWithViper(key, /*ignore_case=*/true)) continue;
    claims_viper = true;
    bool known = false;
    for (const char* k : kViperKeys) known = known || key == k;
    if (!known) {
      return DataLossError("__metadata__ key " + Quote(key) +
                           " is not a key Viper writes (they are lower-case viper.version, viper.iteration, "
                           "viper.producer, viper.checksum, viper.format, viper.header_checksum): the header "
                           "is damaged, refusing to treat the file as verified");
    }
  }
  info->checksum = ChecksumKind::kNone;
  if (!claims_viper) {
    if (options.require_checksum) {
      return DataLossError(
          "__metadata__ has no 'viper.checksum' (no viper.* key at all: a plain safetensors file, "
          "unverified) but a checksum is required");
    }
    return Status::Ok();
  }
  auto data_it = metadata.find(kChecksumKey);
  const bool has_device_checksum = metadata.count(kDeviceChecksumKey) > 0;
  if (data_it == metadata.end() && !has_device_checksum) {
    return DataLossError(
        "__metadata__ has viper.* keys but no 'viper.checksum': a file Viper wrote always has one, so the "
        "header is damaged (a flipped byte in the key?) and the file cannot be verified");
  }
  std::optional<uint64_t> data_checksum;
  if (data_it != metadata.end()) {
    data_checksum = ChecksumFromHex(data_it->second);
    if (!data_checksum) {
      return InvalidArgumentError("__metadata__ 'viper.checksum' must be 16 hex digits, got " +
                                  Quote(data_it->second));
    }
  }
  auto format_it = metadata.find(kFormatKey);
  auto header_it = metadata.find(kHeaderChecksumKey);
  if (format_it != metadata.end()) {
    if (format_it->second != kFormatVersion) {
      return InvalidArgumentError("__metadata__ 'viper.format' is " + Quote(format_it->second) +
                                  "; this build reads format " + kFormatVersion +
                                  " and legacy files without the key");
    }
    if (header_it == metadata.end()) {
      return DataLossError("__metadata__ says viper.format 2 but has no 'viper.header_checksum': the header "
                           "is damaged");
    }
    auto expected = ChecksumFromHex(header_it->second);
    if (!expected) {
      return InvalidArgumentError("__metadata__ 'viper.header_checksum' must be 16 hex digits, got " +
                                  Quote(header_it->second));
    }
    const uint64_t actual = HeaderChecksum(std::move(table), metadata);
    if (actual != *expected) {
      return DataLossError("header checksum mismatch: viper.header_checksum says " + ChecksumToHex(*expected) +
                           " but the tensor table and metadata hash to " + ChecksumToHex(actual) +
                           " (a name, dtype, shape, offset or metadata value was changed)");
    }
    info->checksum = ChecksumKind::kDataAndHeader;
    info->header_verified = true;
  } else {
    if (header_it != metadata.end()) {
      return DataLossError("__metadata__ has 'viper.header_checksum' but no 'viper.format': the header is "
                           "damaged");
    }
    info->checksum = ChecksumKind::kDataOnly;
  }
  if (data_checksum && options.verify_checksum && memory == MemoryKind::kHost) {
    const uint64_t actual = Xxh3_64(data, data_bytes);
    if (actual != *data_checksum) {
      return DataLossError("checksum mismatch: header says " + ChecksumToHex(*data_checksum) + " but the " +
                           std::to_string(data_bytes) + "-byte data section hashes to " + ChecksumToHex(actual));
    }
    info->data_verified = true;
  }
  return Status::Ok();
}

// Appends the JSON text of `s` (quoted, escaped; throws on invalid UTF-8).
void AppendJsonString(const std::string& s, std::string* out) { *out += Json(s).dump(); }

std::string DirName(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}


}  // namespace

const char* ToString(ChecksumKind kind) {
  switch (kind) {
    case ChecksumKind::kNone:
      return "none";
    case ChecksumKind::kDataOnly:
      return "data only (legacy)";
    case ChecksumKind::kDataAndHeader:
      return "data+header";
  }
  return "?";
}

uint64_t HeaderChecksum(std::vector<TableEntry> tensors, const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(), TableOrder);
  Xxh3Hasher hasher;
  auto u64 = [&](uint64_t v) {
    char b[8];
    PutLe64(v, b);
    hasher.Update(b, 8);
  };
  auto str = [&](const std::string& s) {
    u64(s.size());
    hasher.Update(s.data(), s.size());
  };
  static constexpr char kTag[] = "viper.header.v2";
  hasher.Update(kTag, sizeof(kTag) - 1);
  for (const TableEntry& t : tensors) {
    str(t.name);
    str(t.dtype);
    u64(t.shape.size());
    for (int64_t d : t.shape) u64(static_cast<uint64_t>(d));
    u64(t.begin);
    u64(t.end);
  }
  u64(metadata.size() - metadata.count(kHeaderChecksumKey));
  for (const auto& [key, value] : metadata) {  // std::map: byte order of keys
    if (key == kHeaderChecksumKey) continue;
    str(key);
    str(value);
  }
  return hasher.Digest();
}

StatusOr<Header> BuildHeader(const ModelState& state, const uint64_t* data_checksum,
                             const std::map<std::string, std::string>& extra_metadata) {
  VIPER_RETURN_IF_ERROR(ValidateForHeader(state));
  // Metadata in the order written: Viper's keys, the extra ones, then the
  // header checksum over all of them and the tensor table.
  std::vector<std::pair<std::string, std::string>> metadata = {
      {kVersionKey, std::to_string(state.metadata.version)},
      {kIterationKey, std::to_string(state.metadata.iteration)},
      {kProducerKey, std::to_string(state.metadata.producer_id)}};
  if (data_checksum) metadata.emplace_back(kChecksumKey, ChecksumToHex(*data_checksum));
  metadata.emplace_back(kFormatKey, kFormatVersion);
  std::map<std::string, std::string> all(metadata.begin(), metadata.end());
  for (const auto& [key, value] : extra_metadata) {
    if (all.count(key) || key == kHeaderChecksumKey) {
      return InvalidArgumentError("extra metadata key " + Quote(key) + " clashes with a key Viper writes");
    }
    if (StartsWithViper(key, /*ignore_case=*/true) && key != kDeviceChecksumKey) {
      return InvalidArgumentError("extra metadata key " + Quote(key) +
                                  " uses the prefix 'viper.', which is reserved for Viper's own keys");
    }
    metadata.emplace_back(key, value);
    all.emplace(key, value);
  }

  std::vector<TableEntry> table;
  table.reserve(state.size());
  uint64_t offset = 0;
  for (const Tensor& t : state.tensors()) {
    table.push_back({t.name, ToString(t.dtype), t.shape, offset, offset + t.size_bytes});
    offset += t.size_bytes;
  }
  metadata.emplace_back(kHeaderChecksumKey, ChecksumToHex(HeaderChecksum(table, all)));

  // Compact JSON as nlohmann writes it, assembled piece by piece (linear in
  // the number of tensors; strings are escaped by the library).
  std::string json;
  try {
    json = "{\"__metadata__\":{";
    for (std::size_t i = 0; i < metadata.size(); ++i) {
      if (i) json += ',';
      AppendJsonString(metadata[i].first, &json);
      json += ':';
      AppendJsonString(metadata[i].second, &json);
    }
    json += '}';
    for (const TableEntry& t : table) {
      json += ',';
      AppendJsonString(t.name, &json);
      json += ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
      for (std::size_t i = 0; i < t.shape.size(); ++i) {
        if (i) json += ',';
        json += std::to_string(t.shape[i]);
      }
      json += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
    }
    json += '}';
  } catch (const Json::exception& e) {  // invalid UTF-8 in a name or value
    return InvalidArgumentError(std::string("cannot encode the header as JSON: ") + e.what());
  }
  // Pad with spaces so that 8 + N is a multiple of 8 (the data section is
  // then 8-byte aligned in the buffer).
  json.append((8 - json.size() % 8) % 8, ' ');

  Header out;
  out.bytes.resize(8);
  PutLe64(json.size(), out.bytes.data());
  out.bytes += json;
  out.data_bytes = offset;
  return out;
}

StatusOr<uint64_t> DataChecksum(const ModelState& state) {
  VIPER_RETURN_IF_ERROR(RequireHost(state, "DataChecksum"));
  Xxh3Hasher hasher;
  for (const Tensor& t : state.tensors()) {
    if (t.size_bytes) hasher.Update(t.data, t.size_bytes);
  }
  return hasher.Digest();
}

StatusOr<uint64_t> SerializedSize(const ModelState& state) {
  const uint64_t placeholder = 0;  // the checksum is fixed-width, so its value does not change the size
  VIPER_ASSIGN_OR_RETURN(Header header, BuildHeader(state, &placeholder));
  return header.TotalBytes();
}

StatusOr<uint64_t> SerializeTo(const ModelState& state, std::byte* out, uint64_t capacity) {
  VIPER_RETURN_IF_ERROR(RequireHost(state, "SerializeTo"));
  // The checksum is 16 hex digits whatever its value, so the header length is
  // known before the data is hashed: copy and hash in one pass, chunk by
  // chunk while the chunk is still in cache, then write the final header.
  const uint64_t placeholder = 0;
  VIPER_ASSIGN_OR_RETURN(Header sized, BuildHeader(state, &placeholder));
  if (capacity < sized.TotalBytes()) {
    return InvalidArgumentError("output buffer holds " + std::to_string(capacity) +
                                " bytes but the model needs " + std::to_string(sized.TotalBytes()));
  }
  std::byte* dst = out + sized.bytes.size();
  Xxh3Hasher hasher;
  for (const Tensor& t : state.tensors()) {
    for (std::size_t done = 0; done < t.size_bytes; done += kFusedChunkBytes) {
      const std::size_t n = std::min(kFusedChunkBytes, t.size_bytes - done);
      std::memcpy(dst, t.data + done, n);
      hasher.Update(dst, n);
      dst += n;
    }
  }
  const uint64_t checksum = hasher.Digest();
  VIPER_ASSIGN_OR_RETURN(Header header, BuildHeader(state, &checksum));
  VIPER_CHECK(header.bytes.size() == sized.bytes.size());
  std::memcpy(out, header.bytes.data(), header.bytes.size());
  return header.TotalBytes();
}

StatusOr<std::vector<std::byte>> Serialize(const ModelState& state) {
  VIPER_ASSIGN_OR_RETURN(uint64_t size, SerializedSize(state));
  std::vector<std::byte> out(size);
  VIPER_ASSIGN_OR_RETURN(uint64_t written, SerializeTo(state, out.data(), out.size()));
  VIPER_CHECK(written == size);
  return out;
}

namespace {

// Checks the header `raw` of an image whose `data_bytes`-byte data section
// starts at `data` in `memory`, and the integrity keys as `options` say.
// Tensors are views into `data` sharing `owner`.
StatusOr<ModelState> ParseWithData(RawHeader& raw, std::shared_ptr<const void> owner, const std::byte* data,
                                   uint64_t data_bytes, MemoryKind memory, const ParseOptions& options,
                                   ParseInfo* info_out) {
  std::vector<Entry> entries;
  entries.reserve(raw.entries.size());
  for (RawEntry& r : raw.entries) {
    VIPER_ASSIGN_OR_RETURN(Entry e, CheckEntry(r, data_bytes));
    e.json_index = entries.size();
    entries.push_back(std::move(e));
  }
  // Data order; empty tensors sharing an offset keep their header order.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.json_index < b.json_index;
  });
  uint64_t cursor = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < cursor) {
      return InvalidArgumentError("tensors " + Quote(previous->name) + " [" +
                                  std::to_string(previous->begin) + ", " + std::to_string(previous->end) +
                                  ") and " + Quote(e.name) + " [" + std::to_string(e.begin) + ", " +
                                  std::to_string(e.end) + ") overlap");
    }
    if (e.begin > cursor) {
      return InvalidArgumentError("bytes [" + std::to_string(cursor) + ", " + std::to_string(e.begin) +
                                  ") of the data section are not covered by any tensor (gap before " +
                                  Quote(e.name) + ")");
    }
    cursor = e.end;
    if (e.end > e.begin) previous = &e;
  }
  if (cursor != data_bytes) {
    return InvalidArgumentError("bytes [" + std::to_string(cursor) + ", " + std::to_string(data_bytes) +
                                ") at the end of the data section are not covered by any tensor (" +
                                std::to_string(data_bytes - cursor) + " trailing bytes)");
  }

  ModelState state;
  VIPER_RETURN_IF_ERROR(ParseMetadataInt(raw.metadata, kVersionKey, &state.metadata.version));
  VIPER_RETURN_IF_ERROR(ParseMetadataInt(raw.metadata, kIterationKey, &state.metadata.iteration));
  VIPER_RETURN_IF_ERROR(ParseMetadataInt(raw.metadata, kProducerKey, &state.metadata.producer_id));

  ParseInfo info;
  std::vector<TableEntry> table;
  if (raw.metadata.count(kHeaderChecksumKey)) {
    table.reserve(entries.size());
    for (const Entry& e : entries) table.push_back({e.name, ToString(e.dtype), e.shape, e.begin, e.end});
  }
  VIPER_RETURN_IF_ERROR(
      VerifyIntegrity(raw.metadata, std::move(table), data, data_bytes, memory, options, &info));

  std::shared_ptr<void> mutable_owner = std::const_pointer_cast<void>(owner);
  // Names are unique (checked while reading) and validated above, so tensors
  // are appended directly rather than through Add's linear duplicate search.
  std::vector<Tensor>& tensors = state.mutable_tensors();
  tensors.reserve(entries.size());
  for (Entry& e : entries) {
    Tensor t;
    t.name = std::move(e.name);
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.memory = memory;
    t.data = const_cast<std::byte*>(data + e.begin);
    t.size_bytes = e.end - e.begin;
    t.owner = std::shared_ptr<void>(mutable_owner, t.data);  // aliasing: shares the buffer's owner
    tensors.push_back(std::move(t));
  }
  if (info_out) {
    info.json_header_bytes = raw.header_bytes;
    info.data_offset = 8 + raw.header_bytes;
    info.metadata = std::move(raw.metadata);
    *info_out = std::move(info);
  }
  return state;
}

}  // namespace

StatusOr<ModelState> Parse(std::shared_ptr<const void> owner, const std::byte* data, uint64_t size,
                           const ParseOptions& options, ParseInfo* info) {
  VIPER_ASSIGN_OR_RETURN(RawHeader raw, ParseRawHeader(data, size, options));
  const uint64_t data_start = 8 + raw.header_bytes;
  return ParseWithData(raw, std::move(owner), data + data_start, size - data_start, MemoryKind::kHost, options,
                       info);
}

StatusOr<ModelState> ParseExternalData(std::shared_ptr<const void> owner, const std::byte* header,
                                       uint64_t header_size, const std::byte* data, uint64_t data_bytes,
                                       MemoryKind memory) {
  ParseOptions options;
  options.verify_checksum = memory == MemoryKind::kHost;
  VIPER_ASSIGN_OR_RETURN(RawHeader raw, ParseRawHeader(header, header_size, options));
  return ParseWithData(raw, std::move(owner), data, data_bytes, memory, options, nullptr);
}

StatusOr<ModelState> Parse(std::vector<std::byte> bytes, const ParseOptions& options) {
  auto holder = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  const std::byte* data = holder->data();
  const uint64_t size = holder->size();
  return Parse(std::shared_ptr<const void>(holder, data), data, size, options);
}

StatusOr<std::map<std::string, std::string>> ParseMetadata(const std::byte* data, uint64_t size) {
  VIPER_ASSIGN_OR_RETURN(RawHeader raw, ParseRawHeader(data, size, ParseOptions()));
  return std::move(raw.metadata);
}

StatusOr<int> OpenRegularFile(int dir_fd, const std::string& name, const std::string& shown,
                              const ReadFileOptions& options) {
  // O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; the
  // file type is checked on the descriptor before a byte is read.
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  if (!options.follow_symlinks) flags |= O_NOFOLLOW;
  const int fd = ::openat(dir_fd, name.c_str(), flags);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFoundError("cannot open " + Quote(shown) + ": " + std::strerror(err));
    if (err == ELOOP && !options.follow_symlinks) {
      return InvalidArgumentError(Quote(shown) + " is a symbolic link: not followed (name its target instead)");
    }
    return ErrnoError("cannot open " + Quote(shown), err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("cannot stat " + Quote(shown), err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* what = S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISDIR(st.st_mode) ? "a directory"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                    : "not a regular file";
    return InvalidArgumentError(Quote(shown) + " is " + what + ", not a regular file: not read");
  }
  // Back to blocking reads (a regular file never blocks; this keeps pread's
  // semantics plain).
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

StatusOr<FileBuffer> ReadFileBuffer(const std::string& path, const ReadFileOptions& options) {
  return ReadFileBufferAt(AT_FDCWD, path, path, options);
}

StatusOr<FileBuffer> ReadFileBufferAt(int dir_fd, const std::string& name, const std::string& shown,
                                      const ReadFileOptions& options) {
  VIPER_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(dir_fd, name, shown, options));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("cannot stat " + Quote(shown), err);
  }
  if (options.max_bytes > 0 && static_cast<uint64_t>(st.st_size) > options.max_bytes) {
    ::close(fd);
    return OutOfRangeError(Quote(shown) + " is " + std::to_string(st.st_size) + " bytes, more than the " +
                           std::to_string(options.max_bytes) + "-byte limit");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // Uninitialised on purpose: every byte is read from the file below.
  std::shared_ptr<std::byte[]> buffer(new std::byte[size ? size : 1]);
  uint64_t done = 0;
  while (done < size) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<uint64_t>(size - done, uint64_t{1} << 30));
    const ssize_t n = ::pread(fd, buffer.get() + done, chunk, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoError("reading " + Quote(shown), err);
    }
    if (n == 0) {
      ::close(fd);
      return DataLossError(Quote(shown) + " shrank while being read: got " + std::to_string(done) + " of " +
                           std::to_string(size) + " bytes");
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  FileBuffer out;
  out.bytes = std::move(buffer);
  out.size = size;
  return out;
}


StatusOr<ModelState> ReadFile(const std::string& path, const ParseOptions& options, ParseInfo* info,
                              const ReadFileOptions& read_options) {
  VIPER_ASSIGN_OR_RETURN(FileBuffer file, ReadFileBuffer(path, read_options));
  const std::byte* data = file.bytes.get();
  auto state = Parse(std::shared_ptr<const void>(file.bytes, data), data, file.size, options, info);
  if (!state.ok()) return state.status().WithContext(path);
  return state;
}

Status WriteFileAtomic(const ModelState& state, const std::string& path) {
  VIPER_RETURN_IF_ERROR(RequireHost(state, "WriteFileAtomic"));
  VIPER_ASSIGN_OR_RETURN(uint64_t checksum, DataChecksum(state));
  VIPER_ASSIGN_OR_RETURN(Header header, BuildHeader(state, &checksum));

  // A private temporary beside `path` (random name, O_EXCL|O_NOFOLLOW,
  // mode 0600): a link planted in the directory is never written through.
  auto file = AtomicFile::CreateFor(path);
  if (!file.ok()) {
    const std::string dir = DirName(path);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return NotFoundError("cannot write " + Quote(path) + ": directory " + Quote(dir) + " does not exist");
    }
    return file.status();
  }
  VIPER_RETURN_IF_ERROR((*file)->Write(header.bytes.data(), header.bytes.size()));
  for (const Tensor& t : state.tensors()) {
    if (t.size_bytes) VIPER_RETURN_IF_ERROR((*file)->Write(t.data, t.size_bytes));
  }
  return (*file)->CommitTo(path);  // fsync, rename, directory fsync; the temporary goes on failure
}

}  // namespace safetensors
}  // namespace viper
