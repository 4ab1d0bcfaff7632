// The host tier's delta path (issue 27), both halves (tier_host_delta.cc;
// MPI builds only): version-aware delta updates over two-sided MPI, a
// capability of the host tier's entry (tier_host.h) rather than a tier of
// its own.
//
// Producer (HostDeltaOffer, driven by HostSender): keeps the image of the
// last version it sent (the base). For a new version it builds the image
// (one copy of the data, then the header) and, when the mode calls for it
// (Publisher::Options::delta), encodes it against the base in the same pass
// (delta::CopyHashAndFeed: each slice diffed, copied and hashed while in
// cache; delta::Encoder writes the records after the header). When the delta is smaller, the announcement offers
// it (HostPayload::delta_*: its size, message size, the base's version and
// checksum). Auto decides per consumer on another node by measured speed:
// it keeps each one's link throughput (its direct transfers' times, or the
// receive time it acknowledged, whichever is longer) and apply time (its
// acknowledged load time for a delta less the delta's transfer), and its own
// diff + encode time, and offers the delta (HostPayload::delta_ranks) to
// those where encode + delta / link + apply < image / link
// (delta::ChooseOverLink); the first version to a consumer is full (it
// measures the link). When none gains, the next 6 versions are neither
// copied nor diffed, the 8th is diffed whatever the prediction.
//
// Consumer (a receive path, tried before shm and two-sided): it takes the
// announcement only when the version it serves is the offered base (version
// and viper.checksum), and, on the producer's node, only when the producer
// offers it there too (delta on; auto: a link of shared memory is as fast as
// the consumer's copy and apply), with auto only when its rank is in the
// offer's delta_ranks, and answers Ready with kPathDelta, naming what it holds
// (Ready::held_version/held_checksum; the producer checks them). Then, all
// kTagData, the delta in messages of delta_chunk_bytes: from the producer,
// or, when routed (HostPayload::routed), from the parent its Route names,
// in a fan-out plan over the delta takers alone (every taker holds the same
// base, so a relay forwards the delta unchanged). A taker that relays
// forwards each message to its children as it lands, before it applies
// (each child verifies its own rebuilt image); a relay that stops costs its
// subtree that version (Unavailable, the subscription goes on), and since
// those consumers then hold a version that is no longer the producer's
// base, the next version reaches them whole. The consumer puts the image
// it serves in a landing buffer (its back buffer), applies the delta there
// (delta::Apply: every field checked first, the rebuilt image parsed with
// its checksums verified, its version and viper.checksum compared with the
// delta's) and hands it to verify-and-swap as an image whose data was
// hashed. When the back buffer is the one that holds the version served
// before (the base of the last delta it applied; LandingPool tracks which
// buffer holds which version, and one a reader holds, or that anything
// else landed in since, is not it), only what that delta changed (the
// header and the tensors it had records for) is copied from the served
// image; otherwise the whole image. A delta
// that does not apply is an error for that version only: the consumer keeps
// serving what it holds, acknowledges the version as rejected, and the next
// version comes whole (its held version is no longer the producer's base).
// Consumers that hold another version, or none, get the full version in the
// same pass (shm or two-sided, fan-out included).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mpi_link.h"
#include "tier.h"
#include "tier_host.h"
#include "viper/transports/aligned_buffer.h"
#include "viper/transports/delta.h"

namespace viper {
namespace transports {
namespace internal {

class HostDeltaOffer {
 public:
  explicit HostDeltaOffer(const Publisher::Options& options) : options_(options) {}

  // When the mode keeps a base (delta on; auto while some consumer on
  // another node than `producer_host` takes versions): builds `src`'s image
  // (copy + hash + header) and, when a base is kept, diffs it against the
  // base in the same pass and encodes it (auto: only when some consumer on
  // another node is predicted to gain, ChooseLinks; else copy + hash only). Sets the digest and header the full stream then uses (no
  // second hash). Otherwise does nothing (built() false).
  Status Prepare(const StreamSource& src, const char* producer_host);
  bool built() const { return next_bytes_ > 0; }
  // A delta is offered for the version Prepare built.
  bool offered() const { return offered_; }
  // Whether consumers on the producer's node are offered it too (kOn): there
  // the link is shared memory (the segment, or MPI's shared-memory
  // transport), as fast as the consumer's copy and apply.
  bool for_shm() const { return options_.delta == DeltaMode::kOn; }
  void Offer(HostPayload* p) const;
  // Whether consumer `rank`, which answered `ready`, takes the delta (auto:
  // only a consumer it was offered to, HostPayload::delta_ranks).
  bool Takes(int rank, const Ready& ready) const;
  // The delta's messages (kTagData, in order).
  const std::vector<Chunk>* chunks() const { return &chunks_; }
  // The built image's data digest and header (valid after Prepare).
  uint64_t digest() const { return digest_; }
  std::shared_ptr<const std::byte> header() const { return header_; }
  const std::byte* data() const { return next_.data() + header_bytes_; }
  // Memory the delta's sends read, for KeepUntilFinalize when one fails.
  std::shared_ptr<const void> delta_memory() const { return delta_; }
  // After the send, per consumer that answered: its node, and the bytes its
  // direct transfer moved in `seconds` (0: none measured, e.g. fed by a
  // relay or over shm), whether it took the delta and, when acknowledged,
  // its load_s (receive + apply + verify). Feeds auto's rates.
  void Measure(int rank, const Ready& ready, uint64_t bytes, double seconds, bool took, double load_s);
  // Why consumer `rank` got what it got ("delta: predicted 0.21 s < full
  // 0.80 s", "full: on the producer's node", ...); "" when no delta was
  // considered (delta off).
  std::string Reason(int rank, bool took) const;
  // After the send: the built image is the next version's base.
  // `other_node`: whether any consumer that took this version is on
  // another node than the producer (auto keeps a base only while some are:
  // consumers on its node are offered no delta).
  void Commit(bool other_node);
  // "delta v7 <- v6: ... (to 2 consumers)" or "full (<reason>)"; "" when no delta was tried.
  std::string Encoding(int takers) const;
  uint64_t delta_bytes() const { return offered_ ? summary_.delta_bytes : 0; }
  uint64_t base_version() const { return base_version_; }

  // Auto offers a delta only to ranks below this (HostPayload::delta_ranks).
  static constexpr int kMaxAutoRank = 512;

 private:
  // What auto measured of one consumer.
  struct Link {
    uint64_t seen = 0;  // the last send it answered (sends_)
    bool other_node = false;
    double bytes_per_s = 0;       // its recent transfers' throughput (0: not measured)
    double apply_s_per_byte = 0;  // copy + apply + verify per image byte (0: not measured)
  };
  // Auto: per consumer on another node, ChooseOverLink with this version's
  // (or, before encoding, the predicted) delta size, encode and apply times.
  // Returns whether any is chosen.
  bool ChooseLinks(uint64_t image_bytes, uint64_t delta_bytes, double encode_s);

  const Publisher::Options& options_;
  bool keep_ = true;  // auto: until a version went to shm consumers only
  AlignedBuffer base_, next_;
  std::shared_ptr<AlignedBuffer> delta_;
  uint64_t base_bytes_ = 0, base_version_ = 0, base_checksum_ = 0;
  uint64_t next_bytes_ = 0, next_version_ = 0, header_bytes_ = 0;
  uint64_t digest_ = 0;
  std::shared_ptr<const std::byte> header_;
  bool tried_ = false, offered_ = false;
  delta::EncodeSummary summary_;
  delta::Encoder encoder_;  // kept: its scan buffers serve the next version
  std::vector<Chunk> chunks_;
  // auto
  const char* host_ = nullptr;  // the producer's node (Prepare)
  uint64_t sends_ = 0;          // Prepare calls
  std::map<int, Link> links_;
  std::map<int, delta::LinkChoice> choices_;  // this version's, per consumer on another node
  std::string skipped_;                       // why this version was not diffed ("" when it was)
  double encode_s_per_byte_ = 0;              // the producer's diff + encode (0: not measured)
  double copy_s_per_byte_ = 0;                // its copy + hash of a version not diffed (0: not measured)
  double delta_fraction_ = 0;                 // the last delta's bytes / image (0: none yet)
  int rest_ = 0;          // versions auto builds nothing (no consumer gained at the last measurement)
  bool measure_ = false;  // diff the next version with a base whatever the prediction
  void Rest();
  // The codec could not diff (Start or Finish failed): this version is full, saying why.
  Status NotEncoded(const Status& why);
};

// The consumer's delta path (first of the host tier's receive paths).
std::unique_ptr<TierReceiver> MakeHostDeltaReceiver(const ReceiverSetup& setup);

}  // namespace internal
}  // namespace transports
}  // namespace viper
