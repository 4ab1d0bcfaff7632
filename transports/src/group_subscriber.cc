// The consumer's half of the sharded groups (group.h, group_internal.h):
// receiving a version; the commit is group_commit.cc.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "group_subscriber_impl.h"
#include "group_testing.h"
#include "keep_until_finalize.h"
#include "viper/core/checksum.h"
#include "viper/transports/aligned_buffer.h"

namespace viper {
namespace transports {

using namespace internal;  // NOLINT: the protocol's constants and helpers

// ---- consumer ---------------------------------------------------------------


Status ShardedSubscriber::Impl::ReceiveHeaders(double wait_s, std::vector<std::vector<uint64_t>>* headers,
                                               double* first_s) {
  const int P = g_.p_layout.ranks();
  const uint64_t nwin = shm_ ? 0 : Windows(g_.q_layout.ShardBytes(g_.rank), g_.window_bytes);
  const std::size_t words = kHeaderFields + nwin;
  headers->assign(P, {});
  uint64_t target = 0;
  double deadline = MonotonicSeconds() + wait_s;
  bool begun = false;
  Backoff backoff(100);
  while (true) {
    bool progress = false;
    // Every header waiting from each producer rank: the newest is kept (a
    // rank that missed whole versions skips their stale headers).
    for (int p = 0; p < P; ++p) {
      auto& h = (*headers)[p];
      while (true) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(g_.producers[p], kGroupTagHeader, g_.all, &flag, &st) != MPI_SUCCESS) {
          return AbortedError("MPI_Iprobe failed");
        }
        if (!flag) break;
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        std::vector<uint64_t> msg((static_cast<std::size_t>(count) + 7) / 8);
        if (MPI_Recv(msg.data(), count, MPI_BYTE, g_.producers[p], kGroupTagHeader, g_.all,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS) {
          return AbortedError("MPI_Recv of a header from producer rank " + std::to_string(p) + " failed");
        }
        progress = true;
        if (static_cast<std::size_t>(count) != words * 8 || msg[0] != kMagic || msg[2 + 4] != nwin) {
          return DataLossError("header from producer rank " + std::to_string(p) + ": " +
                               std::to_string(count) + " bytes, expected " + std::to_string(words * 8) +
                               " (" + std::to_string(nwin) + " windows)");
        }
        if (msg[1] <= last_attempted_) continue;  // a version this rank already took part in
        h = std::move(msg);
        if (!begun) {
          begun = true;
          *first_s = MonotonicSeconds();
          deadline = *first_s + Timeout(h[1]);
        }
        target = std::max(target, h[1]);
      }
    }
    int have = 0;
    for (const auto& h : *headers) have += (!h.empty() && h[1] == target) ? 1 : 0;
    if (begun && have == P) return Status::Ok();
    if (MonotonicSeconds() > deadline) break;
    if (g_.rank == 0) AnswerQueries();
    if (!progress) backoff.Pause();
  }
  if (!begun) return NotFoundError("no version began within " + Seconds(wait_s) + " s");
  last_attempted_ = target;
  return AbortedError("version " + std::to_string(target) +
                      ": not every producer rank's header came within " + Seconds(Timeout(target)) + " s");
}


Status ShardedSubscriber::Impl::ReadHeaders(double wait_s, Incoming* in) {
  Status hs = ReceiveHeaders(wait_s, &in->headers, &in->first_s);
  if (hs.code() == StatusCode::kNotFound) return hs;
  for (const auto& h : in->headers) {
    if (!h.empty()) in->version = std::max(in->version, h[1]);
  }
  last_attempted_ = std::max(last_attempted_, in->version);
  if (!hs.ok()) return hs;
  Xxh3Hasher h;
  for (std::size_t p = 0; p < in->headers.size(); ++p) {
    h.Update(&in->headers[p][3], sizeof(uint64_t));
    if (in->headers[p][4] != 1) {
      return FailedPreconditionError("producer rank " + std::to_string(p) +
                                     " had no valid shard for version " + std::to_string(in->version));
    }
  }
  in->whole = h.Digest();
  in->iteration = static_cast<int64_t>(in->headers[0][2]);
  return Status::Ok();
}

bool ShardedSubscriber::Impl::ReceiveWindows(const Incoming& in, uint64_t k0, uint64_t k1, std::byte* base,
                                             Summary* sum) {
  const uint64_t W = g_.window_bytes;
  std::vector<MPI_Request> requests;
  std::vector<std::size_t> piece_of;        // request -> piece
  std::vector<std::vector<Block>> landing;  // piece -> where it lands
  std::vector<std::size_t> left;            // piece -> requests not complete
  std::vector<uint64_t> expected;           // piece -> its producer's digest
  for (uint64_t k = k0; k < k1 && sum->message.empty(); ++k) {
    for (int p = 0; p < g_.p_layout.ranks() && sum->message.empty(); ++p) {
      const std::vector<ByteCopy> copies = Clip(g_.plan.Copies(p, g_.rank), k * W, (k + 1) * W);
      if (copies.empty()) continue;
      std::vector<Block> blocks;
      for (const ByteCopy& c : copies) blocks.push_back({base + (c.dst_offset - k0 * W), c.bytes});
      // Straight into place: runs contiguous here (a column split's rows)
      // land as one block.
      const std::vector<std::vector<ByteCopy>> messages = Messages(copies);
      for (const auto& m : messages) {
        std::vector<Block> at;
        for (const ByteCopy& c : m) at.push_back({base + (c.dst_offset - k0 * W), c.bytes});
        MPI_Request r;
        Status s = PostBlocks(false, Coalesce(at), g_.producers[p], DataTag(in.version), g_.all, &r);
        if (!s.ok()) {
          sum->message = s.message();
          break;
        }
        requests.push_back(r);
        piece_of.push_back(landing.size());
      }
      left.push_back(messages.size());
      landing.push_back(Coalesce(blocks));  // hashed as fewer, longer blocks (the same digest)
      expected.push_back(in.headers[p][kHeaderFields + k]);
    }
  }
  int bad = -1;
  const bool all = WaitAll(
      &requests, in.first_s + Timeout(in.version),
      [&](int i) {
        const std::size_t piece = piece_of[i];
        if (--left[piece] > 0) return;
        for (const Block& b : landing[piece]) sum->received_bytes += b.bytes;
        if (HashBlocks(landing[piece]) != expected[piece]) bad = static_cast<int>(piece);
      },
      [this] {
        if (g_.rank == 0) AnswerQueries();
      });
  if (!all || !sum->message.empty()) {
    if (sum->message.empty()) {
      sum->message = "version " + std::to_string(in.version) +
                     ": not every producer rank's bytes came within " + Seconds(Timeout(in.version)) + " s";
    }
    return false;
  }
  if (bad >= 0) {
    sum->message = "version " + std::to_string(in.version) + ": a piece does not match its producer's digest";
    return false;
  }
  return true;
}

bool ShardedSubscriber::Impl::ReceiveDoubleBuffer(Incoming* incoming, Summary* sum,
                                                  std::shared_ptr<AlignedBuffer>* buffer) {
  const Incoming& in = *incoming;
  const uint64_t bytes = g_.q_layout.ShardBytes(g_.rank);
  if (spare_ && spare_.use_count() == 1 && spare_->capacity() >= bytes) {
    *buffer = spare_;
  } else {
    auto b = AlignedBuffer::Allocate(std::max<uint64_t>(bytes, 1));
    if (!b.ok()) {
      sum->message = b.status().message();
      return false;
    }
    *buffer = std::make_shared<AlignedBuffer>(std::move(*b));
  }
  sum->staging_bytes = (*buffer)->capacity();
  if (shm_) {  // nothing of MPI's lands in the buffer
    if (ReceiveShm(incoming, (*buffer)->data(), sum, nullptr, nullptr)) return true;
    buffer->reset();
    return false;
  }
  if (ReceiveWindows(in, 0, Windows(bytes, g_.window_bytes), (*buffer)->data(), sum)) return true;
  // Receives that could not be cancelled may still land: that memory is
  // MPI's until MPI_Finalize.
  internal::KeepUntilFinalize(*buffer);
  if (spare_ == *buffer) spare_.reset();
  buffer->reset();
  return false;
}

void ShardedSubscriber::Impl::InstallDoubleBuffer(const Incoming& in, std::shared_ptr<AlignedBuffer> buffer) {
  std::byte* data = buffer->data();
  InstallVersion(in, std::move(buffer), data, MemoryKind::kHost);
}

bool ShardedSubscriber::Impl::ReceiveGpu(const Incoming& in, Summary* sum, GpuLanded* landed) {
  if (!GpuReceive(g_, gpu_.get(), in.version, in.headers, in.first_s + Timeout(in.version), landed,
                  &sum->received_bytes, &sum->message)) {
    return false;
  }
  sum->staging_bytes = landed->capacity;
  return true;
}

bool ShardedSubscriber::Impl::ReceiveGpuBounded(const Incoming& in, Summary* sum,
                                                std::unique_lock<std::shared_mutex>* paused,
                                                double* pause_start) {
  sum->staging_bytes = 0;  // straight from the producers' staging buffers into the target
  auto first_copy = [&] {
    paused->lock();  // serving paused from the first byte written into the target
    *pause_start = MonotonicSeconds();
    bounded_serving_ = false;
  };
  return GpuReceiveInto(g_, gpu_.get(), in.version, in.headers, in.first_s + Timeout(in.version), first_copy,
                        &sum->received_bytes, &sum->message);
}

void ShardedSubscriber::Impl::InstallVersion(const Incoming& in, std::shared_ptr<void> owner, std::byte* data,
                                             MemoryKind memory) {
  auto v = std::make_shared<ShardVersion>();
  v->version = in.version;
  v->iteration = in.iteration;
  v->whole_checksum = in.whole;
  v->state.metadata.version = in.version;
  v->state.metadata.iteration = in.iteration;
  for (std::size_t t = 0; t < g_.q_layout.tensors().size(); ++t) {
    const TensorLayout& tl = g_.q_layout.tensors()[t];
    Tensor x;
    x.name = tl.name;
    x.dtype = tl.dtype;
    x.shape = g_.q_layout.LocalShape(t, g_.rank);
    x.memory = memory;
    x.owner = owner;
    x.data = data + g_.q_layout.LocalOffset(t, g_.rank);
    x.size_bytes = g_.q_layout.LocalBytes(t, g_.rank);
    (void)v->state.Add(std::move(x));  // the layout's names are unique (ShardLayout::Make)
  }
  std::lock_guard<std::mutex> l(mu_);
  // (A device buffer goes back to the gpu link's pool once nobody holds it.)
  if (current_ && !current_->state.tensors().empty() &&
      current_->state.tensors()[0].memory == MemoryKind::kHost) {
    spare_ = std::static_pointer_cast<AlignedBuffer>(current_->state.tensors()[0].owner);
  }
  current_ = std::move(v);
}

bool ShardedSubscriber::Impl::ReceiveShm(Incoming* in, std::byte* base, Summary* sum,
                                         std::unique_lock<std::shared_mutex>* paused, double* pause_start) {
  auto dst = [&](uint64_t offset, uint64_t bytes, std::vector<Block>* out) {
    if (base != nullptr) {
      out->push_back({base + offset, bytes});
    } else {
      AppendBlocks(*target_, g_.q_layout, g_.rank, offset, bytes, out);
    }
  };
  auto first_copy = [&] {
    if (paused == nullptr || paused->owns_lock()) return;
    paused->lock();  // bounded: serving paused from the first byte written into the target
    *pause_start = MonotonicSeconds();
    bounded_serving_ = false;
  };
  return ShmReceive(
      g_, *shm_, in->version, in->first_s + Timeout(in->version), dst, first_copy,
      [this] {
        if (g_.rank == 0) AnswerQueries();
      },
      &sum->received_bytes, &in->whole, &sum->message);
}

bool ShardedSubscriber::Impl::ReceiveBounded(Incoming* incoming, Summary* sum,
                                             std::unique_lock<std::shared_mutex>* paused,
                                             double* pause_start) {
  if (shm_) return ReceiveShm(incoming, nullptr, sum, paused, pause_start);
  const Incoming& in = *incoming;
  const uint64_t W = g_.window_bytes;
  const uint64_t bytes = g_.q_layout.ShardBytes(g_.rank);
  if (!staging_) {
    auto b = AlignedBuffer::Allocate(W);
    if (!b.ok()) {
      sum->message = b.status().message();
      return false;
    }
    staging_ = std::make_shared<AlignedBuffer>(std::move(*b));
  }
  sum->staging_bytes = staging_->capacity();
  for (uint64_t k = 0; k < Windows(bytes, W); ++k) {
    if (!ReceiveWindows(in, k, k + 1, staging_->data(), sum)) {
      internal::KeepUntilFinalize(staging_);  // as in ReceiveDoubleBuffer
      staging_.reset();
      return false;
    }
    if (!paused->owns_lock()) {  // verified: into the target, serving paused from here
      paused->lock();
      *pause_start = MonotonicSeconds();
      bounded_serving_ = false;
    }
    std::vector<Block> dst;
    AppendBlocks(*target_, g_.q_layout, g_.rank, k * W, std::min(W, bytes - k * W), &dst);
    uint64_t off = 0;
    for (const Block& b : dst) {
      std::memcpy(b.data, staging_->data() + off, b.bytes);
      off += b.bytes;
    }
  }
  return true;
}

StatusOr<ShardedSubscriber::Summary> ShardedSubscriber::Impl::ReceiveNext(double wait_s) {
  Summary sum;
  sum.slice_bytes = g_.q_layout.ShardBytes(g_.rank);
  if (doubt_version_ != 0) Resolve(std::min(wait_s, Timeout(doubt_version_)), &sum);
  Incoming in;
  const Status hs = ReadHeaders(wait_s, &in);
  if (hs.code() == StatusCode::kNotFound) return hs;
  sum.received = true;
  sum.version = in.version;
  if (fault_version_ == in.version && fault_ == GroupFault::kExitAfterHeaders) _exit(0);
  if (fault_version_ == in.version && fault_ == GroupFault::kStopAfterHeaders) {
    return AbortedError("fault injected: stopped after the headers of version " + std::to_string(in.version));
  }
  if (!hs.ok()) sum.message = hs.message();
  std::shared_ptr<AlignedBuffer> buffer;  // double buffer
  std::unique_lock<std::shared_mutex> paused(serve_mu_,
                                             std::defer_lock);  // bounded: held from the first copy
  double pause_start = 0;
  const bool bounded = target_ != nullptr;
  GpuLanded landed;  // gpu link
  sum.verified = hs.ok() && (gpu_ && bounded ? ReceiveGpuBounded(in, &sum, &paused, &pause_start)
                             : gpu_          ? ReceiveGpu(in, &sum, &landed)
                             : bounded       ? ReceiveBounded(&in, &sum, &paused, &pause_start)
                                             : ReceiveDoubleBuffer(&in, &sum, &buffer));
  sum.receive_s = MonotonicSeconds() - in.first_s;
  const double c0 = MonotonicSeconds();
  // The decision waits at most one more peer timeout after the bytes'.
  const Outcome outcome = Commit(in.version, sum.verified, in.whole, in.first_s + 2 * Timeout(in.version));
  sum.committed = outcome == Outcome::kCommitted;
  sum.in_doubt = outcome == Outcome::kInDoubt;
  sum.commit_s = MonotonicSeconds() - c0;
  // An earlier doubt ends when this version commits (it replaces that
  // one), when this version is in doubt too (only the newest is kept), or
  // (bounded) when this version was copied into the target.
  if (doubt_version_ != 0 && (outcome != Outcome::kAborted || (bounded && paused.owns_lock()))) {
    doubt_version_ = 0;
    doubt_buffer_.reset();
    doubt_device_ = {};
    std::lock_guard<std::mutex> l(mu_);
    withheld_ = false;
  }
  if (sum.in_doubt) {
    EnterDoubt(in, buffer);
    doubt_device_ = landed;
  }
  if (bounded) {
    const bool copied = paused.owns_lock();
    if (sum.committed) {
      if (!copied) paused.lock();  // an empty shard: nothing was copied
      bounded_.version = in.version;
      bounded_.iteration = in.iteration;
      bounded_.whole_checksum = in.whole;
      bounded_.state = *target_;
      bounded_.state.metadata.version = in.version;
      bounded_.state.metadata.iteration = in.iteration;
      bounded_serving_ = true;  // else, once copied into, the target is torn: nothing is served
    }
    if (copied) sum.pause_s = MonotonicSeconds() - pause_start;
    sum.serving = bounded_serving_;
    if (paused.owns_lock()) paused.unlock();
  } else {
    if (sum.committed && gpu_) {
      InstallVersion(in, landed.owner, landed.data, MemoryKind::kDevice);
    } else if (sum.committed) {
      InstallDoubleBuffer(in, buffer);
    } else if (buffer && buffer != spare_ && buffer.use_count() == 1) {
      spare_ = buffer;
    }
    std::lock_guard<std::mutex> l(mu_);
    sum.serving = current_ != nullptr && !withheld_;
  }
  if (sum.in_doubt && sum.message.empty()) {
    sum.message = "voted yes for version " + std::to_string(in.version) +
                  " and heard no decision: serving nothing until it is known";
  }
  if (!sum.committed && sum.message.empty()) {
    sum.message = sum.verified ? "another consumer rank did not verify version " + std::to_string(in.version)
                               : "not verified";
  }
  return sum;
}

ShardedSubscriber::ShardedSubscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardedSubscriber::~ShardedSubscriber() = default;

StatusOr<std::unique_ptr<ShardedSubscriber>> ShardedSubscriber::Create(const GroupRanks& ranks,
                                                                       const ShardLayout& layout,
                                                                       const Options& options,
                                                                       ModelState* target) {
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
  const char* option = "ShardedSubscriber::Options::link";
  VIPER_ASSIGN_OR_RETURN(const GroupLink link, AgreeOnGpu(g, options.link, option));
  std::unique_ptr<ShmLink> shm;
  GpuLinkPtr gpu;
  if (link == GroupLink::kGpu) {
    // Bounded mode: the target must be this rank's shard in device memory
    // (a host target, e.g. chosen with link auto while another rank asks
    // for gpu, fails every rank together, naming the tensor).
    const Status precheck =
        target == nullptr ? Status::Ok() : CheckGpuTarget(*target, layout, g.rank, options.gpu_device);
    VIPER_ASSIGN_OR_RETURN(gpu, MakeGpuLink(g, false, options.gpu_device, target, precheck, option));
  } else {
    VIPER_ASSIGN_OR_RETURN(shm, MakeShmLink(g, false, link, 0, 0));
    // A bounded target that is not this rank's shard fails every rank of
    // both groups together, naming it (the producers would otherwise find
    // out only by a timeout at their first version).
    const Status target_ok = target == nullptr ? Status::Ok() : layout.CheckShard(*target, g.rank);
    VIPER_RETURN_IF_ERROR(Agree(g, false, target_ok).WithContext("ShardedSubscriber: the bounded target"));
  }
  return std::unique_ptr<ShardedSubscriber>(new ShardedSubscriber(
      std::make_unique<Impl>(std::move(g), options, target, std::move(shm), std::move(gpu))));
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
  return impl_->withheld_ ? nullptr : impl_->current_;
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
GroupLink ShardedSubscriber::link() const {
  return impl_->gpu_ ? GroupLink::kGpu : impl_->shm_ ? GroupLink::kShm : GroupLink::kMpi;
}
const TransferPlan& ShardedSubscriber::plan() const { return impl_->g_.plan; }

namespace internal {
void SetFault(ShardedSubscriber* subscriber, uint64_t version, GroupFault fault) {
  subscriber->impl_for_testing()->fault_version_ = version;
  subscriber->impl_for_testing()->fault_ = fault;
}
void SetFaultTimeout(ShardedSubscriber* subscriber, uint64_t first, uint64_t last, double seconds) {
  subscriber->impl_for_testing()->fault_timeout_ = {first, last, seconds};
}
}  // namespace internal

}  // namespace transports
}  // namespace viper
