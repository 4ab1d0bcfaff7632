// Tests of the safetensors codec: round trips, a byte-exact file written from
// the spec, every rejection of the parser, zero-copy views, and file I/O.
#include "viper/core/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "viper/core/checksum.h"

namespace viper {
namespace safetensors {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr DType kAllDTypes[] = {DType::kBool, DType::kU8,  DType::kI8,  DType::kF8E4M3, DType::kF8E5M2,
                                DType::kI16,  DType::kU16, DType::kF16, DType::kBF16,   DType::kI32,
                                DType::kU32,  DType::kF32, DType::kI64, DType::kU64,    DType::kF64};

std::vector<std::byte> ToBytes(const std::string& s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

std::string LengthPrefix(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// A file made of the 8-byte length of `json`, `json` itself (not padded) and
// `data`: for handcrafting corrupt inputs.
std::vector<std::byte> RawFile(const std::string& json, const std::string& data) {
  return ToBytes(LengthPrefix(json.size()) + json + data);
}

// A tensor whose byte i holds (seed + 31 * i) mod 256, so every tensor differs.
Tensor Patterned(const std::string& name, DType dtype, std::vector<int64_t> shape, int seed) {
  Tensor t = Tensor::Allocate(name, dtype, std::move(shape));
  for (std::size_t i = 0; i < t.size_bytes; ++i) t.data[i] = static_cast<std::byte>((seed + 31 * i) & 0xff);
  return t;
}

void ExpectSameTensors(const ModelState& a, const ModelState& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Tensor& x = a.tensors()[i];
    const Tensor& y = b.tensors()[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.dtype, y.dtype) << x.name;
    EXPECT_EQ(x.shape, y.shape) << x.name;
    ASSERT_EQ(x.size_bytes, y.size_bytes) << x.name;
    if (x.size_bytes) {
      EXPECT_EQ(0, std::memcmp(x.data, y.data, x.size_bytes)) << x.name;
    }
  }
}

Status ParseStatus(const std::vector<std::byte>& bytes, const ParseOptions& options = {}) {
  return Parse(bytes, options).status();
}

// ---------------------------------------------------------------- round trips

class DTypeRoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(DTypeRoundTrip, MatrixEmptyAndScalar) {
  const DType dtype = GetParam();
  ModelState state;
  ASSERT_TRUE(state.Add(Patterned("matrix", dtype, {2, 3}, 1)).ok());
  ASSERT_TRUE(state.Add(Patterned("empty", dtype, {3, 0}, 2)).ok());  // a zero dim: 0 bytes
  ASSERT_TRUE(state.Add(Patterned("scalar", dtype, {}, 3)).ok());     // rank 0: one element
  state.metadata = {7, 4200, 2};

  auto bytes = Serialize(state);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto size = SerializedSize(state);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(bytes->size(), *size);
  // The data section is (6 + 0 + 1) elements.
  EXPECT_EQ(state.TotalBytes(), 7 * DTypeSize(dtype));

  auto parsed = Parse(*std::move(bytes), ParseOptions{true, true});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ExpectSameTensors(state, *parsed);
  EXPECT_EQ(parsed->tensors()[1].size_bytes, 0u);
  EXPECT_TRUE(parsed->tensors()[2].shape.empty());
  EXPECT_EQ(parsed->tensors()[2].size_bytes, DTypeSize(dtype));
  EXPECT_EQ(parsed->metadata.version, 7u);
  EXPECT_EQ(parsed->metadata.iteration, 4200);
  EXPECT_EQ(parsed->metadata.producer_id, 2);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, DTypeRoundTrip, ::testing::ValuesIn(kAllDTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           std::string name = ToString(info.param);
                           name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
                           return name;
                         });

TEST(SafetensorsTest, RoundTripAllDTypesInOneModel) {
  ModelState state;
  int seed = 0;
  for (DType d : kAllDTypes) ASSERT_TRUE(state.Add(Patterned(ToString(d), d, {3, 5}, ++seed)).ok());
  auto bytes = Serialize(state);
  ASSERT_TRUE(bytes.ok());
  auto parsed = Parse(*std::move(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ExpectSameTensors(state, *parsed);
}

uint64_t GetLe64ForTest(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<uint64_t>(p[i]);
  return v;
}

TEST(SafetensorsTest, ParseExternalDataViewsADetachedDataSection) {
  // The GPU tier's case: header in host memory, data elsewhere. Host memory
  // stands in for the data here; marking it kDevice must skip the XXH3 check
  // (it would read device memory) but keep every header check.
  ModelState state;
  ASSERT_TRUE(state.Add(Patterned("a", DType::kF32, {4, 3}, 1)).ok());
  ASSERT_TRUE(state.Add(Patterned("b", DType::kI16, {5}, 2)).ok());
  auto bytes = Serialize(state);
  ASSERT_TRUE(bytes.ok());
  const uint64_t header_size = 8 + GetLe64ForTest(bytes->data());
  std::vector<std::byte> header(bytes->begin(), bytes->begin() + header_size);
  std::vector<std::byte> data(bytes->begin() + header_size, bytes->end());
  auto owner = std::make_shared<int>(0);
  auto host =
      ParseExternalData(owner, header.data(), header.size(), data.data(), data.size(), MemoryKind::kHost);
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  ExpectSameTensors(state, *host);
  EXPECT_EQ(host->tensors()[0].data, data.data());
  data[0] ^= std::byte{1};  // host data: the checksum is verified
  EXPECT_EQ(
      ParseExternalData(owner, header.data(), header.size(), data.data(), data.size(), MemoryKind::kHost)
          .status()
          .code(),
      StatusCode::kDataLoss);
  auto device =
      ParseExternalData(owner, header.data(), header.size(), data.data(), data.size(), MemoryKind::kDevice);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  for (const Tensor& t : device->tensors()) EXPECT_EQ(t.memory, MemoryKind::kDevice);
  // A data section shorter than the header's offsets is still rejected.
  EXPECT_FALSE(ParseExternalData(owner, header.data(), header.size(), data.data(), data.size() - 2,
                                 MemoryKind::kDevice)
                   .ok());
}

TEST(SafetensorsTest, EmptyModelRoundTrips) {
  ModelState state;
  auto bytes = Serialize(state);
  ASSERT_TRUE(bytes.ok());
  auto parsed = Parse(*std::move(bytes), ParseOptions{true, true});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->size(), 0u);
}

// ------------------------------------------------------- byte-exact from spec

// Model: "w" F32 [2] = {1.0f, -2.0f} then "b" I8 rank 0 = 7; version 3,
// iteration 1200, producer 1.
ModelState SpecModel() {
  ModelState state;
  const float w[2] = {1.0f, -2.0f};
  const int8_t b = 7;
  EXPECT_TRUE(state.Add(*Tensor::FromBytes("w", DType::kF32, {2}, w, sizeof(w))).ok());
  EXPECT_TRUE(state.Add(*Tensor::FromBytes("b", DType::kI8, {}, &b, 1)).ok());
  state.metadata = {3, 1200, 1};
  return state;
}

// The 9 data bytes: 1.0f = 0x3f800000 and -2.0f = 0xc0000000 little-endian,
// then int8 7.
const char kSpecData[] = "\x00\x00\x80\x3f\x00\x00\x00\xc0\x07";
constexpr std::size_t kSpecDataBytes = 9;

// XXH3-64 (seed 0) of those 9 bytes. Computed outside libxxhash by a separate
// Python transcription of XXH3's 9-to-16-byte path (bitflips from the default
// secret bytes 24..56, mul128 fold, avalanche), so this also pins our use of
// the library.
constexpr uint64_t kSpecChecksum = 0xcc7f2639a71cf7b4ULL;

TEST(SafetensorsTest, ChecksumMatchesIndependentXxh3) {
  EXPECT_EQ(Xxh3_64(kSpecData, kSpecDataBytes), kSpecChecksum);
  // The published XXH3-64 of empty input (xxhash's sanity check vector).
  EXPECT_EQ(Xxh3_64("", 0), 0x2D06800538D394C2ULL);
  EXPECT_EQ(ChecksumToHex(kSpecChecksum), "cc7f2639a71cf7b4");
  EXPECT_EQ(ChecksumFromHex("CC7F2639A71CF7B4"), kSpecChecksum);
  EXPECT_FALSE(ChecksumFromHex("cc7f2639a71cf7b").has_value());   // 15 digits
  EXPECT_FALSE(ChecksumFromHex("cc7f2639a71cf7bg").has_value());  // not hex
}

// The canonical bytes viper.header_checksum hashes for SpecModel(), written
// out from the definition in safetensors.h (u64 = 8 bytes little-endian,
// str = u64 length + bytes): the tag, "w" then "b" in data order, then the
// metadata entries in key order. `data_checksum` empty: no viper.checksum.
std::string SpecCanonicalHeader(const std::string& data_checksum) {
  auto u64 = [](uint64_t v) { return LengthPrefix(v); };  // the same 8-byte LE encoding
  auto str = [&](const std::string& s) { return u64(s.size()) + s; };
  std::string out = "viper.header.v2";
  out += str("w") + str("F32") + u64(1) + u64(2) + u64(0) + u64(8);
  out += str("b") + str("I8") + u64(0) + u64(8) + u64(9);
  out += u64(data_checksum.empty() ? 4 : 5);
  if (!data_checksum.empty()) out += str("viper.checksum") + str(data_checksum);
  out += str("viper.format") + str("2");
  out += str("viper.iteration") + str("1200");
  out += str("viper.producer") + str("1");
  out += str("viper.version") + str("3");
  return out;
}

std::string HeaderChecksumHex(const std::string& canonical) {
  return ChecksumToHex(Xxh3_64(canonical.data(), canonical.size()));
}

TEST(SafetensorsTest, SerializeMatchesHandWrittenFileByteForByte) {
  // Metadata first, then tensors in ModelState order, compact JSON. The JSON
  // is 286 characters: 181 for '{"__metadata__":{...}' with the six viper
  // keys (both checksums are 16 hex digits), a comma, 52 for
  // '"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}', a comma, 50 for
  // '"b":{"dtype":"I8","shape":[],"data_offsets":[8,9]}' and the closing
  // brace: 181 + 1 + 52 + 1 + 50 + 1 = 286. 8 + 286 = 294: two spaces pad it
  // to 296, a multiple of 8, and the length prefix says 288 = 0x120.
  const std::string header_checksum = HeaderChecksumHex(SpecCanonicalHeader("cc7f2639a71cf7b4"));
  const std::string json =
      R"({"__metadata__":{"viper.version":"3","viper.iteration":"1200","viper.producer":"1",)"
      R"("viper.checksum":"cc7f2639a71cf7b4","viper.format":"2","viper.header_checksum":")" +
      header_checksum + R"("},)"
                        R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"I8","shape":[],"data_offsets":[8,9]}})";
  ASSERT_EQ(json.size(), 286u);
  const std::string expected = std::string("\x20\x01\x00\x00\x00\x00\x00\x00", 8) + json + "  " +
                               std::string(kSpecData, kSpecDataBytes);

  auto bytes = Serialize(SpecModel());
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ASSERT_EQ(bytes->size(), 8u + 288u + 9u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()), expected);

  // And the hand-written bytes parse back to the same model, both checksums verified.
  ParseInfo info;
  auto parsed = Parse(ToBytes(expected), ParseOptions{true, true});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ExpectSameTensors(SpecModel(), *parsed);
  EXPECT_EQ(parsed->tensors()[0].As<float>()[1], -2.0f);
  EXPECT_EQ(parsed->metadata.iteration, 1200);
  auto file = ToBytes(expected);
  ASSERT_TRUE(Parse(nullptr, file.data(), file.size(), ParseOptions{}, &info).ok());
  EXPECT_EQ(info.checksum, ChecksumKind::kDataAndHeader);
  EXPECT_TRUE(info.header_verified);
  EXPECT_TRUE(info.data_verified);
  EXPECT_EQ(info.json_header_bytes, 288u);  // the specification's N
  EXPECT_EQ(info.data_offset, 296u);
  EXPECT_EQ(info.metadata.at("viper.header_checksum"), header_checksum);
}

TEST(SafetensorsTest, HeaderWithoutChecksumIsPaddedWithSpaces) {
  // Without the data checksum entry the JSON is 286 - 36 = 250 characters
  // (',"viper.checksum":"<16 digits>"' is 36). 8 + 250 = 258 is not a
  // multiple of 8: six spaces pad the JSON to 256 (8 + 256 = 264 = 33 * 8),
  // and the length prefix says 256 = 0x100.
  const std::string json =
      R"({"__metadata__":{"viper.version":"3","viper.iteration":"1200","viper.producer":"1",)"
      R"("viper.format":"2","viper.header_checksum":")" +
      HeaderChecksumHex(SpecCanonicalHeader("")) + R"("},)"
                                                   R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                                   R"("b":{"dtype":"I8","shape":[],"data_offsets":[8,9]}})";
  ASSERT_EQ(json.size(), 250u);
  const std::string expected = std::string("\x00\x01\x00\x00\x00\x00\x00\x00", 8) + json + "      ";

  auto header = BuildHeader(SpecModel());
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->bytes, expected);
  EXPECT_EQ(header->data_bytes, 9u);
  EXPECT_EQ(header->TotalBytes(), 264u + 9u);
}

TEST(SafetensorsTest, ParsesForeignFileInDataOrder) {
  // As other writers produce it: keys not in offset order, no __metadata__,
  // no padding. Tensors come back in data order, metadata keeps its defaults.
  const std::string json = R"({"z":{"dtype":"U8","shape":[2],"data_offsets":[3,5]},)"
                           R"("a":{"dtype":"I16","shape":[1],"data_offsets":[1,3]},)"
                           R"("m":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})";
  auto parsed = Parse(RawFile(json, "\x01\x02\x03\x04\x05"));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ(parsed->tensors()[0].name, "m");
  EXPECT_EQ(parsed->tensors()[1].name, "a");
  EXPECT_EQ(parsed->tensors()[2].name, "z");
  EXPECT_EQ(static_cast<int>(parsed->tensors()[2].data[1]), 5);
  EXPECT_EQ(parsed->metadata.version, 0u);
}

// ------------------------------------------------------------------ rejections

TEST(SafetensorsRejectTest, ShorterThanLengthPrefix) {
  Status s = ParseStatus(ToBytes(std::string("\x10\x00\x00", 3)));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("3 bytes, shorter than the 8-byte"));
}

TEST(SafetensorsRejectTest, HeaderLengthBeyondBuffer) {
  // Says 100 bytes of JSON, but only 2 follow.
  Status s = ParseStatus(ToBytes(LengthPrefix(100) + "{}"));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("header length 100 bytes goes beyond the buffer (2 bytes follow"));
}

TEST(SafetensorsRejectTest, HeaderLengthOverLimit) {
  // 100 MB + 1 is rejected before looking at the (short) buffer.
  Status s = ParseStatus(ToBytes(LengthPrefix(kMaxHeaderBytes + 1) + "{}"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("header length 100000001 bytes exceeds the 100000000-byte limit"));
}

TEST(SafetensorsRejectTest, InvalidJsonIncludesParserMessage) {
  Status s = ParseStatus(RawFile(R"({"w": {"dtype": )", ""));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("header is not valid JSON"));
  EXPECT_THAT(s.message(), HasSubstr("parse error"));  // nlohmann's own text
}

// Issue 26, item 12: the reference parser allows only spaces after the JSON
// object; nlohmann's stops at a NUL byte, which let "\0garbage" through.
TEST(SafetensorsRejectTest, OnlySpacesMayFollowTheHeaderObject) {
  const std::string json = R"({"__metadata__":{"a":"b"},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  EXPECT_TRUE(ParseStatus(RawFile(json + "   ", "x")).ok());
  Status s = ParseStatus(RawFile(json + std::string("\0garbage", 8), "x"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("NUL byte"));
  s = ParseStatus(RawFile(json + std::string("\0\0\0\0", 4), "x"));
  EXPECT_THAT(s.message(), HasSubstr("NUL byte"));
  s = ParseStatus(RawFile(json + "\n\t", "x"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("only spaces"));
  EXPECT_THAT(ParseStatus(RawFile("    ", "")).message(), HasSubstr("empty"));
}

// Issue 26, item 8: a message never quotes bytes of a file that is not a
// safetensors file (a link to a secret): neither the JSON parser's "last
// read" excerpt nor the first 8 bytes read as a length.
TEST(SafetensorsRejectTest, MessagesQuoteNoBytesOfANonHeader) {
  const std::string secret = "{TOPSECRET-TOPSECRET-TOPSECRET";
  Status s = ParseStatus(RawFile(secret, ""));
  EXPECT_THAT(s.message(), HasSubstr("header is not valid JSON (at byte"));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("TOPSECRET")));
  const std::string text = "root:x:0:0:root:/root:/bin/bash\n";
  s = ParseStatus(ToBytes(text));
  EXPECT_THAT(s.message(), HasSubstr("not a safetensors file"));
  uint64_t as_number = 0;
  std::memcpy(&as_number, text.data(), 8);
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr(std::to_string(as_number))));
}

TEST(SafetensorsRejectTest, HeaderNotAnObject) {
  Status s = ParseStatus(RawFile("[1, 2]", ""));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("header must be a JSON object, got array"));
}

TEST(SafetensorsRejectTest, EntryNotAnObject) {
  Status s = ParseStatus(RawFile(R"({"w": 5})", ""));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': entry must be an object"));
}

TEST(SafetensorsRejectTest, MissingDtype) {
  Status s = ParseStatus(RawFile(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': missing field 'dtype'"));
}

TEST(SafetensorsRejectTest, DtypeNotAString) {
  Status s = ParseStatus(RawFile(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': field 'dtype' must be a string, got 4"));
}

TEST(SafetensorsRejectTest, UnknownDtype) {
  Status s = ParseStatus(
      RawFile(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", std::string(16, 'x')));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': unknown dtype 'F128'"));
}

TEST(SafetensorsRejectTest, MissingShape) {
  Status s = ParseStatus(RawFile(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "abcd"));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': missing field 'shape'"));
}

TEST(SafetensorsRejectTest, ShapeNotAnArray) {
  Status s = ParseStatus(RawFile(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "abcd"));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': field 'shape' must be an array of integers"));
}

TEST(SafetensorsRejectTest, ShapeWithNonIntegerDim) {
  Status s = ParseStatus(RawFile(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_THAT(s.message(),
              HasSubstr("tensor 'w': field 'shape' must be an array of integers, element 0 is 1.5"));
}

TEST(SafetensorsRejectTest, NegativeDim) {
  Status s = ParseStatus(RawFile(R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': negative dimension -1 at index 1"));
}

TEST(SafetensorsRejectTest, ShapeOverflow) {
  // 2^32 * 2^32 elements do not fit in 64 bits.
  Status s = ParseStatus(
      RawFile(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': shape [4294967296,4294967296] overflows"));
}

TEST(SafetensorsRejectTest, MissingDataOffsets) {
  Status s = ParseStatus(RawFile(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd"));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': missing field 'data_offsets'"));
}

TEST(SafetensorsRejectTest, DataOffsetsIllTyped) {
  Status s = ParseStatus(RawFile(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "abcd"));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': field 'data_offsets' must be [begin, end]"));
  s = ParseStatus(RawFile(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "abcd"));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': field 'data_offsets' must be [begin, end]"));
}

TEST(SafetensorsRejectTest, ShapeByteCountMismatch) {
  // F32 [2, 3] needs 24 bytes; the offsets give it 20.
  Status s = ParseStatus(
      RawFile(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, 'x')));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("tensor 'w': shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20) span 20"));
}

TEST(SafetensorsRejectTest, OffsetsEndBeforeBegin) {
  Status s = ParseStatus(RawFile(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", "abcd"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': data_offsets [4, 2) end before they begin"));
}

TEST(SafetensorsRejectTest, OffsetsOutOfRange) {
  // 8 bytes claimed, 4 present: a truncated data section.
  Status s = ParseStatus(RawFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr("tensor 'w': data_offsets [0, 8) are out of range: the data section has 4 bytes"));
}

TEST(SafetensorsRejectTest, OverlappingTensors) {
  Status s = ParseStatus(RawFile(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                                 "abcdef"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensors 'a' [0, 4) and 'b' [2, 6) overlap"));
}

TEST(SafetensorsRejectTest, GapInDataSection) {
  Status s = ParseStatus(RawFile(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                 R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                                 "abcdef"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("bytes [2, 4) of the data section are not covered by any tensor (gap before 'b')"));
}

TEST(SafetensorsRejectTest, TrailingBytes) {
  Status s = ParseStatus(RawFile(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "abcdef"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("bytes [2, 6) at the end of the data section are not covered"));
  EXPECT_THAT(s.message(), HasSubstr("4 trailing bytes"));
}

TEST(SafetensorsRejectTest, ChecksumMismatch) {
  auto bytes = Serialize(SpecModel());
  ASSERT_TRUE(bytes.ok());
  bytes->back() ^= std::byte{0x01};  // flip one bit of the last data byte
  Status s = ParseStatus(*bytes);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr("checksum mismatch: header says cc7f2639a71cf7b4 but the 9-byte data section"));
  // Verification can be switched off (e.g. `viper inspect --no-verify`).
  EXPECT_TRUE(ParseStatus(*bytes, ParseOptions{false, false}).ok());
}

TEST(SafetensorsRejectTest, ViperKeysWithoutChecksumAreNeverClean) {
  // A header naming viper.version but carrying no viper.checksum cannot come
  // from Viper: it is damaged, and is refused even when no checksum is required.
  auto header = BuildHeader(SpecModel());  // no data checksum
  ASSERT_TRUE(header.ok());
  auto file = ToBytes(header->bytes + std::string(kSpecData, kSpecDataBytes));
  for (bool required : {false, true}) {
    Status s = ParseStatus(file, ParseOptions{true, required});
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), HasSubstr("has viper.* keys but no 'viper.checksum'"));
  }
  // The same in a legacy (format 1) header.
  Status s = ParseStatus(RawFile(R"({"__metadata__":{"viper.version":"3"},)"
                                 R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                                 "x"));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
}

TEST(SafetensorsRejectTest, MalformedChecksum) {
  Status s = ParseStatus(RawFile(R"({"__metadata__":{"viper.checksum":"xyz"}})", ""));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'viper.checksum' must be 16 hex digits, got 'xyz'"));
}

TEST(SafetensorsRejectTest, MetadataValueNotString) {
  Status s = ParseStatus(RawFile(R"({"__metadata__":{"viper.version":3}})", ""));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("__metadata__ value for key 'viper.version' must be a string, got number 3"));
}

TEST(SafetensorsRejectTest, MetadataNotAnObject) {
  Status s = ParseStatus(RawFile(R"({"__metadata__":"v3"})", ""));
  EXPECT_THAT(s.message(), HasSubstr("__metadata__ must be an object of strings, got string"));
}

TEST(SafetensorsRejectTest, MalformedViperVersion) {
  Status s = ParseStatus(RawFile(R"({"__metadata__":{"viper.version":"-1"}})", ""));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'viper.version' must be a decimal integer, got '-1'"));
  s = ParseStatus(RawFile(R"({"__metadata__":{"viper.producer":"99999999999"}})", ""));  // > int32
  EXPECT_THAT(s.message(), HasSubstr("'viper.producer' must be a decimal integer"));
}

TEST(SafetensorsRejectTest, EmptyTensorName) {
  Status s = ParseStatus(RawFile(R"({"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", ""));
  EXPECT_THAT(s.message(), HasSubstr("empty name"));
}

// ------------------------------------------------------------ hostile headers

// Nested arrays `depth` deep: "[[...]]".
std::string Nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(SafetensorsHostileTest, DeepNestingIsAnErrorNotAStackOverflow) {
  // About 600 KB of brackets, wherever they sit: the whole header, a tensor
  // entry, its shape, a metadata value, an unknown field, or left unclosed.
  // Each is refused before any value is built, with a short message.
  const std::size_t kDepth = 300'000;
  const std::vector<std::string> headers = {
      Nested(kDepth),
      std::string(2 * kDepth, '['),
      R"({"a":)" + Nested(kDepth) + "}",
      R"({"w":{"dtype":"F32","shape":)" + Nested(kDepth) + R"(,"data_offsets":[0,4]}})",
      R"({"__metadata__":{"k":)" + Nested(kDepth) + "}}",
      R"({"w":{"extra":)" + Nested(kDepth) + R"(,"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
  };
  EXPECT_THAT(ParseStatus(RawFile(headers.back(), "abcd")).message(), HasSubstr("nests deeper than 64 levels"));
  for (const std::string& json : headers) {
    Status s = ParseStatus(RawFile(json, "abcd"));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << json.substr(0, 40);
    // Where a scalar is due, the first bracket is already wrong ("got
    // array"); where any value may sit, the depth limit stops the parse.
    if (json.find("extra") != std::string::npos || json[0] == '[') {
      EXPECT_THAT(s.message(), AnyOf(HasSubstr("nests deeper than 64 levels"),
                                     HasSubstr("header must be a JSON object, got array")));
    }
    EXPECT_LT(s.message().size(), 300u);
    auto metadata = ParseMetadata(RawFile(json, "abcd").data(), json.size() + 12);
    EXPECT_FALSE(metadata.ok());
  }
}

TEST(SafetensorsHostileTest, NestingUpToTheLimitIsRead) {
  // Header object (1) and tensor entry (2) hold an unknown field nested 62
  // deep: 64 levels, accepted (the field is ignored); 63 deep is one too many.
  const auto file = [](std::size_t depth) {
    return RawFile(R"({"w":{"extra":)" + Nested(depth) + R"(,"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                   "x");
  };
  EXPECT_TRUE(ParseStatus(file(62)).ok()) << ParseStatus(file(62)).ToString();
  EXPECT_THAT(ParseStatus(file(63)).message(), HasSubstr("nests deeper than 64 levels"));
}

TEST(SafetensorsHostileTest, MessagesQuoteBoundedExcerpts) {
  // A 1 MB tensor name, a 1 MB dtype, a 1 MB number and an unterminated 1 MB
  // string: each message stays short and says how long the value was.
  const std::string big(1'000'000, 'n');
  Status s = ParseStatus(RawFile(R"({")" + big + R"(":{"dtype":"F128","shape":[1],"data_offsets":[0,1]}})", "x"));
  EXPECT_THAT(s.message(), HasSubstr("(1000000 bytes)"));
  EXPECT_LT(s.message().size(), 400u);
  s = ParseStatus(RawFile(R"({"w":{"dtype":")" + big + R"(","shape":[1],"data_offsets":[0,1]}})", "x"));
  EXPECT_THAT(s.message(), HasSubstr("unknown dtype"));
  EXPECT_LT(s.message().size(), 400u);
  s = ParseStatus(RawFile(R"({"w":{"dtype":"U8","shape":[)" + std::string(1'000'000, '7') + "]}}", "x"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_LT(s.message().size(), 400u);
  s = ParseStatus(RawFile(R"({"w":")" + big, ""));
  EXPECT_THAT(s.message(), HasSubstr("header is not valid JSON"));
  EXPECT_LT(s.message().size(), 400u);
  s = ParseStatus(RawFile(R"({"__metadata__":{"k":)" + std::string(1'000'000, '1') + "}}", ""));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);  // a number too large for any type
  EXPECT_LT(s.message().size(), 400u);
  s = ParseStatus(RawFile(R"({"__metadata__":{"k":0.)" + std::string(1'000'000, '1') + "}}", ""));
  EXPECT_THAT(s.message(), HasSubstr("__metadata__ value for key 'k' must be a string, got number 0.111"));
  EXPECT_LT(s.message().size(), 400u);
}

// A header of `n` one-byte U8 tensors "t<i>" and its data.
std::vector<std::byte> ManyTensors(std::size_t n) {
  std::string json = "{";
  for (std::size_t i = 0; i < n; ++i) {
    json += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"U8","shape":[1],"data_offsets":[)" +
            std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  return RawFile(json + "}", std::string(n, 'x'));
}

// A header with `n` metadata entries "k<i>" and one tensor.
std::vector<std::byte> ManyMetadataEntries(std::size_t n) {
  std::string json = R"({"__metadata__":{)";
  for (std::size_t i = 0; i < n; ++i) json += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":\"v\"";
  return RawFile(json + R"(},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
}

TEST(SafetensorsHostileTest, TensorAndMetadataCountsAreCapped) {
  ParseOptions small;
  small.max_tensors = 10;
  small.max_metadata_entries = 5;
  EXPECT_TRUE(ParseStatus(ManyTensors(10), small).ok());
  Status s = ParseStatus(ManyTensors(11), small);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("header has more than 10 tensors (the limit"));
  EXPECT_TRUE(ParseStatus(ManyMetadataEntries(5), small).ok());
  s = ParseStatus(ManyMetadataEntries(6), small);
  EXPECT_THAT(s.message(), HasSubstr("__metadata__ has more than 5 entries (the limit"));
  // The default cap on metadata, and a header of many tensors under it
  // (parsed in one linear pass; see the figures in core/README.md).
  s = ParseStatus(ManyMetadataEntries(kMaxMetadataEntries + 1));
  EXPECT_THAT(s.message(), HasSubstr("__metadata__ has more than 100000 entries"));
  auto parsed = Parse(ManyTensors(20'000));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->size(), 20'000u);
  EXPECT_EQ(parsed->tensors()[19'999].name, "t19999");
}

TEST(SafetensorsHostileTest, DuplicateKeysAreRejectedAtEveryLevel) {
  const std::string entry = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"a":)" + entry + R"(,"a":)" + entry + "}", "duplicate key 'a' in the header"},
      {R"({"__metadata__":{},"__metadata__":{"x":"y"},"a":)" + entry + "}",
       "duplicate key '__metadata__' in the header"},
      {R"({"__metadata__":{"k":"1","k":"2"},"a":)" + entry + "}", "duplicate key 'k' in __metadata__"},
      {R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})",
       "duplicate key 'dtype' in tensor 'a'"},
      {R"({"a":{"x":{"y":1,"y":2},"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "duplicate key 'y'"},
  };
  for (const auto& [json, message] : cases) {
    Status s = ParseStatus(RawFile(json, "x"));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(s.message(), HasSubstr(message)) << json;
  }
}

// `file` with the first occurrence of `from` replaced by `to` (same length).
std::vector<std::byte> Replaced(std::vector<std::byte> file, const std::string& from, const std::string& to) {
  std::string text(reinterpret_cast<const char*>(file.data()), file.size());
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(from.size(), to.size());
  if (at != std::string::npos) std::memcpy(file.data() + at, to.data(), to.size());
  return file;
}

// A model with a 2 x 3 F32 "w" and a 6-byte U8 "c", version 7 iteration 1200.
ModelState TableModel() {
  ModelState state;
  EXPECT_TRUE(state.Add(Patterned("w", DType::kF32, {2, 3}, 1)).ok());
  EXPECT_TRUE(state.Add(Patterned("c", DType::kU8, {6}, 2)).ok());
  state.metadata = {7, 1200, 0};
  return state;
}

TEST(SafetensorsHostileTest, HeaderChecksumCoversTheTensorTableAndMetadata) {
  auto bytes = Serialize(TableModel());
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(ParseStatus(*bytes).ok());
  // Each edit keeps the JSON valid, the data section covered and its
  // checksum right: only viper.header_checksum can tell.
  const std::vector<std::pair<std::string, std::string>> edits = {
      {R"("shape":[2,3])", R"("shape":[3,2])"},        // transposed
      {R"("dtype":"F32")", R"("dtype":"I32")"},        // F32 -> I32
      {R"("w":{)", R"("v":{)"},                        // renamed
      {R"("viper.iteration":"1200")", R"("viper.iteration":"1300")"},  // iteration
      {R"("viper.version":"7")", R"("viper.version":"8")"},            // version
      {R"("viper.producer":"0")", R"("viper.producer":"1")"},          // producer
  };
  for (const auto& [from, to] : edits) {
    Status s = ParseStatus(Replaced(*bytes, from, to));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << from << " -> " << to;
    EXPECT_THAT(s.message(), HasSubstr("header checksum mismatch")) << from << " -> " << to;
    // Even without hashing the data (inspect --no-verify, streamed versions).
    EXPECT_EQ(ParseStatus(Replaced(*bytes, from, to), ParseOptions{false, false}).code(), StatusCode::kDataLoss);
  }
  // Swapped offsets move bytes between tensors: the data checksum still
  // matches (same bytes), the header checksum does not.
  auto swapped = Replaced(Replaced(*bytes, R"("data_offsets":[0,24])", R"("data_offsets":[6,30])"),
                          R"("data_offsets":[24,30])", R"("data_offsets":[ 0, 6])");
  EXPECT_EQ(ParseStatus(swapped, ParseOptions{false, false}).code(), StatusCode::kDataLoss);
}

TEST(SafetensorsHostileTest, DamagedViperKeysSwitchNothingOff) {
  auto bytes = Serialize(TableModel());
  ASSERT_TRUE(bytes.ok());
  // One flipped bit in a key name ('v' 0x76 -> 'V' 0x56): never "absent".
  for (const std::string key : {"viper.checksum", "viper.format", "viper.header_checksum", "viper.version"}) {
    std::string damaged = key;
    damaged[0] = 'V';
    Status s = ParseStatus(Replaced(*bytes, "\"" + key + "\"", "\"" + damaged + "\""));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("'" + damaged + "' is not a key Viper writes")) << damaged;
  }
  // Other flips of a key: a lost checksum key, or a format without its checksum.
  Status s = ParseStatus(Replaced(*bytes, "\"viper.checksum\"", "\"viper.chucksum\""));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  s = ParseStatus(Replaced(*bytes, "\"viper.header_checksum\"", "\"xiper.header_checksum\""));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("says viper.format 2 but has no 'viper.header_checksum'"));
  s = ParseStatus(Replaced(*bytes, "\"viper.format\"", "\"xiper.format\""));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  // A tensor key flipped into a second __metadata__ is a duplicate key.
  auto two = Serialize(SpecModel());
  ASSERT_TRUE(two.ok());
  std::string json = R"({"__metadata__":{"viper.version":"3"},"__metadata__":{},)"
                     R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  EXPECT_THAT(ParseStatus(RawFile(json, "x")).message(), HasSubstr("duplicate key '__metadata__'"));
}

TEST(SafetensorsHostileTest, FormatKeysAreChecked) {
  Status s = ParseStatus(RawFile(R"({"__metadata__":{"viper.checksum":"2d06800538d394c2","viper.format":"3",)"
                                 R"("viper.header_checksum":"0000000000000000"}})",
                                 ""));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'viper.format' is '3'; this build reads format 2"));
  s = ParseStatus(
      RawFile(R"({"__metadata__":{"viper.checksum":"2d06800538d394c2","viper.header_checksum":"0000000000000000"}})",
              ""));
  EXPECT_THAT(s.message(), HasSubstr("has 'viper.header_checksum' but no 'viper.format'"));
  auto clash = BuildHeader(SpecModel(), nullptr, {{"viper.note", "x"}});
  EXPECT_THAT(clash.status().message(), HasSubstr("reserved for Viper's own keys"));
}

TEST(SafetensorsTest, DeviceImagesCarryTheirOwnDataChecksumAndTheHeaderChecksum) {
  // The gpu tier's header: viper.device_checksum (checked by transports on
  // the device) instead of viper.checksum. Core accepts it as the data
  // checksum and still verifies the header checksum, which covers it.
  const std::string device_sum = "0123456789abcdef";
  auto header = BuildHeader(SpecModel(), nullptr, {{"viper.device_checksum", device_sum}});
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  std::vector<std::byte> h = ToBytes(header->bytes);
  std::vector<std::byte> data = ToBytes(std::string(kSpecData, kSpecDataBytes));
  auto parsed = ParseExternalData(nullptr, h.data(), h.size(), data.data(), data.size(), MemoryKind::kDevice);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto edited = Replaced(h, device_sum, "0123456789abcdee");
  EXPECT_EQ(ParseExternalData(nullptr, edited.data(), edited.size(), data.data(), data.size(), MemoryKind::kDevice)
                .status()
                .code(),
            StatusCode::kDataLoss);
}

TEST(SafetensorsTest, LegacyFilesVerifyTheirDataOnly) {
  // As Viper wrote files before format 2: viper.checksum, no viper.format.
  // 0x2d06800538d394c2 is XXH3-64 of the empty data section.
  const std::string json = R"({"__metadata__":{"viper.version":"4","viper.iteration":"9","viper.producer":"0",)"
                           R"("viper.checksum":"cc7f2639a71cf7b4"},)"
                           R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"I8","shape":[],"data_offsets":[8,9]}})";
  auto file = RawFile(json, std::string(kSpecData, kSpecDataBytes));
  ParseInfo info;
  auto parsed = Parse(nullptr, file.data(), file.size(), ParseOptions{true, true}, &info);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(info.checksum, ChecksumKind::kDataOnly);
  EXPECT_STREQ(ToString(info.checksum), "data only (legacy)");
  EXPECT_TRUE(info.data_verified);
  EXPECT_FALSE(info.header_verified);
  EXPECT_EQ(parsed->metadata.version, 4u);
  file.back() ^= std::byte{1};
  EXPECT_EQ(ParseStatus(file).code(), StatusCode::kDataLoss);
}

TEST(SafetensorsTest, PlainSafetensorsFilesAreValidButUnverified) {
  // What the reference library writes: no viper.* key (here with its usual
  // "format": "pt"). Valid; required checksums refuse it.
  auto file = RawFile(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                      "x");
  ParseInfo info;
  ASSERT_TRUE(Parse(nullptr, file.data(), file.size(), ParseOptions{}, &info).ok());
  EXPECT_EQ(info.checksum, ChecksumKind::kNone);
  EXPECT_FALSE(info.data_verified);
  Status s = ParseStatus(file, ParseOptions{true, true});
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("unverified"));
}

// ---------------------------------------------------------- seed corpus

// The seed corpus in fuzz/corpus/safetensors/: files the codec writes and one
// of each hostile class, each at most 1 MB. Set
// VIPER_WRITE_SAFETENSORS_CORPUS=1 to (re)write them from here; the test then
// checks every checked-in file keeps its verdict: valid-v2-* verify data and
// header, valid-legacy-* data only, valid-plain-* are unverified, bad-* are
// refused with a short message.
std::string CorpusDir() { return std::string(VIPER_TEST_SOURCE_DIR) + "/fuzz/corpus/safetensors"; }

std::string AsString(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::map<std::string, std::string> CorpusFiles() {
  std::map<std::string, std::string> files;
  auto serialized = [](const ModelState& state) {
    auto bytes = Serialize(state);
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    return bytes.ok() ? AsString(*bytes) : std::string();
  };
  ModelState all;
  for (DType d : kAllDTypes) {
    EXPECT_TRUE(all.Add(Patterned(std::string("t_") + ToString(d), d, {2, 3}, static_cast<int>(d))).ok());
  }
  all.metadata = {1, 100, 0};
  files["valid-v2-all-dtypes.safetensors"] = serialized(all);
  files["valid-v2-spec.safetensors"] = serialized(SpecModel());
  ModelState empty;
  empty.metadata = {2, 0, 0};
  files["valid-v2-empty.safetensors"] = serialized(empty);
  files["valid-v2-table.safetensors"] = serialized(TableModel());
  files["valid-legacy-v4.safetensors"] =
      AsString(RawFile(R"({"__metadata__":{"viper.version":"4","viper.iteration":"9","viper.producer":"0",)"
                       R"("viper.checksum":"cc7f2639a71cf7b4"},)"
                       R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"I8","shape":[],"data_offsets":[8,9]}})",
                       std::string(kSpecData, kSpecDataBytes)));
  files["valid-plain-pt.safetensors"] = AsString(
      RawFile(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"));
  files["valid-plain-10k-tensors.safetensors"] = AsString(ManyTensors(10'000));

  const std::string table = files["valid-v2-table.safetensors"];
  auto edited = [&](const std::string& from, const std::string& to) {
    return AsString(Replaced(ToBytes(table), from, to));
  };
  files["bad-nested-600k.safetensors"] = AsString(RawFile(std::string(600'000, '['), ""));
  files["bad-nested-closed.safetensors"] = AsString(RawFile(R"({"a":)" + Nested(300'000) + "}", ""));
  files["bad-nested-shape.safetensors"] = AsString(
      RawFile(R"({"w":{"dtype":"F32","shape":)" + Nested(300'000) + R"(,"data_offsets":[0,4]}})", "abcd"));
  files["bad-nested-metadata.safetensors"] =
      AsString(RawFile(R"({"__metadata__":{"k":)" + Nested(300'000) + "}}", ""));
  files["bad-nested-extra-field.safetensors"] = AsString(RawFile(
      R"({"w":{"extra":)" + Nested(300'000) + R"(,"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"));
  // 100,001 metadata entries with 3-character keys: over the cap, under 1 MB.
  std::string many = R"({"__metadata__":{)";
  const std::string alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  for (std::size_t i = 0; i <= kMaxMetadataEntries; ++i) {
    const std::string key = {alphabet[i % 62], alphabet[i / 62 % 62], alphabet[i / 3844 % 62]};
    many += (i ? ",\"" : "\"") + key + "\":\"\"";
  }
  files["bad-metadata-over-cap.safetensors"] = AsString(RawFile(many + "}}", ""));
  files["bad-duplicate-tensor.safetensors"] =
      AsString(RawFile(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                       "x"));
  files["bad-duplicate-metadata.safetensors"] =
      AsString(RawFile(R"({"__metadata__":{"viper.version":"3"},"__metadata__":{},)"
                       R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                       "x"));
  files["bad-duplicate-field.safetensors"] =
      AsString(RawFile(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "x"));
  files["bad-checksum-key-case.safetensors"] = edited("\"viper.checksum\"", "\"Viper.checksum\"");
  files["bad-legacy-no-checksum.safetensors"] = AsString(
      RawFile(R"({"__metadata__":{"viper.version":"3"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
              "x"));
  files["bad-header-transposed.safetensors"] = edited(R"("shape":[2,3])", R"("shape":[3,2])");
  files["bad-header-f32-to-i32.safetensors"] = edited(R"("dtype":"F32")", R"("dtype":"I32")");
  files["bad-header-renamed.safetensors"] = edited(R"("w":{)", R"("v":{)");
  files["bad-header-iteration.safetensors"] = edited(R"("viper.iteration":"1200")", R"("viper.iteration":"1300")");
  std::string flipped = table;
  flipped.back() = static_cast<char>(flipped.back() ^ 1);
  files["bad-data-bit-flip.safetensors"] = flipped;
  files["bad-truncated.safetensors"] = table.substr(0, table.size() - 5);
  files["bad-long-name.safetensors"] = AsString(RawFile(
      R"({")" + std::string(900'000, 'n') + R"(":{"dtype":"F128","shape":[1],"data_offsets":[0,1]}})", "x"));
  files["bad-unterminated-string.safetensors"] = AsString(RawFile(R"({"w":")" + std::string(900'000, 's'), ""));
  files["bad-length-prefix-huge.safetensors"] = LengthPrefix(~0ull) + "{}";
  return files;
}

TEST(SafetensorsCorpusTest, SeedCorpusKeepsItsVerdicts) {
  const std::string dir = CorpusDir();
  const char* write = std::getenv("VIPER_WRITE_SAFETENSORS_CORPUS");
  if (write && *write == '1') {
    for (const auto& [name, bytes] : CorpusFiles()) {
      ASSERT_LE(bytes.size(), 1u << 20) << name;
      std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    }
  }
  int valid = 0, bad = 0;
  for (const auto& [name, expected] : CorpusFiles()) {
    SCOPED_TRACE(name);
    std::ifstream in(dir + "/" + name, std::ios::binary);
    ASSERT_TRUE(in.good()) << "missing from the corpus; write it with VIPER_WRITE_SAFETENSORS_CORPUS=1";
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_LE(bytes.size(), 1u << 20);
    ParseInfo info;
    auto file = ToBytes(bytes);
    auto parsed = Parse(nullptr, file.data(), file.size(), ParseOptions{}, &info);
    if (name.rfind("valid-", 0) == 0) {
      ++valid;
      ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
      const ChecksumKind kind = name.rfind("valid-v2-", 0) == 0       ? ChecksumKind::kDataAndHeader
                                : name.rfind("valid-legacy-", 0) == 0 ? ChecksumKind::kDataOnly
                                                                      : ChecksumKind::kNone;
      EXPECT_EQ(info.checksum, kind);
      EXPECT_EQ(info.data_verified, kind != ChecksumKind::kNone);
      // Files written by the codec are still byte-identical to what it writes now.
      if (kind == ChecksumKind::kDataAndHeader) {
        EXPECT_EQ(bytes, expected);
      }
    } else {
      ++bad;
      ASSERT_FALSE(parsed.ok());
      EXPECT_LT(parsed.status().message().size(), 500u) << parsed.status().ToString().substr(0, 500);
    }
  }
  EXPECT_EQ(valid, 7);
  EXPECT_EQ(bad, 20);
}

// -------------------------------------------------------------------- metadata

TEST(SafetensorsTest, MetadataRoundTrip) {
  ModelState state = SpecModel();
  state.metadata.version = 18446744073709551615ULL;  // uint64 max survives the decimal string
  state.metadata.iteration = -5;
  state.metadata.producer_id = 2147483647;
  auto bytes = Serialize(state);
  ASSERT_TRUE(bytes.ok());
  auto parsed = Parse(*bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->metadata.version, 18446744073709551615ULL);
  EXPECT_EQ(parsed->metadata.iteration, -5);
  EXPECT_EQ(parsed->metadata.producer_id, 2147483647);

  auto map = ParseMetadata(bytes->data(), bytes->size());
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->at("viper.version"), "18446744073709551615");
  EXPECT_EQ(map->at("viper.iteration"), "-5");
  EXPECT_EQ(map->at("viper.producer"), "2147483647");
  EXPECT_EQ(map->at("viper.checksum").size(), 16u);
}

TEST(SafetensorsTest, ExtraMetadataIsWrittenAndClashesRejected) {
  const uint64_t checksum = kSpecChecksum;
  auto header = BuildHeader(SpecModel(), &checksum, {{"format", "pt"}, {"run", "tc1"}});
  ASSERT_TRUE(header.ok());
  auto file = ToBytes(header->bytes + std::string(kSpecData, kSpecDataBytes));
  auto map = ParseMetadata(file.data(), file.size());
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->at("format"), "pt");
  EXPECT_EQ(map->at("run"), "tc1");
  EXPECT_TRUE(ParseStatus(file, ParseOptions{true, true}).ok());

  auto clash = BuildHeader(SpecModel(), nullptr, {{"viper.version", "9"}});
  EXPECT_EQ(clash.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(clash.status().message(), HasSubstr("'viper.version' clashes"));
}

TEST(SafetensorsTest, ParseMetadataWithoutMetadataIsEmpty) {
  auto file = RawFile(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
  auto map = ParseMetadata(file.data(), file.size());
  ASSERT_TRUE(map.ok());
  EXPECT_TRUE(map->empty());
}

// ------------------------------------------------------------------- zero copy

TEST(SafetensorsTest, ParseReturnsViewsIntoTheBuffer) {
  auto bytes = Serialize(SpecModel());
  ASSERT_TRUE(bytes.ok());
  auto buffer = std::make_shared<std::vector<std::byte>>(*std::move(bytes));
  const std::byte* begin = buffer->data();
  const std::byte* end = begin + buffer->size();
  const long owners_before = buffer.use_count();
  {
    auto parsed = Parse(std::shared_ptr<const void>(buffer, begin), begin, buffer->size());
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    // The data section starts after 8 + 288 header bytes; "w" is its first
    // 8 bytes and "b" the ninth.
    EXPECT_EQ(parsed->tensors()[0].data, begin + 296);
    EXPECT_EQ(parsed->tensors()[1].data, begin + 304);
    for (const Tensor& t : parsed->tensors()) {
      EXPECT_GE(t.data, begin);
      EXPECT_LE(t.data + t.size_bytes, end);
      EXPECT_EQ(t.owner.get(), t.data);  // aliasing pointer to the view
    }
    EXPECT_EQ(buffer.use_count(), owners_before + 2);  // each tensor shares the buffer
  }
  EXPECT_EQ(buffer.use_count(), owners_before);
}

TEST(SafetensorsTest, ViewsKeepAMovedInVectorAlive) {
  Tensor w;
  {
    auto bytes = Serialize(SpecModel());
    ASSERT_TRUE(bytes.ok());
    auto parsed = Parse(*std::move(bytes));
    ASSERT_TRUE(parsed.ok());
    w = parsed->tensors()[0];
  }
  // The ModelState is gone; the tensor's owner still holds the buffer.
  EXPECT_EQ(w.As<float>()[0], 1.0f);
  EXPECT_EQ(w.As<float>()[1], -2.0f);
}

TEST(SafetensorsTest, DataSectionIsEightByteAligned) {
  ModelState state;
  ASSERT_TRUE(state.Add(Patterned("odd_name_length_x", DType::kF64, {3}, 1)).ok());
  auto bytes = Serialize(state);
  ASSERT_TRUE(bytes.ok());
  auto parsed = Parse(*std::move(bytes));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(parsed->tensors()[0].data) % 8, 0u);
}

// ------------------------------------------------------- serialization errors

TEST(SafetensorsTest, DeviceTensorsNeedTheHostToSerialize) {
  ModelState state;
  Tensor t = Tensor::Allocate("gpu.weight", DType::kF16, {4});
  t.memory = MemoryKind::kDevice;
  ASSERT_TRUE(state.Add(t).ok());
  // The header only needs sizes.
  auto header = BuildHeader(state);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->data_bytes, 8u);
  std::vector<std::byte> out(1024);
  auto written = SerializeTo(state, out.data(), out.size());
  EXPECT_EQ(written.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(written.status().message(), HasSubstr("tensor 'gpu.weight' is in device memory"));
  EXPECT_EQ(Serialize(state).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(DataChecksum(state).status().code(), StatusCode::kFailedPrecondition);
}

TEST(SafetensorsTest, SerializeToRejectsSmallBuffer) {
  std::vector<std::byte> out(100);
  auto written = SerializeTo(SpecModel(), out.data(), out.size());
  EXPECT_EQ(written.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(written.status().message(), HasSubstr("output buffer holds 100 bytes but the model needs 305"));
}

TEST(SafetensorsTest, BuildHeaderRejectsInconsistentTensor) {
  ModelState state;
  ASSERT_TRUE(state.Add(Tensor::Allocate("w", DType::kF32, {2})).ok());
  state.mutable_tensors()[0].shape = {3};  // now 12 bytes expected, 8 held
  auto header = BuildHeader(state);
  EXPECT_EQ(header.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(header.status().message(),
              HasSubstr("tensor 'w': shape [3] of F32 needs 12 bytes but the tensor holds 8"));
}

TEST(SafetensorsTest, DataChecksumHashesTensorsInOrder) {
  auto checksum = DataChecksum(SpecModel());
  ASSERT_TRUE(checksum.ok());
  EXPECT_EQ(*checksum, kSpecChecksum);
}

// -------------------------------------------------------------------- file I/O

class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "viper_safetensors_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  bool Exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
  }
  // The names in dir_, sorted.
  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(dir_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
      }
      ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
};

TEST_F(SafetensorsFileTest, WriteThenReadRoundTrips) {
  const std::string path = dir_ + "/model.safetensors";
  ASSERT_TRUE(WriteFileAtomic(SpecModel(), path).ok());
  EXPECT_EQ(Entries(), std::vector<std::string>{"model.safetensors"});  // no temporary left
  // The file holds exactly what Serialize produces.
  std::ifstream in(path, std::ios::binary);
  std::string on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bytes = Serialize(SpecModel());
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(on_disk, std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()));

  auto read = ReadFile(path, ParseOptions{true, true});
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ExpectSameTensors(SpecModel(), *read);
  EXPECT_EQ(read->metadata.version, 3u);
}

TEST_F(SafetensorsFileTest, OverwritesAnExistingFile) {
  const std::string path = dir_ + "/model.safetensors";
  ASSERT_TRUE(WriteFileAtomic(SpecModel(), path).ok());
  ModelState bigger;
  ASSERT_TRUE(bigger.Add(Patterned("big", DType::kF32, {1000}, 9)).ok());
  ASSERT_TRUE(WriteFileAtomic(bigger, path).ok());
  auto read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ExpectSameTensors(bigger, *read);
}

TEST_F(SafetensorsFileTest, MissingDirectoryIsNotFound) {
  const std::string path = dir_ + "/no/such/dir/model.safetensors";
  Status s = WriteFileAtomic(SpecModel(), path);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("directory '" + dir_ + "/no/such/dir' does not exist"));
  EXPECT_FALSE(Exists(path));
}

TEST_F(SafetensorsFileTest, FailedRenameLeavesNoTempFile) {
  // The target is an existing directory: rename fails after the data was
  // written; the temporary file must be removed and the directory untouched.
  const std::string path = dir_ + "/taken";
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  Status s = WriteFileAtomic(SpecModel(), path);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("renaming"));
  EXPECT_EQ(Entries(), std::vector<std::string>{"taken"});  // no temporary left
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

// Issue 26, item 2: a link planted where main put its temporary
// (<path>.tmp.<pid>) is never written through; the temporary's name is
// random and the file private (0600).
TEST_F(SafetensorsFileTest, PlantedLinkAtTemporaryNameIsNotFollowed) {
  const std::string path = dir_ + "/model.safetensors";
  const std::string victim = dir_ + "/victim";
  { std::ofstream(victim) << "precious"; }
  ASSERT_EQ(::symlink(victim.c_str(), (path + ".tmp." + std::to_string(::getpid())).c_str()), 0);
  ASSERT_TRUE(WriteFileAtomic(SpecModel(), path).ok());
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious");
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_TRUE(ReadFile(path).ok());
}

// Issue 26, item 8: the read side opens nothing but a regular file, never
// blocks on a FIFO, follows a link only when asked.
TEST_F(SafetensorsFileTest, ReadRefusesLinksFifosAndDirectories) {
  const std::string real = dir_ + "/real.safetensors";
  ASSERT_TRUE(WriteFileAtomic(SpecModel(), real).ok());
  const std::string link = dir_ + "/link.safetensors";
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  auto via_link = ReadFile(link);
  EXPECT_EQ(via_link.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(via_link.status().message(), HasSubstr("symbolic link"));
  ReadFileOptions follow;
  follow.follow_symlinks = true;
  EXPECT_TRUE(ReadFile(link, {}, nullptr, follow).ok());
  const std::string fifo = dir_ + "/model-v5.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = ReadFileBuffer(fifo);  // returns at once: no writer is waited for
  EXPECT_EQ(from_fifo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(from_fifo.status().message(), HasSubstr("a FIFO, not a regular file"));
  EXPECT_EQ(ReadFileBuffer(dir_).status().code(), StatusCode::kInvalidArgument);
  ReadFileOptions small;
  small.max_bytes = 8;
  EXPECT_EQ(ReadFileBuffer(real, small).status().code(), StatusCode::kOutOfRange);
}

TEST_F(SafetensorsFileTest, DeviceTensorWritesNothing) {
  ModelState state;
  Tensor t = Tensor::Allocate("gpu", DType::kF32, {1});
  t.memory = MemoryKind::kDevice;
  ASSERT_TRUE(state.Add(t).ok());
  const std::string path = dir_ + "/model.safetensors";
  EXPECT_EQ(WriteFileAtomic(state, path).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Exists(path));
}

TEST_F(SafetensorsFileTest, ReadMissingFileIsNotFoundNamingThePath) {
  const std::string path = dir_ + "/absent.safetensors";
  auto read = ReadFile(path);
  EXPECT_EQ(read.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(), HasSubstr(path));
}

TEST_F(SafetensorsFileTest, TruncatedFileIsDataLossNamingThePath) {
  const std::string path = dir_ + "/model.safetensors";
  ASSERT_TRUE(WriteFileAtomic(SpecModel(), path).ok());
  ASSERT_EQ(::truncate(path.c_str(), 8 + 288 + 4), 0);  // cut "w" in half, lose "b"
  auto read = ReadFile(path);
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(),
              HasSubstr(path + ": tensor 'w': data_offsets [0, 8) are out of range"));

  ASSERT_EQ(::truncate(path.c_str(), 5), 0);  // not even the length prefix
  read = ReadFile(path);
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("5 bytes, shorter than the 8-byte"));
}

TEST_F(SafetensorsFileTest, ReadingADirectoryIsRejected) {
  auto read = ReadFile(dir_);
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("is a directory, not a regular file"));
}

}  // namespace
}  // namespace safetensors
}  // namespace viper
