// libFuzzer harness: the delta decoder (transports/src/delta.cc) on hostile
// deltas, the way a consumer applies one to its back buffer. The input is a
// delta; it is applied to copies of two fixed base images (the one the seeds
// were made against, and another), once as given and once with its two
// checksums recomputed (a hostile writer can do that, so the record checks
// themselves are reached); ReadContents (what `viper inspect` lists) reads
// it too. Apply must either fail with a bounded message
// or rebuild an image that parses with its checksums verified and carries the
// version the delta names (a forged delta may describe another valid image;
// it may never yield one that fails its own checks).
// A crash, leak, hang, sanitizer report, an allocation sized by the input
// or an accepted image that fails its checks is a finding; scripts/fuzz.sh
// runs it, fuzz/README.md says how; seeds in fuzz/corpus/delta/ (written by
// fuzz/make_delta_seeds.cc, see README).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "delta_fuzz_images.h"
#include "viper/core/checksum.h"
#include "viper/core/safetensors.h"
#include "viper/transports/delta.h"

namespace {

namespace delta = viper::transports::delta;
using Bytes = std::vector<std::byte>;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "delta_fuzz: %s\n", what.c_str());
  std::abort();
}

constexpr std::size_t kMaxMessageBytes = 64 * 1024;

void Try(const Bytes& base, const Bytes& d) {
  // The back buffer: the base with room for a larger header.
  Bytes buffer(base.size() + 4096);
  std::memcpy(buffer.data(), base.data(), base.size());
  auto r = delta::Apply(buffer.data(), base.size(), buffer.size(), d.data(), d.size());
  if (!r.ok()) {
    const std::string m = r.status().ToString();
    if (m.size() > kMaxMessageBytes) Fail("error message of " + std::to_string(m.size()) + " bytes");
    return;
  }
  if (r->image_bytes > buffer.size()) Fail("Apply reports an image larger than the buffer");
  viper::safetensors::ParseOptions po;
  po.require_checksum = true;
  Bytes copy(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(r->image_bytes));
  auto again = viper::safetensors::Parse(copy, po);
  if (!again.ok()) Fail("Apply accepted an image that fails its checks: " + again.status().ToString());
  auto h = delta::ReadHeader(d.data(), d.size());
  if (!h.ok() || again->metadata.version != h->target_version) Fail("Apply rebuilt another version than named");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const delta_fuzz::Images images = delta_fuzz::MakeImages();
  Bytes d(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  Try(images.base, d);
  Try(images.other_base, d);
  auto header = delta::ReadHeader(d.data(), d.size());
  if (!header.ok()) (void)header.status().ToString();
  auto contents = delta::ReadContents(d.data(), d.size());  // what `viper inspect` lists
  if (!contents.ok() && contents.status().ToString().size() > kMaxMessageBytes) Fail("unbounded message");
  if (d.size() >= delta::kFixedHeaderBytes) {
    // Resealed: both checksums made consistent with the bytes.
    const uint64_t body = viper::Xxh3_64(d.data() + delta::kFixedHeaderBytes, d.size() - delta::kFixedHeaderBytes);
    for (int i = 0; i < 8; ++i) d[80 + i] = static_cast<std::byte>(body >> (8 * i));
    const uint64_t head = viper::Xxh3_64(d.data(), 88);
    for (int i = 0; i < 8; ++i) d[88 + i] = static_cast<std::byte>(head >> (8 * i));
    Try(images.base, d);
    Try(images.other_base, d);
  }
  return 0;
}
