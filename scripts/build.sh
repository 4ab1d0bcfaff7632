#!/usr/bin/env bash
# Configures (once) and builds Viper incrementally into $VIPER_BUILD_DIR
# (default: build/). Installs missing Debian packages first.
# Extra arguments go to CMake at configure time (e.g. -DCMAKE_BUILD_TYPE=Asan).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${VIPER_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
# ccache, when installed: scripts/ccache-env.sh.
source "$root/scripts/ccache-env.sh"
if [ ! -f "$build/build.ninja" ] || [ $# -gt 0 ]; then
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -G Ninja "${launcher[@]}" "$@" >"$build/configure.log" 2>&1 || {
    cat "$build/configure.log" >&2; exit 1; }
  sed -n '/The following features have been/,/^$/p' "$build/configure.log" >&2 || true
fi
jobs="${VIPER_JOBS:-$(nproc)}"
cmake --build "$build" -j "$jobs"
