// The producer's half of the sharded groups (group.h, group_internal.h).
#include <unistd.h>

#include "group_gpu.h"
#include "group_internal.h"
#include "group_shm.h"
#include "group_testing.h"
#include "viper/core/checksum.h"

namespace viper {
namespace transports {

using namespace internal;  // NOLINT: the protocol's constants and helpers

// ---- producer ---------------------------------------------------------------

class ShardedPublisher::Impl {
 public:
  Impl(GroupSetup g, Options o, std::unique_ptr<ShmLink> shm, GpuLinkPtr gpu)
      : g_(std::move(g)), options_(o), shm_(std::move(shm)), gpu_(std::move(gpu)) {}

  StatusOr<Summary> Publish(const ModelState& shard, int64_t iteration, bool publish);

  GroupSetup g_;
  Options options_;
  std::unique_ptr<ShmLink> shm_;  // null: MPI (or gpu)
  GpuLinkPtr gpu_;                // null: not the gpu link
  uint64_t last_version_ = 0;
  uint64_t fault_version_ = 0;
  GroupFault fault_ = GroupFault::kNone;
  FaultTimeout fault_timeout_;
  double Timeout(uint64_t version) const { return fault_timeout_.For(version, options_.peer_timeout_s); }

 private:
  // Rank 0's decision, sent to the others; theirs, received.
  Status Decide(int64_t iteration, bool publish, DecideMsg* d);
  // Rank 0: waits for the consumers' Ack of version `v` (begun at `t0`).
  // Every rank: the update time.
  Summary Acknowledge(double t0, uint64_t v, Summary sum);
};

Status ShardedPublisher::Impl::Decide(int64_t iteration, bool publish, DecideMsg* d) {
  const int P = g_.p_layout.ranks();
  if (g_.rank == 0) {
    d->version = publish ? last_version_ + 1 : last_version_;
    d->iteration = iteration;
    d->publish = publish ? 1 : 0;
    for (int r = 1; r < P; ++r) {
      // A producer rank that is gone misses the version; the others go on.
      (void)internal::SendPod(g_.all, g_.producers[r], kGroupTagDecide, *d, Timeout(d->version));
    }
    return Status::Ok();
  }
  const uint64_t last = last_version_;
  if (!WaitPod<DecideMsg>(g_.all, g_.producers[0], kGroupTagDecide,
                          MonotonicSeconds() + options_.decision_timeout_s, d,
                          [last](const DecideMsg& m) { return m.version >= last; })) {
    return AbortedError("producer rank " + std::to_string(g_.rank) +
                        ": no decision from producer rank 0 within " + Seconds(options_.decision_timeout_s) +
                        " s");
  }
  return Status::Ok();
}

StatusOr<ShardedPublisher::Summary> ShardedPublisher::Impl::Publish(const ModelState& shard,
                                                                    int64_t iteration, bool publish) {
  const double t0 = MonotonicSeconds();
  const int Q = g_.q_layout.ranks();
  Summary sum;
  DecideMsg d;
  VIPER_RETURN_IF_ERROR(Decide(iteration, publish, &d));
  if (!d.publish) return sum;
  last_version_ = d.version;
  sum.published = true;
  sum.version = d.version;
  Status valid = g_.p_layout.CheckShard(shard, g_.rank, gpu_ != nullptr);  // gpu: device shards too
  const bool faulty = fault_version_ == d.version;

  // Digests and blocks of every piece, then the headers. The shm link's
  // headers carry neither: the digests and the shard checksum come with
  // the buckets (ShmSend). The gpu link's are sum64, computed on the device
  // once the shard is staged there (GpuStage).
  GpuStaged staged;
  if (valid.ok() && gpu_) {
    auto st = GpuStage(g_, gpu_.get(), shard, faulty && fault_ == GroupFault::kCorruptPiece);
    if (st.ok()) {
      staged = std::move(*st);
      sum.shard_checksum = staged.shard_checksum;
    } else {
      valid = st.status();  // the headers say so: the consumers fail this version at once
    }
  }
  std::vector<std::vector<uint64_t>> headers(Q);
  std::vector<std::vector<std::vector<Block>>> pieces(Q);
  if (valid.ok() && !shm_ && !gpu_) {
    Xxh3Hasher whole;
    for (const Tensor& t : shard.tensors()) whole.Update(t.data, t.size_bytes);
    sum.shard_checksum = whole.Digest();
  }
  for (int c = 0; c < Q; ++c) {
    const uint64_t W = g_.window_bytes;
    const uint64_t nwin = shm_ ? 0 : Windows(g_.q_layout.ShardBytes(c), W);
    headers[c] = {kMagic,
                  d.version,
                  static_cast<uint64_t>(d.iteration),
                  sum.shard_checksum,
                  valid.ok() ? 1u : 0u,
                  static_cast<uint64_t>(g_.rank),
                  nwin};
    pieces[c].resize(nwin);
    for (uint64_t k = 0; k < nwin; ++k) {
      uint64_t digest = 0;
      if (valid.ok() && gpu_) {
        digest = staged.digests[c][k];
      } else if (valid.ok()) {
        for (const ByteCopy& b : Clip(g_.plan.Copies(g_.rank, c), k * W, (k + 1) * W)) {
          AppendBlocks(shard, g_.p_layout, g_.rank, b.src_offset, b.bytes, &pieces[c][k]);
        }
        if (!pieces[c][k].empty()) digest = HashBlocks(pieces[c][k]);
      }
      headers[c].push_back(digest);
    }
  }
  for (int c = 0; c < Q; ++c) {
    Status s = internal::SendBytesWithin(g_.all, g_.consumers[c], kGroupTagHeader, headers[c].data(),
                                         headers[c].size() * sizeof(uint64_t), Timeout(d.version));
    if (!s.ok()) sum.message = "consumer rank " + std::to_string(c) + ": " + s.message();
  }
  if (!valid.ok()) return valid;
  if (faulty &&
      (fault_ == GroupFault::kExitAfterHeaders || (!shm_ && fault_ == GroupFault::kExitAfterFirstBucket))) {
    _exit(0);
  }
  if (faulty &&
      (fault_ == GroupFault::kStopAfterHeaders || (!shm_ && fault_ == GroupFault::kStopAfterFirstBucket))) {
    sum.message = "fault injected: stopped after the headers";
    sum.update_s = MonotonicSeconds() - t0;
    return sum;
  }

  if (gpu_) {  // the consumers copy it themselves; each releases the staging buffer
    std::string message;
    sum.sent = GpuAwaitReleases(g_, d.version, MonotonicSeconds() + Timeout(d.version), &message);
    if (sum.sent) sum.sent_bytes = g_.plan.BytesFrom(g_.rank);
    if (sum.message.empty()) sum.message = message;
    return Acknowledge(t0, d.version, std::move(sum));
  }
  if (shm_) {
    auto announced = [&](uint64_t) {
      if (faulty && fault_ == GroupFault::kExitAfterFirstBucket) _exit(0);
      return !(faulty && fault_ == GroupFault::kStopAfterFirstBucket);
    };
    ShmSent sent = ShmSend(g_, shm_.get(), shard, d.version, Timeout(d.version), announced);
    sum.sent = sent.sent;
    sum.sent_bytes = sent.sent_bytes;
    sum.shard_checksum = sent.shard_checksum;
    sum.ring_bytes = shm_->RingBytes(g_.rank);
    if (sum.message.empty()) sum.message = sent.message;
    return Acknowledge(t0, d.version, std::move(sum));
  }

  // Every piece to every consumer at once, straight from the tensors.
  std::vector<MPI_Request> requests;
  std::vector<uint64_t> request_bytes;
  const uint64_t W = g_.window_bytes;
  for (int c = 0; c < Q; ++c) {
    for (std::size_t k = 0; k < pieces[c].size(); ++k) {
      if (pieces[c][k].empty()) continue;
      for (const auto& message : Messages(Clip(g_.plan.Copies(g_.rank, c), k * W, (k + 1) * W))) {
        std::vector<Block> blocks;
        uint64_t n = 0;
        for (const ByteCopy& b : message) {
          AppendBlocks(shard, g_.p_layout, g_.rank, b.src_offset, b.bytes, &blocks);
          n += b.bytes;
        }
        MPI_Request r;
        VIPER_RETURN_IF_ERROR(
            PostBlocks(true, Coalesce(blocks), g_.consumers[c], DataTag(d.version), g_.all, &r));
        requests.push_back(r);
        request_bytes.push_back(n);
      }
    }
  }
  sum.sent = WaitAll(&requests, MonotonicSeconds() + Timeout(d.version),
                     [&](int i) { sum.sent_bytes += request_bytes[i]; });
  if (!sum.sent && sum.message.empty()) {
    sum.message = "not every consumer rank took its bytes within " + Seconds(Timeout(d.version)) + " s";
  }
  return Acknowledge(t0, d.version, std::move(sum));
}

ShardedPublisher::Summary ShardedPublisher::Impl::Acknowledge(double t0, uint64_t v, Summary sum) {
  if (g_.rank == 0) {
    VoteMsg ack;
    // The consumers decide within two peer timeouts of their first header
    // (the bytes, then the votes).
    if (WaitPod<VoteMsg>(g_.all, g_.consumers[0], kGroupTagAck, t0 + 3 * Timeout(v), &ack,
                         [v](const VoteMsg& m) { return m.version == v; })) {
      sum.committed = ack.yes == 1;
      sum.whole_checksum = ack.whole_checksum;
    } else if (sum.message.empty()) {
      sum.message = "no acknowledgement from consumer rank 0";
    }
  }
  sum.update_s = MonotonicSeconds() - t0;
  return sum;
}

ShardedPublisher::ShardedPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardedPublisher::~ShardedPublisher() = default;

StatusOr<std::unique_ptr<ShardedPublisher>> ShardedPublisher::Create(const GroupRanks& ranks,
                                                                     const ShardLayout& layout,
                                                                     const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError(error);
  VIPER_ASSIGN_OR_RETURN(GroupSetup g, MakeGroup(ranks, true, layout, 0));
  const char* option = "ShardedPublisher::Options::link";
  VIPER_ASSIGN_OR_RETURN(const GroupLink link, AgreeOnGpu(g, options.link, option));
  std::unique_ptr<ShmLink> shm;
  GpuLinkPtr gpu;
  if (link == GroupLink::kGpu) {
    VIPER_ASSIGN_OR_RETURN(gpu, MakeGpuLink(g, true, options.gpu_device, nullptr, Status::Ok(), option));
  } else {
    VIPER_ASSIGN_OR_RETURN(shm, MakeShmLink(g, true, link, options.bucket_bytes, options.ring_buckets));
    // The consumers' check of their bounded targets (ShardedSubscriber::Create).
    VIPER_RETURN_IF_ERROR(Agree(g, true, Status::Ok()).WithContext("ShardedSubscriber: the bounded target"));
  }
  return std::unique_ptr<ShardedPublisher>(
      new ShardedPublisher(std::make_unique<Impl>(std::move(g), options, std::move(shm), std::move(gpu))));
}

StatusOr<ShardedPublisher::Summary> ShardedPublisher::Publish(const ModelState& shard, int64_t iteration,
                                                              bool publish) {
  return impl_->Publish(shard, iteration, publish);
}
int ShardedPublisher::rank() const { return impl_->g_.rank; }
GroupLink ShardedPublisher::link() const {
  return impl_->gpu_ ? GroupLink::kGpu : impl_->shm_ ? GroupLink::kShm : GroupLink::kMpi;
}
const TransferPlan& ShardedPublisher::plan() const { return impl_->g_.plan; }

namespace internal {
void SetFault(ShardedPublisher* publisher, uint64_t version, GroupFault fault) {
  publisher->impl_for_testing()->fault_version_ = version;
  publisher->impl_for_testing()->fault_ = fault;
}
void SetFaultTimeout(ShardedPublisher* publisher, uint64_t first, uint64_t last, double seconds) {
  publisher->impl_for_testing()->fault_timeout_ = {first, last, seconds};
}
}  // namespace internal

}  // namespace transports
}  // namespace viper
