#!/usr/bin/env bash
# Faults of `viper run` that Open MPI 4.1.4 lets a test reach (a killed rank
# makes mpirun abort the whole job, so "killed" is emulated by SIGSTOP, which
# silences the process without mpirun noticing):
#  1. Ctrl-C: SIGINT to every rank -> producer stops, everyone reports, exit 0.
#  2. Silent producer: consumers keep serving the last good version, then exit
#     non-zero with "producer (rank 0) lost ... last good version".
#  3. Killed consumer, with mpirun --mca orte_enable_recovery 1 (without it
#     mpirun aborts the job): the producer finishes and reports the lost rank,
#     exit 3 (finished, but with lost consumers).
# Usage: live_faults_test.sh MPIEXEC VIPER_BINARY
set -u
mpiexec="$1"; viper="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$work/out"; echo "--- stderr"; cat "$work/err"; exit 1; }

# Ranks of this job: the processes running $viper whose environment names a rank.
rank_pid() {  # rank_pid R -> pid of world rank R
  for p in $(pgrep -f "^$viper run"); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo $p; return; fi
  done
}
# A case's output files start empty before its job starts: a background
# job's redirections truncate them in the child, after the shell has moved
# on, and under load wait_for_line read the last case's plan line from the
# old file, looked for ranks of a job not yet launched and failed ("rank 0
# not found", with the files empty by the time fail printed them).
fresh_output() { : >"$work/out"; : >"$work/err"; }
wait_for_line() {  # wait_for_line FILE PATTERN SECONDS
  for _ in $(seq 1 $(( $3 * 10 ))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# 1. SIGINT to every rank once training runs (after the plan line).
fresh_output
"$mpiexec" --oversubscribe -np 3 "$viper" run --workload trainer --train-samples 10000 --epochs 20 >"$work/out" 2>"$work/err" &
job=$!
wait_for_line "$work/err" "\[producer\] plan:" 60 || fail "no plan line within 60 s"
sleep 1
for r in 0 1 2; do p=$(rank_pid $r); [ -n "$p" ] && kill -INT "$p"; done
wait $job; rc=$?
[ $rc -eq 0 ] || fail "SIGINT: exit $rc, expected 0"
grep -q "interrupted" "$work/out" || fail "SIGINT: the report does not say interrupted"
grep -q "every version delivered to every consumer: yes" "$work/out" || fail "SIGINT: versions lost"
echo "ok: SIGINT stops every rank cleanly"

# 2. Producer goes silent (SIGSTOP) after the plan: consumers give up after 8 s.
# The warm-up is 20 iterations: the producer sends nothing before version 0,
# so a warm-up longer than the 8 s timeout made the consumers give up before
# the plan (the default 624 iterations took ~2 s idle, over 8 s beside two
# busy loops on 2 cores: issue 26).
# --consumer-timeout-s 5 bounds a transfer the stop interrupts mid-way (the
# consumer's transfer timeout is 2 x 5 + 5 = 15 s; with the default 30 s it
# was 65 s, longer than this test waits).
fresh_output
"$mpiexec" --oversubscribe -np 3 "$viper" run --workload trainer --train-samples 10000 --epochs 20 --producer-timeout-s 8 \
  --warmup 20 --consumer-timeout-s 5 >"$work/out" 2>"$work/err" &
job=$!
wait_for_line "$work/err" "\[producer\] plan:" 60 || fail "no plan line within 60 s"
producer=$(rank_pid 0)
[ -n "$producer" ] || fail "rank 0 not found"
kill -STOP "$producer"
# The consumers report within producer-timeout-s; then the stopped producer is
# killed (mpirun cannot end a stopped process with SIGTERM).
wait_for_line "$work/err" "producer (rank 0) lost" 60; seen=$?
kill -KILL "$producer" 2>/dev/null
wait $job; rc=$?
[ $seen -eq 0 ] || fail "silent producer: consumers did not give up within 60 s"
[ $rc -ne 0 ] || fail "silent producer: exit 0, expected non-zero"
grep -q "producer (rank 0) lost after [0-9]* requests served with the last good version" "$work/err" ||
  fail "silent producer: no clear message from the consumers"
echo "ok: consumers serve the last good version, then exit non-zero"

# 3. Signed versions over the pfs tier (--hmac-key-file): with the
#    producer's key the consumer serves them; a consumer given another key
#    serves none of them, and the run fails naming it (exit 1) instead of
#    reporting a run that served nothing. MPMD: rank 0 and rank 1 get their
#    own key files. Short runs (93 iterations of a 32-wide MLP).
umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/key"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/other.key"
small=(run --workload trainer --train-samples 2000 --epochs 3 --hidden 32 --val-samples 200 --transport pfs
       --strategy epoch --consumer-timeout-s 10 --producer-timeout-s 30)
mkdir -m 700 "$work/pfs"
"$mpiexec" --oversubscribe -np 2 "$viper" "${small[@]}" --pfs-dir "$work/pfs" --hmac-key-file "$work/key" \
  >"$work/out" 2>"$work/err"; rc=$?
[ $rc -eq 0 ] || fail "hmac: exit $rc with the right key, expected 0"
grep -q "every version delivered to every consumer: yes" "$work/out" || fail "hmac: versions not delivered with the right key"
ls "$work/pfs" | grep -q . || fail "hmac: no version files in the pfs directory"
echo "ok: versions signed with --hmac-key-file are served"
mkdir -m 700 "$work/pfs2"
"$mpiexec" --oversubscribe -np 1 "$viper" "${small[@]}" --pfs-dir "$work/pfs2" --hmac-key-file "$work/key" : \
  -np 1 "$viper" "${small[@]}" --pfs-dir "$work/pfs2" --hmac-key-file "$work/other.key" >"$work/out" 2>"$work/err"
rc=$?
[ $rc -eq 1 ] || fail "hmac: exit $rc with the consumer's key wrong, expected 1"
grep -q "consumer rank(s) 1 never received a version of this run" "$work/err" ||
  fail "hmac: the failure does not name the starved consumer"
echo "ok: a consumer with the wrong key serves nothing and the run fails naming it"

# 4. A consumer killed mid-run (mpirun --mca orte_enable_recovery 1 keeps the
#    job alive): the producer finishes training, reports the lost rank and
#    still collects the survivor's requests; nobody waits in MPI_Finalize.
#    Opt-in (VIPER_TEST_KILL_RANK=1), like the transports kill test: under
#    load Open MPI 4.1.4's recovery mode sometimes stalls every transfer of
#    the producer inside MPI after the kill (seen 1 run in 3 with a parallel
#    build on the 2-core VM: the survivor's transfer timed out, the job hung
#    until the guard killed it), which would make CI fail by chance.
if [ "${VIPER_TEST_KILL_RANK:-0}" != 1 ]; then
  echo "skipped: killed consumer (set VIPER_TEST_KILL_RANK=1; needs mpirun --mca orte_enable_recovery 1)"
  exit 0
fi
fresh_output
"$mpiexec" --mca orte_enable_recovery 1 --oversubscribe -np 3 "$viper" run --workload trainer \
  --train-samples 10000 --epochs 20 --consumer-timeout-s 5 >"$work/out" 2>"$work/err" &
job=$!
wait_for_line "$work/err" "\[producer\] plan:" 60 || fail "no plan line within 60 s"
victim=$(rank_pid 2)
[ -n "$victim" ] || fail "rank 2 not found"
kill -KILL "$victim"
( sleep 90; kill -KILL $job ) >/dev/null 2>&1 &   # a hang is a failure, not a stuck test
guard=$!
wait $job; rc=$?
kill "$guard" 2>/dev/null
# Rank 0 exits 3 (finished with lost consumers); Open MPI 4.1's mpirun
# returns 0 under orte_enable_recovery whatever its ranks return, so the
# test reads rank 0's own report of its exit status.
[ $rc -eq 0 ] || [ $rc -eq 3 ] || fail "killed consumer: mpirun exit $rc, expected 3 (or 0: mpirun hides it)"
grep -q "viper run: finished with 1 lost consumer(s); exit 3" "$work/err" || fail "killed consumer: rank 0 did not exit 3"
grep -q "lost consumer(s): rank 2;" "$work/out" || fail "killed consumer: rank 2 not reported as lost"
grep -q "to 2 consumer(s), CIL [0-9.]* ([1-9][0-9.]* per consumer)" "$work/out" ||
  fail "killed consumer: the survivor's requests were not collected"
echo "ok: the producer finishes and reports the killed consumer"
