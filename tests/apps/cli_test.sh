#!/usr/bin/env bash
# CLI contract tests: exit 0 on success, 1 on bad input, 2 on bad usage
# (every bad option value, in every command); --help on every command with
# defaults; JSON output parses, carries a schema key, --json - is pure JSON;
# absurd sizes, NaN/negative values and non-UTF-8 paths are clean errors.
set -u
viper="$1"
src="$2"
. "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

expect_rc 0 "top-level help" "$viper" --help
expect_in "$tmp/out" "log-info" "help lists log-info"
expect_rc 2 "no command" "$viper"
expect_rc 2 "unknown command" "$viper" frobnicate
expect_rc 0 "version" "$viper" --version
expect_rc 2 "run: unknown fan-out plan" "$viper" run --fanout ring
expect_in "$tmp/err" "--fanout: expected node, direct or tree" "run names the bad --fanout"
expect_rc 2 "run: --delta on the gpu tier" "$viper" run --delta on --transport gpu
expect_in "$tmp/err" "--delta: on needs tier host" "run names --delta and the tiers it needs"
expect_rc 2 "run: unknown --delta mode" "$viper" run --delta sometimes
expect_in "$tmp/err" "--delta: expected auto, on or off" "run names the bad --delta"
expect_rc 2 "run: one-sided host protocol" "$viper" run --host-protocol one-sided
expect_in "$tmp/err" "--host-protocol: expected shm or two-sided" "run names the bad --host-protocol"

# Every command has --help that exits 0.
for cmd in $("$viper" --help | awk '/^Commands:/{on=1; next} on && NF {print $1} /^$/{if(on) exit}'); do
  expect_rc 0 "$cmd --help" "$viper" "$cmd" --help
  expect_in "$tmp/out" "Usage: viper $cmd" "$cmd --help shows usage"
done

printf 'iteration,epoch,wall_time,train_loss,val_loss\n1,0,0.0,2.0,\n2,0,0.5,1.5,1.6\n3,1,1.0,1.2,\n' >"$tmp/ok.csv"
"$viper" --help >"$tmp/help"
expect_in "$tmp/help" "3 \`viper run\` finished but lost consumers" "help documents the lost-consumer exit code"
expect_in "$tmp/help" "2 bad usage" "help documents the usage exit code"
expect_rc 0 "log-info on a good log" "$viper" log-info --log "$tmp/ok.csv" --json "$tmp/info.json"
expect_in "$tmp/out" "rows                   3" "log-info prints rows"
expect_in "$tmp/info.json" '"rows": 3' "log-info JSON has rows"
expect_in "$tmp/info.json" '"seconds_per_iteration": 0.5' "log-info JSON has seconds per iteration"
expect_rc 2 "log-info without --log" "$viper" log-info
expect_rc 2 "log-info with an unknown option" "$viper" log-info --log "$tmp/ok.csv" --bogus
expect_rc 1 "log-info on a missing file" "$viper" log-info --log "$tmp/missing.csv"
expect_in "$tmp/err" "missing.csv" "error names the file"
printf 'iteration,train_loss\n1,2.0\n2,nan\n' >"$tmp/nan.csv"
expect_rc 0 "log-info on a NaN loss (a diverged model by default)" "$viper" log-info --log "$tmp/nan.csv"
expect_in "$tmp/out" "diverged               1 non-finite losses kept as +inf" "log-info reports the divergence"
expect_rc 1 "log-info refusing a NaN loss" "$viper" log-info --log "$tmp/nan.csv" --non-finite reject
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
  expect_in "$tmp/req.csv" "time_s,version,iteration,traffic_iteration,loss" "requests CSV has its header"
  # --requests-csv records --trace-strategy's run (optimal by default): one
  # that --strategies does not plan is bad usage, not a file left unwritten.
  rm -f "$tmp/req2.csv"
  expect_rc 2 "--requests-csv for a strategy not planned" "$viper" simulate --log "$log" -q --strategies online,oracle --requests-csv "$tmp/req2.csv"
  expect_in "$tmp/err" "records --trace-strategy optimal, which --strategies online,oracle does not plan" "the error names the traced strategy and the list"
  expect_rc 0 "--requests-csv of online" "$viper" simulate --log "$log" -q --strategies online,oracle --trace-strategy online --requests-csv "$tmp/req2.csv"
  expect_in "$tmp/req2.csv" "time_s,version,iteration,traffic_iteration,loss" "online's requests CSV is written"
  # A staleness table: requests are charged L(version, traffic); the JSON says which judge.
  expect_in "$tmp/sim.json" '"judge": "diagonal"' "without a table the judge is the diagonal"
  expect_in "$tmp/out" "a stale version is charged the loss it had on its own traffic" "the table says a stale version is charged its own-time loss"
  expect_in "$tmp/out" "replayed clock after the warm-up" "simulate prints the replayed clock"
  # Re-measuring: --remeasure-s takes auto or seconds (bad usage otherwise);
  # online's re-measurements on traffic new to a model are counted, and with
  # a table on the rotation run they are charged as producer pauses.
  expect_rc 2 "--remeasure-s takes auto or seconds" "$viper" simulate --log "$log" -q --remeasure-s soon
  expect_in "$tmp/err" "--remeasure-s 'soon': expected auto or seconds in [0, 3600]" "the error names the value and what is expected"
  rot="$src/datasets/logs/rotate-sgd-h256.csv.gz"
  expect_rc 0 "simulate with re-measuring charged" "$viper" simulate --log "$rot" --staleness auto -q --strategies online,oracle --transport host --remeasure-s 0.03 --remeasure pause --json "$tmp/rm.json"
  if /usr/bin/python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
on = [s for s in j['strategies'] if s['strategy'] == 'online'][0]
ok = j['transport']['remeasure_s'] == 0.03 and on['remeasurements'] >= 10 and abs(on['remeasure_s'] - 0.03 * on['remeasurements']) < 1e-9
sys.exit(0 if ok else 1)" "$tmp/rm.json"; then passes=$((passes + 1)); else fail "online's re-measurements are counted and charged 0.03 s each" "$tmp/rm.json"; fi
  # Beside training (--remeasure beside): the decisions wait instead; the
  # producer pauses only for the copies set aside and the overruns.
  expect_rc 2 "--remeasure takes pause or beside" "$viper" simulate --log "$log" -q --remeasure aside
  expect_rc 0 "simulate with re-measuring beside training" "$viper" simulate --log "$rot" --staleness auto -q --strategies online,oracle --transport host --remeasure-s 0.03 --remeasure beside --json "$tmp/rmb.json"
  if /usr/bin/python3 -c "
import json, sys
j, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
on = [s for s in j['strategies'] if s['strategy'] == 'online'][0]
onp = [s for s in p['strategies'] if s['strategy'] == 'online'][0]
ok = j['transport']['remeasure'] == 'beside' and p['transport']['remeasure'] == 'pause' and on['remeasure_wait_s'] > 0 \
     and on['remeasure_s'] < 0.5 * onp['remeasure_s'] and onp['remeasure_wait_s'] == 0
sys.exit(0 if ok else 1)" "$tmp/rmb.json" "$tmp/rm.json"; then passes=$((passes + 1)); else fail "beside training the decisions wait and the producer pauses less" "$tmp/rmb.json"; fi
  # The replayed clock next to tau: regular on the shipped log; a copy that
  # stalls 30 s at three points after the warm-up is irregular, and evaluate
  # says so once for the log (not once per case).
  expect_in "$tmp/sim.json" '"irregular": false' "the shipped log's replayed clock is regular"
  zcat "$log" | awk -F, 'BEGIN { OFS = "," } NR == 1 { print; next } { if ($1 == 2000 || $1 == 2500 || $1 == 3000) e += 30; $3 += e; print }' >"$tmp/loaded.csv"
  expect_rc 0 "evaluate on a log written on a loaded machine" "$viper" evaluate --logs "$tmp/loaded.csv" --tiers gpu,host --warmups 20% --strategies epoch -q --json "$tmp/loaded.json"
  expect_in "$tmp/err" "an irregular pace" "evaluate warns about the irregular replayed clock"
  if [ "$(grep -c "an irregular pace" "$tmp/err")" = 1 ]; then passes=$((passes + 1)); else fail "evaluate warns once per log, not per case" "$tmp/err"; fi
  expect_in "$tmp/loaded.json" '"irregular": true' "the evaluate JSON marks the irregular clock"
  swap="$src/datasets/logs/swap-sgd-h256.csv.gz"
  expect_rc 0 "simulate with the staleness table beside the log" "$viper" simulate --log "$swap" -q --staleness auto --json "$tmp/st.json" --requests-csv "$tmp/st.csv"
  expect_in "$tmp/st.json" '"judge": "staleness table"' "with a table the JSON names the judge"
  expect_in "$tmp/st.json" 'swap-sgd-h256.staleness.csv.gz' "the JSON names the table"
  expect_in "$tmp/out" "charged the staleness table's test_loss" "the table line says what requests were charged"
  printf 'version_iteration,traffic_iteration,val_loss,test_loss\n0,0,1,1\n0,5,1,-2\n' >"$tmp/bad.staleness.csv"
  expect_rc 1 "a hostile staleness table is bad input" "$viper" simulate --log "$swap" -q --staleness "$tmp/bad.staleness.csv"
  expect_in "$tmp/err" "bad.staleness.csv:3" "the error names the table's file and line"
  expect_rc 1 "another run's table is refused" "$viper" simulate --log "$log" -q --staleness "$src/datasets/logs/swap-sgd-h256.staleness.csv.gz"
  expect_in "$tmp/err" "is not a staleness table of" "the error says the table is another run's"
  expect_rc 2 "an empty --staleness is bad usage" "$viper" simulate --log "$swap" -q --staleness ""
  expect_in "$tmp/st.json" '"traffic_clock": "wall"' "the JSON names the traffic clock (wall by default)"
  expect_rc 0 "simulate with the producer traffic clock" "$viper" simulate --log "$swap" -q --staleness auto --traffic-clock producer --transport pfs --json "$tmp/stw.json"
  expect_in "$tmp/stw.json" '"traffic_clock": "producer"' "the JSON says the traffic followed the producer's clock"
  expect_in "$tmp/out" "traffic clock: producer" "the table line says which clock the traffic followed"
  expect_rc 0 "simulate recurring domains: online and the oracle re-publish kept models" "$viper" simulate --log "$src/datasets/logs/recur-sgd-h256.csv.gz" -q --staleness auto --transport gpu --strategies online,oracle --json "$tmp/rec.json"
  expect_in "$tmp/rec.json" '"published"' "the JSON lists the model each checkpoint published"
  expect_in "$tmp/rec.json" "re-published a kept version" "online's summary counts its re-publishes"
  # The causal pair bound against the partner whose traffic never returns:
  # the tables agree until the return at 1750 (last common point 1700), and
  # the first return forces some regret on pfs (7.3% on this build).
  expect_rc 0 "simulate the causal pair bound" "$viper" simulate --log "$src/datasets/logs/recur-sgd-h256.csv.gz" -q --staleness auto --transport pfs --strategies oracle --versus-staleness "$src/datasets/pairs/recur-once-sgd-h256.staleness.csv.gz" --json "$tmp/pair.json"
  expect_in "$tmp/out" "causal pair bound against" "the table line gives the causal pair bound"
  expect_in "$tmp/pair.json" '"agree_until_traffic": 1700' "the runs agree until the last point before the return"
  if /usr/bin/python3 -c "import json,sys; b=json.load(open(sys.argv[1]))['causal_pair_bound']['bound']; sys.exit(0 if 0.01 < b < 0.5 else 1)" "$tmp/pair.json"; then passes=$((passes + 1)); else fail "the first return forces a bound between 1% and 50% on pfs" "$tmp/pair.json"; fi
  # The family form: the same partner and the run's own table again, with
  # weight 0.2 on this run: the run weighs 0.6 in all, the partner 0.4, so
  # the bound is the pair bound at weight 0.6 (its by_lambda).
  expect_rc 0 "simulate the causal bound over a family" "$viper" simulate --log "$src/datasets/logs/recur-sgd-h256.csv.gz" -q --staleness auto --transport pfs --strategies oracle --versus-staleness "$src/datasets/pairs/recur-once-sgd-h256.staleness.csv.gz" --versus-staleness "$src/datasets/logs/recur-sgd-h256.staleness.csv.gz" --versus-self-weight 0.2 --json "$tmp/family.json"
  expect_in "$tmp/out" "causal bound over this run and 2 others" "the table line gives the family's bound"
  if /usr/bin/python3 -c "
import json, sys
f = json.load(open(sys.argv[1]))['causal_bound']
p = json.load(open(sys.argv[2]))['causal_pair_bound']
at = next(x['bound'] for x in p['by_lambda'] if abs(x['lambda'] - 0.6) < 1e-9)
runs = f['runs']
ok = abs(f['bound'] - at) < 1e-9 and f['weights'] == [0.2, 0.4, 0.4] and runs[1]['agree_until_traffic'] == 1700
# The bound is the weighted mean of the runs' regrets under its schedules.
ok = ok and abs(sum(w * r['regret'] for w, r in zip(f['weights'], runs)) - f['bound']) < 1e-9
sys.exit(0 if ok else 1)" "$tmp/family.json" "$tmp/pair.json"; then passes=$((passes + 1)); else fail "the family with the run twice is the pair bound at weight 0.6" "$tmp/family.json"; fi
  expect_rc 2 "--versus-self-weight outside (0, 1) is bad usage" "$viper" simulate --log "$src/datasets/logs/recur-sgd-h256.csv.gz" -q --staleness auto --strategies oracle --versus-staleness "$src/datasets/pairs/recur-once-sgd-h256.staleness.csv.gz" --versus-staleness "$src/datasets/logs/recur-sgd-h256.staleness.csv.gz" --versus-self-weight 1.5
  expect_rc 2 "--versus-self-weight with one partner is bad usage" "$viper" simulate --log "$src/datasets/logs/recur-sgd-h256.csv.gz" -q --staleness auto --strategies oracle --versus-staleness "$src/datasets/pairs/recur-once-sgd-h256.staleness.csv.gz" --versus-self-weight 0.5
  expect_in "$tmp/err" "needs --versus-staleness given at least twice" "the error says why"
  many=()
  for q in $(seq 17); do many+=(--versus-staleness "$src/datasets/pairs/recur-once-sgd-h256.staleness.csv.gz"); done
  expect_rc 2 "seventeen --versus-staleness tables are bad usage" "$viper" simulate --log "$src/datasets/logs/recur-sgd-h256.csv.gz" -q --staleness auto --strategies oracle "${many[@]}"
  expect_in "$tmp/err" "at most 16" "the error gives the cap"
  expect_rc 1 "the causal pair bound needs the log's own table" "$viper" simulate --log "$src/datasets/logs/recur-sgd-h256.csv.gz" -q --staleness none --strategies oracle --versus-staleness "$src/datasets/pairs/recur-once-sgd-h256.staleness.csv.gz"
  expect_in "$tmp/err" "needs this log's own staleness table" "the error says what is missing"
  expect_rc 1 "a missing partner table is bad input" "$viper" simulate --log "$src/datasets/logs/recur-sgd-h256.csv.gz" -q --staleness auto --strategies oracle --versus-staleness "$tmp/none.staleness.csv"
  # On host, where a return is published ahead of its predicted switch (on
  # gpu, since the fiftieth session's switch placement, the prediction is
  # later and the return's model goes out when the switch is seen, "kept").
  expect_rc 0 "simulate writes online's decisions" "$viper" simulate --log "$src/datasets/logs/recur-sgd-h256.csv.gz" -q --staleness auto --transport host --strategies online --json "$tmp/dec.json" --decisions-csv "$tmp/dec.csv"
  expect_in "$tmp/dec.csv" "iteration,traffic_iteration,candidate_loss,served_model,served_loss,noise_sd" "the decisions CSV's header"
  expect_in "$tmp/dec.csv" ",plan_wants,planned_checkpoint,gated," "the decisions CSV says which checkpoint the re-plan takes first"
  checkpoints="$(grep -o '"checkpoints": *[0-9]*' "$tmp/dec.json" | head -n 1 | grep -o '[0-9]*$')"
  publishes="$(awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == "publish") c = i; next } c && $c == 1' "$tmp/dec.csv" | wc -l)"
  if [ -n "$checkpoints" ] && [ "$publishes" -eq "$checkpoints" ]; then passes=$((passes + 1)); else fail "one publishing decision per checkpoint: $publishes rows, $checkpoints checkpoints" "$tmp/dec.csv"; fi
  expect_in "$tmp/dec.csv" ",ahead," "a publish ahead of a predicted return is named"
  expect_in "$tmp/dec.csv" ",predicted_switch,judge_traffic_iteration" "the decisions CSV ends with the judge's traffic position"
  judged="$(awk -F, 'NR > 1 && $NF ~ /^[0-9.]+$/ && $NF + 0 >= $1 + 0' "$tmp/dec.csv" | wc -l)"
  rows="$(awk 'NR > 1' "$tmp/dec.csv" | wc -l)"
  if [ "$rows" -gt 0 ] && [ "$judged" -eq "$rows" ]; then passes=$((passes + 1)); else fail "every decision has the judge's traffic position, at or past its iteration: $judged of $rows" "$tmp/dec.csv"; fi
  expect_rc 2 "--decisions-csv without online" "$viper" simulate --log "$swap" -q --strategies epoch --decisions-csv "$tmp/x.csv"
  expect_in "$tmp/err" "--decisions-csv records online's decisions" "the error says what --decisions-csv needs"
  expect_rc 0 "plan the oracle on recurring domains" "$viper" plan --log "$src/datasets/logs/recur-sgd-h256.csv.gz" --staleness auto --transport gpu --strategy oracle --json "$tmp/recplan.json"
  expect_in "$tmp/out" "re-published: " "plan lists the checkpoints that publish an older model"
  expect_in "$tmp/recplan.json" '"cil_on_log": 2429.3' "plan's CIL on log is charged on the table, re-publishes included"
  expect_rc 0 "plan the oracle on recurring domains under the producer clock" "$viper" plan --log "$src/datasets/logs/recur-sgd-h256.csv.gz" --staleness auto --transport gpu --strategy oracle --traffic-clock producer --json "$tmp/recplan.json"
  expect_in "$tmp/recplan.json" '"cil_on_log": 2435.7' "the same plan on the producer's clock"
  expect_rc 2 "--keep-versions out of range" "$viper" simulate --log "$swap" -q --keep-versions 5000
  expect_in "$tmp/err" "--keep-versions" "the error names --keep-versions"
  expect_rc 2 "--anticipate-returns bad value" "$viper" simulate --log "$swap" -q --anticipate-returns maybe
  expect_in "$tmp/err" "--anticipate-returns maybe: expected on or off" "the error names --anticipate-returns and its values"
  expect_rc 2 "--ramp-hold bad value" "$viper" simulate --log "$swap" -q --ramp-hold 1
  expect_in "$tmp/err" "--ramp-hold 1: expected on or off" "the error names --ramp-hold and its values"
  expect_rc 2 "an unknown --traffic-clock is bad usage" "$viper" simulate --log "$swap" -q --traffic-clock sundial
  expect_in "$tmp/err" "expected producer or wall" "the error lists the traffic clocks"
  # A run that diverges to NaN: read as a diverged model by default; the judge charges epoch +inf, online never serves one.
  div="$src/datasets/logs/diverge-sgd-h256.csv.gz"
  expect_rc 0 "simulate a run that diverges" "$viper" simulate --log "$div" -q --staleness auto --transport host --strategies epoch,online,oracle --json "$tmp/div.json"
  expect_in "$tmp/out" "the run diverged: " "simulate says the run diverged"
  expect_in "$tmp/out" "epoch served " "simulate names the strategy that served a diverged model"
  expect_not_in "$tmp/out" "online served " "online never serves a diverged model"
  "$py" -c "
import json, sys
d = {s['strategy']: s for s in json.load(open('$tmp/div.json'))['strategies']}
assert d['epoch']['diverged_requests'] > 0 and d['epoch']['cil'] is None, d['epoch']
assert d['online']['diverged_requests'] == 0 and d['online']['cil'] > 0, d['online']
assert max(d['online']['schedule'] + [0]) < 2500, d['online']['schedule']
" && passes=$((passes + 1)) || fail "the JSON counts diverged requests (epoch > 0, online 0)"
  if command -v gnuplot >/dev/null 2>&1; then
    expect_rc 0 "plot a run that diverges" "$viper" simulate --log "$div" -q --staleness auto --transport host --strategies epoch,online,oracle --plot "$tmp/div.png"
    [ -s "$tmp/div.png" ] && passes=$((passes + 1)) || fail "the diverged run's plot is written"
  fi
  expect_rc 0 "plan a run that diverges" "$viper" plan --log "$div" --transport host --strategy epoch,online
  expect_match "$tmp/out" "^epoch .* inf " "plan charges epoch's diverged versions +inf on the log"
  expect_rc 1 "--non-finite reject refuses a diverged run" "$viper" simulate --log "$div" -q --non-finite reject
  expect_in "$tmp/err" "diverge-sgd-h256.csv.gz:2503" "the refusal names the file and line"
  # evaluate with a table: the val-oracle row (the exact optimum on val_loss judged on test_loss) per case and in the summary.
  expect_rc 0 "evaluate with a staleness table" "$viper" evaluate --logs "$swap" -q --staleness auto --tiers gpu --warmups 20% --windows while-training --strategies online --json "$tmp/ev.json"
  expect_in "$tmp/out" "(val-oracle +" "each case with a table shows the val-oracle's regret"
  expect_in "$tmp/out" "val-oracle: the exact optimum on the staleness table's val_loss" "the summary explains the val-oracle"
  expect_in "$tmp/ev.json" '"val_oracle"' "the JSON has the val-oracle per case and in the summary"
  # The after-drift bound (the oracle made to begin with online's checkpoints
  # from before the traffic changed): the swap at 2500 is found, the bound
  # keeps exactly those checkpoints, lies between the oracle and online, and
  # online's regret against it is its CIL over the bound's.
  expect_in "$tmp/out" "online vs it" "the summary splits online's regret at the change"
  if "$py" - "$tmp/ev.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["cases"] and "after_drift_bound" in j["summary"], j["summary"].keys()
for c in j["cases"]:
    b, on = c["after_drift_bound"], c["strategies"]["online"]
    assert 2450 <= b["last_unchanged_traffic"] < 2500 <= b["drift_traffic"] <= 2550, b
    k = b["prefix_checkpoints"]
    assert b["schedule"][:k] == b["online_schedule"][:k], b
    assert all(s <= 2500 for s in b["online_schedule"][:k]), b
    assert b["regret_vs_oracle"] >= -1e-3 and b["online_regret_vs_bound"] >= -1e-3, b
    assert abs(b["online_regret_vs_bound"] - (on["cil"] / b["cil"] - 1)) < 1e-9, (b, on["cil"])
    assert c["traffic_change"] == b["drift_traffic"], c["traffic_change"]
PY
  then passes=$((passes + 1)); else fail "the after-drift bound keeps online's pre-swap checkpoints and bounds it"; fi
  # traffic_change: null on the calm control's table, absent without a table.
  expect_rc 0 "evaluate a calm table and a log without one" "$viper" evaluate --logs "$src/datasets/logs/sgd-h256.csv.gz" -q --staleness auto --tiers gpu --warmups 20% --windows while-training --strategies online --json "$tmp/ev-calm.json"
  expect_rc 0 "evaluate a log without a table" "$viper" evaluate --logs "$src/datasets/logs/sgd-h256.csv.gz" -q --tiers gpu --warmups 20% --windows while-training --strategies online --json "$tmp/ev-diag.json"
  if "$py" - "$tmp/ev-calm.json" "$tmp/ev-diag.json" <<'PY'
import json, sys
calm, diag = (json.load(open(p))["cases"] for p in sys.argv[1:3])
assert calm and all(c["traffic_change"] is None for c in calm), calm
assert diag and all("traffic_change" not in c for c in diag), diag
PY
  then passes=$((passes + 1)); else fail "traffic_change is null on a calm table and absent without one"; fi
  # Per tier: the table and the JSON's by_tier, each tier's figures from that tier's cases only.
  expect_rc 0 "evaluate over two tiers" "$viper" evaluate --logs "$swap" -q --staleness auto --tiers gpu,pfs --warmups 20% --strategies epoch,online --json "$tmp/ev2.json"
  expect_match "$tmp/out" "^by tier +gpu: median \(worst\) +pfs: median \(worst\)" "evaluate prints the regret by tier"
  # check_breakdown JSON KEY FIELD GROUP...: summary.<epoch|online>.<KEY> has
  # exactly these groups, each from the two cases whose FIELD is that group.
  check_breakdown() {
    "$py" - "$@" <<'PY'
import json, statistics, sys
path, key, field, groups = sys.argv[1], sys.argv[2], sys.argv[3], set(sys.argv[4:])
j = json.load(open(path))
for k in ("epoch", "online"):
    by = j["summary"][k][key]
    assert set(by) == groups, by
    for group, row in by.items():
        r = [c["strategies"][k]["regret_vs_oracle"] for c in j["cases"] if c[field] == group]
        assert row["cases"] == len(r) == 2, (group, row)
        assert abs(row["median_regret"] - statistics.median(r)) < 1e-12, (k, group, row, r)
        assert abs(row["worst_regret"] - max(r)) < 1e-12, (k, group, row, r)
PY
  }
  if check_breakdown "$tmp/ev2.json" by_tier tier gpu pfs && "$py" - "$tmp/ev2.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("epoch", "online"):
    by = j["summary"][k]["by_tier"]
    assert by["gpu"]["median_regret"] != by["pfs"]["median_regret"]
PY
  then passes=$((passes + 1)); else fail "evaluate's by_tier figures are not those of each tier's cases" "$tmp/ev2.json"; fi
  # The warm-up fit's metric: a warm-up of 350 iterations holds 7 of the log's
  # val_loss points (every 50), fewer than the warm-up fit needs (8), so --metric
  # auto fits train_loss there and val_loss at 1000; the summary splits the two
  # and says why; online observes val_loss in all four.
  expect_rc 0 "evaluate with a warm-up too short for val_loss" "$viper" evaluate --logs "$log" -q --tiers gpu --warmups 350,1000 --strategies epoch,online --json "$tmp/ev3.json"
  expect_match "$tmp/out" "^by fit +val_loss: median \(worst\) +train_loss: median \(worst\)" "evaluate prints the regret by the warm-up fit's metric"
  expect_in "$tmp/out" "fit: 2 of 4 cases fitted the static strategies' curve to train_loss although the log has" "evaluate says which cases fell back to train_loss"
  if check_breakdown "$tmp/ev3.json" by_fit_metric metric val_loss train_loss && "$py" - "$tmp/ev3.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["summary"]["metric_fallback_cases"] == 2, j["summary"]["metric_fallback_cases"]
for c in j["cases"]:
    short = c["warmup_iterations"] == 350
    assert c["metric"] == ("train_loss" if short else "val_loss"), c["case"]
    assert ("metric_fallback" in c) == short, c["case"]
    assert c["online_metric"] == "val_loss", c["case"]
PY
  then passes=$((passes + 1)); else fail "evaluate's by_fit_metric figures are not those of each metric's cases" "$tmp/ev3.json"; fi
  # A log that fails part-way through a sweep: exit 1 naming the file, and the
  # cases judged before it are written to --json, marked incomplete.
  expect_rc 1 "evaluate with a staleness table given as a log" "$viper" evaluate --logs "$log,$src/datasets/logs/sgd-h256.staleness.csv.gz" -q --tiers gpu --warmups 20% --strategies epoch --json "$tmp/ev4.json"
  expect_in "$tmp/err" "sgd-h256.staleness.csv.gz:1: no iteration column" "the failing log is named"
  expect_in "$tmp/err" "wrote the 2 cases judged before the error to" "evaluate says it kept the finished cases"
  if "$py" - "$tmp/ev4.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["summary"]["incomplete"] is True and "no iteration column" in j["summary"]["error"], j["summary"]
assert [c["log"].endswith("sgd-h256.csv.gz") for c in j["cases"]] == [True, True], [c["case"] for c in j["cases"]]
PY
  then passes=$((passes + 1)); else fail "evaluate lost the cases judged before a failing log" "$tmp/ev4.json"; fi
  expect_rc 0 "simulate with measured transport costs" "$viper" simulate --log "$log" -q --strategies optimal --cost-model "$src/bench/results/cost-samples-2core-vm.csv" --transport host --mode async
  expect_in "$tmp/out" "transport measured" "simulate reports measured costs"
  expect_rc 1 "simulate with costs for a tier the file lacks" "$viper" simulate --log "$log" -q --cost-model "$src/bench/results/cost-samples-2core-vm.csv" --transport gpu
  expect_in "$tmp/err" "no stall/transfer/load samples for tier 'gpu'" "the error names the missing tier"
  expect_rc 0 "plan one strategy" "$viper" plan --log "$log" --strategy optimal --json "$tmp/plan.json"
  expect_in "$tmp/out" "schedule:" "plan prints the schedule"
  expect_in "$tmp/plan.json" '"exact": true' "optimal is exact"
  expect_rc 2 "plan with an unknown strategy" "$viper" plan --log "$log" --strategy clairvoyant
  # Boost would read "-1" into an unsigned option as 2^64 - 1.
  expect_rc 2 "simulate --seed -1" "$viper" simulate --log "$log" --seed -1
  expect_in "$tmp/err" "--seed '-1' is not valid: expected a non-negative integer" "negative unsigned option named"
  expect_rc 2 "a placeholder in a value" "$viper" plan --log "$log" --min-spacing %original_token%
  expect_in "$tmp/err" "--min-spacing: the argument" "placeholder error names the option"
  expect_rc 2 "simulate --max-line-bytes -1" "$viper" simulate --log "$log" --max-line-bytes -1
  expect_in "$tmp/err" "--max-line-bytes -1 is out of range" "a reader limit's range error names the option"
  expect_rc 2 "plan --replan-gap 0.5" "$viper" plan --log "$log" --strategy online --replan-gap 0.5
  expect_in "$tmp/err" "--replan-gap 0.5 is out of range" "the re-plan gap's range is named"
  expect_rc 0 "plan online with exact re-plans" "$viper" plan --log "$log" --strategy online --replan-gap 0 --requests 2000
  # -1 was the "not given" sentinel of --stall-s/--delay-s: given, it is out of range.
  expect_rc 2 "simulate --stall-s -1 --delay-s -1" "$viper" simulate --log "$log" --stall-s -1 --delay-s -1
  expect_in "$tmp/err" "--stall-s -1 is out of range" "a sentinel value given is refused"
  expect_rc 1 "simulate with a warm-up past the end" "$viper" simulate --log "$log" -q --warmup 999999
  expect_in "$tmp/err" "warm-up" "the error explains the warm-up"
  expect_rc 0 "simulate one strategy" "$viper" simulate --log "$log" -q --strategies epoch,oracle
  expect_in "$tmp/out" "judged on test_loss (a sample the planners never see)" "simulate says what it judges on"
  expect_in "$tmp/sim.json" '"truth_metric": "test_loss"' "simulate JSON names the truth"
  expect_rc 2 "simulate refuses test_loss as a planning metric" "$viper" simulate --log "$log" -q --metric test_loss
  expect_in "$tmp/err" "test_loss" "the refusal names test_loss"
  expect_rc 0 "evaluate on one log, one tier, both windows" "$viper" evaluate --logs "$log" --tiers gpu --warmups 20% -q --strategies epoch,online --json "$tmp/eval.json"
  expect_in "$tmp/out" "sgd-h256/gpu/w20/req" "evaluate lists the fixed-window case"
  expect_in "$tmp/eval.json" '"worst_regret"' "evaluate JSON has the summary"
  # Without a table too, each case shows the val-oracle: the exact optimum on
  # the log's val_loss judged on test_loss; its schedule is the oracle's when
  # val_loss is the truth (simulate --truth-metric val_loss).
  expect_in "$tmp/out" "test_loss (val-oracle +" "evaluate shows the val-oracle on the diagonal"
  expect_rc 0 "the oracle judged on val_loss" "$viper" simulate --log "$log" -q --transport gpu --warmup 20% --truth-metric val_loss --strategies oracle --json "$tmp/valtruth.json"
  if "$py" - "$tmp/eval.json" "$tmp/valtruth.json" <<'PY'
import json, sys
ev, sim = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
oracle = next(s for s in sim["strategies"] if s["strategy"] == "oracle")
case = next(c for c in ev["cases"] if c["case"] == "sgd-h256/gpu/w20/train")
vo = case["val_oracle"]
assert vo["checkpoints"] == oracle["checkpoints"], (vo, oracle["checkpoints"])
assert -1e-3 <= vo["regret_vs_oracle"] < 0.5, vo
assert all("val_oracle" in c for c in ev["cases"]) and ev["summary"]["val_oracle"]["cases"] == len(ev["cases"]), ev["summary"]
PY
  then passes=$((passes + 1)); else fail "the diagonal's val-oracle is the oracle planned on val_loss, judged on test_loss"; fi
  expect_rc 2 "evaluate with a warm-up outside (0, 1)" "$viper" evaluate --logs "$log" --warmups 1.5
  expect_rc 2 "evaluate with an unknown window" "$viper" evaluate --logs "$log" --windows forever
  expect_rc 2 "simulate with a negative gate" "$viper" simulate --log "$log" -q --gate-z -1
  expect_rc 1 "evaluate on a missing log" "$viper" evaluate --logs "$tmp/missing.csv" -q --tiers gpu --warmups 20% --windows while-training
  expect_rc 2 "simulate with an unknown tier" "$viper" simulate --log "$log" -q --transport tape
  expect_rc 2 "simulate with a negative request interval" "$viper" simulate --log "$log" -q --request-interval-s -1
  # --- Exit codes: a bad option value is 2 in every command (issue 18.9/18.8).
  for cmd in simulate plan; do
    for bad in "--requests -1" "--requests 1000000000000" "--slowdown-budget-s nan" "--seconds-per-iteration -0.01" \
               "--drift inf" "--poll-period-s 0" "--min-spacing 0" "--gate-z nan" "--model-bytes 1e30" \
               "--model-bytes 2P" "--total-iterations -5" "--warmup 0.2" "--warmup 120%" "--warmup -3" \
               "--transport nvme" "--mode eventually" "--arrivals bursty" "--metric test_loss" "--requests lots" \
               "--stall-s 1" "--seconds-per-epoch nan" "--wait-guard -1" "--wait-guard 1e4"; do
      # shellcheck disable=SC2086
      expect_rc 2 "$cmd $bad" "$viper" $cmd --log "$log" $bad
      opt="${bad%% *}"
      expect_in "$tmp/err" "$opt" "$cmd $bad: the message names $opt"
    done
  done
  expect_rc 2 "evaluate with NaN drift" "$viper" evaluate --logs "$log" --drift nan
  expect_in "$tmp/err" "--drift nan is out of range" "evaluate names the value"
  expect_rc 2 "evaluate with an unknown tier" "$viper" evaluate --logs "$log" --tiers tape
  expect_rc 2 "fit --predict-at -5" "$viper" fit --log "$log" --predict-at -5
  expect_in "$tmp/err" "--predict-at -5 is out of range" "fit names --predict-at and the value"
  expect_rc 2 "fit --band-z nan" "$viper" fit --log "$log" --band-z nan
  expect_rc 2 "fit --horizon inf" "$viper" fit --log "$log" --horizon inf
  expect_rc 2 "fit --warmup 0.2" "$viper" fit --log "$log" --warmup 0.2
  expect_rc 2 "train --drift-domains 1" "$viper" train --drift recurring --drift-at-iteration 100 --drift-domains 1
  expect_in "$tmp/err" "--drift-domains must be in [2, 8], got 1" "train names --drift-domains"
  expect_rc 2 "train --lr nan" "$viper" train --lr nan
  expect_in "$tmp/err" "--lr" "train names the flag, not the field"
  expect_rc 2 "train --lr-milestones garbage" "$viper" train --lr-milestones 2500:sixty
  expect_in "$tmp/err" "'2500:sixty' is not ITER:FACTOR" "train names the bad milestone"
  expect_rc 2 "train --lr-milestones out of order" "$viper" train --lr-milestones 2500:60,100:0.1
  expect_in "$tmp/err" "--lr-milestones[1]: iterations must increase" "train names the milestone flag and index"
  expect_rc 2 "train --freeze a tensor it does not have" "$viper" train --freeze x --max-iterations 1
  expect_in "$tmp/err" "'x' is not a tensor of this MLP" "train names the bad --freeze tensor and lists the MLP's"
  expect_rc 1 "train --init-model a missing file" "$viper" train --init-model "$tmp/no-such.safetensors" --max-iterations 1
  expect_in "$tmp/err" "no-such.safetensors" "train names the missing --init-model file"
  expect_rc 2 "train --hidden absurd" "$viper" train --hidden 1000000,1000000
  expect_in "$tmp/err" "the limit is 250000000" "train states the parameter limit"
  if "$viper" run --help >/dev/null 2>&1; then
    expect_rc 2 "run --requests-per-s nan" "$viper" run --requests-per-s nan
    expect_in "$tmp/err" "--requests-per-s nan is out of range" "run names the value"
    expect_rc 2 "run --model-bytes beyond memory" "$viper" run --workload replay --log "$log" --model-bytes 1e30
    expect_rc 2 "run --warmup 150%" "$viper" run --warmup 150%
    expect_rc 0 "run --help" "$viper" run --help
    expect_in "$tmp/out" "3 the run finished but lost consumers" "run --help documents exit 3"
    # The drift kinds of viper train and the run's staleness table (no MPI: refused before it starts).
    expect_rc 2 "run --drift-prior-mass off prior-shift" "$viper" run --drift recurring --drift-at-iteration 100 --drift-prior-mass 0.5
    expect_in "$tmp/err" "--drift-prior-mass: applies to --drift prior-shift only" "run names the drift an option applies to"
    expect_rc 2 "run --drift-prior-classes 0,11" "$viper" run --drift prior-shift --drift-at-iteration 100 --drift-prior-classes 0,11
    expect_in "$tmp/err" "--drift-prior-classes: '11' is not a class" "run names the bad class"
    expect_rc 2 "run --drift-domains 9" "$viper" run --drift recurring --drift-at-iteration 100 --drift-domains 9
    expect_in "$tmp/err" "--drift-domains must be in [2, 8], got 9" "run names --drift-domains"
    expect_rc 2 "run --drift-domains off recurring" "$viper" run --drift rotation --drift-at-iteration 100 --drift-domains 3
    expect_in "$tmp/err" "--drift-domains: applies to --drift recurring only" "run names the drift --drift-domains applies to"
    expect_rc 2 "run --drift-period 0" "$viper" run --drift recurring --drift-at-iteration 100 --drift-period 0
    expect_in "$tmp/err" "--drift-period must be >= 1" "run names --drift-period"
    expect_rc 2 "run --drift-swap-period off label-swap" "$viper" run --drift recurring --drift-at-iteration 100 --drift-swap-period 50
    expect_in "$tmp/err" "--drift-swap-period: applies to --drift label-swap only" "run names the drift --drift-swap-period applies to"
    expect_rc 2 "run --drift-swap-period -3" "$viper" run --drift label-swap --drift-at-iteration 100 --drift-swap-period -3
    expect_in "$tmp/err" "--drift-swap-period must be >= 0" "run names --drift-swap-period"
    expect_rc 2 "run --staleness-max-versions alone" "$viper" run --staleness-max-versions 4
    expect_in "$tmp/err" "given without --staleness-table" "run says what --staleness-max-versions needs"
    expect_rc 2 "run --staleness-max-versions 1" "$viper" run --staleness-table "$tmp/t.csv" --staleness-max-versions 1
    expect_in "$tmp/err" "--staleness-max-versions must be 0" "run names --staleness-max-versions"
    expect_rc 2 "run replay --staleness-table" "$viper" run --workload replay --log "$log" --staleness-table "$tmp/t.csv"
    expect_in "$tmp/err" "--staleness-table: a replay has no model versions" "run refuses a replay's table"
    printf '0123456789abcdef0123456789abcdef' >"$tmp/hmac.key"; chmod 600 "$tmp/hmac.key"
    expect_rc 2 "run --hmac-key-file on the host tier" "$viper" run --transport host --hmac-key-file "$tmp/hmac.key"
    expect_in "$tmp/err" "--hmac-key-file: needs tier pfs" "run names --hmac-key-file"
  fi
  # Program_options' own errors become one sentence: option, value, accepted values.
  expect_rc 2 "simulate --transport nvme" "$viper" simulate --log "$log" --transport nvme
  expect_in "$tmp/err" "--transport nvme: unknown transport tier 'nvme' (expected gpu, host or pfs)" "bad enum: one sentence"
  expect_not_in "$tmp/err" "for option is invalid" "no raw Program_options message"
  expect_rc 2 "simulate --requests lots" "$viper" simulate --log "$log" --requests lots
  expect_in "$tmp/err" "--requests 'lots' is not valid: expected a whole number" "bad number: one sentence"

  # An argument holding a Program_options placeholder looped forever inside
  # Boost's message formatting (fuzz/options_fuzz.cc found it).
  expect_rc 2 "plan with a placeholder in an unknown option" timeout 20 "$viper" plan --log "$log" --h%original_token%x
  expect_rc 2 "simulate with a placeholder in a value" timeout 20 "$viper" simulate --log "$log" --requests %value%

  # --- Absurd sizes are refused before allocating, naming option and limit (18.4).
  expect_rc 2 "simulate --request-interval-s 1e-12" "$viper" simulate --log "$log" -q --strategies epoch,oracle --request-interval-s 1e-12
  expect_in "$tmp/err" "the limit is 50000000 requests" "the implied request count names the limit"
  expect_in "$tmp/err" "--request-interval-s" "and the option"
  expect_rc 2 "simulate --requests 1e12" "$viper" simulate --log "$log" -q --requests 1000000000000
  expect_in "$tmp/err" "[0, 50000000]" "--requests states its limit"
  expect_rc 2 "simulate --model-bytes 1e30" "$viper" simulate --log "$log" -q --model-bytes 1e30
  expect_rc 2 "plan --total-iterations 2e7" "$viper" plan --log "$log" --total-iterations 20000000
  expect_in "$tmp/err" "[0, 10000000]" "--total-iterations states its limit"

  # --- Non-UTF-8 names reach JSON as U+FFFD, never an abort or a 0-byte file (18.3).
  cp "$log" "$tmp/latin1_"$'\xe9'".csv.gz"
  expect_rc 0 "simulate on a Latin-1 file name" "$viper" simulate --log "$tmp/latin1_"$'\xe9'".csv.gz" -q --strategies epoch,oracle --json "$tmp/latin1_"$'\xe9'".json"
  expect_json "$tmp/latin1_"$'\xe9'".json" "viper.simulate/1" "JSON named in Latin-1 about a Latin-1 log"
  expect_rc 1 "JSON into a missing directory" "$viper" plan --log "$log" --strategy epoch --json "$tmp/no/such/dir/plan.json"
  expect_in "$tmp/err" "cannot open" "the write error names the path"
  [ -z "$(ls -A "$tmp" | grep '\.tmp[.-]')" ] && passes=$((passes + 1)) || { echo "FAIL: temporary files left behind"; fails=$((fails + 1)); }

  # --- --json - is only JSON on stdout, every document has a schema (19.7).
  expect_stdout_json "simulate --json -" "$viper" simulate --log "$log" -q --strategies epoch,oracle --json -
  expect_stdout_json "plan --json -" "$viper" plan --log "$log" --strategy optimal --json -
  expect_stdout_json "fit --json -" "$viper" fit --log "$log" --json -
  expect_stdout_json "inspect --json -" "$viper" inspect --file "$src/fuzz/corpus/safetensors/valid-v2-table.safetensors" --json -
  mkdir -p "$tmp/models" && cp "$src/fuzz/corpus/safetensors/valid-v2-table.safetensors" "$tmp/models/model-v7.safetensors"
  expect_stdout_json "model-dir --json -" "$viper" model-dir --dir "$tmp/models" --json -
  expect_stdout_json "evaluate --json -" "$viper" evaluate --logs "$log" --tiers gpu --warmups 20% --windows while-training --strategies epoch -q --json -
  expect_json "$tmp/sim.json" "viper.simulate/1" "simulate JSON schema"
  expect_json "$tmp/trace.json" "viper.simulate-trace/1" "simulate trace schema"
  expect_json "$tmp/plan.json" "viper.plan/1" "plan JSON schema"
  expect_json "$tmp/eval.json" "viper.evaluate/1" "evaluate JSON schema"
  expect_rc 0 "fit with JSON" "$viper" fit --log "$log" --json "$tmp/fit.json"
  expect_json "$tmp/fit.json" "viper.fit/1" "fit JSON schema"
  expect_json "$tmp/info.json" "viper.log-info/1" "log-info JSON schema"
  printf '{"benchmarks":[{"name":"strategies/a/gpu/w20/epoch","run_type":"iteration","regret_vs_oracle":0.05,"change_vs_epoch":0},{"name":"strategies/a/gpu/w20/oracle","run_type":"iteration","regret_vs_oracle":0,"change_vs_epoch":-0.05}]}' >"$tmp/bench.json"
  expect_rc 0 "bench-summary with JSON" "$viper" bench-summary --input "$tmp/bench.json" --json "$tmp/bs.json"
  expect_json "$tmp/bs.json" "viper.bench-summary/1" "bench-summary JSON schema"

  # --- One warm-up syntax, N or P%, in every command (19.6).
  for w in 20% 900; do
    expect_rc 0 "simulate --warmup $w" "$viper" simulate --log "$log" -q --strategies epoch,oracle --warmup $w --json "$tmp/w.json"
    expect_rc 0 "plan --warmup $w" "$viper" plan --log "$log" --strategy optimal --warmup $w
    expect_rc 0 "fit --warmup $w" "$viper" fit --log "$log" --warmup $w
  done
  expect_in "$tmp/w.json" '"warmup_iterations": 900' "--warmup N ends the warm-up at iteration N"
  expect_rc 0 "evaluate --warmups 20%,900" "$viper" evaluate --logs "$log" --tiers gpu --warmups 20%,900 --windows while-training --strategies epoch -q
  expect_in "$tmp/out" "sgd-h256/gpu/w@900/train" "evaluate takes an iteration warm-up"
  # A Lightning-style log whose first logged step is 49: 20% of the span, not of the last step.
  awk 'BEGIN { print "step,train_loss"; for (i = 0; i < 100; i++) printf "%d,%.5f\n", 49 + 50 * i, 0.3 + 2 * exp(-i / 20) }' >"$tmp/from49.csv"
  expect_rc 0 "fit --warmup 20% from step 49" "$viper" fit --log "$tmp/from49.csv" --warmup 20%
  expect_in "$tmp/out" "warm-up 1039 iterations (20 points)" "P% counts from the first logged iteration"

  # --- Help states units and defaults (19.11).
  for cmd in simulate plan evaluate; do
    "$viper" $cmd --help 2>&1 | tr -s ' \n' '  ' >"$tmp/help"
    expect_in "$tmp/help" "--warmup arg (=20%)" "$cmd --help shows the warm-up default"
    expect_in "$tmp/help" "--transport arg (=gpu)" "$cmd --help shows the transport default"
    expect_in "$tmp/help" "seconds per training iteration" "$cmd --help states tau's unit"
    expect_in "$tmp/help" "the MEAN over the warm-up" "$cmd --help says tau is the mean, as the code does"
    expect_in "$tmp/help" "--requests arg (=0)" "$cmd --help shows the requests default"
  done
  "$viper" fit --help 2>&1 | tr -s ' \n' '  ' >"$tmp/help"
  expect_in "$tmp/help" "--warmup arg (=20%)" "fit --help shows the same warm-up default"
else
  echo "FAIL: shipped log $log missing"; fails=$((fails + 1))
fi

# --- Logs without wall time, epoch-level logs, noisy truth (19.1, 19.2, 19.4).
awk 'BEGIN { print "iteration,train_loss"; srand(3); for (i = 1; i <= 400; i++) printf "%d,%.5f\n", i, 0.3 + 2 * exp(-i / 80) + 0.02 * (rand() - 0.5) }' >"$tmp/notime.csv"
expect_rc 1 "simulate without wall time" "$viper" simulate --log "$tmp/notime.csv" -q
expect_in "$tmp/err" "give --seconds-per-iteration" "the no-wall-time error names the flag"
expect_not_in "$tmp/err" "seconds_per_iteration" "not the setting name"
expect_rc 0 "simulate with --seconds-per-iteration" "$viper" simulate --log "$tmp/notime.csv" -q --seconds-per-iteration 0.1 --strategies fixed,optimal,oracle --json "$tmp/nt.json"
expect_in "$tmp/out" "warning: the truth is the per-batch TRAINING loss" "simulate says the truth is the noisy training loss"
expect_in "$tmp/nt.json" '"truth_is_training_loss": true' "simulate JSON says so too"
expect_rc 0 "plan with --seconds-per-iteration" "$viper" plan --log "$tmp/notime.csv" --seconds-per-iteration 0.1 --strategy optimal
expect_in "$tmp/out" "per-batch TRAINING loss" "plan says so"
expect_rc 0 "evaluate with --seconds-per-iteration" "$viper" evaluate --logs "$tmp/notime.csv" --seconds-per-iteration 0.1 --tiers gpu --warmups 20% --windows while-training --strategies fixed -q
expect_in "$tmp/out" "train_loss (noisy, as observed)" "evaluate says so"
awk 'BEGIN { print "iteration,epoch,train_loss"; for (i = 1; i <= 400; i++) printf "%d,%d,%.5f\n", i, int((i - 1) / 40), 0.3 + 2 * exp(-i / 80) }' >"$tmp/epochs.csv"
expect_rc 0 "simulate with --seconds-per-epoch" "$viper" simulate --log "$tmp/epochs.csv" -q --seconds-per-epoch 4 --strategies epoch,oracle
expect_in "$tmp/out" "tau 0.1 s/iteration (--seconds-per-epoch / 40 iterations per epoch)" "tau from seconds per epoch"
expect_rc 2 "both tau flags" "$viper" simulate --log "$tmp/epochs.csv" -q --seconds-per-epoch 4 --seconds-per-iteration 0.1
# An epoch-level log of 17 rows: 20% is 3 points; the error says the minimum and what to change.
awk 'BEGIN { print "epoch,loss,val_loss"; for (e = 0; e < 17; e++) printf "%d,%.5f,%.5f\n", e, 0.3 + 2 * exp(-e / 4), 0.35 + 2 * exp(-e / 4) }' >"$tmp/keras.csv"
expect_rc 1 "fit on 3 warm-up epochs" "$viper" fit --log "$tmp/keras.csv" --warmup 20%
expect_in "$tmp/err" "fitting needs at least 8" "the error states the minimum"
expect_in "$tmp/err" "--warmup" "and what to change"
expect_rc 1 "simulate on 3 warm-up epochs" "$viper" simulate --log "$tmp/keras.csv" -q --seconds-per-epoch 60
expect_in "$tmp/err" "needs at least 8" "simulate states the minimum too"

# --- viper run --keep-versions (issue 25: live re-publishing): bad values are usage errors naming the option.
for v in -1 1001 abc 2.5; do
  expect_rc 2 "run --keep-versions $v" "$viper" run --keep-versions "$v"
  expect_in "$tmp/err" "--keep-versions" "run names --keep-versions for $v"
done
expect_in "$tmp/err" "expected a whole number" "a non-integer --keep-versions says what is expected"
for v in -1 1001 nan; do
  expect_rc 2 "run --wait-guard $v" "$viper" run --wait-guard "$v"
  expect_in "$tmp/err" "--wait-guard" "run names --wait-guard for $v"
done
"$viper" run --help 2>&1 | tr -s ' \n' '  ' >"$tmp/help"
expect_in "$tmp/help" "--keep-versions arg (=8)" "run --help shows the --keep-versions default"
expect_in "$tmp/help" "(2K + 1) x the model's bytes" "run --help states the memory cost"
expect_rc 2 "run --decisions-csv without --strategy online" "$viper" run --strategy optimal --decisions-csv "$tmp/d.csv"
expect_in "$tmp/err" "--decisions-csv records the online planner's decisions: needs --strategy online" "run says what --decisions-csv needs"

finish "cli"
