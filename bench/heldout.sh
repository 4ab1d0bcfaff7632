#!/usr/bin/env bash
# A held-out check of the planners on staleness tables unlike the shipped ones.
# Usage: bench/heldout.sh [OUT_DIR] [path/to/viper]   (default OUT_DIR: a new
# temporary directory; viper: build/apps/viper)
#
# The shipped tables (datasets/logs/*.staleness.csv.gz) are the ones the
# planners were developed on. This trains six other runs with `viper train`
# (hidden 128 instead of 256, 4 epochs, validation every 40 iterations, other
# seeds, drift times, periods, angles and classes; each about 20 s to 2 min on
# a 2-core VM, about 4 minutes in all), writes their tables next to their logs in
# OUT_DIR (nothing in the repository changes), then runs `viper evaluate` on
# them at 20% warm-up under both traffic clocks:
#   OUT_DIR/evaluate-producer.json, OUT_DIR/evaluate-wall.json (viper.evaluate/1)
# and prints each summary table. Exit status: that of the first failing step.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$(mktemp -d -t viper-heldout-XXXXXX)}"
viper="${2:-$here/../build/apps/viper}"
mkdir -p "$out"
common=(--dataset fashion-mnist --batch 64 --val-samples 2000 --test-samples 5000 --progress-every 0
        --hidden 128 --epochs 4 --val-every 40)
sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
run() {
  local name="$1"; shift
  echo "== $name: viper train $*" >&2
  "$viper" train "${common[@]}" "$@" --log-out "$out/$name.csv.gz" \
      --staleness-table "$out/$name.staleness.csv.gz" --json "$out/$name.train.json" > /dev/null
}
run h-recur60  "${sgd[@]}" --seed 2 --drift recurring --drift-rotation-degrees 60 --drift-at-iteration 1200 \
               --drift-period 500
run h-swap     --optimizer sgd --lr 0.03 --momentum 0.9 --seed 3 --drift label-swap --drift-swap-classes 2,4 \
               --drift-at-iteration 1500
run h-nodrift  --optimizer adam --lr 0.001 --seed 7
run h-classinc "${sgd[@]}" --seed 5 --drift class-incremental --drift-initial-classes 3 --drift-at-iteration 1800
run h-prior    "${sgd[@]}" --seed 6 --drift prior-shift --drift-prior-classes 1,3,5 --drift-prior-mass 0.8 \
               --drift-at-iteration 1000 --drift-duration 1500
run h-rotate   "${sgd[@]}" --seed 4 --drift rotation --drift-rotation-degrees 45 --drift-at-iteration 1000 \
               --drift-duration 1200 --staleness-max-versions 24
logs="$out/h-recur60.csv.gz,$out/h-swap.csv.gz,$out/h-nodrift.csv.gz,$out/h-classinc.csv.gz,$out/h-prior.csv.gz,$out/h-rotate.csv.gz"
for clock in producer wall; do
  echo "== evaluate, traffic clock $clock" >&2
  "$viper" evaluate --logs "$logs" --staleness auto --warmups 20% --traffic-clock "$clock" \
      --json "$out/evaluate-$clock.json" --quiet
done
echo "tables, logs and evaluations in $out" >&2
