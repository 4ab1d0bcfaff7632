#!/usr/bin/env bash
# Evaluates every log of some directories with one viper binary, so that two
# builds compare on the same files (bench/pool.py pools and compares them).
# Usage: bench/pool.sh [--clock wall|producer|both] [--only REGEX] [--jobs N] OUT_DIR VIPER DIR...
#   DIR: a directory of logs and their staleness tables: a held-out set as
#     bench/heldout.sh --train-only wrote it, bench/devsets/setN, datasets/logs.
#     Every *.csv.gz in it that is neither a staleness table nor a causal
#     bound's partner (NAME-once.csv.gz, NAME-calm.csv.gz or NAME-atT.csv.gz,
#     bench/heldout.sh --partners, --calm-partners or --onset-partners) is a log;
#     a log without a table beside it is judged on its diagonal.
#   --clock: the traffic clock (default wall: the one the slow tiers' regret
#     lives on; both: two evaluations per directory).
#   --only REGEX: only the logs whose file name matches (grep -E), e.g.
#     'recur|swap'. On a 2-core VM with another evaluation beside it: about
#     2 minutes for the 48 recurring and swap cases of the shipped logs and
#     sets 1, 3, 4; about 20 minutes for every log of those and of held-out
#     sets 8-16 (540 table cases).
#   --jobs N: run up to N evaluations (one directory and clock each) at
#     once (default 1). A 2-core VM runs the full pool (the shipped logs,
#     development sets 1, 3, 4, held-out sets 5-20: 858 wall cases) in
#     about 8 minutes with --jobs 2 (about 15 minutes with one). The
#     reports are the same: each evaluation is deterministic and writes
#     its own files; the progress lines come in the order they end.
# Writes OUT_DIR/NAME-CLOCK.json (viper.evaluate/1: 20% warm-up, gpu/host/pfs,
# both windows) and OUT_DIR/NAME-CLOCK.txt (its table), NAME being the
# directory's name (two directories of one name are bad usage), and prints a
# line per evaluation. Evaluations are deterministic: one run per build.
# Exit status: 0; 1 when an evaluation failed (the others still run); 2 on
# bad usage.
set -uo pipefail
clocks=(wall)
only=""
jobs=1
usage() { echo "pool.sh: $1 (see --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --clock)
      [ $# -ge 2 ] || usage "--clock needs wall, producer or both"
      case "$2" in wall|producer) clocks=("$2") ;; both) clocks=(producer wall) ;;
        *) usage "--clock '$2': expected wall, producer or both" ;; esac
      shift 2 ;;
    --only) [ $# -ge 2 ] || usage "--only needs a regular expression"; only="$2"; shift 2 ;;
    --jobs)
      [ $# -ge 2 ] || usage "--jobs needs a count"
      [[ "$2" =~ ^[1-9][0-9]?$ ]] || usage "--jobs '$2': expected a whole number from 1 to 99"
      jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) usage "unknown option $1" ;;
    *) break ;;
  esac
done
[ $# -ge 3 ] || usage "expected OUT_DIR VIPER DIR..."
out="$1" viper="$2"
shift 2
[ -x "$viper" ] || usage "'$viper' is not an executable viper"
declare -A seen=()
for dir in "$@"; do
  [ -d "$dir" ] || usage "'$dir' is not a directory"
  name="$(basename "$(cd "$dir" && pwd)")"
  [ -z "${seen[$name]:-}" ] || usage "two directories named '$name' ($dir and ${seen[$name]}): their reports would collide"
  seen[$name]="$dir"
done
mkdir -p "$out" || exit 1
status=0
# One evaluation: a directory's logs under one clock. Exit 1 when it failed.
evaluate() {
  local name="$1" list="$2" count="$3" clock="$4" start=$SECONDS
  if "$viper" evaluate --logs "$list" --staleness auto --warmups 20% --traffic-clock "$clock" \
      --json "$out/$name-$clock.json" --quiet >"$out/$name-$clock.txt" 2>&1; then
    echo "== $name ($clock clock): $count logs in $((SECONDS - start)) s -> $out/$name-$clock.json" >&2
  else
    echo "== $name ($clock clock): viper evaluate failed; see $out/$name-$clock.txt" >&2
    return 1
  fi
}
running=0
for dir in "$@"; do
  name="$(basename "$(cd "$dir" && pwd)")"
  logs=()
  for f in "$dir"/*.csv.gz; do
    [ -f "$f" ] || continue
    base="$(basename "$f")"
    case "$base" in *.staleness.csv.gz|*-once.csv.gz|*-calm.csv.gz|*-at[0-9]*.csv.gz) continue ;; esac
    if [ -n "$only" ] && ! grep -qE -- "$only" <<<"$base"; then continue; fi
    logs+=("$f")
  done
  if [ ${#logs[@]} -eq 0 ]; then
    echo "== $name: no log${only:+ matching '$only'}, skipped" >&2
    continue
  fi
  list="$(IFS=,; echo "${logs[*]}")"
  for clock in "${clocks[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
      wait -n || status=1
      running=$((running - 1))
    fi
    evaluate "$name" "$list" "${#logs[@]}" "$clock" &
    running=$((running + 1))
  done
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
