#!/usr/bin/env bash
# Packs the GPU checks for a lent device machine (one NVIDIA GPU, CUDA, an
# Ubuntu image with its own Open MPI 4.1 and no Debian packages): the test
# and benchmark binaries built here (stripped) and the shared libraries they
# need that such a machine lacks, as .devpack/dev.tar.xz (about 10 MB; the
# working tree that travels is capped at 64 MiB). Open MPI itself is not
# packed: the device's libmpi.so.40 is ABI compatible with Debian's 4.1.4,
# and a second copy of PMIx beside the device's breaks its mpirun.
# Then, with the device tool: run `bash scripts/device_gpu.sh`, carry [".devpack"].
# With the Fashion-MNIST files of this machine (VIPER_FASHION_MNIST_DIR, 30 MB)
# in .devpack/ too, for the live trainer on the gpu tier.
# Usage: scripts/device_pack.sh [build_dir]   (default build/; build it first)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
bins=(tests/transports/viper_transports_tests tests/transports/viper_transports_mpi_tests
      tests/transports/viper_transports_group_tests bench/viper-bench apps/viper)
for b in "${bins[@]}"; do
  [ -x "$build/$b" ] || { echo "device_pack: $build/$b is missing: build it first (scripts/build.sh)" >&2; exit 1; }
done
grep -qx "/.devpack/" "$root/.git/info/exclude" 2>/dev/null || echo "/.devpack/" >>"$root/.git/info/exclude"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$root/.devpack"
for b in "${bins[@]}"; do strip -o "$stage/bin/$(basename "$b")" "$build/$b"; done
# Every resolved library but glibc's, the compiler runtime's and Open MPI's own.
for b in "$stage"/bin/*; do ldd "$b" | awk '$3 ~ /^\// {print $3}'; done | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libpthread|libdl|librt)\.so' |
  grep -v -E '/(libmpi|libopen-(rte|pal)|libpmix|libhwloc|libevent[^/]*|libmca_common[^/]*|libuc[mpst]|libfabric|libpsm[^/]*|libibverbs|librdmacm|libnl-[^/]*|libnuma)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
tar -C "$stage" -cJf "$root/.devpack/dev.tar.xz" .
data="$(sed -n 's/^VIPER_FASHION_MNIST_DIR:PATH=//p' "$build/CMakeCache.txt")"
rm -rf "$root/.devpack/fashion-mnist"
if [ -n "$data" ] && [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$root/.devpack/fashion-mnist"
  cp "$data"/*-ubyte.gz "$root/.devpack/fashion-mnist/"
fi
echo "device_pack: $(du -sh "$root/.devpack" | cut -f1) in .devpack/ ($(ls "$stage/lib" | wc -l) libraries$([ -d "$root/.devpack/fashion-mnist" ] && echo ", Fashion-MNIST"))"
