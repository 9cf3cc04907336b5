#!/usr/bin/env bash
# The main job: install and build mtc, compile the bundled example model with
# a memory budget, and train it (on the GPU when one is present, else on the
# CPU), showing the memory report and the loss falling.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MTC_BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh"

work="${MTC_EXAMPLE_DIR:-$build/example}"
mkdir -p "$work"
target=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  target=cuda
fi
echo
echo "== compiling examples/mlp/model.onnx for $target (batch 64, budget 64MB)"
"$build/bin/mtc" compile "$root/examples/mlp/model.onnx" --dim batch=64 \
  --target "$target" --optimizer adamw --lr 0.001 --mem-budget 64MB \
  --report "$work/report.json" -o "$work/trainer"
echo
echo "== synthetic data"
/usr/bin/python3 "$root/examples/mlp/make_data.py" "$work/data"
echo
echo "== training 300 steps"
"$work/trainer" --data "$work/data" --steps 300 --log-every 25 \
  --metrics "$work/metrics.jsonl" --save "$work/final.safetensors"
echo
echo "== evaluating the trained weights (dropout off, BatchNorm on running stats)"
"$work/trainer" --data "$work/data" --eval --load "$work/final.safetensors" | grep '^eval'
echo
echo "memory report: $work/report.json; metrics: $work/metrics.jsonl;" \
  "checkpoint: $work/final.safetensors"
