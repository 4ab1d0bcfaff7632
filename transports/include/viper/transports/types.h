// Shared vocabulary of the transfer engine: tiers, modes, notification, the
// immutable ModelVersion a consumer serves, and the cost samples the
// predictor's cost model reads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/model_state.h"
#include "viper/core/status.h"
#include "viper/core/transfer.h"

namespace viper {
namespace transports {

// Tier, mode and notification are the shared vocabulary of
// viper/core/transfer.h (one definition, one ToString/FromString); these
// names keep transports::Tier, transports::Mode, ... working.
using viper::Notify;
using viper::Tier;
using viper::ToString;
using Mode = viper::TransferMode;

// Parsers kept for existing callers: nullopt for an unknown name (the
// core's FromString says which names it accepts).
inline std::optional<Tier> TierFromString(const std::string& name) {
  auto t = viper::TierFromString(name);
  return t.ok() ? std::optional<Tier>(*t) : std::nullopt;
}
inline std::optional<Mode> ModeFromString(const std::string& name) {
  auto m = viper::TransferModeFromString(name);
  return m.ok() ? std::optional<Mode>(*m) : std::nullopt;
}
inline std::optional<Notify> NotifyFromString(const std::string& name) {
  auto n = viper::NotifyFromString(name);
  return n.ok() ? std::optional<Notify>(*n) : std::nullopt;
}

// How the host tier moves bytes.
//   two-sided: chunked MPI_Isend/MPI_Irecv straight from the tensors (and
//              relays, see Fanout); any consumer, on any node.
//   one-sided: MPI_Put into each consumer's MPI_Win_allocate window.
//   shm:       a POSIX shared-memory segment the producer writes and every
//              consumer on its node copies out of while it is being
//              written, each side hashing the bytes from cache as it copies
//              them; MPI carries only the control messages. Consumers on
//              other nodes refuse such versions (use two-sided there).
enum class HostProtocol { kTwoSided, kOneSided, kShm };
const char* ToString(HostProtocol protocol);  // "two-sided", "one-sided", "shm"
std::optional<HostProtocol> HostProtocolFromString(const std::string& name);

// How one version reaches several consumers (host tier, two-sided; the
// other tiers always send to each consumer directly). A relay forwards each
// chunk as soon as it has landed, so a tree costs about one chunk time per
// level, not one version time.
//   node:   consumers on the producer's node get it from the producer; on
//           every other node one consumer gets it from the producer and
//           passes it to the rest of its node, so the bytes cross the
//           network once per node. On one node this is direct.
//   direct: the producer sends to each consumer itself.
//   tree:   a tree of tree_arity over the consumers in rank order, whatever
//           their node.
// Within a node, direct wins where Open MPI's shared-memory transport copies
// once, on the receiver (single-copy, CMA: Open MPI's default on Linux): 4
// consumers of 600 MB had the version after 1.13-1.29x one consumer's time,
// 1.5x with a binary tree. Where single-copy is off, the producer copies every
// send itself and a tree did better or as well (2.0-2.3x vs 2.2-2.4x direct).
// Figures: bench/README.md, BM_TransportsFanout.
enum class Fanout { kNode, kDirect, kTree };
const char* ToString(Fanout fanout);  // "node", "direct", "tree"
std::optional<Fanout> FanoutFromString(const std::string& name);

// One verified, immutable version as a consumer serves it. `state` holds
// views into `bytes` (the received safetensors image), which stays alive as
// long as any reference to this object or to its tensors does. On the gpu
// tier `bytes` and the tensors are in device memory (`memory`).
struct ModelVersion {
  ModelState state;                         // tensors (host memory) and metadata
  std::shared_ptr<const void> bytes_owner;  // keeps the received image alive
  const std::byte* bytes = nullptr;         // the whole safetensors image
  uint64_t size_bytes = 0;                  // header + data
  uint64_t checksum = 0;  // of the data section (verified): XXH3-64, or sum64 for the gpu tier
  MemoryKind memory = MemoryKind::kHost;  // where `bytes` and the tensors live (kDevice: gpu tier)
  Tier tier = Tier::kHost;                // how it arrived
  std::string source;                     // "rank 0" or the file path
  double receive_s = 0;                   // time to receive/read the bytes
  double verify_s = 0;                    // time to parse and verify the checksum
  double copy_device_s = 0;               // gpu tier: device time of the copy alone (CUDA events; else 0)
};

// One measured (bytes, seconds) sample for the predictor's cost model.
// phase: "stall" (producer blocked), "transfer" (bytes moving), "load"
// (consumer read + verify), "notify" (discovery), "update" (checkpoint start
// to servable at a consumer).
struct CostSample {
  Tier tier = Tier::kHost;
  Mode mode = Mode::kSync;
  std::string phase;
  uint64_t bytes = 0;
  double seconds = 0;
};

// Writes `samples` as CSV with the header `tier,mode,phase,bytes,seconds`
// (appends without a second header when `append` and the file exists).
Status WriteCostSamplesCsv(const std::string& path, const std::vector<CostSample>& samples,
                           bool append = false);

// Seconds on a monotonic clock (only differences are meaningful).
double MonotonicSeconds();

}  // namespace transports
}  // namespace viper
