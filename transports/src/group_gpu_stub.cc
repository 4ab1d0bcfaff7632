// Built instead of group_gpu.cc when Viper has MPI but no CUDA (CMake picks
// it): the groups' gpu link reports that it is unavailable; the host links
// are unaffected.
#include "group_gpu.h"

namespace viper {
namespace transports {
namespace internal {

struct GpuLink {};
void GpuLinkDeleter::operator()(GpuLink* link) const { delete link; }

StatusOr<GpuLinkPtr> MakeGpuLink(const GroupSetup& g, bool producer, int, const ModelState*,
                                 const Status& precheck, const char* option) {
  // A rank's objection first, as the CUDA build gives it (it names the option
  // to change); then, on every rank alike, the missing CUDA.
  const Status agreed = Agree(g, producer, precheck);
  if (!agreed.ok()) return Status(agreed.code(), std::string("sharded groups: ") + option + " = gpu: " + agreed.message());
  return UnavailableError(std::string("sharded groups: ") + option +
                          " = gpu: no CUDA device: Viper was built without CUDA");
}

StatusOr<GpuStaged> GpuStage(const GroupSetup&, GpuLink*, const ModelState&, bool) {
  return UnavailableError("sharded groups: link gpu: Viper was built without CUDA");
}

bool GpuAwaitReleases(const GroupSetup&, uint64_t, double, std::string* message) {
  *message = "link gpu: Viper was built without CUDA";
  return false;
}

bool GpuReceive(const GroupSetup&, GpuLink*, uint64_t, const std::vector<std::vector<uint64_t>>&, double,
                GpuLanded*, uint64_t*, std::string* message) {
  *message = "link gpu: Viper was built without CUDA";
  return false;
}

bool GpuReceiveInto(const GroupSetup&, GpuLink*, uint64_t, const std::vector<std::vector<uint64_t>>&, double,
                    const std::function<void()>&, uint64_t*, std::string* message) {
  *message = "link gpu: Viper was built without CUDA";
  return false;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
