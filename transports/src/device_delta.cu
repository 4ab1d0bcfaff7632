// Delta records on the device (device_delta.h). Per tensor: a count of the
// changed elements (bit comparison, a count per block of kBlockItems
// elements), the block counts scanned into offsets by one block, then for a
// tensor that may be sparse an ordered compaction (each thread its
// kItems consecutive elements, a block scan of the thread counts) writing
// the changed elements' indices, which also evaluates the host scan's early
// stop per changed element; the three Rice sizes reduced from the gaps; and
// for a sparse record the Rice codes written at bit offsets from a scan of
// the code lengths (atomicOr into 32-bit words; little-endian words hold the
// bits in stream order) and the new values gathered.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "delta_internal.h"
#include "device_buffer.h"
#include "device_delta.h"

namespace viper {
namespace transports {
namespace internal {
namespace {

using delta::Encoding;
using delta::kRecordHeaderBytes;
using ull = unsigned long long;

constexpr int kThreads = 256;
constexpr int kItems = 8;
constexpr ull kBlockItems = static_cast<ull>(kThreads) * kItems;
constexpr int kScanThreads = 1024;

// Element i of `p` (E bytes) as a word; `Aligned`: p is E-aligned.
template <unsigned E, bool Aligned>
__device__ __forceinline__ ull LoadElement(const unsigned char* p, ull i) {
  if constexpr (Aligned) {
    if constexpr (E == 1) return p[i];
    if constexpr (E == 2) return reinterpret_cast<const unsigned short*>(p)[i];
    if constexpr (E == 4) return reinterpret_cast<const unsigned int*>(p)[i];
    if constexpr (E == 8) return reinterpret_cast<const ull*>(p)[i];
  }
  ull v = 0;
  for (unsigned b = 0; b < E; ++b) v |= static_cast<ull>(p[i * E + b]) << (8 * b);
  return v;
}

template <unsigned E, bool Aligned>
__device__ __forceinline__ bool Changed(const unsigned char* a, const unsigned char* b, ull i) {
  return LoadElement<E, Aligned>(a, i) != LoadElement<E, Aligned>(b, i);
}

// Exclusive scan of one value per thread across a block of N threads;
// `total` gets the block's sum.
template <int N>
__device__ ull ExclusiveScan(ull v, ull* total) {
  __shared__ ull s[2][N];
  int in = 0;
  s[0][threadIdx.x] = v;
  __syncthreads();
  for (int off = 1; off < N; off <<= 1) {
    const ull x =
        s[in][threadIdx.x] + (threadIdx.x >= static_cast<unsigned>(off) ? s[in][threadIdx.x - off] : 0);
    s[1 - in][threadIdx.x] = x;
    in = 1 - in;
    __syncthreads();
  }
  const ull inclusive = s[in][threadIdx.x];
  *total = s[in][N - 1];
  __syncthreads();
  return inclusive - v;
}

__device__ ull BlockExclusiveScan(ull v, ull* total) { return ExclusiveScan<kThreads>(v, total); }

__device__ ull BlockSum(ull v) {
  ull total;
  BlockExclusiveScan(v, &total);
  return total;
}

// Changed elements per block of kBlockItems.
template <unsigned E, bool Aligned>
__global__ void CountKernel(const unsigned char* a, const unsigned char* b, ull n, ull* block_counts) {
  const ull first = blockIdx.x * kBlockItems + threadIdx.x * kItems;
  ull c = 0;
  for (int j = 0; j < kItems; ++j) {
    const ull i = first + j;
    if (i < n && Changed<E, Aligned>(a, b, i)) ++c;
  }
  const ull total = BlockSum(c);
  if (threadIdx.x == 0) block_counts[blockIdx.x] = total;
}

// In place: the `nb` block counts become exclusive offsets; *total their sum. One block.
__global__ void ScanCountsKernel(ull* counts, ull nb, ull* total) {
  const ull seg = (nb + kScanThreads - 1) / kScanThreads;
  const ull lo = min(nb, threadIdx.x * seg), hi = min(nb, lo + seg);
  ull sum = 0;
  for (ull i = lo; i < hi; ++i) sum += counts[i];
  ull all;
  ull run = ExclusiveScan<kScanThreads>(sum, &all);
  for (ull i = lo; i < hi; ++i) {
    const ull c = counts[i];
    counts[i] = run;
    run += c;
  }
  if (threadIdx.x == 0) *total = all;
}

// The changed elements' indices in order (block offsets from ScanCountsKernel),
// and flags[0] = 1 when the host scan would have stopped at one of them
// (after 4096 elements, k (8E + 1) >= next 8E: dense).
template <unsigned E, bool Aligned>
__global__ void CompactKernel(const unsigned char* a, const unsigned char* b, ull n, const ull* block_offsets,
                              ull* idx, unsigned int* stop) {
  const ull first = blockIdx.x * kBlockItems + threadIdx.x * kItems;
  unsigned mask = 0;
  ull c = 0;
  for (int j = 0; j < kItems; ++j) {
    const ull i = first + j;
    if (i < n && Changed<E, Aligned>(a, b, i)) mask |= 1u << j, ++c;
  }
  ull total;
  ull at = block_offsets[blockIdx.x] + BlockExclusiveScan(c, &total);
  bool stops = false;
  for (int j = 0; j < kItems; ++j) {
    if (!(mask & (1u << j))) continue;
    const ull i = first + j;
    idx[at] = i;
    const ull k = at + 1, next = i + 1;
    stops |= next >= 4096 && k * (8 * E + 1) >= next * 8 * E;
    ++at;
  }
  if (stops) atomicOr(stop, 1u);
}

__device__ __forceinline__ ull Gap(const ull* idx, ull j) { return idx[j] - (j == 0 ? 0 : idx[j - 1] + 1); }

// sums[i] += sum of gap >> (r0 + i), i < 3.
__global__ void RiceSumsKernel(const ull* idx, ull k, unsigned r0, ull* sums) {
  ull h[3] = {0, 0, 0};
  for (ull j = blockIdx.x * static_cast<ull>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<ull>(gridDim.x) * blockDim.x) {
    const ull g = Gap(idx, j);
    h[0] += g >> r0;
    h[1] += g >> (r0 + 1);
    h[2] += g >> (r0 + 2);
  }
  for (int i = 0; i < 3; ++i) {
    const ull t = BlockSum(h[i]);
    if (threadIdx.x == 0 && t != 0) atomicAdd(sums + i, t);
  }
}

__device__ __forceinline__ ull CodeBits(const ull* idx, ull j, unsigned r) {
  return (Gap(idx, j) >> r) + 1 + r;
}

// Bits of the Rice codes per block of kBlockItems gaps.
__global__ void CodeBitsKernel(const ull* idx, ull k, unsigned r, ull* block_bits) {
  const ull first = blockIdx.x * kBlockItems + threadIdx.x * kItems;
  ull bits = 0;
  for (int j = 0; j < kItems; ++j) {
    if (first + j < k) bits += CodeBits(idx, first + j, r);
  }
  const ull total = BlockSum(bits);
  if (threadIdx.x == 0) block_bits[blockIdx.x] = total;
}

// ORs the low `count` (<= 32) bits of `v` in at bit `pos` of `words`.
__device__ __forceinline__ void OrBits(unsigned int* words, ull pos, unsigned int v, unsigned count) {
  if (count == 0 || v == 0) return;
  const ull w = pos / 32;
  const unsigned shift = static_cast<unsigned>(pos % 32);
  const ull wide = static_cast<ull>(v & (count == 32 ? ~0u : (1u << count) - 1)) << shift;
  atomicOr(words + w, static_cast<unsigned int>(wide));
  if (shift + count > 32) atomicOr(words + w + 1, static_cast<unsigned int>(wide >> 32));
}

// Writes each gap's code (gap >> r one-bits, a zero, the low r bits) at its
// bit offset (block offsets from ScanCountsKernel over CodeBitsKernel's sums).
__global__ void RiceWriteKernel(const ull* idx, ull k, unsigned r, const ull* block_offsets,
                                unsigned int* words) {
  const ull first = blockIdx.x * kBlockItems + threadIdx.x * kItems;
  ull bits = 0;
  for (int j = 0; j < kItems; ++j) {
    if (first + j < k) bits += CodeBits(idx, first + j, r);
  }
  ull total;
  ull pos = block_offsets[blockIdx.x] + BlockExclusiveScan(bits, &total);
  for (int j = 0; j < kItems && first + j < k; ++j) {
    const ull g = Gap(idx, first + j);
    ull q = g >> r;
    for (; q >= 32; q -= 32, pos += 32) OrBits(words, pos, ~0u, 32);
    OrBits(words, pos, static_cast<unsigned int>((1ull << q) - 1), static_cast<unsigned>(q));
    pos += q + 1;  // the zero
    for (unsigned done = 0; done < r; done += 32) {
      const unsigned n = min(32u, r - done);
      OrBits(words, pos + done, static_cast<unsigned int>(g >> done), n);
    }
    pos += r;
  }
}

// out[j] = element idx[j] of `b` (E bytes each).
__global__ void GatherKernel(const unsigned char* b, const ull* idx, ull k, unsigned e, unsigned char* out) {
  for (ull j = blockIdx.x * static_cast<ull>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<ull>(gridDim.x) * blockDim.x) {
    const unsigned char* from = b + idx[j] * e;
    for (unsigned i = 0; i < e; ++i) out[j * e + i] = from[i];
  }
}

// Element idx[j] of `data` = values[j] (E bytes each).
__global__ void ScatterKernel(unsigned char* data, const ull* idx, ull k, unsigned e,
                              const unsigned char* values) {
  for (ull j = blockIdx.x * static_cast<ull>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<ull>(gridDim.x) * blockDim.x) {
    unsigned char* to = data + idx[j] * e;
    for (unsigned i = 0; i < e; ++i) to[i] = values[j * e + i];
  }
}

unsigned int GridFor(ull items) {
  return static_cast<unsigned int>(std::max<ull>(1, std::min<ull>((items + kThreads - 1) / kThreads, 4096)));
}

template <unsigned E>
void LaunchCount(bool aligned, const unsigned char* a, const unsigned char* b, ull n, ull nb, ull* counts,
                 cudaStream_t s) {
  if (aligned) {
    CountKernel<E, true><<<static_cast<unsigned int>(nb), kThreads, 0, s>>>(a, b, n, counts);
  } else {
    CountKernel<E, false><<<static_cast<unsigned int>(nb), kThreads, 0, s>>>(a, b, n, counts);
  }
}

template <unsigned E>
void LaunchCompact(bool aligned, const unsigned char* a, const unsigned char* b, ull n, ull nb,
                   const ull* offsets, ull* idx, unsigned int* stop, cudaStream_t s) {
  if (aligned) {
    CompactKernel<E, true><<<static_cast<unsigned int>(nb), kThreads, 0, s>>>(a, b, n, offsets, idx, stop);
  } else {
    CompactKernel<E, false><<<static_cast<unsigned int>(nb), kThreads, 0, s>>>(a, b, n, offsets, idx, stop);
  }
}

}  // namespace

struct DeviceDeltaCodec::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  DeviceBuffer counts;   // per tensor its block counts, then the totals
  DeviceBuffer idx;      // one tensor's changed indices (u64), or positions to scatter
  DeviceBuffer bits;     // Rice codes being written (32-bit words)
  DeviceBuffer scalars;  // 3 Rice sums, the stop flag, a scan total
  DeviceBuffer spare;    // block offsets of the code-length scan

  ~Impl() {
    if (stream) cudaStreamDestroy(stream);
  }
  // Grows `b` to at least `bytes` (contents not kept).
  static Status Reserve(DeviceBuffer* b, uint64_t bytes) {
    if (b->capacity() >= bytes) return Status::Ok();
    const uint64_t grown = std::max<uint64_t>(bytes, b->capacity() * 2);
    *b = DeviceBuffer();  // free first
    VIPER_ASSIGN_OR_RETURN(*b, DeviceBuffer::Allocate(grown));
    return Status::Ok();
  }
  Status Sync() {
    VIPER_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    VIPER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return Status::Ok();
  }
};

DeviceDeltaCodec::DeviceDeltaCodec(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceDeltaCodec::~DeviceDeltaCodec() = default;

StatusOr<std::unique_ptr<DeviceDeltaCodec>> DeviceDeltaCodec::Create(int device) {
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  VIPER_RETURN_IF_ERROR(OpenGpuStream(device, &impl->stream));
  VIPER_ASSIGN_OR_RETURN(impl->scalars, DeviceBuffer::Allocate(64));
  return std::unique_ptr<DeviceDeltaCodec>(new DeviceDeltaCodec(std::move(impl)));
}

// (Over 80 lines: the host side of Close and Write of delta.cc, per tensor.)
StatusOr<DeviceDeltaRecords> DeviceDeltaCodec::Encode(const std::byte* base, const std::byte* target,
                                                      const std::vector<DeviceDeltaTensor>& table,
                                                      uint64_t limit, std::byte* out) {
  Impl& d = *impl_;
  cudaStream_t s = d.stream;
  const auto* a8 = reinterpret_cast<const unsigned char*>(base);
  const auto* b8 = reinterpret_cast<const unsigned char*>(target);
  // 1. Every tensor's changed elements counted, block offsets scanned, one wait.
  std::vector<uint64_t> first_block(table.size() + 1, 0);
  for (std::size_t i = 0; i < table.size(); ++i) {
    const uint64_t n = table[i].bytes / table[i].element_bytes;
    first_block[i + 1] = first_block[i] + (n + kBlockItems - 1) / kBlockItems;
  }
  const uint64_t totals_at = first_block.back();
  VIPER_RETURN_IF_ERROR(Impl::Reserve(&d.counts, 8 * (totals_at + table.size() + 1)));
  ull* counts = reinterpret_cast<ull*>(d.counts.data());
  ull* totals = counts + totals_at;
  VIPER_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(totals, 0, 8 * (table.size() + 1), s));
  auto aligned = [](const std::byte* p, unsigned e) { return reinterpret_cast<uintptr_t>(p) % e == 0; };
  for (std::size_t i = 0; i < table.size(); ++i) {
    const DeviceDeltaTensor& t = table[i];
    const unsigned e = t.element_bytes;
    const ull n = t.bytes / e, nb = first_block[i + 1] - first_block[i];
    if (n == 0) continue;
    const unsigned char* a = a8 + t.offset;
    const unsigned char* b = b8 + t.offset;
    const bool al = aligned(base + t.offset, e) && aligned(target + t.offset, e);
    ull* c = counts + first_block[i];
    switch (e) {
      case 1:
        LaunchCount<1>(al, a, b, n, nb, c, s);
        break;
      case 2:
        LaunchCount<2>(al, a, b, n, nb, c, s);
        break;
      case 4:
        LaunchCount<4>(al, a, b, n, nb, c, s);
        break;
      case 8:
        LaunchCount<8>(al, a, b, n, nb, c, s);
        break;
      default:
        return InvalidArgumentError("tensor '" + t.name + "': element size " + std::to_string(e) +
                                    " (1, 2, 4 or 8)");
    }
    ScanCountsKernel<<<1, kScanThreads, 0, s>>>(c, nb, totals + i);
  }
  std::vector<uint64_t> changed(table.size(), 0);
  if (!table.empty()) {
    VIPER_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(changed.data(), totals, 8 * table.size(), cudaMemcpyDeviceToHost, s));
  }
  VIPER_RETURN_IF_ERROR(d.Sync());

  // 2. Per tensor the host rule (delta.cc's Close), then its record.
  DeviceDeltaRecords result;
  ull* scalars = reinterpret_cast<ull*>(d.scalars.data());
  for (std::size_t i = 0; i < table.size(); ++i) {
    const DeviceDeltaTensor& t = table[i];
    const unsigned e = t.element_bytes;
    const ull n = t.bytes / e, k = changed[i];
    DeviceDeltaChoice c;
    c.changed_elements = k;
    if (k == 0) {
      result.choices.push_back(c);
      continue;
    }
    c.encoding = Encoding::kDense;
    uint64_t payload = t.bytes;
    // The host scan stops (dense) once k E + ceil(k / 8) reaches the tensor's bytes.
    if (k * e + (k + 7) / 8 < t.bytes) {
      VIPER_RETURN_IF_ERROR(Impl::Reserve(&d.idx, 8 * k));
      ull* idx = reinterpret_cast<ull*>(d.idx.data());
      auto* stop = reinterpret_cast<unsigned int*>(scalars + 3);
      VIPER_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scalars, 0, 32, s));
      const ull nb = first_block[i + 1] - first_block[i];
      const unsigned char* a = a8 + t.offset;
      const unsigned char* b = b8 + t.offset;
      const bool al = aligned(base + t.offset, e) && aligned(target + t.offset, e);
      const ull* offsets = counts + first_block[i];
      switch (e) {
        case 1:
          LaunchCompact<1>(al, a, b, n, nb, offsets, idx, stop, s);
          break;
        case 2:
          LaunchCompact<2>(al, a, b, n, nb, offsets, idx, stop, s);
          break;
        case 4:
          LaunchCompact<4>(al, a, b, n, nb, offsets, idx, stop, s);
          break;
        default:
          LaunchCompact<8>(al, a, b, n, nb, offsets, idx, stop, s);
          break;
      }
      // The Rice parameter near log2 of the mean gap, best of three by exact size.
      const uint64_t mean_gap = (n - k) / k;
      const unsigned log_gap = mean_gap == 0 ? 0 : 63 - static_cast<unsigned>(__builtin_clzll(mean_gap));
      const unsigned r0 = std::min(log_gap == 0 ? 0u : log_gap - 1, 54u);
      RiceSumsKernel<<<GridFor(k), kThreads, 0, s>>>(idx, k, r0, scalars);
      ull host[4];
      VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, scalars, 32, cudaMemcpyDeviceToHost, s));
      VIPER_RETURN_IF_ERROR(d.Sync());
      const bool stopped = (host[3] & 0xffffffffu) != 0;
      for (unsigned j = 0; !stopped && j < 3; ++j) {
        const uint64_t sparse = (k * (1 + r0 + j) + host[j] + 7) / 8 + k * e;
        if (sparse < payload) c.encoding = Encoding::kSparseGaps, payload = sparse, c.rice = r0 + j;
      }
    }
    c.record_bytes = kRecordHeaderBytes + payload;
    result.choices.push_back(c);
    if (result.bytes + c.record_bytes > limit) {  // fits = false
      VIPER_RETURN_IF_ERROR(d.Sync());
      return result;
    }
    std::byte* rec = out + result.bytes;
    std::array<std::byte, kRecordHeaderBytes> header;
    delta::internal::PutRecordHeader(header.data(), static_cast<uint32_t>(i), c.encoding, e, c.rice,
                                     c.encoding == Encoding::kDense ? n : k, payload);
    // Pageable source: the copy has taken the bytes when the call returns.
    VIPER_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(rec, header.data(), kRecordHeaderBytes, cudaMemcpyHostToDevice, s));
    std::byte* p = rec + kRecordHeaderBytes;
    if (c.encoding == Encoding::kDense) {
      VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p, target + t.offset, t.bytes, cudaMemcpyDeviceToDevice, s));
    } else {
      const ull* idx = reinterpret_cast<const ull*>(d.idx.data());
      const uint64_t values_at = payload - k * e;
      const uint64_t words = (values_at + 3) / 4;
      const ull nb = (k + kBlockItems - 1) / kBlockItems;
      VIPER_RETURN_IF_ERROR(Impl::Reserve(&d.bits, 4 * words));
      VIPER_RETURN_IF_ERROR(Impl::Reserve(&d.spare, 8 * nb));
      auto* w = reinterpret_cast<unsigned int*>(d.bits.data());
      auto* offsets = reinterpret_cast<ull*>(d.spare.data());
      VIPER_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w, 0, 4 * words, s));
      CodeBitsKernel<<<static_cast<unsigned int>(nb), kThreads, 0, s>>>(idx, k, c.rice, offsets);
      ScanCountsKernel<<<1, kScanThreads, 0, s>>>(offsets, nb, scalars + 4);
      RiceWriteKernel<<<static_cast<unsigned int>(nb), kThreads, 0, s>>>(idx, k, c.rice, offsets, w);
      VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p, w, values_at, cudaMemcpyDeviceToDevice, s));
      GatherKernel<<<GridFor(k), kThreads, 0, s>>>(b8 + t.offset, idx, k, e,
                                                   reinterpret_cast<unsigned char*>(p + values_at));
      // The scratch (idx, bits) is reused by the next tensor.
      VIPER_RETURN_IF_ERROR(d.Sync());
    }
    result.bytes += c.record_bytes;
    ++result.record_count;
  }
  VIPER_RETURN_IF_ERROR(d.Sync());
  result.fits = true;
  return result;
}

namespace {

// One checked record of Apply.
struct DeviceRecord {
  uint32_t index = 0;
  Encoding encoding = Encoding::kDense;
  uint64_t count = 0, payload_at = 0, payload_bytes = 0;
  std::vector<uint64_t> positions;  // sparse: decoded on the host
};

}  // namespace

// Every record checked as delta_apply.cc checks a host delta's (the same
// ReadRecordHeader and CheckPositions), reading the record headers and the
// positions back from the device; then the writes.
Status DeviceDeltaCodec::Apply(std::byte* data, const std::vector<DeviceDeltaTensor>& table,
                               const std::byte* records, uint64_t records_bytes, uint64_t record_count) {
  Impl& d = *impl_;
  cudaStream_t s = d.stream;
  std::vector<delta::internal::RecordTensor> tensors;
  for (const DeviceDeltaTensor& t : table) tensors.push_back({t.bytes, t.element_bytes, t.name});
  std::vector<DeviceRecord> checked;
  uint64_t at = 0;
  int64_t previous = -1;
  std::vector<std::byte> bits;
  for (uint64_t r = 0; r < record_count; ++r) {
    std::byte h[kRecordHeaderBytes] = {};
    const uint64_t n = std::min<uint64_t>(kRecordHeaderBytes, records_bytes - at);
    if (n > 0) VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpy(h, records + at, n, cudaMemcpyDeviceToHost));
    VIPER_ASSIGN_OR_RETURN(
        const delta::internal::RecordHeader rh,
        delta::internal::ReadRecordHeader(r, record_count, h, records_bytes - at, previous, tensors));
    previous = rh.index;
    at += kRecordHeaderBytes;
    DeviceRecord rec;
    rec.index = rh.index;
    rec.encoding = rh.encoding;
    rec.count = rh.count;
    rec.payload_at = at;
    rec.payload_bytes = rh.payload_bytes;
    at += rec.payload_bytes;
    if (rec.encoding == Encoding::kSparseGaps) {
      const uint64_t positions_bytes = rec.payload_bytes - rec.count * table[rec.index].element_bytes;
      bits.resize(positions_bytes);
      if (positions_bytes > 0) {
        VIPER_CUDA_RETURN_IF_ERROR(
            cudaMemcpy(bits.data(), records + rec.payload_at, positions_bytes, cudaMemcpyDeviceToHost));
      }
      VIPER_RETURN_IF_ERROR(delta::internal::CheckPositions(r, rh, tensors[rec.index],
                                                            reinterpret_cast<const uint8_t*>(bits.data()),
                                                            positions_bytes, &rec.positions));
    }
    checked.push_back(std::move(rec));
  }
  if (at != records_bytes) {
    return InvalidArgumentError("device delta has " + std::to_string(records_bytes - at) +
                                " bytes after its last record");
  }
  // Everything checked: now the writes.
  for (const DeviceRecord& rec : checked) {
    const DeviceDeltaTensor& t = table[rec.index];
    std::byte* dst = data + t.offset;
    const std::byte* payload = records + rec.payload_at;
    if (rec.encoding == Encoding::kDense) {
      VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, payload, t.bytes, cudaMemcpyDeviceToDevice, s));
      continue;
    }
    VIPER_RETURN_IF_ERROR(Impl::Reserve(&d.idx, 8 * rec.count));
    auto* idx = reinterpret_cast<ull*>(d.idx.data());
    VIPER_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(idx, rec.positions.data(), 8 * rec.count, cudaMemcpyHostToDevice, s));
    const uint64_t values_at = rec.payload_bytes - rec.count * t.element_bytes;
    ScatterKernel<<<GridFor(rec.count), kThreads, 0, s>>>(
        reinterpret_cast<unsigned char*>(dst), idx, rec.count, t.element_bytes,
        reinterpret_cast<const unsigned char*>(payload + values_at));
    VIPER_RETURN_IF_ERROR(d.Sync());  // idx is reused by the next record
  }
  return d.Sync();
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
