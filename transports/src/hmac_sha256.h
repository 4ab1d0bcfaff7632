// Internal: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the
// optional keyed digest of PFS versions (viper-run.hmac). Small and
// dependency-free; not constant-time beyond what HMAC needs (the key is
// only ever mixed in, and digests are compared with DigestsEqual).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "viper/core/model_state.h"

namespace viper {
namespace transports {
namespace internal {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, std::size_t size);
  std::array<uint8_t, 32> Digest();

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buffer_[64];
  std::size_t buffered_ = 0;
  uint64_t total_ = 0;
};

class HmacSha256 {
 public:
  explicit HmacSha256(const std::string& key);
  void Update(const void* data, std::size_t size) { inner_.Update(data, size); }
  void UpdateU64(uint64_t v);
  void UpdateString(const std::string& s);  // u64 size, then the bytes
  std::array<uint8_t, 32> Digest();
  std::string HexDigest();

 private:
  Sha256 inner_;
  uint8_t outer_key_[64];
};

// The keyed digest a PFS version carries as viper-run.hmac: HMAC-SHA256
// under `key` over "viper-run.hmac.v1", the version, iteration and producer,
// the session id, each tensor's name, dtype and shape in order, and every
// tensor's bytes in order (host memory). 64 hex digits.
std::string VersionDigest(const std::string& key, const ModelState& state, const std::string& session);

// Compares two hex digests in time independent of where they differ.
bool DigestsEqual(const std::string& a, const std::string& b);

}  // namespace internal
}  // namespace transports
}  // namespace viper
