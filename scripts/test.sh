#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs CTest
# (unit tests, MPI tests under mpirun, CLI tests). GPU tests skip without a
# device, saying why. Arguments go to ctest (e.g. -R predictor, -L mpi).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${VIPER_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$build"
ctest --output-on-failure -j "${VIPER_TEST_JOBS:-2}" "$@"
