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

#include "viper/core/checksum.h"

namespace viper {
namespace safetensors {
namespace {

using Json = nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";
constexpr char kViperPrefix[] = "viper.";
// Every key Viper reads or writes; another key with the viper. prefix (in
// any case) is a damaged one.
constexpr const char* kViperKeys[] = {kVersionKey, kIterationKey,      kProducerKey,      kChecksumKey,
                                      kFormatKey,  kDeviceChecksumKey, kHeaderChecksumKey};

// Bytes hashed per step when copying and hashing in one pass: small enough
// that the freshly copied chunk is still in L2 when it is hashed.
constexpr std::size_t kFusedChunkBytes = 256 * 1024;

// Longest excerpt of a name or value quoted in a message.
constexpr std::size_t kMaxQuotedChars = 120;

// `s` quoted, cut to a bounded excerpt (a header may hold 100 MB strings).
std::string Quote(const std::string& s) {
  if (s.size() <= kMaxQuotedChars) return "'" + s + "'";
  return "'" + s.substr(0, kMaxQuotedChars) + "...' (" + std::to_string(s.size()) + " bytes)";
}

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

uint64_t GetLe64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
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

// ------------------------------------------------------------ header parsing

// One tensor entry as the JSON states it, before its values are checked.
struct RawEntry {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint64_t> offsets;
  bool has_dtype = false, has_shape = false, has_offsets = false;
};

// The header's content, read in one SAX pass.
struct RawHeader {
  uint64_t header_bytes = 0;            // N
  std::vector<RawEntry> entries;        // header order
  std::map<std::string, std::string> metadata;
};

// A SAX handler that reads a safetensors header straight into RawHeader: no
// DOM, linear in the input, nesting bounded by kMaxJsonDepth, duplicate keys
// rejected at every level, entry counts capped. The first problem becomes
// `error` and stops the parse (returning false).
class HeaderReader : public nlohmann::json_sax<Json> {
 public:
  HeaderReader(RawHeader* out, const ParseOptions& options) : out_(out), options_(options) {}

  Status error() const { return error_; }

  bool null() override { return Scalar("null", "null"); }
  bool boolean(bool v) override { return Scalar("boolean", v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override {
    if (Top() == Kind::kShape) {
      return Fail(Who() + ": negative dimension " + std::to_string(v) + " at index " +
                  std::to_string(entry_.shape.size()) + " of field 'shape'");
    }
    return Scalar("number", std::to_string(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (Top() == Kind::kShape) {
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Fail(Who() + ": dimension " + std::to_string(entry_.shape.size()) + " (" + std::to_string(v) +
                    ") is too large");
      }
      entry_.shape.push_back(v);
      return true;
    }
    if (Top() == Kind::kOffsets) {
      if (entry_.offsets.size() == 2) return BadOffsets("more than two elements");
      entry_.offsets.push_back(v);
      return true;
    }
    return Scalar("number", std::to_string(v));
  }
  bool number_float(number_float_t, const string_t& text) override { return Scalar("number", text); }
  bool string(string_t& v) override {
    switch (Top()) {
      case Kind::kMetadata:
        out_->metadata.emplace(std::move(frames_.back().key), std::move(v));
        return true;
      case Kind::kTensor:
        if (frames_.back().key == "dtype") {
          entry_.dtype = std::move(v);
          entry_.has_dtype = true;
          return true;
        }
        break;
      default:
        break;
    }
    return Scalar("string", "\"" + v + "\"");
  }
  bool binary(binary_t&) override { return Fail("header holds a binary value (not JSON)"); }

  bool start_object(std::size_t) override {
    if (!Deeper()) return false;
    switch (Top()) {
      case Kind::kNone:
        return Push(Kind::kRoot);
      case Kind::kRoot:
        if (frames_.back().key == kMetadataKey) {
          return Push(Kind::kMetadata);
        }
        entry_ = RawEntry();
        entry_.name = frames_.back().key;
        if (entry_.name.empty()) return Fail("a tensor has an empty name");
        return Push(Kind::kTensor);
      case Kind::kTensor:
        if (!IsKnownField(frames_.back().key)) return Push(Kind::kSkip);
        return Unexpected("object");
      case Kind::kSkip:
        return Push(Kind::kSkip);
      default:
        return Unexpected("object");
    }
  }

  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (f.kind == Kind::kRoot) {
      if (!f.keys.insert(k).second) return Fail("duplicate key " + Quote(k) + " in the header");
      if (k != kMetadataKey && ++tensors_ > options_.max_tensors) {
        return Fail("header has more than " + std::to_string(options_.max_tensors) +
                    " tensors (the limit; raise ParseOptions::max_tensors to read it)");
      }
    } else if (f.kind == Kind::kMetadata) {
      if (out_->metadata.count(k)) return Fail("duplicate key " + Quote(k) + " in __metadata__");
      if (out_->metadata.size() >= options_.max_metadata_entries) {
        return Fail("__metadata__ has more than " + std::to_string(options_.max_metadata_entries) +
                    " entries (the limit; raise ParseOptions::max_metadata_entries to read it)");
      }
    } else {
      if (!f.keys.insert(k).second) {
        return Fail("duplicate key " + Quote(k) + (f.kind == Kind::kTensor ? " in " + Who() : " in the header"));
      }
    }
    f.key = std::move(k);
    return true;
  }

  bool end_object() override {
    const Kind kind = Top();
    frames_.pop_back();
    --depth_;
    if (kind == Kind::kTensor) out_->entries.push_back(std::move(entry_));
    return true;
  }

  bool start_array(std::size_t) override {
    if (!Deeper()) return false;
    switch (Top()) {
      case Kind::kTensor: {
        const std::string& field = frames_.back().key;
        if (field == "shape") {
          entry_.has_shape = true;
          return Push(Kind::kShape);
        }
        if (field == "data_offsets") {
          entry_.has_offsets = true;
          return Push(Kind::kOffsets);
        }
        if (!IsKnownField(field)) return Push(Kind::kSkip);
        return Unexpected("array");
      }
      case Kind::kSkip:
        return Push(Kind::kSkip);
      default:
        return Unexpected("array");
    }
  }

  bool end_array() override {
    const Kind kind = Top();
    frames_.pop_back();
    --depth_;
    if (kind == Kind::kOffsets && entry_.offsets.size() != 2) {
      return BadOffsets(std::to_string(entry_.offsets.size()) + " element(s)");
    }
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    std::string what = e.what();
    // nlohmann quotes the token it last read, which can be megabytes long.
    if (what.size() > 2 * kMaxQuotedChars) what = what.substr(0, 2 * kMaxQuotedChars) + "...";
    return Fail("header is not valid JSON: " + what);
  }

 private:
  // Where the value being read sits.
  enum class Kind { kNone, kRoot, kMetadata, kTensor, kShape, kOffsets, kSkip };
  struct Frame {
    Kind kind;
    std::string key;                       // the key whose value is being read
    std::unordered_set<std::string> keys;  // keys seen (not used for __metadata__)
  };

  Kind Top() const { return frames_.empty() ? Kind::kNone : frames_.back().kind; }
  std::string Who() const { return "tensor " + Quote(entry_.name); }
  static bool IsKnownField(const std::string& f) { return f == "dtype" || f == "shape" || f == "data_offsets"; }

  bool Fail(std::string message) {
    if (error_.ok()) error_ = InvalidArgumentError(std::move(message));
    return false;
  }
  bool Deeper() {
    if (++depth_ > kMaxJsonDepth) {
      return Fail("header JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                  " levels of arrays/objects (a safetensors header needs 3)");
    }
    return true;
  }
  bool Push(Kind kind) {
    frames_.push_back(Frame{kind, {}, {}});
    return true;
  }
  bool BadOffsets(const std::string& got) {
    return Fail(Who() + ": field 'data_offsets' must be [begin, end] with non-negative integers, got " + got);
  }

  // A value of `type` (written `text`) where the frame expects something else.
  bool Scalar(const char* type, const std::string& text) {
    const std::string excerpt = text.size() > kMaxQuotedChars ? text.substr(0, kMaxQuotedChars) + "..." : text;
    switch (Top()) {
      case Kind::kTensor: {
        const std::string& field = frames_.back().key;
        if (!IsKnownField(field)) return true;  // unknown fields are ignored
        return Expected(field, excerpt);
      }
      case Kind::kShape:
        return Fail(Who() + ": field 'shape' must be an array of integers, element " +
                    std::to_string(entry_.shape.size()) + " is " + excerpt);
      case Kind::kOffsets:
        return BadOffsets("element " + excerpt);
      case Kind::kSkip:
        return true;
      default:
        return Unexpected(std::string(type) + " " + excerpt);
    }
  }
  // A field of a tensor entry with the wrong type.
  bool Expected(const std::string& field, const std::string& got) {
    if (field == "dtype") return Fail(Who() + ": field 'dtype' must be a string, got " + got);
    if (field == "shape") return Fail(Who() + ": field 'shape' must be an array of integers, got " + got);
    return BadOffsets(got);
  }
  // A value (`got`: its type, maybe an excerpt) where none of that kind fits.
  bool Unexpected(const std::string& got) {
    switch (Top()) {
      case Kind::kNone:
        return Fail("header must be a JSON object, got " + got);
      case Kind::kRoot:
        if (frames_.back().key == kMetadataKey) {
          return Fail("__metadata__ must be an object of strings, got " + got);
        }
        return Fail("tensor " + Quote(frames_.back().key) + ": entry must be an object, got " + got);
      case Kind::kMetadata:
        return Fail("__metadata__ value for key " + Quote(frames_.back().key) + " must be a string, got " + got);
      case Kind::kTensor:
        return Expected(frames_.back().key, got);
      case Kind::kShape:
        return Fail(Who() + ": field 'shape' must be an array of integers, element " +
                    std::to_string(entry_.shape.size()) + " is an " + got);
      default:
        return BadOffsets("an element that is an " + got);
    }
  }

  RawHeader* out_;
  const ParseOptions& options_;
  std::vector<Frame> frames_;
  int depth_ = 0;
  uint64_t tensors_ = 0;
  RawEntry entry_;  // the tensor entry being read
  Status error_;
};

StatusOr<RawHeader> ParseRawHeader(const std::byte* data, uint64_t size, const ParseOptions& options) {
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
  HeaderReader reader(&raw, options);
  bool ok = false;
  try {
    ok = Json::sax_parse(begin, begin + raw.header_bytes, &reader);
  } catch (const std::exception& e) {  // bad_alloc, or a library exception not routed to parse_error
    return InvalidArgumentError(std::string("header could not be parsed: ") + e.what());
  }
  if (!ok) {
    Status st = reader.error();
    if (st.ok()) st = InvalidArgumentError("header is not valid JSON");
    return st;
  }
  return raw;
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


StatusOr<ModelState> ReadFile(const std::string& path, const ParseOptions& options, ParseInfo* info) {
  VIPER_ASSIGN_OR_RETURN(FileBuffer file, ReadFileBuffer(path));
  const std::byte* data = file.bytes.get();
  auto state = Parse(std::shared_ptr<const void>(file.bytes, data), data, file.size, options, info);
  if (!state.ok()) return state.status().WithContext(path);
  return state;
}

Status WriteFileAtomic(const ModelState& state, const std::string& path) {
  VIPER_RETURN_IF_ERROR(RequireHost(state, "WriteFileAtomic"));
  VIPER_ASSIGN_OR_RETURN(uint64_t checksum, DataChecksum(state));
  VIPER_ASSIGN_OR_RETURN(Header header, BuildHeader(state, &checksum));

  const std::string dir = DirName(path);
  auto file = AtomicFile::Create(path + ".tmp." + std::to_string(::getpid()));
  if (!file.ok()) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return NotFoundError("cannot write " + Quote(path) + ": directory " + Quote(dir) + " does not exist");
    }
    return file.status();
  }
  const std::string& tmp = (*file)->temp_path();
  VIPER_RETURN_IF_ERROR(WriteAll((*file)->fd(), header.bytes.data(), header.bytes.size(), tmp));
  for (const Tensor& t : state.tensors()) {
    if (t.size_bytes) VIPER_RETURN_IF_ERROR(WriteAll((*file)->fd(), t.data, t.size_bytes, tmp));
  }
  return (*file)->CommitTo(path);  // fsync, rename, directory fsync; the temporary goes on failure
}

}  // namespace safetensors
}  // namespace viper
