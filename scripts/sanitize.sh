#!/usr/bin/env bash
# The test suite under clang's sanitizers, each in its own build dir:
#   asan  build-asan/: the test suite, MPI tests included, under
#         AddressSanitizer + LeakSanitizer + UBSan with float-cast-overflow,
#         every report fatal, without the Python module (no Python test
#         runs under ASan); less seven tests that run in the plain CTest
#         pass only (VIPER_SANITIZE_ALL=1 runs them too): the install test
#         (its consumer project would link gcc's sanitizer runtime), the
#         fault tests whose fixed peer timeouts do not hold at ASan's speed
#         (a consumer killed mid-transfer, the live job's faults), the
#         scenario test that plans every shipped log twice with every
#         strategy (7 minutes under ASan), and three more whose work is
#         planning or fitting real curves many times over code the other
#         tests run under ASan too (the collapse run planned 36 ways: 77 s;
#         a recurring domain's kept model, planned on three tiers: 109 s;
#         the predictor on flat, noisy and non-monotone curves: 86 s).
#   tsan  build-tsan/: the threaded engine's tests (staging threads, async
#         snapshot, polling consumer, the host tier's double buffer, the
#         races test) under ThreadSanitizer, built without MPI (Open MPI is
#         not TSan-instrumented).
# Usage: scripts/sanitize.sh [asan|tsan]...   (default: both)
# Env: VIPER_JOBS (build jobs, default nproc), VIPER_TEST_JOBS (ctest -j, default 2).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
jobs="${VIPER_JOBS:-$(nproc)}"
test_jobs="${VIPER_TEST_JOBS:-2}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Symbolized stacks in every report; the first report ends the process.
symbolizer="$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)"
export ASAN_SYMBOLIZER_PATH="$symbolizer" TSAN_SYMBOLIZER_PATH="$symbolizer"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:external_symbolizer_path=$symbolizer"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"

source "$root/scripts/ccache-env.sh"

t0=$SECONDS
stamp() { echo "sanitize: $* ($((SECONDS - t0)) s)"; }

configure() {  # configure <dir> <build type> [cmake args...]
  local dir="$1" type="$2"; shift 2
  if [ ! -f "$dir/build.ninja" ]; then
    mkdir -p "$dir"
    CC=clang CXX=clang++ cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" \
      -DVIPER_BUILD_BENCH=OFF -DVIPER_ENABLE_CUDA=OFF "${launcher[@]}" "$@" \
      >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 1; }
  fi
}

run_asan() {
  local dir="${VIPER_ASAN_BUILD_DIR:-$root/build-asan}"
  stamp "asan: configuring and building $dir (clang, -O1, no bench)"
  # No Python module: no Python test runs under ASan (the interpreter is not built with it).
  configure "$dir" Asan -DVIPER_BUILD_PYTHON=OFF
  cmake --build "$dir" -j "$jobs"
  local skip=(-LE '^install$' -E '^(transports\.mpi_kill_|workflow\.live_faults$|schedulers\.ScenarioTest\.NoStrategyPeeksAtLaterRows$|schedulers\.StalenessScenarioTest\.(OnlineNeverPublishesACollapsedModel|OnlineRePublishesAKeptModelWhenADomainReturns)$|predictor\.LearningCurvePredictor\.SurvivesFlatNoisyAndNonMonotoneCurves$)')
  [ "${VIPER_SANITIZE_ALL:-0}" = 1 ] && skip=()
  stamp "asan: running ctest ${skip[*]}"
  (cd "$dir" && ctest --output-on-failure -j "$test_jobs" "${skip[@]}")
  stamp "asan: passed"
}

run_tsan() {
  local dir="${VIPER_TSAN_BUILD_DIR:-$root/build-tsan}"
  stamp "tsan: configuring and building $dir (clang, -O1, no MPI, transports tests only)"
  configure "$dir" Tsan -DVIPER_ENABLE_MPI=OFF
  cmake --build "$dir" -j "$jobs" --target viper_transports_tests
  stamp "tsan: running the transports tests"
  (cd "$dir" && ctest --output-on-failure -j "$test_jobs" -R '^transports\.')
  stamp "tsan: passed"
}

modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(asan tsan)
for m in "${modes[@]}"; do
  case "$m" in
    asan) run_asan ;;
    tsan) run_tsan ;;
    *) echo "usage: scripts/sanitize.sh [asan|tsan]..." >&2; exit 2 ;;
  esac
done
