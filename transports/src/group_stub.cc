// Sharded groups without MPI (group.h): the same API, Unavailable at run
// time; the option checks and summaries are the real ones.
#include <cstdio>

#include "group_testing.h"
#include "viper/core/checksum.h"
#include "viper/transports/group.h"

namespace viper {
namespace transports {

class ShardedPublisher::Impl {};
class ShardedSubscriber::Impl {};

bool GroupRanks::IsValid(int world_size, std::string* error) const {
  if (producers.empty() || consumers.empty() || world_size < 1) {
    *error = "GroupRanks: producers and consumers must both be non-empty";
    return false;
  }
  return true;
}
bool ShardedPublisher::Options::IsValid(std::string* error) const {
  if (!(peer_timeout_s > 0)) {
    *error = "ShardedPublisher::Options::peer_timeout_s must be > 0";
    return false;
  }
  if (!(decision_timeout_s > 0)) {
    *error = "ShardedPublisher::Options::decision_timeout_s must be > 0";
    return false;
  }
  return true;
}
bool ShardedSubscriber::Options::IsValid(std::string* error) const {
  if (!(peer_timeout_s > 0)) {
    *error = "ShardedSubscriber::Options::peer_timeout_s must be > 0";
    return false;
  }
  return true;
}
std::string ShardedPublisher::Summary::BriefReport() const { return "version " + std::to_string(version); }
std::string ShardedSubscriber::Summary::BriefReport() const { return "version " + std::to_string(version); }

ShardedPublisher::ShardedPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardedPublisher::~ShardedPublisher() = default;
StatusOr<std::unique_ptr<ShardedPublisher>> ShardedPublisher::Create(const GroupRanks&, const ShardLayout&,
                                                                     const Options&) {
  return UnavailableError("sharded groups need MPI (Viper was built without it)");
}
StatusOr<ShardedPublisher::Summary> ShardedPublisher::Publish(const ModelState&, int64_t, bool) {
  return UnavailableError("sharded groups need MPI");
}
int ShardedPublisher::rank() const { return 0; }
const TransferPlan& ShardedPublisher::plan() const {
  static const TransferPlan kEmpty;
  return kEmpty;
}

ShardedSubscriber::ShardedSubscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardedSubscriber::~ShardedSubscriber() = default;
StatusOr<std::unique_ptr<ShardedSubscriber>> ShardedSubscriber::Create(const GroupRanks&, const ShardLayout&,
                                                                       const Options&, ModelState*) {
  return UnavailableError("sharded groups need MPI (Viper was built without it)");
}
StatusOr<ShardedSubscriber::Summary> ShardedSubscriber::ReceiveNext(double) {
  return UnavailableError("sharded groups need MPI");
}
bool ShardedSubscriber::Serve(const std::function<void(const ShardVersion&)>&) const { return false; }
std::shared_ptr<const ShardVersion> ShardedSubscriber::Current() const { return nullptr; }
uint64_t ShardedSubscriber::version() const { return 0; }
int ShardedSubscriber::rank() const { return 0; }
const TransferPlan& ShardedSubscriber::plan() const {
  static const TransferPlan kEmpty;
  return kEmpty;
}

namespace internal {
void SetFault(ShardedPublisher*, uint64_t, GroupFault) {}
void SetFault(ShardedSubscriber*, uint64_t, GroupFault) {}
}  // namespace internal

}  // namespace transports
}  // namespace viper
