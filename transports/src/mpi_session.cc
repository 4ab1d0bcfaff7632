#include "viper/transports/mpi_session.h"

#include <cstdio>
#include <vector>

#include "viper/config.h"
#include "viper/transports/private_dir.h"

#if VIPER_HAVE_MPI
#include <mpi.h>
#endif

namespace viper {
namespace transports {

bool MpiSession::Compiled() { return VIPER_HAVE_MPI != 0; }

#if VIPER_HAVE_MPI

bool MpiSession::Active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

StatusOr<std::unique_ptr<MpiSession>> MpiSession::Init(int* argc, char*** argv) {
  std::unique_ptr<MpiSession> session(new MpiSession());
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      return UnavailableError("MPI_Init_thread failed");
    }
    session->owns_init_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    return FailedPreconditionError(
        "MPI does not provide MPI_THREAD_MULTIPLE (the transports' background threads need it)");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &session->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &session->size_);
  return session;
}

MpiSession::~MpiSession() {
  if (owns_init_ && Active()) MPI_Finalize();
}

Status MpiSession::Barrier() {
  if (!Active()) return FailedPreconditionError("MPI is not initialised");
  if (MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS) return AbortedError("MPI_Barrier failed");
  return Status::Ok();
}

StatusOr<std::string> MpiSession::MakeSharedPrivateDirectory(const std::string& parent, const std::string& prefix) {
  if (!Active()) return FailedPreconditionError("MPI is not initialised");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // [0] = 1 when made, then the path or the error, NUL-terminated.
  std::vector<char> message(4096, '\0');
  if (rank == 0) {
    auto made = MakePrivateDirectory(parent, prefix);
    const std::string text = made.ok() ? *made : made.status().message();
    message[0] = made.ok() ? 1 : 0;
    std::snprintf(message.data() + 1, message.size() - 1, "%s", text.c_str());
  }
  if (MPI_Bcast(message.data(), static_cast<int>(message.size()), MPI_CHAR, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
    return AbortedError("MPI_Bcast of the run's directory failed");
  message.back() = '\0';
  const std::string text(message.data() + 1);
  if (message[0] != 1) return FailedPreconditionError("rank 0: " + text);
  return text;
}

#else

bool MpiSession::Active() { return false; }
StatusOr<std::unique_ptr<MpiSession>> MpiSession::Init(int*, char***) {
  return UnavailableError("Viper was built without MPI (VIPER_HAVE_MPI=0)");
}
MpiSession::~MpiSession() = default;
Status MpiSession::Barrier() { return UnavailableError("Viper was built without MPI"); }
StatusOr<std::string> MpiSession::MakeSharedPrivateDirectory(const std::string&, const std::string&) {
  return UnavailableError("Viper was built without MPI");
}

#endif

}  // namespace transports
}  // namespace viper
