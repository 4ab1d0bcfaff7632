#!/usr/bin/env bash
# The main job on shipped real logs: fit the predictor on the warm-up, plan
# with every strategy, simulate each schedule on the log's truth (test_loss, a
# sample the planners never see), print the comparison, write JSON and plots
# to out/. First on a plain run (sgd-h256), then on a drifting one
# (drift-sgd-h256: new classes arrive mid-run), where scheduling matters most,
# and last on a run whose TRAFFIC drifts (swap-sgd-h256: two labels swap at
# iteration 2500), judged with its staleness table: every request is charged
# the loss of its version on the traffic as it is at the request's time.
# Installs what is missing and builds first. Extra arguments go to both
# `viper simulate` runs (e.g. --transport pfs).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${VIPER_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" >&2
mkdir -p "$root/out"
echo "== a plain run: datasets/logs/sgd-h256.csv.gz"
"$build/apps/viper" simulate --log "$root/datasets/logs/sgd-h256.csv.gz" --warmup 20% \
  --json "$root/out/main-job.json" --plot "$root/out/main-job.png" --trace "$root/out/main-job-trace.json" "$@"
echo
echo "== a drifting run (classes 5-9 arrive at iteration 1500): datasets/logs/drift-sgd-h256.csv.gz"
"$build/apps/viper" simulate --log "$root/datasets/logs/drift-sgd-h256.csv.gz" --warmup 20% \
  --json "$root/out/main-job-drift.json" --plot "$root/out/main-job-drift.png" "$@"
echo
echo "== traffic drift (labels 0 and 6 swap at iteration 2500), judged on its staleness table: datasets/logs/swap-sgd-h256.csv.gz"
"$build/apps/viper" simulate --log "$root/datasets/logs/swap-sgd-h256.csv.gz" --warmup 20% \
  --staleness "$root/datasets/logs/swap-sgd-h256.staleness.csv.gz" \
  --json "$root/out/main-job-staleness.json" --plot "$root/out/main-job-staleness.png" "$@"
echo "wrote out/main-job.json, out/main-job.png, out/main-job-drift.json, out/main-job-drift.png,"
echo "out/main-job-staleness.json, out/main-job-staleness.png (plots; the last with the table as a heatmap),"
echo "out/main-job-trace.json (the plain run's optimal schedule; open in https://ui.perfetto.dev)"
