// RAII MPI initialisation for apps and tests. The transports never call
// MPI_Init themselves: they require MPI to be initialised with
// MPI_THREAD_MULTIPLE (their background threads call MPI) by the app, either
// through this class or by the app's own MPI_Init_thread.
#pragma once

#include <memory>
#include <string>

#include "viper/core/status.h"

namespace viper {
namespace transports {

class MpiSession {
 public:
  // Initialises MPI with MPI_THREAD_MULTIPLE unless it already is (then the
  // session only checks the thread level and does not finalise). Unavailable
  // when Viper was built without MPI; FailedPrecondition when the library
  // cannot give MPI_THREAD_MULTIPLE.
  static StatusOr<std::unique_ptr<MpiSession>> Init(int* argc, char*** argv);
  // Finalises MPI when this session initialised it.
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool owns_init() const { return owns_init_; }

  // True when Viper was built with MPI.
  static bool Compiled();
  // True when MPI is initialised (by anyone) and not yet finalised.
  static bool Active();
  // Barrier on MPI_COMM_WORLD (tests use it to line ranks up).
  static Status Barrier();
  // Collective on MPI_COMM_WORLD: rank 0 makes a fresh private directory
  // `<parent>/<prefix>XXXXXX` (mkdtemp, mode 0700, private_dir.h) and every
  // rank gets its path. An error on rank 0 is every rank's error.
  static StatusOr<std::string> MakeSharedPrivateDirectory(const std::string& parent, const std::string& prefix);

 private:
  MpiSession() = default;
  int rank_ = 0;
  int size_ = 1;
  bool owns_init_ = false;
};

}  // namespace transports
}  // namespace viper
