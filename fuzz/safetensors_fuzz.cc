// libFuzzer harness: the safetensors codec's parser (core/src/safetensors.cc)
// on arbitrary bytes, in memory, the way every reader of a version calls it:
//  - Parse with the checksum verified (inspect, model-dir, the PFS consumer),
//    then with it required (the transports' own stream);
//  - ParseMetadata (the consumer's viper.* look-up);
//  - ParseExternalData with the header and data split where the length
//    prefix says (the gpu tier's path);
//  - for every image Parse accepts, a round trip: Serialize must give an
//    image Parse accepts again, with the same tensors and bytes.
// Every error's message is formatted (a message must not be unbounded or
// crash). A crash, leak, hang, sanitizer report or a failed round trip is a
// finding; scripts/fuzz.sh runs it, fuzz/README.md says how.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "viper/core/safetensors.h"

namespace {

using viper::ModelState;
namespace st = viper::safetensors;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "safetensors_fuzz: %s\n", what.c_str());
  std::abort();
}

// Formats a message the way the CLI prints it: it must stay short enough for
// a person to read (no message quotes an unbounded part of the input).
constexpr std::size_t kMaxMessageBytes = 64 * 1024;
void Touch(const viper::Status& status, std::size_t input_size) {
  const std::string message = status.ToString();
  if (message.size() > kMaxMessageBytes) {
    Fail("error message of " + std::to_string(message.size()) + " bytes for a " + std::to_string(input_size) +
         "-byte input: " + message.substr(0, 200));
  }
}

void RoundTrip(const ModelState& parsed) {
  auto bytes = st::Serialize(parsed);
  if (!bytes.ok()) return;  // e.g. a tensor the writer refuses: no claim
  const std::vector<std::byte> image = *bytes;
  st::ParseOptions po;
  po.require_checksum = true;
  auto again = st::Parse(image, po);
  if (!again.ok()) Fail("Parse rejects what Serialize wrote from an accepted file: " + again.status().ToString());
  const auto& a = parsed.tensors();
  const auto& b = again->tensors();
  if (a.size() != b.size()) Fail("round trip changed the tensor count");
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape ||
        a[i].size_bytes != b[i].size_bytes) {
      Fail("round trip changed tensor '" + a[i].name + "'");
    }
    if (a[i].size_bytes > 0 && std::memcmp(a[i].data, b[i].data, a[i].size_bytes) != 0) {
      Fail("round trip changed the bytes of tensor '" + a[i].name + "'");
    }
  }
  if (again->metadata.version != parsed.metadata.version || again->metadata.iteration != parsed.metadata.iteration ||
      again->metadata.producer_id != parsed.metadata.producer_id) {
    Fail("round trip changed the viper.* metadata");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::byte* bytes = reinterpret_cast<const std::byte*>(data);

  st::ParseOptions verify;
  auto parsed = st::Parse(std::vector<std::byte>(bytes, bytes + size), verify);
  if (parsed.ok()) {
    RoundTrip(*parsed);
  } else {
    Touch(parsed.status(), size);
  }

  st::ParseOptions require;
  require.require_checksum = true;
  auto required = st::Parse(std::vector<std::byte>(bytes, bytes + size), require);
  if (!required.ok()) Touch(required.status(), size);
  if (required.ok() && !parsed.ok()) Fail("accepted with the checksum required but rejected without");

  // The consumer's metadata look-up reads the same bytes in place; an exact-size copy lets ASan see overreads.
  std::vector<std::byte> exact(bytes, bytes + size);
  auto meta = st::ParseMetadata(exact.data(), exact.size());
  if (!meta.ok()) Touch(meta.status(), size);

  // Header and data apart, split where the length prefix says.
  if (size >= 8) {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(data[i]) << (8 * i);
    if (n <= size - 8) {
      std::vector<std::byte> header(bytes, bytes + 8 + n);
      std::vector<std::byte> body(bytes + 8 + n, bytes + size);
      auto external = st::ParseExternalData(nullptr, header.data(), header.size(), body.data(), body.size(),
                                            viper::MemoryKind::kHost);
      if (!external.ok()) Touch(external.status(), size);
    }
  }
  return 0;
}
