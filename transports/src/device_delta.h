// Internal: delta records between two images in device memory (issue 27,
// the gpu tier). The diff, the choice per tensor and the records are made on
// the device (device_delta.cu); without CUDA, device_delta_stub.cc reports
// Unavailable. No CUDA types here.
//
// The records are byte for byte those of the host encoder (delta.cc, format
// VIPERDL2's record list, delta.h): per tensor unchanged (no record), sparse
// gaps (Golomb-Rice coded gaps between changed elements, the parameter the
// best of three near log2 of the mean gap, then the new values in element
// order) or dense, chosen by the same rule, including the host scan's early
// stop (a tensor whose changed density reaches e / (e + 1/8) after 4096
// elements is dense). Only the records are made here: the fixed header and
// the header patch are the caller's (the gpu tier's images carry sum64, not
// viper.checksum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "viper/core/model_state.h"
#include "viper/core/status.h"
#include "viper/transports/delta.h"

namespace viper {
namespace transports {
namespace internal {

// One tensor of the data section two images share (same tensor table).
struct DeviceDeltaTensor {
  uint64_t offset = 0;         // bytes from the start of the data section
  uint64_t bytes = 0;          // a multiple of element_bytes
  unsigned element_bytes = 1;  // 1, 2, 4 or 8
  std::string name;            // for messages
};

// The table of `state`, whose tensors are views into the data section at `data`.
inline std::vector<DeviceDeltaTensor> DeviceDeltaTable(const ModelState& state, const std::byte* data) {
  std::vector<DeviceDeltaTensor> table;
  for (const Tensor& t : state.tensors()) {
    DeviceDeltaTensor d;
    d.offset = static_cast<uint64_t>(t.data - data);
    d.bytes = t.size_bytes;
    d.element_bytes = static_cast<unsigned>(DTypeSize(t.dtype));
    d.name = t.name;
    table.push_back(std::move(d));
  }
  return table;
}

// Whether two tables are the same tensors at the same offsets.
inline bool SameDeviceDeltaTable(const std::vector<DeviceDeltaTensor>& a,
                                 const std::vector<DeviceDeltaTensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].offset != b[i].offset || a[i].bytes != b[i].bytes || a[i].element_bytes != b[i].element_bytes ||
        a[i].name != b[i].name)
      return false;
  }
  return true;
}

// What the encoder chose for one tensor.
struct DeviceDeltaChoice {
  delta::Encoding encoding = delta::Encoding::kUnchanged;
  uint64_t changed_elements = 0;  // counted over the whole tensor
  unsigned rice = 0;              // sparse: the Rice parameter
  uint64_t record_bytes = 0;      // record header + payload; 0 when unchanged
};

// The records of one encode.
struct DeviceDeltaRecords {
  // False when the records would exceed the limit given: no delta (send
  // the full version); `choices` then covers the tensors up to the one that
  // crossed it.
  bool fits = false;
  uint64_t bytes = 0;         // records written
  uint64_t record_count = 0;  // tensors not unchanged
  std::vector<DeviceDeltaChoice> choices;
};

// Encodes and applies delta records on one device; owns its stream and
// scratch memory (grown as needed, kept between calls). Not thread-safe.
class DeviceDeltaCodec {
 public:
  // On `device` (Unavailable without CUDA or without a device).
  static StatusOr<std::unique_ptr<DeviceDeltaCodec>> Create(int device);
  ~DeviceDeltaCodec();
  DeviceDeltaCodec(const DeviceDeltaCodec&) = delete;
  DeviceDeltaCodec& operator=(const DeviceDeltaCodec&) = delete;

  // Diffs the data sections at device addresses `base` and `target` (same
  // `table`) and writes the records to device address `out` (at least
  // `limit` bytes). Complete on return.
  StatusOr<DeviceDeltaRecords> Encode(const std::byte* base, const std::byte* target,
                                      const std::vector<DeviceDeltaTensor>& table, uint64_t limit,
                                      std::byte* out);

  // Applies `record_count` records (`records_bytes` bytes at device address
  // `records`) to the data section at device address `data` (the base's,
  // `table`): every record header and every position is checked first
  // (InvalidArgument/DataLoss naming the record, tensor and field; nothing
  // written), then positions decoded on the host are scattered on the device
  // and dense payloads copied. Complete on return. The caller verifies the
  // rebuilt data against the target's checksum.
  Status Apply(std::byte* data, const std::vector<DeviceDeltaTensor>& table, const std::byte* records,
               uint64_t records_bytes, uint64_t record_count);

 private:
  struct Impl;
  explicit DeviceDeltaCodec(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace internal
}  // namespace transports
}  // namespace viper
