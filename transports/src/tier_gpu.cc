// The gpu tier, both halves (tier.h). CUDA and MPI builds only
// (tier_gpu_stub.cc otherwise). The producer stages each version in device
// memory, checksums it there (sum64) and announces the staging allocation's
// CUDA IPC handle and ready event. Receive paths, in order: CUDA IPC (a
// consumer on the producer's node copies device to device), then the
// pinned-host pipeline (the producer queues device-to-pinned copies of every
// chunk and sends each over MPI once copied; the consumer copies each landed
// chunk to its device while the next arrives). The consumer verifies sum64
// on the device and hands back a device-resident version.
#include "tier_gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>

#include "cuda_ipc.h"
#include "device_buffer.h"
#include "device_checksum.h"
#include "device_delta.h"
#include "keep_until_finalize.h"
#include "mpi_link.h"
#include "viper/core/checksum.h"
#include "viper/core/log.h"
#include "viper/core/safetensors.h"

namespace viper {
namespace transports {
namespace internal {

namespace {

// The publisher's staging memory on the device (staging.h), ordered on the
// tier's stream; the ready event is interprocess (consumers wait on it).
class CudaDeviceImage : public DeviceImage {
 public:
  explicit CudaDeviceImage(cudaStream_t stream) : stream_(stream) {}
  ~CudaDeviceImage() override {
    if (ready_event_) cudaEventDestroy(ready_event_);
  }
  std::byte* data() const override { return image_.data(); }
  uint64_t capacity() const override { return image_.capacity(); }
  cudaEvent_t ready_event() const { return ready_event_; }

  Status Reallocate(uint64_t bytes) override {
    image_ = DeviceBuffer();  // free first: two large buffers may not fit
    VIPER_ASSIGN_OR_RETURN(image_, DeviceBuffer::Allocate(bytes));
    if (scratch_.capacity() == 0) {
      VIPER_ASSIGN_OR_RETURN(scratch_, DeviceBuffer::Allocate(8));
    }
    if (!ready_event_) {
      VIPER_CUDA_RETURN_IF_ERROR(
          cudaEventCreateWithFlags(&ready_event_, cudaEventDisableTiming | cudaEventInterprocess));
    }
    return Status::Ok();
  }

  // Host or device sources alike (unified addressing).
  Status CopyTensors(const ModelState& state, std::byte* dst) override {
    for (const Tensor& t : state.tensors()) {
      if (t.size_bytes > 0) {
        VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, t.data, t.size_bytes, cudaMemcpyDefault, stream_));
      }
      dst += t.size_bytes;
    }
    VIPER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  StatusOr<uint64_t> Sum64(const std::byte* data, uint64_t bytes) override {
    return Sum64Device(data, bytes, scratch_.data(), stream_);
  }

  Status WriteHeader(std::byte* dst, const void* src, uint64_t n) override {
    VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_));
    VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_event_, stream_));
    VIPER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // `src` may die on return
    return Status::Ok();
  }

 private:
  cudaStream_t stream_;
  DeviceBuffer image_;
  DeviceBuffer scratch_;  // 8 bytes for the checksum kernel
  cudaEvent_t ready_event_ = nullptr;
};

class GpuSender : public TierSender {
 public:
  explicit GpuSender(ProducerControl* control) : control_(control), options_(control->options()) {}
  ~GpuSender() override {
    for (cudaEvent_t e : chunk_events_) cudaEventDestroy(e);
    if (pinned_) cudaFreeHost(pinned_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Open(StagedVersion* staging, int count) {
    VIPER_RETURN_IF_ERROR(OpenGpuStream(options_.gpu_device, &stream_));
    for (int i = 0; i < count; ++i) staging[i].UseDevice(std::make_unique<CudaDeviceImage>(stream_));
    return Status::Ok();
  }

  Status BindThread() override {
    VIPER_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.gpu_device));
    return Status::Ok();
  }

  // IPC consumers copy the staged image themselves; the others get it
  // through pinned host memory. Every consumer acknowledges once it holds
  // a verified copy; only then may the staging buffer be reused.
  Status Send(const StagedVersion& s, double start_s, SendOutcome* out) override {
    const double t0 = MonotonicSeconds();
    Announce a =
        control_->AnnounceStaged(kAnnounceGpu, s.version(), s.iteration(), s.image_bytes(), s.checksum());
    GpuPayload p;
    p.header_bytes = s.header_bytes();
    p.image_offset = s.image_offset();
    p.chunk_bytes = options_.chunk_bytes;
    static_assert(sizeof(p.ipc_mem) == kIpcHandleBytes && sizeof(p.ipc_event) == kIpcHandleBytes,
                  "IPC handle size");
    // Only this tier stages on the device, always in a CudaDeviceImage.
    const auto* image = static_cast<const CudaDeviceImage*>(s.device());
    VIPER_RETURN_IF_ERROR(
        ExportIpc(const_cast<void*>(s.device_allocation()), image->ready_event(), p.ipc_mem, p.ipc_event));
    if (options_.delta == DeltaMode::kOn) VIPER_RETURN_IF_ERROR(PrepareDelta(s, &p));
    SetTierPayload(p, &a);
    VIPER_ASSIGN_OR_RETURN(const ReadyList ready, control_->Handshake(a, out));
    std::vector<int> acking, via_delta;
    std::vector<ChunkedTransfer> via_host;
    for (const auto& [rank, msg] : ready) {
      if (msg.path == kPathCudaIpc) {
        acking.push_back(rank);
        continue;
      }
      if (msg.path == kPathDelta) {
        // Only against the base offered (Ready::held_*, as the host tier checks).
        if (!offered_ || msg.held_version != base_version_ || msg.held_checksum != base_checksum_) {
          control_->Drop(rank,
                         "answered with a delta against version " + std::to_string(msg.held_version) +
                             ", which was not offered",
                         out);
          continue;
        }
        acking.push_back(rank);
        via_delta.push_back(rank);
        continue;
      }
      ChunkedTransfer t;
      t.peer = rank;
      t.send = true;
      via_host.push_back(std::move(t));
    }
    if (!via_host.empty()) VIPER_RETURN_IF_ERROR(SendPinned(s, &via_host, out, &acking));
    control_->CollectAcks(s.version(), acking, start_s, out);
    out->transfer_s = MonotonicSeconds() - t0;
    if (options_.delta == DeltaMode::kOn) {
      ReportDelta(via_delta, out);
      VIPER_RETURN_IF_ERROR(KeepBase(s));
    }
    return Status::Ok();
  }

 private:
  // Device -> pinned copies of every chunk queued at once; each chunk is
  // posted once its copy is done.
  Status SendPinned(const StagedVersion& s, std::vector<ChunkedTransfer>* via_host, SendOutcome* out,
                    std::vector<int>* acking) {
    const uint64_t bytes = s.image_bytes(), chunk = options_.chunk_bytes;
    const uint64_t chunks = (bytes + chunk - 1) / chunk;
    if (pinned_bytes_ < bytes) {
      if (pinned_) cudaFreeHost(pinned_);
      pinned_ = nullptr;
      pinned_bytes_ = 0;
      VIPER_CUDA_RETURN_IF_ERROR(cudaMallocHost(&pinned_, bytes));
      pinned_bytes_ = bytes;
    }
    while (chunk_events_.size() < chunks) {
      cudaEvent_t e;
      VIPER_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      chunk_events_.push_back(e);
    }
    auto* host = static_cast<std::byte*>(pinned_);
    for (uint64_t k = 0; k < chunks; ++k) {
      const uint64_t off = k * chunk, n = std::min(chunk, bytes - off);
      VIPER_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(host + off, s.image() + off, n, cudaMemcpyDeviceToHost, stream_));
      VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(chunk_events_[k], stream_));
    }
    std::vector<Chunk> chunk_list;
    AppendChunks(host, bytes, chunk, &chunk_list);
    for (auto& t : *via_host) t.chunks = &chunk_list;
    ChunkHooks hooks;
    hooks.ready = [&](const ChunkedTransfer&, std::size_t k) {
      return cudaEventQuery(chunk_events_[k]) == cudaSuccess;
    };
    RunChunked(control_->link().comm, options_.max_inflight_chunks, via_host,
               MonotonicSeconds() + options_.peer_timeout_s, hooks);
    for (const auto& t : *via_host) {
      if (t.failed) {
        control_->Drop(t.peer, "pinned-host transfer did not complete within peer_timeout_s", out);
      } else {
        acking->push_back(t.peer);
      }
    }
    return Status::Ok();
  }

  // Delta on: the staged version's tensor table (from its header), then,
  // when a base is kept with the same table, its records against the base
  // (device_delta.h) in delta_, offered in `p`. A version that cannot be
  // diffed is sent full, saying why (summary_.reason).
  Status PrepareDelta(const StagedVersion& s, GpuPayload* p) {
    offered_ = false;
    next_table_.clear();
    summary_ = delta::EncodeSummary();
    summary_.full = true;
    summary_.full_bytes = s.image_bytes();
    summary_.target_version = s.version();
    summary_.base_version = base_version_;
    if (codec_ == nullptr) {
      auto codec = DeviceDeltaCodec::Create(options_.gpu_device);
      if (!codec.ok()) {
        summary_.reason = codec.status().ToString();
        return Status::Ok();
      }
      codec_ = std::move(*codec);
      VIPER_ASSIGN_OR_RETURN(scratch_, DeviceBuffer::Allocate(8));
    }
    std::vector<std::byte> header(s.header_bytes());
    VIPER_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(header.data(), s.image(), s.header_bytes(), cudaMemcpyDeviceToHost));
    const std::byte* data = s.image() + s.header_bytes();
    auto state = safetensors::ParseExternalData(nullptr, header.data(), header.size(), data, s.data_bytes(),
                                                MemoryKind::kDevice);
    if (!state.ok()) return state.status().WithContext("gpu delta: the staged header");
    next_table_ = DeviceDeltaTable(*state, data);
    if (!base_kept_) {
      summary_.reason = "no base kept yet";
      return Status::Ok();
    }
    if (s.version() <= base_version_ || !SameDeviceDeltaTable(next_table_, base_table_) ||
        s.data_bytes() != base_data_bytes_) {
      summary_.reason = "tensor table changed since the base (or not a newer version)";
      return Status::Ok();
    }
    // Records smaller than the data section, as the host encoder's room.
    const uint64_t limit = s.data_bytes() > 0 ? s.data_bytes() - 1 : 0;
    if (delta_.capacity() < limit || delta_.capacity() == 0) {
      delta_ = DeviceBuffer();
      VIPER_ASSIGN_OR_RETURN(delta_, DeviceBuffer::Allocate(std::max<uint64_t>(limit, 8)));
    }
    auto records = codec_->Encode(base_.data(), data, next_table_, limit, delta_.data());
    if (!records.ok()) {
      Log(LogLevel::kWarning, "transports", "gpu delta not encoded: " + records.status().ToString());
      summary_.reason = records.status().ToString();
      return Status::Ok();
    }
    records_ = std::move(*records);
    for (std::size_t i = 0; i < records_.choices.size(); ++i) {
      delta::TensorReport r;
      r.name = next_table_[i].name;
      r.elements = next_table_[i].bytes / next_table_[i].element_bytes;
      r.changed_elements = records_.choices[i].changed_elements;
      r.encoding = records_.choices[i].encoding;
      r.encoded_bytes = records_.choices[i].record_bytes;
      (r.encoding == delta::Encoding::kUnchanged ? summary_.tensors_unchanged
       : r.encoding == delta::Encoding::kDense   ? summary_.tensors_dense
                                                 : summary_.tensors_sparse)++;
      summary_.tensors.push_back(std::move(r));
    }
    if (!records_.fits || records_.record_count == 0) {
      // (No record at all: only the header changed; the full version is as cheap over IPC.)
      summary_.reason = records_.fits ? "no tensor changed"
                                      : "the delta would not be smaller than the image's data section";
      return Status::Ok();
    }
    VIPER_ASSIGN_OR_RETURN(const uint64_t sum,
                           Sum64Device(delta_.data(), records_.bytes, scratch_.data(), stream_));
    cudaIpcMemHandle_t mem;
    static_assert(sizeof(mem) == sizeof(p->delta_ipc_mem), "IPC handle size");
    VIPER_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&mem, delta_.data()));
    std::memcpy(p->delta_ipc_mem, &mem, sizeof(mem));
    p->delta_records_bytes = records_.bytes;
    p->delta_record_count = records_.record_count;
    p->delta_checksum = sum;
    p->delta_base_version = base_version_;
    p->delta_base_checksum = base_checksum_;
    summary_.full = false;
    summary_.reason.clear();
    summary_.delta_bytes = records_.bytes;
    offered_ = true;
    return Status::Ok();
  }

  // VersionReport: what each consumer got and the delta's brief report.
  void ReportDelta(const std::vector<int>& via_delta, SendOutcome* out) const {
    const std::string delta_of = "delta of version " + std::to_string(base_version_);
    for (auto& c : out->consumers) {
      const bool took = std::find(via_delta.begin(), via_delta.end(), c.rank) != via_delta.end();
      c.encoding = took ? delta_of : "full";
      c.encoding_reason =
          took
              ? "delta: cuda-ipc consumer holds the base"
              : "full: " +
                    (offered_
                         ? std::string("the consumer does not hold the base, or receives through host memory")
                         : summary_.reason);
    }
    out->encoding =
        summary_.BriefReport() + (offered_ ? " (to " + std::to_string(via_delta.size()) + " consumer" +
                                                 (via_delta.size() == 1 ? "" : "s") + ")"
                                           : "");
    out->written_bytes = offered_ ? records_.bytes : 0;
  }

  // The version just sent becomes the base: its data section copied on the device.
  Status KeepBase(const StagedVersion& s) {
    base_kept_ = false;
    if (codec_ == nullptr || s.data_bytes() == 0) return Status::Ok();
    if (base_.capacity() < s.data_bytes()) {
      base_ = DeviceBuffer();
      VIPER_ASSIGN_OR_RETURN(base_, DeviceBuffer::Allocate(s.data_bytes()));
    }
    VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base_.data(), s.image() + s.header_bytes(), s.data_bytes(),
                                               cudaMemcpyDeviceToDevice, stream_));
    VIPER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    base_table_ = next_table_;
    base_data_bytes_ = s.data_bytes();
    base_version_ = s.version();
    base_checksum_ = s.checksum();
    base_kept_ = true;
    return Status::Ok();
  }

  ProducerControl* control_;
  const Publisher::Options& options_;
  cudaStream_t stream_ = nullptr;
  // Delta on (issue 27): the last version sent (the base the consumers that
  // took it hold), this version's records, the codec and what it chose.
  std::unique_ptr<DeviceDeltaCodec> codec_;
  DeviceBuffer base_, delta_, scratch_;
  std::vector<DeviceDeltaTensor> base_table_, next_table_;
  uint64_t base_data_bytes_ = 0, base_version_ = 0, base_checksum_ = 0;
  bool base_kept_ = false, offered_ = false;
  DeviceDeltaRecords records_;
  delta::EncodeSummary summary_;
  void* pinned_ = nullptr;  // consumers without IPC: the image in pinned host memory
  uint64_t pinned_bytes_ = 0;
  std::vector<cudaEvent_t> chunk_events_;  // one per pinned chunk copy
};

// A mapping of the producer's staging allocation and its ready event.
struct IpcMapping {
  std::string mem_key, event_key;  // the handles' bytes
  void* base = nullptr;
  cudaEvent_t event = nullptr;
};

// What both gpu receive paths share: the stream, device landing buffers,
// the pinned landing buffer and the IPC mappings (receiving thread only).
class GpuReceiving {
 public:
  GpuReceiving(ConsumerControl* control, std::function<std::shared_ptr<const ModelVersion>()> held)
      : control_(control), options_(control->options()), held_(std::move(held)) {}
  ~GpuReceiving();
  Status Open();
  // The mapping of `a`'s staging allocation when CUDA IPC can take it
  // (allowed, on the producer's node, and it opens); else nullptr.
  const IpcMapping* TryIpc(const Announce& a);
  // Answers `a` and lands it in device memory by `ipc` (or, when null, the
  // pinned-host pipeline), then verifies it there.
  StatusOr<Landed> Receive(const Announce& a, const IpcMapping* ipc);
  std::string Source() const { return control_->ProducerName(); }
  Status BindThread() {
    VIPER_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.gpu_device));
    return Status::Ok();
  }

 private:
  // Maps the producer's staging allocation and opens its event (cached: the
  // producer has two staging buffers, re-exported only when they grow).
  StatusOr<const IpcMapping*> OpenIpc(const GpuPayload& p);
  Status PipelineIn(const Announce& a, const GpuPayload& p, std::byte* dst);
  StatusOr<std::shared_ptr<ModelVersion>> Verify(const Announce& a, const GpuPayload& p,
                                                 std::shared_ptr<DeviceBuffer> buffer);
  StatusOr<std::shared_ptr<DeviceBuffer>> AcquireDeviceBuffer(uint64_t bytes);
  // The version served when `p` offers a delta against it (a device version
  // of this tier with the base's version and sum64) and the codec opens; else nullptr.
  std::shared_ptr<const ModelVersion> DeltaBase(const Announce& a, const GpuPayload& p);
  // The delta path over CUDA IPC: the served base copied device to device
  // into a landing buffer (the served buffer is only read), the target's
  // header from the staged image, the records applied there, then Verify.
  struct DeltaMaps {
    const std::byte* records = nullptr;  // the producer's records
    const std::byte* staged = nullptr;   // its staged image (for the target's header)
    cudaEvent_t event = nullptr;         // recorded once the image was complete
  };
  // Opens (or finds) the mappings of the records' and the staging allocation.
  StatusOr<DeltaMaps> MapDelta(const GpuPayload& p);
  StatusOr<Landed> ReceiveDelta(const Announce& a, const GpuPayload& p, const DeltaMaps& maps,
                                std::shared_ptr<const ModelVersion> base);

  ConsumerControl* control_;
  const Subscriber::Options& options_;
  std::function<std::shared_ptr<const ModelVersion>()> held_;
  std::unique_ptr<DeviceDeltaCodec> codec_;  // opened by the first delta offered
  DeviceBuffer records_;                     // a delta's records, copied from the producer
  std::vector<IpcMapping> ipc_;
  std::vector<std::shared_ptr<DeviceBuffer>> device_pool_;
  DeviceBuffer scratch_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t copy_start_ = nullptr, copy_end_ = nullptr;  // time the copy on the device
  void* pinned_ = nullptr;                                 // landing buffer of the pinned-host path
  uint64_t pinned_bytes_ = 0;
};

GpuReceiving::~GpuReceiving() {
  for (auto& m : ipc_) {
    if (m.base) cudaIpcCloseMemHandle(m.base);
    if (m.event) cudaEventDestroy(m.event);
  }
  if (pinned_) cudaFreeHost(pinned_);
  if (copy_start_) cudaEventDestroy(copy_start_);
  if (copy_end_) cudaEventDestroy(copy_end_);
  if (stream_) cudaStreamDestroy(stream_);
}

Status GpuReceiving::Open() {
  VIPER_RETURN_IF_ERROR(OpenGpuStream(options_.gpu_device, &stream_));
  VIPER_ASSIGN_OR_RETURN(scratch_, DeviceBuffer::Allocate(8));
  VIPER_CUDA_RETURN_IF_ERROR(cudaEventCreate(&copy_start_));
  VIPER_CUDA_RETURN_IF_ERROR(cudaEventCreate(&copy_end_));
  for (int i = 0; options_.preallocate_bytes > 0 && i < 2; ++i) {
    VIPER_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(options_.preallocate_bytes));
    device_pool_.push_back(std::make_shared<DeviceBuffer>(std::move(b)));
  }
  return Status::Ok();
}

const IpcMapping* GpuReceiving::TryIpc(const Announce& a) {
  if (a.kind != kAnnounceGpu || !options_.allow_ipc ||
      std::strncmp(a.host, control_->host(), sizeof(a.host)) != 0) {
    return nullptr;
  }
  const auto p = DecodeGpuPayload(a);
  if (!p.ok()) return nullptr;  // refused by the pinned-host path
  auto mapping = OpenIpc(*p);
  if (!mapping.ok()) {
    Log(LogLevel::kWarning, "transports",
        "CUDA IPC unavailable (" + mapping.status().ToString() + "); receiving through host memory");
    return nullptr;
  }
  return *mapping;
}

StatusOr<const IpcMapping*> GpuReceiving::OpenIpc(const GpuPayload& p) {
  const std::string mem_key(p.ipc_mem, sizeof(p.ipc_mem)), event_key(p.ipc_event, sizeof(p.ipc_event));
  for (auto& m : ipc_) {
    if (m.mem_key == mem_key && m.event_key == event_key) return &m;
  }
  IpcMapping m;
  m.mem_key = mem_key;
  m.event_key = event_key;
  VIPER_RETURN_IF_ERROR(internal::OpenIpc(p.ipc_mem, p.ipc_event, &m.base, &m.event));
  if (ipc_.size() >= 4) {  // stale mappings of buffers the producer has replaced
    cudaIpcCloseMemHandle(ipc_.front().base);
    cudaEventDestroy(ipc_.front().event);
    ipc_.erase(ipc_.begin());
  }
  ipc_.push_back(m);
  return &ipc_.back();
}

StatusOr<Landed> GpuReceiving::Receive(const Announce& a, const IpcMapping* ipc) {
  // Checked by the subscriber (AnnouncingTier) before any path saw it.
  VIPER_ASSIGN_OR_RETURN(const GpuPayload p, DecodeGpuPayload(a));
  if (p.header_bytes == 0 || p.header_bytes > a.image_bytes) {
    return DataLossError(Source() + ": announced header of " + std::to_string(p.header_bytes) +
                         " bytes in an image of " + std::to_string(a.image_bytes));
  }
  if (ipc != nullptr) {
    if (auto base = DeltaBase(a, p)) {
      // Mapping the records may move or close the cached mappings: `ipc` is looked up again.
      auto maps = MapDelta(p);
      if (maps.ok()) return ReceiveDelta(a, p, *maps, std::move(base));
      Log(LogLevel::kWarning, "transports",
          "gpu delta's records not mapped (" + maps.status().ToString() + "); receiving the full version");
      VIPER_ASSIGN_OR_RETURN(ipc, OpenIpc(p));
    }
  }
  Ready ready = control_->ReadyFor(a);
  ready.path = ipc ? kPathCudaIpc : kPathMpi;
  auto buffer = AcquireDeviceBuffer(a.image_bytes);
  ready.accept = buffer.ok() ? 1 : 0;
  VIPER_RETURN_IF_ERROR(control_->SendReady(a, ready));
  if (!buffer.ok()) return buffer.status();
  std::byte* dst = (*buffer)->data();
  const double t0 = MonotonicSeconds();  // receive_s: from here until the bytes are in `dst`
  if (ipc) {
    VIPER_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ipc->event, 0));
    VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy_start_, stream_));
    VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, static_cast<const std::byte*>(ipc->base) + p.image_offset,
                                               a.image_bytes, cudaMemcpyDeviceToDevice, stream_));
  } else {
    VIPER_RETURN_IF_ERROR(PipelineIn(a, p, dst));
  }
  VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy_end_, stream_));
  VIPER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  const double t1 = MonotonicSeconds();
  float copy_ms = 0;
  VIPER_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&copy_ms, copy_start_, copy_end_));
  VIPER_ASSIGN_OR_RETURN(std::shared_ptr<ModelVersion> version, Verify(a, p, *buffer));
  version->source = Source() + (ipc ? " (cuda-ipc)" : " (pinned-host pipeline)");
  version->receive_s = t1 - t0;
  version->verify_s = MonotonicSeconds() - t1;
  version->copy_device_s = copy_ms * 1e-3;
  Landed landed;
  landed.size = a.image_bytes;
  landed.moved_bytes = a.image_bytes;
  landed.source = version->source;
  landed.receive_s = version->receive_s;
  landed.verified = std::move(version);
  return landed;
}

std::shared_ptr<const ModelVersion> GpuReceiving::DeltaBase(const Announce& a, const GpuPayload& p) {
  if (p.delta_records_bytes == 0 || !held_) return nullptr;
  std::shared_ptr<const ModelVersion> held = held_();
  const uint64_t data_bytes = a.image_bytes - p.header_bytes;
  if (!held || held->memory != MemoryKind::kDevice || held->tier != Tier::kGpu || held->bytes == nullptr ||
      held->state.metadata.version != p.delta_base_version || held->checksum != p.delta_base_checksum ||
      held->size_bytes < data_bytes)
    return nullptr;
  if (codec_ == nullptr) {
    auto codec = DeviceDeltaCodec::Create(options_.gpu_device);
    if (!codec.ok()) {
      Log(LogLevel::kWarning, "transports",
          "gpu delta unavailable (" + codec.status().ToString() + "); full versions");
      return nullptr;
    }
    codec_ = std::move(*codec);
  }
  return held;
}

StatusOr<GpuReceiving::DeltaMaps> GpuReceiving::MapDelta(const GpuPayload& p) {
  GpuPayload records_at = p;
  std::memcpy(records_at.ipc_mem, p.delta_ipc_mem, sizeof(records_at.ipc_mem));
  DeltaMaps maps;
  VIPER_ASSIGN_OR_RETURN(const IpcMapping* records, OpenIpc(records_at));
  maps.records = static_cast<const std::byte*>(records->base);
  // Second: reopening it (if it was evicted) evicts the oldest mapping, not the records' just opened.
  VIPER_ASSIGN_OR_RETURN(const IpcMapping* staged, OpenIpc(p));
  maps.staged = static_cast<const std::byte*>(staged->base) + p.image_offset;
  maps.event = staged->event;
  return maps;
}

// (Over 80 lines: answer, copy, check, apply, verify, in one place.)
StatusOr<Landed> GpuReceiving::ReceiveDelta(const Announce& a, const GpuPayload& p, const DeltaMaps& maps,
                                            std::shared_ptr<const ModelVersion> base) {
  const std::string what = "delta of version " + std::to_string(a.version) + " against version " +
                           std::to_string(base->state.metadata.version);
  Ready ready = control_->ReadyFor(a);
  ready.path = kPathDelta;
  ready.held_version = base->state.metadata.version;
  ready.held_checksum = base->checksum;
  auto buffer = AcquireDeviceBuffer(a.image_bytes);
  if (buffer.ok() && records_.capacity() < p.delta_records_bytes) {
    records_ = DeviceBuffer();
    auto fresh = DeviceBuffer::Allocate(p.delta_records_bytes);
    if (fresh.ok()) {
      records_ = std::move(*fresh);
    } else {
      buffer = fresh.status();
    }
  }
  ready.accept = buffer.ok() ? 1 : 0;
  VIPER_RETURN_IF_ERROR(control_->SendReady(a, ready));
  if (!buffer.ok()) return buffer.status();
  const uint64_t data_bytes = a.image_bytes - p.header_bytes;
  const uint64_t base_header = base->size_bytes - data_bytes;
  std::byte* dst = (*buffer)->data();
  const double t0 = MonotonicSeconds();
  VIPER_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, maps.event, 0));
  VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy_start_, stream_));
  VIPER_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, maps.staged, p.header_bytes, cudaMemcpyDeviceToDevice, stream_));
  VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst + p.header_bytes, base->bytes + base_header, data_bytes,
                                             cudaMemcpyDeviceToDevice, stream_));
  VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(records_.data(), maps.records, p.delta_records_bytes,
                                             cudaMemcpyDeviceToDevice, stream_));
  VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy_end_, stream_));
  VIPER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  float copy_ms = 0;
  VIPER_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&copy_ms, copy_start_, copy_end_));
  // The records as announced, and the target's table the base's.
  VIPER_ASSIGN_OR_RETURN(const uint64_t sum,
                         Sum64Device(records_.data(), p.delta_records_bytes, scratch_.data(), stream_));
  if (sum != p.delta_checksum) {
    return DataLossError(Source() + ": " + what + ": its " + std::to_string(p.delta_records_bytes) +
                         " bytes of records sum to " + ChecksumToHex(sum) + ", the announcement says " +
                         ChecksumToHex(p.delta_checksum));
  }
  std::vector<std::byte> header(p.header_bytes);
  VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpy(header.data(), dst, p.header_bytes, cudaMemcpyDeviceToHost));
  auto target = safetensors::ParseExternalData(nullptr, header.data(), header.size(), dst + p.header_bytes,
                                               data_bytes, MemoryKind::kDevice);
  if (!target.ok()) return target.status().WithContext(Source() + ": " + what);
  const std::vector<DeviceDeltaTensor> table = DeviceDeltaTable(*target, dst + p.header_bytes);
  if (!SameDeviceDeltaTable(table, DeviceDeltaTable(base->state, base->bytes + base_header))) {
    return FailedPreconditionError(Source() + ": " + what + ": the tensor table differs from the base's");
  }
  const Status applied = codec_->Apply(dst + p.header_bytes, table, records_.data(), p.delta_records_bytes,
                                       p.delta_record_count);
  if (!applied.ok()) return applied.WithContext(Source() + ": " + what);
  const double t1 = MonotonicSeconds();
  // sum64 of the rebuilt data against the header's and the announcement's.
  VIPER_ASSIGN_OR_RETURN(std::shared_ptr<ModelVersion> version, Verify(a, p, *buffer));
  version->source = Source() + " (cuda-ipc delta)";
  version->receive_s = t1 - t0;
  version->verify_s = MonotonicSeconds() - t1;
  version->copy_device_s = copy_ms * 1e-3;
  Landed landed;
  landed.size = a.image_bytes;
  landed.moved_bytes = p.header_bytes + p.delta_records_bytes;
  landed.from_delta = true;
  landed.source = version->source;
  landed.receive_s = version->receive_s;
  landed.verified = std::move(version);
  return landed;
}

// Receives into pinned host memory in chunks, each landed chunk copied on to
// the device while the next ones arrive.
Status GpuReceiving::PipelineIn(const Announce& a, const GpuPayload& p, std::byte* dst) {
  if (pinned_bytes_ < a.image_bytes) {
    if (pinned_) cudaFreeHost(pinned_);
    pinned_ = nullptr;
    pinned_bytes_ = 0;
    VIPER_CUDA_RETURN_IF_ERROR(cudaMallocHost(&pinned_, a.image_bytes));
    pinned_bytes_ = a.image_bytes;
  }
  auto* host = static_cast<std::byte*>(pinned_);
  VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy_start_, stream_));
  std::vector<Chunk> chunks;
  AppendChunks(host, a.image_bytes, p.chunk_bytes, &chunks);
  std::vector<ChunkedTransfer> transfers(1);
  transfers[0].peer = control_->producer();
  transfers[0].chunks = &chunks;
  Status copy_status;
  ChunkHooks hooks;
  hooks.completed = [&](std::size_t k) {
    const uint64_t off = static_cast<uint64_t>(chunks[k].data - host);
    const cudaError_t e =
        cudaMemcpyAsync(dst + off, chunks[k].data, chunks[k].size, cudaMemcpyHostToDevice, stream_);
    if (e != cudaSuccess && copy_status.ok()) copy_status = CudaStatus("cudaMemcpyAsync", e);
  };
  RunChunked(control_->link().comm, 8, &transfers, control_->TransferDeadline(a), hooks);
  if (transfers[0].failed) {
    // Receives may still land in the pinned buffer: keep it until MPI_Finalize.
    KeepUntilFinalize(std::shared_ptr<void>(pinned_, [](void* p) { cudaFreeHost(p); }));
    pinned_ = nullptr;
    pinned_bytes_ = 0;
    return AbortedError("transfer of " + std::to_string(a.image_bytes) + " bytes did not complete within " +
                        control_->WindowText(a) + " s");
  }
  return copy_status;
}

// Checks sum64 on the device against the header and the announcement, and
// parses the header from a small host copy; the tensors stay on the device.
StatusOr<std::shared_ptr<ModelVersion>> GpuReceiving::Verify(const Announce& a, const GpuPayload& p,
                                                             std::shared_ptr<DeviceBuffer> buffer) {
  const std::string source = Source();
  std::byte* dst = buffer->data();
  std::vector<std::byte> header(p.header_bytes);
  VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpy(header.data(), dst, p.header_bytes, cudaMemcpyDeviceToHost));
  const uint64_t data_bytes = a.image_bytes - p.header_bytes;
  VIPER_ASSIGN_OR_RETURN(uint64_t sum,
                         Sum64Device(dst + p.header_bytes, data_bytes, scratch_.data(), stream_));
  auto meta = safetensors::ParseMetadata(header.data(), header.size());
  if (!meta.ok()) return meta.status().WithContext(source);
  auto it = meta->find(kDeviceChecksumKey);
  std::optional<uint64_t> expected;
  if (it != meta->end()) expected = ChecksumFromHex(it->second);
  if (!expected) {
    return DataLossError(source + ": version " + std::to_string(a.version) + " has no valid " +
                         kDeviceChecksumKey + " in its header");
  }
  if (sum != *expected || sum != a.checksum) {
    return DataLossError(source + ": checksum mismatch: header says " + ChecksumToHex(*expected) +
                         ", announcement " + ChecksumToHex(a.checksum) + ", but the " +
                         std::to_string(data_bytes) + "-byte data section in device memory sums to " +
                         ChecksumToHex(sum));
  }
  std::shared_ptr<const void> owner(buffer, dst);
  auto state = safetensors::ParseExternalData(owner, header.data(), header.size(), dst + p.header_bytes,
                                              data_bytes, MemoryKind::kDevice);
  if (!state.ok()) return state.status().WithContext(source);
  if (state->metadata.version != a.version) {
    return DataLossError(source + ": carries version " + std::to_string(state->metadata.version) +
                         ", expected " + std::to_string(a.version));
  }
  auto version = std::make_shared<ModelVersion>();
  version->state = std::move(*state);
  version->bytes_owner = owner;
  version->bytes = dst;
  version->size_bytes = a.image_bytes;
  version->checksum = sum;
  version->memory = MemoryKind::kDevice;
  version->tier = Tier::kGpu;
  return version;
}

StatusOr<std::shared_ptr<DeviceBuffer>> GpuReceiving::AcquireDeviceBuffer(uint64_t bytes) {
  for (auto& b : device_pool_) {
    if (b.use_count() == 1 && b->capacity() >= bytes) return b;
  }
  device_pool_.erase(std::remove_if(device_pool_.begin(), device_pool_.end(),
                                    [](const auto& b) { return b.use_count() == 1; }),
                     device_pool_.end());
  VIPER_ASSIGN_OR_RETURN(DeviceBuffer fresh, DeviceBuffer::Allocate(bytes));
  device_pool_.push_back(std::make_shared<DeviceBuffer>(std::move(fresh)));
  return device_pool_.back();
}

// First path: CUDA IPC, on the producer's node when the mapping opens.
class IpcReceiver : public TierReceiver {
 public:
  explicit IpcReceiver(std::shared_ptr<GpuReceiving> gpu) : gpu_(std::move(gpu)) {}
  bool Takes(const Announce& a) override {
    mapping_ = gpu_->TryIpc(a);
    return mapping_ != nullptr;
  }
  StatusOr<Landed> Receive(const Announce& a) override { return gpu_->Receive(a, mapping_); }
  std::string Source(const Announce&) const override { return gpu_->Source(); }
  Status BindThread() override { return gpu_->BindThread(); }

 private:
  std::shared_ptr<GpuReceiving> gpu_;
  const IpcMapping* mapping_ = nullptr;  // opened by Takes
};

// Second path: the pinned-host pipeline, from any node.
class PinnedHostReceiver : public TierReceiver {
 public:
  explicit PinnedHostReceiver(std::shared_ptr<GpuReceiving> gpu) : gpu_(std::move(gpu)) {}
  bool Takes(const Announce& a) override { return a.kind == kAnnounceGpu; }
  StatusOr<Landed> Receive(const Announce& a) override { return gpu_->Receive(a, nullptr); }
  std::string Source(const Announce&) const override { return gpu_->Source(); }
  Status BindThread() override { return gpu_->BindThread(); }

 private:
  std::shared_ptr<GpuReceiving> gpu_;
};

}  // namespace

StatusOr<std::unique_ptr<TierSender>> MakeGpuSender(const SenderSetup& setup) {
  auto sender = std::make_unique<GpuSender>(setup.control);
  VIPER_RETURN_IF_ERROR(sender->Open(setup.staging, setup.staging_count));
  return std::unique_ptr<TierSender>(std::move(sender));
}

StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeGpuReceivers(const ReceiverSetup& setup) {
  auto gpu = std::make_shared<GpuReceiving>(setup.control, setup.held);
  VIPER_RETURN_IF_ERROR(gpu->Open());
  std::vector<std::unique_ptr<TierReceiver>> paths;
  paths.push_back(std::make_unique<IpcReceiver>(gpu));
  paths.push_back(std::make_unique<PinnedHostReceiver>(gpu));
  return paths;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
