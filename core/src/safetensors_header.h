// Internal: the safetensors header read in one linear SAX pass
// (safetensors_header.cc): no DOM, nesting bounded, duplicate keys rejected
// at every level, entry counts capped. safetensors.cc checks the entries'
// values, the checksums and the data; this file only reads the JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "viper/core/safetensors.h"
#include "viper/core/status.h"

namespace viper {
namespace safetensors {
namespace internal {

inline constexpr const char* kMetadataKey = "__metadata__";
// Longest excerpt of a name or value quoted in a message.
inline constexpr std::size_t kMaxQuotedChars = 120;

// `s` quoted, cut to a bounded excerpt (a header may hold 100 MB strings).
std::string Quote(const std::string& s);
// The 8-byte little-endian integer at `p`.
uint64_t GetLe64(const std::byte* p);

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

// Reads the 8-byte length N and the N-byte JSON header of `data`.
StatusOr<RawHeader> ParseRawHeader(const std::byte* data, uint64_t size, const ParseOptions& options);

}  // namespace internal
}  // namespace safetensors
}  // namespace viper
