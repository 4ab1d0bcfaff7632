// The safetensors header in one linear SAX pass (safetensors_header.h).
#include "safetensors_header.h"

#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>

namespace viper {
namespace safetensors {
namespace internal {

std::string Quote(const std::string& s) {
  if (s.size() <= kMaxQuotedChars) return "'" + s + "'";
  return "'" + s.substr(0, kMaxQuotedChars) + "...' (" + std::to_string(s.size()) + " bytes)";
}

uint64_t GetLe64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

namespace {

using Json = nlohmann::json;

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

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    // nlohmann's message quotes the token it last read ("last read: '...'"):
    // the file's own bytes, which may be anything (a link to a secret), so
    // they are cut off; the byte offset says where.
    std::string what = e.what();
    const auto last_read = what.find("; last read");
    if (last_read != std::string::npos) what.resize(last_read);
    const auto at = what.find("] ");  // drop "[json.exception.parse_error.101] "
    if (at != std::string::npos) what = what.substr(at + 2);
    if (what.size() > 2 * kMaxQuotedChars) what = what.substr(0, 2 * kMaxQuotedChars) + "...";
    return Fail("header is not valid JSON (at byte " + std::to_string(position) + " of the header): " + what);
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

}  // namespace

StatusOr<RawHeader> ParseRawHeader(const std::byte* data, uint64_t size, const ParseOptions& options) {
  if (size < 8) {
    return DataLossError("buffer is " + std::to_string(size) +
                         " bytes, shorter than the 8-byte header length prefix");
  }
  RawHeader raw;
  raw.header_bytes = GetLe64(data);
  if (raw.header_bytes > kMaxHeaderBytes) {
    // A value this large is not a length: the file is not safetensors (text,
    // say). Its bytes are not echoed back as a number.
    if (raw.header_bytes >= (uint64_t{1} << 40)) {
      return InvalidArgumentError("the first 8 bytes are not a safetensors header length (they read as more "
                                  "than 2^40 bytes, beyond the " + std::to_string(kMaxHeaderBytes) +
                                  "-byte limit): not a safetensors file");
    }
    return InvalidArgumentError("header length " + std::to_string(raw.header_bytes) + " bytes exceeds the " +
                                std::to_string(kMaxHeaderBytes) + "-byte limit");
  }
  if (raw.header_bytes > size - 8) {
    return DataLossError("header length " + std::to_string(raw.header_bytes) +
                         " bytes goes beyond the buffer (" + std::to_string(size - 8) +
                         " bytes follow the length prefix; truncated?)");
  }
  const char* begin = reinterpret_cast<const char*>(data + 8);
  // The header is the JSON object, then only spaces (0x20) up to N, as the
  // specification pads it and the reference parser requires. nlohmann's
  // parser would stop at a NUL byte and ignore what follows it: refuse that.
  const char* end = begin + raw.header_bytes;
  const char* last = end;
  while (last > begin && last[-1] == ' ') --last;
  if (last == begin) return InvalidArgumentError("header is not valid JSON: it is empty (or only spaces)");
  if (const void* nul = std::memchr(begin, '\0', static_cast<std::size_t>(last - begin))) {
    const auto at = static_cast<const char*>(nul) - begin;
    return InvalidArgumentError("header is not valid JSON: a NUL byte at byte " + std::to_string(at) +
                                " of the header (only spaces may follow the JSON object)");
  }
  HeaderReader reader(&raw, options);
  bool ok = false;
  try {
    ok = Json::sax_parse(begin, end, &reader);
  } catch (const std::exception& e) {  // bad_alloc, or a library exception not routed to parse_error
    return InvalidArgumentError(std::string("header could not be parsed: ") + e.what());
  }
  if (!ok) {
    Status st = reader.error();
    if (st.ok()) st = InvalidArgumentError("header is not valid JSON");
    return st;
  }
  if (last[-1] != '}') {  // the object parsed, then tabs or newlines
    return InvalidArgumentError("header is not valid JSON: only spaces (0x20) may follow the JSON object up to "
                                "the header's length");
  }
  return raw;
}

}  // namespace internal
}  // namespace safetensors
}  // namespace viper
