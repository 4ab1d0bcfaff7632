#!/usr/bin/env bash
# A held-out check of the planners on staleness tables unlike the shipped ones.
# Usage: bench/heldout.sh [--set 1|3|4|...|24] [--train-only|--partners|--calm-partners|--onset-partners OFFSETS
#                         [--runs NAME,...]] [OUT_DIR] [path/to/viper]
#   --set: which six runs (default 1; see below). --train-only: write the
#   tables and logs, skip the evaluation. OUT_DIR: default a new temporary
#   directory. viper: default build/apps/viper.
#
# The shipped tables (datasets/logs/*.staleness.csv.gz) are the ones the
# planners were developed on. Each set trains six other runs with `viper train`
# (other model sizes, seeds, drift times, periods, angles and classes; each run
# about 20 s to 2 min on a 2-core VM, 4 to 8 minutes a set), writes their
# tables next to their logs in OUT_DIR (nothing in the repository changes),
# then runs `viper evaluate` on them at 20% warm-up under both traffic clocks:
#   OUT_DIR/evaluate-producer.json, OUT_DIR/evaluate-wall.json (viper.evaluate/1)
# and prints each summary table. Exit status: that of the first failing step.
#
# The sets (bench/README.md says which change each one checked; a set that
# guided a change is no longer held out for the next one):
#   1  hidden 128, 4 epochs, validation every 40: recurring 60 degrees every
#      500 from 1200, swap 2/4 at 1500, Adam without drift, class-incremental
#      from 3 classes at 1800, prior shift to 1,3,5 over 1000-2500, rotation
#      to 45 degrees over 1000-2200 (sixth session; "draw 2" is a re-run)
#   3  hidden 192, validation every 60, SGD lr 0.04, seeds 11-16 (seventh)
#   4  hidden 96, 5 epochs, validation every 50, seeds 21-26 (eighth)
#   5  hidden 160, 5 epochs, validation every 45, seeds 31-36, with a run that
#      collapses (ninth)
#   6  hidden 224, 4 epochs, validation every 55, seeds 41-46, a rotation
#      trained with Adam (twelfth)
#   7  hidden 112, 5 epochs, validation every 35, seeds 51-56, a later
#      collapse, a steeper rotation (fourteenth)
#   8  two runs only, several label swaps (--drift-swap-period: swapped,
#      back, swapped, ...): hidden 128 and 176, seeds 61-62 (fourteenth)
#   9  hidden 144, 5 epochs, validation every 40, seeds 71-77, seven runs: a
#      class-incremental start from 2 classes, a fast prior shift, a collapse
#      (sixteenth; trained before any change of that session)
#  10  hidden 176, 4 epochs, validation every 50, seeds 81-87, seven runs:
#      recurring 70 degrees every 450, several swaps every 600, a slow prior
#      shift, a collapse at 1500 (seventeenth; trained before any change)
#  11  hidden 208, 5 epochs, validation every 45, seeds 91-97, seven runs:
#      two class-incremental runs (from 4 and from 8 classes), no collapse
#      (seventeenth; trained after set 10 guided a change, before its
#      evaluation)
#  12  hidden 120, 4 epochs, validation every 42, seeds 101-108, eight runs:
#      recurring 50 degrees every 500, swaps of 0 and 8 every 500, one swap
#      under Adam, class-incremental from 3 classes, a prior shift, rotation,
#      a collapse, no drift (eighteenth; trained before any change)
#  13  hidden 160, 4 epochs, validation every 48, seeds 111-118, eight runs:
#      recurring 65 degrees every 600, swaps of 4 and 6 every 550, one swap
#      of 0 and 2, class-incremental from 5 classes, a prior shift, a slow
#      rotation, a late collapse, no drift (nineteenth; trained before any
#      change)
#  14  hidden 136, 5 epochs, validation every 38, seeds 121-128, eight runs:
#      recurring 40 degrees every 400, swaps of 5 and 9 every 800, one swap
#      under Adam, class-incremental from 4 classes, a fast prior shift to
#      three classes, a steep rotation, a collapse, no drift under SGD
#      (twentieth; trained before any change)
#  15  hidden 184, 4 epochs, validation every 44, seeds 131-138, eight runs:
#      recurring 45 degrees every 550, swaps of 3 and 7 every 650, one swap of
#      1 and 5, class-incremental from 3 classes, a prior shift, a rotation to
#      65 degrees, a collapse, no drift under Adam (twenty-second; trained
#      before any change)
#  16  hidden 152, 5 epochs, validation every 46, seeds 141-149, nine runs:
#      recurring 55 degrees every 700, swaps of 2 and 8 every 600, one swap
#      of 0 and 6, class-incremental from 4 classes, a prior shift, a rotation
#      to 50 degrees, a collapse, no drift under SGD and under Adam
#      (twenty-fifth; trained before its evaluation, after the drift prior's
#      level was chosen on the pool of the earlier sets)
#  17  hidden 168, 5 epochs, validation every 41, seeds 151-158, eight runs:
#      recurring 35 degrees every 500, swaps of 4 and 9 every 500, one swap
#      of 2 and 3, class-incremental from 5 classes, a prior shift to three
#      classes, a rotation to 70 degrees, a collapse, no drift (thirty-
#      seventh; trained before the drift prior's default moved, to check it)
#  18  hidden 200, 4 epochs, validation every 39, seeds 161-169, nine runs:
#      recurring 50 degrees every 650, swaps of 1 and 6 every 550, one swap
#      of 3 and 8, class-incremental from 3 classes, a prior shift to 0,4
#      over 600, a rotation to 55 degrees, a collapse, no drift under SGD
#      and under Adam (forty-first; trained before any change of that
#      session)
#  19  hidden 160, 6 epochs (5622 iterations), validation every 75, seeds
#      171-179, nine runs, every drift late (53-70% of the run, where the
#      other sets drift at 25-45%): recurring 45 degrees every 800 from 3300,
#      swaps of 2 and 7 every 900 from 3000, one swap of 0 and 6 at 3900,
#      class-incremental from 4 classes at 3600, a prior shift to 1,8 over
#      3400-4200, a rotation to 40 degrees over 3200-4400, a collapse at
#      4000, no drift, one swap under Adam (forty-second; trained before any
#      change of that session: a draw outside the pool's timing)
#  20  hidden 480 (a slower model: about three times set 19's seconds per
#      iteration, so each stall is fewer iterations of traffic), 4 epochs,
#      validation every 50, seeds 181-189, nine runs, drifts at 30-45%:
#      recurring 50 degrees every 600 from 1300, swaps of 3 and 5 every 650
#      from 1200, one swap of 1 and 9 at 1500, class-incremental from 3
#      classes at 1400, a prior shift to 2,6 over 1300-1900, a rotation to 50
#      degrees over 1200-2000, a collapse at 1800, no drift, no drift under
#      Adam (forty-second; trained after that session's change, before its
#      evaluation)
#  21  hidden 256, 5 epochs, validation every 55, seeds 191-199, nine runs,
#      drifts at 35-55%: recurring 40 degrees every 700 from 1700, swaps of
#      4 and 7 every 600 from 1800, one swap of 2 and 9 at 2300,
#      class-incremental from 5 classes at 2000, a prior shift to 0,3,7 over
#      1900-2600, a rotation to 65 degrees over 1700-2700, a collapse at
#      2500, no drift, one swap of 5 and 8 under Adam at 2100 (forty-third;
#      trained before that session's planner change was chosen, evaluated
#      once with it)
#  22  hidden 224, 4 epochs, validation every 65 (sparser than any other
#      set), seeds 201-209, nine runs, drifts at 30-50%: recurring 60
#      degrees every 750 from 1500, swaps of 0 and 5 every 550 from 1600,
#      one swap of 3 and 6 at 1900, class-incremental from 4 classes at
#      1700, a prior shift to 1,4,8 over 1600-2400, a rotation to 45 degrees
#      over 1500-2300, a collapse at 2200, no drift, one swap of 2 and 7
#      under Adam at 1800 (forty-seventh; trained before any change of that
#      session was measured on it: a check of the last sessions' planner)
#  23  hidden 160, 4 epochs, validation every 50, seeds 211-213, three runs
#      whose recurring traffic has more than two domains (--drift-domains):
#      three domains (upright, 60 and 120 degrees) every 500 from 1200, four
#      (upright, 40, 80, 120 degrees) every 450 from 1100, and three swapped
#      quickly (45 degrees a step, every 300 from 1000) (forty-seventh: a
#      class of input the other sets lack; since the forty-eighth its
#      three-domain runs are test fixtures, bench/devsets/set23, and only
#      z-recur4d40 is held out)
#  24  hidden 192, 4 epochs, validation every 55, seeds 221-223, three runs
#      of recurring traffic with more than two domains, trained in the
#      forty-eighth session after its two changes for such traffic were
#      chosen on set 23, to check them: three domains (upright, 50 and 100
#      degrees) every 400 from 1000, five (30 degrees a step) every 350
#      from 900, three (40 degrees a step) every 600 from 1300
#
# --partners: for each run whose traffic returns (--drift-period or
#   --drift-swap-period), train instead its partner NAME-once: the same run
#   (same seed) with that period set past the run's end, so that its traffic
#   never comes back. Its table agrees with the run's until the first return
#   (the training is deterministic). Then prints, for each pair, each tier and
#   both windows, the causal pair bound (`viper simulate --versus-staleness`,
#   README "The causal pair bound") beside online's regret, and writes them to
#   OUT_DIR/causal-bound.csv; its bound_half, the bound at weight 1/2, is a
#   floor under the mean of the two runs' regrets. OUT_DIR must then hold the set's runs already
#   (a --train-only of the same set): bench/heldout.sh --set 10 --partners DIR.
# --calm-partners: the same for the first change instead of the first return:
#   for each run whose traffic drifts (--drift ... --drift-at-iteration), train
#   its partner NAME-calm, the same run with --drift-at-iteration set past the
#   run's end, so that its traffic never changes (a calm run, itself in the
#   class). The two tables agree until the first drifted grid point, so the
#   bound is what not knowing whether a drift will come at all forces on any
#   planner: the price of insurance against drift, paid on the run or on its
#   calm partner. Writes OUT_DIR/causal-calm-bound.csv. With either option a
#   partner trained already (its table and JSON in OUT_DIR) is kept.
# --onset-partners OFFSETS: for each run whose traffic drifts from
#   --drift-at-iteration D (or each run --runs names), train its partners
#   NAME-atT, the same run with the drift moved to T = D + each offset
#   (iterations, comma-separated, e.g. -800,-400,400,800). With its calm
#   partner (train that first with --calm-partners) they are one family: runs
#   the producer cannot tell apart until the earliest drift among them, and
#   then until the next. Prints, for each run, tier and window, the causal
#   onset bound: the least mean regret any planner deciding from what the
#   producer measures can have over the family (calm partner, the run, its
#   onset partners; `viper simulate` with several --versus-staleness, README
#   "The causal pair bound"), beside online's mean regret over the same runs.
#   Not knowing when a drift comes, as well as whether, is what it prices.
#   Writes OUT_DIR/causal-onset-bound.csv.
# The tables are deterministic for a given set; the logs' wall times are not
# (the judge replays them, and the machine's load moves them). `viper
# evaluate` warns about a log whose replayed clock is irregular (set 12 as
# first trained beside a CI run: 60-97% of its time in stalled stretches);
# train such a set again on a quiet machine.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
set_id=1
known_sets="1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23 or 24"  # the sets the case below defines
train_only=0
partners=0
suffix=once        # the partner's name: NAME-once (--partners) or NAME-calm (--calm-partners)
offsets=()         # --onset-partners: the drift's moves, in iterations
only=""            # --runs: the runs whose onset partners are trained (default: every drifting run)
declare -A onsets  # --onset-partners: run -> its partners' drift iterations (space-separated)
while [ $# -gt 0 ]; do
  case "$1" in
    --set) [ $# -ge 2 ] || { echo "heldout.sh: --set needs $known_sets" >&2; exit 2; }
           set_id="$2"; shift 2 ;;
    --train-only) train_only=1; shift ;;
    --partners) partners=1; suffix=once; shift ;;
    --calm-partners) partners=1; suffix=calm; shift ;;
    --onset-partners)
      [ $# -ge 2 ] && [[ "$2" =~ ^-?[0-9]+(,-?[0-9]+)*$ ]] || {
        echo "heldout.sh: --onset-partners needs comma-separated iteration offsets (e.g. -800,-400,400,800)" >&2; exit 2; }
      partners=1; suffix=onset; IFS=, read -r -a offsets <<< "$2"; shift 2 ;;
    --runs) [ $# -ge 2 ] || { echo "heldout.sh: --runs needs run names (e.g. x-swap,x-classinc5)" >&2; exit 2; }
            only=",$2,"; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    -*) echo "heldout.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
out="${1:-$(mktemp -d -t viper-heldout-XXXXXX)}"
viper="${2:-$here/../build/apps/viper}"
mkdir -p "$out"
base=(--dataset fashion-mnist --batch 64 --val-samples 2000 --test-samples 5000 --progress-every 0)
names=()
# Trains run NAME with these options (after the set's common ones) into OUT_DIR.
train_one() {
  local name="$1"; shift
  echo "== $name: viper train $*" >&2
  "$viper" train "${common[@]}" "$@" --log-out "$out/$name.csv.gz" \
      --staleness-table "$out/$name.staleness.csv.gz" --json "$out/$name.train.json" > /dev/null
}
# Whether run NAME is trained already (the JSON is written last): a partner
# is then kept, so that a stopped run picks up where it was.
trained() { [ -f "$out/$1.train.json" ] && [ -f "$out/$1.staleness.csv.gz" ]; }
run() {
  local name="$1"; shift
  if [ "$partners" = 1 ]; then
    # The partner of a run whose traffic returns (--partners) or drifts at all
    # (--calm-partners): the option that starts it set past the run's end;
    # nothing for the other runs.
    local moved=(--drift-period --drift-swap-period)
    if [ "$suffix" = onset ]; then
      case " $* " in *" --drift none "*) return 0 ;; esac
      [ -z "$only" ] || [[ "$only" == *",$name,"* ]] || return 0
      local at="" prev=""
      for x in "$@"; do [ "$prev" = --drift-at-iteration ] && at="$x"; prev="$x"; done
      [ -n "$at" ] || return 0
      [ -f "$out/$name.csv.gz" ] || { echo "heldout.sh: --onset-partners: $out/$name.csv.gz missing (train the set first: --train-only)" >&2; exit 1; }
      [ -f "$out/$name-calm.staleness.csv.gz" ] || { echo "heldout.sh: --onset-partners: $out/$name-calm.staleness.csv.gz missing (train its calm partner first: --calm-partners)" >&2; exit 1; }
      names+=("$name")
      onsets[$name]=""
      local off t
      for off in "${offsets[@]}"; do
        t=$((at + off))
        [ "$t" -gt 0 ] || { echo "heldout.sh: --onset-partners: $name's drift at $at moved by $off is before the run's start" >&2; exit 2; }
        onsets[$name]+="$t "
        trained "$name-at$t" && continue
        local args=() p2=""
        for x in "$@"; do if [ "$p2" = --drift-at-iteration ]; then args+=("$t"); else args+=("$x"); fi; p2="$x"; done
        train_one "$name-at$t" "${args[@]}"
      done
      return 0
    fi
    if [ "$suffix" = calm ]; then
      moved=(--drift-at-iteration)
      case " $* " in *" --drift none "*) return 0 ;; esac
    fi
    local args=() prev="" found=0 m
    for x in "$@"; do
      local hit=0
      for m in "${moved[@]}"; do [ "$prev" = "$m" ] && hit=1; done
      if [ "$hit" = 1 ]; then args+=(1000000); found=1; else args+=("$x"); fi
      prev="$x"
    done
    [ "$found" = 1 ] || return 0
    [ -f "$out/$name.csv.gz" ] || { echo "heldout.sh: --$( [ "$suffix" = calm ] && echo calm-)partners: $out/$name.csv.gz missing (train the set first: --train-only)" >&2; exit 1; }
    names+=("$name")
    trained "$name-$suffix" || train_one "$name-$suffix" "${args[@]}"
    return 0
  fi
  train_one "$name" "$@"
  names+=("$name")
}
case "$set_id" in
  1|2)
    common=("${base[@]}" --hidden 128 --epochs 4 --val-every 40)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
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
    ;;
  3)
    common=("${base[@]}" --hidden 192 --epochs 4 --val-every 60)
    sgd=(--optimizer sgd --lr 0.04 --momentum 0.9)
    run g-recur45  "${sgd[@]}" --seed 11 --drift recurring --drift-rotation-degrees 45 --drift-at-iteration 1000 \
                   --drift-period 900
    run g-swap     "${sgd[@]}" --seed 12 --drift label-swap --drift-swap-classes 1,7 --drift-at-iteration 2100
    run g-nodrift  "${sgd[@]}" --seed 13
    run g-classinc "${sgd[@]}" --seed 14 --drift class-incremental --drift-initial-classes 5 --drift-at-iteration 1300
    run g-prior    "${sgd[@]}" --seed 15 --drift prior-shift --drift-prior-classes 0,2 --drift-prior-mass 0.7 \
                   --drift-at-iteration 1500 --drift-duration 600
    run g-rotate   "${sgd[@]}" --seed 16 --drift rotation --drift-rotation-degrees 30 --drift-at-iteration 1400 \
                   --drift-duration 700 --staleness-max-versions 24
    ;;
  4)
    common=("${base[@]}" --hidden 96 --epochs 5 --val-every 50)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run f-recur30  "${sgd[@]}" --seed 21 --drift recurring --drift-rotation-degrees 30 --drift-at-iteration 1500 \
                   --drift-period 700
    run f-swap     "${sgd[@]}" --seed 22 --drift label-swap --drift-swap-classes 3,8 --drift-at-iteration 1700
    run f-nodrift  --optimizer sgd --lr 0.02 --momentum 0.9 --seed 23
    run f-classinc --optimizer adam --lr 0.001 --seed 24 --drift class-incremental --drift-initial-classes 4 \
                   --drift-at-iteration 2200
    run f-prior    "${sgd[@]}" --seed 25 --drift prior-shift --drift-prior-classes 4,6,9 --drift-prior-mass 0.85 \
                   --drift-at-iteration 1200 --drift-duration 1200
    run f-rotate   "${sgd[@]}" --seed 26 --drift rotation --drift-rotation-degrees 60 --drift-at-iteration 1600 \
                   --drift-duration 900 --staleness-max-versions 32
    ;;
  5)
    common=("${base[@]}" --hidden 160 --epochs 5 --val-every 45)
    sgd=(--optimizer sgd --lr 0.04 --momentum 0.9)
    run e-recur40   "${sgd[@]}" --seed 31 --drift recurring --drift-rotation-degrees 40 --drift-at-iteration 1300 \
                    --drift-period 800
    run e-swap      "${sgd[@]}" --seed 32 --drift label-swap --drift-swap-classes 5,9 --drift-at-iteration 2400
    run e-collapse  "${sgd[@]}" --seed 33 --lr-milestones 2200:50
    run e-classinc  "${sgd[@]}" --seed 34 --drift class-incremental --drift-initial-classes 6 --drift-at-iteration 1600
    run e-prior     --optimizer adam --lr 0.001 --seed 35 --drift prior-shift --drift-prior-classes 2,7 \
                    --drift-prior-mass 0.75 --drift-at-iteration 900 --drift-duration 1100
    run e-rotate    "${sgd[@]}" --seed 36 --drift rotation --drift-rotation-degrees 50 --drift-at-iteration 1200 \
                    --drift-duration 1400 --staleness-max-versions 28
    ;;
  6)
    common=("${base[@]}" --hidden 224 --epochs 4 --val-every 55)
    sgd=(--optimizer sgd --lr 0.045 --momentum 0.9)
    run d-recur50   "${sgd[@]}" --seed 41 --drift recurring --drift-rotation-degrees 50 --drift-at-iteration 1100 \
                    --drift-period 650
    run d-swap      "${sgd[@]}" --seed 42 --drift label-swap --drift-swap-classes 0,6 --drift-at-iteration 1900
    run d-nodrift   "${sgd[@]}" --seed 43
    run d-classinc  "${sgd[@]}" --seed 44 --drift class-incremental --drift-initial-classes 4 --drift-at-iteration 2000
    run d-prior     "${sgd[@]}" --seed 45 --drift prior-shift --drift-prior-classes 3,8 --drift-prior-mass 0.8 \
                    --drift-at-iteration 1300 --drift-duration 600
    run d-rotate    --optimizer adam --lr 0.001 --seed 46 --drift rotation --drift-rotation-degrees 35 \
                    --drift-at-iteration 1500 --drift-duration 800 --staleness-max-versions 28
    ;;
  7)
    common=("${base[@]}" --hidden 112 --epochs 5 --val-every 35)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run c-recur35   "${sgd[@]}" --seed 51 --drift recurring --drift-rotation-degrees 35 --drift-at-iteration 1400 \
                    --drift-period 600
    run c-swap      "${sgd[@]}" --seed 52 --drift label-swap --drift-swap-classes 2,6 --drift-at-iteration 1300
    run c-collapse  "${sgd[@]}" --seed 53 --lr-milestones 2600:30
    run c-classinc  "${sgd[@]}" --seed 54 --drift class-incremental --drift-initial-classes 7 --drift-at-iteration 2000
    run c-prior     "${sgd[@]}" --seed 55 --drift prior-shift --drift-prior-classes 0,5,8 --drift-prior-mass 0.75 \
                    --drift-at-iteration 1600 --drift-duration 800
    run c-rotate    "${sgd[@]}" --seed 56 --drift rotation --drift-rotation-degrees 75 --drift-at-iteration 1100 \
                    --drift-duration 1000 --staleness-max-versions 32
    ;;
  9)
    common=("${base[@]}" --hidden 144 --epochs 5 --val-every 40)
    sgd=(--optimizer sgd --lr 0.045 --momentum 0.9)
    run a-recur55   "${sgd[@]}" --seed 71 --drift recurring --drift-rotation-degrees 55 --drift-at-iteration 1250 \
                    --drift-period 550
    run a-swap      "${sgd[@]}" --seed 72 --drift label-swap --drift-swap-classes 4,7 --drift-at-iteration 1600
    run a-nodrift   --optimizer adam --lr 0.0008 --seed 73
    run a-classinc  "${sgd[@]}" --seed 74 --drift class-incremental --drift-initial-classes 2 --drift-at-iteration 1400
    run a-prior     "${sgd[@]}" --seed 75 --drift prior-shift --drift-prior-classes 1,4,9 --drift-prior-mass 0.85 \
                    --drift-at-iteration 1100 --drift-duration 400
    run a-rotate    "${sgd[@]}" --seed 76 --drift rotation --drift-rotation-degrees 40 --drift-at-iteration 1300 \
                    --drift-duration 600 --staleness-max-versions 28
    run a-collapse  "${sgd[@]}" --seed 77 --lr-milestones 2000:40
    ;;
  10)
    common=("${base[@]}" --hidden 176 --epochs 4 --val-every 50)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run k-recur70   "${sgd[@]}" --seed 81 --drift recurring --drift-rotation-degrees 70 --drift-at-iteration 1000 \
                    --drift-period 450
    run k-swaps600  "${sgd[@]}" --seed 82 --drift label-swap --drift-swap-classes 2,9 --drift-at-iteration 1300 \
                    --drift-swap-period 600
    run k-nodrift   --optimizer sgd --lr 0.06 --momentum 0.9 --seed 83
    run k-classinc  "${sgd[@]}" --seed 84 --drift class-incremental --drift-initial-classes 6 --drift-at-iteration 1600
    run k-prior     "${sgd[@]}" --seed 85 --drift prior-shift --drift-prior-classes 2,6 --drift-prior-mass 0.7 \
                    --drift-at-iteration 900 --drift-duration 1500
    run k-rotate    "${sgd[@]}" --seed 86 --drift rotation --drift-rotation-degrees 60 --drift-at-iteration 1200 \
                    --drift-duration 1200 --staleness-max-versions 28
    run k-collapse  "${sgd[@]}" --seed 87 --lr-milestones 1500:35
    ;;
  11)
    common=("${base[@]}" --hidden 208 --epochs 5 --val-every 45)
    sgd=(--optimizer sgd --lr 0.045 --momentum 0.9)
    run m-recur45   "${sgd[@]}" --seed 91 --drift recurring --drift-rotation-degrees 45 --drift-at-iteration 1300 \
                    --drift-period 650
    run m-swap      "${sgd[@]}" --seed 92 --drift label-swap --drift-swap-classes 1,3 --drift-at-iteration 1700
    run m-classinc4 "${sgd[@]}" --seed 93 --drift class-incremental --drift-initial-classes 4 --drift-at-iteration 1500
    run m-classinc8 "${sgd[@]}" --seed 94 --drift class-incremental --drift-initial-classes 8 --drift-at-iteration 2200
    run m-prior     "${sgd[@]}" --seed 95 --drift prior-shift --drift-prior-classes 0,7 --drift-prior-mass 0.8 \
                    --drift-at-iteration 1200 --drift-duration 700
    run m-rotate    "${sgd[@]}" --seed 96 --drift rotation --drift-rotation-degrees 50 --drift-at-iteration 1400 \
                    --drift-duration 900 --staleness-max-versions 28
    run m-nodrift   --optimizer adam --lr 0.001 --seed 97
    ;;
  12)
    common=("${base[@]}" --hidden 120 --epochs 4 --val-every 42)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run n-recur50   "${sgd[@]}" --seed 101 --drift recurring --drift-rotation-degrees 50 --drift-at-iteration 1150 \
                    --drift-period 500
    run n-swaps500  "${sgd[@]}" --seed 102 --drift label-swap --drift-swap-classes 0,8 --drift-at-iteration 1400 \
                    --drift-swap-period 500
    run n-swap      --optimizer adam --lr 0.001 --seed 103 --drift label-swap --drift-swap-classes 6,9 \
                    --drift-at-iteration 2000
    run n-classinc3 "${sgd[@]}" --seed 104 --drift class-incremental --drift-initial-classes 3 --drift-at-iteration 1700
    run n-prior     "${sgd[@]}" --seed 105 --drift prior-shift --drift-prior-classes 3,5,7 --drift-prior-mass 0.8 \
                    --drift-at-iteration 1000 --drift-duration 900
    run n-rotate    "${sgd[@]}" --seed 106 --drift rotation --drift-rotation-degrees 55 --drift-at-iteration 1300 \
                    --drift-duration 800 --staleness-max-versions 28
    run n-collapse  "${sgd[@]}" --seed 107 --lr-milestones 1800:45
    run n-nodrift   --optimizer sgd --lr 0.03 --momentum 0.9 --seed 108
    ;;
  13)
    common=("${base[@]}" --hidden 160 --epochs 4 --val-every 48)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run p-recur65   "${sgd[@]}" --seed 111 --drift recurring --drift-rotation-degrees 65 --drift-at-iteration 1100 \
                    --drift-period 600
    run p-swaps550  "${sgd[@]}" --seed 112 --drift label-swap --drift-swap-classes 4,6 --drift-at-iteration 1350 \
                    --drift-swap-period 550
    run p-swap      "${sgd[@]}" --seed 113 --drift label-swap --drift-swap-classes 0,2 --drift-at-iteration 1900
    run p-classinc5 "${sgd[@]}" --seed 114 --drift class-incremental --drift-initial-classes 5 --drift-at-iteration 1500
    run p-prior     "${sgd[@]}" --seed 115 --drift prior-shift --drift-prior-classes 2,8 --drift-prior-mass 0.75 \
                    --drift-at-iteration 1200 --drift-duration 600
    run p-rotate    "${sgd[@]}" --seed 116 --drift rotation --drift-rotation-degrees 35 --drift-at-iteration 1000 \
                    --drift-duration 1000 --staleness-max-versions 28
    run p-collapse  "${sgd[@]}" --seed 117 --lr-milestones 2100:45
    run p-nodrift   --optimizer adam --lr 0.001 --seed 118
    ;;
  14)
    common=("${base[@]}" --hidden 136 --epochs 5 --val-every 38)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run q-recur40   "${sgd[@]}" --seed 121 --drift recurring --drift-rotation-degrees 40 --drift-at-iteration 1000 \
                    --drift-period 400
    run q-swaps800  "${sgd[@]}" --seed 122 --drift label-swap --drift-swap-classes 5,9 --drift-at-iteration 1100 \
                    --drift-swap-period 800
    run q-swapadam  --optimizer adam --lr 0.001 --seed 123 --drift label-swap --drift-swap-classes 3,8 \
                    --drift-at-iteration 1700
    run q-classinc4 "${sgd[@]}" --seed 124 --drift class-incremental --drift-initial-classes 4 --drift-at-iteration 1300
    run q-prior     "${sgd[@]}" --seed 125 --drift prior-shift --drift-prior-classes 0,4,6 --drift-prior-mass 0.7 \
                    --drift-at-iteration 1500 --drift-duration 300
    run q-rotate    "${sgd[@]}" --seed 126 --drift rotation --drift-rotation-degrees 80 --drift-at-iteration 1200 \
                    --drift-duration 600 --staleness-max-versions 28
    run q-collapse  "${sgd[@]}" --seed 127 --lr-milestones 1800:40
    run q-nodrift   "${sgd[@]}" --seed 128
    ;;
  15)
    common=("${base[@]}" --hidden 184 --epochs 4 --val-every 44)
    sgd=(--optimizer sgd --lr 0.045 --momentum 0.9)
    run r-recur45   "${sgd[@]}" --seed 131 --drift recurring --drift-rotation-degrees 45 --drift-at-iteration 1200 \
                    --drift-period 550
    run r-swaps650  "${sgd[@]}" --seed 132 --drift label-swap --drift-swap-classes 3,7 --drift-at-iteration 1250 \
                    --drift-swap-period 650
    run r-swap      "${sgd[@]}" --seed 133 --drift label-swap --drift-swap-classes 1,5 --drift-at-iteration 1800
    run r-classinc3 "${sgd[@]}" --seed 134 --drift class-incremental --drift-initial-classes 3 --drift-at-iteration 1400
    run r-prior     "${sgd[@]}" --seed 135 --drift prior-shift --drift-prior-classes 1,6 --drift-prior-mass 0.8 \
                    --drift-at-iteration 1300 --drift-duration 700
    run r-rotate    "${sgd[@]}" --seed 136 --drift rotation --drift-rotation-degrees 65 --drift-at-iteration 1100 \
                    --drift-duration 800 --staleness-max-versions 28
    run r-collapse  "${sgd[@]}" --seed 137 --lr-milestones 1900:40
    run r-nodrift   --optimizer adam --lr 0.001 --seed 138
    ;;
  16)
    common=("${base[@]}" --hidden 152 --epochs 5 --val-every 46)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run s-recur55   "${sgd[@]}" --seed 141 --drift recurring --drift-rotation-degrees 55 --drift-at-iteration 1300 \
                    --drift-period 700
    run s-swaps600  "${sgd[@]}" --seed 142 --drift label-swap --drift-swap-classes 2,8 --drift-at-iteration 1400 \
                    --drift-swap-period 600
    run s-swap      "${sgd[@]}" --seed 143 --drift label-swap --drift-swap-classes 0,6 --drift-at-iteration 1600
    run s-classinc4 "${sgd[@]}" --seed 144 --drift class-incremental --drift-initial-classes 4 --drift-at-iteration 1500
    run s-prior     "${sgd[@]}" --seed 145 --drift prior-shift --drift-prior-classes 2,7 --drift-prior-mass 0.7 \
                    --drift-at-iteration 1400 --drift-duration 900
    run s-rotate    "${sgd[@]}" --seed 146 --drift rotation --drift-rotation-degrees 50 --drift-at-iteration 1000 \
                    --drift-duration 900 --staleness-max-versions 28
    run s-collapse  "${sgd[@]}" --seed 147 --lr-milestones 2100:40
    run s-nodrift   "${sgd[@]}" --seed 148
    run s-nodriftadam --optimizer adam --lr 0.001 --seed 149
    ;;
  17)
    common=("${base[@]}" --hidden 168 --epochs 5 --val-every 41)
    sgd=(--optimizer sgd --lr 0.055 --momentum 0.9)
    run t-recur35   "${sgd[@]}" --seed 151 --drift recurring --drift-rotation-degrees 35 --drift-at-iteration 1100 \
                    --drift-period 500
    run t-swaps500  "${sgd[@]}" --seed 152 --drift label-swap --drift-swap-classes 4,9 --drift-at-iteration 1300 \
                    --drift-swap-period 500
    run t-swap      "${sgd[@]}" --seed 153 --drift label-swap --drift-swap-classes 2,3 --drift-at-iteration 1700
    run t-classinc5 "${sgd[@]}" --seed 154 --drift class-incremental --drift-initial-classes 5 --drift-at-iteration 1200
    run t-prior     "${sgd[@]}" --seed 155 --drift prior-shift --drift-prior-classes 3,5,8 --drift-prior-mass 0.75 \
                    --drift-at-iteration 1600 --drift-duration 500
    run t-rotate    "${sgd[@]}" --seed 156 --drift rotation --drift-rotation-degrees 70 --drift-at-iteration 1300 \
                    --drift-duration 700 --staleness-max-versions 28
    run t-collapse  "${sgd[@]}" --seed 157 --lr-milestones 2000:40
    run t-nodrift   "${sgd[@]}" --seed 158
    ;;
  18)
    common=("${base[@]}" --hidden 200 --epochs 4 --val-every 39)
    sgd=(--optimizer sgd --lr 0.045 --momentum 0.9)
    run u-recur50   "${sgd[@]}" --seed 161 --drift recurring --drift-rotation-degrees 50 --drift-at-iteration 1250 \
                    --drift-period 650
    run u-swaps550  "${sgd[@]}" --seed 162 --drift label-swap --drift-swap-classes 1,6 --drift-at-iteration 1150 \
                    --drift-swap-period 550
    run u-swap      "${sgd[@]}" --seed 163 --drift label-swap --drift-swap-classes 3,8 --drift-at-iteration 1450
    run u-classinc3 "${sgd[@]}" --seed 164 --drift class-incremental --drift-initial-classes 3 --drift-at-iteration 1350
    run u-prior     "${sgd[@]}" --seed 165 --drift prior-shift --drift-prior-classes 0,4 --drift-prior-mass 0.7 \
                    --drift-at-iteration 1400 --drift-duration 600
    run u-rotate    "${sgd[@]}" --seed 166 --drift rotation --drift-rotation-degrees 55 --drift-at-iteration 1200 \
                    --drift-duration 800 --staleness-max-versions 28
    run u-collapse  "${sgd[@]}" --seed 167 --lr-milestones 1700:45
    run u-nodrift   "${sgd[@]}" --seed 168
    run u-adam      --optimizer adam --lr 0.001 --seed 169
    ;;
  19)
    common=("${base[@]}" --hidden 160 --epochs 6 --val-every 75)
    sgd=(--optimizer sgd --lr 0.04 --momentum 0.9)
    run v-recur45   "${sgd[@]}" --seed 171 --drift recurring --drift-rotation-degrees 45 --drift-at-iteration 3300 \
                    --drift-period 800
    run v-swaps900  "${sgd[@]}" --seed 172 --drift label-swap --drift-swap-classes 2,7 --drift-at-iteration 3000 \
                    --drift-swap-period 900
    run v-swap      "${sgd[@]}" --seed 173 --drift label-swap --drift-swap-classes 0,6 --drift-at-iteration 3900
    run v-classinc4 "${sgd[@]}" --seed 174 --drift class-incremental --drift-initial-classes 4 --drift-at-iteration 3600
    run v-prior     "${sgd[@]}" --seed 175 --drift prior-shift --drift-prior-classes 1,8 --drift-prior-mass 0.75 \
                    --drift-at-iteration 3400 --drift-duration 800
    run v-rotate    "${sgd[@]}" --seed 176 --drift rotation --drift-rotation-degrees 40 --drift-at-iteration 3200 \
                    --drift-duration 1200 --staleness-max-versions 28
    run v-collapse  "${sgd[@]}" --seed 177 --lr-milestones 4000:40
    run v-nodrift   "${sgd[@]}" --seed 178
    run v-swapadam  --optimizer adam --lr 0.001 --seed 179 --drift label-swap --drift-swap-classes 4,9 \
                    --drift-at-iteration 3500
    ;;
  20)
    common=("${base[@]}" --hidden 480 --epochs 4 --val-every 50)
    sgd=(--optimizer sgd --lr 0.04 --momentum 0.9)
    run w-recur50   "${sgd[@]}" --seed 181 --drift recurring --drift-rotation-degrees 50 --drift-at-iteration 1300 \
                    --drift-period 600
    run w-swaps650  "${sgd[@]}" --seed 182 --drift label-swap --drift-swap-classes 3,5 --drift-at-iteration 1200 \
                    --drift-swap-period 650
    run w-swap      "${sgd[@]}" --seed 183 --drift label-swap --drift-swap-classes 1,9 --drift-at-iteration 1500
    run w-classinc3 "${sgd[@]}" --seed 184 --drift class-incremental --drift-initial-classes 3 --drift-at-iteration 1400
    run w-prior     "${sgd[@]}" --seed 185 --drift prior-shift --drift-prior-classes 2,6 --drift-prior-mass 0.7 \
                    --drift-at-iteration 1300 --drift-duration 600
    run w-rotate    "${sgd[@]}" --seed 186 --drift rotation --drift-rotation-degrees 50 --drift-at-iteration 1200 \
                    --drift-duration 800 --staleness-max-versions 28
    run w-collapse  "${sgd[@]}" --seed 187 --lr-milestones 1800:45
    run w-nodrift   "${sgd[@]}" --seed 188
    run w-adam      --optimizer adam --lr 0.001 --seed 189
    ;;
  21)
    common=("${base[@]}" --hidden 256 --epochs 5 --val-every 55)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run x-recur40   "${sgd[@]}" --seed 191 --drift recurring --drift-rotation-degrees 40 --drift-at-iteration 1700 \
                    --drift-period 700
    run x-swaps600  "${sgd[@]}" --seed 192 --drift label-swap --drift-swap-classes 4,7 --drift-at-iteration 1800 \
                    --drift-swap-period 600
    run x-swap      "${sgd[@]}" --seed 193 --drift label-swap --drift-swap-classes 2,9 --drift-at-iteration 2300
    run x-classinc5 "${sgd[@]}" --seed 194 --drift class-incremental --drift-initial-classes 5 --drift-at-iteration 2000
    run x-prior     "${sgd[@]}" --seed 195 --drift prior-shift --drift-prior-classes 0,3,7 --drift-prior-mass 0.8 \
                    --drift-at-iteration 1900 --drift-duration 700
    run x-rotate    "${sgd[@]}" --seed 196 --drift rotation --drift-rotation-degrees 65 --drift-at-iteration 1700 \
                    --drift-duration 1000 --staleness-max-versions 28
    run x-collapse  "${sgd[@]}" --seed 197 --lr-milestones 2500:35
    run x-nodrift   "${sgd[@]}" --seed 198
    run x-swapadam  --optimizer adam --lr 0.001 --seed 199 --drift label-swap --drift-swap-classes 5,8 \
                    --drift-at-iteration 2100
    ;;
  24)
    common=("${base[@]}" --hidden 192 --epochs 4 --val-every 55)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run j-recur3d50  "${sgd[@]}" --seed 221 --drift recurring --drift-domains 3 --drift-rotation-degrees 50 \
                     --drift-at-iteration 1000 --drift-period 400
    run j-recur5d30  "${sgd[@]}" --seed 222 --drift recurring --drift-domains 5 --drift-rotation-degrees 30 \
                     --drift-at-iteration 900 --drift-period 350
    run j-recur3d40s "${sgd[@]}" --seed 223 --drift recurring --drift-domains 3 --drift-rotation-degrees 40 \
                     --drift-at-iteration 1300 --drift-period 600
    ;;
  23)
    common=("${base[@]}" --hidden 160 --epochs 4 --val-every 50)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run z-recur3d60  "${sgd[@]}" --seed 211 --drift recurring --drift-domains 3 --drift-rotation-degrees 60 \
                     --drift-at-iteration 1200 --drift-period 500
    run z-recur4d40  "${sgd[@]}" --seed 212 --drift recurring --drift-domains 4 --drift-rotation-degrees 40 \
                     --drift-at-iteration 1100 --drift-period 450
    run z-recur3d45f "${sgd[@]}" --seed 213 --drift recurring --drift-domains 3 --drift-rotation-degrees 45 \
                     --drift-at-iteration 1000 --drift-period 300
    ;;
  22)
    common=("${base[@]}" --hidden 224 --epochs 4 --val-every 65)
    sgd=(--optimizer sgd --lr 0.045 --momentum 0.9)
    run y-recur60   "${sgd[@]}" --seed 201 --drift recurring --drift-rotation-degrees 60 --drift-at-iteration 1500 \
                    --drift-period 750
    run y-swaps550  "${sgd[@]}" --seed 202 --drift label-swap --drift-swap-classes 0,5 --drift-at-iteration 1600 \
                    --drift-swap-period 550
    run y-swap      "${sgd[@]}" --seed 203 --drift label-swap --drift-swap-classes 3,6 --drift-at-iteration 1900
    run y-classinc4 "${sgd[@]}" --seed 204 --drift class-incremental --drift-initial-classes 4 --drift-at-iteration 1700
    run y-prior     "${sgd[@]}" --seed 205 --drift prior-shift --drift-prior-classes 1,4,8 --drift-prior-mass 0.75 \
                    --drift-at-iteration 1600 --drift-duration 800
    run y-rotate    "${sgd[@]}" --seed 206 --drift rotation --drift-rotation-degrees 45 --drift-at-iteration 1500 \
                    --drift-duration 800 --staleness-max-versions 28
    run y-collapse  "${sgd[@]}" --seed 207 --lr-milestones 2200:40
    run y-nodrift   "${sgd[@]}" --seed 208
    run y-swapadam  --optimizer adam --lr 0.001 --seed 209 --drift label-swap --drift-swap-classes 2,7 \
                    --drift-at-iteration 1800
    ;;
  8)
    common=("${base[@]}" --epochs 5 --val-every 45)
    sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
    run b-swaps700  "${sgd[@]}" --hidden 128 --seed 61 --drift label-swap --drift-swap-classes 3,5 \
                    --drift-at-iteration 1200 --drift-swap-period 700
    run b-swaps450  "${sgd[@]}" --hidden 176 --seed 62 --drift label-swap --drift-swap-classes 1,7 \
                    --drift-at-iteration 1500 --drift-swap-period 450
    ;;
  *) echo "heldout.sh: --set $set_id: expected $known_sets" >&2; exit 2 ;;
esac
[ "$train_only" = 1 ] && { echo "tables and logs in $out" >&2; exit 0; }
if [ "$suffix" = onset ]; then
  csv="$out/causal-onset-bound.csv"
  echo "run,tier,window,runs,bound_mean,online_mean,online_calm,online_run,online_partners" > "$csv"
  printf '%-14s %-5s %-6s %4s %8s %8s %8s %8s\n' run tier window runs bound online calm run
  # The request window's count, as --partners takes it, from a while-training JSON of the same log.
  requests() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(max(1, int((j['total_iterations'] - j['warmup_iterations']) * j['seconds_per_iteration'] / j['requests']['interval_s'])))" "$1"; }
  for name in "${names[@]}"; do
    members=("$name")
    for t in ${onsets[$name]}; do members+=("$name-at$t"); done
    versus=()
    for m in "${members[@]}"; do versus+=(--versus-staleness "$out/$m.staleness.csv.gz"); done
    for tier in gpu host pfs; do
      for window in train req; do
        # The family's bound on the calm partner's clock and cost; online on
        # each run's own log, as `viper evaluate` judges it.
        req=()
        [ "$window" = req ] && req=(--requests "$(requests "$out/fam-$name-calm-$tier-train.json")")
        "$viper" simulate --log "$out/$name-calm.csv.gz" --staleness auto --warmup 20% --transport "$tier" "${req[@]}" \
            --strategies online,oracle "${versus[@]}" --json "$out/fam-$name-calm-$tier-$window.json" --quiet > /dev/null
        for m in "${members[@]}"; do
          req=()
          [ "$window" = req ] && req=(--requests "$(requests "$out/fam-$m-$tier-train.json")")
          "$viper" simulate --log "$out/$m.csv.gz" --staleness auto --warmup 20% --transport "$tier" "${req[@]}" \
              --strategies online,oracle --json "$out/fam-$m-$tier-$window.json" --quiet > /dev/null
        done
        python3 - "$out" "$name" "$tier" "$window" "$csv" "${members[@]}" <<'PY'
import json, sys
out, name, tier, window, csv = sys.argv[1:6]
members = sys.argv[6:]
def online(run):
    j = json.load(open(f"{out}/fam-{run}-{tier}-{window}.json"))
    return j, next(s for s in j["strategies"] if s["strategy"] == "online")["regret_vs_oracle"]
j, calm = online(name + "-calm")
b = j["causal_bound"]
each = [online(m)[1] for m in members]
# The members' tables must agree with the calm partner's up to some point
# after the warm-up, or they are not one run with its drift moved.
for r in b["runs"][1:]:
    if r["agree_until_traffic"] <= j["warmup_iterations"] and (tier, window) == ("gpu", "train"):
        print(f"heldout.sh: {r['table']} differs from {name}-calm's table from the warm-up on: its drift comes "
              "before the warm-up's end, or it was trained by another build (then the bound compares different "
              "runs)", file=sys.stderr)
mean = (calm + sum(each)) / (1 + len(each))
row = [name, tier, window, str(1 + len(each)), "%.4f" % b["bound"], "%.4f" % mean, "%.4f" % calm, "%.4f" % each[0],
       ";".join("%.4f" % x for x in each[1:])]
open(csv, "a").write(",".join(row) + "\n")
print("%-14s %-5s %-6s %4s %7.2f%% %7.2f%% %7.2f%% %7.2f%%" % (name, tier, window, row[3], 100 * b["bound"],
                                                         100 * mean, 100 * calm, 100 * each[0]))
PY
      done
    done
  done
  echo "causal onset bounds in $csv (bound_mean: the floor under the family's mean regret; online_mean: online's)" >&2
  exit 0
fi
if [ "$partners" = 1 ]; then
  csv="$out/causal-bound.csv"
  [ "$suffix" = calm ] && csv="$out/causal-calm-bound.csv"
  echo "run,tier,window,agree_until_traffic,bound,bound_half,online_regret" > "$csv"
  printf '%-14s %-5s %-6s %8s %8s %8s %8s\n' run tier window agree bound half online
  for name in "${names[@]}"; do
    for tier in gpu host pfs; do
      for window in train req; do
        req=()
        # The request window: as many requests as the while-training window
        # serves without checkpoints, (N - W) tau / interval (what `viper
        # evaluate` takes), from the while-training run's JSON.
        [ "$window" = req ] && req=(--requests "$(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(max(1, int((j['total_iterations'] - j['warmup_iterations']) * j['seconds_per_iteration'] / j['requests']['interval_s'])))" "$out/bound.json")")
        "$viper" simulate --log "$out/$name.csv.gz" --staleness auto --warmup 20% --transport "$tier" "${req[@]}" \
            --strategies online,oracle --versus-staleness "$out/$name-$suffix.staleness.csv.gz" --json "$out/bound.json" \
            --quiet > /dev/null
        python3 - "$out/bound.json" "$name" "$tier" "$window" "$csv" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
b = j["causal_pair_bound"]
online = next(s for s in j["strategies"] if s["strategy"] == "online")
# Tables that differ from the warm-up on are not one run and its partner
# (a run trained by another build, or other options): say so, once a run.
if b["agree_until_traffic"] <= j["warmup_iterations"] and sys.argv[3:5] == ["gpu", "train"]:
    print(f"heldout.sh: {sys.argv[2]}: its partner's table differs from the run's from the warm-up "
          f"({j['warmup_iterations']}) on, so they are not one run up to its drift (trained by another build?); "
          "its bounds compare two different runs", file=sys.stderr)
# bound_half: the bound at weight 1/2, a floor under the two runs' mean regret.
half = next(x["bound"] for x in b["by_lambda"] if abs(x["lambda"] - 0.5) < 1e-9)
row = [sys.argv[2], sys.argv[3], sys.argv[4], "%.0f" % b["agree_until_traffic"], "%.4f" % b["bound"], "%.4f" % half,
       "%.4f" % online["regret_vs_oracle"]]
open(sys.argv[5], "a").write(",".join(row) + "\n")
print("%-14s %-5s %-6s %8s %7.2f%% %7.2f%% %7.2f%%" % (row[0], row[1], row[2], row[3], 100 * b["bound"], 100 * half,
                                                   100 * online["regret_vs_oracle"]))
PY
      done
    done
  done
  echo "causal pair bounds in $csv" >&2
  exit 0
fi
logs="$(printf "$out/%s.csv.gz," "${names[@]}")"
logs="${logs%,}"
for clock in producer wall; do
  echo "== evaluate, traffic clock $clock" >&2
  "$viper" evaluate --logs "$logs" --staleness auto --warmups 20% --traffic-clock "$clock" \
      --json "$out/evaluate-$clock.json" --quiet
done
echo "tables, logs and evaluations in $out" >&2
