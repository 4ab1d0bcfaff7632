#include "viper/transports/subscriber.h"

#include <algorithm>
#include <map>
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

#include "backoff.h"
#include "control.h"
#include "hmac_sha256.h"
#include "tier.h"
#include "tier_pfs.h"
#include "viper/core/checksum.h"
#include "viper/core/log.h"
#include "viper/core/safetensors.h"
#include "viper/transports/private_dir.h"

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
  if (delta_versions > 0) {
    s << ", " << delta_versions << " rebuilt from deltas (" << delta_copies_avoided << " in the back buffer brought "
      << "forward, " << delta_copied_bytes << " bytes copied from the served images, " << bytes_moved
      << " bytes moved)";
  }
  if (producer_finished) s << ", producer finished";
  if (producer_lost) s << ", producer LOST";
  if (!message.empty()) s << " (" << message << ")";
  return s.str();
}

// Lifecycle, the receive thread, verify-and-swap and reports; the receive
// paths (tier.h) land each version, the control (control.h) is the session
// with the producer.
class Subscriber::Impl {
 public:
  explicit Impl(const Options& options) : options_(options) {}
  ~Impl() {
    Stop();
    paths_.clear();  // before the control they borrow (the window's free is collective)
  }

  Status Init() {
    if (!options_.hmac_key_file.empty()) {
      VIPER_ASSIGN_OR_RETURN(hmac_key_, ReadKeyFile(options_.hmac_key_file));
    }
    if (options_.notify == Notify::kPush) {
      VIPER_ASSIGN_OR_RETURN(control_, internal::ConsumerControl::Open(options_));
    }
    VIPER_RETURN_IF_ERROR(MakePaths());
    if (options_.preallocate_bytes > 0 && options_.tier != Tier::kGpu) {
      VIPER_RETURN_IF_ERROR(pool_.Preallocate(options_.preallocate_bytes, 2));
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
  // The receive paths of every tier this subscriber's options keep (tier.h),
  // in the table's order, fastest first: for each announcement the first
  // path that takes it receives it. Collective tiers (the one-sided window)
  // are made first, right after the control, in the producer's order.
  Status MakePaths() {
    const std::vector<const internal::TierEntry*> tiers = internal::ReceiverTiers(options_, control_ != nullptr);
    const internal::ReceiverSetup setup{options_, control_.get(), &pool_, [this] { return Current(); }};
    std::vector<std::vector<std::unique_ptr<internal::TierReceiver>>> made(tiers.size());
    for (bool collective : {true, false}) {
      for (std::size_t i = 0; i < tiers.size(); ++i) {
        if (tiers[i]->collective != collective) continue;
        VIPER_ASSIGN_OR_RETURN(made[i], tiers[i]->make_receivers(setup));
      }
    }
    for (auto& paths : made) {
      for (auto& p : paths) {
        if (auto* pfs = dynamic_cast<internal::PfsReceiver*>(p.get())) pfs_ = pfs;
        paths_.push_back(std::move(p));
      }
    }
    return Status::Ok();
  }

  // Parses and verifies a landed image, then swaps the version in. A
  // streamed image is not hashed again: its header must end at data_offset
  // and its viper.checksum equal the landed checksum. Anything else is
  // DataLoss and nothing is swapped in.
  Status VerifyAndSwap(const internal::Landed& landed, uint64_t expected_version) {
    if (landed.verified) return Install(landed.verified, landed);  // gpu: verified on the device
    const double t0 = MonotonicSeconds();
    const std::string& source = landed.source;
    const uint64_t size = landed.size;
    safetensors::ParseOptions po;
    po.verify_checksum = !landed.streamed;
    po.require_checksum = options_.tier != Tier::kPfs || options_.pfs_require_checksum;
    const std::byte* bytes = landed.buffer->data();
    std::shared_ptr<const void> owner(landed.buffer, bytes);
    safetensors::ParseInfo info;
    auto state = safetensors::Parse(owner, bytes, size, po, &info);
    if (!state.ok()) return state.status().WithContext(source);
    const bool verified = info.checksum != safetensors::ChecksumKind::kNone;
    if (!verified)
      state->metadata.version = expected_version;  // another writer's file: versioned by its name
    if (state->metadata.version != expected_version) {
      return DataLossError(source + ": carries version " + std::to_string(state->metadata.version) +
                           ", expected " + std::to_string(expected_version));
    }
    auto meta = safetensors::ParseMetadata(bytes, size);
    if (options_.tier == Tier::kPfs && !options_.session_id.empty()) {
      // Only this run's versions: another run's file (an earlier run left
      // in the directory, or someone else's) is never served.
      std::string theirs;
      if (meta.ok()) {
        auto it = meta->find(kSessionKey);
        if (it != meta->end()) theirs = it->second;
      }
      if (theirs != options_.session_id) {
        return FailedPreconditionError(
            source + ": not a version of this run (" +
            (theirs.empty() ? std::string("it carries no session id")
                            : "its session id is " + theirs.substr(0, 64)) +
            ", this run's is " + options_.session_id + "): refused");
      }
    }
    if (options_.tier == Tier::kPfs && !hmac_key_.empty()) {
      // Made by a holder of the key: the digest over the version, its
      // session and its tensors must match (not an unkeyed checksum).
      std::string theirs, session;
      if (meta.ok()) {
        auto it = meta->find(kHmacKey);
        if (it != meta->end()) theirs = it->second;
        auto s = meta->find(kSessionKey);
        if (s != meta->end()) session = s->second;
      }
      if (theirs.empty()) {
        return FailedPreconditionError(source + ": carries no " + kHmacKey + " (this consumer requires the key "
                                       "file's digest): refused");
      }
      if (!internal::DigestsEqual(theirs, internal::VersionDigest(hmac_key_, *state, session))) {
        return FailedPreconditionError(source + ": its " + kHmacKey +
                                       " does not verify under this consumer's key: not made by a key holder, "
                                       "refused");
      }
    }
    if (landed.streamed) {
      uint64_t json_bytes = 0;
      for (int i = 0; i < 8; ++i)
        json_bytes |= static_cast<uint64_t>(std::to_integer<uint8_t>(bytes[i])) << (8 * i);
      if (json_bytes > size || 8 + json_bytes != landed.data_offset) {
        return DataLossError(source + ": the header ends at byte " + std::to_string(8 + json_bytes) +
                             " but the data was received at offset " + std::to_string(landed.data_offset));
      }
      std::optional<uint64_t> expected;
      if (meta.ok()) {
        auto it = meta->find("viper.checksum");
        if (it != meta->end()) expected = ChecksumFromHex(it->second);
      }
      if (!expected) return DataLossError(source + ": header has no readable viper.checksum");
      if (*expected != landed.checksum) {
        return DataLossError(source + ": checksum mismatch: header says " + ChecksumToHex(*expected) +
                             " but the data received hashes to " + ChecksumToHex(landed.checksum));
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
    // What is served is what was verified: readers cannot write into it (a
    // write faults), whoever holds its tensors (Python's included).
    landed.buffer->SetReadOnly(true);
    version->tier = options_.tier;
    version->source = source;
    version->receive_s = landed.receive_s;
    version->verify_s = MonotonicSeconds() - t0;
    return Install(std::move(version), landed);
  }

  // Makes `version` (which `landed` brought) current unless a newer one already is.
  Status Install(std::shared_ptr<ModelVersion> version, const internal::Landed& landed) {
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
      summary_.bytes_moved += landed.moved_bytes;
      if (landed.from_delta) ++summary_.delta_versions;
      if (landed.brought_forward) ++summary_.delta_copies_avoided;
      summary_.delta_copied_bytes += landed.copied_bytes;
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
    VIPER_ASSIGN_OR_RETURN(const internal::Landed landed, pfs_->Load(version, Current()));
    return VerifyAndSwap(landed, version);
  }

  void PollLoop() {
    // Refused versions and their files as they were then: a version is
    // read again once its file changes (fixed or replaced).
    std::map<uint64_t, PfsStore::FileId> rejected;
    while (running_) {
      const double next = MonotonicSeconds() + options_.poll_period_s;
      auto versions = pfs_->Versions();
      if (!versions.ok()) {
        Reject(0, options_.pfs_dir, versions.status());
      } else {
        // Newest complete version not yet served nor rejected.
        for (auto it = versions->rbegin(); it != versions->rend(); ++it) {
          auto cur = Current();
          if (cur && cur->state.metadata.version >= *it) break;
          auto id = pfs_->Identify(*it);
          auto was = rejected.find(*it);
          if (was != rejected.end() && id.ok() && *id == was->second) continue;
          if (was != rejected.end() && !id.ok()) continue;  // still unreadable: said once
          Status st = LoadPfs(*it);
          if (st.ok()) {
            rejected.erase(*it);
            break;
          }
          rejected[*it] = id.ok() ? *id : PfsStore::FileId{};
          Reject(*it, pfs_->PathFor(*it), st);
        }
      }
      while (running_ && MonotonicSeconds() < next) {
        std::this_thread::sleep_for(std::chrono::microseconds(
            std::min<int64_t>(10000, static_cast<int64_t>((next - MonotonicSeconds()) * 1e6) + 1)));
      }
    }
    Finish(false, false, "");
  }

  std::string Keeping() const {
    auto cur = Current();
    return cur ? "version " + std::to_string(cur->state.metadata.version) : std::string("no version");
  }

  void PushLoop() {
    for (auto& path : paths_) (void)path->BindThread();  // the CUDA device is per thread
    const std::string producer = "producer " + control_->ProducerName();
    double last_heard = MonotonicSeconds();
    internal::Backoff backoff(options_.idle_sleep_us);
    while (running_) {
      auto got = control_->NextAnnouncement();
      if (!got.ok()) {
        Finish(false, true, got.status().message());
        return;
      }
      if (!*got) {
        if (options_.producer_timeout_s > 0 &&
            MonotonicSeconds() - last_heard > options_.producer_timeout_s) {
          Finish(false, true,
                 producer + " sent nothing for " + std::to_string(options_.producer_timeout_s) +
                     " s; keeping " + Keeping());
          return;
        }
        backoff.Pause();
        continue;
      }
      backoff.Reset();
      const internal::Announce& a = **got;
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
      std::string source = control_->ProducerName();
      uint64_t moved = 0;
      const Status st = ReceiveAnnounced(a, &source, &moved);
      if (!st.ok()) Reject(a.version, source, st);
      if (st.code() == StatusCode::kAborted) {
        Finish(false, true,
               producer + " stopped mid-transfer of version " + std::to_string(a.version) + " (" +
                   st.message() + "); keeping " + Keeping());
        return;
      }
      control_->Acknowledge(a, st, MonotonicSeconds() - t0, notify_s, moved);
      last_heard = MonotonicSeconds();
    }
    Finish(false, false, "stopped");
  }

  // The first path of the table that takes `a` receives it; then verify
  // and swap. Sets *source for messages and *moved to the bytes that
  // reached this consumer (also when the version is then rejected).
  Status ReceiveAnnounced(const internal::Announce& a, std::string* source, uint64_t* moved) {
    const internal::TierEntry* tier = internal::AnnouncingTier(a);
    if (tier != nullptr) {
      // The announcing tier's decoder checks its payload before any path reads it.
      const Status payload = tier->check_payload(a);
      if (!payload.ok()) {
        Refuse(a, tier);
        return payload;
      }
    }
    for (auto& path : paths_) {
      if (!path->Takes(a)) continue;
      *source = path->Source(a);
      VIPER_ASSIGN_OR_RETURN(const internal::Landed landed, path->Receive(a));
      *moved = landed.moved_bytes;
      return VerifyAndSwap(landed, a.version);
    }
    // This subscriber's options do not match the producer's: refuse it.
    Refuse(a, tier);
    return FailedPreconditionError("no receive path of this subscriber (tier " +
                                   std::string(ToString(options_.tier)) + ") takes an announcement of kind " +
                                   std::to_string(a.kind) + ", protocol " + std::to_string(a.protocol));
  }

  // Answers `a` with a refusal where its tier expects a Ready (a pfs
  // notification waits for the acknowledgement only; an unknown kind is
  // answered).
  void Refuse(const internal::Announce& a, const internal::TierEntry* tier) {
    if (tier == nullptr || tier->ready_handshake) (void)control_->SendReady(a, control_->ReadyFor(a));
  }

  Options options_;
  std::string hmac_key_;                                // pfs: the key file's bytes, when given
  std::unique_ptr<internal::ConsumerControl> control_;  // push: the session with the producer
  internal::LandingPool pool_;                          // receiving thread only
  std::vector<std::unique_ptr<internal::TierReceiver>> paths_;
  internal::PfsReceiver* pfs_ = nullptr;  // in paths_ (tier pfs)
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
