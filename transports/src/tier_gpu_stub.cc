// Built instead of tier_gpu.cc when Viper is built without CUDA or without
// MPI (CMake picks it): the gpu tier reports why it is unavailable.
#include "tier.h"

namespace viper {
namespace transports {
namespace internal {

StatusOr<std::unique_ptr<TierSender>> MakeGpuSender(ProducerControl*, StagedVersion*, int) {
  return UnavailableError("tier gpu: no CUDA device: Viper was built without CUDA");
}

StatusOr<std::vector<std::unique_ptr<TierReceiver>>> MakeGpuReceivers(ConsumerControl*) {
  return UnavailableError("tier gpu: no CUDA device: Viper was built without CUDA");
}

Status BindGpuThread(int) { return Status::Ok(); }

}  // namespace internal
}  // namespace transports
}  // namespace viper
