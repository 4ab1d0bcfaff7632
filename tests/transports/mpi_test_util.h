// Helpers for the tests that run under mpirun (transports and workflow).
#pragma once

#include <mpi.h>

namespace viper {
namespace testing_util {

// This process's rank in MPI_COMM_WORLD, and the world's size.
inline int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int Size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

}  // namespace testing_util
}  // namespace viper
