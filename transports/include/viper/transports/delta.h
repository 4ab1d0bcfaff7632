// Lossless delta versions (issue 27): the difference between a new image of
// a model and a base image the receiver already holds, and its application
// in place into a copy of the base (the consumer's back buffer).
//
// Both images are Viper safetensors images (format 2: viper.version and
// viper.checksum, the XXH3-64 of the data section). A delta exists only
// between two images with the same tensor table (names, dtypes, shapes and
// data offsets; the header's metadata may differ); otherwise, or when the
// delta would not be smaller than the new image's data section (it must save
// on tensor bytes, not on the header alone), Encode says "send the full
// version" instead.
//
// Per tensor, whichever is smallest of:
//   unchanged      nothing is sent;
//   sparse (gaps)  the gaps between the elements whose bits changed,
//                  Golomb-Rice coded (gap g with parameter r: g >> r one-bits,
//                  a zero bit, the low r bits of g; r per tensor, the best of
//                  three near log2 of the mean gap), then the new values in
//                  element order (element bytes each);
//   dense          the whole tensor.
// Why these: the values of changed elements are incompressible in general
// (bits of a float that moved), so what an encoding can save is on the
// positions. An arbitrary set of k changed elements among n needs
// log2(C(n, k)) bits, about log2(n/k) + 1.44 bits per changed element when
// they are sparse; Rice-coded gaps spend about log2(n/k) + 1.5-2 bits (1.07
// bytes at 1% changed against 1.01 for the entropy; LEB128 varints would
// spend 1.28, u32 positions 4). With r = 0 the code is the
// bitmap of the elements up to the last changed one, so a bitmap encoding
// would never be smaller and there is none. The sizes are counted exactly
// after the one diff pass and the smallest record is written. XOR words would carry as many bytes as the new values and still
// need the positions.
//
// Wire format (all integers little-endian), documented in transports/README.md:
//   fixed header, kFixedHeaderBytes:
//     "VIPERDL2", base version, base checksum (its viper.checksum), target
//     version, target checksum (its viper.checksum), target image bytes,
//     target header bytes (8 + N of the target's safetensors header), base
//     image bytes, record count, body bytes, XXH3-64 of the body, XXH3-64 of
//     the fixed header's first 88 bytes;
//   body: the target's safetensors header as a patch of the base's (format
//     2; format 1, "VIPERDL1", carried it whole, padding included, and is
//     refused by name): u64 shared prefix, u64 shared suffix, u64 JSON bytes
//     (the target's JSON without its trailing padding spaces), then the JSON
//     bytes between prefix and suffix. Prefix and suffix are the longest
//     common ones of the two trimmed JSONs (between versions of one model,
//     only viper.version, viper.checksum and the like differ: some 100
//     bytes, where the padded header is 4,096 or more). Apply rebuilds the
//     header bit for bit: length prefix (target header bytes - 8), prefix,
//     carried bytes, suffix, then spaces up to target header bytes (the
//     padding of staging.cc's PadHeader and of safetensors writers). Then one
//     record per changed tensor, in ascending tensor order:
//       u32 tensor index (data-offset order), u8 encoding (1 sparse-gaps,
//       3 dense; 2 is not used), u8 element bytes, u8 Rice parameter (gaps; else 0), u8
//       zero, u64 changed elements (dense:
//       the tensor's element count), u64 payload bytes, payload.
//
// Apply validates every length, offset, count and index against the fixed
// header and the base before writing a byte, rebuilds the new image in the
// caller's buffer, then parses it with its checksums verified and compares
// its version and viper.checksum with the delta's: a wrong base, a truncated,
// corrupt or misapplied delta is an error, never an image to serve.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "viper/core/model_state.h"
#include "viper/core/safetensors.h"
#include "viper/core/status.h"

namespace viper {
namespace transports {
namespace delta {

constexpr char kMagic[8] = {'V', 'I', 'P', 'E', 'R', 'D', 'L', '2'};
// Format 1 carried the target header whole; ReadHeader refuses it by name.
constexpr char kMagicVersion1[8] = {'V', 'I', 'P', 'E', 'R', 'D', 'L', '1'};
constexpr uint64_t kFixedHeaderBytes = 96;
// Bytes of one record's header before its payload.
constexpr uint64_t kRecordHeaderBytes = 24;
// Bytes of the header patch before the bytes it carries.
constexpr uint64_t kHeaderPatchFixedBytes = 24;

enum class Encoding : uint8_t { kUnchanged = 0, kSparseGaps = 1, kDense = 3 };
// "unchanged", "sparse-gaps", "dense".
const char* ToString(Encoding encoding);

// What the fixed header of a delta says (checked: magic and its own checksum).
struct DeltaHeader {
  uint64_t base_version = 0;
  uint64_t base_checksum = 0;  // the base image's viper.checksum
  uint64_t target_version = 0;
  uint64_t target_checksum = 0;  // the rebuilt image's viper.checksum
  uint64_t target_image_bytes = 0;
  uint64_t target_header_bytes = 0;
  uint64_t base_image_bytes = 0;
  uint64_t record_count = 0;
  uint64_t body_bytes = 0;
  uint64_t body_checksum = 0;
};
// Reads and checks the fixed header of `size` bytes at `data` (at least
// kFixedHeaderBytes of them; the body is not read). DataLoss when the magic
// or the header's checksum does not match.
StatusOr<DeltaHeader> ReadHeader(const std::byte* data, uint64_t size);

// A delta's records as listed by ReadContents (without the base, positions
// are not checked: Apply does that).
struct RecordInfo {
  uint32_t tensor_index = 0;  // in the image's data-offset order
  Encoding encoding = Encoding::kDense;
  uint64_t changed_elements = 0;
  uint64_t payload_bytes = 0;
};
struct Contents {
  DeltaHeader header;
  uint64_t header_patch_bytes = 0;   // the header patch on the wire (24 + the JSON bytes it carries)
  uint64_t header_shared_bytes = 0;  // JSON bytes taken from the base's header
  // The rebuilt image's __metadata__: only when the patch carries the whole
  // JSON (header_shared_bytes 0); otherwise it needs the base (empty here).
  std::map<std::string, std::string> target_metadata;
  std::vector<RecordInfo> records;
};
// Checks a whole delta without its base (fixed header, body size and
// checksum, the target header's JSON, each record's header and payload
// bounds) and lists it: what `viper inspect` shows.
StatusOr<Contents> ReadContents(const std::byte* data, uint64_t size);

// Per tensor, what Encode chose.
struct TensorReport {
  std::string name;
  Encoding encoding = Encoding::kUnchanged;
  uint64_t elements = 0;
  uint64_t changed_elements = 0;  // dense: those found before the scan stopped (a lower bound)
  uint64_t encoded_bytes = 0;     // record header + payload; 0 when unchanged
};

struct EncodeSummary {
  // True: no delta was written; send the new image whole (the reason says why).
  bool full = false;
  std::string reason;
  uint64_t delta_bytes = 0;       // size of the delta (0 when full)
  uint64_t full_bytes = 0;        // size of the new image
  uint64_t base_version = 0, target_version = 0;
  uint64_t tensors_unchanged = 0, tensors_sparse = 0, tensors_dense = 0;
  uint64_t header_patch_bytes = 0;    // of delta_bytes, the target header's patch (0 when full)
  std::vector<TensorReport> tensors;  // every tensor, in data-offset order (empty when full by table)
  // Bytes a consumer receives: delta_bytes, or full_bytes when full.
  uint64_t BytesMoved() const { return full ? full_bytes : delta_bytes; }
  // "delta v7 <- v6: 1.2 MB of 600 MB (0.2%), 3 unchanged, 1 sparse, 0 dense tensors" or
  // "full v7: <reason>".
  std::string BriefReport() const;
};

// Encodes `target` (the new image) against `base` (the image the receiver
// holds) into `out` (room for `out_capacity` bytes; target_size bytes always
// suffice, since a delta is only written when smaller than the image; the
// producer encodes into a staging buffer of the model's size). One pass per tensor compares the two images
// word by word; a tensor stops being scanned once neither sparse encoding can
// beat dense, and the whole delta stops once it cannot beat the full image.
// InvalidArgument when either image is not a Viper format-2 image with
// viper.version and viper.checksum (the header checksum is verified; the
// data sections are not hashed: the producer made both).
StatusOr<EncodeSummary> Encode(const std::byte* base, uint64_t base_size, const std::byte* target,
                               uint64_t target_size, std::byte* out, uint64_t out_capacity);

// Encode in steps, for a producer that diffs the new image while it makes
// it (issue 27: the diff fused into the snapshot pass): Start with the base,
// Feed the new data section in order, in slices of any size (each is scanned
// against the same bytes of the base during the call, while it is in cache;
// a slice may split a tensor, an element or a 64-byte block: under 64 bytes
// are carried to the next call), then Finish with the whole new image (its
// header now written) to write the delta. Finish writes exactly the bytes,
// and returns exactly the summary, that Encode of the same images writes
// (Encode is Start, Feed of the whole data section, Finish). The base must
// stay unchanged until Finish. Fed bytes are mapped to tensors by the base's
// table; when the new image's table differs, Finish says "full" as Encode does.
class Encoder {
 public:
  Encoder();
  ~Encoder();
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  // Parses `base` (InvalidArgument when it is not a Viper format-2 image) and
  // forgets any earlier delta (keeping its scan buffers: an encoder kept from
  // version to version does not fault their pages in again).
  Status Start(const std::byte* base, uint64_t base_size);
  // The next `bytes` bytes of the new data section are at `data` (read only
  // during the call). Bytes past the base's data section are not scanned.
  void Feed(const std::byte* data, uint64_t bytes);
  // Writes the delta of `target`, whose data section was fed whole (else
  // FailedPrecondition naming both sizes), into `out`, as Encode does.
  StatusOr<EncodeSummary> Finish(const std::byte* target, uint64_t target_size, std::byte* out,
                                 uint64_t out_capacity);

  struct State;  // delta.cc

 private:
  friend StatusOr<EncodeSummary> Encode(const std::byte*, uint64_t, const std::byte*, uint64_t, std::byte*,
                                        uint64_t);
  std::unique_ptr<State> state_;
};

// `size` bytes at `data`.
struct Span {
  const std::byte* data = nullptr;
  uint64_t size = 0;
};
// The producer's snapshot pass with the diff fused in: copies `ranges` (the
// new data section, in order) back to back to `dst`, returns their XXH3-64
// (the image's viper.checksum), and feeds them to `encoder` (started; may be
// null: copy and hash only), a slice of kFuseSliceBytes at a time: each
// slice is diffed against the base, copied (streaming stores when the data
// section is 8 MiB or more: the image is not read again soon) and hashed
// while it is in cache, so that the model and the base are each read once
// and the image written once.
constexpr uint64_t kFuseSliceBytes = 128 * 1024;
uint64_t CopyHashAndFeed(const std::vector<Span>& ranges, std::byte* dst, Encoder* encoder);

// The result of Apply: the rebuilt image, verified.
struct Applied {
  uint64_t image_bytes = 0;     // size of the rebuilt image at the start of the buffer
  ModelState state;             // views into the buffer
  safetensors::ParseInfo info;  // header and data checksums verified
};

// Rebuilds the image `delta` encodes in place: `buffer` holds the base image
// (`base_size` bytes) and has room for `capacity` bytes (the rebuilt image
// must fit; OutOfRange otherwise, before anything is written).
//   FailedPrecondition: the buffer does not hold the delta's base (version,
//     checksum or size differ); nothing is written.
//   DataLoss / InvalidArgument: the delta is truncated, corrupt or names
//     tensors, offsets or counts the base does not have; nothing is written
//     when this is found before applying (every length, index and position is
//     checked first), and the rebuilt image failing its checksums is DataLoss.
// After any error other than FailedPrecondition and OutOfRange, the buffer no
// longer holds the base (it was partly or wholly rewritten): the caller must
// not serve it, nor use it as a base again.
StatusOr<Applied> Apply(std::byte* buffer, uint64_t base_size, uint64_t capacity, const std::byte* delta,
                        uint64_t delta_size);

// Whether a delta beats the full image over one link, predicted from
// measured rates (the host tier's delta auto decides this per consumer on
// other nodes): a delta costs the producer's diff + encode, the delta's bytes
// over the link and the consumer's copy + apply + verify; the full version
// costs the image's bytes over the link. Every time in seconds.
struct LinkCosts {
  uint64_t image_bytes = 0;
  uint64_t delta_bytes = 0;  // 0: no delta (nothing to send as one)
  double encode_s = 0;       // the producer's diff + encode of this version
  double apply_s = 0;        // the consumer's copy + apply + verify
  // Measured throughput to this consumer (bytes / second of its recent
  // transfers); 0 or less: not measured yet.
  double link_bytes_per_s = 0;
};
struct LinkChoice {
  bool delta = false;
  double delta_s = 0, full_s = 0;  // the predictions (0 when the link is not measured)
  // "delta: predicted 0.21 s < full 0.80 s", "full: predicted delta 0.95 s
  // >= full 0.61 s", "full: link not measured yet", "full: no delta".
  std::string reason;
};
// A delta only when its predicted time is below the full version's; an
// unmeasured link or no delta: full.
LinkChoice ChooseOverLink(const LinkCosts& costs);

// The viper.version and viper.checksum of an image (its header only; the
// header checksum is verified, the data section is not hashed).
struct ImageId {
  uint64_t version = 0;
  uint64_t checksum = 0;
};
StatusOr<ImageId> Identify(const std::byte* image, uint64_t size);

}  // namespace delta
}  // namespace transports
}  // namespace viper
