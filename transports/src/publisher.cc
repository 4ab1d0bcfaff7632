#include "viper/transports/publisher.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "fanout.h"
#include "keep_until_finalize.h"
#include "shm_segment.h"
#include "staging.h"
#include "viper/config.h"
#include "viper/core/log.h"
#include "viper/transports/device_memory.h"
#include "viper/transports/pfs_store.h"

#if VIPER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "device_buffer.h"
#endif

#if VIPER_HAVE_MPI
#include "mpi_link.h"
#endif

namespace viper {
namespace transports {

bool Publisher::Options::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (chunk_bytes == 0 || chunk_bytes > (1ull << 30)) return fail("chunk_bytes: must be in [1, 2^30]");
  if (max_inflight_chunks < 1 || max_inflight_chunks > 1024)
    return fail("max_inflight_chunks: must be in [1, 1024]");
  if (!(peer_timeout_s > 0)) return fail("peer_timeout_s: must be > 0");
  if (notify == Notify::kPoll && tier != Tier::kPfs) {
    return fail("notify: poll needs tier pfs (host and gpu versions are pushed)");
  }
  if (tier == Tier::kPfs && pfs_dir.empty()) return fail("pfs_dir: tier pfs needs a directory");
  if (pfs_writer_threads < 1 || pfs_writer_threads > 64)
    return fail("pfs_writer_threads: must be in [1, 64]");
  if (pfs_keep_versions < 0) return fail("pfs_keep_versions: must be >= 0");
  if (snapshot_threads < 0 || snapshot_threads > 64)
    return fail("snapshot_threads: must be in [0, 64] (0 = one per usable CPU, at most 4)");
  if (gpu_device < 0) return fail("gpu_device: must be >= 0");
  if (tree_arity < 1 || tree_arity > 32) return fail("tree_arity: must be in [1, 32]");
  if (fanout == Fanout::kTree && (tier != Tier::kHost || host_protocol == HostProtocol::kOneSided)) {
    return fail("fanout: tree needs tier host with the two-sided or shm protocol");
  }
  for (int r : subscriber_ranks) {
    if (r < 0) return fail("subscriber_ranks: ranks must be >= 0");
  }
  return true;
}

std::string Publisher::VersionReport::BriefReport() const {
  std::ostringstream s;
  s << "version " << version << " (iteration " << iteration << ", " << bytes << " bytes): stall " << stall_s
    << " s, snapshot " << snapshot_s << " s, transfer " << transfer_s << " s";
  if (superseded) s << ", superseded";
  for (const auto& c : consumers) {
    s << "; rank " << c.rank << ": "
      << (c.delivered ? "servable after " + std::to_string(c.servable_s) + " s"
                      : (c.lost ? "lost (" + c.message + ")" : "not delivered (" + c.message + ")"));
  }
  return s.str();
}

std::string Publisher::Summary::BriefReport() const {
  std::ostringstream s;
  s << published << " published, " << sent << " sent, " << superseded << " superseded, stall "
    << total_stall_s << " s total";
  if (!lost_consumers.empty()) {
    s << ", lost consumers:";
    for (int r : lost_consumers) s << ' ' << r;
  }
  if (!message.empty()) s << " (" << message << ")";
  return s.str();
}

namespace {

// Bytes hashed between two passes over the in-flight sends: small enough that
// completions are noticed (and new chunks posted) promptly. (Both constants
// are used by the MPI paths only: maybe_unused keeps clang quiet without MPI.)
[[maybe_unused]] constexpr uint64_t kHashSliceBytes = 256 * 1024;

// shm protocol: bytes the producer copies (and hashes) between two updates
// of its progress in the segment, which the consumers copy out behind it.
[[maybe_unused]] constexpr uint64_t kShmProgressBytes = 1 << 20;

// One version to stream: its data section as ranges in order, and how to get
// the padded header once the checksum of those ranges is known.
struct StreamSource {
  uint64_t version = 0;
  int64_t iteration = 0;
  uint64_t header_bytes = 0;
  uint64_t data_bytes = 0;
  std::vector<internal::ByteRange> ranges;
  // Owners of the memory of `ranges`, kept until MPI_Finalize when a
  // consumer is dropped mid-transfer (its freed send requests may still
  // read them); empty where that memory outlives the publisher anyway.
  std::vector<std::shared_ptr<const void>> owners;
  // Returns header_bytes bytes that stay valid while the pointer is held.
  std::function<std::shared_ptr<const std::byte>(uint64_t checksum)> header;
};

}  // namespace

class Publisher::Impl {
 public:
  explicit Impl(const Options& options) : options_(options) {}
  ~Impl() {
    (void)Close();
#if VIPER_HAVE_CUDA
    for (cudaEvent_t e : chunk_events_) cudaEventDestroy(e);
    if (pinned_) cudaFreeHost(pinned_);
    if (gpu_stream_) cudaStreamDestroy(gpu_stream_);
#endif
  }

  Status Init() {
    snapshot_threads_ = options_.snapshot_threads > 0 ? options_.snapshot_threads
                                                      : std::min(4, internal::UsableCpus());
    if (options_.tier == Tier::kPfs) {
      PfsStore::Options po;
      po.dir = options_.pfs_dir;
      po.o_direct = options_.o_direct;
      po.writer_threads = options_.pfs_writer_threads;
      po.keep_versions = options_.pfs_keep_versions;
      po.layout = options_.pfs_layout;
      std::string error;
      if (!po.IsValid(&error)) return InvalidArgumentError("pfs options: " + error);
      store_ = std::make_unique<PfsStore>(po);
      VIPER_RETURN_IF_ERROR(store_->ListVersions().status());  // the directory must exist
    }
    uses_mpi_ = options_.tier != Tier::kPfs || options_.notify == Notify::kPush;
    if (uses_mpi_) VIPER_RETURN_IF_ERROR(InitMpi());
    if (options_.tier == Tier::kGpu) VIPER_RETURN_IF_ERROR(InitGpu());  // after MPI: needs the node name
#if VIPER_HAVE_MPI
    // The shared segment now, mapped and touched, not in the first publish.
    if (options_.staging_bytes > 0) (void)EnsureSegment(options_.staging_bytes, options_.staging_bytes);
#endif
    if (options_.staging_bytes > 0 && !(options_.mode == Mode::kSync && Streams())) {
      // Pre-allocate and pre-touch both staging buffers now, not in the first stall.
      for (auto& s : staging_) {
        ModelState empty;
        VIPER_RETURN_IF_ERROR(s.Snapshot(empty, 0, 0, 0, options_.staging_bytes,
                                         /*hash_while_copying=*/false, snapshot_threads_));
      }
    }
    if (options_.mode == Mode::kAsync) sender_ = std::thread([this] { SenderLoop(); });
    return Status::Ok();
  }

  StatusOr<VersionReport> Publish(const ModelState& state, int64_t iteration) {
    if (closed_) return FailedPreconditionError("Publish after Close");
    VIPER_RETURN_IF_ERROR(SelectGpu());
    const double t0 = MonotonicSeconds();
    VersionReport report;
    report.version = next_version_;
    report.iteration = iteration;
    if (options_.mode == Mode::kSync && Streams()) {
      // Straight from the caller's tensors: no snapshot (snapshot_s = 0); the
      // checksum is computed while the chunks are in flight.
      internal::DescribedVersion& d = described_;
      VIPER_RETURN_IF_ERROR(d.Describe(state, next_version_, iteration, options_.producer_id));
      report.bytes = d.header_bytes() + d.data_bytes();
      StreamSource src;
      src.version = d.version();
      src.iteration = d.iteration();
      src.header_bytes = d.header_bytes();
      src.data_bytes = d.data_bytes();
      src.ranges = d.ranges();
      for (const Tensor& t : state.tensors()) {
        if (t.owner) src.owners.push_back(t.owner);
      }
      src.header = [&d](uint64_t checksum) { return d.Header(checksum); };
      Status st = SendStreamed(src, t0, &report);
      report.stall_s = MonotonicSeconds() - t0;
      report.sent = true;
      ++next_version_;
      Record(report);
      if (!st.ok()) return st;
      return report;
    }
    if (options_.mode == Mode::kSync) {
      internal::StagedVersion& s = staging_[0];
      VIPER_RETURN_IF_ERROR(s.Snapshot(state, next_version_, iteration, options_.producer_id,
                                       options_.staging_bytes,
                                       /*hash_while_copying=*/true));
      report.snapshot_s = MonotonicSeconds() - t0;
      VIPER_RETURN_IF_ERROR(s.Finalize());
      report.bytes = s.image_bytes();
      Status st = Send(s, t0, &report);
      report.stall_s = MonotonicSeconds() - t0;
      report.sent = true;
      ++next_version_;
      Record(report);
      if (!st.ok()) return st;
      return report;
    }
    // Async: snapshot into the buffer that is not being sent; a pending
    // (unsent) snapshot there is superseded.
    int idx;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!sender_status_.ok()) return sender_status_;
      if (pending_ >= 0) {
        idx = pending_;
        pending_ = -1;
        reports_[pending_version_].superseded = true;
        ++superseded_;
      } else {
        idx = sending_ == 0 ? 1 : 0;
      }
    }
    Status st =
        staging_[idx].Snapshot(state, next_version_, iteration, options_.producer_id, options_.staging_bytes,
                               /*hash_while_copying=*/false, snapshot_threads_);
    report.snapshot_s = MonotonicSeconds() - t0;
    report.stall_s = report.snapshot_s;
    if (!st.ok()) return st;
    {
      std::lock_guard<std::mutex> lock(mu_);
      report.bytes = staging_[idx].data_bytes();
      pending_ = idx;
      pending_version_ = reports_.size();
      pending_start_s_ = t0;
      reports_.push_back(report);
      ++published_;
      total_stall_s_ += report.stall_s;
    }
    ++next_version_;
    cv_.notify_all();
    return report;
  }

  Status Flush() {
    if (options_.mode != Mode::kAsync) return Status::Ok();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return (pending_ < 0 && sending_ < 0) || !sender_running_; });
    return sender_status_;
  }

  Status Close() {
    if (closed_) return Status::Ok();
    Status st = Flush();
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
    if (sender_.joinable()) sender_.join();
#if VIPER_HAVE_MPI
    if (comm_ != MPI_COMM_NULL) {
      internal::Announce bye;
      bye.session = session_;
      bye.kind = internal::kAnnounceBye;
      for (int r : live_) (void)internal::SendPod(comm_, r, internal::kTagAnnounce, bye, options_.peer_timeout_s);
      if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
      segment_.reset();
      // Not freed (Open MPI frees it at MPI_Finalize): a message still in
      // flight on a freed communicator is matched on the next one that
      // reuses its context id, with Open MPI's per-peer sequence numbers out
      // of step, and that pair then loses its handshakes (seen at np 3 with
      // bound ranks: the goodbye to consumers that had already given up on a
      // silent producer). Session ids cannot repair that; unique ids can.
      comm_ = MPI_COMM_NULL;
    }
#endif
    return st;
  }

  std::vector<VersionReport> Reports() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }

  std::vector<CostSample> CostSamples() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<CostSample> out;
    for (const auto& r : reports_) {
      if (r.superseded) continue;
      out.push_back({options_.tier, options_.mode, "stall", r.bytes, r.stall_s});
      if (!r.sent) continue;
      out.push_back({options_.tier, options_.mode, "transfer", r.bytes, r.transfer_s});
      for (const auto& c : r.consumers) {
        if (!c.delivered) continue;
        out.push_back({options_.tier, options_.mode, "update", r.bytes, c.servable_s});
        if (c.load_s > 0) out.push_back({options_.tier, options_.mode, "load", r.bytes, c.load_s});
      }
    }
    return out;
  }

  Summary summary() const {
    std::lock_guard<std::mutex> lock(mu_);
    Summary s;
    s.published = published_;
    s.superseded = superseded_;
    for (const auto& r : reports_) s.sent += r.sent ? 1 : 0;
    s.lost_consumers = lost_;
    s.total_stall_s = total_stall_s_;
    s.message = sender_status_.ok() ? last_error_ : sender_status_.ToString();
    return s;
  }

  const Options& options() const { return options_; }

 private:
  void Record(const VersionReport& report) {
    std::lock_guard<std::mutex> lock(mu_);
    reports_.push_back(report);
    ++published_;
    total_stall_s_ += report.stall_s;
  }

  void SenderLoop() {
    (void)SelectGpu();  // the CUDA device is per thread
    for (;;) {
      int idx;
      std::size_t report_index;
      double start_s;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return pending_ >= 0 || closed_; });
        if (pending_ < 0) break;
        idx = sending_ = pending_;
        pending_ = -1;
        report_index = pending_version_;
        start_s = pending_start_s_;
      }
      VersionReport r;
      Status st;
      if (Streams()) {
        st = StreamSnapshot(staging_[idx], start_s, &r);
      } else {
        st = staging_[idx].Finalize();
        if (st.ok()) {
          r.bytes = staging_[idx].image_bytes();
          st = Send(staging_[idx], start_s, &r);
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        VersionReport& rep = reports_[report_index];
        rep.bytes = r.bytes;
        rep.transfer_s = r.transfer_s;
        rep.notify_s = r.notify_s;
        rep.consumers = r.consumers;
        rep.sent = st.ok();
        if (!st.ok()) {
          last_error_ = st.ToString();
          // A failing PFS or codec is not transient: stop and report it on the next Publish.
          if (st.code() != StatusCode::kAborted) {
            sender_status_ = st;
            sender_running_ = false;
          }
        }
        sending_ = -1;
      }
      cv_.notify_all();
      if (!sender_running_) break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    sender_running_ = false;
    cv_.notify_all();
  }

  // Moves one finalized staged version to the consumers through the PFS or
  // the one-sided protocol (two-sided streams: SendStreamed). `start_s` is when
  // its Publish began (servable times count from there).
  Status Send(const internal::StagedVersion& s, double start_s, VersionReport* report) {
    const double t0 = MonotonicSeconds();
    if (options_.tier == Tier::kPfs) {
      auto stats = store_->Write(s.version(), s.image(), s.image_bytes());
      if (!stats.ok()) return stats.status();
      report->transfer_s = MonotonicSeconds() - t0;
      if (options_.notify == Notify::kPoll) return Status::Ok();
#if VIPER_HAVE_MPI
      const double t1 = MonotonicSeconds();
      internal::Announce a = MakeAnnounce(s, internal::kAnnouncePfs);
      std::vector<int> told;
      for (int r : live_) {
        if (internal::SendPod(comm_, r, internal::kTagAnnounce, a, options_.peer_timeout_s).ok()) {
          told.push_back(r);
        } else {
          DropConsumer(r, "the notification was not taken within peer_timeout_s", report);
        }
      }
      report->notify_s = MonotonicSeconds() - t1;
      if (options_.mode == Mode::kAsync || options_.wait_for_servable)
        CollectAcks(s.version(), told, start_s, report);
#endif
      return Status::Ok();
    }
#if VIPER_HAVE_MPI
    if (options_.tier == Tier::kGpu) return SendGpu(s, start_s, report);
    // One-sided (two-sided versions go through SendStreamed).
    internal::Announce a = MakeAnnounce(s, internal::kAnnounceHost);
    VIPER_ASSIGN_OR_RETURN(auto ready, Handshake(a, report));
    std::vector<int> sent_to;
    for (auto& [rank, msg] : ready) {
      // Passive-target epoch: the puts are complete at the target when
      // MPI_Win_unlock returns (this wait cannot be bounded by a timeout).
      bool ok = MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win_) == MPI_SUCCESS;
      for (uint64_t off = 0; ok && off < s.image_bytes(); off += options_.chunk_bytes) {
        const uint64_t n = std::min(options_.chunk_bytes, s.image_bytes() - off);
        ok = MPI_Put(s.image() + off, static_cast<int>(n), MPI_BYTE, rank,
                     static_cast<MPI_Aint>(msg.window_offset + off), static_cast<int>(n), MPI_BYTE,
                     win_) == MPI_SUCCESS;
      }
      ok = (MPI_Win_unlock(rank, win_) == MPI_SUCCESS) && ok;
      internal::Announce done = a;
      ok = ok && internal::SendPod(comm_, rank, internal::kTagDone, done, options_.peer_timeout_s).ok();
      if (ok) {
        sent_to.push_back(rank);
      } else {
        DropConsumer(rank, "one-sided put failed", report);
      }
    }
    report->transfer_s = MonotonicSeconds() - t0;
    if (options_.mode == Mode::kAsync || options_.wait_for_servable)
      CollectAcks(s.version(), sent_to, start_s, report);
    return Status::Ok();
#else
    return UnavailableError("tier host needs MPI; Viper was built without it");
#endif
  }

  // Two-sided and shm host versions stream: hashed while they move, header last.
  bool Streams() const {
    return options_.tier == Tier::kHost && options_.host_protocol != HostProtocol::kOneSided;
  }

  // Streams an async snapshot from its staging buffer; the header is written
  // in front of the data once the checksum is known.
  Status StreamSnapshot(internal::StagedVersion& s, double start_s, VersionReport* report) {
    VIPER_ASSIGN_OR_RETURN(const uint64_t header_bytes, s.PlannedHeaderBytes());
    report->bytes = header_bytes + s.data_bytes();
    StreamSource src;
    src.version = s.version();
    src.iteration = s.iteration();
    src.header_bytes = header_bytes;
    src.data_bytes = s.data_bytes();
    if (s.data_bytes() > 0) src.ranges.push_back({s.data(), s.data_bytes()});
    // The staging buffers are members (not owned here): they stay allocated
    // unless a later, larger snapshot regrows one.
    src.header = [&s, header_bytes](uint64_t checksum) {
      VIPER_CHECK(s.Finalize(checksum).ok() && s.header_bytes() == header_bytes);
      return std::shared_ptr<const std::byte>(std::shared_ptr<const void>(), s.image());
    };
    return SendStreamed(src, start_s, report);
  }

  // Moves one version to the consumers over the two-sided protocol (wire
  // order in mpi_link.h): plan, data chunks straight from `src.ranges` while
  // they are hashed between MPI calls, then the header with the checksum.
  // With the shm protocol, consumers on this node that map the segment copy
  // the version out of it instead (shm_segment.h), while the producer copies
  // it in between its MPI calls to the others; that copy also hashes it.
  Status SendStreamed(const StreamSource& src, double start_s, VersionReport* report) {
#if VIPER_HAVE_MPI
    const double t0 = MonotonicSeconds();
    // Adjacent ranges (e.g. tensors of one arena, or a staging buffer) are
    // merged, then cut at chunk_bytes.
    std::vector<internal::ByteRange> merged;
    for (const internal::ByteRange& r : src.ranges) {
      if (!merged.empty() && merged.back().data + merged.back().size == r.data) {
        merged.back().size += r.size;
      } else {
        merged.push_back(r);
      }
    }
    std::vector<internal::Chunk> chunks(1);  // [0]: the plan
    for (const internal::ByteRange& r : merged) {
      internal::AppendChunks(const_cast<std::byte*>(r.data), r.size, options_.chunk_bytes,
                             &chunks);  // only read
    }
    auto plan = std::make_shared<std::vector<uint64_t>>();
    plan->reserve(chunks.size() - 1);
    for (std::size_t i = 1; i < chunks.size(); ++i) plan->push_back(chunks[i].size);
    chunks[0] = {reinterpret_cast<std::byte*>(plan->data()), plan->size() * sizeof(uint64_t)};
    chunks.push_back({nullptr, src.header_bytes});  // set once the data is hashed

    // shm: the segment the consumers on this node copy the version out of.
    const uint64_t image_bytes = src.header_bytes + src.data_bytes;
    // Room for 1/8 more, so that a slowly growing model does not need a new
    // segment every version.
    const bool offer_shm = EnsureSegment(image_bytes, image_bytes + image_bytes / 8);
    std::optional<internal::ShmWriter> shm;
    if (offer_shm) shm.emplace(segment_.get(), merged, src.header_bytes, src.version);  // before the announcement

    internal::Announce a;
    a.session = session_;
    a.kind = internal::kAnnounceHost;
    a.protocol = static_cast<uint32_t>(options_.host_protocol);
    a.version = src.version;
    a.iteration = src.iteration;
    a.image_bytes = src.header_bytes + src.data_bytes;
    a.chunk_bytes = options_.chunk_bytes;
    a.header_bytes = src.header_bytes;
    a.data_chunks = plan->size();
    a.routed = options_.fanout == Fanout::kDirect ? 0 : 1;
    a.handshake_s = options_.peer_timeout_s;
    std::memcpy(a.host, host_name_, sizeof(a.host));
    if (offer_shm) {
      std::snprintf(a.shm_name, sizeof(a.shm_name), "%s", segment_->name().c_str());
      a.shm_payload_bytes = segment_->payload_bytes();
    }
    a.sent_wtime = MonotonicSeconds();
    VIPER_ASSIGN_OR_RETURN(auto ready, Handshake(a, report));
    // Every consumer still served has answered, so it has mapped the segment
    // or never will: the name can go (nothing is left in /dev/shm if this
    // process dies).
    if (offer_shm) segment_->Unlink();
    std::vector<int> via_shm;
    std::vector<std::pair<int, internal::Ready>> via_mpi;
    for (const auto& r : ready) {
      if (offer_shm && r.second.via_shm) {
        via_shm.push_back(r.first);
      } else {
        via_mpi.push_back(r);
      }
    }
    if (via_shm.empty()) shm.reset();
    std::vector<int> acking;  // every consumer the version is on its way to
    const internal::FanoutPlan fan = RouteVersion(a, via_mpi, report, &acking);
    acking.insert(acking.end(), via_shm.begin(), via_shm.end());

    // The digest comes from the shm copy when there is one (it hashes what it
    // copies); else from a hasher over the sources: on a thread where it gets
    // its own CPU (e.g. mpirun --bind-to none), else in slices between MPI
    // calls.
    std::optional<internal::SliceHasher> hasher;
    if (!shm) hasher.emplace(std::move(merged), /*use_thread=*/internal::HaveSpareCpu());
    auto hashed = [&] { return shm ? shm->done() : hasher->done(); };
    internal::ChunkHooks hooks;
    hooks.background = [&] { return shm ? shm->Step(kShmProgressBytes) : hasher->Step(kHashSliceBytes); };
    std::shared_ptr<const std::byte> header;
    auto make_header = [&] {
      if (header) return;
      header = src.header(shm ? shm->Digest() : hasher->Digest());
      chunks.back().data = const_cast<std::byte*>(header.get());  // only read
      if (shm) shm->Complete(header.get());
    };
    hooks.ready = [&](const internal::ChunkedTransfer&, std::size_t index) {
      if (index + 1 < chunks.size()) return true;
      if (!hashed()) return false;
      make_header();
      return true;
    };
    std::vector<internal::ChunkedTransfer> transfers;
    for (int rank : fan.ChildrenOf(rank_)) {
      internal::ChunkedTransfer t;
      t.peer = rank;
      t.send = true;
      t.chunks = &chunks;
      transfers.push_back(std::move(t));
    }
    internal::RunChunked(comm_, options_.max_inflight_chunks, &transfers,
                         MonotonicSeconds() + options_.peer_timeout_s, hooks);
    if (shm) {
      // All consumers on this node, or the MPI sends finished first.
      while (shm->Step(kShmProgressBytes)) {
      }
      make_header();
    }
    bool any_failed = false;
    for (const auto& t : transfers) {
      if (!t.failed) continue;
      any_failed = true;
      // Those it would have forwarded to stay subscribed: they report the
      // version as not delivered once their wait runs out.
      DropConsumer(t.peer, "transfer did not complete within peer_timeout_s", report);
      acking.erase(std::remove(acking.begin(), acking.end(), t.peer), acking.end());
    }
    if (any_failed) {
      // Freed, unfinished sends (to dropped consumers) may still be matched
      // and read these, even after this publisher is gone.
      internal::KeepUntilFinalize(plan);
      internal::KeepUntilFinalize(header);
      for (const auto& owner : src.owners) internal::KeepUntilFinalize(owner);
    }
    const double sent_s = MonotonicSeconds() - t0;
    // With shm consumers always: the segment is rewritten by the next version
    // only once each has its copy.
    if (!via_shm.empty() || options_.mode == Mode::kAsync || options_.wait_for_servable) {
      CollectAcks(src.version, acking, start_s, report);
    }
    // Two-sided: until the sends completed. shm: until every consumer had
    // acknowledged its copy (copying it out is its transfer).
    report->transfer_s = via_shm.empty() ? sent_s : MonotonicSeconds() - t0;
    return Status::Ok();
#else
    (void)src;
    (void)start_s;
    (void)report;
    return UnavailableError("tier host needs MPI; Viper was built without it");
#endif
  }

#if VIPER_HAVE_MPI
  // shm protocol: whether a segment of at least `image_bytes` is ready,
  // making one of `reserve_bytes` when there is none that large. When none
  // can be made, warns once and returns false from then on (two-sided).
  bool EnsureSegment(uint64_t image_bytes, uint64_t reserve_bytes) {
    if (options_.tier != Tier::kHost || options_.host_protocol != HostProtocol::kShm || shm_failed_) return false;
    if (segment_ && segment_->payload_bytes() >= image_bytes) return true;
    segment_.reset();
    char name[64];
    std::snprintf(name, sizeof(name), "/viper-%016llx-r%d-g%llu", static_cast<unsigned long long>(session_), rank_,
                  static_cast<unsigned long long>(++segment_generation_));
    auto created = internal::ShmSegment::Create(name, reserve_bytes);
    if (!created.ok()) {
      shm_failed_ = true;
      Log(LogLevel::kWarning, "transports",
          "no shared memory for the shm protocol (" + created.status().ToString() +
              "); sending over MPI (two-sided) from now on");
      return false;
    }
    segment_ = std::move(*created);
    return true;
  }

#if VIPER_HAVE_CUDA
  // gpu tier: announce the staged device image with its IPC handles; IPC
  // consumers copy it themselves, the others ask for it through pinned host
  // memory (device -> pinned chunks queued at once, each sent over MPI as
  // soon as its copy is done). Every consumer acknowledges once it holds a
  // verified copy; only then may the staging buffer be reused.
  Status SendGpu(const internal::StagedVersion& s, double start_s, VersionReport* report) {
    const double t0 = MonotonicSeconds();
    internal::Announce a = MakeAnnounce(s, internal::kAnnounceGpu);
    a.header_bytes = s.header_bytes();
    a.image_offset = s.image_offset();
    cudaIpcMemHandle_t mem;
    cudaIpcEventHandle_t event;
    static_assert(sizeof(mem) == sizeof(a.ipc_mem) && sizeof(event) == sizeof(a.ipc_event),
                  "IPC handle size");
    VIPER_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&mem, const_cast<void*>(s.device_allocation())));
    VIPER_CUDA_RETURN_IF_ERROR(cudaIpcGetEventHandle(&event, s.ready_event()));
    std::memcpy(a.ipc_mem, &mem, sizeof(mem));
    std::memcpy(a.ipc_event, &event, sizeof(event));
    std::memcpy(a.host, host_name_, sizeof(a.host));
    VIPER_ASSIGN_OR_RETURN(auto ready, Handshake(a, report));
    std::vector<int> acking;
    std::vector<internal::ChunkedTransfer> via_host;
    for (auto& [rank, msg] : ready) {
      if (!msg.via_host) {
        acking.push_back(rank);
        continue;
      }
      internal::ChunkedTransfer t;
      t.peer = rank;
      t.send = true;
      via_host.push_back(std::move(t));
    }
    if (!via_host.empty()) {
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
            cudaMemcpyAsync(host + off, s.image() + off, n, cudaMemcpyDeviceToHost, gpu_stream_));
        VIPER_CUDA_RETURN_IF_ERROR(cudaEventRecord(chunk_events_[k], gpu_stream_));
      }
      std::vector<internal::Chunk> chunk_list;
      internal::AppendChunks(host, bytes, chunk, &chunk_list);
      for (auto& t : via_host) t.chunks = &chunk_list;
      // A chunk is posted once its device-to-pinned copy is done.
      internal::ChunkHooks hooks;
      hooks.ready = [&](const internal::ChunkedTransfer&, std::size_t k) {
        return cudaEventQuery(chunk_events_[k]) == cudaSuccess;
      };
      internal::RunChunked(comm_, options_.max_inflight_chunks, &via_host,
                           MonotonicSeconds() + options_.peer_timeout_s, hooks);
      for (const auto& t : via_host) {
        if (t.failed) {
          DropConsumer(t.peer, "pinned-host transfer did not complete within peer_timeout_s", report);
        } else {
          acking.push_back(t.peer);
        }
      }
    }
    CollectAcks(s.version(), acking, start_s, report);
    report->transfer_s = MonotonicSeconds() - t0;
    return Status::Ok();
  }
#else
  Status SendGpu(const internal::StagedVersion&, double, VersionReport*) {
    return UnavailableError("tier gpu needs CUDA; Viper was built without it");
  }
#endif

  Status InitMpi() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      return FailedPreconditionError(
          "MPI is not initialised: create a transports::MpiSession (or call MPI_Init_thread) first");
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      return FailedPreconditionError("MPI was initialised without MPI_THREAD_MULTIPLE");
    }
    if (MPI_Comm_dup(MPI_COMM_WORLD, &comm_) != MPI_SUCCESS) return AbortedError("MPI_Comm_dup failed");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(comm_, &rank);
    rank_ = rank;
    internal::NodeName(host_name_, sizeof(host_name_));
    VIPER_ASSIGN_OR_RETURN(session_, internal::AgreeOnSession(comm_, rank));
    MPI_Comm_size(comm_, &size);
    if (options_.subscriber_ranks.empty()) {
      for (int r = 0; r < size; ++r) {
        if (r != rank) live_.push_back(r);
      }
    } else {
      for (int r : options_.subscriber_ranks) {
        if (r >= size || r == rank) {
          return InvalidArgumentError("subscriber_ranks: rank " + std::to_string(r) +
                                      " is this rank or outside [0, " + std::to_string(size) + ")");
        }
        live_.push_back(r);
      }
    }
    if (options_.tier == Tier::kHost && options_.host_protocol == HostProtocol::kOneSided) {
      void* base = nullptr;
      if (MPI_Win_allocate(0, 1, MPI_INFO_NULL, comm_, &base, &win_) != MPI_SUCCESS) {
        return AbortedError("MPI_Win_allocate failed");
      }
      MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
    }
    return Status::Ok();
  }

  // Sends `a` to every live consumer and waits (peer_timeout_s) for each to
  // answer Ready. Returns those that accepted; refusals and silent consumers
  // go into `report`.
  StatusOr<std::vector<std::pair<int, internal::Ready>>> Handshake(const internal::Announce& a,
                                                                   VersionReport* report) {
    std::vector<int> told;
    for (int r : live_) {
      if (internal::SendPod(comm_, r, internal::kTagAnnounce, a, options_.peer_timeout_s).ok()) {
        told.push_back(r);
      } else {
        DropConsumer(r, "the announcement was not taken within peer_timeout_s", report);
      }
    }
    std::vector<std::pair<int, internal::Ready>> ready;
    const double deadline = MonotonicSeconds() + options_.peer_timeout_s;
    std::vector<int> waiting = told;
    internal::Backoff backoff(20);
    while (!waiting.empty()) {
      internal::Ready msg;
      int from = -1;
      auto got = internal::TryRecvPod(comm_, MPI_ANY_SOURCE, internal::kTagReady, &msg, &from);
      if (!got.ok()) return got.status();
      if (*got) {
        auto it = std::find(waiting.begin(), waiting.end(), from);
        if (it == waiting.end() || msg.session != session_ || msg.version != a.version) continue;  // stale
        waiting.erase(it);
        if (msg.accept) {
          ready.push_back({from, msg});
        } else {
          report->consumers.push_back({from, false, false, 0, 0,
                                       "refused: no room for the version (window slot, landing buffer or "
                                       "device memory)"});
        }
        backoff.Reset();
        continue;
      }
      if (MonotonicSeconds() > deadline) {
        for (int r : waiting) DropConsumer(r, "no handshake within peer_timeout_s", report);
        break;
      }
      backoff.Pause();
    }
    return ready;
  }

  // Two-sided: plans who forwards the version to whom over the consumers
  // that accepted it (`ready`) and, when routed, sends each its Route. Sets
  // `acking` to the consumers that will acknowledge (a consumer whose Route
  // cannot be sent is dropped).
  internal::FanoutPlan RouteVersion(const internal::Announce& a,
                                    const std::vector<std::pair<int, internal::Ready>>& ready,
                                    VersionReport* report, std::vector<int>* acking) {
    std::vector<std::pair<int, std::string>> accepted;
    for (const auto& [rank, msg] : ready) {
      accepted.push_back({rank, std::string(msg.host, strnlen(msg.host, sizeof(msg.host)))});
    }
    std::sort(accepted.begin(), accepted.end());
    std::vector<int> ranks;
    std::vector<std::string> hosts;
    for (const auto& [rank, host] : accepted) {
      ranks.push_back(rank);
      hosts.push_back(host);
    }
    internal::FanoutPlan fan = internal::PlanFanout(options_.fanout, options_.tree_arity,
                                                   internal::kMaxRelayChildren, rank_, host_name_, ranks, hosts);
    *acking = ranks;
    if (!a.routed) return fan;
    for (int rank : ranks) {
      internal::Route route;
      route.session = session_;
      route.version = a.version;
      route.parent = fan.parent.at(rank);
      const std::vector<int>& children = fan.ChildrenOf(rank);
      route.children_count = static_cast<int32_t>(children.size());
      std::copy(children.begin(), children.end(), route.children);
      // Below the producer's own wait for acknowledgements, so that a
      // consumer behind a relay that died says so before it would be dropped.
      route.relay_timeout_s = 0.75 * options_.peer_timeout_s;
      if (!internal::SendPod(comm_, rank, internal::kTagRoute, route, options_.peer_timeout_s).ok()) {
        DropConsumer(rank, "the route was not taken within peer_timeout_s", report);
        acking->erase(std::remove(acking->begin(), acking->end(), rank), acking->end());
      }
    }
    return fan;
  }

  internal::Announce MakeAnnounce(const internal::StagedVersion& s, internal::AnnounceKind kind) const {
    internal::Announce a;
    a.session = session_;
    a.kind = kind;
    a.protocol = static_cast<uint32_t>(options_.host_protocol);
    a.version = s.version();
    a.iteration = s.iteration();
    a.image_bytes = s.image_bytes();
    a.chunk_bytes = options_.chunk_bytes;
    a.checksum = s.checksum();
    a.handshake_s = options_.peer_timeout_s;
    a.sent_wtime = MonotonicSeconds();
    return a;
  }

  void CollectAcks(uint64_t version, const std::vector<int>& ranks, double start_s, VersionReport* report) {
    std::vector<int> waiting = ranks;
    const double deadline = MonotonicSeconds() + options_.peer_timeout_s;
    internal::Backoff backoff(20);
    while (!waiting.empty()) {
      internal::Ack ack;
      int from = -1;
      auto got = internal::TryRecvPod(comm_, MPI_ANY_SOURCE, internal::kTagAck, &ack, &from);
      if (!got.ok()) {
        // The receive itself failed: the ranks still waited on are reported
        // as not acknowledged, with why (they are not dropped: the error
        // may be this rank's, not theirs).
        const std::string why = "no acknowledgement: receiving failed: " + got.status().ToString();
        for (int r : waiting) {
          ConsumerResult c;
          c.rank = r;
          c.message = why;
          report->consumers.push_back(c);
        }
        Log(LogLevel::kError, "transports", "version " + std::to_string(version) + ": " + why);
        return;
      }
      if (*got) {
        auto it = std::find(waiting.begin(), waiting.end(), from);
        if (it == waiting.end() || ack.session != session_ || ack.version != version) continue;  // stale
        waiting.erase(it);
        ConsumerResult c;
        c.rank = from;
        c.delivered = ack.ok != 0;
        c.servable_s = MonotonicSeconds() - start_s;
        c.load_s = ack.load_s;
        if (!c.delivered) c.message = std::string("rejected: ") + ToString(static_cast<StatusCode>(ack.code));
        report->consumers.push_back(c);
        backoff.Reset();
        continue;
      }
      if (MonotonicSeconds() > deadline) {
        for (int r : waiting) DropConsumer(r, "no acknowledgement within peer_timeout_s", report);
        return;
      }
      backoff.Pause();
    }
  }

  void DropConsumer(int rank, const std::string& why, VersionReport* report) {
    live_.erase(std::remove(live_.begin(), live_.end(), rank), live_.end());
    ConsumerResult c;
    c.rank = rank;
    c.lost = true;
    c.message = why;
    report->consumers.push_back(c);
    Log(LogLevel::kWarning, "transports", "consumer rank " + std::to_string(rank) + " dropped: " + why);
    std::lock_guard<std::mutex> lock(mu_);
    lost_.push_back(rank);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  std::unique_ptr<internal::ShmSegment> segment_;  // shm protocol
  uint64_t segment_generation_ = 0;
  bool shm_failed_ = false;  // the segment could not be made: two-sided from then on
  uint64_t session_ = 0;
  int rank_ = 0;
  char host_name_[64] = {0};  // this node's name (fan-out by node, CUDA IPC)
#else
  Status InitMpi() {
    return UnavailableError(std::string("tier ") + ToString(options_.tier) + " with notify " +
                            ToString(options_.notify) + " needs MPI; Viper was built without it");
  }
#endif

#if VIPER_HAVE_CUDA
  Status InitGpu() {
    VIPER_RETURN_IF_ERROR(internal::OpenGpuStream(options_.gpu_device, &gpu_stream_));
    for (auto& st : staging_) st.UseDevice(gpu_stream_);
    return Status::Ok();
  }
  Status SelectGpu() {
    if (options_.tier == Tier::kGpu) VIPER_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.gpu_device));
    return Status::Ok();
  }
  cudaStream_t gpu_stream_ = nullptr;
  void* pinned_ = nullptr;  // gpu tier, consumers without IPC: the image in pinned host memory
  uint64_t pinned_bytes_ = 0;
  std::vector<cudaEvent_t> chunk_events_;  // one per pinned chunk copy
#else
  Status InitGpu() { return UnavailableError("tier gpu: no CUDA device: Viper was built without CUDA"); }
  Status SelectGpu() { return Status::Ok(); }
#endif

  Options options_;
  std::unique_ptr<PfsStore> store_;
  bool uses_mpi_ = false;
  std::vector<int> live_;  // consumers still served (touched by one sending thread at a time)
  internal::StagedVersion staging_[2];
  internal::DescribedVersion described_;  // sync two-sided: the caller's tensors
  int snapshot_threads_ = 1;              // options_.snapshot_threads, 0 resolved
  uint64_t next_version_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread sender_;
  int pending_ = -1;                 // staging index with an unsent snapshot
  int sending_ = -1;                 // staging index being sent
  std::size_t pending_version_ = 0;  // index in reports_ of the pending snapshot
  double pending_start_s_ = 0;
  bool closed_ = false;
  bool sender_running_ = true;
  Status sender_status_;
  std::string last_error_;
  std::vector<VersionReport> reports_;
  std::vector<int> lost_;
  uint64_t published_ = 0, superseded_ = 0;
  double total_stall_s_ = 0;
};

Publisher::Publisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Publisher::~Publisher() = default;

StatusOr<std::unique_ptr<Publisher>> Publisher::Create(const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError("Publisher::Options::" + error);
  auto impl = std::make_unique<Impl>(options);
  VIPER_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Publisher>(new Publisher(std::move(impl)));
}

StatusOr<Publisher::VersionReport> Publisher::Publish(const ModelState& state, int64_t iteration) {
  return impl_->Publish(state, iteration);
}
Status Publisher::Flush() { return impl_->Flush(); }
Status Publisher::Close() { return impl_->Close(); }
std::vector<Publisher::VersionReport> Publisher::Reports() const { return impl_->Reports(); }
std::vector<CostSample> Publisher::CostSamples() const { return impl_->CostSamples(); }
Publisher::Summary Publisher::summary() const { return impl_->summary(); }
const Publisher::Options& Publisher::options() const { return impl_->options(); }

}  // namespace transports
}  // namespace viper
