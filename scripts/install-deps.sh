#!/usr/bin/env bash
# Installs the Debian packages Viper needs, only those that are missing.
# Idempotent and quiet when nothing is missing, so the quick-start commands
# can call it every time.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libeigen3-dev libceres-dev libgoogle-glog-dev libgflags-dev
  libboost-program-options-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  nlohmann-json3-dev libxxhash-dev liburing-dev zlib1g-dev
  libfmt-dev libspdlog-dev
  gnuplot-nox dataset-fashion-mnist
  pybind11-dev python3-dev python3-torch python3-numpy python3-pytest python3-mpi4py
  # Sanitizer builds and libFuzzer harnesses (scripts/sanitize.sh, scripts/fuzz.sh):
  # clang, its sanitizer and libFuzzer runtimes, llvm-symbolizer for the stacks.
  clang libclang-rt-14-dev llvm
  # A compiler cache: the test command builds four configurations (release,
  # ASan, TSan, fuzz), and a clone elsewhere (CI) rebuilds unchanged files
  # from the cache (scripts/ccache-env.sh).
  ccache
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "viper: installing missing Debian packages: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/viper-apt.log 2>&1; then
  $SUDO apt-get update >>/tmp/viper-apt.log 2>&1
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/viper-apt.log 2>&1 || {
    echo "viper: apt-get install failed; see /tmp/viper-apt.log" >&2
    tail -n 20 /tmp/viper-apt.log >&2
    exit 1
  }
fi
