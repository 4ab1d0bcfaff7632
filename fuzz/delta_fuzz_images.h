// The fixed images of delta_fuzz.cc and fuzz/make_delta_seeds.cc: a small
// model in four dtypes (odd sizes), version 1 ("base"), version 2 with one
// tensor sparsely and one wholly changed ("target"), and another version 1
// with other bytes ("other_base"). Deterministic: the seeds in
// fuzz/corpus/delta/ are deltas between these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "viper/core/model_state.h"
#include "viper/core/safetensors.h"

namespace delta_fuzz {

struct Images {
  std::vector<std::byte> base, target, other_base;
};

inline std::vector<std::byte> Image(uint64_t version, uint32_t seed, int changed) {
  viper::ModelState m;
  struct Spec {
    const char* name;
    viper::DType dtype;
    int64_t n;
  };
  const Spec specs[] = {{"embed", viper::DType::kBF16, 301},
                        {"layer.weight", viper::DType::kF32, 101},
                        {"mask", viper::DType::kU8, 37},
                        {"steps", viper::DType::kI64, 5}};
  uint32_t x = seed;
  int t = 0;
  for (const Spec& s : specs) {
    viper::Tensor tensor = viper::Tensor::Allocate(s.name, s.dtype, {s.n});
    for (std::size_t i = 0; i < tensor.size_bytes; ++i) {
      x = x * 1664525u + 1013904223u;
      tensor.data[i] = static_cast<std::byte>(x >> 24);
      // Version 2: every 17th byte of the embedding and all of "mask" change.
      if (changed && ((t == 0 && i % 17 == 0) || t == 2)) tensor.data[i] ^= std::byte{0x5a};
    }
    if (!m.Add(std::move(tensor)).ok()) std::abort();
    ++t;
  }
  m.metadata.version = version;
  m.metadata.iteration = static_cast<int64_t>(version) * 100;
  auto image = viper::safetensors::Serialize(m);
  if (!image.ok()) std::abort();
  return *image;
}

inline Images MakeImages() { return {Image(1, 7, 0), Image(2, 7, 1), Image(1, 8, 0)}; }

}  // namespace delta_fuzz
