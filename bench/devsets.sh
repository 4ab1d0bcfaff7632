#!/usr/bin/env bash
# The planners on the frozen development tables (bench/devsets/), so that two
# builds, sessions or machines compare on the same logs.
# Usage: bench/devsets.sh [OUT_DIR] [path/to/viper]   (default OUT_DIR: a new
# temporary directory; viper: build/apps/viper)
#
# bench/devsets/setN holds the logs and staleness tables of bench/heldout.sh
# --set N (N = 1, 3, 4) as trained on the 2-core dev VM on 2026-11-27, and
# the shipped six tables are in datasets/logs. A fresh `bench/heldout.sh`
# draw has the same tables but other wall times (the machine's load moves
# them), and on the slow tiers under the wall clock that alone moves online's
# regret by tens of points per case (bench/README.md, "Ninth session"): compare
# builds on these frozen files, and keep a fresh draw (or --set 5) for the
# check that a change was not fitted to them. These sets guided changes: they
# are not held out.
#
# Writes OUT_DIR/{shipped,set1,set3,set4}-{wall,producer}.json (viper.evaluate/1,
# 20% warm-up, gpu/host/pfs, both windows: 36 cases each) and prints each
# summary table (about 4 minutes on 2 cores). Exit status: that of the first
# failing evaluation.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in -h|--help) sed -n '2,21p' "$0"; exit 0 ;; -*) echo "devsets.sh: unknown option $1 (see --help)" >&2; exit 2 ;; esac
out="${1:-$(mktemp -d -t viper-devsets-XXXXXX)}"
viper="${2:-$here/../build/apps/viper}"
mkdir -p "$out"
logs="$here/../datasets/logs"
declare -A sets
sets[shipped]="$logs/drift-sgd-h256.csv.gz,$logs/prior-sgd-h256.csv.gz,$logs/recur-sgd-h256.csv.gz,$logs/rotate-sgd-h256.csv.gz,$logs/sgd-h256.csv.gz,$logs/swap-sgd-h256.csv.gz"
for n in 1 3 4; do
  files=("$here"/devsets/set$n/*.csv.gz)
  list=""
  for f in "${files[@]}"; do
    case "$f" in *.staleness.csv.gz) ;; *) list="$list${list:+,}$f" ;; esac
  done
  sets[set$n]="$list"
done
for name in shipped set1 set3 set4; do
  for clock in wall producer; do
    echo "== $name, traffic clock $clock" >&2
    "$viper" evaluate --logs "${sets[$name]}" --staleness auto --warmups 20% --traffic-clock "$clock" \
        --json "$out/$name-$clock.json" --quiet | sed -n '/^strategy /,/^val-oracle/p'
  done
done
echo "evaluations in $out" >&2
