// Tests of DType names and sizes, Tensor helpers and ModelState::Add.
#include "viper/core/model_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace viper {
namespace {

using ::testing::HasSubstr;

struct DTypeCase {
  DType dtype;
  const char* name;
  std::size_t size;
};

// The safetensors spelling and element size of every dtype.
constexpr DTypeCase kDTypeCases[] = {
    {DType::kBool, "BOOL", 1},      {DType::kU8, "U8", 1},          {DType::kI8, "I8", 1},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1}, {DType::kI16, "I16", 2},
    {DType::kU16, "U16", 2},        {DType::kF16, "F16", 2},        {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4},        {DType::kU32, "U32", 4},        {DType::kF32, "F32", 4},
    {DType::kI64, "I64", 8},        {DType::kU64, "U64", 8},        {DType::kF64, "F64", 8},
};

TEST(DTypeTest, NamesAndSizesRoundTrip) {
  for (const auto& c : kDTypeCases) {
    EXPECT_STREQ(ToString(c.dtype), c.name);
    EXPECT_EQ(DTypeSize(c.dtype), c.size) << c.name;
    auto back = DTypeFromString(c.name);
    ASSERT_TRUE(back.has_value()) << c.name;
    EXPECT_EQ(*back, c.dtype) << c.name;
  }
}

TEST(DTypeTest, UnknownNamesAreRejected) {
  EXPECT_FALSE(DTypeFromString("F128").has_value());
  EXPECT_FALSE(DTypeFromString("f32").has_value());  // safetensors names are upper case
  EXPECT_FALSE(DTypeFromString("").has_value());
  EXPECT_FALSE(DTypeFromString("float32").has_value());
}

TEST(MemoryKindTest, Names) {
  EXPECT_STREQ(ToString(MemoryKind::kHost), "host");
  EXPECT_STREQ(ToString(MemoryKind::kDevice), "device");
}

TEST(TensorTest, ElementsAndBytes) {
  Tensor t = Tensor::Allocate("w", DType::kF16, {3, 4});
  EXPECT_EQ(t.NumElements(), 12);
  EXPECT_EQ(t.ExpectedBytes(), 24u);  // 12 elements * 2 bytes
  EXPECT_EQ(t.size_bytes, 24u);
  EXPECT_EQ(t.memory, MemoryKind::kHost);
  for (std::size_t i = 0; i < t.size_bytes; ++i) EXPECT_EQ(t.data[i], std::byte{0});

  Tensor scalar = Tensor::Allocate("s", DType::kF64, {});
  EXPECT_EQ(scalar.NumElements(), 1);  // rank 0 holds one element
  EXPECT_EQ(scalar.size_bytes, 8u);

  Tensor empty = Tensor::Allocate("e", DType::kF32, {5, 0});
  EXPECT_EQ(empty.NumElements(), 0);
  EXPECT_EQ(empty.size_bytes, 0u);
  EXPECT_NE(empty.data, nullptr);  // host tensors always have a pointer
}

TEST(TensorTest, FromBytesCopiesAndChecksTheSize) {
  const int32_t values[3] = {1, -2, 3};
  auto t = Tensor::FromBytes("v", DType::kI32, {3}, values, sizeof(values));
  ASSERT_TRUE(t.ok());
  EXPECT_NE(static_cast<const void*>(t->data), static_cast<const void*>(values));
  EXPECT_EQ(t->As<int32_t>()[1], -2);

  auto bad = Tensor::FromBytes("v", DType::kI32, {4}, values, sizeof(values));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("tensor 'v': shape needs 16 bytes but 12 were given"));
}

TEST(ModelStateTest, AddFindAndTotals) {
  ModelState state;
  ASSERT_TRUE(state.Add(Tensor::Allocate("a", DType::kF32, {2, 2})).ok());
  ASSERT_TRUE(state.Add(Tensor::Allocate("b", DType::kU8, {3})).ok());
  EXPECT_EQ(state.size(), 2u);
  EXPECT_EQ(state.TotalBytes(), 16u + 3u);
  ASSERT_NE(state.Find("b"), nullptr);
  EXPECT_EQ(state.Find("b")->size_bytes, 3u);
  EXPECT_EQ(state.Find("c"), nullptr);
  state.FindMutable("a")->As<float>()[0] = 2.5f;
  EXPECT_EQ(state.tensors()[0].As<float>()[0], 2.5f);
  EXPECT_EQ(state.tensors()[0].name, "a");  // insertion order is kept
  EXPECT_EQ(state.metadata.version, 0u);
}

TEST(ModelStateTest, RejectsDuplicateName) {
  ModelState state;
  ASSERT_TRUE(state.Add(Tensor::Allocate("w", DType::kF32, {1})).ok());
  Status s = state.Add(Tensor::Allocate("w", DType::kF32, {2}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("duplicate tensor name 'w'"));
  EXPECT_EQ(state.size(), 1u);
}

TEST(ModelStateTest, RejectsEmptyAndReservedNames) {
  ModelState state;
  EXPECT_THAT(state.Add(Tensor::Allocate("", DType::kF32, {1})).message(), HasSubstr("must not be empty"));
  EXPECT_THAT(state.Add(Tensor::Allocate("__metadata__", DType::kF32, {1})).message(), HasSubstr("reserved"));
  EXPECT_EQ(state.size(), 0u);
}

TEST(ModelStateTest, RejectsSizeMismatch) {
  ModelState state;
  Tensor t = Tensor::Allocate("w", DType::kF32, {2});
  t.shape = {3};  // now needs 12 bytes, holds 8
  Status s = state.Add(t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': shape needs 12 bytes but holds 8"));
}

TEST(ModelStateTest, RejectsNegativeDimension) {
  ModelState state;
  Tensor t;
  t.name = "neg";
  t.shape = {2, -1};
  Status s = state.Add(t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'neg' has a negative dimension"));
}

}  // namespace
}  // namespace viper
