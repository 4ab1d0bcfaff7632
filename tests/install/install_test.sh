#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a separate project
# against it with find_package(viper).
set -euo pipefail
build="$1"; src="$2"; build_type="${3:-}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
extra=()
# An Asan build's libraries need the sanitizer runtimes in the consumer too.
if [ "$build_type" = "Asan" ]; then extra=(-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined); fi
cmake -S "$src/tests/install/consumer" -B "$tmp/b" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" "${extra[@]}" >"$tmp/configure.log" 2>&1 || {
  cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/b" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
"$tmp/b/consumer"
