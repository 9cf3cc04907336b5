#!/usr/bin/env bash
# The GPU check (needs a CUDA GPU): builds mtc, then the cuda trainers of the
# end-to-end tests, runs them and compares them with PyTorch and with the CPU
# trainers. Prints one line per check and "N passed, N failed". Then the GPU
# benchmark (bench/gpu_bench.py: GPT-2 small and ResNet-50 in bf16, step time
# and peak memory against PyTorch eager and torch.compile) unless
# MTC_GPU_BENCH=0; it writes its table to $build/gpu-bench.md. MTC_GPU_CHECK=0
# runs the benchmark alone, MTC_GPU_BENCH_MODELS=gpt2s only some of its models.
#
# On a GPU machine without LLVM to build mtc with (and no network to install
# it), it uses the bundle scripts/device-bundle.sh packed on a machine that
# has it: .device/mtc-device.tar.xz (or $MTC_DEVICE_BUNDLE), unpacked under
# $TMPDIR (MTC_USE_DEVICE_BUNDLE=1 uses it anyway); the trainers are still
# built there, by its g++ and nvcc, and the references come from its python3
# with PyTorch. Extra arguments go to gpu_check.py (e.g. --models
# gpt,flash-attention). MTC_GPU_EMULATED=1 runs the check and the
# benchmark's mtc side without a GPU, on the CUDA emulation
# (docs/testing.md).
set -euo pipefail
# The whole run's wall time, setup and build included, is printed last.
finish() {
  echo "gpu-check: finished in $SECONDS s (exit $1)"
  exit "$1"
}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MTC_BUILD_DIR:-$root/build}"
bundle="${MTC_DEVICE_BUNDLE:-$root/.device/mtc-device.tar.xz}"
python=/usr/bin/python3
if [ -f "$bundle" ] && { [ "${MTC_USE_DEVICE_BUNDLE:-0}" = 1 ] ||
                        [ ! -d /usr/lib/llvm-19/lib/cmake/mlir ]; }; then
  build="${TMPDIR:-/tmp}/mtc-device"
  rm -rf "$build"
  mkdir -p "$build"
  tar -xJf "$bundle" -C "$(dirname "$build")"
  nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  cuda_lib="$(dirname "$nvcc")/../lib64:$(dirname "$nvcc")/../lib"
  export PATH="$build/bin:$(dirname "$nvcc"):$PATH"
  export LD_LIBRARY_PATH="$build/lib:$cuda_lib:${LD_LIBRARY_PATH:-}"
  export LIBRARY_PATH="$build/lib:${LIBRARY_PATH:-}"
  export MTC_RUNTIME_LIB_DIR="$build/lib"
  export MTC_RUNTIME_INCLUDE_DIR="$root/runtime/include"
  python="${MTC_PYTHON:-$(command -v python3)}"
  # Where the toolkit beside nvcc has no cuBLAS to link, PyTorch's own
  # (the nvidia-cublas wheel's libcublas.so.N) serves, under the names the
  # linker looks for.
  if ! echo 'int main() { return 0; }' |
       g++ -x c++ - -lcublasLt -lcublas -o "$build/link-test" 2> /dev/null; then
    wheel="$("$python" -c 'import nvidia.cublas as m; print(list(m.__path__)[0])' \
             2> /dev/null || true)"
    if [ -n "$wheel" ] && [ -d "$wheel/lib" ]; then
      mkdir -p "$build/cublas"
      for lib in "$wheel"/lib/libcublas*.so.*; do
        base="$(basename "$lib")"
        ln -sf "$lib" "$build/cublas/$base"
        ln -sf "$lib" "$build/cublas/${base%%.so.*}.so"
      done
      export LIBRARY_PATH="$build/cublas:$LIBRARY_PATH"
      export LD_LIBRARY_PATH="$build/cublas:$LD_LIBRARY_PATH"
      echo "gpu-check: linking cuBLAS from $wheel/lib"
    else
      echo "gpu-check: no cuBLAS to link beside nvcc nor in python's nvidia-cublas" >&2
    fi
  fi
  echo "gpu-check: using the device bundle $bundle (mtc in $build/bin)"
elif [ "${MTC_SKIP_SETUP:-0}" != 1 ]; then
  MTC_JOBS="${MTC_JOBS:-$(nproc)}" bash "$root/scripts/setup.sh" || {
    echo "gpu-check: could not set up and build mtc here; where LLVM / MLIR" \
         "19 cannot be installed, run scripts/device-bundle.sh on a machine" \
         "that builds mtc and bring .device/ along" >&2
    exit 1
  }
fi
if [ "${MTC_GPU_DRY_RUN:-0}" = 1 ]; then
  # Without a GPU: the cpu target twice, the benchmark at toy sizes.
  status=0
  "$python" "$root/test/gpu/gpu_check.py" --mtc "$build/bin/mtc" \
    --build "$build" --work "$build/gpu-check" --device-target cpu "$@" ||
    status=$?
  if [ "${MTC_GPU_BENCH:-1}" != 0 ]; then
    "$python" "$root/bench/gpu_bench.py" --mtc "$build/bin/mtc" \
      --work "$build/gpu-bench" --device cpu --small --no-compile || status=$?
  fi
  finish "$status"
fi
if [ "${MTC_GPU_EMULATED:-0}" = 1 ]; then
  # Without a GPU: the cuda target on the CUDA emulation (test/cudaemu),
  # the check (~30 min on 2 cores, the zoo's CNNs most) and the benchmark
  # at toy sizes against PyTorch on the CPU (its times mean nothing).
  status=0
  if [ "${MTC_GPU_CHECK:-1}" != 0 ]; then
    "$python" "$root/test/gpu/gpu_check.py" --mtc "$build/bin/mtc" \
      --build "$build" --work "$build/gpu-check-emulated" --emulated "$@" ||
      status=$?
  fi
  if [ "${MTC_GPU_BENCH:-1}" != 0 ]; then
    "$python" "$root/bench/gpu_bench.py" --mtc "$build/bin/mtc" \
      --work "$build/gpu-bench-emulated" --emulated || status=$?
  fi
  finish "$status"
fi
nvidia-smi -L || { echo "gpu-check: no CUDA GPU visible"; exit 1; }
status=0
bench=("$python" "$root/bench/gpu_bench.py" --mtc "$build/bin/mtc"
       --work "$build/gpu-bench" --models "${MTC_GPU_BENCH_MODELS:-gpt2s,resnet50}")
prepare=""
if [ "${MTC_GPU_BENCH:-1}" != 0 ]; then
  # The benchmark's CPU work (exporting the models, building the trainers)
  # runs beside the check's GPU work; the benchmark then only times.
  "${bench[@]}" --prepare > "$build/gpu-bench-prepare.log" 2>&1 &
  prepare=$!
fi
if [ "${MTC_GPU_CHECK:-1}" != 0 ]; then
  "$python" "$root/test/gpu/gpu_check.py" --mtc "$build/bin/mtc" \
    --build "$build" --work "$build/gpu-check" "$@" || status=$?
fi
if [ -n "$prepare" ]; then
  wait "$prepare" || echo "gpu-check: preparing the benchmark failed" \
    "(the benchmark builds what is missing)"
  cat "$build/gpu-bench-prepare.log"
  "${bench[@]}" --doc "$build/gpu-bench.md" || status=$?
fi
finish "$status"
