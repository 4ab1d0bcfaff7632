#!/usr/bin/env bash
# One command for the PyTorch example on a fresh Debian 12 machine: installs
# what is missing and builds (scripts/build.sh, the viper module included),
# then runs train_and_serve.py under mpirun with $VIPER_NP ranks (default 3:
# one producer, two consumers). Arguments go to train_and_serve.py, e.g.
#   run.sh --drift label-swap --json out/swap.json   # + out/swap.staleness.csv.gz
# (with --drift label-swap|rotation and a --json file the producer writes a
# staleness table next to it; --staleness-table PATH|none to choose).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${VIPER_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" >&2
if [ ! -d "$build/python/viper" ]; then
  echo "run.sh: the viper Python module was not built (see $build/configure.log)" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
exec mpirun --oversubscribe -np "${VIPER_NP:-3}" /usr/bin/python3 "$root/examples/pytorch/train_and_serve.py" "$@"
