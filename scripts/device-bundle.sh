#!/usr/bin/env bash
# Packs what the GPU check needs on a GPU machine that has CUDA (nvcc, cuBLAS),
# g++ and PyTorch but neither LLVM / MLIR nor the ONNX C++ library, and nothing
# it can install from: an mtc with LLVM linked in (MTC_STATIC_LLVM, built in
# ./build-device), the runtime libraries the trainers link, the CUDA kernel
# unit tests, and the shared libraries from Debian that mtc and the cpu
# trainers load (ONNX, protobuf, OpenBLAS and its Fortran runtime). Writes
# .device/mtc-device.tar.xz (ignored by git); scripts/gpu-check.sh unpacks
# and uses it where it finds no LLVM to build with. Safe to run again.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-device"
out="$root/.device/mtc-device.tar.xz"

# The Debian packages (and the regular build, which the tests use).
bash "$root/scripts/setup.sh" > /dev/null

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DMTC_STATIC_LLVM=ON > /dev/null
fi
echo "device-bundle: building mtc with LLVM linked in ($build)"
cmake --build "$build" -j "${MTC_JOBS:-2}" --target mtc mtc-runtime-cuda-tests \
  mtc-cudaemu-self-tests-gpu

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
dir="$stage/mtc-device"
mkdir -p "$dir/bin" "$dir/lib"
cp "$build/bin/mtc" "$build/bin/mtc-runtime-cuda-tests" \
  "$build/bin/mtc-cudaemu-self-tests-gpu" "$dir/bin/"
cp "$build"/lib/libmtc_runtime_*.a "$dir/lib/"

# Shared libraries by soname, as the loader here resolves them.
for soname in libonnx.so.1 libonnx_proto.so.1 libprotobuf.so.32 \
              libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
  path="$(ldconfig -p | awk -v n="$soname" '$1 == n && /x86-64/ && !p {print $NF; p = 1}')"
  if [ -z "$path" ]; then
    echo "device-bundle: $soname not found (ldconfig -p)" >&2
    exit 1
  fi
  cp -L "$path" "$dir/lib/$soname"
done
# The name the cpu trainers link (-lopenblas).
ln -s libopenblas.so.0 "$dir/lib/libopenblas.so"

# mtc must not need this machine's LLVM.
if ldd "$dir/bin/mtc" | grep "libLLVM" > /dev/null; then
  echo "device-bundle: $build/bin/mtc links libLLVM; reconfigure with -DMTC_STATIC_LLVM=ON" >&2
  exit 1
fi

mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - mtc-device | xz -6 -T0 > "$out.tmp"
mv "$out.tmp" "$out"
echo "device-bundle: wrote $out ($(du -h "$out" | cut -f1))"
