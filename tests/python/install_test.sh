#!/usr/bin/env bash
# Installs the python component into a temporary prefix and imports the
# package from there (not from the build tree), then round-trips a file.
set -euo pipefail
build="$1"; python="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --component python --prefix "$tmp/prefix" >"$tmp/install.log"
site="$(find "$tmp/prefix" -name __init__.py -path '*/viper/*' -printf '%h\n' | head -n 1)"
[ -n "$site" ] || { echo "no viper package under $tmp/prefix"; cat "$tmp/install.log"; exit 1; }
cd "$tmp"
PYTHONPATH="$(dirname "$site")" "$python" - <<PY
import torch, viper
assert viper.__file__.startswith("$tmp/prefix"), viper.__file__
viper.save_file({"w": torch.arange(6.0).reshape(2, 3)}, "$tmp/w.safetensors")
assert torch.equal(viper.load_file("$tmp/w.safetensors")["w"], torch.arange(6.0).reshape(2, 3))
print("installed viper", viper.__version__, "at", viper.__file__)
PY
