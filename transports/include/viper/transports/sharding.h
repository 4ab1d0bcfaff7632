// Sharded models (issue 28): how a model is split across the ranks of a
// producer group or a consumer group, and the transfer plan that moves each
// consumer rank exactly its bytes from the producer ranks that hold them.
//
// A ShardLayout says, for each tensor (in order), whether every rank holds
// all of it (replicated) or an even 1/R of it along one dimension (rank r
// holds indices [r * n / R, (r + 1) * n / R) of dimension `split_dim`, n
// divisible by R). A rank's shard image is its slices of every tensor in
// layout order, each row-major, back to back with no padding: the offsets of
// a TransferPlan are offsets into these images.
//
// A TransferPlan is computed once per (producer layout, consumer layout)
// and reused for every version; it is pure data (no MPI).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "viper/core/model_state.h"
#include "viper/core/status.h"

namespace viper {
namespace transports {

// One tensor of a sharded model: its global (unsharded) shape and how it
// is split.
struct TensorLayout {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // global shape, row-major
  int split_dim = -1;          // -1: replicated; else the dimension split evenly across the ranks
};

class ShardLayout {
 public:
  // Checks every tensor against `ranks`: names unique and non-empty, dims
  // >= 0, split_dim in range and the split dimension divisible by `ranks`.
  // The error names the tensor, the dimension and the rank count.
  static StatusOr<ShardLayout> Make(int ranks, std::vector<TensorLayout> tensors);
  // Every tensor of `whole` split along dimension `split_dim` where it has
  // one of size divisible by `ranks`, else replicated (the FSDP-style layout
  // of a model: scalars and odd-sized vectors replicated).
  static StatusOr<ShardLayout> SplitAll(int ranks, const ModelState& whole, int split_dim);

  int ranks() const { return ranks_; }
  const std::vector<TensorLayout>& tensors() const { return tensors_; }

  // Shape of rank `rank`'s slice of tensor `t`.
  std::vector<int64_t> LocalShape(std::size_t t, int rank) const;
  // Bytes of rank `rank`'s slice of tensor `t`.
  uint64_t LocalBytes(std::size_t t, int rank) const;
  // Offset of that slice in rank `rank`'s shard image.
  uint64_t LocalOffset(std::size_t t, int rank) const;
  // Bytes of rank `rank`'s shard image.
  uint64_t ShardBytes(int rank) const;
  // Bytes of the whole (unsharded) model.
  uint64_t ModelBytes() const;

  // Whether `shard` is rank `rank`'s shard of this layout: the same tensors
  // in the same order, dtypes, local shapes, host memory and sizes. The
  // error names the tensor (and the dimension) and the rank.
  // `device_allowed` (the groups' gpu link, which reads and writes host or
  // device memory alike): device tensors pass too.
  Status CheckShard(const ModelState& shard, int rank, bool device_allowed = false) const;
  // Rank `rank`'s slices of `whole` (which must have this layout's global
  // tensors), as a new ModelState owning copies (tests, benches).
  StatusOr<ModelState> Slice(const ModelState& whole, int rank) const;

  // A text form ("ranks R\n" then one line per tensor: name dtype split_dim
  // d0,d1,...), for exchanging layouts between groups; Parse checks it as
  // Make does and names the line of any error.
  std::string Serialize() const;
  static StatusOr<ShardLayout> Parse(const std::string& text);

 private:
  int ranks_ = 1;
  std::vector<TensorLayout> tensors_;
  std::vector<std::vector<uint64_t>> offsets_;  // [rank][tensor], plus the total at the end
};

// One contiguous copy: `bytes` bytes from `src_offset` of a producer rank's
// shard image to `dst_offset` of a consumer rank's shard image.
struct ByteCopy {
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t bytes = 0;
};

class TransferPlan {
 public:
  // The plan from producer layout `p` to consumer layout `q` (the same
  // tensors, dtypes and global shapes in the same order; an error names the
  // first difference). Each destination byte of each consumer rank comes
  // from exactly one producer rank; a tensor the producers replicate comes
  // whole (or as the consumer's slice) from one producer rank, chosen to
  // balance the bytes each producer rank sends. Runs contiguous in both
  // images are merged.
  static StatusOr<TransferPlan> Make(const ShardLayout& p, const ShardLayout& q);

  int producers() const { return producers_; }
  int consumers() const { return consumers_; }
  // The copies from producer rank `p` to consumer rank `q`, in destination
  // order.
  const std::vector<ByteCopy>& Copies(int p, int q) const { return copies_[p * consumers_ + q]; }
  // Bytes producer rank `p` sends to consumer rank `q`.
  uint64_t Bytes(int p, int q) const;
  // Bytes consumer rank `q` receives from all producer ranks.
  uint64_t BytesTo(int q) const;
  // Bytes producer rank `p` sends to all consumer ranks.
  uint64_t BytesFrom(int p) const;
  // Contiguous copies in the whole plan (fewer is cheaper).
  std::size_t CopyCount() const;

 private:
  int producers_ = 0;
  int consumers_ = 0;
  std::vector<std::vector<ByteCopy>> copies_;  // [p * consumers + q]
};

}  // namespace transports
}  // namespace viper
