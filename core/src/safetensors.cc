#include "viper/core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "viper/core/checksum.h"

namespace viper {
namespace safetensors {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kVersionKey = "viper.version";
constexpr const char* kIterationKey = "viper.iteration";
constexpr const char* kProducerKey = "viper.producer";
constexpr const char* kChecksumKey = "viper.checksum";

// Bytes hashed per step when copying and hashing in one pass: small enough
// that the freshly copied chunk is still in L2 when it is hashed.
constexpr std::size_t kFusedChunkBytes = 256 * 1024;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

void PutLe64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetLe64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

// Checks what the header needs from each tensor: a valid name, non-negative
// dims and a byte count that matches the shape.
Status ValidateForHeader(const ModelState& state) {
  std::set<std::string> names;
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

// The parsed 8-byte prefix and JSON header.
struct RawHeader {
  uint64_t header_bytes = 0;  // N
  Json json;
};

StatusOr<RawHeader> ParseRawHeader(const std::byte* data, uint64_t size) {
  if (size < 8) {
    return DataLossError("buffer is " + std::to_string(size) +
                         " bytes, shorter than the 8-byte header length prefix");
  }
  RawHeader raw;
  raw.header_bytes = GetLe64(data);
  if (raw.header_bytes > kMaxHeaderBytes) {
    return InvalidArgumentError("header length " + std::to_string(raw.header_bytes) + " bytes exceeds the " +
                                std::to_string(kMaxHeaderBytes) + "-byte limit");
  }
  if (raw.header_bytes > size - 8) {
    return DataLossError("header length " + std::to_string(raw.header_bytes) +
                         " bytes goes beyond the buffer (" + std::to_string(size - 8) +
                         " bytes follow the length prefix; truncated?)");
  }
  const char* begin = reinterpret_cast<const char*>(data + 8);
  try {
    raw.json = Json::parse(begin, begin + raw.header_bytes);
  } catch (const Json::exception& e) {
    return InvalidArgumentError(std::string("header is not valid JSON: ") + e.what());
  }
  if (!raw.json.is_object()) {
    return InvalidArgumentError(std::string("header must be a JSON object, got ") + raw.json.type_name());
  }
  return raw;
}

StatusOr<std::map<std::string, std::string>> ExtractMetadata(const Json& header) {
  std::map<std::string, std::string> out;
  auto it = header.find(kMetadataKey);
  if (it == header.end()) return out;
  if (!it->is_object()) {
    return InvalidArgumentError(std::string("__metadata__ must be an object of strings, got ") +
                                it->type_name());
  }
  for (auto m = it->begin(); m != it->end(); ++m) {
    if (!m.value().is_string()) {
      return InvalidArgumentError("__metadata__ value for key " + Quote(m.key()) + " must be a string, got " +
                                  m.value().type_name() + " " + m.value().dump());
    }
    out[m.key()] = m.value().get<std::string>();
  }
  return out;
}

template <typename T>
Status ParseMetadataInt(const std::map<std::string, std::string>& metadata, const char* key, T* out) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return Status::Ok();
  const std::string& text = it->second;
  errno = 0;
  char* end = nullptr;
  T value{};
  bool ok = !text.empty();
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

// One tensor entry of a parsed header.
struct Entry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  std::size_t json_index = 0;  // order in the header, to keep sorting stable
};

StatusOr<Entry> ParseEntry(const std::string& name, const Json& value, uint64_t data_bytes) {
  const std::string who = "tensor " + Quote(name);
  if (name.empty()) return InvalidArgumentError("a tensor has an empty name");
  if (!value.is_object()) {
    return InvalidArgumentError(who + ": entry must be an object, got " + value.type_name());
  }
  Entry e;
  e.name = name;

  auto dtype_it = value.find("dtype");
  if (dtype_it == value.end()) return InvalidArgumentError(who + ": missing field 'dtype'");
  if (!dtype_it->is_string()) {
    return InvalidArgumentError(who + ": field 'dtype' must be a string, got " + dtype_it->dump());
  }
  const std::string dtype_name = dtype_it->get<std::string>();
  auto dtype = DTypeFromString(dtype_name);
  if (!dtype) return InvalidArgumentError(who + ": unknown dtype " + Quote(dtype_name));
  e.dtype = *dtype;

  auto shape_it = value.find("shape");
  if (shape_it == value.end()) return InvalidArgumentError(who + ": missing field 'shape'");
  if (!shape_it->is_array()) {
    return InvalidArgumentError(who + ": field 'shape' must be an array of integers, got " +
                                shape_it->dump());
  }
  uint64_t elements = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < shape_it->size(); ++i) {
    const Json& d = (*shape_it)[i];
    if (d.is_number_unsigned()) {
      const uint64_t v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidArgumentError(who + ": dimension " + std::to_string(i) + " (" + d.dump() +
                                    ") is too large");
      }
      e.shape.push_back(static_cast<int64_t>(v));
      overflow = overflow || __builtin_mul_overflow(elements, v, &elements);
    } else if (d.is_number_integer()) {
      return InvalidArgumentError(who + ": negative dimension " + d.dump() + " at index " +
                                  std::to_string(i) + " of shape " + shape_it->dump());
    } else {
      return InvalidArgumentError(who + ": field 'shape' must be an array of integers, element " +
                                  std::to_string(i) + " is " + d.dump());
    }
  }
  uint64_t expected_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(elements, DTypeSize(e.dtype), &expected_bytes);
  if (overflow)
    return InvalidArgumentError(who + ": shape " + shape_it->dump() + " overflows 64-bit byte counts");

  auto off_it = value.find("data_offsets");
  if (off_it == value.end()) return InvalidArgumentError(who + ": missing field 'data_offsets'");
  if (!off_it->is_array() || off_it->size() != 2 || !(*off_it)[0].is_number_unsigned() ||
      !(*off_it)[1].is_number_unsigned()) {
    return InvalidArgumentError(
        who + ": field 'data_offsets' must be [begin, end] with non-negative integers, got " +
        off_it->dump());
  }
  e.begin = (*off_it)[0].get<uint64_t>();
  e.end = (*off_it)[1].get<uint64_t>();
  const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
  if (e.end < e.begin) {
    return InvalidArgumentError(who + ": data_offsets " + range + " end before they begin");
  }
  if (e.end > data_bytes) {
    return DataLossError(who + ": data_offsets " + range + " are out of range: the data section has " +
                         std::to_string(data_bytes) + " bytes");
  }
  if (e.end - e.begin != expected_bytes) {
    return InvalidArgumentError(who + ": shape " + ShapeString(e.shape) + " of " + dtype_name + " needs " +
                                std::to_string(expected_bytes) + " bytes but data_offsets " + range +
                                " span " + std::to_string(e.end - e.begin));
  }
  return e;
}

// Writes all of [data, data+size) to fd, retrying on EINTR and short writes.
Status WriteAll(int fd, const void* data, std::size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const std::size_t chunk = std::min<std::size_t>(size, std::size_t{1} << 30);
    const ssize_t n = ::write(fd, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("writing " + Quote(path), errno);
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

std::string DirName(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

StatusOr<Header> BuildHeader(const ModelState& state, const uint64_t* data_checksum,
                             const std::map<std::string, std::string>& extra_metadata) {
  VIPER_RETURN_IF_ERROR(ValidateForHeader(state));
  Json header = Json::object();
  Json metadata = Json::object();
  metadata[kVersionKey] = std::to_string(state.metadata.version);
  metadata[kIterationKey] = std::to_string(state.metadata.iteration);
  metadata[kProducerKey] = std::to_string(state.metadata.producer_id);
  if (data_checksum) metadata[kChecksumKey] = ChecksumToHex(*data_checksum);
  for (const auto& [key, value] : extra_metadata) {
    if (metadata.contains(key)) {
      return InvalidArgumentError("extra metadata key " + Quote(key) + " clashes with a key Viper writes");
    }
    metadata[key] = value;
  }
  header[kMetadataKey] = std::move(metadata);

  uint64_t offset = 0;
  for (const Tensor& t : state.tensors()) {
    Json entry = Json::object();
    entry["dtype"] = ToString(t.dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + t.size_bytes};
    header[t.name] = std::move(entry);
    offset += t.size_bytes;
  }

  std::string json;
  try {
    json = header.dump();  // compact, strict UTF-8 (throws on invalid names)
  } catch (const Json::exception& e) {
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

// Parses the header `raw` of an image whose `data_bytes`-byte data section
// starts at `data` in `memory`; verifies viper.checksum (host data only) as
// `options` say. Tensors are views into `data` sharing `owner`.
StatusOr<ModelState> ParseWithData(const RawHeader& raw, std::shared_ptr<const void> owner,
                                   const std::byte* data, uint64_t data_bytes, MemoryKind memory,
                                   const ParseOptions& options) {
  VIPER_ASSIGN_OR_RETURN(auto metadata, ExtractMetadata(raw.json));

  std::vector<Entry> entries;
  entries.reserve(raw.json.size());
  for (auto it = raw.json.begin(); it != raw.json.end(); ++it) {
    if (it.key() == kMetadataKey) continue;
    VIPER_ASSIGN_OR_RETURN(Entry e, ParseEntry(it.key(), it.value(), data_bytes));
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
  VIPER_RETURN_IF_ERROR(ParseMetadataInt(metadata, kVersionKey, &state.metadata.version));
  VIPER_RETURN_IF_ERROR(ParseMetadataInt(metadata, kIterationKey, &state.metadata.iteration));
  VIPER_RETURN_IF_ERROR(ParseMetadataInt(metadata, kProducerKey, &state.metadata.producer_id));

  auto checksum_it = metadata.find(kChecksumKey);
  if (checksum_it == metadata.end()) {
    if (options.require_checksum) {
      return DataLossError("__metadata__ has no 'viper.checksum' but the parser requires one");
    }
  } else {
    auto expected = ChecksumFromHex(checksum_it->second);
    if (!expected) {
      return InvalidArgumentError("__metadata__ 'viper.checksum' must be 16 hex digits, got " +
                                  Quote(checksum_it->second));
    }
    if (options.verify_checksum && memory == MemoryKind::kHost) {
      const uint64_t actual = Xxh3_64(data, data_bytes);
      if (actual != *expected) {
        return DataLossError("checksum mismatch: header says " + ChecksumToHex(*expected) + " but the " +
                             std::to_string(data_bytes) + "-byte data section hashes to " +
                             ChecksumToHex(actual));
      }
    }
  }

  std::shared_ptr<void> mutable_owner = std::const_pointer_cast<void>(owner);
  // Names are unique (JSON object keys) and validated above, so tensors are
  // appended directly rather than through Add's linear duplicate search.
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
  return state;
}

}  // namespace

StatusOr<ModelState> Parse(std::shared_ptr<const void> owner, const std::byte* data, uint64_t size,
                           const ParseOptions& options) {
  VIPER_ASSIGN_OR_RETURN(RawHeader raw, ParseRawHeader(data, size));
  const uint64_t data_start = 8 + raw.header_bytes;
  return ParseWithData(raw, std::move(owner), data + data_start, size - data_start, MemoryKind::kHost,
                       options);
}

StatusOr<ModelState> ParseExternalData(std::shared_ptr<const void> owner, const std::byte* header,
                                       uint64_t header_size, const std::byte* data, uint64_t data_bytes,
                                       MemoryKind memory) {
  VIPER_ASSIGN_OR_RETURN(RawHeader raw, ParseRawHeader(header, header_size));
  ParseOptions options;
  options.verify_checksum = memory == MemoryKind::kHost;
  return ParseWithData(raw, std::move(owner), data, data_bytes, memory, options);
}

StatusOr<ModelState> Parse(std::vector<std::byte> bytes, const ParseOptions& options) {
  auto holder = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  const std::byte* data = holder->data();
  const uint64_t size = holder->size();
  return Parse(std::shared_ptr<const void>(holder, data), data, size, options);
}

StatusOr<std::map<std::string, std::string>> ParseMetadata(const std::byte* data, uint64_t size) {
  VIPER_ASSIGN_OR_RETURN(RawHeader raw, ParseRawHeader(data, size));
  return ExtractMetadata(raw.json);
}

StatusOr<FileBuffer> ReadFileBuffer(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFoundError("cannot open " + Quote(path) + ": " + std::strerror(err));
    return ErrnoError("cannot open " + Quote(path), err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("cannot stat " + Quote(path), err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(Quote(path) + " is not a regular file");
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
      return ErrnoError("reading " + Quote(path), err);
    }
    if (n == 0) {
      ::close(fd);
      return DataLossError(Quote(path) + " shrank while being read: got " + std::to_string(done) + " of " +
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

StatusOr<ModelState> ReadFile(const std::string& path, const ParseOptions& options) {
  VIPER_ASSIGN_OR_RETURN(FileBuffer file, ReadFileBuffer(path));
  const std::byte* data = file.bytes.get();
  auto state = Parse(std::shared_ptr<const void>(file.bytes, data), data, file.size, options);
  if (!state.ok()) return state.status().WithContext(path);
  return state;
}

Status WriteFileAtomic(const ModelState& state, const std::string& path) {
  VIPER_RETURN_IF_ERROR(RequireHost(state, "WriteFileAtomic"));
  VIPER_ASSIGN_OR_RETURN(uint64_t checksum, DataChecksum(state));
  VIPER_ASSIGN_OR_RETURN(Header header, BuildHeader(state, &checksum));

  const std::string dir = DirName(path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    struct stat st {};
    if (err == ENOENT || (err == ENOTDIR)) {
      if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return NotFoundError("cannot write " + Quote(path) + ": directory " + Quote(dir) + " does not exist");
      }
    }
    return ErrnoError("cannot create " + Quote(tmp), err);
  }
  auto fail = [&](Status status) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return status;
  };
  Status st = WriteAll(fd, header.bytes.data(), header.bytes.size(), tmp);
  for (const Tensor& t : state.tensors()) {
    if (!st.ok()) break;
    if (t.size_bytes) st = WriteAll(fd, t.data, t.size_bytes, tmp);
  }
  if (!st.ok()) return fail(st);
  if (::fsync(fd) != 0) return fail(ErrnoError("fsync of " + Quote(tmp), errno));
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError("closing " + Quote(tmp), err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError("renaming " + Quote(tmp) + " to " + Quote(path), err);
  }
  // Make the rename itself durable.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoError("opening directory " + Quote(dir) + " to fsync it", errno);
  const int rc = ::fsync(dir_fd);
  const int err = errno;
  ::close(dir_fd);
  if (rc != 0) return ErrnoError("fsync of directory " + Quote(dir), err);
  return Status::Ok();
}

}  // namespace safetensors
}  // namespace viper
