// Sharded groups (group.h): what both halves share (group_internal.h). The
// option checks and the summaries are group_options.cc; the producer's half is
// group_publisher.cc, the consumer's group_subscriber.cc. Messages travel on
// a private communicator over the union of both groups
// (MPI_Comm_create_group, MPI_ERRORS_RETURN); every wait has a deadline.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <set>

#include "group_gpu.h"
#include "group_internal.h"
#include "viper/core/checksum.h"

namespace viper {
namespace transports {
namespace internal {

Status BcastText(MPI_Comm comm, int root, std::string* text) {
  uint64_t n = text->size();
  if (MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm) != MPI_SUCCESS) return AbortedError("MPI_Bcast failed");
  text->resize(n);
  if (n > 0 && MPI_Bcast(&(*text)[0], static_cast<int>(n), MPI_CHAR, root, comm) != MPI_SUCCESS) {
    return AbortedError("MPI_Bcast failed");
  }
  return Status::Ok();
}

Status Agree(const GroupSetup& g, bool producer, const Status& local) {
  int me = 0, worst = INT_MAX;
  MPI_Comm_rank(g.all, &me);
  int mine = local.ok() ? INT_MAX : me;
  if (MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MIN, g.all) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Allreduce failed");
  }
  if (worst == INT_MAX) return Status::Ok();
  std::string text = local.ok() ? std::string()
                                : std::string(producer ? "producer" : "consumer") + " rank " +
                                      std::to_string(g.rank) + ": " + local.message();
  int code = static_cast<int>(local.code());
  VIPER_RETURN_IF_ERROR(BcastText(g.all, worst, &text));
  if (MPI_Bcast(&code, 1, MPI_INT, worst, g.all) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Bcast failed");
  }
  return Status(static_cast<StatusCode>(code), text);
}

// Collective over both groups: the union communicator, both layouts (each
// group's rank 0 sends its own; every rank checks its layout is that one),
// the consumers' window size, the plan.
StatusOr<GroupSetup> MakeGroup(const GroupRanks& ranks, bool producer, const ShardLayout& mine,
                               uint64_t window_bytes) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return UnavailableError("sharded groups: MPI is not initialised (MpiSession::Init first)");
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
    return InvalidArgumentError("sharded groups: the layout has " + std::to_string(mine.ranks()) +
                                " ranks, the " + (producer ? "producer" : "consumer") + " group " +
                                std::to_string(side.size()));
  }
  std::vector<int> all(ranks.producers);
  all.insert(all.end(), ranks.consumers.begin(), ranks.consumers.end());
  std::sort(all.begin(), all.end());
  auto union_rank = [&](int w) {
    return static_cast<int>(std::lower_bound(all.begin(), all.end(), w) - all.begin());
  };
  GroupSetup g;
  g.rank = static_cast<int>(at - side.begin());
  for (int w : ranks.producers) g.producers.push_back(union_rank(w));
  for (int w : ranks.consumers) g.consumers.push_back(union_rank(w));
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, static_cast<int>(all.size()), all.data(), &group);
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, kGroupCreateTag, &g.all);
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

Status NodeCount(const GroupSetup& g, int* on_node, int* everyone) {
  MPI_Comm node;
  if (MPI_Comm_split_type(g.all, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Comm_split_type failed");
  }
  MPI_Comm_size(node, on_node);
  MPI_Comm_size(g.all, everyone);
  MPI_Comm_free(&node);
  return Status::Ok();
}

std::vector<Copy2D> BatchCopies(const std::vector<ByteCopy>& copies) {
  std::vector<Copy2D> out;
  for (const ByteCopy& c : copies) {
    if (!out.empty()) {
      Copy2D& b = out.back();
      const uint64_t last_src = b.src + (b.height - 1) * b.spitch,
                     last_dst = b.dst + (b.height - 1) * b.dpitch;
      const bool same = b.width == c.bytes && c.src_offset > last_src && c.dst_offset > last_dst;
      if (same && b.height == 1 && c.src_offset - b.src >= b.width && c.dst_offset - b.dst >= b.width) {
        b.spitch = c.src_offset - b.src;
        b.dpitch = c.dst_offset - b.dst;
        b.height = 2;
        continue;
      }
      if (same && b.height > 1 && c.src_offset - last_src == b.spitch &&
          c.dst_offset - last_dst == b.dpitch) {
        ++b.height;
        continue;
      }
    }
    out.push_back({c.src_offset, c.dst_offset, c.bytes, 1, c.bytes, c.bytes});
  }
  return out;
}

std::vector<Copy2D> BatchCopiesInto(const std::vector<ByteCopy>& copies, const ModelState& target,
                                    const ShardLayout& layout, int rank) {
  std::vector<Copy2D> out;
  std::vector<ByteCopy> run;  // consecutive pieces landing in tensor `in`, at absolute addresses
  std::size_t in = 0;
  auto flush = [&] {
    for (const Copy2D& c : BatchCopies(run)) out.push_back(c);
    run.clear();
  };
  std::size_t t = 0;
  for (const ByteCopy& c : copies) {
    uint64_t src = c.src_offset, dst = c.dst_offset, left = c.bytes;
    if (dst < layout.LocalOffset(t, rank)) t = 0;  // plan order is by destination; restart if not
    while (left > 0) {
      while (layout.LocalOffset(t, rank) + layout.LocalBytes(t, rank) <= dst) ++t;
      const uint64_t at = dst - layout.LocalOffset(t, rank);
      const uint64_t n = std::min(left, layout.LocalBytes(t, rank) - at);
      if (t != in && !run.empty()) flush();
      in = t;
      run.push_back({src, reinterpret_cast<uint64_t>(target.tensors()[t].data + at), n});
      src += n;
      dst += n;
      left -= n;
    }
  }
  flush();
  return out;
}

Status CheckGpuTarget(const ModelState& target, const ShardLayout& layout, int rank, int device) {
  VIPER_RETURN_IF_ERROR(layout.CheckShard(target, rank, /*device_allowed=*/true));
  for (const Tensor& t : target.tensors()) {
    if (t.size_bytes > 0 && t.memory != MemoryKind::kDevice) {
      return InvalidArgumentError(
          "bounded mode on the gpu link receives into device memory: target tensor '" + t.name +
          "' is in host memory (give tensors on gpu_device " + std::to_string(device) +
          ", or use another link)");
    }
  }
  return Status::Ok();
}

StatusOr<GroupLink> AgreeOnGpu(const GroupSetup& g, GroupLink link, const char* option) {
  int want[3] = {link == GroupLink::kMpi ? 1 : 0, link == GroupLink::kShm ? 1 : 0,
                 link == GroupLink::kGpu ? 1 : 0};
  int any[3] = {0, 0, 0};
  if (MPI_Allreduce(want, any, 3, MPI_INT, MPI_MAX, g.all) != MPI_SUCCESS) {
    return AbortedError("sharded groups: MPI_Allreduce failed");
  }
  if (!any[2]) return link;
  if (any[0] || any[1]) {
    return InvalidArgumentError(std::string("sharded groups: ") + option + ": gpu on some ranks and " +
                                (any[0] ? "mpi" : "shm") +
                                " on others (use one, or auto where another rank asks for gpu)");
  }
  return GroupLink::kGpu;
}

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

void AppendBlocks(const ModelState& shard, const ShardLayout& layout, int rank, uint64_t offset,
                  uint64_t bytes, std::vector<Block>* out) {
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
  if (MPI_Type_create_hindexed(static_cast<int>(blocks.size()), lengths.data(), displacements.data(),
                               MPI_BYTE, &type) != MPI_SUCCESS ||
      MPI_Type_commit(&type) != MPI_SUCCESS) {
    return AbortedError("MPI_Type_create_hindexed failed");
  }
  return type;
}

std::vector<std::vector<ByteCopy>> Messages(const std::vector<ByteCopy>& copies) {
  std::vector<std::vector<ByteCopy>> out, own;
  uint64_t in_last = 0;  // bytes in the last gathered message
  for (const ByteCopy& c : copies) {
    if (c.bytes >= kOwnMessageBytes) {
      own.push_back({c});
      continue;
    }
    ByteCopy rest = c;
    while (rest.bytes > 0) {
      if (out.empty() || in_last == kGatherMessageBytes) {
        out.emplace_back();
        in_last = 0;
      }
      const uint64_t n = std::min(rest.bytes, kGatherMessageBytes - in_last);
      out.back().push_back({rest.src_offset, rest.dst_offset, n});
      in_last += n;
      rest.src_offset += n;
      rest.dst_offset += n;
      rest.bytes -= n;
    }
  }
  out.insert(out.end(), own.begin(), own.end());
  return out;
}

std::vector<Block> Coalesce(const std::vector<Block>& blocks) {
  std::vector<Block> out;
  for (const Block& b : blocks) {
    if (b.bytes == 0) continue;
    if (!out.empty() && out.back().data + out.back().bytes == b.data) {
      out.back().bytes += b.bytes;
    } else {
      out.push_back(b);
    }
  }
  return out;
}

Status PostBlocks(bool send, const std::vector<Block>& blocks, int peer, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  int rc;
  if (blocks.size() == 1) {
    rc = send ? MPI_Isend(blocks[0].data, static_cast<int>(blocks[0].bytes), MPI_BYTE, peer, tag, comm,
                          request)
              : MPI_Irecv(blocks[0].data, static_cast<int>(blocks[0].bytes), MPI_BYTE, peer, tag, comm,
                          request);
  } else {
    VIPER_ASSIGN_OR_RETURN(MPI_Datatype type, BlocksType(blocks));
    rc = send ? MPI_Isend(MPI_BOTTOM, 1, type, peer, tag, comm, request)
              : MPI_Irecv(MPI_BOTTOM, 1, type, peer, tag, comm, request);
    MPI_Type_free(&type);
  }
  if (rc != MPI_SUCCESS) {
    return AbortedError(std::string(send ? "MPI_Isend to" : "MPI_Irecv from") + " rank " +
                        std::to_string(peer) + " failed");
  }
  return Status::Ok();
}

bool WaitAll(std::vector<MPI_Request>* requests, double deadline_s, const std::function<void(int)>& completed,
             const std::function<void()>& idle) {
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
    if (idle) idle();
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

}  // namespace internal

}  // namespace transports
}  // namespace viper
