// The host tier's streamed protocols, both halves (tier.h): two-sided (wire
// order in wire.h: plan, data chunks hashed while in flight, header last;
// relayed along the fan-out plan) and shm (consumers on the producer's node
// copy the version out of its segment, shm_segment.h, while the producer
// copies it in). One producer pass interleaves both: consumers that map the
// segment take it from there, the others get the two-sided stream. MPI
// builds only (mpi_stub.cc otherwise).
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "host_stream.h"
#include "keep_until_finalize.h"
#include "mpi_link.h"
#include "shm_segment.h"
#include "tier_host.h"
#include "tier_host_delta.h"
#include "viper/core/checksum.h"
#include "viper/core/log.h"

namespace viper {
namespace transports {
namespace internal {

namespace {

// Bytes hashed between two passes over the in-flight sends: small enough that
// completions are noticed (and new chunks posted) promptly.
constexpr uint64_t kHashSliceBytes = 256 * 1024;

// shm protocol: bytes the producer copies (and hashes) between two updates
// of its progress in the segment, which the consumers copy out behind it.
constexpr uint64_t kShmProgressBytes = 1 << 20;

// Adjacent ranges (e.g. tensors of one arena, or a staging buffer) merged.
std::vector<ByteRange> MergeRanges(const std::vector<ByteRange>& ranges) {
  std::vector<ByteRange> merged;
  for (const ByteRange& r : ranges) {
    if (!merged.empty() && merged.back().data + merged.back().size == r.data) {
      merged.back().size += r.size;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

// One send of `chunks` to each of `ranks`.
std::vector<ChunkedTransfer> Sends(const std::vector<int>& ranks, const std::vector<Chunk>* chunks) {
  std::vector<ChunkedTransfer> transfers;
  for (int rank : ranks) {
    ChunkedTransfer t;
    t.peer = rank;
    t.send = true;
    t.chunks = chunks;
    transfers.push_back(std::move(t));
  }
  return transfers;
}

class HostSender : public TierSender {
 public:
  explicit HostSender(ProducerControl* control)
      : control_(control), options_(control->options()), delta_(options_) {}

  bool Streams() const override { return true; }
  void Prepare(uint64_t staging_bytes) override { (void)EnsureSegment(staging_bytes, staging_bytes); }
  Status Send(const StreamSource& src, double start_s, SendOutcome* out) override;
  void Close() override { segment_.reset(); }

 private:
  // The messages of one version: [0] the plan, the data chunks cut from
  // `merged` at chunk_bytes, the header last (set once the data is hashed).
  struct Messages {
    std::shared_ptr<std::vector<uint64_t>> plan;
    std::vector<Chunk> chunks;
  };
  Messages Cut(const std::vector<ByteRange>& merged, uint64_t header_bytes) const;
  Announce AnnounceStream(const StreamSource& src, uint64_t data_chunks, bool offer_shm,
                          HostPayload* payload) const;
  bool EnsureSegment(uint64_t image_bytes, uint64_t reserve_bytes);
  // Drops the consumers whose sends failed (those they would have forwarded
  // to stay subscribed: they report the version as not delivered once their
  // wait runs out) and keeps what those freed, unfinished sends may still
  // read (`sent` and the sources' owners) until MPI_Finalize.
  void DropFailed(const std::vector<ChunkedTransfer>& transfers,
                  std::vector<std::shared_ptr<const void>> sent,
                  const std::vector<std::shared_ptr<const void>>& owners, SendOutcome* out,
                  std::vector<int>* acking);

  ProducerControl* control_;
  const Publisher::Options& options_;
  std::unique_ptr<ShmSegment> segment_;  // shm protocol
  uint64_t segment_generation_ = 0;
  bool shm_failed_ = false;  // the segment could not be made: two-sided from then on
  HostDeltaOffer delta_;     // the base kept and the delta offered (tier_host_delta.h)
};

HostSender::Messages HostSender::Cut(const std::vector<ByteRange>& merged, uint64_t header_bytes) const {
  Messages m;
  m.chunks.resize(1);  // [0]: the plan
  for (const ByteRange& r : merged) {
    AppendChunks(const_cast<std::byte*>(r.data), r.size, options_.chunk_bytes, &m.chunks);  // only read
  }
  m.plan = std::make_shared<std::vector<uint64_t>>();
  m.plan->reserve(m.chunks.size() - 1);
  for (std::size_t i = 1; i < m.chunks.size(); ++i) m.plan->push_back(m.chunks[i].size);
  m.chunks[0] = {reinterpret_cast<std::byte*>(m.plan->data()), m.plan->size() * sizeof(uint64_t)};
  m.chunks.push_back({nullptr, header_bytes});
  return m;
}

Announce HostSender::AnnounceStream(const StreamSource& src, uint64_t data_chunks, bool offer_shm,
                                    HostPayload* payload) const {
  Announce a = control_->AnnounceStaged(kAnnounceHost, src.version, src.iteration,
                                        src.header_bytes + src.data_bytes, /*checksum=*/0);
  HostPayload& p = *payload;
  p.header_bytes = src.header_bytes;
  p.data_chunks = data_chunks;
  p.routed = options_.fanout == Fanout::kDirect ? 0 : 1;
  if (offer_shm) {
    std::snprintf(p.shm_name, sizeof(p.shm_name), "%s", segment_->name().c_str());
    p.shm_payload_bytes = segment_->payload_bytes();
  }
  delta_.Offer(&p);
  SetTierPayload(p, &a);
  return a;
}

// Moves one version to the consumers: plan, data chunks straight from
// `src.ranges` while they are hashed between MPI calls, then the header with
// the checksum. With the shm protocol, consumers on this node that map the
// segment copy the version out of it instead, while the producer copies it
// in between its MPI calls to the others; that copy also hashes it.
Status HostSender::Send(const StreamSource& src, double start_s, SendOutcome* out) {
  const double t0 = MonotonicSeconds();
  // Delta: the image built (and hashed) first, then diffed against the base
  // kept; the digest is then known before any byte moves.
  VIPER_RETURN_IF_ERROR(delta_.Prepare(src, control_->host()));
  const bool known = delta_.built();
  std::vector<ByteRange> merged = MergeRanges(src.ranges);
  Messages m = Cut(merged, src.header_bytes);
  std::vector<Chunk>& chunks = m.chunks;

  // shm: the segment the consumers on this node copy the version out of.
  // Room for 1/8 more, so that a slowly growing model does not need a new
  // segment every version.
  const uint64_t image_bytes = src.header_bytes + src.data_bytes;
  const bool offer_shm = EnsureSegment(image_bytes, image_bytes + image_bytes / 8);
  std::optional<ShmWriter> shm;
  if (offer_shm)
    shm.emplace(segment_.get(), merged, src.header_bytes, src.version);  // before the announcement

  HostPayload payload;
  const Announce a = AnnounceStream(src, m.plan->size(), offer_shm, &payload);
  VIPER_ASSIGN_OR_RETURN(const ReadyList ready, control_->Handshake(a, out));
  // Every consumer still served has answered, so it has mapped the segment
  // or never will: the name can go (nothing is left in /dev/shm if this
  // process dies).
  if (offer_shm) segment_->Unlink();
  std::vector<int> via_shm, via_delta;
  ReadyList via_mpi, delta_ready;
  for (const auto& r : ready) {
    if (r.second.path == kPathDelta) {
      // Only for the base offered, which it says it holds.
      if (delta_.Takes(r.first, r.second)) {
        via_delta.push_back(r.first);
        delta_ready.push_back(r);
      } else {
        control_->Drop(r.first, "answered a delta for version " + std::to_string(r.second.held_version) +
                                    ", which is not the base offered", out);
      }
    } else if (offer_shm && r.second.path == kPathShm) {
      via_shm.push_back(r.first);
    } else {
      via_mpi.push_back(r);
    }
  }
  if (via_shm.empty()) shm.reset();
  std::vector<int> acking;  // every consumer the version is on its way to
  const FanoutPlan fan = control_->Route(a, payload.routed != 0, via_mpi, out, &acking);
  acking.insert(acking.end(), via_shm.begin(), via_shm.end());
  // The delta takers get a plan of their own (same arity and nodes): they
  // all hold the base offered, so a relay forwards the delta unchanged, and
  // only to takers.
  std::vector<int> delta_acking;
  const FanoutPlan delta_fan = control_->Route(a, payload.routed != 0, delta_ready, out, &delta_acking);
  acking.insert(acking.end(), delta_acking.begin(), delta_acking.end());

  // The digest comes from the built image when there is one, else from the
  // shm copy when there is one (it hashes what it copies); else from a
  // hasher over the sources: on a thread where it gets its own CPU (e.g.
  // mpirun --bind-to none), else in slices between MPI calls.
  std::optional<SliceHasher> hasher;
  if (!shm && !known) hasher.emplace(std::move(merged), /*use_thread=*/HaveSpareCpu());
  auto hashed = [&] { return shm ? shm->done() : (known || hasher->done()); };
  ChunkHooks hooks;
  hooks.background = [&] {
    if (shm) return shm->Step(kShmProgressBytes);
    return hasher ? hasher->Step(kHashSliceBytes) : false;
  };
  std::shared_ptr<const std::byte> header;
  auto make_header = [&] {
    if (header) return;
    header = known ? delta_.header() : src.header(shm ? shm->Digest() : hasher->Digest());
    chunks.back().data = const_cast<std::byte*>(header.get());  // only read
    if (shm) shm->Complete(header.get());
  };
  hooks.ready = [&](const ChunkedTransfer& t, std::size_t index) {
    if (t.chunks != &chunks) return true;  // a delta: complete before it is sent
    if (index + 1 < chunks.size()) return true;
    if (!hashed()) return false;
    make_header();
    return true;
  };
  std::vector<ChunkedTransfer> transfers = Sends(fan.ChildrenOf(control_->rank()), &chunks);
  for (ChunkedTransfer& t : Sends(delta_fan.ChildrenOf(control_->rank()), delta_.chunks())) {
    transfers.push_back(std::move(t));
  }
  // When each direct transfer completed (delta auto measures its links).
  std::vector<double> done_s(transfers.size(), 0);
  const double run_s = MonotonicSeconds();
  const auto background = hooks.background;
  hooks.background = [&, background] {
    const bool work = background();
    for (std::size_t i = 0; i < transfers.size(); ++i) {
      if (done_s[i] == 0 && transfers[i].Done()) done_s[i] = MonotonicSeconds();
    }
    return work;
  };
  RunChunked(control_->link().comm, options_.max_inflight_chunks, &transfers,
             MonotonicSeconds() + options_.peer_timeout_s, hooks);
  for (std::size_t i = 0; i < transfers.size(); ++i) {
    if (done_s[i] == 0 && !transfers[i].failed) done_s[i] = MonotonicSeconds();
  }
  if (shm) {
    // All consumers on this node, or the MPI sends finished first.
    while (shm->Step(kShmProgressBytes)) {
    }
    make_header();
  }
  DropFailed(transfers, {m.plan, header, delta_.delta_memory()}, src.owners, out, &acking);
  for (const ChunkedTransfer& t : transfers) {
    if (t.failed) continue;
    for (const Chunk& c : *t.chunks) out->sent_bytes += c.size;
  }
  const double sent_s = MonotonicSeconds() - t0;
  // With shm consumers always: the segment is rewritten by the next version
  // only once each has its copy.
  if (!via_shm.empty() || options_.mode == Mode::kAsync || options_.wait_for_servable) {
    control_->CollectAcks(src.version, acking, start_s, out);
  }
  // Two-sided: until the sends completed. shm: until every consumer had
  // acknowledged its copy (copying it out is its transfer).
  out->transfer_s = via_shm.empty() ? sent_s : MonotonicSeconds() - t0;
  // What each consumer was sent; the built image is the next base.
  const std::string delta_of = "delta of version " + std::to_string(delta_.base_version());
  for (auto& c : out->consumers) {
    const bool took = std::find(via_delta.begin(), via_delta.end(), c.rank) != via_delta.end();
    c.encoding = took ? delta_of : "full";
  }
  // What each direct transfer measured (auto's link rates), and why each
  // consumer got what it got.
  for (const auto& r : ready) {
    const bool took = std::find(via_delta.begin(), via_delta.end(), r.first) != via_delta.end();
    uint64_t moved = 0;
    double seconds = 0;
    for (std::size_t i = 0; i < transfers.size(); ++i) {
      if (transfers[i].peer != r.first || transfers[i].failed) continue;
      moved = transfers[i].chunks == &chunks ? image_bytes : delta_.delta_bytes();
      seconds = done_s[i] - run_s;
    }
    double load_s = 0;
    for (const auto& c : out->consumers) {
      if (c.rank == r.first && c.delivered) load_s = c.load_s;
    }
    // A send completes once MPI has the bytes, which may be before they
    // land: for a full version, the consumer's receive time when it
    // acknowledged (its load_s; for a delta, load_s includes the apply).
    if (!took && moved > 0) seconds = std::max(seconds, load_s);
    delta_.Measure(r.first, r.second, moved, seconds, took, load_s);
  }
  for (auto& c : out->consumers) {
    const bool took = std::find(via_delta.begin(), via_delta.end(), c.rank) != via_delta.end();
    c.encoding_reason = delta_.Reason(c.rank, took);
  }
  out->encoding = delta_.Encoding(static_cast<int>(via_delta.size()));
  out->written_bytes = delta_.delta_bytes();
  bool other_node = false;  // auto diffs only for consumers on other nodes
  for (const auto& r : ready) other_node |= strncmp(r.second.host, control_->host(), sizeof(r.second.host)) != 0;
  delta_.Commit(other_node);
  return Status::Ok();
}

void HostSender::DropFailed(const std::vector<ChunkedTransfer>& transfers,
                            std::vector<std::shared_ptr<const void>> sent,
                            const std::vector<std::shared_ptr<const void>>& owners, SendOutcome* out,
                            std::vector<int>* acking) {
  bool any_failed = false;
  for (const auto& t : transfers) {
    if (!t.failed) continue;
    any_failed = true;
    control_->Drop(t.peer, "transfer did not complete within peer_timeout_s", out);
    acking->erase(std::remove(acking->begin(), acking->end(), t.peer), acking->end());
  }
  if (!any_failed) return;
  for (auto& memory : sent) KeepUntilFinalize(std::move(memory));
  for (const auto& owner : owners) KeepUntilFinalize(owner);
}

// shm protocol: whether a segment of at least `image_bytes` is ready,
// making one of `reserve_bytes` when there is none that large. When none
// can be made, warns once and returns false from then on (two-sided).
bool HostSender::EnsureSegment(uint64_t image_bytes, uint64_t reserve_bytes) {
  if (options_.host_protocol != HostProtocol::kShm || shm_failed_) return false;
  if (segment_ && segment_->payload_bytes() >= image_bytes) return true;
  segment_.reset();
  char name[64];
  // The pid in the name: a later producer removes the segment when this
  // process was killed before every consumer had mapped it.
  (void)RemoveDeadSegments();
  std::snprintf(name, sizeof(name), "/viper-%ld-%016llx-r%d-g%llu", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(control_->session()), control_->rank(),
                static_cast<unsigned long long>(++segment_generation_));
  auto created = ShmSegment::Create(name, reserve_bytes);
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

// ---------------------------------------------------------------- consumer

// `a`'s payload (the subscriber checked it with DecodeHostPayload before
// any path saw it); should it still not decode, an empty one, which no
// receive path finds plausible: the version is refused.
HostPayload PayloadOrNone(const Announce& a) {
  auto p = DecodeHostPayload(a);
  return p.ok() ? *p : HostPayload{};
}

// Answers announcement `a` with `ready`, accepting it when it is
// `plausible` and a landing buffer of its size can be had. Returns that
// buffer, or why the version was refused (the refusal has been sent).
StatusOr<std::shared_ptr<AlignedBuffer>> Answer(ConsumerControl* control, LandingPool* pool,
                                                const Announce& a, bool plausible, Ready ready) {
  auto buffer = plausible ? pool->Acquire(a.image_bytes)
                          : StatusOr<std::shared_ptr<AlignedBuffer>>(DataLossError(
                                "announcement of version " + std::to_string(a.version) + " is inconsistent"));
  ready.accept = buffer.ok() ? 1 : 0;
  VIPER_RETURN_IF_ERROR(control->SendReady(a, ready));
  return buffer;
}

// Version `a` landed in `buffer` with its data hashed to `checksum` as it came.
Landed StreamedImage(const Announce& a, const HostPayload& p, std::shared_ptr<AlignedBuffer> buffer,
                     std::string source, double t0, uint64_t checksum) {
  Landed landed;
  landed.buffer = std::move(buffer);
  landed.size = a.image_bytes;
  landed.moved_bytes = a.image_bytes;
  landed.source = std::move(source);
  landed.receive_s = MonotonicSeconds() - t0;
  landed.streamed = true;
  landed.data_offset = p.header_bytes;
  landed.checksum = checksum;
  return landed;
}

// shm protocol, consumer on the producer's node that maps its segment.
class ShmReceiver : public TierReceiver {
 public:
  ShmReceiver(ConsumerControl* control, LandingPool* pool) : control_(control), pool_(pool) {}

  // On the producer's node, and mapped (once per segment). Otherwise the
  // version comes as a two-sided stream (the next path).
  bool Takes(const Announce& a) override {
    if (a.kind != kAnnounceHost) return false;
    const auto p = DecodeHostPayload(a);
    if (!p.ok() || p->shm_name[0] == '\0') return false;
    if (!control_->options().allow_shm || strncmp(a.host, control_->host(), sizeof(a.host)) != 0)
      return false;
    const std::string name(p->shm_name, strnlen(p->shm_name, sizeof(p->shm_name)));
    if (shm_ && shm_->name() == name && shm_->payload_bytes() == p->shm_payload_bytes) return true;
    shm_.reset();
    auto opened = ShmSegment::Open(name, p->shm_payload_bytes);
    if (!opened.ok()) {
      Log(LogLevel::kWarning, "transports",
          "rank " + std::to_string(control_->rank()) + " cannot map the producer's shared memory (" +
              opened.status().ToString() + "); receiving over MPI instead");
      return false;
    }
    shm_ = std::move(*opened);
    return true;
  }

  StatusOr<Landed> Receive(const Announce& a) override;
  std::string Source(const Announce&) const override { return control_->ProducerName() + " (shm)"; }

 private:
  ConsumerControl* control_;
  LandingPool* pool_;
  std::unique_ptr<ShmSegment> shm_;  // the producer's segment, mapped
};

// Copies the data section out as the producer publishes its progress,
// hashing each block from cache, then the header once the version is
// complete.
StatusOr<Landed> ShmReceiver::Receive(const Announce& a) {
  const double t0 = MonotonicSeconds();
  Ready ready = control_->ReadyFor(a);
  ready.path = kPathShm;
  const HostPayload p = PayloadOrNone(a);
  const bool plausible =
      p.header_bytes >= 8 && p.header_bytes <= a.image_bytes && a.image_bytes <= shm_->payload_bytes();
  VIPER_ASSIGN_OR_RETURN(const std::shared_ptr<AlignedBuffer> buffer,
                         Answer(control_, pool_, a, plausible, ready));

  const ShmControl* control = shm_->control();
  const std::byte* image = shm_->payload();
  std::byte* base = buffer->data();
  const uint64_t data_bytes = a.image_bytes - p.header_bytes;
  const double deadline = control_->TransferDeadline(a);
  auto moved_on = [&] {
    return UnavailableError("the producer started version " +
                            std::to_string(control->version.load(std::memory_order_acquire)) +
                            " in the shared segment before this rank had copied version " +
                            std::to_string(a.version) + " out (it was too slow and was dropped)");
  };
  Xxh3Hasher hasher;
  uint64_t copied = 0;
  Backoff backoff(control_->options().idle_sleep_us);
  for (;;) {
    if (control->version.load(std::memory_order_acquire) != a.version) return moved_on();
    const uint64_t published = std::min(control->data_bytes.load(std::memory_order_acquire), data_bytes);
    if (published > copied) {
      CopyAndHash(base + p.header_bytes + copied, image + p.header_bytes + copied, published - copied,
                  &hasher);
      copied = published;
      backoff.Reset();
      continue;
    }
    if (copied == data_bytes && control->complete.load(std::memory_order_acquire) == a.version + 1) break;
    if (MonotonicSeconds() > deadline) {
      return AbortedError("version " + std::to_string(a.version) + " stopped at " + std::to_string(copied) +
                          " of " + std::to_string(data_bytes) + " data bytes in the shared segment " +
                          control_->WindowText(a) + " s after its announcement");
    }
    backoff.Pause();
  }
  std::memcpy(base, image, p.header_bytes);
  // The producer rewrites the segment only after this rank's acknowledgement
  // (unless it has dropped this rank): a newer version now means torn bytes.
  if (control->version.load(std::memory_order_acquire) != a.version) return moved_on();
  return StreamedImage(a, p, buffer, Source(a), t0, hasher.Digest());
}

// Two-sided stream, from the producer or a relay (Route), forwarded on to
// this rank's own receivers as each message lands.
class TwoSidedReceiver : public TierReceiver {
 public:
  TwoSidedReceiver(ConsumerControl* control, LandingPool* pool) : control_(control), pool_(pool) {}

  bool Takes(const Announce& a) override {
    return a.kind == kAnnounceHost && a.protocol != static_cast<uint32_t>(HostProtocol::kOneSided);
  }
  StatusOr<Landed> Receive(const Announce& a) override;
  std::string Source(const Announce&) const override { return control_->ProducerName(); }

 private:
  ConsumerControl* control_;
  LandingPool* pool_;
};

// Lays version `a`'s data chunks out in `base` after its header as `plan`
// says, then the header (at 0) last; `ends`: where each data chunk ends in
// the data section. Aborted when the plan does not add up (the producer's
// stream is out of step with this consumer: it gives up on it).
Status LayOut(const Announce& a, const HostPayload& p, const std::vector<uint64_t>& plan, std::byte* base,
              std::vector<Chunk>* chunks, std::vector<uint64_t>* ends) {
  const uint64_t data_bytes = a.image_bytes - p.header_bytes;
  uint64_t off = 0;
  for (uint64_t n : plan) {
    if (n == 0 || n > static_cast<uint64_t>(std::numeric_limits<int>::max()) || n > data_bytes - off) break;
    chunks->push_back({base + p.header_bytes + off, n});
    off += n;
    ends->push_back(off);
  }
  if (chunks->size() != plan.size() || off != data_bytes) {
    return AbortedError("the chunk plan of version " + std::to_string(a.version) + " does not add up to " +
                        std::to_string(data_bytes) + " data bytes");
  }
  chunks->push_back({base, p.header_bytes});
  return Status::Ok();
}

// `seconds` as "%.1f", for messages.
std::string Seconds1(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", seconds);
  return buf;
}

// The chunk plan of version `a` from `parent` (one kTagData message), or
// nullptr when it did not arrive by `deadline`: the receive stays posted, so
// the plan is kept until MPI_Finalize.
std::shared_ptr<std::vector<uint64_t>> ReceivePlan(MPI_Comm comm, uint64_t data_chunks, int parent,
                                                   double deadline) {
  auto plan = std::make_shared<std::vector<uint64_t>>(data_chunks);
  std::vector<Chunk> plan_chunk = {
      {reinterpret_cast<std::byte*>(plan->data()), data_chunks * sizeof(uint64_t)}};
  std::vector<ChunkedTransfer> transfers(1);
  transfers[0].peer = parent;
  transfers[0].chunks = &plan_chunk;
  RunChunked(comm, 1, &transfers, deadline);
  if (!transfers[0].failed) return plan;
  KeepUntilFinalize(plan);
  return nullptr;
}

// Plan, data at header_bytes while it is hashed, header last.
StatusOr<Landed> TwoSidedReceiver::Receive(const Announce& a) {
  const double t0 = MonotonicSeconds();
  const HostPayload p = PayloadOrNone(a);
  const bool plausible = p.header_bytes >= 8 && p.header_bytes <= a.image_bytes &&
                         p.data_chunks <= a.image_bytes - p.header_bytes;
  VIPER_ASSIGN_OR_RETURN(const std::shared_ptr<AlignedBuffer> buffer,
                         Answer(control_, pool_, a, plausible, control_->ReadyFor(a)));
  VIPER_ASSIGN_OR_RETURN(const StreamLeg leg, StreamLeg::Open(control_, a, p.routed != 0));
  MPI_Comm comm = control_->link().comm;
  auto plan = ReceivePlan(comm, p.data_chunks, leg.parent(), leg.deadline());
  if (!plan) {
    return leg.Lost("the chunk plan of version " + std::to_string(a.version) + " did not arrive " +
                    leg.in_time());
  }
  std::vector<Chunk> plan_chunk = {
      {reinterpret_cast<std::byte*>(plan->data()), plan->size() * sizeof(uint64_t)}};
  std::byte* base = buffer->data();
  std::vector<Chunk> chunks;
  std::vector<uint64_t> ends;  // end of each data chunk within the data section
  VIPER_RETURN_IF_ERROR(LayOut(a, p, *plan, base, &chunks, &ends));
  std::optional<LandingHasher> hasher;
  hasher.emplace(base + p.header_bytes, /*use_thread=*/ends.size() >= 2);
  ChunkHooks hooks;
  hooks.completed = [&](std::size_t index) {
    if (index < ends.size()) hasher->Landed(ends[index]);
  };
  // Relay: the same messages, plan first, each sent on once it has landed.
  bool forward_failed = false;
  const bool received = leg.Run(a.version, plan_chunk, chunks, hooks, &forward_failed);
  // Freed sends may still read the plan and the landing buffer (which the
  // pool never frees): keep the plan too.
  if (forward_failed) KeepUntilFinalize(std::move(plan));
  if (!received) {
    hasher.reset();  // reads only what had landed
    // Receives may still land in this buffer: take it out of the pool and
    // keep it until MPI_Finalize.
    KeepUntilFinalize(buffer);
    pool_->Retire(buffer);
    return leg.Lost("transfer of " + std::to_string(a.image_bytes) + " bytes did not complete " +
                    leg.in_time());
  }
  return StreamedImage(a, p, buffer, Source(a), t0, hasher->Finish());
}

}  // namespace

// ------------------------------------------------------ a consumer's leg

StatusOr<StreamLeg> StreamLeg::Open(ConsumerControl* control, const Announce& a, bool routed) {
  StreamLeg leg;
  leg.control_ = control;
  leg.deadline_ = control->TransferDeadline(a);
  leg.route_.parent = control->producer();
  if (routed) {
    VIPER_RETURN_IF_ERROR(control->AwaitRoute(a.version, leg.deadline_, &leg.route_));
    if (leg.route_.parent != control->producer()) {
      leg.deadline_ = std::min(leg.deadline_, MonotonicSeconds() + leg.route_.relay_timeout_s);
    }
  }
  leg.in_time_ = "within " + Seconds1(leg.deadline_ - MonotonicSeconds()) + " s";
  return leg;
}

Status StreamLeg::Lost(const std::string& what) const {
  if (route_.parent == control_->producer()) return AbortedError(what);
  return UnavailableError(what + " (relay rank " + std::to_string(route_.parent) +
                          "; the version is not served, the subscription goes on)");
}

bool StreamLeg::Run(uint64_t version, const std::vector<Chunk>& landed, const std::vector<Chunk>& chunks,
                    ChunkHooks hooks, bool* forward_failed) const {
  std::vector<ChunkedTransfer> transfers(1);
  transfers[0].peer = route_.parent;
  transfers[0].chunks = &chunks;
  std::vector<Chunk> forward;
  if (route_.children_count > 0) {
    forward = landed;
    forward.insert(forward.end(), chunks.begin(), chunks.end());
  }
  for (ChunkedTransfer& t : Sends({route_.children, route_.children + route_.children_count}, &forward)) {
    transfers.push_back(std::move(t));
  }
  // forward[index] is landed[index], then chunks[index - landed.size()].
  hooks.ready = [&](const ChunkedTransfer& t, std::size_t index) {
    return !t.send || index < landed.size() + transfers[0].completed;
  };
  RunChunked(control_->link().comm, 8, &transfers, deadline_, hooks);
  *forward_failed = false;
  for (std::size_t i = 1; i < transfers.size(); ++i) {
    if (!transfers[i].failed) continue;
    *forward_failed = true;
    // The producer drops that rank when it does not acknowledge.
    if (!transfers[0].failed) {
      Log(LogLevel::kWarning, "transports",
          "rank " + std::to_string(control_->rank()) + " could not forward version " +
              std::to_string(version) + " to rank " + std::to_string(transfers[i].peer) + " in time");
    }
  }
  return !transfers[0].failed;
}

StatusOr<std::unique_ptr<TierSender>> MakeHostSender(const SenderSetup& setup) {
  return std::unique_ptr<TierSender>(new HostSender(setup.control));
}

StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeHostReceivers(const ReceiverSetup& setup) {
  std::vector<std::unique_ptr<TierReceiver>> paths;
  paths.push_back(MakeHostDeltaReceiver(setup));                                   // holds the base offered
  paths.push_back(std::make_unique<ShmReceiver>(setup.control, setup.pool));       // same node, segment mapped
  paths.push_back(std::make_unique<TwoSidedReceiver>(setup.control, setup.pool));  // any node
  return paths;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
