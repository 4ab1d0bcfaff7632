// Test models for the delta codec's tests (delta_test.cc,
// delta_encoder_test.cc): tensors as plain data, their Viper images, random
// bytes and random changes.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "viper/core/model_state.h"
#include "viper/core/safetensors.h"

namespace viper {
namespace transports {
namespace testing {

using Bytes = std::vector<std::byte>;

// A model as plain data: tensors' names, dtypes, shapes and bytes.
struct Spec {
  std::string name;
  DType dtype;
  int64_t n;
  Bytes bytes;
};
struct Model {
  std::vector<Spec> tensors;
  Bytes Image(uint64_t version) const {
    ModelState m;
    for (const Spec& s : tensors) {
      auto t = Tensor::FromBytes(s.name, s.dtype, {s.n}, s.bytes.data(), s.bytes.size());
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      EXPECT_TRUE(m.Add(std::move(*t)).ok());
    }
    m.metadata.version = version;
    // version x 10, without signed overflow for the 19-digit versions below.
    constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 10;
    m.metadata.iteration = version <= kMax ? static_cast<int64_t>(version) * 10 : static_cast<int64_t>(version / 10);
    auto image = safetensors::Serialize(m);
    EXPECT_TRUE(image.ok()) << image.status().ToString();
    return *image;
  }
};

inline Bytes RandomBytes(std::mt19937_64& rng, std::size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

// Changes a fraction of `s`'s elements (each to a different value).
inline void Change(std::mt19937_64& rng, Spec* s, double fraction) {
  const std::size_t e = DTypeSize(s->dtype);
  std::bernoulli_distribution pick(fraction);
  for (int64_t i = 0; i < s->n; ++i) {
    if (!pick(rng)) continue;
    std::byte* p = s->bytes.data() + i * e;
    p[rng() % e] ^= static_cast<std::byte>(1 + rng() % 255);
  }
}

}  // namespace testing
}  // namespace transports
}  // namespace viper
