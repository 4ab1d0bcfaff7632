// The device delta codec (transports/src/device_delta.cu): its records must
// be byte for byte the host encoder's (delta.cc) on random models and
// changed fractions, applying them on the device must rebuild the target's
// data section exactly, and hostile records must be refused with nothing
// written. The device tests skip without a CUDA device ("no CUDA device");
// without one only the "unavailable" path runs.
#include "device_delta.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "delta_internal.h"
#include "delta_test_models.h"
#include "tier_gpu.h"
#include "viper/config.h"
#include "viper/transports/device_memory.h"

#if VIPER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "device_buffer.h"
#endif

namespace viper {
namespace transports {
namespace {

using namespace testing;  // NOLINT: Bytes, Spec, Model, RandomBytes, Change
using internal::DeviceDeltaCodec;
using internal::DeviceDeltaRecords;
using internal::DeviceDeltaTensor;

TEST(DeviceDelta, CreateSaysWhyWithoutADevice) {
  auto codec = DeviceDeltaCodec::Create(0);
  std::string why;
  if (CudaDeviceAvailable(&why)) {
    EXPECT_TRUE(codec.ok()) << codec.status().ToString();
    return;
  }
  ASSERT_FALSE(codec.ok());
  EXPECT_EQ(codec.status().code(), StatusCode::kUnavailable) << codec.status().ToString();
  EXPECT_NE(codec.status().message().find("no CUDA device"), std::string::npos) << codec.status().ToString();
}

TEST(DeviceDelta, GpuAnnouncementsOfferOnlyAPlausibleDelta) {
  // The consumer decodes the offer before it answers: records of at least
  // kRecordHeaderBytes each, one or more, smaller than the image.
  internal::Announce a;
  a.kind = internal::kAnnounceGpu;
  a.version = 7;
  a.image_bytes = 1 << 20;
  internal::GpuPayload p;
  p.header_bytes = 4096;
  p.chunk_bytes = 1 << 16;
  internal::SetTierPayload(p, &a);
  auto full = internal::DecodeGpuPayload(a);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->delta_records_bytes, 0u);  // no delta offered
  p.delta_records_bytes = 48;
  p.delta_record_count = 2;
  internal::SetTierPayload(p, &a);
  EXPECT_TRUE(internal::DecodeGpuPayload(a).ok());
  struct Bad {
    uint64_t bytes, count;
  };
  for (const Bad& b : {Bad{48, 0}, Bad{48, 3}, Bad{uint64_t{1} << 20, 1}, Bad{~uint64_t{0}, 1}}) {
    p.delta_records_bytes = b.bytes;
    p.delta_record_count = b.count;
    internal::SetTierPayload(p, &a);
    auto d = internal::DecodeGpuPayload(a);
    ASSERT_FALSE(d.ok()) << b.bytes << " bytes in " << b.count << " records";
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(d.status().message().find("a delta of " + std::to_string(b.bytes) + " bytes"),
              std::string::npos)
        << d.status().ToString();
  }
}

TEST(DeviceDelta, TablesCompareNamesSizesAndOffsets) {
  std::mt19937_64 rng(9);
  Model m;
  m.tensors.push_back({"a", DType::kF32, 5, {}});
  m.tensors.push_back({"b", DType::kBF16, 3, {}});
  for (Spec& s : m.tensors) s.bytes = RandomBytes(rng, static_cast<std::size_t>(s.n) * DTypeSize(s.dtype));
  const Bytes v1 = m.Image(1);
  auto image = delta::internal::ParseImage(v1.data(), v1.size(), "v1");
  ASSERT_TRUE(image.ok());
  const auto table = internal::DeviceDeltaTable(image->state, v1.data() + image->info.data_offset);
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[0].offset, 0u);  // "a": 5 F32 elements first
  EXPECT_EQ(table[0].bytes, 20u);
  EXPECT_EQ(table[1].offset, 20u);
  EXPECT_EQ(table[1].element_bytes, 2u);
  EXPECT_TRUE(internal::SameDeviceDeltaTable(table, table));
  auto renamed = table;
  renamed[1].name = "c";
  EXPECT_FALSE(internal::SameDeviceDeltaTable(table, renamed));
  auto moved = table;
  moved[1].offset += 2;
  EXPECT_FALSE(internal::SameDeviceDeltaTable(table, moved));
  EXPECT_FALSE(internal::SameDeviceDeltaTable(table, {table[0]}));
}

#if VIPER_HAVE_CUDA

// Every element size and odd counts: tensors start at offsets that are not
// multiples of their element size (the unaligned loads), one is empty.
Model RandomModel(std::mt19937_64& rng) {
  Model m;
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kU8, DType::kI64, DType::kF32, DType::kBF16};
  const int tensors = 2 + static_cast<int>(rng() % 6);
  for (int i = 0; i < tensors; ++i) {
    const DType d = dtypes[rng() % 6];
    const int64_t n = i == 1 ? 0 : static_cast<int64_t>(rng() % 20000) + 1;
    m.tensors.push_back({"t" + std::to_string(i), d, n, {}});
  }
  // One large tensor: several compaction blocks and scan segments.
  m.tensors.push_back({"big", DType::kF32, 300001, {}});
  for (Spec& s : m.tensors) s.bytes = RandomBytes(rng, static_cast<std::size_t>(s.n) * DTypeSize(s.dtype));
  return m;
}

struct DeviceImages {
  delta::internal::Image base, target;
  std::vector<DeviceDeltaTensor> table;
};

std::vector<DeviceDeltaTensor> TableOf(const delta::internal::Image& image, const Bytes& bytes) {
  return internal::DeviceDeltaTable(image.state, bytes.data() + image.info.data_offset);
}

// A data section on the device at `shift` bytes past a fresh allocation.
struct OnDevice {
  internal::DeviceBuffer buffer;
  std::byte* data = nullptr;
};
OnDevice Upload(const std::byte* p, uint64_t n, uint64_t shift, uint64_t room = 0) {
  OnDevice d;
  auto b = internal::DeviceBuffer::Allocate(n + shift + room + 8);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  d.buffer = std::move(*b);
  d.data = d.buffer.data() + shift;
  EXPECT_EQ(cudaMemset(d.buffer.data(), 0, d.buffer.capacity()), cudaSuccess);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(d.data, p, n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  return d;
}
Bytes Download(const std::byte* p, uint64_t n) {
  Bytes out(n);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(out.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return out;
}

// Host Encode and the device codec on one pair of images: the same records
// (or both "not smaller"), and the device records rebuild the target.
void CompareWithHost(DeviceDeltaCodec* codec, const Bytes& v1, const Bytes& v2, uint64_t shift,
                     const std::string& what) {
  SCOPED_TRACE(what);
  Bytes host(v2.size());
  auto s = delta::Encode(v1.data(), v1.size(), v2.data(), v2.size(), host.data(), host.size());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto b = delta::internal::ParseImage(v1.data(), v1.size(), "base");
  auto t = delta::internal::ParseImage(v2.data(), v2.size(), "target");
  ASSERT_TRUE(b.ok() && t.ok());
  const uint64_t data_bytes = v2.size() - t->info.data_offset;
  const std::vector<DeviceDeltaTensor> table = TableOf(*b, v1);
  // Encode's limit for the records: the room (the data section - 1) less the
  // fixed header and the header patch.
  const uint64_t head = delta::kFixedHeaderBytes + s->header_patch_bytes;
  ASSERT_GT(data_bytes - 1, head);
  const uint64_t limit = data_bytes - 1 - head;
  OnDevice base = Upload(v1.data() + b->info.data_offset, data_bytes, shift, 0);
  OnDevice target = Upload(v2.data() + t->info.data_offset, data_bytes, shift, 0);
  OnDevice out = Upload(nullptr, 0, 0, limit);
  auto records = codec->Encode(base.data, target.data, table, limit, out.data);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  if (s->full) {
    // Only "not smaller" can happen here (same table, newer version).
    EXPECT_FALSE(records->fits) << s->reason;
    return;
  }
  ASSERT_TRUE(records->fits);
  const uint64_t records_at = head;
  ASSERT_EQ(records->bytes, s->delta_bytes - records_at);
  const Bytes device_records = Download(out.data, records->bytes);
  const Bytes host_records(host.begin() + records_at, host.begin() + s->delta_bytes);
  ASSERT_EQ(device_records.size(), host_records.size());
  for (std::size_t i = 0; i < host_records.size(); ++i) {
    ASSERT_EQ(device_records[i], host_records[i]) << "first difference at record byte " << i;
  }
  EXPECT_EQ(records->record_count, s->tensors_dense + s->tensors_sparse);
  ASSERT_EQ(records->choices.size(), s->tensors.size());
  for (std::size_t i = 0; i < s->tensors.size(); ++i) {
    EXPECT_EQ(records->choices[i].encoding, s->tensors[i].encoding) << "tensor " << i;
  }
  // apply(base, delta) == target, on the device; its sum64 the target's.
  ASSERT_TRUE(codec->Apply(base.data, table, out.data, records->bytes, records->record_count).ok());
  const Bytes rebuilt = Download(base.data, data_bytes);
  EXPECT_TRUE(std::memcmp(rebuilt.data(), v2.data() + t->info.data_offset, data_bytes) == 0);
}

TEST(DeviceDelta, RecordsAreTheHostEncodersByteForByteAndRebuildTheTarget) {
  std::string why;
  if (!CudaDeviceAvailable(&why)) GTEST_SKIP() << why;
  auto codec = DeviceDeltaCodec::Create(0);
  ASSERT_TRUE(codec.ok()) << codec.status().ToString();
  std::mt19937_64 rng(27);
  const double fractions[] = {0.0, 0.0005, 0.02, 0.2, 0.5, 0.9, 0.97, 1.0};
  for (int round = 0; round < 24; ++round) {
    Model m = RandomModel(rng);
    const Bytes v1 = m.Image(10 + round);
    for (Spec& s : m.tensors) {
      // Per tensor a fraction; some tensors frozen.
      if (rng() % 4 == 0) continue;
      Change(rng, &s, fractions[rng() % 8]);
    }
    const Bytes v2 = m.Image(11 + round);
    CompareWithHost(codec->get(), v1, v2, round % 3 == 2 ? 1 : 0, "round " + std::to_string(round));
  }
}

TEST(DeviceDelta, OneFractionEverywhere) {
  // F32 and BF16 models with one changed fraction in every tensor, from
  // frozen to dense, then the early stop on its own.
  std::string why;
  if (!CudaDeviceAvailable(&why)) GTEST_SKIP() << why;
  auto codec = DeviceDeltaCodec::Create(0);
  ASSERT_TRUE(codec.ok()) << codec.status().ToString();
  std::mt19937_64 rng(3);
  for (DType d : {DType::kF32, DType::kBF16}) {
    for (double f : {0.001, 0.02, 0.1, 0.3, 0.6, 0.95, 0.99}) {
      Model m;
      m.tensors.push_back({"w", d, 250007, {}});
      m.tensors.push_back({"b", d, 1023, {}});
      for (Spec& s : m.tensors)
        s.bytes = RandomBytes(rng, static_cast<std::size_t>(s.n) * DTypeSize(s.dtype));
      const Bytes v1 = m.Image(1);
      for (Spec& s : m.tensors) Change(rng, &s, f);
      const Bytes v2 = m.Image(2);
      CompareWithHost(codec->get(), v1, v2, 0, std::string(ToString(d)) + " " + std::to_string(f));
    }
    // The host scan's early stop where the whole tensor would not stop it:
    // its first 30% all changed (the running density passes e / (e + 1/8)
    // after 4096 elements), the rest unchanged: 30% overall, still dense.
    Model m;
    m.tensors.push_back({"front", d, 250007, {}});
    m.tensors.push_back({"back", d, 250007, {}});
    for (Spec& s : m.tensors) s.bytes = RandomBytes(rng, static_cast<std::size_t>(s.n) * DTypeSize(s.dtype));
    const Bytes v1 = m.Image(1);
    const std::size_t e = DTypeSize(d);
    for (int64_t i = 0; i < m.tensors[0].n * 3 / 10; ++i) m.tensors[0].bytes[i * e] ^= std::byte{1};
    for (int64_t i = m.tensors[1].n * 7 / 10; i < m.tensors[1].n; ++i) m.tensors[1].bytes[i * e] ^= std::byte{1};
    const Bytes v2 = m.Image(2);
    CompareWithHost(codec->get(), v1, v2, 0, std::string(ToString(d)) + " front-loaded");
  }
}

TEST(DeviceDelta, HostileRecordsAreRefusedAndNothingIsWritten) {
  std::string why;
  if (!CudaDeviceAvailable(&why)) GTEST_SKIP() << why;
  auto codec = DeviceDeltaCodec::Create(0);
  ASSERT_TRUE(codec.ok()) << codec.status().ToString();
  std::mt19937_64 rng(5);
  Model m;
  m.tensors.push_back({"w", DType::kF32, 40000, {}});
  m.tensors.push_back({"h", DType::kBF16, 3001, {}});
  for (Spec& s : m.tensors) s.bytes = RandomBytes(rng, static_cast<std::size_t>(s.n) * DTypeSize(s.dtype));
  const Bytes v1 = m.Image(1);
  Change(rng, &m.tensors[0], 0.01);  // sparse
  Change(rng, &m.tensors[1], 1.0);   // dense
  const Bytes v2 = m.Image(2);
  auto b = delta::internal::ParseImage(v1.data(), v1.size(), "base");
  ASSERT_TRUE(b.ok());
  const uint64_t data_bytes = v1.size() - b->info.data_offset;
  const std::vector<DeviceDeltaTensor> table = TableOf(*b, v1);
  OnDevice base = Upload(v1.data() + b->info.data_offset, data_bytes, 0);
  OnDevice target = Upload(v2.data() + b->info.data_offset, data_bytes, 0);
  OnDevice out = Upload(nullptr, 0, 0, data_bytes);
  auto records = (*codec)->Encode(base.data, target.data, table, data_bytes, out.data);
  ASSERT_TRUE(records.ok() && records->fits);
  ASSERT_EQ(records->record_count, 2u);
  ASSERT_EQ(records->choices[0].encoding, delta::Encoding::kSparseGaps);
  const Bytes good = Download(out.data, records->bytes);
  const Bytes before = Download(base.data, data_bytes);
  // Each field of the first record's header made wrong, then truncations.
  struct Edit {
    std::size_t at;
    uint64_t value;
    int bytes;
    const char* what;
  };
  const Edit edits[] = {{0, 7, 4, "tensor index past the table"},
                        {4, 2, 1, "unknown encoding"},
                        {5, 2, 1, "element size"},
                        {6, 60, 1, "Rice parameter"},
                        {7, 1, 1, "reserved byte"},
                        {8, 0, 8, "zero changed elements"},
                        {8, 40001, 8, "more changed elements than the tensor has"},
                        {16, 1ull << 40, 8, "payload past the delta"},
                        {16, 3, 8, "payload shorter than its values"}};
  for (const Edit& e : edits) {
    Bytes bad = good;
    for (int i = 0; i < e.bytes; ++i) bad[e.at + i] = static_cast<std::byte>(e.value >> (8 * i));
    OnDevice d = Upload(bad.data(), bad.size(), 0);
    Status st = (*codec)->Apply(base.data, table, d.data, bad.size(), records->record_count);
    EXPECT_FALSE(st.ok()) << e.what;
    EXPECT_EQ(Download(base.data, data_bytes), before) << e.what << ": written";
  }
  for (uint64_t cut : {uint64_t{10}, records->bytes / 2, records->bytes - 1}) {
    OnDevice d = Upload(good.data(), cut, 0);
    EXPECT_FALSE((*codec)->Apply(base.data, table, d.data, cut, records->record_count).ok()) << cut;
    EXPECT_EQ(Download(base.data, data_bytes), before) << "cut at " << cut << ": written";
  }
  // A position past the tensor: the first gap's unary part made 2048 one-bits (the
  // tensor has 40000 elements; with the Rice parameter near log2 of the mean
  // gap, 5-7, q may be at most 1250).
  Bytes far = good;
  for (std::size_t i = delta::kRecordHeaderBytes; i < delta::kRecordHeaderBytes + 256; ++i)
    far[i] = std::byte{0xff};
  OnDevice d = Upload(far.data(), far.size(), 0);
  Status st = (*codec)->Apply(base.data, table, d.data, far.size(), records->record_count);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(Download(base.data, data_bytes), before);
}

#endif  // VIPER_HAVE_CUDA

}  // namespace
}  // namespace transports
}  // namespace viper
