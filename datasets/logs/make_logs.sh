#!/usr/bin/env bash
# Regenerates the shipped Fashion-MNIST training logs with `viper train`.
# Usage: datasets/logs/make_logs.sh [path/to/viper] (default: build/apps/viper)
# Writes the logs here (or to $OUT_DIR) and each run's summary to $JSON_DIR/<name>.json
# (default /tmp); the figures in datasets/README.md come from those summaries.
# The drift runs and the no-drift control sgd-h256 also write their staleness
# table, <name>.staleness.csv.gz (datasets/README.md, "Staleness tables").
# ONLY="name ..." regenerates only those runs. collapse-sgd-h256 diverges at
# iteration 2500 (--lr-milestones 2500:60): a model that must never be published. rotate-sgd-h256 bounds its table
# to 24 kept versions: every point of its 1500-iteration ramp is new traffic
# for every kept version, so an unbounded table costs ~1,500 evaluations of
# 7,000 images (about 9 minutes on the shared 2-core VM).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
viper="${1:-$here/../../build/apps/viper}"
out="${OUT_DIR:-$here}"
# Validation = test-split images 0-1999 (what the producer sees); test = images
# 2000-6999 (disjoint; the inference traffic's truth).
common=(--dataset fashion-mnist --batch 64 --seed 1 --val-samples 2000 --test-samples 5000 --progress-every 10)
run() {
  local name="$1"; shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
  echo "== $name: viper train $* ${common[*]}" >&2
  nice -n 10 "$viper" train "${common[@]}" "$@" --log-out "$out/$name.csv.gz" --json "${JSON_DIR:-/tmp}/$name.json"
}
# With its staleness table.
run_table() {
  local name="$1"; shift
  run "$name" "$@" --staleness-table "$out/$name.staleness.csv.gz"
}
run_table sgd-h256    --hidden 256       --optimizer sgd  --lr 0.05  --momentum 0.9 --epochs 5  --val-every 50
run adam-h256         --hidden 256       --optimizer adam --lr 0.001               --epochs 5  --val-every 50
run sgd-h32           --hidden 32        --optimizer sgd  --lr 0.05  --momentum 0.9 --epochs 5  --val-every 50
run sgd-h1024x1024    --hidden 1024,1024 --optimizer sgd  --lr 0.02  --momentum 0.9 --epochs 3  --val-every 50
run sgd-h256-cosine   --hidden 256       --optimizer sgd  --lr 0.1   --momentum 0.9 --epochs 5  --val-every 50 --cosine
run_table drift-sgd-h256  --hidden 256   --optimizer sgd  --lr 0.05  --momentum 0.9 --epochs 5  --val-every 50 \
                      --drift class-incremental --drift-initial-classes 5 --drift-at-iteration 1500
run long-sgd-h32      --hidden 32        --optimizer sgd  --lr 0.02  --momentum 0.9 --epochs 50 --val-every 250
run_table swap-sgd-h256   --hidden 256   --optimizer sgd  --lr 0.05  --momentum 0.9 --epochs 5  --val-every 50 \
                      --drift label-swap --drift-swap-classes 0,6 --drift-at-iteration 2500
run_table rotate-sgd-h256 --hidden 256   --optimizer sgd  --lr 0.05  --momentum 0.9 --epochs 5  --val-every 50 \
                      --drift rotation --drift-rotation-degrees 90 --drift-at-iteration 1500 --drift-duration 1500 \
                      --staleness-max-versions 24
run_table recur-sgd-h256  --hidden 256   --optimizer sgd  --lr 0.05  --momentum 0.9 --epochs 5  --val-every 50 \
                      --drift recurring --drift-rotation-degrees 90 --drift-at-iteration 1000 --drift-period 750
run_table prior-sgd-h256  --hidden 256   --optimizer sgd  --lr 0.05  --momentum 0.9 --epochs 5  --val-every 50 \
                      --drift prior-shift --drift-prior-classes 0,2,4,6 --drift-prior-mass 0.9 \
                      --drift-at-iteration 1500 --drift-duration 1000
# A run that collapses: at iteration 2500 the learning rate jumps 60x (0.05 -> 3,
# a mistaken step schedule) and SGD diverges to chance level for good. No
# traffic drift: every version after the collapse is worse on today's traffic
# than any served before it, so a planner must never publish one.
run_table collapse-sgd-h256 --hidden 256 --optimizer sgd  --lr 0.05  --momentum 0.9 --epochs 5  --val-every 50 \
                      --lr-milestones 2500:60
# A run that diverges to NaN: the same run with the learning rate x1e12 at
# 2500 (a units mistake in a schedule). Its losses pass 1e21 and turn NaN at
# the next step; with --on-divergence continue the trainer goes on training
# the NaN model, as a loop without a NaN check would, and logs NaN. Read it
# with --non-finite diverged: every version from 2500 on must never be served.
run_table diverge-sgd-h256 --hidden 256 --optimizer sgd  --lr 0.05  --momentum 0.9 --epochs 5  --val-every 50 \
                      --lr-milestones 2500:1e12 --on-divergence continue
# The partner of recur-sgd-h256 for the causal pair bound (README "The causal
# pair bound"): the same run, its period past the run's end, so that its
# traffic never returns. Only its table is shipped, in datasets/pairs (its log
# goes to /tmp; every table here has its log beside it): it agrees with
# recur-sgd-h256's bit for bit until the first return (1750).
if [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" recur-once-sgd-h256 "* ]]; then
  echo "== recur-once-sgd-h256" >&2
  nice -n 10 "$viper" train "${common[@]}" --hidden 256 --optimizer sgd --lr 0.05 --momentum 0.9 --epochs 5 \
      --val-every 50 --drift recurring --drift-rotation-degrees 90 --drift-at-iteration 1000 --drift-period 1000000 \
      --log-out /tmp/recur-once-sgd-h256.csv.gz --staleness-table "${PAIRS_DIR:-$here/../pairs}/recur-once-sgd-h256.staleness.csv.gz" \
      --json "${JSON_DIR:-/tmp}/recur-once-sgd-h256.json"
fi
