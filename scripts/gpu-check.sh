#!/usr/bin/env bash
# The GPU check (needs a CUDA GPU): builds mtc, then the cuda trainers of the
# end-to-end tests, runs them and compares them with PyTorch and with the CPU
# trainers. Prints one line per check and "N passed, N failed". Then the GPU
# benchmark (bench/gpu_bench.py: GPT-2 small and ResNet-50 in bf16, step time
# and peak memory against PyTorch eager and torch.compile) unless
# MTC_GPU_BENCH=0; it writes its table to $build/gpu-bench.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MTC_BUILD_DIR:-$root/build}"
if [ "${MTC_SKIP_SETUP:-0}" != 1 ]; then
  MTC_JOBS="${MTC_JOBS:-$(nproc)}" bash "$root/scripts/setup.sh"
fi
nvidia-smi -L || { echo "gpu-check: no CUDA GPU visible"; exit 1; }
status=0
/usr/bin/python3 "$root/test/gpu/gpu_check.py" --mtc "$build/bin/mtc" \
  --build "$build" --work "$build/gpu-check" || status=$?
if [ "${MTC_GPU_BENCH:-1}" != 0 ]; then
  /usr/bin/python3 "$root/bench/gpu_bench.py" --mtc "$build/bin/mtc" \
    --work "$build/gpu-bench" --doc "$build/gpu-bench.md" || status=$?
fi
exit "$status"
