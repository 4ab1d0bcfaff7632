#!/usr/bin/env bash
# The live delta figures of workflow/README.md ("Fine-tuning with frozen
# layers"): a frozen-backbone fine-tune under `viper run --transport pfs`,
# with and without --delta, the same strategy, RUNS runs each (default 3),
# alternated so that machine load falls on both alike. Prints mean +- sd of
# the update latency and CIL and the bytes written per version, and keeps
# each run's JSON in $OUT (default /tmp/viper-live-finetune).
# Usage: scripts/live_finetune_delta.sh [path/to/viper] (default build/apps/viper)
# Needs the pretrained weights: MODEL (default the 1024x1024 one that
# WIDE=1 datasets/pretrained/make_pretrained.sh makes), HIDDEN, FREEZE.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
viper="${1:-$root/build/apps/viper}"
out="${OUT:-/tmp/viper-live-finetune}"
model="${MODEL:-$root/datasets/pretrained/mlp1024x1024-classes0-4.safetensors}"
hidden="${HIDDEN:-1024,1024}"
freeze="${FREEZE:-2}"
runs="${RUNS:-3}"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(run --workload trainer --transport pfs --hidden "$hidden" --init-model "$model" --freeze "$freeze"
      --train-samples 30000 --max-iterations "${ITERATIONS:-600}" --val-every 50 --strategy "${STRATEGY:-optimal}"
      --quiet ${EXTRA:-})
for i in $(seq 1 "$runs"); do
  for mode in full delta; do
    flag=(); [ "$mode" = delta ] && flag=(--delta)
    echo "== run $i, $mode: mpirun -np 2 viper ${args[*]} ${flag[*]}" >&2
    mpirun --oversubscribe -np 2 "$viper" "${args[@]}" "${flag[@]}" --json "$out/$mode-$i.json" >/dev/null
  done
done
/usr/bin/python3 - "$out" "$runs" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
for mode in ("full", "delta"):
    lat, cil, written, full, versions, per_request, seconds, transfer = [], [], [], [], [], [], [], []
    for i in range(1, runs + 1):
        j = json.load(open(f"{out}/{mode}-{i}.json"))
        lat.append(j["mean_update_latency_s"] * 1e3)
        cil.append(j["cil_per_consumer"])
        later = [v for v in j["versions"] if v["version"] > 0 and v.get("written_bytes")]
        versions.append(len(j["versions"]))
        per_request.append(j["cil"] / j["requests"])
        seconds.append(j["training_end_s"])
        transfer += [v["transfer_s"] * 1e3 for v in later]
        written += [v["written_bytes"] for v in later]
        full += [v["bytes"] for v in later]
    sd = lambda x: statistics.stdev(x) if len(x) > 1 else 0.0
    print(f"{mode:5s}: update latency {statistics.mean(lat):.1f} +- {sd(lat):.1f} ms {['%.1f' % x for x in lat]}, "
          f"CIL per consumer {statistics.mean(cil):.1f} +- {sd(cil):.1f} {['%.1f' % x for x in cil]}, "
          f"versions {versions}, bytes written per later version median {statistics.median(written):.0f} of "
          f"{statistics.median(full):.0f} (min {min(written)}, max {max(written)}), producer write (transfer_s) "
          f"median {statistics.median(transfer):.1f} ms, mean loss per request "
          f"{['%.4f' % x for x in per_request]}, training {['%.1f' % x for x in seconds]} s")
PY
