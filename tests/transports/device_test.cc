// The gpu tier's pieces that need no MPI: the sum64 checksum (host reference
// always; the CUDA kernel against it when a device is present) and moving a
// ModelState between host and device memory.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "../../transports/src/device_checksum.h"
#include "test_util.h"
#include "viper/config.h"
#include "viper/transports/device_memory.h"

#if VIPER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace viper {
namespace transports {
namespace {

using internal::Sum64Host;

std::vector<unsigned char> RandomBytes(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TEST(Sum64, MatchesAnIndependentTranscription) {
  // Values from a Python transcription of the definition in device_checksum.h.
  EXPECT_EQ(Sum64Host(nullptr, 0), 0x0ull);
  const unsigned char eleven[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  EXPECT_EQ(Sum64Host(eleven, sizeof(eleven)), 0x6b88b4c7e6053aa5ull);
  EXPECT_EQ(Sum64Host("viper", 5), 0x574f62e4d7b13017ull);
}

TEST(Sum64, EverySingleBitFlipChangesTheSum) {
  // Mix is a bijection, so a change confined to one word always changes the sum.
  auto data = RandomBytes(203, 1);  // 25 words and a 3-byte tail
  const uint64_t base = Sum64Host(data.data(), data.size());
  for (std::size_t byte = 0; byte < data.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      data[byte] ^= static_cast<unsigned char>(1u << bit);
      ASSERT_NE(Sum64Host(data.data(), data.size()), base) << "byte " << byte << " bit " << bit;
      data[byte] ^= static_cast<unsigned char>(1u << bit);
    }
  }
}

TEST(Sum64, SeesLengthAndOrder) {
  auto data = RandomBytes(64, 2);
  const uint64_t base = Sum64Host(data.data(), data.size());
  // Truncation, and a zero byte appended (same padded words, other length).
  EXPECT_NE(Sum64Host(data.data(), 63), base);
  data.push_back(0);
  EXPECT_NE(Sum64Host(data.data(), 65), base);
  data.pop_back();
  // Two words swapped: the same words at other indices.
  std::vector<unsigned char> swapped = data;
  std::memcpy(swapped.data(), data.data() + 8, 8);
  std::memcpy(swapped.data() + 8, data.data(), 8);
  EXPECT_NE(Sum64Host(swapped.data(), swapped.size()), base);
}

TEST(DeviceMemory, CopyToHostOfAHostStateIsADeepCopy) {
  ModelState m = testing_util::MakeModel(1 << 12, 5);
  m.metadata.version = 7;
  auto copy = CopyToHost(m);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(copy->metadata.version, 7u);
  EXPECT_TRUE(testing_util::HasPattern(*copy, 5));
  EXPECT_NE(copy->tensors()[0].data, m.tensors()[0].data);
}

TEST(DeviceMemory, WithoutDeviceSaysWhy) {
  std::string reason;
  if (CudaDeviceAvailable(&reason)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(reason.rfind("no CUDA device", 0), 0u) << reason;
  auto d = CopyToDevice(testing_util::MakeModel(1 << 12, 5));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
}

#if VIPER_HAVE_CUDA
TEST(DeviceMemory, RoundTripThroughTheDevice) {
  std::string reason;
  if (!CudaDeviceAvailable(&reason)) GTEST_SKIP() << reason;
  ModelState m = testing_util::MakeModel(3 << 20, 9);
  auto d = CopyToDevice(m);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  for (const Tensor& t : d->tensors()) {
    EXPECT_EQ(t.memory, MemoryKind::kDevice);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 256, 0u) << t.name;
  }
  auto h = CopyToHost(*d);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(testing_util::HasPattern(*h, 9));
}

TEST(Sum64, KernelMatchesTheHostReference) {
  std::string reason;
  if (!CudaDeviceAvailable(&reason)) GTEST_SKIP() << reason;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  void* scratch = nullptr;
  void* dev = nullptr;
  const std::size_t max = (9u << 20) + 13;
  ASSERT_EQ(cudaMalloc(&scratch, 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dev, max), cudaSuccess);
  uint32_t seed = 100;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                        std::size_t{4095}, std::size_t{1} << 20, max}) {
    auto data = RandomBytes(n, ++seed);  // fresh data per size: no stale result can pass
    ASSERT_EQ(cudaMemcpy(dev, data.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
    auto sum = internal::Sum64Device(dev, n, scratch, stream);
    ASSERT_TRUE(sum.ok()) << sum.status().ToString();
    EXPECT_EQ(*sum, Sum64Host(data.data(), n)) << n << " bytes";
  }
  auto misaligned = internal::Sum64Device(static_cast<char*>(dev) + 4, 16, scratch, stream);
  EXPECT_EQ(misaligned.status().code(), StatusCode::kInvalidArgument);
  cudaFree(dev);
  cudaFree(scratch);
  cudaStreamDestroy(stream);
}
#endif

}  // namespace
}  // namespace transports
}  // namespace viper
