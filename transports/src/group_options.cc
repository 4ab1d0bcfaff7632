// Sharded groups (group.h): the option checks and the summaries, the same
// with and without MPI (group.cc and group_publisher.cc /
// group_subscriber.cc need it; group_stub.cc stands in for them).
#include <cstdio>
#include <set>
#include <string>

#include "viper/core/checksum.h"
#include "viper/transports/group.h"

namespace viper {
namespace transports {
namespace internal {

// "1.234" (seconds, for messages; declared in group_internal.h).
std::string Seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", s);
  return b;
}

}  // namespace internal

const char* GroupLinkName(GroupLink link) {
  switch (link) {
    case GroupLink::kMpi:
      return "mpi";
    case GroupLink::kShm:
      return "shm";
    case GroupLink::kGpu:
      return "gpu";
    case GroupLink::kAuto:
      break;
  }
  return "auto";
}

bool GroupRanks::IsValid(int world_size, std::string* error) const {
  if (producers.empty() || consumers.empty()) {
    *error = "GroupRanks: producers and consumers must both be non-empty";
    return false;
  }
  std::set<int> seen;
  for (const auto* side : {&producers, &consumers}) {
    for (int r : *side) {
      if (r < 0 || r >= world_size) {
        *error =
            "GroupRanks: rank " + std::to_string(r) + " is not in [0, " + std::to_string(world_size) + ")";
        return false;
      }
      if (!seen.insert(r).second) {
        *error = "GroupRanks: rank " + std::to_string(r) + " appears twice";
        return false;
      }
    }
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
  if (ring_buckets != 1 && ring_buckets != 2) {
    *error = "ShardedPublisher::Options::ring_buckets must be 1 or 2, not " + std::to_string(ring_buckets);
    return false;
  }
  if (gpu_device < 0) {
    *error = "ShardedPublisher::Options::gpu_device must be >= 0, not " + std::to_string(gpu_device);
    return false;
  }
  if (bucket_bytes >= (1ull << 40)) {
    *error = "ShardedPublisher::Options::bucket_bytes must be < 1 TiB, not " + std::to_string(bucket_bytes);
    return false;
  }
  return true;
}

bool ShardedSubscriber::Options::IsValid(std::string* error) const {
  if (!(peer_timeout_s > 0)) {
    *error = "ShardedSubscriber::Options::peer_timeout_s must be > 0";
    return false;
  }
  if (bucket_bytes >= (1ull << 31)) {
    *error = "ShardedSubscriber::Options::bucket_bytes must be < 2 GiB (one message per producer and bucket)";
    return false;
  }
  if (chunk_bytes == 0 || chunk_bytes >= (1ull << 31)) {
    *error = "ShardedSubscriber::Options::chunk_bytes must be in (0, 2 GiB)";
    return false;
  }
  if (gpu_device < 0) {
    *error = "ShardedSubscriber::Options::gpu_device must be >= 0, not " + std::to_string(gpu_device);
    return false;
  }
  return true;
}

std::string ShardedPublisher::Summary::BriefReport() const {
  if (!published) return "not published (rank 0 decided so)";
  std::string s = "version " + std::to_string(version) + ": sent " + std::to_string(sent_bytes) + " bytes" +
                  (sent ? "" : " (incomplete)") + ", shard checksum " + ChecksumToHex(shard_checksum);
  if (whole_checksum != 0 || committed) {
    s += committed ? ", committed by the consumers" : ", not committed";
    s += ", whole " + ChecksumToHex(whole_checksum);
  }
  s += ", " + internal::Seconds(update_s) + " s";
  if (ring_bytes > 0) s += ", shm ring " + std::to_string(ring_bytes) + " bytes";
  return message.empty() ? s : s + ": " + message;
}

std::string ShardedSubscriber::Summary::BriefReport() const {
  if (!received) return "no version" + (message.empty() ? std::string() : ": " + message);
  std::string s = "version " + std::to_string(version) + ": " + std::to_string(received_bytes) + " of " +
                  std::to_string(slice_bytes) + " slice bytes, " + (verified ? "verified" : "not verified") +
                  ", " + (committed ? "committed" : "not committed") + ", receive " +
                  internal::Seconds(receive_s) + " s, commit " + internal::Seconds(commit_s) + " s";
  if (pause_s > 0) s += ", paused " + internal::Seconds(pause_s) + " s";
  if (in_doubt) s += ", in doubt (no decision heard: serving nothing until it is)";
  if (resolved_version > 0) {
    s += ", version " + std::to_string(resolved_version) +
         " settled: " + (resolved_committed ? "committed" : "not committed");
  }
  return message.empty() ? s : s + ": " + message;
}

}  // namespace transports
}  // namespace viper
