#!/usr/bin/env bash
# CLI contract tests: exit 0 on success, 1 on bad input, 2 on bad usage;
# --help on every command; JSON output parses.
set -u
viper="$1"
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0

expect_rc() {  # expect_rc <rc> <description> <command...>
  local want="$1" what="$2"
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: exit $got, expected $want"; sed 's/^/  | /' "$tmp/err" | head -5
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
expect_in() {  # expect_in <file> <text> <description>
  if grep -qF -- "$2" "$1"; then passes=$((passes + 1)); else echo "FAIL: $3: '$2' not in output"; fails=$((fails + 1)); fi
}

expect_rc 0 "top-level help" "$viper" --help
expect_in "$tmp/out" "log-info" "help lists log-info"
expect_rc 2 "no command" "$viper"
expect_rc 2 "unknown command" "$viper" frobnicate
expect_rc 0 "version" "$viper" --version
expect_rc 2 "run: unknown fan-out plan" "$viper" run --fanout ring
expect_in "$tmp/err" "--fanout: expected node, direct or tree" "run names the bad --fanout"
expect_rc 2 "run: one-sided host protocol" "$viper" run --host-protocol one-sided
expect_in "$tmp/err" "--host-protocol: expected shm or two-sided" "run names the bad --host-protocol"

# Every command has --help that exits 0.
for cmd in $("$viper" --help | awk '/^Commands:/{on=1; next} on && NF {print $1} /^$/{if(on) exit}'); do
  expect_rc 0 "$cmd --help" "$viper" "$cmd" --help
  expect_in "$tmp/out" "Usage: viper $cmd" "$cmd --help shows usage"
done

printf 'iteration,epoch,wall_time,train_loss,val_loss\n1,0,0.0,2.0,\n2,0,0.5,1.5,1.6\n3,1,1.0,1.2,\n' >"$tmp/ok.csv"
expect_rc 0 "log-info on a good log" "$viper" log-info --log "$tmp/ok.csv" --json "$tmp/info.json"
expect_in "$tmp/out" "rows                   3" "log-info prints rows"
expect_in "$tmp/info.json" '"rows": 3' "log-info JSON has rows"
expect_in "$tmp/info.json" '"seconds_per_iteration": 0.5' "log-info JSON has seconds per iteration"
expect_rc 2 "log-info without --log" "$viper" log-info
expect_rc 2 "log-info with an unknown option" "$viper" log-info --log "$tmp/ok.csv" --bogus
expect_rc 1 "log-info on a missing file" "$viper" log-info --log "$tmp/missing.csv"
expect_in "$tmp/err" "missing.csv" "error names the file"
printf 'iteration,train_loss\n1,2.0\n2,nan\n' >"$tmp/nan.csv"
expect_rc 1 "log-info on a NaN loss" "$viper" log-info --log "$tmp/nan.csv"
expect_in "$tmp/err" "nan.csv:3" "error names file and line"
expect_rc 0 "log-info dropping NaN" "$viper" log-info --log "$tmp/nan.csv" --non-finite drop
expect_in "$tmp/out" "dropped rows" "dropped rows are reported"
expect_rc 2 "bad --format" "$viper" log-info --log "$tmp/ok.csv" --format xml
: >"$tmp/empty.csv"
expect_rc 1 "empty log" "$viper" log-info --log "$tmp/empty.csv"

# The main job and planning on a shipped real log.
log="$src/datasets/logs/sgd-h256.csv.gz"
if [ -f "$log" ]; then
  expect_rc 0 "simulate on the shipped log" "$viper" simulate --log "$log" -q --json "$tmp/sim.json" --trace "$tmp/trace.json" --requests-csv "$tmp/req.csv"
  for s in epoch viper-fixed viper-greedy fixed optimal online oracle; do
    expect_in "$tmp/out" "$s" "simulate table lists $s"
    expect_in "$tmp/sim.json" "\"strategy\": \"$s\"" "simulate JSON lists $s"
  done
  expect_in "$tmp/sim.json" '"regret_vs_oracle": 0.0' "the oracle has zero regret"
  expect_in "$tmp/trace.json" '"traceEvents"' "trace is Chrome trace-event JSON"
  expect_in "$tmp/req.csv" "time_s,version,iteration,loss" "requests CSV has its header"
  expect_rc 0 "simulate with measured transport costs" "$viper" simulate --log "$log" -q --strategies optimal --cost-model "$src/bench/results/cost-samples-2core-vm.csv" --transport host --mode async
  expect_in "$tmp/out" "transport measured" "simulate reports measured costs"
  expect_rc 1 "simulate with costs for a tier the file lacks" "$viper" simulate --log "$log" -q --cost-model "$src/bench/results/cost-samples-2core-vm.csv" --transport gpu
  expect_in "$tmp/err" "no stall/transfer/load samples for tier 'gpu'" "the error names the missing tier"
  expect_rc 0 "plan one strategy" "$viper" plan --log "$log" --strategy optimal --json "$tmp/plan.json"
  expect_in "$tmp/out" "schedule:" "plan prints the schedule"
  expect_in "$tmp/plan.json" '"exact": true' "optimal is exact"
  expect_rc 2 "plan with an unknown strategy" "$viper" plan --log "$log" --strategy clairvoyant
  expect_rc 1 "simulate with a warm-up past the end" "$viper" simulate --log "$log" -q --warmup 999999
  expect_in "$tmp/err" "warm-up" "the error explains the warm-up"
  expect_rc 0 "simulate one strategy" "$viper" simulate --log "$log" -q --strategies epoch,oracle
  expect_in "$tmp/out" "judged on test_loss (a sample the planners never see)" "simulate says what it judges on"
  expect_in "$tmp/sim.json" '"truth_metric": "test_loss"' "simulate JSON names the truth"
  expect_rc 1 "simulate refuses test_loss as a planning metric" "$viper" simulate --log "$log" -q --metric test_loss
  expect_in "$tmp/err" "test_loss" "the refusal names test_loss"
  expect_rc 0 "evaluate on one log, one tier, both windows" "$viper" evaluate --logs "$log" --tiers gpu --warmups 0.2 -q --strategies epoch,online --json "$tmp/eval.json"
  expect_in "$tmp/out" "sgd-h256/gpu/w20/req" "evaluate lists the fixed-window case"
  expect_in "$tmp/eval.json" '"worst_regret"' "evaluate JSON has the summary"
  expect_rc 2 "evaluate with a warm-up outside (0, 1)" "$viper" evaluate --logs "$log" --warmups 1.5
  expect_rc 2 "evaluate with an unknown window" "$viper" evaluate --logs "$log" --windows forever
  expect_rc 1 "simulate with a negative gate" "$viper" simulate --log "$log" -q --gate-z -1
  expect_rc 1 "evaluate on a missing log" "$viper" evaluate --logs "$tmp/missing.csv" -q --tiers gpu --warmups 0.2 --windows while-training
  expect_rc 2 "simulate with an unknown tier" "$viper" simulate --log "$log" -q --transport tape
  expect_rc 1 "simulate with a negative request interval" "$viper" simulate --log "$log" -q --request-interval-s -1
else
  echo "FAIL: shipped log $log missing"; fails=$((fails + 1))
fi

echo "cli: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
