#!/usr/bin/env bash
# Regenerates the shipped pretrained weights with `viper train` (datasets/README.md,
# "Pretrained weights"). Usage: datasets/pretrained/make_pretrained.sh [path/to/viper]
# (default: build/apps/viper). Writes here (or to $OUT_DIR); the summaries go to
# $JSON_DIR (default /tmp).
#
# mlp256-classes0-4: hidden 256, trained on classes 0-4 of Fashion-MNIST only
# (a class-incremental stream whose drift point lies beyond the run: classes
# 5-9 never arrive, and the validation/test columns hold classes 0-4), so a
# fine-tune on all ten classes has something to learn. WIDE=1 also makes
# mlp1024x1024-classes0-4 (7.5 MB, not shipped: the live delta figures of
# workflow/README.md use it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
viper="${1:-$here/../../build/apps/viper}"
out="${OUT_DIR:-$here}"
common=(--dataset fashion-mnist --optimizer sgd --lr 0.05 --momentum 0.9 --batch 64 --seed 1 --train-samples 30000
        --drift class-incremental --drift-initial-classes 5 --drift-at-iteration 1000000000
        --val-every 100 --val-samples 2000 --test-samples 5000 --progress-every 10)
"$viper" train "${common[@]}" --hidden 256 --epochs 3 --save-model "$out/mlp256-classes0-4.safetensors" \
  --json "${JSON_DIR:-/tmp}/mlp256-classes0-4.json"
if [ "${WIDE:-0}" = 1 ]; then
  "$viper" train "${common[@]}" --hidden 1024,1024 --epochs 1 --save-model "$out/mlp1024x1024-classes0-4.safetensors" \
    --json "${JSON_DIR:-/tmp}/mlp1024x1024-classes0-4.json"
fi
