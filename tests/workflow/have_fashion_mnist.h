// Whether Fashion-MNIST is installed where the trainer reads it (Debian
// package dataset-fashion-mnist): the tests that train on it skip without.
#pragma once

#include <filesystem>

#include "viper/workflow/fashion_mnist.h"

namespace viper {
namespace workflow {

inline bool HaveFashionMnist() {
  return std::filesystem::exists(DefaultFashionMnistDir() + "/train-images-idx3-ubyte.gz") &&
         std::filesystem::exists(DefaultFashionMnistDir() + "/t10k-images-idx3-ubyte.gz");
}

}  // namespace workflow
}  // namespace viper
