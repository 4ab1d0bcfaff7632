#!/usr/bin/env bash
# The GPU checks, run on a lent device machine (see scripts/device_pack.sh):
# the GPU tests (single process, mpirun -np 2, the groups at 4, 5 and 6
# ranks) and the GPU benchmarks (BM_TransportsGpu, BM_TransportsGpuDelta,
# BM_TransportsGroupGpuReshard without and with CUDA MPS), and when packed
# with Fashion-MNIST the live trainer on the gpu and host tiers (viper run,
# -np 2, epoch on both, then online on the gpu tier). A log and the
# benchmarks' JSON go to $OUT (the device tool's folder; /tmp/viper-gpu
# elsewhere). Takes about a minute on an H200. Exit 1 if a test failed.
set -uo pipefail
out="${OUT:-/tmp/viper-gpu}"
mkdir -p "$out" /tmp/dev
exec > >(tee "$out/log.txt") 2>&1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tar -C /tmp/dev -xJf "$root/.devpack/dev.tar.xz" || { echo "no .devpack/dev.tar.xz: run scripts/device_pack.sh here first"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
mpirun --version | head -1
export LD_LIBRARY_PATH=/tmp/dev/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
b=/tmp/dev/bin
m="mpirun --oversubscribe"
failed=0
check() {  # name, command...: gtest output without the RUN/OK lines
  local name="$1"; shift
  echo "=== $name"
  timeout 180 "$@" --gtest_color=no 2>&1 | grep -vE '^\[ +(RUN|OK) ' | grep -E 'FAILED|PASSED|SKIPPED|Failure|error' | sort | uniq -c
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$name: FAILED"; failed=1; }
}
check "single-process GPU tests" $b/viper_transports_tests --gtest_filter='*Sum64*:*Device*:*Gpu*:*Cuda*'
check "mpirun -np 2 GPU tests" $m -np 2 $b/viper_transports_mpi_tests --gtest_filter='*Gpu*'
for n in 4 5 6; do
  check "groups, mpirun -np $n, GPU tests" $m -np "$n" $b/viper_transports_group_tests --gtest_filter='*Gpu*'
done
bench() {  # name, ranks, filter
  echo "=== $1"
  timeout 240 $m -np "$2" $b/viper-bench --benchmark_filter="$3" --benchmark_color=false \
    --benchmark_out="$out/$1.json" --benchmark_out_format=json 2>&1 | grep '^BM_'
}
bench gpu 2 'BM_TransportsGpu/'
bench gpu_delta 2 'BM_TransportsGpuDelta'
bench group_gpu 6 'TransportsGroupGpu'
if command -v nvidia-cuda-mps-control >/dev/null; then  # the same, the ranks' contexts under MPS
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
  mkdir -p /tmp/mps /tmp/mpslog
  nvidia-cuda-mps-control -d && bench group_gpu_mps 6 'TransportsGroupGpu'
  echo quit | nvidia-cuda-mps-control
fi
data="$root/.devpack/fashion-mnist"
if [ -f "$data/train-images-idx3-ubyte.gz" ] && [ -x $b/viper ]; then
  # The build looks for the dataset where this machine's Debian package puts it.
  if [ ! -e /usr/share/datasets/fashion-mnist ]; then mkdir -p /usr/share/datasets && cp -r "$data" /usr/share/datasets/; fi
  live() {  # name, viper run arguments...
    local name="$1"; shift
    echo "=== live: $name"
    timeout 300 $m -np 2 $b/viper run --workload trainer --quiet --json "$out/live_$name.json" "$@" 2>&1 | tail -4
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "live $name: FAILED"; failed=1; }
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
d["versions"] = len(d.get("versions", []))
print("  " + ", ".join(f"{k} {d[k]}" for k in ("tier", "strategy", "versions", "cil", "mean_update_latency_s", "total_stall_s", "slowdown_fraction", "training_end_s", "every_version_delivered") if k in d))' "$out/live_$name.json" || true
  }
  live gpu_epoch --transport gpu --strategy epoch
  live host_epoch --transport host --strategy epoch
  live gpu_online --transport gpu --strategy online
fi
exit $failed
