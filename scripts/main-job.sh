#!/usr/bin/env bash
# The main job on a shipped real log. Installs what is missing, builds, runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${VIPER_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh"
log="${1:-$root/datasets/logs/sgd-h256.csv.gz}"
mkdir -p "$root/out"
"$build/apps/viper" log-info --log "$log" --json "$root/out/log-info.json"
echo "JSON written to out/log-info.json"
