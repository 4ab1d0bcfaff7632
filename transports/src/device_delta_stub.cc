// Built instead of device_delta.cu without CUDA (CMake picks it): the
// device delta codec reports why it is unavailable.
#include "device_delta.h"

namespace viper {
namespace transports {
namespace internal {

struct DeviceDeltaCodec::Impl {};

DeviceDeltaCodec::DeviceDeltaCodec(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceDeltaCodec::~DeviceDeltaCodec() = default;

StatusOr<std::unique_ptr<DeviceDeltaCodec>> DeviceDeltaCodec::Create(int) {
  return UnavailableError("device delta: no CUDA device: Viper was built without CUDA");
}

StatusOr<DeviceDeltaRecords> DeviceDeltaCodec::Encode(const std::byte*, const std::byte*,
                                                      const std::vector<DeviceDeltaTensor>&, uint64_t,
                                                      std::byte*) {
  return UnavailableError("device delta: no CUDA device: Viper was built without CUDA");
}

Status DeviceDeltaCodec::Apply(std::byte*, const std::vector<DeviceDeltaTensor>&, const std::byte*, uint64_t,
                               uint64_t) {
  return UnavailableError("device delta: no CUDA device: Viper was built without CUDA");
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
