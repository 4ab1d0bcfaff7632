#include "staging.h"

#include "hmac_sha256.h"
#include "viper/transports/private_dir.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "viper/core/checksum.h"
#include "viper/core/safetensors.h"

namespace viper {
namespace transports {
namespace internal {

namespace {

void Memcpy(std::byte* dst, const std::byte* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

#if defined(__x86_64__)
// Bytes before `dst` is 64-byte (cache line) aligned, at most `bytes`.
std::size_t HeadBytes(const std::byte* dst, std::size_t bytes) {
  return std::min<std::size_t>((64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63, bytes);
}

// The streamed body goes in groups of kInterleavePages 4 KiB spans, one
// 128-byte step of each span in turn (glibc's large-copy scheme, which uses
// 4 pages). Measured on 600 MB in 8 tensors (bench/README.md): on the H100
// machine's Xeon a plain sequential streaming loop took 1.3x one glibc
// memcpy of 600 MB, this one 0.9-1.0x; on the AMD EPYC development VM the
// sequential loop was 0.85x and this one 1.0x.
constexpr std::size_t kSpanBytes = 4096, kInterleavePages = 8, kStepBytes = 128;

// Copies 128 bytes with streaming (non-temporal) stores; dst 64-byte aligned.
__attribute__((target("avx2"), always_inline)) inline void StreamStepAvx2(std::byte* dst,
                                                                          const std::byte* src) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 64));
  const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 96));
  _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), a);
  _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32), b);
  _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 64), c);
  _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 96), d);
}

__attribute__((always_inline)) inline void StreamStepSse2(std::byte* dst, const std::byte* src) {
  for (std::size_t k = 0; k < kStepBytes; k += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 48), d);
  }
}

// Both copies: head by memcpy up to dst's next cache line, then the body in
// interleaved groups, then whole steps, then the tail by memcpy. (Written out
// for each instruction set: a shared template would not inline the AVX2 step.)
constexpr std::size_t kGroupBytes = kSpanBytes * kInterleavePages;

__attribute__((target("avx2"))) void StreamCopyAvx2(std::byte* dst, const std::byte* src, std::size_t bytes, bool interleave) {
  const std::size_t head = HeadBytes(dst, bytes);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  std::size_t i = 0;
  for (; interleave && i + kGroupBytes <= bytes; i += kGroupBytes) {
    for (std::size_t off = i; off < i + kSpanBytes; off += kStepBytes) {
      for (std::size_t page = 0; page < kGroupBytes; page += kSpanBytes)
        StreamStepAvx2(dst + off + page, src + off + page);
    }
  }
  for (; i + kStepBytes <= bytes; i += kStepBytes) StreamStepAvx2(dst + i, src + i);
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();  // streaming stores are weakly ordered
}

void StreamCopySse2(std::byte* dst, const std::byte* src, std::size_t bytes, bool interleave) {
  const std::size_t head = HeadBytes(dst, bytes);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  std::size_t i = 0;
  for (; interleave && i + kGroupBytes <= bytes; i += kGroupBytes) {
    for (std::size_t off = i; off < i + kSpanBytes; off += kStepBytes) {
      for (std::size_t page = 0; page < kGroupBytes; page += kSpanBytes)
        StreamStepSse2(dst + off + page, src + off + page);
    }
  }
  for (; i + kStepBytes <= bytes; i += kStepBytes) StreamStepSse2(dst + i, src + i);
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
}
#endif

}  // namespace

namespace {

void StreamCopyWith(std::byte* dst, const std::byte* src, std::size_t bytes, bool interleave) {
  if (bytes == 0) return;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) {
    StreamCopyAvx2(dst, src, bytes, interleave);
  } else {
    StreamCopySse2(dst, src, bytes, interleave);
  }
#else
  (void)interleave;
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace

void StreamCopy(std::byte* dst, const std::byte* src, std::size_t bytes) {
  StreamCopyWith(dst, src, bytes, /*interleave=*/true);
}

void StreamCopySequential(std::byte* dst, const std::byte* src, std::size_t bytes) {
  StreamCopyWith(dst, src, bytes, /*interleave=*/false);
}

CopyPool::CopyPool(int threads) {
  VIPER_CHECK(threads >= 1);
  for (int id = 1; id < threads; ++id) workers_.emplace_back([this, id] { Work(id); });
}

CopyPool::~CopyPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void CopyPool::Run(int jobs, const std::function<void(int)>& job) {
  VIPER_CHECK(jobs >= 1 && jobs <= threads());
  if (jobs == 1) {
    job(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    jobs_ = jobs;
    busy_ = jobs - 1;
    ++batch_;
  }
  wake_.notify_all();
  job(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return busy_ == 0; });
  job_ = nullptr;
}

void CopyPool::Work(int id) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || batch_ != seen; });
    if (stop_) return;
    seen = batch_;
    if (id >= jobs_) continue;  // this batch needs fewer threads
    const std::function<void(int)>* job = job_;
    lock.unlock();
    (*job)(id);
    lock.lock();
    if (--busy_ == 0) done_.notify_one();
  }
}

std::vector<std::vector<CopyPiece>> PlanCopy(const ModelState& state, std::byte* dst, int jobs) {
  VIPER_CHECK(jobs >= 1);
  uint64_t total = 0;
  for (const Tensor& t : state.tensors()) total += t.size_bytes;
  // Range j is [cut[j], cut[j + 1]) of the offset from dst.
  std::vector<uint64_t> cut(jobs + 1, total);
  for (int j = 0; j < jobs; ++j) cut[j] = total * j / jobs / kCopyCutBytes * kCopyCutBytes;
  std::vector<std::vector<CopyPiece>> plan(jobs);
  uint64_t off = 0;  // of the tensor in the data section
  int j = 0;
  for (const Tensor& t : state.tensors()) {
    for (uint64_t done = 0; done < t.size_bytes;) {
      const uint64_t at = off + done;
      while (cut[j + 1] <= at) ++j;
      const uint64_t n = std::min<uint64_t>(t.size_bytes - done, cut[j + 1] - at);
      plan[j].push_back({dst + at, t.data + done, n});
      done += n;
    }
    off += t.size_bytes;
  }
  return plan;
}

std::string PadHeader(std::string header, uint64_t alignment) {
  VIPER_CHECK(header.size() >= 8);
  const uint64_t total = RoundUp(header.size(), alignment);
  header.append(total - header.size(), ' ');
  const uint64_t json = total - 8;
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((json >> (8 * i)) & 0xff);
  return header;
}

void StagedVersion::UseDevice(std::unique_ptr<DeviceImage> device) {
  on_device_ = true;
  device_ = std::move(device);
}

StagedVersion::~StagedVersion() = default;

std::byte* StagedVersion::base() const {
  if (on_device_) return device_->data();
  return const_cast<std::byte*>(buffer_.data());
}

uint64_t StagedVersion::capacity() const {
  if (on_device_) return device_->capacity();
  return buffer_.capacity();
}

Status StagedVersion::Reallocate(uint64_t bytes) {
  if (on_device_) return device_->Reallocate(bytes);
  buffer_ = AlignedBuffer();  // free first: two large buffers may not fit
  VIPER_ASSIGN_OR_RETURN(buffer_, AlignedBuffer::Allocate(bytes));
  return Status::Ok();
}

void StagedVersion::UseCopyThreads(int threads) {
  threads = std::max(threads, 1);
  if (threads == copy_threads_) return;
  pool_.reset();
  if (threads > 1) pool_ = std::make_unique<CopyPool>(threads);
  copy_threads_ = threads;
}

Status StagedVersion::Snapshot(const ModelState& state, uint64_t version, int64_t iteration,
                               int32_t producer_id, uint64_t min_capacity_bytes, bool hash_while_copying,
                               int copy_threads) {
  if (!on_device_) UseCopyThreads(copy_threads);
  uint64_t data_bytes = 0;
  for (const Tensor& t : state.tensors()) {
    if (t.memory != MemoryKind::kHost && !on_device_) {
      return InvalidArgumentError("tensor '" + t.name +
                                  "' is in device memory; the host and pfs tiers need host tensors");
    }
    if (t.size_bytes != t.ExpectedBytes()) {
      return InvalidArgumentError("tensor '" + t.name + "' has " + std::to_string(t.size_bytes) +
                                  " bytes, its shape needs " + std::to_string(t.ExpectedBytes()));
    }
    data_bytes += t.size_bytes;
  }
  // Is the layout the same as last time? Then only the bytes are copied.
  bool same = layout_.size() == state.size() && data_bytes == data_bytes_ && capacity() > 0;
  for (std::size_t i = 0; same && i < state.size(); ++i) {
    const Tensor& a = state.tensors()[i];
    const Tensor& b = layout_.tensors()[i];
    same = a.name == b.name && a.dtype == b.dtype && a.shape == b.shape;
  }
  if (!same) {
    // Size the header reserve with the widest metadata values.
    ModelState probe;
    for (const Tensor& t : state.tensors()) {
      Tensor v = t;
      v.owner.reset();
      VIPER_RETURN_IF_ERROR(probe.Add(std::move(v)));
    }
    probe.metadata.version = std::numeric_limits<uint64_t>::max();
    probe.metadata.iteration = std::numeric_limits<int64_t>::min();
    probe.metadata.producer_id = std::numeric_limits<int32_t>::min();
    const uint64_t fake_checksum = std::numeric_limits<uint64_t>::max();
    std::map<std::string, std::string> probe_extra = extra_metadata_;
    if (!hmac_key_.empty()) probe_extra[kHmacKey] = std::string(64, 'f');
    VIPER_ASSIGN_OR_RETURN(safetensors::Header h, safetensors::BuildHeader(probe, &fake_checksum, probe_extra));
    const uint64_t reserve = RoundUp(h.bytes.size() + 1024, AlignedBuffer::kAlignmentBytes);
    const uint64_t need =
        std::max<uint64_t>(reserve + RoundUp(data_bytes, AlignedBuffer::kAlignmentBytes), min_capacity_bytes);
    if (capacity() < need) VIPER_RETURN_IF_ERROR(Reallocate(need));
    reserve_ = reserve;
    data_bytes_ = data_bytes;
    layout_ = ModelState();
    uint64_t off = 0;
    for (const Tensor& t : state.tensors()) {
      Tensor v;
      v.name = t.name;
      v.dtype = t.dtype;
      v.shape = t.shape;
      v.size_bytes = t.size_bytes;
      v.data = base() + reserve_ + off;
      v.memory = on_device_ ? MemoryKind::kDevice : MemoryKind::kHost;
      off += t.size_bytes;
      VIPER_RETURN_IF_ERROR(layout_.Add(std::move(v)));
    }
  }
  VIPER_RETURN_IF_ERROR(CopyTensors(state, hash_while_copying));
  layout_.metadata.version = version;
  layout_.metadata.iteration = iteration;
  layout_.metadata.producer_id = producer_id;
  header_bytes_ = 0;
  return Status::Ok();
}

Status StagedVersion::CopyTensors(const ModelState& state, bool hash_while_copying) {
  checksum_ready_ = false;
  if (on_device_) return device_->CopyTensors(state, data());
  std::byte* dst = data();
  if (hash_while_copying) {
    constexpr std::size_t kBlock = 256 * 1024;  // fits in L2: hashed while hot
    Xxh3Hasher hasher;
    for (const Tensor& t : state.tensors()) {
      for (std::size_t off = 0; off < t.size_bytes; off += kBlock) {
        const std::size_t n = std::min(kBlock, t.size_bytes - off);
        std::memcpy(dst + off, t.data + off, n);
        hasher.Update(dst + off, n);
      }
      dst += t.size_bytes;
    }
    checksum_ = hasher.Digest();
    checksum_ready_ = true;
  } else {
    // memcpy picks its stores per call: a tensor below glibc's non-temporal
    // threshold gets ordinary stores even when the snapshot is far larger
    // than the caches. StreamCopy decides once, by the size of the snapshot.
    void (*copy)(std::byte*, const std::byte*, std::size_t) =
        data_bytes_ >= kStreamCopyMinBytes ? StreamCopy : Memcpy;
    const int jobs = static_cast<int>(
        std::clamp<uint64_t>(data_bytes_ / kMinBytesPerCopyThread, 1, static_cast<uint64_t>(copy_threads_)));
    const std::vector<std::vector<CopyPiece>> plan = PlanCopy(state, dst, jobs);
    if (jobs > 1) {
      pool_->Run(jobs, [&plan, copy](int j) {
        for (const CopyPiece& p : plan[j]) copy(p.dst, p.src, p.bytes);
      });
    } else {
      for (const CopyPiece& p : plan[0]) copy(p.dst, p.src, p.bytes);
    }
  }
  return Status::Ok();
}

Status StagedVersion::Finalize(uint64_t checksum) {
  checksum_ = checksum;
  checksum_ready_ = true;
  return Finalize();
}

StatusOr<uint64_t> StagedVersion::PlannedHeaderBytes() const {
  const uint64_t placeholder = 0;  // the checksum is fixed-width: its value does not change the size
  std::map<std::string, std::string> extra = extra_metadata_;
  if (!hmac_key_.empty()) extra[kHmacKey] = std::string(64, '0');  // fixed width too
  VIPER_ASSIGN_OR_RETURN(safetensors::Header h, safetensors::BuildHeader(layout_, &placeholder, extra));
  return RoundUp(h.bytes.size(), AlignedBuffer::kAlignmentBytes);
}

Status StagedVersion::Finalize() {
  std::map<std::string, std::string> extra = extra_metadata_;
  if (on_device_) {
    if (!checksum_ready_) {
      VIPER_ASSIGN_OR_RETURN(checksum_, device_->Sum64(data(), data_bytes_));
    }
    extra[kDeviceChecksumKey] = ChecksumToHex(checksum_);
  }
  if (!on_device_ && !checksum_ready_) checksum_ = Xxh3_64(data(), data_bytes_);
  checksum_ready_ = true;
  if (!hmac_key_.empty() && !on_device_) extra[kHmacKey] = VersionDigest(hmac_key_, layout_, hmac_session_);
  VIPER_ASSIGN_OR_RETURN(safetensors::Header h,
                         safetensors::BuildHeader(layout_, on_device_ ? nullptr : &checksum_, extra));
  if (h.data_bytes != data_bytes_) return InternalError("safetensors header disagrees on the data size");
  std::string padded = PadHeader(std::move(h.bytes), AlignedBuffer::kAlignmentBytes);
  if (padded.size() > reserve_) return InternalError("safetensors header outgrew its reserve");
  header_bytes_ = padded.size();
  if (on_device_)
    return device_->WriteHeader(base() + reserve_ - header_bytes_, padded.data(), header_bytes_);
  std::memcpy(base() + reserve_ - header_bytes_, padded.data(), header_bytes_);
  return Status::Ok();
}

Status DescribedVersion::Describe(const ModelState& state, uint64_t version, int64_t iteration,
                                  int32_t producer_id) {
  bool same = layout_.size() == state.size();
  for (std::size_t i = 0; same && i < state.size(); ++i) {
    const Tensor& a = state.tensors()[i];
    const Tensor& b = layout_.tensors()[i];
    same = a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.size_bytes == b.size_bytes;
  }
  ranges_.clear();
  uint64_t data_bytes = 0;
  for (const Tensor& t : state.tensors()) {
    if (t.memory != MemoryKind::kHost) {
      return InvalidArgumentError("tensor '" + t.name +
                                  "' is in device memory; the host and pfs tiers need host tensors");
    }
    if (t.size_bytes != t.ExpectedBytes()) {
      return InvalidArgumentError("tensor '" + t.name + "' has " + std::to_string(t.size_bytes) +
                                  " bytes, its shape needs " + std::to_string(t.ExpectedBytes()));
    }
    if (t.size_bytes > 0) ranges_.push_back({t.data, t.size_bytes});
    data_bytes += t.size_bytes;
  }
  if (!same) {
    layout_ = ModelState();
    for (const Tensor& t : state.tensors()) {
      Tensor v = t;
      v.owner.reset();
      VIPER_RETURN_IF_ERROR(layout_.Add(std::move(v)));
    }
  }
  data_bytes_ = data_bytes;
  layout_.metadata.version = version;
  layout_.metadata.iteration = iteration;
  layout_.metadata.producer_id = producer_id;
  // Metadata values change the header size; the checksum (fixed width) does not.
  const uint64_t placeholder = 0;
  VIPER_ASSIGN_OR_RETURN(safetensors::Header h, safetensors::BuildHeader(layout_, &placeholder, extra_metadata_));
  if (h.data_bytes != data_bytes_) return InternalError("safetensors header disagrees on the data size");
  header_bytes_ = RoundUp(h.bytes.size(), AlignedBuffer::kAlignmentBytes);
  return Status::Ok();
}

std::shared_ptr<const std::byte> DescribedVersion::Header(uint64_t checksum) const {
  auto h = safetensors::BuildHeader(layout_, &checksum, extra_metadata_);
  VIPER_CHECK(h.ok());  // the same layout built in Describe
  auto padded =
      std::make_shared<const std::string>(PadHeader(std::move(h->bytes), AlignedBuffer::kAlignmentBytes));
  VIPER_CHECK(padded->size() == header_bytes_);
  return std::shared_ptr<const std::byte>(padded, reinterpret_cast<const std::byte*>(padded->data()));
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
