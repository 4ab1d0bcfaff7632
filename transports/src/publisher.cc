#include "viper/transports/publisher.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "control.h"
#include "staging.h"
#include "tier.h"
#include "viper/transports/private_dir.h"

namespace viper {
namespace transports {

const char* ToString(DeltaMode mode) {
  switch (mode) {
    case DeltaMode::kOff:
      return "off";
    case DeltaMode::kAuto:
      return "auto";
    case DeltaMode::kOn:
      return "on";
  }
  return "?";
}

std::optional<DeltaMode> DeltaModeFromString(const std::string& name) {
  for (DeltaMode m : {DeltaMode::kOff, DeltaMode::kAuto, DeltaMode::kOn}) {
    if (name == ToString(m)) return m;
  }
  return std::nullopt;
}

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
  if (pfs_delta && tier != Tier::kPfs) return fail("pfs_delta: only the pfs tier writes delta versions so far");
  if (delta == DeltaMode::kOn && tier == Tier::kHost && host_protocol == HostProtocol::kOneSided)
    return fail("delta: on needs tier host (shm or two-sided), gpu or pfs (one-sided versions go whole)");
  if (delta == DeltaMode::kOn && tier == Tier::kPfs && pfs_layout != PfsStore::Layout::kFlat)
    return fail("delta: on with tier pfs needs the flat layout (tf-serving directories hold full models)");
  if (pfs_delta && pfs_layout != PfsStore::Layout::kFlat)
    return fail("pfs_delta: delta versions need the flat layout (tf-serving directories hold full models)");
  if (pfs_delta_chain_max < 1 || pfs_delta_chain_max > 1000) return fail("pfs_delta_chain_max: must be in [1, 1000]");
  if (snapshot_threads < 0 || snapshot_threads > 64)
    return fail("snapshot_threads: must be in [0, 64] (0 = one per usable CPU, at most 4)");
  if (gpu_device < 0) return fail("gpu_device: must be >= 0");
  if (session_id.size() > 256) return fail("session_id: at most 256 characters");
  if (!hmac_key_file.empty() && tier != Tier::kPfs) return fail("hmac_key_file: only the pfs tier signs versions");
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
  if (!encoding.empty()) s << ", " << encoding << " (" << written_bytes << " bytes written)";
  if (superseded) s << ", superseded";
  for (const auto& c : consumers) {
    s << "; rank " << c.rank << ": "
      << (c.delivered ? "servable after " + std::to_string(c.servable_s) + " s"
                      : (c.lost ? "lost (" + c.message + ")" : "not delivered (" + c.message + ")"));
    if (!c.encoding_reason.empty()) s << ", " << c.encoding << " (" << c.encoding_reason << ")";
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

// Lifecycle, threads and reports; the tier (tier.h) moves each version and
// says what happened, and the control (control.h) is the session with the
// consumers.
class Publisher::Impl {
 public:
  explicit Impl(const Options& options) : options_(options) {}
  ~Impl() { (void)Close(); }

  Status Init() {
    if (!options_.session_id.empty()) {
      // Every version carries the run's identity; its consumers check it.
      const std::map<std::string, std::string> extra = {{kSessionKey, options_.session_id}};
      for (auto& s : staging_) s.set_extra_metadata(extra);
      described_.set_extra_metadata(extra);
    }
    if (!options_.hmac_key_file.empty()) {
      // The keyed digest: each version proves it was made by a key holder.
      VIPER_ASSIGN_OR_RETURN(const std::string key, ReadKeyFile(options_.hmac_key_file));
      for (auto& s : staging_) s.set_hmac(key, options_.session_id);
    }
    snapshot_threads_ =
        options_.snapshot_threads > 0 ? options_.snapshot_threads : std::min(4, internal::UsableCpus());
    // The tier table (tier.h) picks the tier that moves the versions.
    const internal::TierEntry* tier = internal::SenderTier(options_);
    if (tier == nullptr) return InternalError("no tier serves these Publisher::Options (IsValid passed them)");
    if (tier->needs_control(options_)) {
      VIPER_ASSIGN_OR_RETURN(control_, internal::ProducerControl::Open(options_));
    }
    VIPER_ASSIGN_OR_RETURN(tier_, tier->make_sender({options_, control_.get(), staging_, 2}));
    // The shared segment now, mapped and touched, not in the first publish.
    if (options_.staging_bytes > 0) tier_->Prepare(options_.staging_bytes);
    if (options_.staging_bytes > 0 && !(options_.mode == Mode::kSync && tier_->Streams())) {
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
    VIPER_RETURN_IF_ERROR(tier_->BindThread());
    const double t0 = MonotonicSeconds();
    VersionReport report;
    report.version = next_version_;
    report.iteration = iteration;
    if (options_.mode == Mode::kSync && tier_->Streams()) {
      // Straight from the caller's tensors: no snapshot (snapshot_s = 0); the
      // checksum is computed while the chunks are in flight.
      internal::DescribedVersion& d = described_;
      VIPER_RETURN_IF_ERROR(d.Describe(state, next_version_, iteration, options_.producer_id));
      report.bytes = d.header_bytes() + d.data_bytes();
      internal::StreamSource src;
      src.version = d.version();
      src.iteration = d.iteration();
      src.header_bytes = d.header_bytes();
      src.data_bytes = d.data_bytes();
      src.ranges = d.ranges();
      for (const Tensor& t : state.tensors()) {
        if (t.owner) src.owners.push_back(t.owner);
      }
      src.header = [&d](uint64_t checksum) { return d.Header(checksum); };
      return Sent(SendStream(src, t0, &report), t0, &report);
    }
    if (options_.mode == Mode::kSync) {
      internal::StagedVersion& s = staging_[0];
      VIPER_RETURN_IF_ERROR(s.Snapshot(state, next_version_, iteration, options_.producer_id,
                                       options_.staging_bytes,
                                       /*hash_while_copying=*/true));
      report.snapshot_s = MonotonicSeconds() - t0;
      VIPER_RETURN_IF_ERROR(s.Finalize());
      report.bytes = s.image_bytes();
      return Sent(SendStaged(s, t0, &report), t0, &report);
    }
    // Async: snapshot into the buffer that is not being sent; a pending
    // (unsent) snapshot there is superseded.
    // A failure of the background send (a full disk) is reported once, here,
    // and then cleared: this publish tries again (issue 26: a freed disk
    // must not leave the publisher failed for ever).
    VIPER_RETURN_IF_ERROR(TakeSenderError());
    int idx;
    {
      std::lock_guard<std::mutex> lock(mu_);
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
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (pending_ < 0 && sending_ < 0) || !sender_running_; });
    }
    return TakeSenderError();
  }

  // The background sender's failure, if any, once: it is cleared and the
  // sender restarted (unless closing), so later versions are sent again.
  Status TakeSenderError() {
    Status error;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (sender_status_.ok()) return Status::Ok();
      error = sender_status_;
      sender_status_ = Status::Ok();
    }
    if (sender_.joinable()) sender_.join();  // it stopped after the failure
    {
      std::lock_guard<std::mutex> lock(mu_);
      sender_running_ = !closed_;
    }
    if (!closed_) sender_ = std::thread([this] { SenderLoop(); });
    return error;
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
    if (control_) control_->Close();  // goodbye first: the window's free is collective
    if (tier_) tier_->Close();
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
      // The bytes each phase actually moved (issue 27: a delta version
      // moves less than its image): the snapshot copies the whole image; the
      // transfer what the tier wrote (a pfs delta file) where it says, else
      // the image; the update and load what reached that consumer.
      out.push_back({options_.tier, options_.mode, "stall", r.bytes, r.stall_s});
      if (!r.sent) continue;
      out.push_back({options_.tier, options_.mode, "transfer", r.written_bytes > 0 ? r.written_bytes : r.bytes,
                     r.transfer_s});
      for (const auto& c : r.consumers) {
        if (!c.delivered) continue;
        const uint64_t moved = c.bytes_moved > 0 ? c.bytes_moved : r.bytes;
        out.push_back({options_.tier, options_.mode, "update", moved, c.servable_s});
        if (c.load_s > 0) out.push_back({options_.tier, options_.mode, "load", moved, c.load_s});
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
  // A sync publish is over: records its report, returns it or the error.
  StatusOr<VersionReport> Sent(const Status& st, double t0, VersionReport* report) {
    report->stall_s = MonotonicSeconds() - t0;
    report->sent = true;
    ++next_version_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reports_.push_back(*report);
      ++published_;
      total_stall_s_ += report->stall_s;
    }
    if (!st.ok()) return st;
    return *report;
  }

  // What a send did, into its report; dropped consumers into the summary.
  void Apply(const internal::SendOutcome& out, VersionReport* report) {
    report->consumers.insert(report->consumers.end(), out.consumers.begin(), out.consumers.end());
    report->transfer_s = out.transfer_s;
    report->notify_s = out.notify_s;
    report->written_bytes = out.written_bytes;
    report->encoding = out.encoding;
    report->sent_bytes = out.sent_bytes;
    const std::vector<int> lost = out.Lost();
    std::lock_guard<std::mutex> lock(mu_);
    lost_.insert(lost_.end(), lost.begin(), lost.end());
  }

  Status SendStaged(const internal::StagedVersion& s, double start_s, VersionReport* report) {
    internal::SendOutcome out;
    Status st = tier_->Send(s, start_s, &out);
    Apply(out, report);
    return st;
  }

  Status SendStream(const internal::StreamSource& src, double start_s, VersionReport* report) {
    internal::SendOutcome out;
    Status st = tier_->Send(src, start_s, &out);
    Apply(out, report);
    return st;
  }

  // Streams an async snapshot from its staging buffer; the header is written
  // in front of the data once the checksum is known.
  Status StreamSnapshot(internal::StagedVersion& s, double start_s, VersionReport* report) {
    VIPER_ASSIGN_OR_RETURN(const uint64_t header_bytes, s.PlannedHeaderBytes());
    report->bytes = header_bytes + s.data_bytes();
    internal::StreamSource src;
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
    return SendStream(src, start_s, report);
  }

  void SenderLoop() {
    (void)tier_->BindThread();  // the CUDA device is per thread
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
      if (tier_->Streams()) {
        st = StreamSnapshot(staging_[idx], start_s, &r);
      } else {
        st = staging_[idx].Finalize();
        if (st.ok()) {
          r.bytes = staging_[idx].image_bytes();
          st = SendStaged(staging_[idx], start_s, &r);
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        VersionReport& rep = reports_[report_index];
        rep.bytes = r.bytes;
        rep.transfer_s = r.transfer_s;
        rep.notify_s = r.notify_s;
        rep.written_bytes = r.written_bytes;
        rep.encoding = r.encoding;
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

  Options options_;
  std::unique_ptr<internal::ProducerControl> control_;  // MPI: the session with the consumers
  internal::StagedVersion staging_[2];
  std::unique_ptr<internal::TierSender> tier_;  // after control_ and staging_: borrows them
  internal::DescribedVersion described_;        // sync streams: the caller's tensors
  int snapshot_threads_ = 1;                    // options_.snapshot_threads, 0 resolved
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
