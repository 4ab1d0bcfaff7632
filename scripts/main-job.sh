#!/usr/bin/env bash
# The main job on a shipped real log: fit the predictor on the warm-up, plan
# with every strategy, simulate each schedule on the log's true curve, print
# the comparison, write JSON and a plot to out/. Installs what is missing and
# builds first. Extra arguments go to `viper simulate` (e.g. --transport pfs).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${VIPER_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" >&2
mkdir -p "$root/out"
log="$root/datasets/logs/sgd-h256.csv.gz"
"$build/apps/viper" simulate --log "$log" --warmup-fraction 0.2 \
  --json "$root/out/main-job.json" --plot "$root/out/main-job.png" --trace "$root/out/main-job-trace.json" "$@"
echo "wrote out/main-job.json, out/main-job.png (plot), out/main-job-trace.json (open in https://ui.perfetto.dev)"
