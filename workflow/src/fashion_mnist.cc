#include "viper/workflow/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "viper/config.h"

namespace viper {
namespace workflow {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // idx3: unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // idx1: unsigned byte, 1 dimension

constexpr const char* kClassNames[kFashionMnistClasses] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

// Reads a whole file through zlib (gzread passes plain files through as is).
StatusOr<std::vector<uint8_t>> ReadMaybeGzip(const std::string& path) {
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    if (errno != 0) return ErrnoError("cannot open '" + path + "'", errno);
    return IoError("cannot open '" + path + "' (zlib could not allocate its state)");
  }
  std::vector<uint8_t> bytes;
  constexpr unsigned kChunk = 1 << 20;
  for (;;) {
    const std::size_t old = bytes.size();
    bytes.resize(old + kChunk);
    const int n = gzread(file, bytes.data() + old, kChunk);
    if (n < 0) {
      int errnum = 0;
      std::string message = gzerror(file, &errnum);
      gzclose(file);
      return DataLossError("'" + path + "': gzip data is corrupt or truncated (" + message + ")");
    }
    bytes.resize(old + static_cast<std::size_t>(n));
    if (n == 0) break;
  }
  gzclose(file);
  return bytes;
}

int64_t SquareSide(int64_t features) {
  const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(features))));
  VIPER_CHECK(side * side == features);
  return side;
}

// Bilinear rotation as four (source pixel, weight) pairs per output pixel;
// source -1 = outside the image (contributes 0).
struct RotationMap {
  std::vector<int32_t> source;
  std::vector<float> weight;
};

RotationMap MakeRotationMap(int64_t side, double degrees) {
  const double radians = degrees * 3.14159265358979323846 / 180.0;
  const double c = std::cos(radians), s = std::sin(radians), centre = 0.5 * static_cast<double>(side - 1);
  RotationMap map;
  map.source.assign(static_cast<std::size_t>(4 * side * side), -1);
  map.weight.assign(static_cast<std::size_t>(4 * side * side), 0.0f);
  for (int64_t r = 0; r < side; ++r) {
    for (int64_t col = 0; col < side; ++col) {
      // Displayed counter-clockwise with rows growing downwards: the output
      // point (u, v) comes from (u cos - v sin, u sin + v cos).
      const double u = static_cast<double>(col) - centre, v = static_cast<double>(r) - centre;
      const double sc = centre + u * c - v * s, sr = centre + u * s + v * c;
      const double r0 = std::floor(sr), c0 = std::floor(sc);
      const double fr = sr - r0, fc = sc - c0;
      const std::size_t out = static_cast<std::size_t>(4 * (r * side + col));
      const double w[4] = {(1 - fr) * (1 - fc), (1 - fr) * fc, fr * (1 - fc), fr * fc};
      const double rr[4] = {r0, r0, r0 + 1, r0 + 1}, cc[4] = {c0, c0 + 1, c0, c0 + 1};
      for (int k = 0; k < 4; ++k) {
        if (rr[k] < 0 || cc[k] < 0 || rr[k] >= static_cast<double>(side) || cc[k] >= static_cast<double>(side)) {
          continue;
        }
        map.source[out + static_cast<std::size_t>(k)] =
            static_cast<int32_t>(static_cast<int64_t>(rr[k]) * side + static_cast<int64_t>(cc[k]));
        map.weight[out + static_cast<std::size_t>(k)] = static_cast<float>(w[k]);
      }
    }
  }
  return map;
}

// out[p] = sum of the four weighted sources of pixel p.
template <typename In>
float RotatedPixel(const RotationMap& map, const In* in, std::size_t p) {
  float value = 0.0f;
  for (std::size_t k = 4 * p; k < 4 * p + 4; ++k) {
    if (map.source[k] >= 0) value += map.weight[k] * static_cast<float>(in[map.source[k]]);
  }
  return value;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

const char* FashionMnistClassName(int label) {
  return label >= 0 && label < kFashionMnistClasses ? kClassNames[label] : "?";
}

const char* ToString(FashionMnistSplit split) { return split == FashionMnistSplit::kTrain ? "train" : "test"; }

StatusOr<FashionMnistSplit> FashionMnistSplitFromString(const std::string& name) {
  if (name == "train") return FashionMnistSplit::kTrain;
  if (name == "test" || name == "t10k") return FashionMnistSplit::kTest;
  return InvalidArgumentError("unknown Fashion-MNIST split '" + name + "' (expected train or test)");
}

Samples Samples::Subset(const std::vector<int64_t>& indices) const {
  Samples out;
  out.features = features;
  out.pixels.resize(indices.size() * static_cast<std::size_t>(features));
  out.labels.resize(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    VIPER_CHECK(i >= 0 && i < size());
    std::memcpy(out.pixels.data() + k * features, pixels.data() + i * features, static_cast<std::size_t>(features));
    out.labels[k] = labels[static_cast<std::size_t>(i)];
  }
  return out;
}

Samples Samples::FilterClasses(const std::vector<int>& classes) const {
  bool keep[256] = {};
  for (int c : classes) {
    if (c >= 0 && c < 256) keep[c] = true;
  }
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < size(); ++i) {
    if (keep[labels[static_cast<std::size_t>(i)]]) indices.push_back(i);
  }
  return Subset(indices);
}

void Samples::GatherBatch(const int64_t* indices, int64_t count, Eigen::MatrixXf* inputs,
                          std::vector<int32_t>* out_labels) const {
  inputs->resize(features, count);
  out_labels->resize(static_cast<std::size_t>(count));
  using ByteVector = Eigen::Matrix<uint8_t, Eigen::Dynamic, 1>;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = indices[k];
    VIPER_CHECK(i >= 0 && i < size());
    Eigen::Map<const ByteVector> image(pixels.data() + i * features, features);
    inputs->col(k) = image.cast<float>() * (1.0f / 255.0f);
    (*out_labels)[static_cast<std::size_t>(k)] = labels[static_cast<std::size_t>(i)];
  }
}

void Samples::GatherAll(Eigen::MatrixXf* inputs, std::vector<int32_t>* out_labels) const {
  std::vector<int64_t> all(static_cast<std::size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) all[static_cast<std::size_t>(i)] = i;
  GatherBatch(all.data(), size(), inputs, out_labels);
}

Samples Samples::Rotated(double degrees) const {
  const int64_t side = SquareSide(features);
  if (degrees == 0.0) return *this;
  const RotationMap map = MakeRotationMap(side, degrees);
  Samples out = *this;
  for (int64_t i = 0; i < size(); ++i) {
    const uint8_t* in = pixels.data() + i * features;
    uint8_t* o = out.pixels.data() + i * features;
    for (int64_t p = 0; p < features; ++p) {
      const float v = std::round(RotatedPixel(map, in, static_cast<std::size_t>(p)));
      o[p] = static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, v)));
    }
  }
  return out;
}

Samples Samples::WithLabelsSwapped(int a, int b) const {
  Samples out = *this;
  for (uint8_t& label : out.labels) {
    if (label == a) {
      label = static_cast<uint8_t>(b);
    } else if (label == b) {
      label = static_cast<uint8_t>(a);
    }
  }
  return out;
}

bool IsSquareImage(int64_t features) {
  if (features <= 0) return false;
  const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(features))));
  return side * side == features;
}

void RotateImages(Eigen::MatrixXf* images, double degrees) {
  if (degrees == 0.0 || images->cols() == 0) return;
  const int64_t features = images->rows();
  const RotationMap map = MakeRotationMap(SquareSide(features), degrees);
  std::vector<float> in(static_cast<std::size_t>(features));
  for (Eigen::Index j = 0; j < images->cols(); ++j) {
    float* column = images->col(j).data();
    std::copy(column, column + features, in.begin());
    for (int64_t p = 0; p < features; ++p) column[p] = RotatedPixel(map, in.data(), static_cast<std::size_t>(p));
  }
}

StatusOr<Samples> LoadIdxPair(const std::string& images_path, const std::string& labels_path,
                              int64_t max_samples) {
  VIPER_ASSIGN_OR_RETURN(std::vector<uint8_t> images, ReadMaybeGzip(images_path));
  VIPER_ASSIGN_OR_RETURN(std::vector<uint8_t> labels, ReadMaybeGzip(labels_path));

  if (images.size() < 16) {
    return DataLossError("'" + images_path + "': " + std::to_string(images.size()) +
                         " bytes, shorter than the 16-byte idx3 header");
  }
  if (BigEndian32(images.data()) != kImagesMagic) {
    return DataLossError("'" + images_path + "': magic number " + std::to_string(BigEndian32(images.data())) +
                         ", expected 2051 (idx3 unsigned-byte images)");
  }
  const uint64_t image_count = BigEndian32(images.data() + 4);
  const uint32_t rows = BigEndian32(images.data() + 8);
  const uint32_t cols = BigEndian32(images.data() + 12);
  if (rows != kFashionMnistImageSide || cols != kFashionMnistImageSide) {
    return DataLossError("'" + images_path + "': images are " + std::to_string(rows) + "x" +
                         std::to_string(cols) + ", expected 28x28");
  }
  const uint64_t image_bytes = image_count * kFashionMnistFeatures;
  if (images.size() - 16 != image_bytes) {
    return DataLossError("'" + images_path + "': header announces " + std::to_string(image_count) +
                         " images (" + std::to_string(image_bytes) + " bytes of pixels) but the file holds " +
                         std::to_string(images.size() - 16) + " bytes after the header");
  }

  if (labels.size() < 8) {
    return DataLossError("'" + labels_path + "': " + std::to_string(labels.size()) +
                         " bytes, shorter than the 8-byte idx1 header");
  }
  if (BigEndian32(labels.data()) != kLabelsMagic) {
    return DataLossError("'" + labels_path + "': magic number " + std::to_string(BigEndian32(labels.data())) +
                         ", expected 2049 (idx1 unsigned-byte labels)");
  }
  const uint64_t label_count = BigEndian32(labels.data() + 4);
  if (labels.size() - 8 != label_count) {
    return DataLossError("'" + labels_path + "': header announces " + std::to_string(label_count) +
                         " labels but the file holds " + std::to_string(labels.size() - 8) +
                         " bytes after the header");
  }
  if (label_count != image_count) {
    return DataLossError("'" + labels_path + "' holds " + std::to_string(label_count) + " labels but '" +
                         images_path + "' holds " + std::to_string(image_count) + " images");
  }
  for (uint64_t i = 0; i < label_count; ++i) {
    if (labels[8 + i] >= kFashionMnistClasses) {
      return DataLossError("'" + labels_path + "': label " + std::to_string(labels[8 + i]) + " of sample " +
                           std::to_string(i) + " is not a class 0..9");
    }
  }

  uint64_t count = image_count;
  if (max_samples > 0 && static_cast<uint64_t>(max_samples) < count) count = static_cast<uint64_t>(max_samples);
  Samples samples;
  samples.features = kFashionMnistFeatures;
  samples.pixels.assign(images.begin() + 16, images.begin() + 16 + static_cast<std::ptrdiff_t>(count * kFashionMnistFeatures));
  samples.labels.assign(labels.begin() + 8, labels.begin() + 8 + static_cast<std::ptrdiff_t>(count));
  return samples;
}

StatusOr<Samples> LoadFashionMnist(const std::string& dir, FashionMnistSplit split, int64_t max_samples) {
  const std::string prefix = dir + "/" + (split == FashionMnistSplit::kTrain ? "train" : "t10k");
  StatusOr<Samples> samples =
      LoadIdxPair(prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz", max_samples);
  if (!samples.ok() && samples.status().code() == StatusCode::kIoError) {
    return samples.status().WithContext(
        "Fashion-MNIST " + std::string(ToString(split)) + " split in '" + dir +
        "' (install the Debian package dataset-fashion-mnist, or pass the directory holding "
        "train-images-idx3-ubyte.gz and friends)");
  }
  return samples;
}

std::string DefaultFashionMnistDir() { return VIPER_FASHION_MNIST_DIR; }

}  // namespace workflow
}  // namespace viper
