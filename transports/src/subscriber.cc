#include "viper/transports/subscriber.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "device_checksum.h"
#include "keep_until_finalize.h"
#include "staging.h"
#include "viper/config.h"
#include "viper/core/checksum.h"
#include "viper/core/log.h"
#include "viper/core/safetensors.h"
#include "viper/transports/aligned_buffer.h"
#include "viper/transports/device_memory.h"
#include "viper/transports/pfs_store.h"

#if VIPER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "device_buffer.h"
#endif

#if VIPER_HAVE_MPI
#include "mpi_link.h"
#include "shm_segment.h"
#include "stream_hash.h"
#endif

namespace viper {
namespace transports {

bool Subscriber::Options::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (notify == Notify::kPoll && tier != Tier::kPfs) return fail("notify: poll needs tier pfs");
  if (tier == Tier::kPfs && pfs_dir.empty()) return fail("pfs_dir: tier pfs needs a directory");
  if (producer_rank < 0) return fail("producer_rank: must be >= 0");
  if (window_slot_bytes < 4096) return fail("window_slot_bytes: must be >= 4096");
  if (producer_timeout_s < 0) return fail("producer_timeout_s: must be >= 0 (0 = wait forever)");
  if (!(transfer_timeout_s > 0)) return fail("transfer_timeout_s: must be > 0");
  if (!(poll_period_s > 0)) return fail("poll_period_s: must be > 0");
  if (idle_sleep_us < 0 || idle_sleep_us > 1000000) return fail("idle_sleep_us: must be in [0, 1e6]");
  if (gpu_device < 0) return fail("gpu_device: must be >= 0");
  return true;
}

std::string Subscriber::Summary::BriefReport() const {
  std::ostringstream s;
  s << received << " versions received, " << rejected << " rejected";
  if (producer_finished) s << ", producer finished";
  if (producer_lost) s << ", producer LOST";
  if (!message.empty()) s << " (" << message << ")";
  return s.str();
}

class Subscriber::Impl {
 public:
  explicit Impl(const Options& options) : options_(options) {}
  ~Impl() {
    Stop();
#if VIPER_HAVE_CUDA
    for (auto& m : ipc_) {
      if (m.base) cudaIpcCloseMemHandle(m.base);
      if (m.event) cudaEventDestroy(m.event);
    }
    if (pinned_) cudaFreeHost(pinned_);
    if (copy_start_) cudaEventDestroy(copy_start_);
    if (copy_end_) cudaEventDestroy(copy_end_);
    if (gpu_stream_) cudaStreamDestroy(gpu_stream_);
#endif
#if VIPER_HAVE_MPI
    if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
    comm_ = MPI_COMM_NULL;  // not freed: see Publisher::Impl::Close (context ids must not be reused)
#endif
  }

  Status Init() {
    if (options_.tier == Tier::kPfs) {
      PfsStore::Options po;
      po.dir = options_.pfs_dir;
      po.o_direct = options_.o_direct;
      po.layout = options_.pfs_layout;
      store_ = std::make_unique<PfsStore>(po);
    }
    if (options_.notify == Notify::kPush) VIPER_RETURN_IF_ERROR(InitMpi());
    if (options_.tier == Tier::kGpu) VIPER_RETURN_IF_ERROR(InitGpu());
    if (options_.preallocate_bytes > 0 && options_.tier != Tier::kGpu) {
      for (int i = 0; i < 2; ++i) {
        VIPER_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(options_.preallocate_bytes));
        pool_.push_back(std::make_shared<AlignedBuffer>(std::move(b)));
      }
    }
    running_ = true;
    thread_ = std::thread([this] { options_.notify == Notify::kPoll ? PollLoop() : PushLoop(); });
    return Status::Ok();
  }

  std::shared_ptr<const ModelVersion> Current() const {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }

  StatusOr<std::shared_ptr<const ModelVersion>> WaitForVersion(uint64_t version, double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool done = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
      return (current_ && current_->state.metadata.version >= version) || !thread_alive_;
    });
    if (current_ && current_->state.metadata.version >= version) return current_;
    if (!done)
      return UnavailableError("no version >= " + std::to_string(version) + " within " +
                              std::to_string(timeout_s) + " s");
    if (summary_.producer_lost) return AbortedError(summary_.message);
    return FailedPreconditionError("the subscriber stopped before version " + std::to_string(version) +
                                   (summary_.message.empty() ? "" : ": " + summary_.message));
  }

  bool WaitUntilDone(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return !thread_alive_; });
  }

  void SetCallback(Callback cb) {
    std::lock_guard<std::mutex> lock(mu_);
    callback_ = std::move(cb);
  }

  std::vector<Rejection> Rejections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rejections_;
  }
  std::vector<CostSample> CostSamples() const {
    std::lock_guard<std::mutex> lock(mu_);
    return samples_;
  }
  Summary summary() const {
    std::lock_guard<std::mutex> lock(mu_);
    return summary_;
  }

  void Stop() {
    running_ = false;
    if (thread_.joinable()) thread_.join();
  }

 private:
  // A landing buffer from the pool: reused once no version refers to it.
  StatusOr<std::shared_ptr<AlignedBuffer>> AcquireBuffer(uint64_t bytes) {
    for (auto& b : pool_) {
      if (b.use_count() == 1 && b->capacity() >= bytes) return b;
    }
    VIPER_ASSIGN_OR_RETURN(AlignedBuffer fresh, AlignedBuffer::Allocate(bytes));
    // Keep at most three buffers: front, back, and one a slow reader may hold.
    pool_.erase(std::remove_if(pool_.begin(), pool_.end(), [](const auto& b) { return b.use_count() == 1; }),
                pool_.end());
    pool_.push_back(std::make_shared<AlignedBuffer>(std::move(fresh)));
    return pool_.back();
  }

  // A data section hashed while it landed.
  struct StreamedData {
    uint64_t offset = 0;    // where the data section was landed (the header's size)
    uint64_t checksum = 0;  // XXH3-64 of the bytes landed there
  };

  // Parses and verifies `size` bytes of `buffer`, then swaps the version in.
  // With `streamed`, the data is not hashed again: the header must end at
  // streamed->offset and its viper.checksum equal streamed->checksum.
  // Anything else is DataLoss and nothing is swapped in.
  Status VerifyAndSwap(std::shared_ptr<AlignedBuffer> buffer, uint64_t size, const std::string& source,
                       double receive_s, uint64_t expected_version, const StreamedData* streamed = nullptr) {
    const double t0 = MonotonicSeconds();
    safetensors::ParseOptions po;
    po.verify_checksum = streamed == nullptr;
    po.require_checksum = options_.tier != Tier::kPfs || options_.pfs_require_checksum;
    const std::byte* bytes = buffer->data();
    std::shared_ptr<const void> owner(buffer, bytes);
    safetensors::ParseInfo info;
    auto state = safetensors::Parse(owner, bytes, size, po, &info);
    if (!state.ok()) return state.status().WithContext(source);
    const bool verified = info.checksum != safetensors::ChecksumKind::kNone;
    if (!verified) state->metadata.version = expected_version;  // another writer's file: versioned by its name
    if (state->metadata.version != expected_version) {
      return DataLossError(source + ": carries version " + std::to_string(state->metadata.version) +
                           ", expected " + std::to_string(expected_version));
    }
    auto meta = safetensors::ParseMetadata(bytes, size);
    if (streamed) {
      uint64_t json_bytes = 0;
      for (int i = 0; i < 8; ++i)
        json_bytes |= static_cast<uint64_t>(std::to_integer<uint8_t>(bytes[i])) << (8 * i);
      if (json_bytes > size || 8 + json_bytes != streamed->offset) {
        return DataLossError(source + ": the header ends at byte " + std::to_string(8 + json_bytes) +
                             " but the data was received at offset " + std::to_string(streamed->offset));
      }
      std::optional<uint64_t> expected;
      if (meta.ok()) {
        auto it = meta->find("viper.checksum");
        if (it != meta->end()) expected = ChecksumFromHex(it->second);
      }
      if (!expected) return DataLossError(source + ": header has no readable viper.checksum");
      if (*expected != streamed->checksum) {
        return DataLossError(source + ": checksum mismatch: header says " + ChecksumToHex(*expected) +
                             " but the data received hashes to " + ChecksumToHex(streamed->checksum));
      }
    }
    auto version = std::make_shared<ModelVersion>();
    version->state = std::move(*state);
    version->bytes_owner = owner;
    version->bytes = bytes;
    version->size_bytes = size;
    if (meta.ok()) {
      auto it = meta->find("viper.checksum");
      if (it != meta->end()) version->checksum = ChecksumFromHex(it->second).value_or(0);
    }
    version->verified = verified;
    version->tier = options_.tier;
    version->source = source;
    version->receive_s = receive_s;
    version->verify_s = MonotonicSeconds() - t0;
    return Install(std::move(version));
  }

  // Makes `version` current unless a newer one already is.
  Status Install(std::shared_ptr<ModelVersion> version) {
    const uint64_t size = version->size_bytes;
    Callback cb;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Only ever move forward: an older version never replaces a newer one.
      if (current_ && current_->state.metadata.version >= version->state.metadata.version) {
        return Status::Ok();
      }
      current_ = version;
      ++summary_.received;
      samples_.push_back({options_.tier, Mode::kSync, "load", size, version->receive_s + version->verify_s});
      cb = callback_;
    }
    cv_.notify_all();
    if (cb) cb(version);
    return Status::Ok();
  }

  void Reject(uint64_t version, const std::string& source, const Status& status) {
    Log(LogLevel::kWarning, "transports",
        "rejected version " + std::to_string(version) + " from " + source + ": " + status.ToString());
    std::lock_guard<std::mutex> lock(mu_);
    rejections_.push_back({version, source, status});
    ++summary_.rejected;
    summary_.message = "version " + std::to_string(version) + " rejected: " + status.ToString();
  }

  void Finish(bool finished, bool lost, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      summary_.producer_finished = finished;
      summary_.producer_lost = lost;
      if (!message.empty()) summary_.message = message;
      thread_alive_ = false;
    }
    if (lost) Log(LogLevel::kWarning, "transports", message);
    cv_.notify_all();
  }

  // Reads version `version` from the PFS directory and swaps it in.
  Status LoadPfs(uint64_t version) {
    const double t0 = MonotonicSeconds();
    auto peek = AcquireBuffer(4096);
    if (!peek.ok()) return peek.status();
    std::shared_ptr<AlignedBuffer> buffer = *peek;
    // PfsStore::Read grows the buffer it is given; give it a private one.
    AlignedBuffer local = std::move(*buffer);
    auto size = store_->Read(version, &local);
    *buffer = std::move(local);
    if (!size.ok()) return size.status();
    return VerifyAndSwap(buffer, *size, store_->PathFor(version), MonotonicSeconds() - t0, version);
  }

  void PollLoop() {
    std::set<uint64_t> rejected;
    while (running_) {
      const double next = MonotonicSeconds() + options_.poll_period_s;
      auto versions = store_->ListVersions();
      if (!versions.ok()) {
        Reject(0, options_.pfs_dir, versions.status());
      } else {
        // Newest complete version not yet served nor rejected.
        for (auto it = versions->rbegin(); it != versions->rend(); ++it) {
          auto cur = Current();
          if (cur && cur->state.metadata.version >= *it) break;
          if (rejected.count(*it)) continue;
          Status st = LoadPfs(*it);
          if (st.ok()) break;
          rejected.insert(*it);
          Reject(*it, store_->PathFor(*it), st);
        }
      }
      while (running_ && MonotonicSeconds() < next) {
        std::this_thread::sleep_for(std::chrono::microseconds(
            std::min<int64_t>(10000, static_cast<int64_t>((next - MonotonicSeconds()) * 1e6) + 1)));
      }
    }
    Finish(false, false, "");
  }

#if VIPER_HAVE_MPI
  Status InitMpi() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      return FailedPreconditionError(
          "MPI is not initialised: create a transports::MpiSession (or call MPI_Init_thread) first");
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      return FailedPreconditionError("MPI was initialised without MPI_THREAD_MULTIPLE");
    if (MPI_Comm_dup(MPI_COMM_WORLD, &comm_) != MPI_SUCCESS) return AbortedError("MPI_Comm_dup failed");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    int size = 0;
    MPI_Comm_size(comm_, &size);
    MPI_Comm_rank(comm_, &rank_);
    size_ = size;
    internal::NodeName(host_name_, sizeof(host_name_));
    if (options_.producer_rank >= size) {
      return InvalidArgumentError("producer_rank: " + std::to_string(options_.producer_rank) +
                                  " is outside [0, " + std::to_string(size) + ")");
    }
    VIPER_ASSIGN_OR_RETURN(session_, internal::AgreeOnSession(comm_, options_.producer_rank));
    if (options_.tier == Tier::kHost && options_.host_protocol == HostProtocol::kOneSided) {
      if (MPI_Win_allocate(static_cast<MPI_Aint>(options_.window_slot_bytes), 1, MPI_INFO_NULL, comm_,
                           &win_base_, &win_) != MPI_SUCCESS) {
        return AbortedError("MPI_Win_allocate of " + std::to_string(options_.window_slot_bytes) +
                            " bytes failed");
      }
      MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
      std::memset(win_base_, 0, options_.window_slot_bytes);  // pre-touch
    }
    return Status::Ok();
  }

  void PushLoop() {
    (void)SelectGpu();  // the CUDA device is per thread
    const int producer = options_.producer_rank;
    double last_heard = MonotonicSeconds();
    internal::Backoff backoff(options_.idle_sleep_us);
    while (running_) {
      internal::Announce a;
      auto got = internal::TryRecvPod(comm_, producer, internal::kTagAnnounce, &a);
      if (!got.ok()) {
        Finish(false, true,
               "link to producer rank " + std::to_string(producer) + " broke: " + got.status().message());
        return;
      }
      if (!*got) {
        if (options_.producer_timeout_s > 0 &&
            MonotonicSeconds() - last_heard > options_.producer_timeout_s) {
          auto cur = Current();
          Finish(false, true,
                 "producer rank " + std::to_string(producer) + " sent nothing for " +
                     std::to_string(options_.producer_timeout_s) + " s; keeping " +
                     (cur ? "version " + std::to_string(cur->state.metadata.version)
                          : std::string("no version")));
          return;
        }
        backoff.Pause();
        continue;
      }
      backoff.Reset();
      if (a.session != session_) continue;  // left over from an earlier pair on a reused context id
      // CLOCK_MONOTONIC is shared by the processes of one node (MPI_Wtime is not
      // in Open MPI 4); across nodes this sample is only as good as clock sync.
      const double notify_s = MonotonicSeconds() - a.sent_wtime;
      {
        std::lock_guard<std::mutex> lock(mu_);
        samples_.push_back({options_.tier, Mode::kSync, "notify", 0, notify_s});
      }
      if (a.kind == internal::kAnnounceBye) {
        Finish(true, false, "producer closed");
        return;
      }
      const double t0 = MonotonicSeconds();
      Status st;
      std::string source = "rank " + std::to_string(producer);
      if (a.kind == internal::kAnnouncePfs) {
        st = LoadPfs(a.version);
        source = store_ ? store_->PathFor(a.version) : source;
      } else if (a.kind == internal::kAnnounceGpu) {
        st = ReceiveGpu(a, source);
      } else {
        st = ReceiveHost(a, source);
      }
      internal::Ack ack;
      ack.session = session_;
      ack.version = a.version;
      ack.ok = st.ok() ? 1 : 0;
      ack.code = static_cast<int32_t>(st.code());
      ack.load_s = MonotonicSeconds() - t0;
      ack.notify_s = notify_s;
      if (!st.ok()) Reject(a.version, source, st);
      if (st.code() == StatusCode::kAborted) {
        auto cur = Current();
        Finish(false, true,
               "producer rank " + std::to_string(producer) + " stopped mid-transfer of version " +
                   std::to_string(a.version) + " (" + st.message() + "); keeping " +
                   (cur ? "version " + std::to_string(cur->state.metadata.version) : "no version"));
        return;
      }
      (void)internal::SendPod(comm_, producer, internal::kTagAck, ack, TransferWindow(a));
      last_heard = MonotonicSeconds();
    }
    Finish(false, false, "stopped");
  }

  // Seconds a transfer announced by `a` may take: transfer_timeout_s after
  // the producer's longest wait for the other consumers' answers.
  double TransferWindow(const internal::Announce& a) const {
    return std::max(0.0, a.handshake_s) + options_.transfer_timeout_s;
  }
  double TransferDeadline(const internal::Announce& a) const { return MonotonicSeconds() + TransferWindow(a); }
  // TransferWindow for messages.
  std::string Seconds(const internal::Announce& a) const {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", TransferWindow(a));
    return buf;
  }

  // The answer to announcement `a`, not yet accepted.
  internal::Ready ReadyFor(const internal::Announce& a) const {
    internal::Ready ready;
    ready.session = session_;
    ready.version = a.version;
    std::memcpy(ready.host, host_name_, sizeof(ready.host));
    return ready;
  }

  // Answers announcement `a` with `ready`, accepting it when it is
  // `plausible` and a landing buffer of its size can be had. Returns that
  // buffer, or why the version was refused (the refusal has been sent).
  StatusOr<std::shared_ptr<AlignedBuffer>> Answer(const internal::Announce& a, bool plausible,
                                                  internal::Ready ready) {
    auto buffer = plausible ? AcquireBuffer(a.image_bytes)
                            : StatusOr<std::shared_ptr<AlignedBuffer>>(DataLossError(
                                  "announcement of version " + std::to_string(a.version) + " is inconsistent"));
    ready.accept = buffer.ok() ? 1 : 0;
    VIPER_RETURN_IF_ERROR(internal::SendPod(comm_, options_.producer_rank, internal::kTagReady, ready, TransferWindow(a)));
    return buffer;
  }

  Status ReceiveHost(const internal::Announce& a, const std::string& source) {
    const int producer = options_.producer_rank;
    const double t0 = MonotonicSeconds();
    if (a.shm_name[0] != '\0' && MapShm(a)) return ReceiveShm(a, source);
    internal::Ready ready = ReadyFor(a);
    if (a.protocol == static_cast<uint32_t>(HostProtocol::kOneSided)) {
      ready.accept = (win_ != MPI_WIN_NULL && a.image_bytes <= options_.window_slot_bytes) ? 1 : 0;
      VIPER_RETURN_IF_ERROR(internal::SendPod(comm_, producer, internal::kTagReady, ready, TransferWindow(a)));
      if (!ready.accept) {
        return OutOfRangeError("version of " + std::to_string(a.image_bytes) +
                               " bytes exceeds window_slot_bytes " +
                               std::to_string(options_.window_slot_bytes));
      }
      internal::Announce done;
      const double deadline = TransferDeadline(a);
      internal::Backoff backoff(options_.idle_sleep_us);
      for (;;) {
        VIPER_ASSIGN_OR_RETURN(bool got, internal::TryRecvPod(comm_, producer, internal::kTagDone, &done));
        if (got && done.session == session_ && done.version == a.version) break;
        if (MonotonicSeconds() > deadline)
          return AbortedError("no completion message within " + Seconds(a) + " s");
        backoff.Pause();
      }
      // Make the puts visible to this process's loads, then copy out of the
      // window so the slot is free for the next version at once.
      int rank = 0;
      MPI_Comm_rank(comm_, &rank);
      MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win_);
      MPI_Win_sync(win_);
      MPI_Win_unlock(rank, win_);
      VIPER_ASSIGN_OR_RETURN(auto buffer, AcquireBuffer(a.image_bytes));
      std::memcpy(buffer->data(), win_base_, a.image_bytes);
      return VerifyAndSwap(buffer, a.image_bytes, source, MonotonicSeconds() - t0, a.version);
    }
    // Two-sided (wire order in mpi_link.h): plan, data at header_bytes while
    // it is hashed, header last.
    const bool plausible = a.header_bytes >= 8 && a.header_bytes <= a.image_bytes &&
                           a.data_chunks <= a.image_bytes - a.header_bytes;
    VIPER_ASSIGN_OR_RETURN(const std::shared_ptr<AlignedBuffer> buffer, Answer(a, plausible, ready));
    double deadline = TransferDeadline(a);
    // Where the bytes come from and whom this rank forwards them to.
    internal::Route route;
    route.parent = producer;
    if (a.routed) {
      VIPER_RETURN_IF_ERROR(AwaitRoute(a.version, deadline, &route));
      if (route.parent != producer) {
        deadline = std::min(deadline, MonotonicSeconds() + route.relay_timeout_s);
      }
    }
    const int parent = route.parent;
    char in_time[48];
    std::snprintf(in_time, sizeof(in_time), "within %.1f s", deadline - MonotonicSeconds());
    // The producer stopping is the end of this subscription; a relay
    // stopping costs only this version.
    auto lost = [&](const std::string& what) {
      if (parent == producer) return AbortedError(what);
      return UnavailableError(what + " (relay rank " + std::to_string(parent) +
                              "; the version is not served, the subscription goes on)");
    };
    // Receives that time out stay posted: what they land in is kept until
    // MPI_Finalize (KeepUntilFinalize).
    auto plan = std::make_unique<std::vector<uint64_t>>(a.data_chunks);
    std::vector<internal::Chunk> plan_chunk = {
        {reinterpret_cast<std::byte*>(plan->data()), a.data_chunks * sizeof(uint64_t)}};
    std::vector<internal::ChunkedTransfer> transfers(1);
    transfers[0].peer = parent;
    transfers[0].chunks = &plan_chunk;
    internal::RunChunked(comm_, 1, &transfers, deadline);
    if (transfers[0].failed) {
      internal::KeepUntilFinalize(std::shared_ptr<const void>(std::move(plan)));
      return lost("the chunk plan of version " + std::to_string(a.version) + " did not arrive " + std::string(in_time));
    }
    const uint64_t data_bytes = a.image_bytes - a.header_bytes;
    std::byte* base = buffer->data();
    std::vector<internal::Chunk> chunks;
    std::vector<uint64_t> ends;  // end of each data chunk within the data section
    uint64_t off = 0;
    for (uint64_t n : *plan) {
      if (n == 0 || n > static_cast<uint64_t>(std::numeric_limits<int>::max()) || n > data_bytes - off) break;
      chunks.push_back({base + a.header_bytes + off, n});
      off += n;
      ends.push_back(off);
    }
    if (chunks.size() != plan->size() || off != data_bytes) {
      // The producer's stream is out of step with this consumer: give up on it.
      return AbortedError("the chunk plan of version " + std::to_string(a.version) + " does not add up to " +
                          std::to_string(data_bytes) + " data bytes");
    }
    chunks.push_back({base, a.header_bytes});
    std::optional<internal::LandingHasher> hasher;
    hasher.emplace(base + a.header_bytes, /*use_thread=*/ends.size() >= 2);
    internal::ChunkHooks hooks;
    hooks.completed = [&](std::size_t index) {
      if (index < ends.size()) hasher->Landed(ends[index]);
    };
    transfers[0] = internal::ChunkedTransfer();
    transfers[0].peer = parent;
    transfers[0].chunks = &chunks;
    // Relay: the same messages, plan first, each sent on once it has landed.
    std::vector<internal::Chunk> forward;
    if (route.children_count > 0) {
      forward = plan_chunk;
      forward.insert(forward.end(), chunks.begin(), chunks.end());
    }
    for (int i = 0; i < route.children_count; ++i) {
      internal::ChunkedTransfer t;
      t.peer = route.children[i];
      t.send = true;
      t.chunks = &forward;
      transfers.push_back(std::move(t));
    }
    hooks.ready = [&](const internal::ChunkedTransfer& t, std::size_t index) {
      return !t.send || index <= transfers[0].completed;  // forward[index] is chunks[index - 1]
    };
    internal::RunChunked(comm_, 8, &transfers, deadline, hooks);
    for (std::size_t i = 1; i < transfers.size(); ++i) {
      if (!transfers[i].failed) continue;
      // Freed sends may still read the plan and the landing buffer (which
      // the pool never frees): keep the plan too.
      if (plan) internal::KeepUntilFinalize(std::shared_ptr<const void>(std::move(plan)));
      // The producer drops that rank when it does not acknowledge.
      if (!transfers[0].failed) {
        Log(LogLevel::kWarning, "transports",
            "rank " + std::to_string(rank_) + " could not forward version " + std::to_string(a.version) +
                " to rank " + std::to_string(transfers[i].peer) + " in time");
      }
    }
    if (transfers[0].failed) {
      hasher.reset();  // reads only what had landed
      // Receives may still land in this buffer: take it out of the pool and
      // keep it until MPI_Finalize.
      internal::KeepUntilFinalize(buffer);
      pool_.erase(std::remove(pool_.begin(), pool_.end(), buffer), pool_.end());
      return lost("transfer of " + std::to_string(a.image_bytes) + " bytes did not complete " + std::string(in_time));
    }
    const StreamedData streamed{a.header_bytes, hasher->Finish()};
    return VerifyAndSwap(buffer, a.image_bytes, source, MonotonicSeconds() - t0, a.version, &streamed);
  }

  // shm protocol: whether this rank can copy version `a` out of the
  // producer's segment: on the producer's node, and mapped (once per
  // segment). Otherwise the version comes as a two-sided stream.
  bool MapShm(const internal::Announce& a) {
    if (!options_.allow_shm || strncmp(a.host, host_name_, sizeof(a.host)) != 0) return false;
    const std::string name(a.shm_name, strnlen(a.shm_name, sizeof(a.shm_name)));
    if (shm_ && shm_->name() == name && shm_->payload_bytes() == a.shm_payload_bytes) return true;
    shm_.reset();
    auto opened = internal::ShmSegment::Open(name, a.shm_payload_bytes);
    if (!opened.ok()) {
      Log(LogLevel::kWarning, "transports",
          "rank " + std::to_string(rank_) + " cannot map the producer's shared memory (" +
              opened.status().ToString() + "); receiving over MPI instead");
      return false;
    }
    shm_ = std::move(*opened);
    return true;
  }

  // shm protocol (shm_segment.h), segment mapped: copies the data section out
  // as the producer publishes its progress, hashing each block from cache,
  // then the header once the version is complete.
  Status ReceiveShm(const internal::Announce& a, const std::string& source) {
    const double t0 = MonotonicSeconds();
    internal::Ready ready = ReadyFor(a);
    ready.via_shm = 1;
    const bool plausible =
        a.header_bytes >= 8 && a.header_bytes <= a.image_bytes && a.image_bytes <= shm_->payload_bytes();
    VIPER_ASSIGN_OR_RETURN(const std::shared_ptr<AlignedBuffer> buffer, Answer(a, plausible, ready));

    const internal::ShmControl* control = shm_->control();
    const std::byte* image = shm_->payload();
    std::byte* base = buffer->data();
    const uint64_t data_bytes = a.image_bytes - a.header_bytes;
    const double deadline = TransferDeadline(a);
    auto moved_on = [&] {
      return UnavailableError("the producer started version " +
                              std::to_string(control->version.load(std::memory_order_acquire)) +
                              " in the shared segment before this rank had copied version " +
                              std::to_string(a.version) + " out (it was too slow and was dropped)");
    };
    Xxh3Hasher hasher;
    uint64_t copied = 0;
    internal::Backoff backoff(options_.idle_sleep_us);
    for (;;) {
      if (control->version.load(std::memory_order_acquire) != a.version) return moved_on();
      const uint64_t published = std::min(control->data_bytes.load(std::memory_order_acquire), data_bytes);
      if (published > copied) {
        internal::CopyAndHash(base + a.header_bytes + copied, image + a.header_bytes + copied, published - copied,
                              &hasher);
        copied = published;
        backoff.Reset();
        continue;
      }
      if (copied == data_bytes && control->complete.load(std::memory_order_acquire) == a.version + 1) break;
      if (MonotonicSeconds() > deadline) {
        return AbortedError("version " + std::to_string(a.version) + " stopped at " + std::to_string(copied) +
                            " of " + std::to_string(data_bytes) + " data bytes in the shared segment " +
                            Seconds(a) + " s after its announcement");
      }
      backoff.Pause();
    }
    std::memcpy(base, image, a.header_bytes);
    // The producer rewrites the segment only after this rank's acknowledgement
    // (unless it has dropped this rank): a newer version now means torn bytes.
    if (control->version.load(std::memory_order_acquire) != a.version) return moved_on();
    const StreamedData streamed{a.header_bytes, hasher.Digest()};
    return VerifyAndSwap(buffer, a.image_bytes, source + " (shm)", MonotonicSeconds() - t0, a.version,
                         &streamed);
  }

  // Waits for the producer's Route of `version` and checks it.
  Status AwaitRoute(uint64_t version, double deadline, internal::Route* route) {
    internal::Backoff backoff(options_.idle_sleep_us);
    for (;;) {
      VIPER_ASSIGN_OR_RETURN(bool got,
                             internal::TryRecvPod(comm_, options_.producer_rank, internal::kTagRoute, route));
      if (got && route->session == session_ && route->version == version) break;
      if (got) continue;  // stale
      if (MonotonicSeconds() > deadline) {
        return AbortedError("no route for version " + std::to_string(version) + " in time (transfer_timeout_s " +
                            "after the producer's handshake wait)");
      }
      backoff.Pause();
    }
    auto bad_rank = [&](int r) { return r < 0 || r >= size_ || r == rank_; };
    bool ok = !bad_rank(route->parent) && route->children_count >= 0 &&
              route->children_count <= internal::kMaxRelayChildren && route->relay_timeout_s > 0;
    for (int i = 0; ok && i < route->children_count; ++i) ok = !bad_rank(route->children[i]);
    if (!ok) return AbortedError("the route of version " + std::to_string(version) + " is inconsistent");
    return Status::Ok();
  }

#if VIPER_HAVE_CUDA
  // gpu tier: copies the announced device image by CUDA IPC (same node) or
  // receives it through pinned host memory in chunks, each chunk's
  // host-to-device copy overlapping the next chunk's receive; then checks
  // sum64 on the device against the header and the announcement.
  Status ReceiveGpu(const internal::Announce& a, const std::string& source) {
    const int producer = options_.producer_rank;
    if (a.header_bytes == 0 || a.header_bytes > a.image_bytes) {
      return DataLossError(source + ": announced header of " + std::to_string(a.header_bytes) +
                           " bytes in an image of " + std::to_string(a.image_bytes));
    }
    internal::Ready ready = ReadyFor(a);
    const void* peer = nullptr;
    cudaEvent_t peer_event = nullptr;
    bool ipc = options_.allow_ipc && std::strncmp(a.host, host_name_, sizeof(a.host)) == 0;
    if (ipc) {
      Status opened = OpenIpc(a, &peer, &peer_event);
      if (!opened.ok()) {
        Log(LogLevel::kWarning, "transports",
            "CUDA IPC unavailable (" + opened.ToString() + "); receiving through host memory");
        ipc = false;
      }
    }
    ready.via_host = ipc ? 0 : 1;
    auto buffer = AcquireDeviceBuffer(a.image_bytes);
    ready.accept = buffer.ok() ? 1 : 0;
    VIPER_RETURN_IF_ERROR(internal::SendPod(comm_, producer, internal::kTagReady, ready, TransferWindow(a)));
    if (!buffer.ok()) return buffer.status();
    std::byte* dst = (*buffer)->data();
    const double t0 = MonotonicSeconds();  // receive_s: from here until the bytes are in `dst`
    if (ipc) {
      VIPER_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(gpu_stream_, peer_event, 0));
      VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy_start_, gpu_stream_));
      VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, static_cast<const std::byte*>(peer) + a.image_offset,
                                                 a.image_bytes, cudaMemcpyDeviceToDevice, gpu_stream_));
    } else {
      if (pinned_bytes_ < a.image_bytes) {
        if (pinned_) cudaFreeHost(pinned_);
        pinned_ = nullptr;
        pinned_bytes_ = 0;
        VIPER_CUDA_RETURN_IF_ERROR(cudaMallocHost(&pinned_, a.image_bytes));
        pinned_bytes_ = a.image_bytes;
      }
      auto* host = static_cast<std::byte*>(pinned_);
      VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy_start_, gpu_stream_));
      std::vector<internal::Chunk> chunks;
      internal::AppendChunks(host, a.image_bytes, a.chunk_bytes, &chunks);
      std::vector<internal::ChunkedTransfer> transfers(1);
      transfers[0].peer = producer;
      transfers[0].chunks = &chunks;
      // Each landed chunk goes on to the device while the next ones arrive.
      Status copy_status;
      internal::ChunkHooks hooks;
      hooks.completed = [&](std::size_t k) {
        const uint64_t off = static_cast<uint64_t>(chunks[k].data - host);
        const cudaError_t e =
            cudaMemcpyAsync(dst + off, chunks[k].data, chunks[k].size, cudaMemcpyHostToDevice, gpu_stream_);
        if (e != cudaSuccess && copy_status.ok()) copy_status = internal::CudaStatus("cudaMemcpyAsync", e);
      };
      internal::RunChunked(comm_, 8, &transfers, TransferDeadline(a), hooks);
      if (transfers[0].failed) {
        // Receives may still land in the pinned buffer: keep it until MPI_Finalize.
        internal::KeepUntilFinalize(std::shared_ptr<void>(pinned_, [](void* p) { cudaFreeHost(p); }));
        pinned_ = nullptr;
        pinned_bytes_ = 0;
        return AbortedError("transfer of " + std::to_string(a.image_bytes) +
                            " bytes did not complete within " + Seconds(a) +
                            " s");
      }
      VIPER_RETURN_IF_ERROR(copy_status);
    }
    VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy_end_, gpu_stream_));
    VIPER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(gpu_stream_));
    const double t1 = MonotonicSeconds();
    float copy_ms = 0;
    VIPER_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&copy_ms, copy_start_, copy_end_));
    std::vector<std::byte> header(a.header_bytes);
    VIPER_CUDA_RETURN_IF_ERROR(cudaMemcpy(header.data(), dst, a.header_bytes, cudaMemcpyDeviceToHost));
    const uint64_t data_bytes = a.image_bytes - a.header_bytes;
    VIPER_ASSIGN_OR_RETURN(
        uint64_t sum, internal::Sum64Device(dst + a.header_bytes, data_bytes, scratch_.data(), gpu_stream_));
    auto meta = safetensors::ParseMetadata(header.data(), header.size());
    if (!meta.ok()) return meta.status().WithContext(source);
    auto it = meta->find(internal::kDeviceChecksumKey);
    std::optional<uint64_t> expected;
    if (it != meta->end()) expected = ChecksumFromHex(it->second);
    if (!expected) {
      return DataLossError(source + ": version " + std::to_string(a.version) + " has no valid " +
                           internal::kDeviceChecksumKey + " in its header");
    }
    if (sum != *expected || sum != a.checksum) {
      return DataLossError(source + ": checksum mismatch: header says " + ChecksumToHex(*expected) +
                           ", announcement " + ChecksumToHex(a.checksum) + ", but the " +
                           std::to_string(data_bytes) + "-byte data section in device memory sums to " +
                           ChecksumToHex(sum));
    }
    std::shared_ptr<const void> owner(*buffer, dst);
    auto state = safetensors::ParseExternalData(owner, header.data(), header.size(), dst + a.header_bytes,
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
    version->source = source + (ipc ? " (cuda-ipc)" : " (pinned-host pipeline)");
    version->receive_s = t1 - t0;
    version->verify_s = MonotonicSeconds() - t1;
    version->copy_device_s = copy_ms * 1e-3;
    return Install(std::move(version));
  }

  // Maps the producer's staging allocation and opens its event (cached: the
  // producer has two staging buffers, re-exported only when they grow).
  Status OpenIpc(const internal::Announce& a, const void** base, cudaEvent_t* event) {
    const std::string mem_key(a.ipc_mem, sizeof(a.ipc_mem)), event_key(a.ipc_event, sizeof(a.ipc_event));
    for (auto& m : ipc_) {
      if (m.mem_key == mem_key && m.event_key == event_key) {
        *base = m.base;
        *event = m.event;
        return Status::Ok();
      }
    }
    IpcMapping m;
    m.mem_key = mem_key;
    m.event_key = event_key;
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    std::memcpy(&mh, a.ipc_mem, sizeof(mh));
    std::memcpy(&eh, a.ipc_event, sizeof(eh));
    cudaError_t e = cudaIpcOpenMemHandle(&m.base, mh, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return internal::CudaStatus("cudaIpcOpenMemHandle", e);
    }
    e = cudaIpcOpenEventHandle(&m.event, eh);
    if (e != cudaSuccess) {
      cudaGetLastError();
      cudaIpcCloseMemHandle(m.base);
      return internal::CudaStatus("cudaIpcOpenEventHandle", e);
    }
    if (ipc_.size() >= 4) {  // stale mappings of buffers the producer has replaced
      cudaIpcCloseMemHandle(ipc_.front().base);
      cudaEventDestroy(ipc_.front().event);
      ipc_.erase(ipc_.begin());
    }
    ipc_.push_back(m);
    *base = m.base;
    *event = m.event;
    return Status::Ok();
  }

  StatusOr<std::shared_ptr<internal::DeviceBuffer>> AcquireDeviceBuffer(uint64_t bytes) {
    for (auto& b : device_pool_) {
      if (b.use_count() == 1 && b->capacity() >= bytes) return b;
    }
    device_pool_.erase(std::remove_if(device_pool_.begin(), device_pool_.end(),
                                      [](const auto& b) { return b.use_count() == 1; }),
                       device_pool_.end());
    VIPER_ASSIGN_OR_RETURN(internal::DeviceBuffer fresh, internal::DeviceBuffer::Allocate(bytes));
    device_pool_.push_back(std::make_shared<internal::DeviceBuffer>(std::move(fresh)));
    return device_pool_.back();
  }
#else
  Status ReceiveGpu(const internal::Announce&, const std::string&) {
    return UnavailableError("tier gpu needs CUDA; Viper was built without it");
  }
#endif

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  std::unique_ptr<internal::ShmSegment> shm_;  // shm protocol: the producer's segment, mapped
  void* win_base_ = nullptr;
  uint64_t session_ = 0;
  int rank_ = 0;
  int size_ = 1;
  char host_name_[64] = {0};  // this node's name (fan-out by node, CUDA IPC)
#else
  Status InitMpi() { return UnavailableError("notify push needs MPI; Viper was built without it"); }
  void PushLoop() { Finish(false, false, "built without MPI"); }
#endif

#if VIPER_HAVE_CUDA
  Status InitGpu() {
    VIPER_RETURN_IF_ERROR(internal::OpenGpuStream(options_.gpu_device, &gpu_stream_));
    VIPER_ASSIGN_OR_RETURN(scratch_, internal::DeviceBuffer::Allocate(8));
    VIPER_CUDA_RETURN_IF_ERROR(cudaEventCreate(&copy_start_));
    VIPER_CUDA_RETURN_IF_ERROR(cudaEventCreate(&copy_end_));
    for (int i = 0; options_.preallocate_bytes > 0 && i < 2; ++i) {
      VIPER_ASSIGN_OR_RETURN(internal::DeviceBuffer b,
                             internal::DeviceBuffer::Allocate(options_.preallocate_bytes));
      device_pool_.push_back(std::make_shared<internal::DeviceBuffer>(std::move(b)));
    }
    return Status::Ok();
  }
  Status SelectGpu() {
    if (options_.tier == Tier::kGpu) VIPER_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.gpu_device));
    return Status::Ok();
  }
  struct IpcMapping {
    std::string mem_key, event_key;  // the handles' bytes
    void* base = nullptr;
    cudaEvent_t event = nullptr;
  };
  std::vector<IpcMapping> ipc_;                                       // receiving thread only
  std::vector<std::shared_ptr<internal::DeviceBuffer>> device_pool_;  // receiving thread only
  internal::DeviceBuffer scratch_;
  cudaStream_t gpu_stream_ = nullptr;
  cudaEvent_t copy_start_ = nullptr, copy_end_ = nullptr;  // time the copy on the device
  void* pinned_ = nullptr;                                 // landing buffer of the pinned-host path
  uint64_t pinned_bytes_ = 0;
#else
  Status InitGpu() { return UnavailableError("tier gpu: no CUDA device: Viper was built without CUDA"); }
  Status SelectGpu() { return Status::Ok(); }
#endif

  Options options_;
  std::unique_ptr<PfsStore> store_;
  std::vector<std::shared_ptr<AlignedBuffer>> pool_;  // receiving thread only
  std::atomic<bool> running_{false};
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const ModelVersion> current_;
  bool thread_alive_ = true;
  Callback callback_;
  std::vector<Rejection> rejections_;
  std::vector<CostSample> samples_;
  Summary summary_;
};

Subscriber::Subscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Subscriber::~Subscriber() = default;

StatusOr<std::unique_ptr<Subscriber>> Subscriber::Create(const Options& options, Callback callback) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("Subscriber::Options::" + error);
  auto impl = std::make_unique<Impl>(options);
  if (callback) impl->SetCallback(std::move(callback));
  VIPER_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Subscriber>(new Subscriber(std::move(impl)));
}

std::shared_ptr<const ModelVersion> Subscriber::Current() const { return impl_->Current(); }
StatusOr<std::shared_ptr<const ModelVersion>> Subscriber::WaitForVersion(uint64_t version, double timeout_s) {
  return impl_->WaitForVersion(version, timeout_s);
}
bool Subscriber::WaitUntilDone(double timeout_s) { return impl_->WaitUntilDone(timeout_s); }
void Subscriber::SetCallback(Callback callback) { impl_->SetCallback(std::move(callback)); }
std::vector<Subscriber::Rejection> Subscriber::Rejections() const { return impl_->Rejections(); }
std::vector<CostSample> Subscriber::CostSamples() const { return impl_->CostSamples(); }
Subscriber::Summary Subscriber::summary() const { return impl_->summary(); }
void Subscriber::Stop() { impl_->Stop(); }

}  // namespace transports
}  // namespace viper
