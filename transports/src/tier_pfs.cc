// The PFS tier, both halves (tier.h): the producer writes each version to the
// directory (PfsStore: temp, fsync, rename) and, with push notification,
// announces it through the control; a consumer reads it back into a landing
// buffer, pushed or polled.
#include "tier_pfs.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/checksum.h"
#include "viper/transports/private_dir.h"

namespace viper {
namespace transports {
namespace internal {

namespace {

class PfsSender : public TierSender {
 public:
  PfsSender(const Publisher::Options& options, std::unique_ptr<PfsStore> store, ProducerControl* control)
      : options_(options), store_(std::move(store)), control_(control) {}

  Status Send(const StagedVersion& s, double start_s, SendOutcome* out) override {
    const double t0 = MonotonicSeconds();
    const bool delta = options_.pfs_delta || options_.delta == DeltaMode::kOn;
    auto stats = delta && !base_.empty()
                     ? store_->WriteDelta(s.version(), s.image(), s.image_bytes(), base_.data(), base_.size())
                     : store_->Write(s.version(), s.image(), s.image_bytes());
    if (!stats.ok()) return stats.status();
    out->transfer_s = MonotonicSeconds() - t0;
    out->written_bytes = stats->bytes;
    out->encoding = stats->delta ? "delta of version " + std::to_string(stats->base_version)
                                 : (stats->delta_report.empty() ? "full" : "full (" + stats->delta_report + ")");
    // The next version's base: this image, as the directory now holds it.
    // With push it is copied once the consumers are told, while they read:
    // off the update latency's path (the staged image stays valid until
    // Send returns).
    auto keep_base = [&] {
      if (delta) base_.assign(s.image(), s.image() + s.image_bytes());
    };
    if (control_ == nullptr) {  // poll: the consumers find it themselves
      keep_base();
      return Status::Ok();
    }
    const Announce a =
        control_->AnnounceStaged(kAnnouncePfs, s.version(), s.iteration(), s.image_bytes(), s.checksum());
    control_->NotifyDurable(a, start_s, options_.mode == Mode::kAsync || options_.wait_for_servable, out,
                            keep_base);
    return Status::Ok();
  }

 private:
  Publisher::Options options_;
  std::unique_ptr<PfsStore> store_;
  ProducerControl* control_;
  std::vector<std::byte> base_;  // pfs_delta: the previous version's image
};

}  // namespace

StatusOr<std::unique_ptr<TierSender>> MakePfsSender(const SenderSetup& setup) {
  const Publisher::Options& options = setup.options;
  PfsStore::Options po;
  po.dir = options.pfs_dir;
  po.o_direct = options.o_direct;
  po.writer_threads = options.pfs_writer_threads;
  po.keep_versions = options.pfs_keep_versions;
  po.layout = options.pfs_layout;
  po.delta_chain_max = options.pfs_delta_chain_max;
  std::string error;
  if (!po.IsValid(&error)) return InvalidArgumentError("pfs options: " + error);
  // Created when missing (0700, as PyTorch DCP and save_pretrained create
  // theirs); refused when another user owns it or may write into it.
  VIPER_RETURN_IF_ERROR(EnsurePrivateDirectory(po.dir));
  auto store = std::make_unique<PfsStore>(po);
  (void)store->RemoveDeadTemporaries();  // a killed run's leftovers
  return std::unique_ptr<TierSender>(new PfsSender(options, std::move(store), setup.control));
}

StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakePfsReceivers(const ReceiverSetup& setup) {
  auto pfs = std::make_unique<PfsReceiver>(setup.options, setup.pool, setup.held);
  struct stat st;
  if (::lstat(setup.options.pfs_dir.c_str(), &st) == 0) VIPER_RETURN_IF_ERROR(pfs->CheckDirectory());
  std::vector<std::unique_ptr<TierReceiver>> paths;
  paths.push_back(std::move(pfs));
  return paths;
}

PfsReceiver::PfsReceiver(const Subscriber::Options& options, LandingPool* pool,
                         std::function<std::shared_ptr<const ModelVersion>()> held)
    : pool_(pool), held_(std::move(held)), back_(pool) {
  PfsStore::Options po;
  po.dir = options.pfs_dir;
  po.o_direct = options.o_direct;
  po.layout = options.pfs_layout;
  store_ = std::make_unique<PfsStore>(po);
}

Status PfsReceiver::CheckDirectory() const {
  return CheckPrivateDirectory(store_->options().dir, /*allow_root_owner=*/true);
}

StatusOr<Landed> PfsReceiver::Load(uint64_t version, const std::shared_ptr<const ModelVersion>& held) {
  const double t0 = MonotonicSeconds();
  VIPER_RETURN_IF_ERROR(CheckDirectory());
  // A base to rebuild from: the served image, when the version's chain
  // passes through it (else reading it whole is all there is to do).
  const ModelVersion* base = HeldImage(held);
  bool one_delta = false;  // the read is one delta file: `version`'s, against the served version
  if (base != nullptr) {
    auto chain = store_->Chain(version);
    const uint64_t held_version = base->state.metadata.version;
    std::ptrdiff_t after = 0;  // the chain's files after the held version
    if (chain.ok() && held_version < version) {
      const auto at = std::find(chain->begin(), chain->end(), held_version);
      if (at != chain->end()) after = chain->end() - at - 1;
    }
    if (after == 0) base = nullptr;
    one_delta = after == 1;
  }
  // The back buffer: brought forward when it holds the version the last
  // delta rebuilt the served one from and this read is one delta file (a
  // chain of several would leave nothing to bring forward next time), else
  // any free buffer, the served image copied whole.
  bool forward = false;
  auto acquired =
      base != nullptr ? back_.Acquire(*base, base->size_bytes, one_delta, &forward) : pool_->Acquire(4096);
  if (!acquired.ok()) return acquired.status();
  std::shared_ptr<AlignedBuffer> buffer = std::move(*acquired);
  // PfsStore grows the buffer it is given; give it a private one.
  AlignedBuffer local = std::move(*buffer);
  std::vector<uint64_t> read;
  StatusOr<uint64_t> size = 0;
  safetensors::ParseInfo rebuilt;  // the last delta's Apply: the image it verified
  ImageRanges written;             // what that delta wrote
  uint64_t copied = 0;
  if (base != nullptr) {
    copied = back_.BringForward(forward, *base, local.data());
    size = store_->ReadFrom(version, base->state.metadata.version, base->size_bytes, &local, &read, &rebuilt,
                            &written);
  } else {
    size = store_->Read(version, &local);
    read = {version};
  }
  *buffer = std::move(local);
  if (!size.ok()) {
    back_.Forget();
    return size.status();
  }
  Landed landed;
  landed.buffer = buffer;
  landed.size = *size;
  landed.moved_bytes = 0;
  // Rebuilt from the deltas after the served version (ReadFrom hands back
  // the last Apply's verified parse; not when it fell back to a whole read).
  landed.from_delta = base != nullptr && rebuilt.data_verified;
  std::optional<uint64_t> checksum;
  if (landed.from_delta) {
    const auto sum = rebuilt.metadata.find(safetensors::kChecksumKey);
    if (sum != rebuilt.metadata.end()) checksum = ChecksumFromHex(sum->second);
    landed.brought_forward = forward;
    landed.copied_bytes = copied;
  }
  // For the next version: the served image's buffer holds it, and, when
  // this read was one delta rebuilding an image of the same size, what it
  // wrote. Anything else (a chain, a whole read, a header of another size)
  // leaves nothing to bring forward.
  if (landed.from_delta && checksum && read.size() == 1 && read.front() == version && !written.empty()) {
    back_.Remember(*base, {version, *checksum, *size}, std::move(written));
  } else {
    back_.Forget();
  }
  if (base != nullptr) {
    // The files read: each delta after the held version.
    for (uint64_t v : read) {
      auto f = store_->Describe(v);
      landed.moved_bytes += f.ok() ? f->bytes : 0;
    }
  } else {
    // Read whole: a full file's size, or (a delta version rebuilt from its
    // chain) every file of the chain.
    auto chain = store_->Chain(version);
    if (chain.ok() && chain->size() > 1) {
      for (uint64_t v : *chain) {
        auto f = store_->Describe(v);
        landed.moved_bytes += f.ok() ? f->bytes : 0;
      }
    } else {
      landed.moved_bytes = *size;
    }
  }
  landed.source = store_->PathFor(version);
  landed.receive_s = MonotonicSeconds() - t0;
  // Rebuilt from deltas: Apply hashed the rebuilt data against the header's
  // viper.checksum, so verify-and-swap checks the header against it without
  // hashing the image a second time (as the host tier's delta path does).
  if (checksum) {
    landed.streamed = true;
    landed.data_offset = rebuilt.data_offset;
    landed.checksum = *checksum;
  }
  return landed;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
