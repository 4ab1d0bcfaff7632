#!/usr/bin/env bash
# The whole test suite, in three stages, each announced with its time:
#   1. CTest in build/ (installs what is missing, builds): unit tests, MPI
#      tests under mpirun, CLI tests. GPU tests skip without a device, saying why.
#   2. scripts/sanitize.sh: the tests under clang ASan+UBSan (build-asan/)
#      and the threaded engine's tests under TSan (build-tsan/).
#   3. scripts/fuzz.sh: the libFuzzer harnesses (build-fuzz/), sharing
#      VIPER_FUZZ_TOTAL_SECONDS (default 240) equally, unless
#      VIPER_FUZZ_SECONDS sets the seconds per harness.
# VIPER_QUICK=1 runs stage 1 only; so do arguments, which go to ctest
# (e.g. -R predictor, -L mpi).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${VIPER_BUILD_DIR:-$root/build}"
quick="${VIPER_QUICK:-0}"
[ $# -gt 0 ] && quick=1
stages=3
[ "$quick" = 1 ] && stages=1

t0=$SECONDS
stage() { echo "== test: [$1/$stages] $2 (at $((SECONDS - t0)) s)"; }

stage 1 "build and CTest in $build"
"$root/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest_log="$build/ctest-summary.log"
(cd "$build" && ctest --output-on-failure -j "${VIPER_TEST_JOBS:-2}" "$@") | tee "$ctest_log"
summary="$(grep -E 'tests passed, [0-9]+ tests failed out of' "$ctest_log" | tail -n 1 || true)"
[ "$quick" = 1 ] && exit 0

stage 2 "sanitizers: scripts/sanitize.sh (ASan+UBSan, TSan)"
"$root/scripts/sanitize.sh"

# The fuzz stage's time is fixed (CI is near its budget): a new harness
# takes its share from the others.
harnesses=$(ls "$root"/fuzz/*_fuzz.cc | wc -l)
export VIPER_FUZZ_SECONDS="${VIPER_FUZZ_SECONDS:-$(( ${VIPER_FUZZ_TOTAL_SECONDS:-240} / harnesses ))}"
stage 3 "fuzzing: scripts/fuzz.sh ($harnesses harnesses, ${VIPER_FUZZ_SECONDS} s each)"
"$root/scripts/fuzz.sh"

echo "== test: CTest, sanitizers and fuzzing passed in $((SECONDS - t0)) s"
# CTest's own closing line last, for whoever reads the end of the log.
[ -n "$summary" ] && echo "$summary"
exit 0
