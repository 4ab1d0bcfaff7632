// Internal: the sharded groups' GPU link (group.h, "Links", kGpu), both
// halves; group_gpu.cc with CUDA, group_gpu_stub.cc without (Unavailable).
// No CUDA types here: the link's state is opaque (GpuLink).
//
// A producer rank's staging buffer holds its shard image in layout order
// (ShardLayout::LocalOffset), so a ByteCopy's src_offset is an offset into
// it; a consumer rank's back buffer holds its image the same way (its
// dst_offset). A piece (one producer rank's bytes of one window of a
// consumer rank's image) is the byte stream of the plan's copies clipped to
// that window, in plan order; its digest is the sum64 of that stream
// (device_checksum.h: Sum64Host of the bytes laid end to end), computed on
// the device over the runs where they lie, on both sides.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "group_internal.h"

namespace viper {
namespace transports {
namespace internal {

// One strided copy: `height` runs of `width` bytes, `spitch` / `dpitch`
// apart on the source / destination (height 1: one contiguous copy).
struct Copy2D {
  uint64_t src = 0, dst = 0, width = 0, height = 1, spitch = 0, dpitch = 0;
};
// `copies` (in plan order) with runs of the same length at constant
// strides on both sides (a column split's rows) joined into one strided
// copy each (cudaMemcpy2DAsync), every byte exactly once. Defined in
// group.cc (no CUDA: tested on any host).
std::vector<Copy2D> BatchCopies(const std::vector<ByteCopy>& copies);
// Bounded mode: `copies` (one producer's to consumer rank `rank`, in plan
// order, destinations offsets of the rank's image) landing straight in
// `target` (the rank's tensors, CheckShard-valid for `layout`): each copy
// cut where the image crosses a tensor boundary, then batched per tensor as
// BatchCopies does, `dst` an absolute address (every strided copy stays
// inside one tensor). Defined in group.cc (tested on any host).
std::vector<Copy2D> BatchCopiesInto(const std::vector<ByteCopy>& copies, const ModelState& target,
                                    const ShardLayout& layout, int rank);
// Bounded mode on the gpu link, before any CUDA call: `target` is rank
// `rank`'s shard (CheckShard, device memory allowed) and every tensor with
// bytes is device memory; the error names the tensor. Defined in group.cc.
Status CheckGpuTarget(const ModelState& target, const ShardLayout& layout, int rank, int device);

struct GpuLink;  // group_gpu.cc
struct GpuLinkDeleter {
  void operator()(GpuLink* link) const;
};
using GpuLinkPtr = std::unique_ptr<GpuLink, GpuLinkDeleter>;

// Collective over both groups (after MakeGroup): which link every rank's
// `link` asks for together. kGpu when any rank asks for it (the others
// asking for it or kAuto); an error naming the option when two ranks ask
// for different explicit links. Else `link` itself (MakeShmLink decides
// kAuto). Defined in group.cc (MPI only, no CUDA).
StatusOr<GroupLink> AgreeOnGpu(const GroupSetup& g, GroupLink link, const char* option);

// Collective over both groups, once the link is kGpu: every rank checks its
// device (all fail together, with the first failing rank's reason, naming
// `option`), producer ranks allocate their staging buffer and interprocess
// event and export both, consumer ranks open the handles of the producer
// ranks the plan takes bytes from. Every rank must be on one node.
// `precheck`: this rank's own objection (CheckGpuTarget), failing all.
// `target` (a bounded consumer; else null): the rank's device tensors the
// versions land in, checked with cudaPointerGetAttributes (device memory on
// `device`); the pieces are then hashed where they lie in them.
StatusOr<GpuLinkPtr> MakeGpuLink(const GroupSetup& g, bool producer, int device, const ModelState* target,
                                 const Status& precheck, const char* option);

// Producer rank g.rank, one version: copies `shard` (valid for the layout;
// host or device tensors) into the staging buffer, records the event and
// computes the digests. `corrupt` (tests): flips one byte of the staging
// buffer after the digests, so that a consumer's check must fail.
struct GpuStaged {
  uint64_t shard_checksum = 0;                 // sum64 of the shard image
  std::vector<std::vector<uint64_t>> digests;  // [consumer rank][window]: 0 where nothing goes
};
StatusOr<GpuStaged> GpuStage(const GroupSetup& g, GpuLink* link, const ModelState& shard, bool corrupt);

// Producer: waits until every consumer rank the plan sends bytes to has
// released `version`'s staging buffer, or `deadline_s`. False (and
// *message) on the deadline.
bool GpuAwaitReleases(const GroupSetup& g, uint64_t version, double deadline_s, std::string* message);

// Consumer rank g.rank, one version: copies its runs from every producer's
// staging buffer into a device back buffer (one not held by a served
// version), releases the producers, checks every piece against
// headers[p][kHeaderFields + k]. On success `owner` keeps the back buffer
// alive and `data` is its device address. False (and *message) when a
// piece is wrong or CUDA fails; `idle` runs while waiting for releases' sends.
struct GpuLanded {
  std::shared_ptr<void> owner;
  std::byte* data = nullptr;
  uint64_t capacity = 0;
};
bool GpuReceive(const GroupSetup& g, GpuLink* link, uint64_t version,
                const std::vector<std::vector<uint64_t>>& headers, double deadline_s, GpuLanded* landed,
                uint64_t* received_bytes, std::string* message);

// Bounded consumer (a link made with a target), one version: as GpuReceive,
// but every run goes device to device straight from the producers' staging
// buffers into the target tensors (no back buffer, no staging bucket), and
// every piece is checked there. `first_copy` runs once, before the first
// copy is queued (serving pauses from there). False (and *message) when a
// piece is wrong or CUDA fails: then the target may hold parts of two
// versions (whenever `first_copy` ran).
bool GpuReceiveInto(const GroupSetup& g, GpuLink* link, uint64_t version,
                    const std::vector<std::vector<uint64_t>>& headers, double deadline_s,
                    const std::function<void()>& first_copy, uint64_t* received_bytes, std::string* message);

}  // namespace internal
}  // namespace transports
}  // namespace viper
