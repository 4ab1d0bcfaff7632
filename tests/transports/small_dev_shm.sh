#!/usr/bin/env bash
# Runs the MPI transport test binary in its own mount namespace with a 16 MiB
# /dev/shm (too small for the shm protocol's segment), for
# MpiHost.ShmWithoutRoomInDevShmFallsBackToTwoSided.
# usage: small_dev_shm.sh MPIEXEC TEST_BINARY
# Exit 77 (CTest: skipped) where this machine does not allow a private mount
# namespace (unprivileged containers).
set -u
mpiexec=$1 binary=$2
if ! unshare -m true 2>/dev/null; then
  echo "skipped: unshare -m is not permitted here (needs CAP_SYS_ADMIN)"
  exit 77
fi
exec unshare -m bash -c '
  set -e
  mount -t tmpfs -o size=16m tmpfs /dev/shm
  echo "private /dev/shm: $(df -h /dev/shm | tail -1)"
  export VIPER_TEST_SMALL_DEV_SHM=1
  exec "$0" --oversubscribe -np 2 -x VIPER_TEST_SMALL_DEV_SHM "$1" --gtest_filter="MpiHost.ShmWithoutRoom*"
' "$mpiexec" "$binary"
