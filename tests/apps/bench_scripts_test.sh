#!/usr/bin/env bash
# The comparison tooling of bench/: devsets.sh (usage errors; --paces makes
# copies of the logs with wall_time scaled, the tables unchanged, and names
# each evaluation by its pace) and compare_evals.py (per-case means over
# paces, the change, the spread across paces). devsets.sh runs against a
# stand-in for viper that records its --logs and writes a one-case report,
# so the planners themselves are not run here.
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
"$heldout" --set 17 "$tmp/h" >/dev/null 2>"$tmp/err"; rc=$?
check "heldout.sh --set 17 is bad usage, naming the sets" '[ $rc -eq 2 ] && grep -q "15 or 16" "$tmp/err"'
"$heldout" --help >"$tmp/help" 2>&1; rc=$?
check "heldout.sh --help describes every set, 16 included" '[ $rc -eq 0 ] && grep -q "^#  16 " "$tmp/help" && grep -q "train such a set again" "$tmp/help"'

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
exit $fail
