#include "hmac_sha256.h"

#include <cstring>

namespace viper {
namespace transports {
namespace internal {
namespace {

constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::Block(const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) | (uint32_t(p[4 * i + 2]) << 8) |
           uint32_t(p[4 * i + 3]);
  }
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 = h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
    const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e, h_[5] += f, h_[6] += g, h_[7] += h;
}

void Sha256::Update(const void* data, std::size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += size;
  if (buffered_ > 0) {
    const std::size_t n = std::min<std::size_t>(64 - buffered_, size);
    std::memcpy(buffer_ + buffered_, p, n);
    buffered_ += n, p += n, size -= n;
    if (buffered_ < 64) return;
    Block(buffer_);
    buffered_ = 0;
  }
  for (; size >= 64; p += 64, size -= 64) Block(p);
  std::memcpy(buffer_, p, size);
  buffered_ = size;
}

std::array<uint8_t, 32> Sha256::Digest() {
  const uint64_t bits = total_ * 8;
  const uint8_t one = 0x80, zero = 0;
  Update(&one, 1);
  while (buffered_ != 56) Update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  Update(len, 8);
  std::array<uint8_t, 32> out;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(h_[i] >> (24 - 8 * j));
  }
  return out;
}

HmacSha256::HmacSha256(const std::string& key) {
  uint8_t k[64] = {0};
  if (key.size() > 64) {
    Sha256 kh;
    kh.Update(key.data(), key.size());
    const auto d = kh.Digest();
    std::memcpy(k, d.data(), d.size());
  } else {
    std::memcpy(k, key.data(), key.size());
  }
  uint8_t inner_key[64];
  for (int i = 0; i < 64; ++i) {
    inner_key[i] = k[i] ^ 0x36;
    outer_key_[i] = k[i] ^ 0x5c;
  }
  inner_.Update(inner_key, 64);
}

void HmacSha256::UpdateU64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  Update(b, 8);
}

void HmacSha256::UpdateString(const std::string& s) {
  UpdateU64(s.size());
  Update(s.data(), s.size());
}

std::array<uint8_t, 32> HmacSha256::Digest() {
  const auto inner = inner_.Digest();
  Sha256 outer;
  outer.Update(outer_key_, 64);
  outer.Update(inner.data(), inner.size());
  return outer.Digest();
}

std::string HmacSha256::HexDigest() {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : Digest()) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::string VersionDigest(const std::string& key, const ModelState& state, const std::string& session) {
  HmacSha256 h(key);
  h.UpdateString("viper-run.hmac.v1");
  h.UpdateU64(state.metadata.version);
  h.UpdateU64(static_cast<uint64_t>(state.metadata.iteration));
  h.UpdateU64(static_cast<uint64_t>(static_cast<int64_t>(state.metadata.producer_id)));
  h.UpdateString(session);
  h.UpdateU64(state.tensors().size());
  for (const Tensor& t : state.tensors()) {
    h.UpdateString(t.name);
    h.UpdateString(ToString(t.dtype));
    h.UpdateU64(t.shape.size());
    for (int64_t d : t.shape) h.UpdateU64(static_cast<uint64_t>(d));
    h.UpdateU64(t.size_bytes);
  }
  for (const Tensor& t : state.tensors()) h.Update(t.data, t.size_bytes);
  return h.HexDigest();
}

bool DigestsEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
