// The sharded groups' shared-memory link (group_shm.h).
#include "group_shm.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "viper/core/checksum.h"
#include "viper/core/log.h"

namespace viper {
namespace transports {
namespace internal {

namespace {

constexpr int kNameBytes = 64;
// A producer copies (and hashes) this much at a time, then hashes each
// consumer's runs in it while they are in cache; a consumer hashes what it
// copied every this many bytes.
constexpr uint64_t kHotBytes = 128 << 10;

int IndexOf(const std::vector<int>& ranks, int r) {
  auto it = std::find(ranks.begin(), ranks.end(), r);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

// Calls fn with each copy of `copies` (sorted by source) from *cursor on,
// clipped to the source range [lo, hi); moves *cursor past the copies that
// end by `hi`.
template <typename F>
void ForEachInSource(const std::vector<ByteCopy>& copies, std::size_t* cursor, uint64_t lo, uint64_t hi,
                     F fn) {
  std::size_t k = *cursor;
  while (k < copies.size() && copies[k].src_offset < hi) {
    const ByteCopy& c = copies[k];
    const uint64_t a = std::max(lo, c.src_offset), e = std::min(hi, c.src_offset + c.bytes);
    if (a < e) fn(ByteCopy{a, c.dst_offset + (a - c.src_offset), e - a});
    if (c.src_offset + c.bytes > hi) break;
    *cursor = ++k;
  }
}

double Left(double deadline_s) { return std::max(0.05, deadline_s - MonotonicSeconds()); }

}  // namespace

void RunHasher::Add(const std::byte* data, uint64_t bytes) {
  if (bytes >= kDirectBytes) {
    Flush();
    hasher_.Update(data, bytes);
    return;
  }
  if (used_ + bytes > kGatherBytes) Flush();
  std::memcpy(gather_.data() + used_, data, bytes);
  used_ += bytes;
}

void RunHasher::Flush() {
  if (used_ > 0) hasher_.Update(gather_.data(), used_);
  used_ = 0;
}

uint64_t RunHasher::Digest() {
  Flush();
  return hasher_.Digest();
}

std::vector<ByteCopy> BySource(std::vector<ByteCopy> copies) {
  std::sort(copies.begin(), copies.end(),
            [](const ByteCopy& a, const ByteCopy& b) { return a.src_offset < b.src_offset; });
  return copies;
}

StatusOr<std::unique_ptr<ShmLink>> MakeShmLink(const GroupSetup& g, bool producer, GroupLink link,
                                               uint64_t bucket_bytes, int slots) {
  int want[2] = {link == GroupLink::kMpi ? 1 : 0, link == GroupLink::kShm ? 1 : 0}, any[2] = {0, 0};
  if (MPI_Allreduce(want, any, 2, MPI_INT, MPI_MAX, g.all) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Allreduce failed");
  }
  // One node: the shared-memory communicator is the whole union (the same
  // answer on every rank).
  MPI_Comm node;
  if (MPI_Comm_split_type(g.all, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Comm_split_type failed");
  }
  int on_node = 0, everyone = 0;
  MPI_Comm_size(node, &on_node);
  MPI_Comm_size(g.all, &everyone);
  MPI_Comm_free(&node);
  const bool one_node = on_node == everyone;
  if (any[0] && any[1]) {
    return InvalidArgumentError(
        "sharded groups: link mpi on some ranks and shm on others (use one, or auto)");
  }
  if (any[1] && !one_node) {
    return FailedPreconditionError("sharded groups: link shm needs every rank of both groups on one node; " +
                                   std::to_string(on_node) + " of " + std::to_string(everyone) +
                                   " are on this rank's");
  }
  if (any[0] || !one_node) return std::unique_ptr<ShmLink>();

  uint64_t params[2] = {bucket_bytes, static_cast<uint64_t>(slots)};
  if (MPI_Bcast(params, 2, MPI_UINT64_T, g.producers[0], g.all) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Bcast failed");
  }
  auto l = std::make_unique<ShmLink>();
  const int P = g.p_layout.ranks();
  uint64_t largest = 1;
  for (int p = 0; p < P; ++p) largest = std::max(largest, g.p_layout.ShardBytes(p));
  l->bucket_bytes = std::max<uint64_t>(1, std::min(params[0] > 0 ? params[0] : g.window_bytes, largest));
  l->slots = static_cast<int>(params[1]);
  const int Q = g.q_layout.ranks();
  l->consumers = Q;
  for (int p = 0; p < P; ++p) {
    const uint64_t nb = std::max<uint64_t>(1, Windows(g.p_layout.ShardBytes(p), l->bucket_bytes));
    l->buckets.push_back(nb);
    // Each piece's bytes (a copy cut at bucket boundaries), then offsets.
    std::vector<uint64_t> table(nb * (Q + 1), 0);
    for (int c = 0; c < Q; ++c) {
      for (const ByteCopy& x : g.plan.Copies(p, c)) {
        for (uint64_t a = x.src_offset, e = x.src_offset + x.bytes; a < e;) {
          const uint64_t b = a / l->bucket_bytes, n = std::min(e, (b + 1) * l->bucket_bytes) - a;
          table[b * (Q + 1) + c] += n;
          a += n;
        }
      }
    }
    uint64_t largest = 1;
    for (uint64_t b = 0; b < nb; ++b) {
      uint64_t at = 0;
      for (int c = 0; c <= Q; ++c) {
        const uint64_t n = table[b * (Q + 1) + c];
        table[b * (Q + 1) + c] = at;
        at += n;
      }
      largest = std::max(largest, at);
    }
    l->slot_bytes.push_back(largest);
    l->piece_offsets.push_back(std::move(table));
  }

  std::string error;
  char name[kNameBytes] = {0};
  if (producer) {
    static std::atomic<uint64_t> generation{0};
    (void)RemoveDeadSegments();  // segments of producers killed before their consumers mapped them
    // The pid in the name: RemoveDeadSegments' pattern.
    std::snprintf(name, sizeof(name), "/viper-%ld-grp%d-g%llu", static_cast<long>(::getpid()), g.rank,
                  static_cast<unsigned long long>(++generation));
    auto created = ShmSegment::Create(name, l->RingBytes(g.rank));
    if (created.ok()) {
      l->own = std::move(*created);
    } else {
      error = "producer rank " + std::to_string(g.rank) + ": " + created.status().message();
      name[0] = '\0';
    }
  }
  std::vector<char> names(static_cast<std::size_t>(kNameBytes) * everyone);
  if (MPI_Allgather(name, kNameBytes, MPI_CHAR, names.data(), kNameBytes, MPI_CHAR, g.all) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Allgather failed");
  }
  if (!producer) {
    for (int p = 0; p < P && error.empty(); ++p) {
      std::string ring(&names[static_cast<std::size_t>(kNameBytes) * g.producers[p]]);
      if (ring.empty()) {
        error = "producer rank " + std::to_string(p) + " has no ring";
        break;
      }
      auto opened = ShmSegment::Open(ring, l->RingBytes(p));
      if (!opened.ok()) {
        error = "consumer rank " + std::to_string(g.rank) + ": " + opened.status().message();
        break;
      }
      l->rings.push_back(std::move(*opened));
    }
  }
  int ok = error.empty() ? 1 : 0, all_ok = 0;
  if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, g.all) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Allreduce failed");
  }
  // Every consumer rank has mapped it (or none will use it): the name goes.
  if (l->own) l->own->Unlink();
  if (all_ok) return l;
  const std::string why = error.empty() ? "another rank could not make or map its ring" : error;
  if (any[1]) return UnavailableError("sharded groups: link shm: " + why);
  if (g.rank == 0)
    Log(LogLevel::kWarning, "transports", "sharded groups: no shm link (" + why + "); over MPI");
  return std::unique_ptr<ShmLink>();
}

ShmSent ShmSend(const GroupSetup& g, ShmLink* link, const ModelState& shard, uint64_t version,
                double timeout_s, const std::function<bool(uint64_t)>& announced) {
  ShmSent out;
  const int me = g.rank, Q = g.q_layout.ranks(), slots = link->slots;
  const uint64_t bytes = g.p_layout.ShardBytes(me), B = link->bucket_bytes, nb = link->buckets[me];
  const uint64_t slot_bytes = link->slot_bytes[me];
  std::vector<std::vector<ByteCopy>> copies(Q);
  std::vector<std::size_t> cursor(Q, 0);
  for (int c = 0; c < Q; ++c) copies[c] = BySource(g.plan.Copies(me, c));
  std::vector<uint64_t> released(Q, 0);  // per consumer rank: buckets [0, released) released
  const double deadline = MonotonicSeconds() + timeout_s;
  Backoff backoff(50);
  // Until every consumer rank has released buckets [0, need), or the deadline.
  auto wait_released = [&](uint64_t need) {
    while (true) {
      ReleaseMsg m;
      int from = -1;
      auto got = TryRecvPod(g.all, MPI_ANY_SOURCE, kGroupTagRelease, &m, &from);
      if (!got.ok()) return false;
      if (*got) {
        const int c = IndexOf(g.consumers, from);
        if (c >= 0 && m.magic == kMagic && m.version == version && m.bucket == released[c] && m.bucket < nb) {
          out.sent_bytes += link->PieceBytes(me, m.bucket, c);
          ++released[c];
        }
        backoff.Reset();
        continue;  // stale ones are dropped
      }
      if (std::all_of(released.begin(), released.end(), [need](uint64_t r) { return r >= need; }))
        return true;
      if (MonotonicSeconds() > deadline) return false;
      backoff.Pause();
    }
  };
  Xxh3Hasher whole;
  std::vector<Block> blocks;
  std::vector<uint64_t> written(Q);
  for (uint64_t b = 0; b < nb; ++b) {
    if (b >= static_cast<uint64_t>(slots) && !wait_released(b - slots + 1)) {
      out.message = "not every consumer rank released bucket " + std::to_string(b - slots) + " within " +
                    Seconds(timeout_s) + " s";
      return out;
    }
    const uint64_t lo = std::min(bytes, b * B), n = std::min(B, bytes - lo);
    std::byte* slot = link->own->payload() + (b % slots) * slot_bytes;
    blocks.clear();
    AppendBlocks(shard, g.p_layout, me, lo, n, &blocks);
    std::vector<std::unique_ptr<Xxh3Hasher>> pieces;
    for (int c = 0; c < Q; ++c) {
      pieces.push_back(std::make_unique<Xxh3Hasher>());
      written[c] = link->PieceOffset(me, b, c);
    }
    uint64_t at = lo;  // image offset of the chunk below
    for (const Block& blk : blocks) {
      for (uint64_t off = 0; off < blk.bytes; off += kHotBytes) {
        // A chunk of the image: hashed (the shard checksum), then each
        // consumer rank's runs in it appended to its piece and hashed
        // there, contiguous, while in cache.
        const uint64_t k = std::min(kHotBytes, blk.bytes - off);
        const std::byte* src = blk.data + off;
        whole.Update(src, k);
        for (int c = 0; c < Q; ++c) {
          const uint64_t start = written[c];
          ForEachInSource(copies[c], &cursor[c], at, at + k, [&](const ByteCopy& x) {
            std::memcpy(slot + written[c], src + (x.src_offset - at), x.bytes);
            written[c] += x.bytes;
          });
          if (written[c] > start) pieces[c]->Update(slot + start, written[c] - start);
        }
        at += k;
      }
    }
    std::atomic_thread_fence(std::memory_order_release);  // the slot before its Ready
    for (int c = 0; c < Q; ++c) {
      ReadyMsg r;
      r.version = version;
      r.bucket = b;
      r.digest = pieces[c]->Digest();
      r.shard_checksum = b + 1 == nb ? whole.Digest() : 0;
      Status s = SendPod(g.all, g.consumers[c], DataTag(version), r, Left(deadline));
      if (!s.ok() && out.message.empty())
        out.message = "consumer rank " + std::to_string(c) + ": " + s.message();
    }
    if (announced && !announced(b)) {
      out.message = "stopped after bucket " + std::to_string(b);
      return out;
    }
  }
  out.shard_checksum = whole.Digest();
  out.sent = wait_released(nb);
  if (!out.sent && out.message.empty()) {
    out.message = "not every consumer rank took its bytes within " + Seconds(timeout_s) + " s";
  }
  return out;
}

bool ShmReceive(const GroupSetup& g, const ShmLink& link, uint64_t version, double deadline_s,
                const std::function<void(uint64_t, uint64_t, std::vector<Block>*)>& dst,
                const std::function<void()>& first_copy, const std::function<void()>& idle,
                uint64_t* received_bytes, uint64_t* whole, std::string* message) {
  const int P = g.p_layout.ranks(), me = g.rank;
  const uint64_t B = link.bucket_bytes;
  std::vector<std::vector<ByteCopy>> copies(P);
  std::vector<std::size_t> cursor(P, 0);
  std::vector<uint64_t> next(P, 0), checksums(P, 0);
  uint64_t remaining = 0;
  for (int p = 0; p < P; ++p) {
    copies[p] = BySource(g.plan.Copies(p, me));
    remaining += link.buckets[p];
  }
  bool started = false;
  int bad = -1;
  Backoff backoff(50);
  std::vector<Block> to, pending;
  while (remaining > 0) {
    ReadyMsg m;
    int from = -1;
    auto got = TryRecvPod(g.all, MPI_ANY_SOURCE, DataTag(version), &m, &from);
    if (!got.ok()) {
      *message = got.status().message();
      return false;
    }
    if (!*got) {
      if (MonotonicSeconds() > deadline_s) {
        *message = "version " + std::to_string(version) + ": not every producer rank's buckets came in time";
        return false;
      }
      if (idle) idle();
      backoff.Pause();
      continue;
    }
    backoff.Reset();
    const int p = IndexOf(g.producers, from);
    if (p < 0 || m.magic != kMagic || m.version != version) continue;  // stale or foreign
    if (m.bucket != next[p]) {  // MPI keeps one sender's order: a broken producer
      *message = "producer rank " + std::to_string(p) + " announced bucket " + std::to_string(m.bucket) +
                 ", expected " + std::to_string(next[p]);
      return false;
    }
    std::atomic_thread_fence(std::memory_order_acquire);  // its Ready before the slot
    const uint64_t bytes = g.p_layout.ShardBytes(p), b = m.bucket;
    const uint64_t lo = std::min(bytes, b * B), hi = lo + std::min(B, bytes - lo);
    // This rank's piece: contiguous in the slot, in image order.
    const std::byte* piece_at =
        link.rings[p]->payload() + (b % link.slots) * link.slot_bytes[p] + link.PieceOffset(p, b, me);
    RunHasher piece;
    uint64_t pending_bytes = 0;
    auto hash_pending = [&] {
      for (const Block& k : Coalesce(pending)) piece.Add(k.data, k.bytes);
      pending.clear();
      pending_bytes = 0;
    };
    ForEachInSource(copies[p], &cursor[p], lo, hi, [&](const ByteCopy& x) {
      if (!started) {
        if (first_copy) first_copy();
        started = true;
      }
      to.clear();
      dst(x.dst_offset, x.bytes, &to);
      for (const Block& t : to) {
        std::memcpy(t.data, piece_at, t.bytes);
        piece_at += t.bytes;
        pending.push_back(t);
        pending_bytes += t.bytes;
      }
      *received_bytes += x.bytes;
      if (pending_bytes >= kHotBytes) hash_pending();
    });
    hash_pending();
    if (piece.Digest() != m.digest && bad < 0) bad = p;
    ReleaseMsg r;
    r.version = version;
    r.bucket = b;
    (void)SendPod(g.all, g.producers[p], kGroupTagRelease, r, Left(deadline_s));
    if (b + 1 == link.buckets[p]) checksums[p] = m.shard_checksum;
    ++next[p];
    --remaining;
  }
  if (bad >= 0) {
    *message = "version " + std::to_string(version) + ": a piece from producer rank " + std::to_string(bad) +
               " does not match its digest";
    return false;
  }
  Xxh3Hasher h;
  for (uint64_t c : checksums) h.Update(&c, sizeof(c));
  *whole = h.Digest();
  return true;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
