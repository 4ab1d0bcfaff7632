// Sharded groups without MPI (group.h): the same API, Unavailable at run
// time; the option checks and summaries are the real ones (group_options.cc).
#include <cstdio>

#include "group_testing.h"
#include "viper/core/checksum.h"
#include "viper/transports/group.h"

namespace viper {
namespace transports {

class ShardedPublisher::Impl {};
class ShardedSubscriber::Impl {};

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
GroupLink ShardedPublisher::link() const { return GroupLink::kMpi; }
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
GroupLink ShardedSubscriber::link() const { return GroupLink::kMpi; }
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
