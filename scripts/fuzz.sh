#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/*_fuzz.cc) into build-fuzz/ with clang
# (-fsanitize=fuzzer,address,undefined, float-cast-overflow, every report
# fatal) and runs each for a bounded time on its seed corpus
# fuzz/corpus/<name>/ (what it finds goes to build-fuzz/corpus/<name>/, not
# into the source tree). Fails on any crash, leak, timeout, out-of-memory or
# sanitizer report, printing the reproducer's path and how to replay it.
#
# Usage: scripts/fuzz.sh [name...]      (default: every harness, e.g. safetensors log_reader staleness options)
# Env:   VIPER_FUZZ_SECONDS   seconds per harness (default 60)
#        VIPER_FUZZ_RSS_MB    memory limit per harness in MB (default 2048; also the malloc limit)
#        VIPER_FUZZ_TIMEOUT   seconds one input may take (default 20: a 1 MiB input through every
#                             parse under ASan takes ~1 s of CPU; a loaded machine stretches that)
#        VIPER_FUZZ_BUILD_DIR (default build-fuzz), VIPER_JOBS (build jobs)
# Replay one input: build-fuzz/fuzz/<name>_fuzz <file>
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${VIPER_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${VIPER_FUZZ_SECONDS:-60}"
rss_mb="${VIPER_FUZZ_RSS_MB:-2048}"
timeout_s="${VIPER_FUZZ_TIMEOUT:-20}"
jobs="${VIPER_JOBS:-$(nproc)}"
"$root/scripts/install-deps.sh"

t0=$SECONDS
stamp() { echo "fuzz: $* ($((SECONDS - t0)) s)"; }

source "$root/scripts/ccache-env.sh"
if [ ! -f "$build/build.ninja" ]; then
  mkdir -p "$build"
  # -O1 with asserts on (no NDEBUG); no tests, bench, MPI or CUDA: only the
  # libraries the harnesses link.
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DVIPER_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DVIPER_BUILD_TESTS=OFF -DVIPER_BUILD_BENCH=OFF \
    -DVIPER_ENABLE_MPI=OFF -DVIPER_ENABLE_CUDA=OFF "${launcher[@]}" \
    >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
fi
stamp "building the harnesses in $build"
cmake --build "$build" -j "$jobs" --target viper_fuzzers

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for src in "$root"/fuzz/*_fuzz.cc; do
    n="$(basename "$src" .cc)"
    names+=("${n%_fuzz}")
  done
fi

symbolizer="$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)"
export ASAN_SYMBOLIZER_PATH="$symbolizer"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:external_symbolizer_path=$symbolizer"

failed=()
for name in "${names[@]}"; do
  bin="$build/fuzz/${name}_fuzz"
  if [ ! -x "$bin" ]; then
    echo "fuzz: no harness '$name' ($bin was not built; harnesses: fuzz/*_fuzz.cc)" >&2
    exit 2
  fi
  seeds="$root/fuzz/corpus/$name"
  work="$build/corpus/$name"
  artifacts="$build/artifacts/$name"
  log="$build/logs/$name.log"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  rm -f "$artifacts"/*
  seed_dirs=()
  [ -d "$seeds" ] && seed_dirs=("$seeds")
  stamp "$name: running ${seconds} s (max_len 1 MiB, rss ${rss_mb} MB, ${timeout_s} s per input; $(ls "$seeds" 2>/dev/null | wc -l) seeds)"
  rc=0
  "$bin" -max_total_time="$seconds" -max_len=1048576 -rss_limit_mb="$rss_mb" -malloc_limit_mb="$rss_mb" \
    -timeout="$timeout_s" -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$work" "${seed_dirs[@]}" >"$log" 2>&1 || rc=$?
  found=("$artifacts"/*)
  if [ $rc -ne 0 ] || [ -e "${found[0]}" ]; then
    echo "fuzz: $name FAILED (exit $rc); the end of $log:" >&2
    tail -n 60 "$log" >&2
    for f in "${found[@]}"; do
      [ -e "$f" ] && echo "fuzz: $name: reproducer $f  (replay: $bin $f)" >&2
    done
    failed+=("$name")
  else
    stats="$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')"
    stamp "$name: passed, ${stats:-?} inputs run, corpus $(ls "$work" | wc -l) files"
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
stamp "every harness passed"
