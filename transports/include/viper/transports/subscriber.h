// The consumer side of the transfer engine. A Subscriber receives each new
// version into a back buffer on its own thread, verifies the checksum and
// swaps it in atomically: Current() always returns a complete, verified
// version that stays valid for as long as the caller holds it, while the next
// one is being received. On the gpu tier the versions stay in device memory
// (ModelVersion::memory == kDevice; a host copy: CopyToHost in
// device_memory.h).
//
//   auto sub = Subscriber::Create(options);   // collective with the Publisher (MPI tiers)
//   std::shared_ptr<const ModelVersion> m = sub->Current();   // serve with m
//   sub->WaitForVersion(m->state.metadata.version + 1, 5.0);  // or set a callback
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "viper/core/status.h"
#include "viper/transports/pfs_store.h"
#include "viper/transports/types.h"

namespace viper {
namespace transports {

class Subscriber {
 public:
  struct Options {
    Tier tier = Tier::kHost;                               // must match the Publisher's
    Notify notify = Notify::kPush;                         // push (MPI message) | poll (scan pfs_dir)
    // one-sided needs it here too (the window is made at Create); with
    // two-sided and shm the consumer follows each announcement.
    HostProtocol host_protocol = HostProtocol::kTwoSided;
    int producer_rank = 0;                                 // rank of the Publisher in MPI_COMM_WORLD
    // one-sided: bytes of each of the two landing slots in the MPI window
    // (the largest version that can be received).
    uint64_t window_slot_bytes = 64ull << 20;
    // Seconds without any message from the producer after which it is
    // declared lost (Current() keeps the last good version); 0 = wait forever.
    double producer_timeout_s = 0;
    // Seconds a started transfer may take before it is abandoned, counted
    // from the end of the producer's longest wait for the other consumers'
    // answers (its peer_timeout_s, carried by each announcement): a silent
    // consumer delays the bytes of the others by up to that much.
    double transfer_timeout_s = 30;
    // poll: directory and period in seconds (TF Serving's default is 1 s).
    // The directory must belong to this user (or root) and not be writable
    // by group or others (private_dir.h); a version that is not a regular
    // file (a link, a FIFO) is refused without blocking. A refused version
    // is read again once its file changes (size, mtime or inode).
    std::string pfs_dir;
    double poll_period_s = 1.0;
    // pfs: read with O_DIRECT.
    bool o_direct = false;
    // pfs: file naming in pfs_dir (flat or TF Serving's <version>/model.safetensors).
    PfsStore::Layout pfs_layout = PfsStore::Layout::kFlat;
    // pfs: serve only versions whose metadata carries this session id (the
    // Publisher's session_id): another run's file in the same directory is
    // refused, whatever its version. Empty = no check.
    std::string session_id;
    // pfs: the Publisher's hmac_key_file (see publisher.h): only versions
    // whose viper-run.hmac verifies under this key are served. Empty = no
    // check.
    std::string hmac_key_file;
    // pfs: refuse files without Viper's checksum (another writer's); false
    // serves them with ModelVersion::verified false, versioned by file name.
    bool pfs_require_checksum = true;
    // Landing buffers allocated and pre-touched at Create (front + back; device memory on the gpu tier), each
    // of this many bytes (the expected version size, header included); 0 =
    // allocate on first use. First touch of fresh pages costs far more than
    // the transfer itself, so set this for timed runs.
    uint64_t preallocate_bytes = 0;
    // Sleep between checks while idle, in microseconds (latency vs CPU).
    int idle_sleep_us = 20;
    // gpu tier: CUDA device the versions land on.
    int gpu_device = 0;
    // gpu tier: copy from the producer's device memory by CUDA IPC when both
    // ranks share a node; false = always through pinned host memory over MPI.
    bool allow_ipc = true;
    // host tier, shm protocol: copy versions out of the producer's shared
    // memory when on its node; false = always over MPI (two-sided).
    bool allow_shm = true;

    bool IsValid(std::string* error) const;
  };

  // A version that was rejected (corrupt, truncated, lost mid-transfer).
  struct Rejection {
    uint64_t version = 0;
    std::string source;
    Status status;
  };

  struct Summary {
    uint64_t received = 0;           // versions swapped in
    uint64_t rejected = 0;           // versions refused (never served)
    // Bytes that reached this consumer for the versions swapped in (the
    // files read, the bytes received): less than their images when some
    // were rebuilt from a delta against the version held.
    uint64_t bytes_moved = 0;
    uint64_t delta_versions = 0;     // versions swapped in that were rebuilt from a delta
    // Of delta_versions, those rebuilt without a whole copy of the served
    // image: the back buffer (host and pfs tiers), which held the version served
    // before it, brought forward by copying only what the last delta
    // changed (the header and its changed tensors); the others copied the
    // served image whole. delta_copied_bytes: the bytes copied from served
    // images for delta_versions, both ways.
    uint64_t delta_copies_avoided = 0;
    uint64_t delta_copied_bytes = 0;
    bool producer_finished = false;  // the producer closed cleanly
    bool producer_lost = false;      // the producer went silent or the link broke
    std::string message;             // why it stopped, or the last rejection
    std::string BriefReport() const;
  };

  using Callback = std::function<void(std::shared_ptr<const ModelVersion>)>;

  // Starts the receiving thread. MPI tiers: collective with the Publisher.
  // `callback` (optional) is installed before the thread starts, so it sees
  // every swap, the first included (SetCallback after Create may miss
  // versions that arrive in between).
  static StatusOr<std::unique_ptr<Subscriber>> Create(const Options& options, Callback callback = nullptr);
  ~Subscriber();  // stops the thread
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // The newest verified version, or nullptr before the first one.
  std::shared_ptr<const ModelVersion> Current() const;
  // Waits until a version >= `version` is current (returns it), the producer
  // finishes or is lost (FailedPrecondition / Aborted with the reason), or
  // `timeout_s` passes (Unavailable).
  StatusOr<std::shared_ptr<const ModelVersion>> WaitForVersion(uint64_t version, double timeout_s);
  // Waits until the producer closes or is lost, or `timeout_s` passes;
  // returns true when the receiving thread has ended.
  bool WaitUntilDone(double timeout_s);
  // Called on the receiving thread after each swap (keep it short).
  void SetCallback(Callback callback);

  std::vector<Rejection> Rejections() const;
  // Consumer-side samples ("load", "notify").
  std::vector<CostSample> CostSamples() const;
  Summary summary() const;
  // Stops the receiving thread (the current version stays available).
  void Stop();

  class Impl;

 private:
  explicit Subscriber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace transports
}  // namespace viper
