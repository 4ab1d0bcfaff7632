// Model tensors in GPU memory: the GPU tier publishes a ModelState whose
// tensors live on a CUDA device and serves versions whose tensors stay there.
// These helpers move a ModelState between host and device memory (for
// producers that train elsewhere, for tests, for a consumer that wants a host
// copy). Without CUDA or a device they return Unavailable, saying why.
#pragma once

#include <string>

#include "viper/core/model_state.h"
#include "viper/core/status.h"

namespace viper {
namespace transports {

// True when this build has CUDA and a device is visible; otherwise false and
// `reason` says why ("no CUDA device: ...").
bool CudaDeviceAvailable(std::string* reason);

// A copy of `state` (host or device tensors) with every tensor in the memory
// of CUDA device `device`: one allocation, each tensor 256-byte aligned in it,
// freed when the last tensor referring to it goes. Metadata is copied.
StatusOr<ModelState> CopyToDevice(const ModelState& state, int device = 0);

// A copy of `state` with every tensor in (fresh) host memory.
StatusOr<ModelState> CopyToHost(const ModelState& state);

}  // namespace transports
}  // namespace viper
