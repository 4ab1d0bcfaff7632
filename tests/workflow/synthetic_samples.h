// Small synthetic data sets for the trainer tests (no dataset needed).
#pragma once

#include <cstdint>
#include <random>

#include "viper/workflow/fashion_mnist.h"

namespace viper {
namespace workflow {
namespace synthetic {

// A synthetic, linearly separable-ish data set: class c has a bump on feature c.
inline Samples Synthetic(int64_t n, int64_t features, int classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Samples s;
  s.features = features;
  s.pixels.resize(static_cast<std::size_t>(n * features));
  s.labels.resize(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng() % static_cast<uint64_t>(classes));
    s.labels[static_cast<std::size_t>(i)] = static_cast<uint8_t>(label);
    for (int64_t f = 0; f < features; ++f) {
      s.pixels[static_cast<std::size_t>(i * features + f)] = static_cast<uint8_t>(rng() % 100);
    }
    s.pixels[static_cast<std::size_t>(i * features + label)] = 255;
  }
  return s;
}

}  // namespace synthetic
}  // namespace workflow
}  // namespace viper
