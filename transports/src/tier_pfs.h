// The PFS tier (tier_pfs.cc): the directory (PfsStore) and, with push
// notification, an announcement through the control. Its announcements
// carry no payload of their own: the version names the file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "back_buffer.h"
#include "tier.h"
#include "viper/transports/pfs_store.h"
#include "wire.h"

namespace viper {
namespace transports {
namespace internal {

inline Status CheckPfsPayload(const Announce& a) { return GetTierPayload<NoTierPayload>(a, "pfs").status(); }

// `setup.control`: push notification, else nullptr (poll).
StatusOr<std::unique_ptr<TierSender>> MakePfsSender(const SenderSetup& setup);
// One path, a PfsReceiver. A directory that exists must be private now (a
// missing one may still be created by the producer: checked again before
// each read).
StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakePfsReceivers(const ReceiverSetup& setup);

// The subscriber's reader of the PFS directory: a receive path for pushed
// versions, and what its poll loop reads.
class PfsReceiver : public TierReceiver {
 public:
  // `held`: the version the subscriber serves (ReceiverSetup::held; may be empty).
  PfsReceiver(const Subscriber::Options& options, LandingPool* pool,
              std::function<std::shared_ptr<const ModelVersion>()> held = {});
  bool Takes(const Announce& a) override { return a.kind == kAnnouncePfs; }
  StatusOr<Landed> Receive(const Announce& a) override { return Load(a.version, held_ ? held_() : nullptr); }
  std::string Source(const Announce& a) const override { return store_->PathFor(a.version); }
  StatusOr<std::vector<uint64_t>> Versions() const { return store_->ListVersions(); }
  std::string PathFor(uint64_t version) const { return store_->PathFor(version); }
  StatusOr<PfsStore::FileId> Identify(uint64_t version) const { return store_->Identify(version); }
  // The directory, when it exists, must be private (private_dir.h; owned by
  // this user or root). Checked at Create and before each read.
  Status CheckDirectory() const;
  // Reads version `version` into a landing buffer. Version-aware: when its
  // delta chain passes through `held` (the version the subscriber serves),
  // the held image is copied into the landing buffer and only the deltas
  // after it are read and applied (PfsStore::ReadFrom, each rebuilt image
  // verified); otherwise the version is read whole. When the read is one
  // delta file and the last one rebuilt the held version from the image a
  // free landing buffer still holds (its back buffer), only what that delta
  // wrote is copied into it (back_buffer.h; Landed::brought_forward).
  // Landed::moved_bytes is the size of the files read (the deltas', or the
  // chain's); Landed::copied_bytes what was copied from the held image.
  StatusOr<Landed> Load(uint64_t version, const std::shared_ptr<const ModelVersion>& held);

 private:
  std::unique_ptr<PfsStore> store_;
  LandingPool* pool_;
  std::function<std::shared_ptr<const ModelVersion>()> held_;
  BackBuffer back_;  // delta versions land here
};

}  // namespace internal
}  // namespace transports
}  // namespace viper
