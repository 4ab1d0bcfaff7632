// The gpu tier (tier_gpu.cc; tier_gpu_stub.cc without CUDA or MPI): the
// producer stages each version in device memory; consumers copy it by CUDA
// IPC or through the pinned-host pipeline. Its announcement payload and
// factories for the tier table (tier.h); no CUDA types here.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tier.h"
#include "wire.h"

namespace viper {
namespace transports {
namespace internal {

// What a gpu announcement carries beyond the common header: the image's
// offset in the staging allocation, that allocation's cudaIpcMemHandle_t
// and the interprocess event recorded once the image was complete (both 64
// opaque bytes), and how the pinned-host pipeline cuts it. With delta on
// (issue 27), a delta against the base the producer kept: its records
// (device_delta.h) at the start of another device allocation (its IPC
// handle), their count, bytes and sum64, and the base's version and sum64
// (viper.device_checksum). The target's header is the staged image's.
struct GpuPayload {
  uint64_t header_bytes = 0;  // padded header size
  uint64_t image_offset = 0;  // in the staging allocation
  uint64_t chunk_bytes = 0;   // pinned-host pipeline: bytes per message
  char ipc_mem[64] = {0};
  char ipc_event[64] = {0};
  uint64_t delta_records_bytes = 0;  // 0: no delta offered
  uint64_t delta_record_count = 0;
  uint64_t delta_checksum = 0;  // sum64 of the records
  uint64_t delta_base_version = 0;
  uint64_t delta_base_checksum = 0;  // the base's sum64
  char delta_ipc_mem[64] = {0};      // the records' allocation
};

// The gpu tier's decoder: the payload's size and a chunk size a pipeline
// can cut by (Publisher::Options::chunk_bytes' range). (The header's fit in
// the image is checked by the receive path, which refuses it.)
inline StatusOr<GpuPayload> DecodeGpuPayload(const Announce& a) {
  VIPER_ASSIGN_OR_RETURN(GpuPayload p, GetTierPayload<GpuPayload>(a, "gpu"));
  if (p.chunk_bytes == 0 || p.chunk_bytes > (1ull << 30)) {
    return DataLossError("announcement of version " + std::to_string(a.version) + " (tier gpu): chunk_bytes " +
                         std::to_string(p.chunk_bytes) + " is outside [1, 2^30]");
  }
  // A delta's records: at least one, of 24 bytes or more each, smaller than the image.
  if (p.delta_records_bytes != 0 &&
      (p.delta_record_count == 0 || p.delta_record_count > p.delta_records_bytes / 24 ||
       p.delta_records_bytes >= a.image_bytes)) {
    return DataLossError("announcement of version " + std::to_string(a.version) + " (tier gpu): a delta of " +
                         std::to_string(p.delta_records_bytes) + " bytes in " +
                         std::to_string(p.delta_record_count) + " records for an image of " +
                         std::to_string(a.image_bytes));
  }
  return p;
}

// Stages on the device, in `setup.staging` (the publisher's buffers).
StatusOr<std::unique_ptr<TierSender>> MakeGpuSender(const SenderSetup& setup);
// Two paths: CUDA IPC (same node, mapping opens), then the pinned-host pipeline.
StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeGpuReceivers(const ReceiverSetup& setup);

}  // namespace internal
}  // namespace transports
}  // namespace viper
