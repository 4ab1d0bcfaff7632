#!/usr/bin/env bash
# The comparison tooling of bench/: devsets.sh (usage errors; --paces makes
# copies of the logs with wall_time scaled, the tables unchanged, and names
# each evaluation by its pace), compare_evals.py (per-case means over
# paces, the change, the spread across paces), pool.sh (which files of a
# directory are logs, the reports' names, a failed evaluation) and pool.py
# (the pooled figures, the comparison, the split by kind) and phases.py
# (the switches read off a table, the excess split by stay). devsets.sh and
# pool.sh run against a stand-in for viper that records its --logs and
# writes a one-case report, phases.py against one that writes a request
# trace, so the planners themselves are not run here.
# Usage: bench_scripts_test.sh <repo root>
set -uo pipefail
root="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

devsets="$root/bench/devsets.sh"
"$devsets" --paces 0 "$tmp/x" >/dev/null 2>"$tmp/err"; rc=$?
check "--paces 0 is bad usage (exit 2, names the value)" '[ $rc -eq 2 ] && grep -q "'"'"'0'"'"'" "$tmp/err"'
"$devsets" --sets set9 "$tmp/x" >/dev/null 2>"$tmp/err"; rc=$?
check "--sets set9 is bad usage" '[ $rc -eq 2 ] && grep -q "set9" "$tmp/err"'
"$devsets" --frobnicate >/dev/null 2>&1; rc=$?
check "an unknown option is bad usage" '[ $rc -eq 2 ]'

heldout="$root/bench/heldout.sh"
"$heldout" --set 25 "$tmp/h" >/dev/null 2>"$tmp/err"; rc=$?
check "heldout.sh --set 25 is bad usage, naming the sets" '[ $rc -eq 2 ] && grep -q "23 or 24" "$tmp/err"'
"$heldout" --help >"$tmp/help" 2>&1; rc=$?
check "heldout.sh --help describes every set, 21 included" '[ $rc -eq 0 ] && grep -q "^#  21 " "$tmp/help" && grep -q "train such a set again" "$tmp/help"'

# The stand-in: records the logs it was given, writes a one-case report whose
# online regret is the first log's last wall_time (so a scaled copy shows).
cat >"$tmp/viper" <<'STUB'
#!/usr/bin/env bash
logs="" json=""
while [ $# -gt 0 ]; do
  case "$1" in --logs) logs="$2"; shift ;; --json) json="$2"; shift ;; esac
  shift
done
echo "$logs" >>"$(dirname "$0")/calls"
first="${logs%%,*}"
w=$(gzip -dc "$first" | awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == "wall_time") c = i; next } $c != "" { w = $c } END { print w }')
printf '{"cases": [{"case": "c1", "strategies": {"online": {"regret_vs_oracle": %s, "cil": 2}, "epoch": {"regret_vs_oracle": 0, "cil": 1}}}]}\n' "$w" >"$json"
STUB
chmod +x "$tmp/viper"
"$devsets" --sets set4 --paces 1,2 "$tmp/out" "$tmp/viper" >/dev/null 2>&1; rc=$?
check "devsets.sh runs both paces (exit 0)" '[ $rc -eq 0 ]'
check "four evaluations: two clocks x two paces" '[ "$(wc -l <"$tmp/calls")" -eq 4 ]'
check "pace 1 reads the frozen logs" 'grep -q "bench/devsets/set4/f-swap.csv.gz" "$tmp/calls"'
check "pace 2 reads scaled copies in OUT/logs-pace2" 'grep -q "$tmp/out/logs-pace2/set4/f-swap.csv.gz" "$tmp/calls"'
check "each copy has its table beside it" '[ -f "$tmp/out/logs-pace2/set4/f-swap.staleness.csv.gz" ] && cmp -s "$tmp/out/logs-pace2/set4/f-swap.staleness.csv.gz" "$root/bench/devsets/set4/f-swap.staleness.csv.gz"'
w1=$(/usr/bin/python3 -c "import json; print(json.load(open('$tmp/out/set4-wall.json'))['cases'][0]['strategies']['online']['regret_vs_oracle'])")
w2=$(/usr/bin/python3 -c "import json; print(json.load(open('$tmp/out/set4-wall-pace2.json'))['cases'][0]['strategies']['online']['regret_vs_oracle'])")
check "the copy's wall times are twice the log's ($w1 -> $w2)" 'awk -v a="$w1" -v b="$w2" "BEGIN { exit !(b > 0 && (b - 2 * a) < 1e-6 * b && (2 * a - b) < 1e-6 * b) }"'
check "every other column is unchanged" '[ "$(gzip -dc "$tmp/out/logs-pace2/set4/f-prior.csv.gz" | cut -d, -f1,2,4- | md5sum)" = "$(gzip -dc "$root/bench/devsets/set4/f-prior.csv.gz" | cut -d, -f1,2,4- | md5sum)" ]'

# compare_evals.py: A has regrets 0.10 (pace 1) and 0.30 (pace 2), B 0.20 and
# 0.20: both average 20%, no change; A's spread across paces is 20 points.
cmpy="$root/bench/compare_evals.py"
mkdir -p "$tmp/A" "$tmp/B" "$tmp/C"
report() { printf '{"cases": [{"case": "c1", "strategies": {"online": {"regret_vs_oracle": %s, "cil": %s}, "epoch": {"regret_vs_oracle": 0, "cil": 1}}}]}\n' "$2" "$3" >"$1"; }
report "$tmp/A/set4-wall.json" 0.10 1.10
report "$tmp/A/set4-wall-pace2.json" 0.30 1.30
report "$tmp/B/set4-wall.json" 0.20 1.00
report "$tmp/B/set4-wall-pace2.json" 0.20 1.00
out="$(/usr/bin/python3 "$cmpy" "$tmp/A" "$tmp/B" --cases 0.5)"; rc=$?
echo "$out"
check "compare_evals.py exits 0" '[ $rc -eq 0 ]'
check "two paces averaged, mean 20.00 on both sides, change +0.00" 'echo "$out" | grep -q "x2 paces.*mean  20.00 ->  20.00 (+0.00)"'
check "A is worse than epoch by its mean CIL, B is not" 'echo "$out" | grep -q ">1% worse than epoch 1 -> 0"'
check "A's spread across paces is 20 points" 'echo "$out" | grep -q "largest 20.0"'
report "$tmp/C/set1-wall.json" 0.1 1
/usr/bin/python3 "$cmpy" "$tmp/A" "$tmp/C" >/dev/null 2>"$tmp/err"; rc=$?
check "no common set: exit 1 with a message" '[ $rc -eq 1 ] && grep -q "no set and clock" "$tmp/err"'
/usr/bin/python3 "$cmpy" "$tmp/A" "$tmp/missing" >/dev/null 2>&1; rc=$?
check "a missing directory is bad usage (exit 2)" '[ $rc -eq 2 ]'
# heldout.sh --calm-partners: for each run of set 1 that drifts (five of
# six; not the Adam run without --drift), a partner NAME-calm trained with
# the same options but --drift-at-iteration past the run's end; then a pair
# bound per run, tier and window into causal-calm-bound.csv. Against a
# stand-in that records its arguments and writes what the script reads.
cat >"$tmp/hviper" <<'STUB'
#!/usr/bin/env bash
echo "$*" >>"$(dirname "$0")/hcalls"
cmd="$1"; shift
while [ $# -gt 0 ]; do
  case "$1" in
    --log-out|--staleness-table) : >"$2"; shift ;;
    --json) json="$2"; shift ;;
  esac
  shift
done
if [ "$cmd" = train ]; then echo '{}' >"$json"; exit 0; fi
printf '{"total_iterations": 3000, "warmup_iterations": 600, "seconds_per_iteration": 0.002, "requests": {"interval_s": 0.002}, "causal_pair_bound": {"agree_until_traffic": %s, "bound": 0.04, "by_lambda": [{"lambda": 0.45, "bound": 0.03}, {"lambda": 0.5, "bound": 0.025}]}, "causal_bound": {"bound": 0.05, "runs": [{"table": "(this log)", "agree_until_traffic": 1500}, {"table": "t", "agree_until_traffic": %s}]}, "strategies": [{"strategy": "online", "regret_vs_oracle": 0.07}]}\n' "${AGREE:-1500}" "${AGREE:-1500}" >"$json"
STUB
chmod +x "$tmp/hviper"
mkdir -p "$tmp/hc"
"$heldout" --set 1 --calm-partners "$tmp/hc" "$tmp/hviper" >/dev/null 2>"$tmp/err"; rc=$?
check "heldout.sh --calm-partners without the set's runs is exit 1, naming the run" '[ $rc -eq 1 ] && grep -q "h-recur60.csv.gz missing" "$tmp/err"'
for f in h-recur60 h-swap h-nodrift h-classinc h-prior h-rotate; do : >"$tmp/hc/$f.csv.gz"; done
rm -f "$tmp/hcalls"
"$heldout" --set 1 --calm-partners "$tmp/hc" "$tmp/hviper" >/dev/null 2>"$tmp/err"; rc=$?
check "heldout.sh --calm-partners exits 0" '[ $rc -eq 0 ]'
check "five calm partners trained, the drift moved past the end, no other option changed" '[ "$(grep -c "^train " "$tmp/hcalls")" -eq 5 ] && [ "$(grep "^train " "$tmp/hcalls" | grep -c -- "--drift-at-iteration 1000000 ")" -eq 5 ] && grep "^train " "$tmp/hcalls" | grep -q -- "--seed 3 --drift label-swap --drift-swap-classes 2,4 --drift-at-iteration 1000000 --log-out $tmp/hc/h-swap-calm.csv.gz"'
check "none for the run without a drift" '! grep -q "h-nodrift-calm" "$tmp/hcalls"'
check "a bound per run, tier and window, against the calm partner" '[ "$(grep -c "^simulate .*--versus-staleness $tmp/hc/h-[a-z0-9]*-calm.staleness.csv.gz" "$tmp/hcalls")" -eq 30 ]'
check "causal-calm-bound.csv: 30 rows with the bound at weight 1/2" '[ "$(wc -l <"$tmp/hc/causal-calm-bound.csv")" -eq 31 ] && grep -q "^h-rotate,pfs,req,1500,0.0400,0.0250,0.0700$" "$tmp/hc/causal-calm-bound.csv"'
rm -f "$tmp/hcalls"
"$heldout" --set 1 --calm-partners "$tmp/hc" "$tmp/hviper" >/dev/null 2>"$tmp/err"
check "a second run keeps the partners trained already" '! grep -q "^train " "$tmp/hcalls" && [ "$(grep -c "^simulate " "$tmp/hcalls")" -eq 30 ]'
check "pairs that agree past the warm-up: no warning" '! grep -q "not one run" "$tmp/err"'
AGREE=600 "$heldout" --set 1 --calm-partners "$tmp/hc" "$tmp/hviper" >/dev/null 2>"$tmp/err"
check "tables that differ from the warm-up on: one warning a run, naming it" '[ "$(grep -c "not one run up to its drift" "$tmp/err")" -eq 5 ] && grep -q "h-swap: its partner" "$tmp/err"'

# heldout.sh --onset-partners: the runs --runs names, each with its drift
# moved by each offset (h-swap drifts at 1500, h-classinc at 1800); then the
# family's bound (the calm partner's log against every member's table) and
# online on each member, per tier and window, into causal-onset-bound.csv.
"$heldout" --set 1 --onset-partners "$tmp/hc" "$tmp/hviper" >/dev/null 2>"$tmp/err"; rc=$?
check "heldout.sh --onset-partners without offsets is bad usage" '[ $rc -eq 2 ] && grep -q "comma-separated iteration offsets" "$tmp/err"'
"$heldout" --set 1 --onset-partners 400,x "$tmp/hc" "$tmp/hviper" >/dev/null 2>"$tmp/err"; rc=$?
check "heldout.sh --onset-partners 400,x is bad usage" '[ $rc -eq 2 ]'
mkdir -p "$tmp/hd"
for f in h-recur60 h-swap h-nodrift h-classinc h-prior h-rotate; do : >"$tmp/hd/$f.csv.gz"; done
"$heldout" --set 1 --onset-partners -400,400 --runs h-swap "$tmp/hd" "$tmp/hviper" >/dev/null 2>"$tmp/err"; rc=$?
check "heldout.sh --onset-partners without the calm partner is exit 1, naming it" '[ $rc -eq 1 ] && grep -q "h-swap-calm.staleness.csv.gz missing" "$tmp/err"'
rm -f "$tmp/hcalls"
"$heldout" --set 1 --onset-partners -400,400 --runs h-swap,h-classinc "$tmp/hc" "$tmp/hviper" >/dev/null 2>"$tmp/err"; rc=$?
check "heldout.sh --onset-partners exits 0" '[ $rc -eq 0 ]'
check "four onset partners trained, the drift moved, no other option changed" '[ "$(grep -c "^train " "$tmp/hcalls")" -eq 4 ] && grep "^train " "$tmp/hcalls" | grep -q -- "--seed 3 --drift label-swap --drift-swap-classes 2,4 --drift-at-iteration 1100 --log-out $tmp/hc/h-swap-at1100.csv.gz" && grep -q -- "--drift-at-iteration 2200 --log-out $tmp/hc/h-classinc-at2200.csv.gz" "$tmp/hcalls"'
check "the family bound: the calm log against the run and both partners, per tier and window" '[ "$(grep -c "^simulate --log $tmp/hc/h-swap-calm.csv.gz .*--versus-staleness $tmp/hc/h-swap.staleness.csv.gz --versus-staleness $tmp/hc/h-swap-at1100.staleness.csv.gz --versus-staleness $tmp/hc/h-swap-at1900.staleness.csv.gz" "$tmp/hcalls")" -eq 6 ]'
check "online on each member's own log: 2 runs x 3 members x 6" '[ "$(grep "^simulate " "$tmp/hcalls" | grep -vc -- "--versus-staleness")" -eq 36 ]'
check "causal-onset-bound.csv: 12 rows, the bound beside online's mean" '[ "$(wc -l <"$tmp/hc/causal-onset-bound.csv")" -eq 13 ] && grep -q "^h-classinc,pfs,req,4,0.0500,0.0700,0.0700,0.0700,0.0700;0.0700$" "$tmp/hc/causal-onset-bound.csv"'

# pool.sh: the logs of a directory are its *.csv.gz less the tables and the
# causal pair partners; --only filters them; the report is named by the
# directory and the clock; a failing viper is exit 1, the rest still run.
pool="$root/bench/pool.sh"
mkdir -p "$tmp/p/h9" "$tmp/p/set4"
for f in h-recur40 h-recur40-once h-recur40-calm h-recur40-at1900 h-swaps300 h-nodrift; do cp "$root/bench/devsets/set4/f-swap.csv.gz" "$tmp/p/h9/$f.csv.gz"; done
cp "$root/bench/devsets/set4/f-swap.staleness.csv.gz" "$tmp/p/h9/h-recur40.staleness.csv.gz"
cp "$root/bench/devsets/set4/f-swap.csv.gz" "$tmp/p/set4/f-swap.csv.gz"
: >"$tmp/calls"
"$pool" --only 'recur|swap' "$tmp/pout" "$tmp/viper" "$tmp/p/h9" "$tmp/p/set4" >/dev/null 2>"$tmp/err"; rc=$?
check "pool.sh exits 0" '[ $rc -eq 0 ]'
check "pool.sh passes the recurring and swap logs, never a table or a partner" 'grep -q "h-recur40.csv.gz" "$tmp/calls" && grep -q "h-swaps300.csv.gz" "$tmp/calls" && ! grep -q "staleness\|once\|calm\|-at1900\|nodrift" "$tmp/calls"'
check "pool.sh names each report by directory and clock" '[ -f "$tmp/pout/h9-wall.json" ] && [ -f "$tmp/pout/set4-wall.json" ]'
"$pool" --clock both "$tmp/pout2" "$tmp/viper" "$tmp/p/set4" >/dev/null 2>&1
check "pool.sh --clock both writes both clocks" '[ -f "$tmp/pout2/set4-wall.json" ] && [ -f "$tmp/pout2/set4-producer.json" ]'
printf '#!/usr/bin/env bash\necho broken >&2\nexit 1\n' >"$tmp/badviper"; chmod +x "$tmp/badviper"
"$pool" "$tmp/pout3" "$tmp/badviper" "$tmp/p/h9" "$tmp/p/set4" >/dev/null 2>"$tmp/err"; rc=$?
check "a failed evaluation is exit 1, named, and the next directory still runs" '[ $rc -eq 1 ] && grep -q "h9 (wall clock): viper evaluate failed" "$tmp/err" && grep -q "set4 (wall clock): viper evaluate failed" "$tmp/err"'
"$pool" "$tmp/pout4" "$tmp/viper" "$tmp/p/h9" "$tmp/p/h9/" >/dev/null 2>"$tmp/err"; rc=$?
check "two directories of one name are bad usage" '[ $rc -eq 2 ] && grep -q "two directories named" "$tmp/err"'
"$pool" --clock later "$tmp/pout4" "$tmp/viper" "$tmp/p/h9" >/dev/null 2>&1; rc=$?
check "pool.sh --clock later is bad usage" '[ $rc -eq 2 ]'
# --jobs: evaluations run side by side, the same reports; a failure in one
# is still exit 1 and named; a count that is not 1-99 is bad usage.
"$pool" --jobs 2 --clock both "$tmp/pout5" "$tmp/viper" "$tmp/p/h9" "$tmp/p/set4" >/dev/null 2>"$tmp/err"; rc=$?
check "pool.sh --jobs 2 exits 0 and writes every report" '[ $rc -eq 0 ] && [ -f "$tmp/pout5/h9-wall.json" ] && [ -f "$tmp/pout5/h9-producer.json" ] && [ -f "$tmp/pout5/set4-wall.json" ] && [ -f "$tmp/pout5/set4-producer.json" ] && [ "$(grep -c "^== " "$tmp/err")" -eq 4 ]'
"$pool" --jobs 2 "$tmp/pout6" "$tmp/badviper" "$tmp/p/h9" "$tmp/p/set4" >/dev/null 2>"$tmp/err"; rc=$?
check "pool.sh --jobs 2: a failed evaluation is exit 1 and named, the other still runs" '[ $rc -eq 1 ] && grep -q "h9 (wall clock): viper evaluate failed" "$tmp/err" && grep -q "set4 (wall clock): viper evaluate failed" "$tmp/err"'
"$pool" --jobs 0 "$tmp/pout7" "$tmp/viper" "$tmp/p/h9" >/dev/null 2>"$tmp/err"; rc=$?
check "pool.sh --jobs 0 is bad usage, naming the value" '[ $rc -eq 2 ] && grep -q "'"'"'0'"'"'" "$tmp/err"'

# pool.py: A holds four cases (regrets 1, 3, 20 and 50%; the last one's CIL
# 2% above epoch's, the 20% one's 0.5%, within the 1%), B the same with the
# 50% case at 5%.
poolpy="$root/bench/pool.py"
mkdir -p "$tmp/PA" "$tmp/PB"
cases() {  # regret of the h-recur40 pfs case, its CIL
  printf '{"cases": ['
  printf '{"case": "h-recur40/gpu/w20/train", "log": "/x/h-recur40.csv.gz", "tier": "gpu", "judge": "staleness table", "traffic_clock": "wall", "strategies": {"online": {"regret_vs_oracle": 0.01, "cil": 1.0}, "epoch": {"regret_vs_oracle": 0.2, "cil": 1.2}}},'
  printf '{"case": "h-recur40/host/w20/train", "log": "/x/h-recur40.csv.gz", "tier": "host", "judge": "staleness table", "traffic_clock": "wall", "strategies": {"online": {"regret_vs_oracle": 0.03, "cil": 1.0}, "epoch": {"regret_vs_oracle": 0.2, "cil": 1.2}}},'
  printf '{"case": "b-swaps300/gpu/w20/train", "log": "/x/b-swaps300.csv.gz", "tier": "gpu", "judge": "staleness table", "traffic_clock": "wall", "strategies": {"online": {"regret_vs_oracle": 0.2, "cil": 1.005}, "epoch": {"regret_vs_oracle": 0.2, "cil": 1.0}}},'
  printf '{"case": "h-recur40/pfs/w20/train", "log": "/x/h-recur40.csv.gz", "tier": "pfs", "judge": "staleness table", "traffic_clock": "wall", "strategies": {"online": {"regret_vs_oracle": %s, "cil": %s}, "epoch": {"regret_vs_oracle": 0.2, "cil": 1.0}}}' "$1" "$2"
  printf ']}\n'
}
cases 0.5 1.02 >"$tmp/PA/h9-wall.json"
cases 0.05 1.0 >"$tmp/PB/h9-wall.json"
# A fifth case where epoch served a diverged model (CIL null: online is not
# worse), a sixth where online did (left out).
for d in PA PB; do
  printf '{"cases": [{"case": "e-collapse/gpu/w20/train", "log": "/x/e-collapse.csv.gz", "judge": "staleness table", "strategies": {"online": {"regret_vs_oracle": 0.005, "cil": 1.0}, "epoch": {"regret_vs_oracle": null, "cil": null}}}, {"case": "e-collapse/host/w20/train", "log": "/x/e-collapse.csv.gz", "judge": "staleness table", "strategies": {"online": {"regret_vs_oracle": null, "cil": null}, "epoch": {"regret_vs_oracle": 0.1, "cil": 1.1}}}]}\n' >"$tmp/$d/h5-wall.json"
done
out="$(/usr/bin/python3 "$poolpy" "$tmp/PA" --by kind)"; rc=$?
echo "$out"
check "pool.py exits 0" '[ $rc -eq 0 ]'
check "pool.py: 5 cases, mean 14.90, median 3.00, worst 50.0, 2 over 10%, 1 worse than epoch" 'echo "$out" | grep -q "^all *5 cases  mean   14.90  median   3.00  p90   20.0  worst   50.0  over 10%   2  worse than epoch   1"'
check "pool.py reads the kind from the log name (recur: 3 cases, swaps: 1, collapse: 1)" 'echo "$out" | grep -q "^kind recur *3 cases" && echo "$out" | grep -q "^kind swaps *1 cases" && echo "$out" | grep -q "^kind collapse *1 cases"'
out="$(/usr/bin/python3 "$poolpy" "$tmp/PA" --by kind+tier --json "$tmp/cross.json")"; rc=$?
check "pool.py --by kind+tier: one line per combination with cases (recur/gpu 1.00, recur/pfs 50.00, swaps/gpu)" '[ $rc -eq 0 ] && echo "$out" | grep -q "^kind+tier recur/gpu *1 cases  mean    1.00" && echo "$out" | grep -q "^kind+tier recur/pfs *1 cases  mean   50.00" && echo "$out" | grep -q "^kind+tier swaps/gpu *1 cases" && ! echo "$out" | grep -q "^kind+tier swaps/host"'
check "pool.py --by kind+tier: the JSON names each combination" '/usr/bin/python3 -c "import json,sys; g=[x[\"group\"] for x in json.load(open(sys.argv[1]))[\"groups\"]]; sys.exit(not (\"kind+tier recur/host\" in g and \"kind+tier swaps/gpu\" in g))" "$tmp/cross.json"'
/usr/bin/python3 "$poolpy" "$tmp/PA" --by kind+colour >/dev/null 2>"$tmp/err"; rc=$?
check "pool.py --by kind+colour is bad usage (exit 2), naming the option" '[ $rc -eq 2 ] && grep -q "kind+colour" "$tmp/err"'
out="$(/usr/bin/python3 "$poolpy" "$tmp/PA" "$tmp/PB" --cases 1 --json "$tmp/pool.json")"; rc=$?
echo "$out"
check "pool.py A -> B: one case moved, better; B has none worse than epoch" '[ $rc -eq 0 ] && echo "$out" | grep -q "moved 1: 1 better, 0 worse" && echo "$out" | grep -q "B *5 cases.*worse than epoch   0"'
check "pool.py lists the moved case" 'echo "$out" | grep -q "h9-wall:h-recur40/pfs/w20/train *50.00 -> *5.00 (-45.0)"'
# One case of five moved by -45 points: the sign test cannot tell one move
# from chance (p 1), the mean difference is -9 points, and its bootstrap
# interval holds zero (a resample of five cases often misses the one).
check "pool.py A -> B: sign test p 1, mean difference -9.00 points" 'echo "$out" | grep -q "moved 1: 1 better, 0 worse (sign test p 1); B - A -9.00 points, 95% interval"'
check "pool.py --json: the interval holds zero and reaches below -18" '/usr/bin/python3 -c "import json,sys; g=json.load(open(sys.argv[1]))[\"groups\"][0]; lo, hi = g[\"difference_interval_95\"]; sys.exit(not (g[\"sign_test_p\"] == 1.0 and abs(g[\"mean_difference\"] + 9) < 1e-9 and lo <= -18 and hi == 0))" "$tmp/pool.json"'
check "pool.py --json holds the same figures" '/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); g=j[\"groups\"][0]; sys.exit(not (g[\"a\"][\"cases\"] == 5 and g[\"b\"][\"worse_than_epoch\"] == 0 and j[\"moved_cases\"][0][\"b\"] == 5.0))" "$tmp/pool.json"'
# --strategy val-oracle: the val-oracle's figures, from each case's val_oracle;
# a case without one is left out and counted.
mkdir -p "$tmp/PV"
printf '{"cases": [{"case": "h-swap/gpu/w20/train", "log": "/x/h-swap.csv.gz", "judge": "diagonal", "strategies": {"online": {"regret_vs_oracle": 0.05, "cil": 1.05}, "epoch": {"regret_vs_oracle": 0.1, "cil": 1.1}}, "val_oracle": {"regret_vs_oracle": 0.02, "cil": 1.02, "checkpoints": 3}}, {"case": "h-swap/gpu/w20/req", "log": "/x/h-swap.csv.gz", "judge": "diagonal", "strategies": {"online": {"regret_vs_oracle": 0.05, "cil": 1.05}, "epoch": {"regret_vs_oracle": 0.1, "cil": 1.1}}}]}\n' >"$tmp/PV/h3-wall.json"
out="$(/usr/bin/python3 "$poolpy" "$tmp/PV" --strategy val-oracle 2>"$tmp/err")"; rc=$?
check "pool.py --strategy val-oracle pools the val-oracle (1 case, 2.00%) and counts the case without one" '[ $rc -eq 0 ] && echo "$out" | grep -q "^all *1 cases  mean    2.00" && grep -q "1 cases without a val-oracle" "$tmp/err"'
# --by traffic: drifting or calm from the table (traffic_change: a number or
# null; a report from before it: the after-drift bound or none), "no table"
# on the diagonal. Two drifting (one each way), two calm, one without a table.
mkdir -p "$tmp/PT"
{
  printf '{"cases": ['
  e='"strategies": {"online": {"regret_vs_oracle": %s, "cil": 1.0}, "epoch": {"regret_vs_oracle": 0.1, "cil": 1.1}}'
  printf '{"case": "x-one/gpu/w20/train", "judge": "staleness table", "traffic_change": 1500.0, '"$e"'},' 0.10
  printf '{"case": "x-two/gpu/w20/train", "judge": "staleness table", "after_drift_bound": {"cil": 1.0}, '"$e"'},' 0.30
  printf '{"case": "x-three/gpu/w20/train", "judge": "staleness table", "traffic_change": null, "after_drift_bound": {"cil": 1.0}, '"$e"'},' 0.02
  printf '{"case": "x-four/gpu/w20/train", "judge": "staleness table", '"$e"'},' 0.04
  printf '{"case": "x-five/gpu/w20/train", "judge": "diagonal", '"$e"'}' 0.01
  printf ']}\n'
} >"$tmp/PT/t-wall.json"
out="$(/usr/bin/python3 "$poolpy" "$tmp/PT" --by traffic)"; rc=$?
echo "$out"
check "pool.py --by traffic: 2 drifting (mean 20.00), 2 calm (mean 3.00), 1 without a table" '[ $rc -eq 0 ] && echo "$out" | grep -q "^traffic drifting *2 cases  mean   20.00" && echo "$out" | grep -q "^traffic calm *2 cases  mean    3.00" && echo "$out" | grep -q "^traffic no table *1 cases"'
# --blind: the after-drift bound's split of online's regret, over the cases
# that carry one with both figures (x-two's bound has neither: left out):
# blind 4 and 0 points, after the change 10 and 30.
mkdir -p "$tmp/PS"
{
  printf '{"cases": ['
  e='"strategies": {"online": {"regret_vs_oracle": %s, "cil": 1.0}, "epoch": {"regret_vs_oracle": 0.1, "cil": 1.1}}'
  printf '{"case": "x-one/host/w20/train", "tier": "host", "judge": "staleness table", "traffic_change": 1500.0, "after_drift_bound": {"regret_vs_oracle": 0.04, "online_regret_vs_bound": 0.10}, '"$e"'},' 0.15
  printf '{"case": "x-two/host/w20/train", "tier": "host", "judge": "staleness table", "traffic_change": 1500.0, "after_drift_bound": {"cil": 1.0}, '"$e"'},' 0.20
  printf '{"case": "x-six/pfs/w20/train", "tier": "pfs", "judge": "staleness table", "traffic_change": 900.0, "after_drift_bound": {"regret_vs_oracle": 0.0, "online_regret_vs_bound": 0.30}, '"$e"'},' 0.30
  printf '{"case": "x-four/pfs/w20/train", "tier": "pfs", "judge": "staleness table", "traffic_change": null, '"$e"'}' 0.04
  printf ']}\n'
} >"$tmp/PS/s-wall.json"
out="$(/usr/bin/python3 "$poolpy" "$tmp/PS" --blind --by tier --json "$tmp/split.json")"; rc=$?
echo "$out"
check "pool.py --blind: 2 cases with a bound, blind mean 2.00, after the change mean 20.00" '[ $rc -eq 0 ] && echo "$out" | grep -q "split    2 with a bound: blind checkpoints mean   2.00 median  2.00; after the change mean  20.00 median 20.00"'
check "pool.py --blind --by tier: host's one case (4 / 10), and the JSON holds the split" 'echo "$out" | grep -A1 "^tier host" | grep -q "1 with a bound: blind checkpoints mean   4.00 median  4.00; after the change mean  10.00" && /usr/bin/python3 -c "import json,sys; g=json.load(open(sys.argv[1]))[\"groups\"][0]; sys.exit(not (g[\"a_split\"][\"cases\"] == 2 and abs(g[\"a_split\"][\"after_mean\"] - 20.0) < 1e-9))" "$tmp/split.json"'
/usr/bin/python3 "$poolpy" "$tmp/PS" --blind --strategy val-oracle >/dev/null 2>"$tmp/err"; rc=$?
check "pool.py --blind with another strategy is bad usage (exit 2, says why)" '[ $rc -eq 2 ] && grep -q "after-drift bound" "$tmp/err"'
/usr/bin/python3 "$poolpy" "$tmp/PA" --judge diagonal >/dev/null 2>"$tmp/err"; rc=$?
check "pool.py --judge diagonal keeps no table case: exit 1 with a message" '[ $rc -eq 1 ] && grep -q "no case" "$tmp/err"'
/usr/bin/python3 "$poolpy" "$tmp/PA" "$tmp/nowhere" >/dev/null 2>&1; rc=$?
check "pool.py: a missing directory is bad usage (exit 2)" '[ $rc -eq 2 ]'
/usr/bin/python3 "$poolpy" "$tmp/PA" --by colour >/dev/null 2>&1; rc=$?
check "pool.py --by colour is bad usage (exit 2)" '[ $rc -eq 2 ]'
# phases.py: a table whose traffic is domain A up to 300, B at 400-500 and A
# again from 600 (grid 100): switches at 350 and 550. The stand-in's oracle
# pays 1.0 a request (one every 10 traffic iterations, 0-1000: 101), online
# 2.0 in [600, 700) (10 requests: +10, the first return) and 3.0 at the
# traffic's end N = 1000 (+2): 9.90% and 1.98% of the oracle's 101.
phases="$root/bench/phases.py"
mkdir -p "$tmp/ph"
/usr/bin/python3 - "$tmp/ph" <<'PY'
import gzip, os, sys
d = sys.argv[1]
dom = lambda x: "B" if 350 <= x < 550 else "A"
with gzip.open(os.path.join(d, "r-recur.staleness.csv.gz"), "wt") as f:
    f.write("version_iteration,traffic_iteration,val_loss,test_loss\n")
    for t in range(0, 1001, 100):
        for v in range(0, t + 1, 100):
            l = 0.5 if dom(v) == dom(t) else 2.0
            f.write(f"{v},{t},{l},{l}\n")
for name in ("r-recur", "r-notable"):
    with gzip.open(os.path.join(d, name + ".csv.gz"), "wt") as f:
        f.write("iteration,wall_time,train_loss\n1,0.01,1.0\n")
PY
cat >"$tmp/phviper" <<'STUB'
#!/usr/bin/env bash
traced="" csv="" json="" transport=""
while [ $# -gt 0 ]; do
  case "$1" in --trace-strategy) traced="$2"; shift ;; --requests-csv) csv="$2"; shift ;; --json) json="$2"; shift ;;
    --transport) transport="$2"; shift ;; esac
  shift
done
{
  echo "time_s,version,iteration,traffic_iteration,loss"
  for t in $(seq 0 10 1000); do
    l=1.0
    if [ "$traced" = online ] && [ "$transport" = host ] && [ "$t" -ge 600 ] && [ "$t" -lt 700 ]; then l=2.0; fi
    if [ "$traced" = online ] && [ "$transport" = pfs ] && [ "$t" -ge 500 ] && [ "$t" -lt 550 ]; then l=2.0; fi
    if [ "$traced" = online ] && [ "$t" -eq 1000 ]; then l=3.0; fi
    echo "0,0,0,$t,$l"
  done
} >"$csv"
echo '{"total_iterations": 1000, "warmup_iterations": 200, "seconds_per_iteration": 0.01, "requests": {"interval_s": 0.1}}' >"$json"
STUB
chmod +x "$tmp/phviper"
out="$(/usr/bin/python3 "$phases" --viper "$tmp/phviper" --tiers host --json "$tmp/ph.json" "$tmp/ph/r-recur.csv.gz")"; rc=$?
echo "$out"
check "phases.py exits 0" '[ $rc -eq 0 ]'
check "phases.py finds the switches at 350 and 550" 'echo "$out" | grep -q "switches 350,550"'
check "phases.py puts 9.9% after the second switch and 2.0% at the end, 11.9% in all" 'echo "$out" | grep -q "r-recur/host/train *regret *11.9%  before *0.0  first *0.0  return1 *9.9  later *0.0  end *2.0"'
check "phases.py --json holds the case" '/usr/bin/python3 -c "import json,sys; c=json.load(open(sys.argv[1]))[\"cases\"][0]; sys.exit(not (abs(c[\"excess_percent\"][\"return1\"] - 1000 / 101) < 1e-9))" "$tmp/ph.json"'
# The wrong model: the table's step at each switch is 1.5 (0.5 -> 2.0), so
# online's excess of 1.0 in [600, 700) is the wrong model's, 100 traffic
# iterations late after the switch at 550 (10 requests 10 apart); on pfs its
# excess in [500, 550), before that switch, is 50 iterations early.
check "phases.py: the wrong model 100 iterations late at the first return, on time at the first switch" 'echo "$out" | grep -q "wrong model  first: early 0 late 0  return1: early 0 late 100"'
check "phases.py --json holds the wrong model's iterations per switch" '/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); w=j[\"cases\"][0][\"wrong_model_iterations\"][\"return1\"]; m=j[\"wrong_model_iterations_per_switch\"][\"return1\"]; sys.exit(not (w[\"late\"] == 100 and w[\"early\"] == 0 and m[\"switches\"] == 1))" "$tmp/ph.json"'
out="$(/usr/bin/python3 "$phases" --viper "$tmp/phviper" --tiers pfs "$tmp/ph/r-recur.csv.gz")"; rc=$?
check "phases.py: a model landed before its switch is early (50 iterations on pfs), not late" '[ $rc -eq 0 ] && echo "$out" | grep -q "return1: early 50 late 0"'
# Two tiers (the stand-in's online pays the first return's excess on host
# only): the mean by tier follows the overall mean; one window, no split by it.
out="$(/usr/bin/python3 "$phases" --viper "$tmp/phviper" --tiers host,gpu --json "$tmp/ph2.json" "$tmp/ph/r-recur.csv.gz")"; rc=$?
echo "$out"
check "phases.py over two tiers: the mean 6.9%, by tier gpu 2.0% and host 11.9%, no split by window" '[ $rc -eq 0 ] && echo "$out" | grep -q "^mean over 2 cases *regret *6.9%" && echo "$out" | grep -q "^  tier gpu (1 cases) *regret *2.0%  before *0.0  first *0.0  return1 *0.0" && echo "$out" | grep -q "^  tier host (1 cases) *regret *11.9%" && ! echo "$out" | grep -q "window train"'
check "phases.py --json holds the mean by tier" '/usr/bin/python3 -c "import json,sys; m=json.load(open(sys.argv[1]))[\"mean_excess_percent_by\"]; sys.exit(not (sorted(m) == [\"tier gpu\", \"tier host\"] and abs(m[\"tier host\"][\"return1\"] - 1000 / 101) < 1e-9))" "$tmp/ph2.json"'
/usr/bin/python3 "$phases" --viper "$tmp/phviper" --tiers host "$tmp/ph/r-notable.csv.gz" >/dev/null 2>"$tmp/err"; rc=$?
check "phases.py: a log without its table is exit 1, named" '[ $rc -eq 1 ] && grep -q "r-notable.csv.gz: no staleness table" "$tmp/err"'
/usr/bin/python3 "$phases" --viper "$tmp/phviper" --tiers tape "$tmp/ph/r-recur.csv.gz" >/dev/null 2>&1; rc=$?
check "phases.py --tiers tape is bad usage (exit 2)" '[ $rc -eq 2 ]'
exit $fail
