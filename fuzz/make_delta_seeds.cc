// Writes the seeds of fuzz/corpus/delta/ (not built by CMake; see
// fuzz/README.md): the delta from delta_fuzz_images.h's base to its target,
// one cut short, one with a flipped value byte, and a header-only delta to a
// version 2 with version 1's bytes.
#include <cstdio>
#include <string>
#include <vector>

#include "delta_fuzz_images.h"
#include "viper/transports/delta.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  const auto images = delta_fuzz::MakeImages();
  auto write = [&](const std::string& name, const std::vector<std::byte>& b) {
    FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
    if (!f) return false;
    std::fwrite(b.data(), 1, b.size(), f);
    return std::fclose(f) == 0;
  };
  std::vector<std::byte> d(images.target.size());
  auto s = viper::transports::delta::Encode(images.base.data(), images.base.size(), images.target.data(),
                                            images.target.size(), d.data(), d.size());
  if (!s.ok() || s->full) return 1;
  d.resize(s->delta_bytes);
  std::vector<std::byte> cut(d.begin(), d.begin() + d.size() / 2);
  std::vector<std::byte> flipped = d;
  flipped[flipped.size() - 3] ^= std::byte{1};
  // Version 2 with version 1's bytes: a delta of the header alone.
  const auto v2_same = delta_fuzz::Image(2, 7, 0);
  std::vector<std::byte> same(v2_same.size());
  auto s2 = viper::transports::delta::Encode(images.base.data(), images.base.size(), v2_same.data(), v2_same.size(),
                                             same.data(), same.size());
  if (!s2.ok() || s2->full) return 1;
  same.resize(s2->delta_bytes);
  return write("valid-v1-to-v2.delta", d) && write("truncated-half.delta", cut) &&
                 write("flipped-value.delta", flipped) && write("valid-header-only-v1-to-v2.delta", same)
             ? 0
             : 1;
}
