// Internal: memory that MPI may still use after its owner has let go.
#pragma once

#include <memory>

namespace viper {
namespace transports {
namespace internal {

// The one rule for memory MPI may still read or write after its owner has
// given up on it (a send that timed out and could not be cancelled, a
// receive that stays posted into a landing buffer, sends freed unfinished
// to a dropped consumer): it is kept alive until MPI_Finalize and released
// there. The MPI session owns it (an attribute of MPI_COMM_SELF, which MPI
// deletes at the start of MPI_Finalize), not the process. After MPI_Finalize
// nothing can read it any more and `memory` is released at once.
void KeepUntilFinalize(std::shared_ptr<const void> memory);

}  // namespace internal
}  // namespace transports
}  // namespace viper
