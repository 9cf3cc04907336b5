#!/usr/bin/env bash
# Installs what mtc needs from Debian's packages (only what is missing) and
# builds it in ./build. Safe to run again: a second run installs nothing and
# only rebuilds what changed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MTC_BUILD_DIR:-$root/build}"

packages=(
  build-essential cmake ninja-build ccache git
  llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools
  libonnx-dev libprotobuf-dev protobuf-compiler
  libopenblas-dev libgtest-dev
  python3-torch python3-torchvision python3-onnx python3-numpy libonnx-testdata
  coinor-cbc
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "mtc setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Two cores: keep the build lean and cached.
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# Paths relative to the checkout, so another clone reuses the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
jobs="${MTC_JOBS:-2}"
echo "mtc setup: building in $build (-j$jobs)"
start=$(date +%s)
cmake --build "$build" -j "$jobs"
echo "mtc setup: build done in $(( $(date +%s) - start ))s"
