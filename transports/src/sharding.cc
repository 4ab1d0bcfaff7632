#include "viper/transports/sharding.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

namespace viper {
namespace transports {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t Product(const std::vector<int64_t>& v, std::size_t from = 0) {
  int64_t p = 1;
  for (std::size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

// Start of rank `rank`'s slice along the split dimension (0 if replicated).
int64_t SliceStart(const TensorLayout& t, int ranks, int rank) {
  return t.split_dim < 0 ? 0 : t.shape[t.split_dim] / ranks * rank;
}

std::vector<int64_t> SliceShape(const TensorLayout& t, int ranks) {
  std::vector<int64_t> s = t.shape;
  if (t.split_dim >= 0) s[t.split_dim] /= ranks;
  return s;
}

// One side of a box copy: the slice of a tensor an image holds (its global
// start on each dimension and its local shape) and where it starts in the
// image.
struct Side {
  std::vector<int64_t> start;
  std::vector<int64_t> shape;
  uint64_t base = 0;
};

Side MakeSide(const TensorLayout& t, int ranks, int rank, uint64_t base) {
  Side s;
  s.start.assign(t.shape.size(), 0);
  if (t.split_dim >= 0) s.start[t.split_dim] = SliceStart(t, ranks, rank);
  s.shape = SliceShape(t, ranks);
  s.base = base;
  return s;
}

// Appends the copies of the global box [lo, hi) of a tensor with global
// shape `shape` and `elem`-byte elements from image `a` to image `b`, one
// per row-major run contiguous in both (runs end at the last dimension on
// which the box is narrower than the tensor; the dimensions after it are
// whole in both images).
void BoxCopies(const std::vector<int64_t>& shape, uint64_t elem, const std::vector<int64_t>& lo,
               const std::vector<int64_t>& hi, const Side& a, const Side& b, std::vector<ByteCopy>* out) {
  const std::size_t dims = shape.size();
  for (std::size_t d = 0; d < dims; ++d) {
    if (hi[d] <= lo[d]) return;
  }
  int k = -1;  // last dimension where the box is narrower than the tensor
  for (std::size_t d = 0; d < dims; ++d) {
    if (hi[d] - lo[d] != shape[d]) k = static_cast<int>(d);
  }
  if (k < 0) {  // the whole tensor: both images hold it whole
    out->push_back({a.base, b.base, static_cast<uint64_t>(Product(shape)) * elem});
    return;
  }
  const uint64_t run = static_cast<uint64_t>((hi[k] - lo[k]) * Product(shape, k + 1)) * elem;
  std::vector<int64_t> a_stride(dims), b_stride(dims);
  for (std::size_t d = 0; d < dims; ++d) {
    a_stride[d] = Product(a.shape, d + 1);
    b_stride[d] = Product(b.shape, d + 1);
  }
  std::vector<int64_t> idx(lo.begin(), lo.begin() + k + 1);  // odometer over dims < k; idx[k] = lo[k]
  while (true) {
    int64_t ae = 0, be = 0;
    for (int d = 0; d <= k; ++d) {
      ae += (idx[d] - a.start[d]) * a_stride[d];
      be += (idx[d] - b.start[d]) * b_stride[d];
    }
    const uint64_t src = a.base + static_cast<uint64_t>(ae) * elem;
    const uint64_t dst = b.base + static_cast<uint64_t>(be) * elem;
    if (!out->empty() && out->back().src_offset + out->back().bytes == src &&
        out->back().dst_offset + out->back().bytes == dst) {
      out->back().bytes += run;
    } else {
      out->push_back({src, dst, run});
    }
    int d = k - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
    }
    if (d < 0) return;
  }
}

// Sorts by destination and merges runs contiguous in both images.
void SortAndMerge(std::vector<ByteCopy>* copies) {
  std::sort(copies->begin(), copies->end(),
            [](const ByteCopy& x, const ByteCopy& y) { return x.dst_offset < y.dst_offset; });
  std::vector<ByteCopy> merged;
  for (const ByteCopy& c : *copies) {
    if (c.bytes == 0) continue;
    if (!merged.empty() && merged.back().src_offset + merged.back().bytes == c.src_offset &&
        merged.back().dst_offset + merged.back().bytes == c.dst_offset) {
      merged.back().bytes += c.bytes;
    } else {
      merged.push_back(c);
    }
  }
  *copies = std::move(merged);
}

}  // namespace

StatusOr<ShardLayout> ShardLayout::Make(int ranks, std::vector<TensorLayout> tensors) {
  if (ranks < 1)
    return InvalidArgumentError("shard layout: ranks is " + std::to_string(ranks) + ", must be >= 1");
  std::set<std::string> names;
  for (const TensorLayout& t : tensors) {
    if (t.name.empty()) return InvalidArgumentError("shard layout: a tensor has an empty name");
    if (!names.insert(t.name).second)
      return InvalidArgumentError("shard layout: tensor '" + t.name + "' appears twice");
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 0) {
        return InvalidArgumentError("shard layout: tensor '" + t.name + "' has dimension " +
                                    std::to_string(d) + " of size " + std::to_string(t.shape[d]));
      }
    }
    if (t.split_dim < -1 || t.split_dim >= static_cast<int>(t.shape.size())) {
      return InvalidArgumentError("shard layout: tensor '" + t.name + "' of shape " + ShapeString(t.shape) +
                                  " cannot be split along dimension " + std::to_string(t.split_dim) +
                                  " (it has " + std::to_string(t.shape.size()) + "; -1 = replicated)");
    }
    if (t.split_dim >= 0 && t.shape[t.split_dim] % ranks != 0) {
      return InvalidArgumentError("shard layout: tensor '" + t.name + "' of shape " + ShapeString(t.shape) +
                                  ": dimension " + std::to_string(t.split_dim) + " (size " +
                                  std::to_string(t.shape[t.split_dim]) + ") does not split evenly across " +
                                  std::to_string(ranks) + " ranks");
    }
  }
  ShardLayout l;
  l.ranks_ = ranks;
  l.tensors_ = std::move(tensors);
  l.offsets_.assign(ranks, {});
  for (int r = 0; r < ranks; ++r) {
    uint64_t off = 0;
    for (std::size_t t = 0; t < l.tensors_.size(); ++t) {
      l.offsets_[r].push_back(off);
      off += l.LocalBytes(t, r);
    }
    l.offsets_[r].push_back(off);
  }
  return l;
}

StatusOr<ShardLayout> ShardLayout::SplitAll(int ranks, const ModelState& whole, int split_dim) {
  std::vector<TensorLayout> tensors;
  for (const Tensor& t : whole.tensors()) {
    TensorLayout tl{t.name, t.dtype, t.shape, -1};
    if (split_dim >= 0 && split_dim < static_cast<int>(t.shape.size()) && ranks > 0 &&
        t.shape[split_dim] % ranks == 0) {
      tl.split_dim = split_dim;
    }
    tensors.push_back(std::move(tl));
  }
  return Make(ranks, std::move(tensors));
}

std::vector<int64_t> ShardLayout::LocalShape(std::size_t t, int rank) const {
  (void)rank;  // even splits: every rank's slice has the same shape
  return SliceShape(tensors_[t], ranks_);
}

uint64_t ShardLayout::LocalBytes(std::size_t t, int rank) const {
  return static_cast<uint64_t>(Product(LocalShape(t, rank))) * DTypeSize(tensors_[t].dtype);
}

uint64_t ShardLayout::LocalOffset(std::size_t t, int rank) const { return offsets_[rank][t]; }
uint64_t ShardLayout::ShardBytes(int rank) const { return offsets_[rank].back(); }

uint64_t ShardLayout::ModelBytes() const {
  uint64_t b = 0;
  for (const TensorLayout& t : tensors_) b += static_cast<uint64_t>(Product(t.shape)) * DTypeSize(t.dtype);
  return b;
}

Status ShardLayout::CheckShard(const ModelState& shard, int rank, bool device_allowed) const {
  if (rank < 0 || rank >= ranks_) {
    return InvalidArgumentError("shard of rank " + std::to_string(rank) + ": the layout has " +
                                std::to_string(ranks_) + " ranks");
  }
  const std::string who = "shard of rank " + std::to_string(rank) + " of " + std::to_string(ranks_);
  if (shard.size() != tensors_.size()) {
    return InvalidArgumentError(who + ": " + std::to_string(shard.size()) + " tensors, the layout has " +
                                std::to_string(tensors_.size()));
  }
  for (std::size_t t = 0; t < tensors_.size(); ++t) {
    const TensorLayout& l = tensors_[t];
    const Tensor& x = shard.tensors()[t];
    if (x.name != l.name) {
      return InvalidArgumentError(who + ": tensor " + std::to_string(t) + " is '" + x.name +
                                  "', the layout has '" + l.name + "'");
    }
    if (x.dtype != l.dtype) {
      return InvalidArgumentError(who + ": tensor '" + l.name + "' is " + ToString(x.dtype) +
                                  ", the layout says " + ToString(l.dtype));
    }
    const std::vector<int64_t> want = LocalShape(t, rank);
    if (x.shape != want) {
      std::string why = l.split_dim < 0
                            ? " (replicated)"
                            : " (dimension " + std::to_string(l.split_dim) + " of " + ShapeString(l.shape) +
                                  " split across " + std::to_string(ranks_) + " ranks)";
      return InvalidArgumentError(who + ": tensor '" + l.name + "' has shape " + ShapeString(x.shape) +
                                  ", the layout says " + ShapeString(want) + why);
    }
    if (x.memory != MemoryKind::kHost && !device_allowed) {
      return InvalidArgumentError(who + ": tensor '" + l.name +
                                  "' is in device memory (the host tier needs host memory)");
    }
    if (x.size_bytes != LocalBytes(t, rank) || (x.data == nullptr && x.size_bytes > 0)) {
      return InvalidArgumentError(who + ": tensor '" + l.name + "' holds " + std::to_string(x.size_bytes) +
                                  " bytes, its shape needs " + std::to_string(LocalBytes(t, rank)));
    }
  }
  return Status::Ok();
}

StatusOr<ModelState> ShardLayout::Slice(const ModelState& whole, int rank) const {
  if (rank < 0 || rank >= ranks_)
    return InvalidArgumentError("Slice: rank " + std::to_string(rank) + " out of range");
  ModelState out;
  out.metadata = whole.metadata;
  for (std::size_t t = 0; t < tensors_.size(); ++t) {
    const TensorLayout& l = tensors_[t];
    const Tensor* src = whole.Find(l.name);
    if (src == nullptr) return InvalidArgumentError("Slice: the model has no tensor '" + l.name + "'");
    if (src->shape != l.shape || src->dtype != l.dtype || src->size_bytes != src->ExpectedBytes()) {
      return InvalidArgumentError("Slice: tensor '" + l.name + "' is " + ToString(src->dtype) +
                                  ShapeString(src->shape) + ", the layout says " + ToString(l.dtype) +
                                  ShapeString(l.shape));
    }
    Tensor dst = Tensor::Allocate(l.name, l.dtype, LocalShape(t, rank));
    Side a{std::vector<int64_t>(l.shape.size(), 0), l.shape, 0};
    Side b = MakeSide(l, ranks_, rank, 0);
    std::vector<int64_t> hi(l.shape);
    for (std::size_t d = 0; d < l.shape.size(); ++d) hi[d] = b.start[d] + b.shape[d];
    std::vector<ByteCopy> copies;
    BoxCopies(l.shape, DTypeSize(l.dtype), b.start, hi, a, b, &copies);
    for (const ByteCopy& c : copies) std::memcpy(dst.data + c.dst_offset, src->data + c.src_offset, c.bytes);
    VIPER_RETURN_IF_ERROR(out.Add(std::move(dst)));
  }
  return out;
}

std::string ShardLayout::Serialize() const {
  std::ostringstream os;
  os << "ranks " << ranks_ << "\n";
  for (const TensorLayout& t : tensors_) {
    os << t.name << " " << ToString(t.dtype) << " " << t.split_dim << " ";
    for (std::size_t d = 0; d < t.shape.size(); ++d) os << (d ? "," : "") << t.shape[d];
    if (t.shape.empty()) os << "-";
    os << "\n";
  }
  return os.str();
}

StatusOr<ShardLayout> ShardLayout::Parse(const std::string& text) {
  std::istringstream is(text);
  std::string line;
  int ranks = 0;
  std::vector<TensorLayout> tensors;
  int n = 0;
  while (std::getline(is, line)) {
    ++n;
    std::istringstream ls(line);
    const std::string where = "shard layout, line " + std::to_string(n) + " ('" + line.substr(0, 80) + "'): ";
    if (n == 1) {
      std::string word;
      if (!(ls >> word >> ranks) || word != "ranks")
        return InvalidArgumentError(where + "expected 'ranks <count>'");
      continue;
    }
    TensorLayout t;
    std::string dtype, dims;
    if (!(ls >> t.name >> dtype >> t.split_dim >> dims)) {
      return InvalidArgumentError(where + "expected '<name> <dtype> <split_dim> <d0,d1,...>'");
    }
    auto dt = DTypeFromString(dtype);
    if (!dt) return InvalidArgumentError(where + "unknown dtype '" + dtype + "'");
    t.dtype = *dt;
    if (dims != "-") {
      std::istringstream ds(dims);
      std::string d;
      while (std::getline(ds, d, ',')) {
        char* end = nullptr;
        const long long v = std::strtoll(d.c_str(), &end, 10);
        if (d.empty() || *end != '\0') return InvalidArgumentError(where + "bad dimension '" + d + "'");
        t.shape.push_back(v);
      }
    }
    tensors.push_back(std::move(t));
  }
  if (n == 0) return InvalidArgumentError("shard layout: empty text");
  return Make(ranks, std::move(tensors));
}

StatusOr<TransferPlan> TransferPlan::Make(const ShardLayout& p, const ShardLayout& q) {
  const auto& pt = p.tensors();
  const auto& qt = q.tensors();
  if (pt.size() != qt.size()) {
    return InvalidArgumentError("transfer plan: the producer layout has " + std::to_string(pt.size()) +
                                " tensors, the consumer layout " + std::to_string(qt.size()));
  }
  for (std::size_t t = 0; t < pt.size(); ++t) {
    if (pt[t].name != qt[t].name || pt[t].dtype != qt[t].dtype || pt[t].shape != qt[t].shape) {
      return InvalidArgumentError("transfer plan: tensor " + std::to_string(t) + " is '" + pt[t].name + "' " +
                                  ToString(pt[t].dtype) + ShapeString(pt[t].shape) +
                                  " for the producers and '" + qt[t].name + "' " + ToString(qt[t].dtype) +
                                  ShapeString(qt[t].shape) + " for the consumers");
    }
  }
  TransferPlan plan;
  plan.producers_ = p.ranks();
  plan.consumers_ = q.ranks();
  plan.copies_.assign(static_cast<std::size_t>(p.ranks()) * q.ranks(), {});
  std::vector<uint64_t> sent(p.ranks(), 0);

  // The consumer's box of tensor t on rank cq, intersected with a producer's.
  auto append = [&](std::size_t t, int pr, int cq) {
    const TensorLayout& l = pt[t];
    Side a = MakeSide(pt[t], p.ranks(), pr, p.LocalOffset(t, pr));
    Side b = MakeSide(qt[t], q.ranks(), cq, q.LocalOffset(t, cq));
    std::vector<int64_t> lo(l.shape.size()), hi(l.shape.size());
    for (std::size_t d = 0; d < l.shape.size(); ++d) {
      lo[d] = std::max(a.start[d], b.start[d]);
      hi[d] = std::min(a.start[d] + a.shape[d], b.start[d] + b.shape[d]);
    }
    auto& out = plan.copies_[pr * plan.consumers_ + cq];
    const std::size_t before = out.size();
    BoxCopies(l.shape, DTypeSize(l.dtype), lo, hi, a, b, &out);
    for (std::size_t i = before; i < out.size(); ++i) sent[pr] += out[i].bytes;
  };

  // Split producer tensors first (their sources are fixed), then the pieces
  // of replicated ones, largest first, each from the producer rank that has
  // sent least so far.
  std::vector<std::tuple<uint64_t, std::size_t, int>> replicated;  // bytes, tensor, consumer
  for (std::size_t t = 0; t < pt.size(); ++t) {
    for (int cq = 0; cq < q.ranks(); ++cq) {
      if (pt[t].split_dim < 0) {
        replicated.emplace_back(q.LocalBytes(t, cq), t, cq);
        continue;
      }
      for (int pr = 0; pr < p.ranks(); ++pr) append(t, pr, cq);
    }
  }
  std::stable_sort(replicated.begin(), replicated.end(),
                   [](const auto& x, const auto& y) { return std::get<0>(x) > std::get<0>(y); });
  for (const auto& [bytes, t, cq] : replicated) {
    const int pr = static_cast<int>(std::min_element(sent.begin(), sent.end()) - sent.begin());
    append(t, pr, cq);
  }
  for (auto& c : plan.copies_) SortAndMerge(&c);
  return plan;
}

uint64_t TransferPlan::Bytes(int p, int q) const {
  uint64_t b = 0;
  for (const ByteCopy& c : Copies(p, q)) b += c.bytes;
  return b;
}

uint64_t TransferPlan::BytesTo(int q) const {
  uint64_t b = 0;
  for (int p = 0; p < producers_; ++p) b += Bytes(p, q);
  return b;
}

uint64_t TransferPlan::BytesFrom(int p) const {
  uint64_t b = 0;
  for (int q = 0; q < consumers_; ++q) b += Bytes(p, q);
  return b;
}

std::size_t TransferPlan::CopyCount() const {
  std::size_t n = 0;
  for (const auto& c : copies_) n += c.size();
  return n;
}

}  // namespace transports
}  // namespace viper
