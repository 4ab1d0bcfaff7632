// Built instead of tier_gpu.cc when Viper is built without CUDA or without
// MPI (CMake picks it): the gpu tier reports why it is unavailable.
#include "tier_gpu.h"

namespace viper {
namespace transports {
namespace internal {

StatusOr<std::unique_ptr<TierSender>> MakeGpuSender(const SenderSetup&) {
  return UnavailableError("tier gpu: no CUDA device: Viper was built without CUDA");
}

StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeGpuReceivers(const ReceiverSetup&) {
  return UnavailableError("tier gpu: no CUDA device: Viper was built without CUDA");
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
