// Producer and consumer groups over MPI (group.h): setup, the producer's
// Publish and the consumer's ReceiveNext, both halves of the protocol in
// one file. Messages travel on a private communicator over the union of both
// groups (MPI_Comm_create_group, MPI_ERRORS_RETURN); every wait has a
// deadline.
#include "viper/transports/group.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "backoff.h"
#include "group_testing.h"
#include "keep_until_finalize.h"
#include "mpi_link.h"
#include "viper/core/checksum.h"
#include "viper/transports/aligned_buffer.h"
#include "viper/transports/types.h"

namespace viper {
namespace transports {
namespace {

using internal::Backoff;
using internal::GroupFault;

constexpr uint64_t kMagic = 0x5649505253484431ull;  // "VIPRSHD1"
constexpr int kTagDecide = 1;
constexpr int kTagHeader = 2;
constexpr int kTagVote = 3;
constexpr int kTagCommit = 4;
constexpr int kTagAck = 5;
constexpr int kTagDataBase = 16384;  // + version % 16384: a late piece of a failed version never matches a later one
constexpr int kCreateTag = 2811;     // MPI_Comm_create_group

int DataTag(uint64_t version) { return kTagDataBase + static_cast<int>(version % 16384); }

// Producer rank 0 -> the other producer ranks, once per step.
struct DecideMsg {
  uint64_t magic = kMagic;
  uint64_t version = 0;
  int64_t iteration = 0;
  uint64_t publish = 0;
};
// Consumer rank -> consumer rank 0 (Vote); consumer rank 0 -> the other
// consumer ranks (Commit) and -> producer rank 0 (Ack).
struct VoteMsg {
  uint64_t magic = kMagic;
  uint64_t version = 0;
  uint64_t yes = 0;
  uint64_t whole_checksum = 0;
};
// The header a producer rank sends each consumer rank: these fields, then
// one digest per window of the consumer's image (0 where it sends nothing).
constexpr int kHeaderFields = 7;  // magic, version, iteration, shard digest, valid, producer, windows

std::string Seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", s);
  return b;
}

// Both groups' view of the job: the union communicator and who is where.
struct GroupSetup {
  MPI_Comm all = MPI_COMM_NULL;        // union of both groups, never freed (as the control's)
  std::vector<int> producers;          // union rank of each producer rank
  std::vector<int> consumers;          // union rank of each consumer rank
  int rank = 0;                        // in this side's group
  ShardLayout p_layout, q_layout;
  TransferPlan plan;
  uint64_t window_bytes = 0;           // the consumers' window (bucket or chunk)
};

Status BcastText(MPI_Comm comm, int root, std::string* text) {
  uint64_t n = text->size();
  if (MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm) != MPI_SUCCESS) return AbortedError("MPI_Bcast failed");
  text->resize(n);
  if (n > 0 && MPI_Bcast(&(*text)[0], static_cast<int>(n), MPI_CHAR, root, comm) != MPI_SUCCESS) {
    return AbortedError("MPI_Bcast failed");
  }
  return Status::Ok();
}

// Collective over both groups: the union communicator, both layouts (each
// group's rank 0 sends its own; every rank checks its layout is that one),
// the consumers' window size, the plan.
StatusOr<GroupSetup> MakeGroup(const GroupRanks& ranks, bool producer, const ShardLayout& mine,
                               uint64_t window_bytes) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return UnavailableError("sharded groups: MPI is not initialised (MpiSession::Init first)");
  int world = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::string error;
  if (!ranks.IsValid(world, &error)) return InvalidArgumentError("sharded groups: " + error);
  const std::vector<int>& side = producer ? ranks.producers : ranks.consumers;
  auto at = std::find(side.begin(), side.end(), me);
  if (at == side.end()) {
    return InvalidArgumentError("sharded groups: world rank " + std::to_string(me) + " is not one of the " +
                                (producer ? "producer" : "consumer") + " ranks");
  }
  if (mine.ranks() != static_cast<int>(side.size())) {
    return InvalidArgumentError("sharded groups: the layout has " + std::to_string(mine.ranks()) + " ranks, the " +
                                (producer ? "producer" : "consumer") + " group " + std::to_string(side.size()));
  }
  std::vector<int> all(ranks.producers);
  all.insert(all.end(), ranks.consumers.begin(), ranks.consumers.end());
  std::sort(all.begin(), all.end());
  auto union_rank = [&](int w) { return static_cast<int>(std::lower_bound(all.begin(), all.end(), w) - all.begin()); };
  GroupSetup g;
  g.rank = static_cast<int>(at - side.begin());
  for (int w : ranks.producers) g.producers.push_back(union_rank(w));
  for (int w : ranks.consumers) g.consumers.push_back(union_rank(w));
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, static_cast<int>(all.size()), all.data(), &group);
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, kCreateTag, &g.all);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  if (rc != MPI_SUCCESS) return AbortedError("sharded groups: MPI_Comm_create_group failed");
  MPI_Comm_set_errhandler(g.all, MPI_ERRORS_RETURN);

  std::string p_text = producer ? mine.Serialize() : "", q_text = producer ? "" : mine.Serialize();
  const std::string own = mine.Serialize();
  VIPER_RETURN_IF_ERROR(BcastText(g.all, g.producers[0], &p_text));
  VIPER_RETURN_IF_ERROR(BcastText(g.all, g.consumers[0], &q_text));
  if (MPI_Bcast(&window_bytes, 1, MPI_UINT64_T, g.consumers[0], g.all) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Bcast failed");
  }
  int same = (producer ? p_text : q_text) == own ? 1 : 0, all_same = 0;
  if (MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, g.all) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Allreduce failed");
  }
  if (!all_same) {
    return InvalidArgumentError(same ? "sharded groups: another rank's layout differs from its group rank 0's"
                                     : "sharded groups: this rank's layout differs from its group rank 0's");
  }
  VIPER_ASSIGN_OR_RETURN(g.p_layout, ShardLayout::Parse(p_text));
  VIPER_ASSIGN_OR_RETURN(g.q_layout, ShardLayout::Parse(q_text));
  VIPER_ASSIGN_OR_RETURN(g.plan, TransferPlan::Make(g.p_layout, g.q_layout));
  g.window_bytes = window_bytes;
  return g;
}

uint64_t Windows(uint64_t bytes, uint64_t window) { return (bytes + window - 1) / window; }

// The copies of `copies` (sorted by destination) that fall in [lo, hi) of
// the destination, clipped to it.
std::vector<ByteCopy> Clip(const std::vector<ByteCopy>& copies, uint64_t lo, uint64_t hi) {
  std::vector<ByteCopy> out;
  for (const ByteCopy& c : copies) {
    const uint64_t a = std::max(lo, c.dst_offset), b = std::min(hi, c.dst_offset + c.bytes);
    if (a >= b) continue;
    out.push_back({c.src_offset + (a - c.dst_offset), a, b - a});
  }
  return out;
}

// Memory blocks of a shard image held as separate tensors: [offset, offset
// + bytes) of the image, split at tensor boundaries.
struct Block {
  std::byte* data;
  uint64_t bytes;
};

void AppendBlocks(const ModelState& shard, const ShardLayout& layout, int rank, uint64_t offset, uint64_t bytes,
                  std::vector<Block>* out) {
  std::size_t t = 0;
  while (t + 1 < shard.size() && layout.LocalOffset(t + 1, rank) <= offset) ++t;
  while (bytes > 0) {
    while (layout.LocalOffset(t, rank) + layout.LocalBytes(t, rank) <= offset) ++t;
    const uint64_t in = offset - layout.LocalOffset(t, rank);
    const uint64_t n = std::min(bytes, layout.LocalBytes(t, rank) - in);
    out->push_back({shard.tensors()[t].data + in, n});
    offset += n;
    bytes -= n;
  }
}

uint64_t HashBlocks(const std::vector<Block>& blocks) {
  Xxh3Hasher h;
  for (const Block& b : blocks) h.Update(b.data, b.bytes);
  return h.Digest();
}

// An MPI type covering `blocks` at their absolute addresses (use with
// MPI_BOTTOM). Each block < 2 GiB (a window is).
StatusOr<MPI_Datatype> BlocksType(const std::vector<Block>& blocks) {
  std::vector<int> lengths;
  std::vector<MPI_Aint> displacements;
  for (const Block& b : blocks) {
    MPI_Aint a;
    MPI_Get_address(b.data, &a);
    lengths.push_back(static_cast<int>(b.bytes));
    displacements.push_back(a);
  }
  MPI_Datatype type;
  if (MPI_Type_create_hindexed(static_cast<int>(blocks.size()), lengths.data(), displacements.data(), MPI_BYTE,
                               &type) != MPI_SUCCESS ||
      MPI_Type_commit(&type) != MPI_SUCCESS) {
    return AbortedError("MPI_Type_create_hindexed failed");
  }
  return type;
}

// Waits for `requests` until all complete or `deadline_s`; `completed(i)`
// runs once per request as it completes. On the deadline the rest are
// cancelled (receives) or let go, and false is returned.
bool WaitAll(std::vector<MPI_Request>* requests, double deadline_s, const std::function<void(int)>& completed) {
  std::size_t left = requests->size();
  std::vector<int> indices(requests->size());
  Backoff backoff(50);
  while (left > 0) {
    int n = 0;
    if (MPI_Testsome(static_cast<int>(requests->size()), requests->data(), &n, indices.data(),
                     MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
      break;
    }
    if (n == MPI_UNDEFINED) break;
    for (int i = 0; i < n; ++i) completed(indices[i]);
    left -= static_cast<std::size_t>(n);
    if (n > 0) {
      backoff.Reset();
      continue;
    }
    if (MonotonicSeconds() > deadline_s) break;
    backoff.Pause();
  }
  if (left == 0) return true;
  for (MPI_Request& r : *requests) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Request_free(&r);
  }
  return false;
}

template <typename T>
bool WaitPod(MPI_Comm comm, int source, int tag, double deadline_s, T* msg,
             const std::function<bool(const T&)>& wanted) {
  Backoff backoff(100);
  while (true) {
    auto got = internal::TryRecvPod(comm, source, tag, msg);
    if (!got.ok()) return false;
    if (*got && msg->magic == kMagic && wanted(*msg)) return true;
    if (*got) continue;  // stale or foreign: next
    if (MonotonicSeconds() > deadline_s) return false;
    backoff.Pause();
  }
}

}  // namespace

bool GroupRanks::IsValid(int world_size, std::string* error) const {
  if (producers.empty() || consumers.empty()) {
    *error = "GroupRanks: producers and consumers must both be non-empty";
    return false;
  }
  std::set<int> seen;
  for (const auto* side : {&producers, &consumers}) {
    for (int r : *side) {
      if (r < 0 || r >= world_size) {
        *error = "GroupRanks: rank " + std::to_string(r) + " is not in [0, " + std::to_string(world_size) + ")";
        return false;
      }
      if (!seen.insert(r).second) {
        *error = "GroupRanks: rank " + std::to_string(r) + " appears twice";
        return false;
      }
    }
  }
  return true;
}

bool ShardedPublisher::Options::IsValid(std::string* error) const {
  if (!(peer_timeout_s > 0)) {
    *error = "ShardedPublisher::Options::peer_timeout_s must be > 0";
    return false;
  }
  if (!(decision_timeout_s > 0)) {
    *error = "ShardedPublisher::Options::decision_timeout_s must be > 0";
    return false;
  }
  return true;
}

bool ShardedSubscriber::Options::IsValid(std::string* error) const {
  if (!(peer_timeout_s > 0)) {
    *error = "ShardedSubscriber::Options::peer_timeout_s must be > 0";
    return false;
  }
  if (bucket_bytes >= (1ull << 31)) {
    *error = "ShardedSubscriber::Options::bucket_bytes must be < 2 GiB (one message per producer and bucket)";
    return false;
  }
  if (chunk_bytes == 0 || chunk_bytes >= (1ull << 31)) {
    *error = "ShardedSubscriber::Options::chunk_bytes must be in (0, 2 GiB)";
    return false;
  }
  return true;
}

std::string ShardedPublisher::Summary::BriefReport() const {
  if (!published) return "not published (rank 0 decided so)";
  std::string s = "version " + std::to_string(version) + ": sent " + std::to_string(sent_bytes) + " bytes" +
                  (sent ? "" : " (incomplete)") + ", shard checksum " + ChecksumToHex(shard_checksum);
  if (whole_checksum != 0 || committed) {
    s += committed ? ", committed by the consumers" : ", not committed";
    s += ", whole " + ChecksumToHex(whole_checksum);
  }
  s += ", " + Seconds(update_s) + " s";
  return message.empty() ? s : s + ": " + message;
}

std::string ShardedSubscriber::Summary::BriefReport() const {
  if (!received) return "no version" + (message.empty() ? std::string() : ": " + message);
  std::string s = "version " + std::to_string(version) + ": " + std::to_string(received_bytes) + " of " +
                  std::to_string(slice_bytes) + " slice bytes, " + (verified ? "verified" : "not verified") + ", " +
                  (committed ? "committed" : "not committed") + ", receive " + Seconds(receive_s) + " s, commit " +
                  Seconds(commit_s) + " s";
  if (pause_s > 0) s += ", paused " + Seconds(pause_s) + " s";
  return message.empty() ? s : s + ": " + message;
}

// ---- producer ---------------------------------------------------------------

class ShardedPublisher::Impl {
 public:
  Impl(GroupSetup g, Options o) : g_(std::move(g)), options_(o) {}

  StatusOr<Summary> Publish(const ModelState& shard, int64_t iteration, bool publish);

  GroupSetup g_;
  Options options_;
  uint64_t last_version_ = 0;
  uint64_t fault_version_ = 0;
  GroupFault fault_ = GroupFault::kNone;

 private:
  // Rank 0's decision, sent to the others; theirs, received.
  Status Decide(int64_t iteration, bool publish, DecideMsg* d);
};

Status ShardedPublisher::Impl::Decide(int64_t iteration, bool publish, DecideMsg* d) {
  const int P = g_.p_layout.ranks();
  if (g_.rank == 0) {
    d->version = publish ? last_version_ + 1 : last_version_;
    d->iteration = iteration;
    d->publish = publish ? 1 : 0;
    for (int r = 1; r < P; ++r) {
      // A producer rank that is gone misses the version; the others go on.
      (void)internal::SendPod(g_.all, g_.producers[r], kTagDecide, *d, options_.peer_timeout_s);
    }
    return Status::Ok();
  }
  const uint64_t last = last_version_;
  if (!WaitPod<DecideMsg>(g_.all, g_.producers[0], kTagDecide, MonotonicSeconds() + options_.decision_timeout_s,
                          d, [last](const DecideMsg& m) { return m.version >= last; })) {
    return AbortedError("producer rank " + std::to_string(g_.rank) + ": no decision from producer rank 0 within " +
                        Seconds(options_.decision_timeout_s) + " s");
  }
  return Status::Ok();
}

StatusOr<ShardedPublisher::Summary> ShardedPublisher::Impl::Publish(const ModelState& shard, int64_t iteration,
                                                                    bool publish) {
  const double t0 = MonotonicSeconds();
  const int Q = g_.q_layout.ranks();
  Summary sum;
  DecideMsg d;
  VIPER_RETURN_IF_ERROR(Decide(iteration, publish, &d));
  if (!d.publish) return sum;
  last_version_ = d.version;
  sum.published = true;
  sum.version = d.version;
  const Status valid = g_.p_layout.CheckShard(shard, g_.rank);
  const int tag = DataTag(d.version);

  // Digests and blocks of every piece, then the headers.
  std::vector<std::vector<uint64_t>> headers(Q);
  std::vector<std::vector<std::vector<Block>>> pieces(Q);
  if (valid.ok()) {
    Xxh3Hasher whole;
    for (const Tensor& t : shard.tensors()) whole.Update(t.data, t.size_bytes);
    sum.shard_checksum = whole.Digest();
  }
  for (int c = 0; c < Q; ++c) {
    const uint64_t W = g_.window_bytes;
    const uint64_t nwin = Windows(g_.q_layout.ShardBytes(c), W);
    headers[c] = {kMagic, d.version, static_cast<uint64_t>(d.iteration), sum.shard_checksum, valid.ok() ? 1u : 0u,
                  static_cast<uint64_t>(g_.rank), nwin};
    pieces[c].resize(nwin);
    for (uint64_t k = 0; k < nwin; ++k) {
      uint64_t digest = 0;
      if (valid.ok()) {
        for (const ByteCopy& b : Clip(g_.plan.Copies(g_.rank, c), k * W, (k + 1) * W)) {
          AppendBlocks(shard, g_.p_layout, g_.rank, b.src_offset, b.bytes, &pieces[c][k]);
        }
        if (!pieces[c][k].empty()) digest = HashBlocks(pieces[c][k]);
      }
      headers[c].push_back(digest);
    }
  }
  for (int c = 0; c < Q; ++c) {
    Status s = internal::SendBytesWithin(g_.all, g_.consumers[c], kTagHeader, headers[c].data(),
                                         headers[c].size() * sizeof(uint64_t), options_.peer_timeout_s);
    if (!s.ok()) sum.message = "consumer rank " + std::to_string(c) + ": " + s.message();
  }
  if (!valid.ok()) return valid;
  if (fault_version_ == d.version && fault_ == GroupFault::kExitAfterHeaders) _exit(0);
  if (fault_version_ == d.version && fault_ == GroupFault::kStopAfterHeaders) {
    sum.message = "fault injected: stopped after the headers";
    sum.update_s = MonotonicSeconds() - t0;
    return sum;
  }

  // Every piece to every consumer at once, straight from the tensors.
  std::vector<MPI_Request> requests;
  std::vector<uint64_t> request_bytes;
  for (int c = 0; c < Q; ++c) {
    for (const auto& blocks : pieces[c]) {
      if (blocks.empty()) continue;
      VIPER_ASSIGN_OR_RETURN(MPI_Datatype type, BlocksType(blocks));
      MPI_Request r;
      const int rc = MPI_Isend(MPI_BOTTOM, 1, type, g_.consumers[c], tag, g_.all, &r);
      MPI_Type_free(&type);
      if (rc != MPI_SUCCESS) return AbortedError("MPI_Isend to consumer rank " + std::to_string(c) + " failed");
      requests.push_back(r);
      uint64_t n = 0;
      for (const Block& b : blocks) n += b.bytes;
      request_bytes.push_back(n);
    }
  }
  sum.sent = WaitAll(&requests, MonotonicSeconds() + options_.peer_timeout_s,
                     [&](int i) { sum.sent_bytes += request_bytes[i]; });
  if (!sum.sent && sum.message.empty()) {
    sum.message = "not every consumer rank took its bytes within " + Seconds(options_.peer_timeout_s) + " s";
  }
  if (g_.rank == 0) {
    VoteMsg ack;
    const uint64_t v = d.version;
    // The consumers decide within two peer timeouts of their first header
    // (the bytes, then the votes).
    if (WaitPod<VoteMsg>(g_.all, g_.consumers[0], kTagAck, t0 + 3 * options_.peer_timeout_s, &ack,
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
  return std::unique_ptr<ShardedPublisher>(new ShardedPublisher(std::make_unique<Impl>(std::move(g), options)));
}

StatusOr<ShardedPublisher::Summary> ShardedPublisher::Publish(const ModelState& shard, int64_t iteration,
                                                              bool publish) {
  return impl_->Publish(shard, iteration, publish);
}
int ShardedPublisher::rank() const { return impl_->g_.rank; }
const TransferPlan& ShardedPublisher::plan() const { return impl_->g_.plan; }

// ---- consumer ---------------------------------------------------------------

class ShardedSubscriber::Impl {
 public:
  Impl(GroupSetup g, Options o, ModelState* target) : g_(std::move(g)), options_(o), target_(target) {}

  StatusOr<Summary> ReceiveNext(double wait_s);

  GroupSetup g_;
  Options options_;
  ModelState* target_;  // bounded mode
  uint64_t last_attempted_ = 0;
  uint64_t fault_version_ = 0;
  GroupFault fault_ = GroupFault::kNone;

  // Double buffer: the served version and the spare back buffer.
  mutable std::mutex mu_;
  std::shared_ptr<const ShardVersion> current_;
  std::shared_ptr<AlignedBuffer> spare_;
  // Bounded: the target, served under serve_mu_ while bounded_serving_.
  mutable std::shared_mutex serve_mu_;
  bool bounded_serving_ = false;
  ShardVersion bounded_;
  std::shared_ptr<AlignedBuffer> staging_;

 private:
  // All P headers of the next version (the first within wait_s, the rest
  // within the peer timeout). NotFound when none began.
  Status ReceiveHeaders(double wait_s, std::vector<std::vector<uint64_t>>* headers, double* first_s);
  // The consumer group's decision: every rank's vote to rank 0, its answer
  // back. Rank 0 also acknowledges to producer rank 0.
  bool Commit(uint64_t version, bool ok, uint64_t whole, double deadline_s);
  StatusOr<std::shared_ptr<AlignedBuffer>> BackBuffer(uint64_t bytes);
};

Status ShardedSubscriber::Impl::ReceiveHeaders(double wait_s, std::vector<std::vector<uint64_t>>* headers,
                                               double* first_s) {
  const int P = g_.p_layout.ranks();
  const uint64_t nwin = Windows(g_.q_layout.ShardBytes(g_.rank), g_.window_bytes);
  const std::size_t words = kHeaderFields + nwin;
  headers->assign(P, {});
  uint64_t target = 0;
  double deadline = MonotonicSeconds() + wait_s;
  bool begun = false;
  Backoff backoff(100);
  while (true) {
    bool progress = false;
    for (int p = 0; p < P; ++p) {
      auto& h = (*headers)[p];
      if (!h.empty() && h[1] == target) continue;
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(g_.producers[p], kTagHeader, g_.all, &flag, &st) != MPI_SUCCESS) {
        return AbortedError("MPI_Iprobe failed");
      }
      if (!flag) continue;
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      std::vector<uint64_t> msg((static_cast<std::size_t>(count) + 7) / 8);
      if (MPI_Recv(msg.data(), count, MPI_BYTE, g_.producers[p], kTagHeader, g_.all, MPI_STATUS_IGNORE) !=
          MPI_SUCCESS) {
        return AbortedError("MPI_Recv of a header from producer rank " + std::to_string(p) + " failed");
      }
      progress = true;
      if (static_cast<std::size_t>(count) != words * 8 || msg[0] != kMagic || msg[2 + 4] != nwin) {
        return DataLossError("header from producer rank " + std::to_string(p) + ": " + std::to_string(count) +
                             " bytes, expected " + std::to_string(words * 8) + " (" + std::to_string(nwin) +
                             " windows)");
      }
      if (msg[1] <= last_attempted_) continue;  // a version this rank already took part in
      h = std::move(msg);
      if (!begun) {
        begun = true;
        *first_s = MonotonicSeconds();
        deadline = *first_s + options_.peer_timeout_s;
      }
      target = std::max(target, h[1]);
    }
    int have = 0;
    for (const auto& h : *headers) have += (!h.empty() && h[1] == target) ? 1 : 0;
    if (begun && have == P) return Status::Ok();
    if (MonotonicSeconds() > deadline) break;
    if (!progress) backoff.Pause();
  }
  if (!begun) return NotFoundError("no version began within " + Seconds(wait_s) + " s");
  last_attempted_ = target;
  return AbortedError("version " + std::to_string(target) + ": not every producer rank's header came within " +
                      Seconds(options_.peer_timeout_s) + " s");
}

bool ShardedSubscriber::Impl::Commit(uint64_t version, bool ok, uint64_t whole, double deadline_s) {
  const int Q = g_.q_layout.ranks();
  VoteMsg vote;
  vote.version = version;
  vote.yes = ok ? 1 : 0;
  vote.whole_checksum = whole;
  if (g_.rank != 0) {
    if (!internal::SendPod(g_.all, g_.consumers[0], kTagVote, vote, options_.peer_timeout_s).ok()) return false;
    VoteMsg decision;
    return WaitPod<VoteMsg>(g_.all, g_.consumers[0], kTagCommit, deadline_s, &decision,
                            [version](const VoteMsg& m) { return m.version == version; }) &&
           decision.yes == 1;
  }
  bool yes = ok;
  for (int c = 1; c < Q && yes; ++c) {
    VoteMsg v;
    yes = WaitPod<VoteMsg>(g_.all, g_.consumers[c], kTagVote, deadline_s, &v,
                           [version](const VoteMsg& m) { return m.version == version; }) &&
          v.yes == 1 && v.whole_checksum == whole;
  }
  vote.yes = yes ? 1 : 0;
  for (int c = 1; c < Q; ++c) (void)internal::SendPod(g_.all, g_.consumers[c], kTagCommit, vote, options_.peer_timeout_s);
  (void)internal::SendPod(g_.all, g_.producers[0], kTagAck, vote, options_.peer_timeout_s);
  return yes;
}

StatusOr<std::shared_ptr<AlignedBuffer>> ShardedSubscriber::Impl::BackBuffer(uint64_t bytes) {
  if (spare_ && spare_.use_count() == 1 && spare_->capacity() >= bytes) return spare_;
  VIPER_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(std::max<uint64_t>(bytes, 1)));
  return std::make_shared<AlignedBuffer>(std::move(b));
}

StatusOr<ShardedSubscriber::Summary> ShardedSubscriber::Impl::ReceiveNext(double wait_s) {
  const int P = g_.p_layout.ranks();
  const int me = g_.rank;
  const uint64_t W = g_.window_bytes;
  const uint64_t shard_bytes = g_.q_layout.ShardBytes(me);
  const uint64_t nwin = Windows(shard_bytes, W);
  const bool bounded = target_ != nullptr;
  Summary sum;
  sum.slice_bytes = shard_bytes;
  std::vector<std::vector<uint64_t>> headers;
  double first_s = 0;
  Status hs = ReceiveHeaders(wait_s, &headers, &first_s);
  if (hs.code() == StatusCode::kNotFound) return hs;
  sum.received = true;
  uint64_t version = 0;
  for (const auto& h : headers) {
    if (!h.empty()) version = std::max(version, h[1]);
  }
  sum.version = version;
  last_attempted_ = std::max(last_attempted_, version);
  bool ok = hs.ok();
  if (!ok) sum.message = hs.message();
  uint64_t whole = 0;
  int64_t iteration = 0;
  if (ok) {
    Xxh3Hasher h;
    for (int p = 0; p < P; ++p) {
      if (headers[p][4] != 1) {
        ok = false;
        sum.message = "producer rank " + std::to_string(p) + " had no valid shard for version " + std::to_string(version);
      }
      h.Update(&headers[p][3], sizeof(uint64_t));
    }
    whole = h.Digest();
    iteration = static_cast<int64_t>(headers[0][2]);
  }
  if (fault_version_ == version && fault_ == GroupFault::kExitAfterHeaders) _exit(0);
  if (fault_version_ == version && fault_ == GroupFault::kStopAfterHeaders) {
    return AbortedError("fault injected: stopped after the headers of version " + std::to_string(version));
  }

  const double deadline = first_s + options_.peer_timeout_s;
  const int tag = DataTag(version);
  std::shared_ptr<AlignedBuffer> buffer;  // double buffer: the back buffer
  bool copied = false;                    // bounded: the target was written
  double pause_start = 0;
  std::unique_lock<std::shared_mutex> paused(serve_mu_, std::defer_lock);
  if (ok && !bounded) {
    auto b = BackBuffer(shard_bytes);
    if (!b.ok()) return b.status();
    buffer = *b;
    sum.staging_bytes = buffer->capacity();
  } else if (ok) {
    if (!staging_) {
      auto b = AlignedBuffer::Allocate(W);
      if (!b.ok()) return b.status();
      staging_ = std::make_shared<AlignedBuffer>(std::move(*b));
    }
    sum.staging_bytes = staging_->capacity();
  }
  // Receives window by window in bounded mode, all windows at once into the
  // back buffer otherwise.
  const uint64_t step = bounded ? 1 : std::max<uint64_t>(nwin, 1);
  for (uint64_t k0 = 0; ok && k0 < nwin; k0 += step) {
    const uint64_t k1 = std::min(nwin, k0 + step);
    std::vector<MPI_Request> requests;
    std::vector<std::vector<Block>> landing;
    std::vector<uint64_t> expected;
    for (uint64_t k = k0; k < k1; ++k) {
      for (int p = 0; p < P; ++p) {
        std::vector<Block> blocks;
        for (const ByteCopy& c : Clip(g_.plan.Copies(p, me), k * W, (k + 1) * W)) {
          blocks.push_back({bounded ? staging_->data() + (c.dst_offset - k * W) : buffer->data() + c.dst_offset,
                            c.bytes});
        }
        if (blocks.empty()) continue;
        VIPER_ASSIGN_OR_RETURN(MPI_Datatype type, BlocksType(blocks));
        MPI_Request r;
        const int rc = MPI_Irecv(MPI_BOTTOM, 1, type, g_.producers[p], tag, g_.all, &r);
        MPI_Type_free(&type);
        if (rc != MPI_SUCCESS) return AbortedError("MPI_Irecv from producer rank " + std::to_string(p) + " failed");
        requests.push_back(r);
        landing.push_back(std::move(blocks));
        expected.push_back(headers[p][kHeaderFields + k]);
      }
    }
    int bad = -1;
    const bool all = WaitAll(&requests, deadline, [&](int i) {
      uint64_t n = 0;
      for (const Block& b : landing[i]) n += b.bytes;
      sum.received_bytes += n;
      if (HashBlocks(landing[i]) != expected[i]) bad = i;
    });
    if (!all) {
      ok = false;
      sum.message = "version " + std::to_string(version) + ": not every producer rank's bytes came within " +
                    Seconds(options_.peer_timeout_s) + " s";
      // Receives that could not be cancelled may still land: that memory
      // is MPI's until MPI_Finalize.
      if (bounded) {
        internal::KeepUntilFinalize(staging_);
        staging_.reset();
      } else {
        internal::KeepUntilFinalize(buffer);
      }
      break;
    }
    if (bad >= 0) {
      ok = false;
      sum.message = "version " + std::to_string(version) + ": a piece does not match its producer's digest";
      break;
    }
    if (bounded) {  // verified: into the target, serving paused
      if (!copied) {
        paused.lock();
        pause_start = MonotonicSeconds();
        bounded_serving_ = false;
        copied = true;
      }
      const uint64_t lo = k0 * W, n = std::min(W, shard_bytes - lo);
      std::vector<Block> dst;
      AppendBlocks(*target_, g_.q_layout, me, lo, n, &dst);
      uint64_t off = 0;
      for (const Block& b : dst) {
        std::memcpy(b.data, staging_->data() + off, b.bytes);
        off += b.bytes;
      }
    }
  }
  sum.verified = ok;
  sum.receive_s = MonotonicSeconds() - first_s;
  const double c0 = MonotonicSeconds();
  // The decision waits at most one more peer timeout after the bytes'.
  sum.committed = Commit(version, ok, whole, deadline + options_.peer_timeout_s);
  sum.commit_s = MonotonicSeconds() - c0;
  if (bounded) {
    if (sum.committed) {
      bounded_.version = version;
      bounded_.iteration = iteration;
      bounded_.whole_checksum = whole;
      bounded_.state = *target_;
      bounded_.state.metadata.version = version;
      bounded_.state.metadata.iteration = iteration;
      if (!copied) paused.lock();  // an empty shard: nothing was copied
      bounded_serving_ = true;
    }
    if (copied) sum.pause_s = MonotonicSeconds() - pause_start;
    if (paused.owns_lock()) paused.unlock();
    std::shared_lock<std::shared_mutex> l(serve_mu_);
    sum.serving = bounded_serving_;
  } else {
    if (sum.committed) {
      auto v = std::make_shared<ShardVersion>();
      v->version = version;
      v->iteration = iteration;
      v->whole_checksum = whole;
      v->state.metadata.version = version;
      v->state.metadata.iteration = iteration;
      for (std::size_t t = 0; t < g_.q_layout.tensors().size(); ++t) {
        const TensorLayout& tl = g_.q_layout.tensors()[t];
        Tensor x;
        x.name = tl.name;
        x.dtype = tl.dtype;
        x.shape = g_.q_layout.LocalShape(t, me);
        x.owner = buffer;
        x.data = buffer->data() + g_.q_layout.LocalOffset(t, me);
        x.size_bytes = g_.q_layout.LocalBytes(t, me);
        VIPER_RETURN_IF_ERROR(v->state.Add(std::move(x)));
      }
      std::lock_guard<std::mutex> l(mu_);
      if (current_ && !current_->state.tensors().empty()) {
        spare_ = std::static_pointer_cast<AlignedBuffer>(current_->state.tensors()[0].owner);
      }
      current_ = std::move(v);
    } else if (buffer && buffer != spare_ && buffer.use_count() == 1) {
      spare_ = buffer;
    }
    std::lock_guard<std::mutex> l(mu_);
    sum.serving = current_ != nullptr;
  }
  if (!sum.committed && sum.message.empty()) {
    sum.message = ok ? "another consumer rank did not verify version " + std::to_string(version) : "not verified";
  }
  return sum;
}

ShardedSubscriber::ShardedSubscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardedSubscriber::~ShardedSubscriber() = default;

StatusOr<std::unique_ptr<ShardedSubscriber>> ShardedSubscriber::Create(const GroupRanks& ranks,
                                                                       const ShardLayout& layout,
                                                                       const Options& options, ModelState* target) {
  std::string error;
  if (!options.IsValid(&error)) return InvalidArgumentError(error);
  // Local checks that every consumer rank makes the same way (the options
  // are the same everywhere), so none leaves the collective setup alone.
  if ((options.bucket_bytes > 0) != (target != nullptr)) {
    return InvalidArgumentError(
        "ShardedSubscriber: bounded mode needs both bucket_bytes > 0 and a target (double buffer: neither)");
  }
  const uint64_t window = options.bucket_bytes > 0 ? options.bucket_bytes : options.chunk_bytes;
  VIPER_ASSIGN_OR_RETURN(GroupSetup g, MakeGroup(ranks, false, layout, window));
  if (target != nullptr) VIPER_RETURN_IF_ERROR(layout.CheckShard(*target, g.rank));
  return std::unique_ptr<ShardedSubscriber>(
      new ShardedSubscriber(std::make_unique<Impl>(std::move(g), options, target)));
}

StatusOr<ShardedSubscriber::Summary> ShardedSubscriber::ReceiveNext(double wait_s) {
  return impl_->ReceiveNext(wait_s);
}

bool ShardedSubscriber::Serve(const std::function<void(const ShardVersion&)>& fn) const {
  if (impl_->target_ == nullptr) {
    auto v = Current();
    if (!v) return false;
    fn(*v);
    return true;
  }
  std::shared_lock<std::shared_mutex> l(impl_->serve_mu_);
  if (!impl_->bounded_serving_) return false;
  fn(impl_->bounded_);
  return true;
}

std::shared_ptr<const ShardVersion> ShardedSubscriber::Current() const {
  if (impl_->target_ != nullptr) return nullptr;
  std::lock_guard<std::mutex> l(impl_->mu_);
  return impl_->current_;
}

uint64_t ShardedSubscriber::version() const {
  if (impl_->target_ != nullptr) {
    std::shared_lock<std::shared_mutex> l(impl_->serve_mu_);
    return impl_->bounded_serving_ ? impl_->bounded_.version : 0;
  }
  auto v = Current();
  return v ? v->version : 0;
}

int ShardedSubscriber::rank() const { return impl_->g_.rank; }
const TransferPlan& ShardedSubscriber::plan() const { return impl_->g_.plan; }

namespace internal {
void SetFault(ShardedPublisher* publisher, uint64_t version, GroupFault fault) {
  publisher->impl_for_testing()->fault_version_ = version;
  publisher->impl_for_testing()->fault_ = fault;
}
void SetFault(ShardedSubscriber* subscriber, uint64_t version, GroupFault fault) {
  subscriber->impl_for_testing()->fault_version_ = version;
  subscriber->impl_for_testing()->fault_ = fault;
}
}  // namespace internal

}  // namespace transports
}  // namespace viper
