#!/usr/bin/env bash
# The log formats end to end: `viper log-info`, `viper fit` and `viper
# simulate` on every file of datasets/testdata (one per format and quirk),
# and every hostile-* seed of fuzz/corpus/log_reader refused with exit 1 and
# one short message (no crash, no hang).
# Usage: log_formats_test.sh VIPER SOURCE_DIR
set -u
viper="$1"
src="$2"
data="$src/datasets/testdata"
corpus="$src/fuzz/corpus/log_reader"
. "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
sim_warmup=(--warmup 50%)

# file | format | untimed (needs --seconds-per-iteration) | metric for fit | extra reader options
cases=(
  "keras_training.log|keras|untimed|train_loss|--iterations-per-epoch 200"
  "lightning/metrics.csv|lightning|untimed|train_loss|"
  "hf/trainer_state.json|hf-trainer-state|untimed|train_loss|"
  "run-version_0-tag-train_loss.csv|tensorboard-csv|timed|train_loss|"
  "run-version_0-tag-train_loss.json|tensorboard-json|timed|train_loss|"
  "run-version_0-tag-val_loss.csv|tensorboard-csv|timed|val_loss|"
  "tb-pytorch/events.out.tfevents.1700000000.host.4242.0|tfevents|timed|train_loss|"
  "tb-tf2/events.out.tfevents.1700000000.tf2host.777.0.v2|tfevents|timed|train_loss|"
  "detectron2/metrics.json|detectron2|timed|train_loss|"
  "eval_only.csv|csv|untimed|val_loss|"
  "mixed_case.csv|csv|timed|train_loss|"
  "bom.csv|csv|timed|train_loss|"
  "cr_only.csv|csv|timed|train_loss|"
)
for c in "${cases[@]}"; do
  IFS='|' read -r file format timing metric extra <<<"$c"
  log="$data/$file"
  read -r -a opts <<<"$extra"
  expect_rc 0 "log-info $file" "$viper" log-info --log "$log" "${opts[@]}" --json "$tmp/info.json"
  expect_in "$tmp/out" "format                 $format" "log-info $file names the format"
  expect_in "$tmp/info.json" "\"format\": \"$format\"" "log-info --json $file"
  if [ "$timing" = untimed ]; then
    expect_in "$tmp/out" "wall time              none in the log" "log-info $file says it has no wall time"
    tau=(--seconds-per-iteration 0.1)
    # Without a tau the error names the flag to give.
    expect_rc 1 "simulate $file without a tau" "$viper" simulate --log "$log" "${opts[@]}" "${sim_warmup[@]}"
    expect_match "$tmp/err" "seconds[-_]per[-_]iteration" "simulate $file names the tau setting"
  else
    expect_in "$tmp/out" "seconds per iteration" "log-info $file measures seconds per iteration"
    tau=()
  fi
  expect_rc 0 "fit $file" "$viper" fit --log "$log" --metric "$metric" --warmup 50%
  expect_in "$tmp/out" "selected:" "fit $file selects a model"
  expect_rc 0 "simulate $file" "$viper" simulate --log "$log" "${opts[@]}" "${sim_warmup[@]}" "${tau[@]}"
  expect_in "$tmp/out" "epoch" "simulate $file prints the strategies"
done

# The quirks each format has.
expect_rc 0 "keras epochs to iterations" "$viper" log-info --log "$data/keras_training.log" --iterations-per-epoch 937
expect_in "$tmp/out" "iterations             937 .. 15929" "keras: epoch e -> (e+1) x 937"
expect_rc 0 "hf summary skipped" "$viper" log-info --log "$data/hf/trainer_state.json"
expect_in "$tmp/out" "summary entries        1 skipped" "hf: the run summary is not a loss point"
expect_match "$tmp/out" "last 0\.70" "hf: the last loss is step 600's, not the run mean 0.9123"
expect_rc 0 "eval-only log" "$viper" log-info --log "$data/eval_only.csv"
expect_in "$tmp/out" "evaluation-only log" "eval-only: said so"
expect_rc 0 "simulate an eval-only log at the default warm-up" "$viper" simulate --log "$data/eval_only.csv" --seconds-per-iteration 0.1
expect_in "$tmp/out" "val_loss" "eval-only: planners observe the validation series"
expect_rc 0 "detectron2 durations" "$viper" log-info --log "$data/detectron2/metrics.json"
expect_in "$tmp/out" "seconds per iteration accumulated" "detectron2: time read as durations"
expect_rc 1 "detectron2 read as a clock" "$viper" log-info --log "$data/detectron2/metrics.json" --format jsonl
expect_in "$tmp/err" "--time-is-duration" "a time column that goes back: the hint"
printf 'iteration,loss,time\n10,2.0,0.35\n20,1.9,0.33\n30,1.8,0.37\n' >"$tmp/durations.csv"
expect_rc 1 "time going back" "$viper" log-info --log "$tmp/durations.csv"
expect_in "$tmp/err" "goes back from 0.35 (line 2) to 0.33" "time going back: both lines"
expect_rc 0 "--time-is-duration" "$viper" log-info --log "$tmp/durations.csv" --time-is-duration
expect_in "$tmp/out" "seconds per iteration  0.350000" "durations accumulate"
expect_rc 0 "tfevents --loss-tag" "$viper" log-info --log "$data/tb-pytorch/events.out.tfevents.1700000000.host.4242.0" --loss-tag lr
expect_rc 1 "tfevents unknown --loss-tag" "$viper" log-info --log "$data/tb-pytorch/events.out.tfevents.1700000000.host.4242.0" --loss-tag nope
expect_in "$tmp/err" "train/loss, lr, val/loss" "unknown tag: the tags present"
expect_rc 2 "negative --iterations-per-epoch" "$viper" log-info --log "$data/keras_training.log" --iterations-per-epoch -1
expect_rc 2 "unknown --format" "$viper" log-info --log "$data/bom.csv" --format protobuf
expect_rc 1 "/dev/zero" "$viper" log-info --log /dev/zero
expect_in "$tmp/err" "is not a regular file or a pipe" "/dev/zero: a device is refused at once, named"
mkfifo "$tmp/nobody.csv"
expect_rc 1 "a FIFO that no writer opens" "$viper" log-info --log "$tmp/nobody.csv"
expect_in "$tmp/err" "is a pipe and nothing was written to it within 10 s" "a FIFO without a writer fails after the pipe wait, named"
expect_rc 0 "a pipe with a writer (process substitution)" "$viper" log-info --log <(printf 'iteration,train_loss\n1,2.5\n2,2.25\n')
expect_rc 1 "--max-rows" "$viper" log-info --log "$data/bom.csv" --max-rows 10
expect_in "$tmp/err" "more than 10 rows" "--max-rows: the limit in the message"

expect_rc 0 "log-info --json -" "$viper" log-info --log "$data/hf/trainer_state.json" --json -
if [ "$(head -c 1 "$tmp/out")" = "{" ] && ! grep -q "^format " "$tmp/out"; then passes=$((passes + 1)); else
  echo "FAIL: log-info --json - must write only JSON to stdout"; fails=$((fails + 1)); fi
expect_in "$tmp/err" "format                 hf-trainer-state" "log-info --json -: the table on stderr"

# Every hostile seed: exit 1, one short message, never a crash or a hang.
n=0
for f in "$corpus"/hostile-*; do
  [ -e "$f" ] || continue
  n=$((n + 1))
  expect_rc 1 "hostile $(basename "$f")" "$viper" log-info --log "$f"
  size=$(wc -c <"$tmp/err")
  if [ "$size" -gt 2000 ]; then
    echo "FAIL: hostile $(basename "$f"): a $size-byte message"; fails=$((fails + 1))
  fi
done
if [ "$n" -lt 20 ]; then echo "FAIL: only $n hostile seeds in $corpus"; fails=$((fails + 1)); fi

# A TensorBoard export of a restarted run (issue 26, item 12): the steps go
# back; the orphaned ones are discarded as TensorBoard does, and said.
printf 'Wall time,Step,Value\n1000,10,2.0\n1001,20,1.8\n1002,30,1.7\n2000,20,1.75\n2001,30,1.6\n2002,40,1.5\n' \
  >"$tmp/run-restart-tag-train_loss.csv"
expect_rc 0 "log-info on a restarted run's TensorBoard export" "$viper" log-info --log "$tmp/run-restart-tag-train_loss.csv" --json "$tmp/restart.json"
expect_in "$tmp/out" "restarts               1" "log-info says the run restarted"
expect_in "$tmp/err" "orphaned values discarded" "a warning on stderr"
expect_in "$tmp/restart.json" '"discarded_orphaned_rows": 2' "log-info JSON: discarded_orphaned_rows"

finish "log formats"
