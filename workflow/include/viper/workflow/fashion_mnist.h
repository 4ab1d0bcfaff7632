// Fashion-MNIST: 28x28 grey-scale images of clothing in 10 classes (60,000
// training and 10,000 test images), read from the gzip-compressed idx files
// of Debian's package dataset-fashion-mnist (MIT licence). Pixels stay as
// bytes in memory (47 MB for the training set); batches are converted to
// float32 in [0, 1] when they are gathered.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <string>
#include <vector>

#include "viper/core/status.h"

namespace viper {
namespace workflow {

constexpr int kFashionMnistClasses = 10;
constexpr int64_t kFashionMnistImageSide = 28;
constexpr int64_t kFashionMnistFeatures = kFashionMnistImageSide * kFashionMnistImageSide;  // 784
constexpr int64_t kFashionMnistTrainImages = 60000;
constexpr int64_t kFashionMnistTestImages = 10000;

// "T-shirt/top", "Trouser", ... for labels 0..9; "?" otherwise.
const char* FashionMnistClassName(int label);

enum class FashionMnistSplit { kTrain, kTest };
const char* ToString(FashionMnistSplit split);
StatusOr<FashionMnistSplit> FashionMnistSplitFromString(const std::string& name);

// A set of labelled images. Image i occupies pixels[i*features, (i+1)*features).
struct Samples {
  int64_t features = kFashionMnistFeatures;  // values per image
  std::vector<uint8_t> pixels;               // 0..255, row-major per image
  std::vector<uint8_t> labels;               // class per image, 0..9

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  bool empty() const { return labels.empty(); }

  // The samples at `indices`, in that order (indices must be in range).
  Samples Subset(const std::vector<int64_t>& indices) const;
  // The samples whose label is in `classes`, in their original order.
  Samples FilterClasses(const std::vector<int>& classes) const;
  // Copies images indices[0..count) into the columns of `inputs` (features x
  // count, float32, pixel/255) and their labels into `labels`; resizes both.
  void GatherBatch(const int64_t* indices, int64_t count, Eigen::MatrixXf* inputs,
                   std::vector<int32_t>* labels) const;
  // All samples in order (same layout as GatherBatch).
  void GatherAll(Eigen::MatrixXf* inputs, std::vector<int32_t>* labels) const;
  // Every image rotated as RotateImages does, pixels rounded back to bytes
  // (square images only: features = side * side).
  Samples Rotated(double degrees) const;
  // The same images with labels a and b exchanged.
  Samples WithLabelsSwapped(int a, int b) const;
};

// True when `features` values make a square image (side * side).
bool IsSquareImage(int64_t features);

// Rotates every column of `images` (a side x side image, row-major, so
// side * side rows) counter-clockwise as displayed (row 0 at the top) by
// `degrees` about the image centre: bilinear interpolation, 0 where the
// source falls outside. 0 degrees is the identity; 90 degrees maps
// out[r][c] = in[c][side - 1 - r] (numpy's rot90). Deterministic.
void RotateImages(Eigen::MatrixXf* images, double degrees);

// Reads `<dir>/<prefix>-images-idx3-ubyte.gz` and `<prefix>-labels-idx1-ubyte.gz`
// (prefix "train" or "t10k"). Validates the magic numbers (2051 for images,
// 2049 for labels), the 28x28 image size, that both files hold the same
// count, that the data is not truncated and that labels are < 10. Errors name
// the file and what was expected. `max_samples` > 0 keeps only the first ones.
StatusOr<Samples> LoadFashionMnist(const std::string& dir, FashionMnistSplit split, int64_t max_samples = 0);

// Same, from explicit file paths (either gzip-compressed or plain idx).
StatusOr<Samples> LoadIdxPair(const std::string& images_path, const std::string& labels_path,
                              int64_t max_samples = 0);

// The directory the build was configured with (VIPER_FASHION_MNIST_DIR).
std::string DefaultFashionMnistDir();

}  // namespace workflow
}  // namespace viper
