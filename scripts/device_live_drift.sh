#!/usr/bin/env bash
# Simulator vs live under traffic drift on a lent device machine (packed by
# scripts/device_pack.sh with Fashion-MNIST): `viper run --workload trainer`
# with its own staleness table and --compare-simulation, the command of
# workflow/README.md's "Simulator vs live, judged on the staleness table",
# for online under a label swap and a rotation, with the default drift
# prior and with --drift-prior 0. A live run's traffic follows the
# producer's clock, where the prior prices nothing: the two settings must
# plan alike, and sim vs live is the fidelity check. The device's 16 cores
# keep the two ranks off each other (the 2-core VM's runs shared it with
# builds). Stops launching runs after BUDGET_S seconds (default 420). One
# line per run; each run's JSON in $OUT (the device tool's folder;
# /tmp/viper-live elsewhere).
# Usage: bash scripts/device_live_drift.sh [runs per setting, default 2]
set -uo pipefail
out="${OUT:-/tmp/viper-live}"
runs="${1:-2}"
budget="${BUDGET_S:-420}"
mkdir -p "$out" /tmp/dev
exec > >(tee "$out/live_drift.txt") 2>&1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tar -C /tmp/dev -xJf "$root/.devpack/dev.tar.xz" || { echo "no .devpack/dev.tar.xz: run scripts/device_pack.sh here first"; exit 1; }
data="$root/.devpack/fashion-mnist"
[ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST in .devpack/: pack it (scripts/device_pack.sh)"; exit 1; }
if [ ! -e /usr/share/datasets/fashion-mnist ]; then mkdir -p /usr/share/datasets && cp -r "$data" /usr/share/datasets/; fi
export LD_LIBRARY_PATH=/tmp/dev/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
nproc
start=$SECONDS
failed=0
for k in $(seq 1 "$runs"); do
  for drift in label-swap rotation; do
    for prior in default 0; do
      if [ $((SECONDS - start)) -gt "$budget" ]; then echo "budget of $budget s spent: stopping"; exit $failed; fi
      name="${drift}_prior-${prior}_$k"
      extra=(); [ "$prior" = default ] || extra=(--drift-prior "$prior")
      [ "$drift" = rotation ] && extra+=(--drift-duration 600)
      t0=$SECONDS
      timeout 240 mpirun --oversubscribe -np 2 /tmp/dev/bin/viper run --workload trainer --epochs 5 --train-samples 30000 \
        --drift "$drift" --drift-at-iteration 1170 --strategy online --compare-simulation \
        --staleness-table "/tmp/$name.csv" --quiet --json "$out/$name.json" "${extra[@]}" > "/tmp/$name.log" 2>&1
      rc=$?
      [ $rc -eq 0 ] || { echo "$name: rc $rc"; tail -5 "/tmp/$name.log"; failed=1; continue; }
      python3 - "$out/$name.json" "$name" $((SECONDS - t0)) <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); s = d.get("simulation", {})
n = max(1, s.get("requests", 1))
print(f"{sys.argv[2]:26s} {sys.argv[3]:>3s} s  checkpoints {len(d.get('versions', [])):2d}  "
      f"live {s.get('measured_cil_per_consumer', float('nan')) / n:.3f}/request  "
      f"sim {s.get('cil_per_consumer', float('nan')) / n:.3f}/request  sim vs live {100 * s.get('cil_error', float('nan')):+.1f}%  "
      f"judge {s.get('judge', '?')}")
PY
    done
  done
done
exit $failed
