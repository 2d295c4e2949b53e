#!/usr/bin/env bash
# Installs anvil's Debian dependencies when missing (as root), then configures and builds.
#   scripts/setup.sh [BUILD_DIR] [extra cmake args...]
# CUDA is built when nvcc is found (also under /usr/local/cuda/bin); nothing needs a GPU to build.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${1:-build}"
shift || true

PKGS=(build-essential cmake ninja-build pkg-config libhwy-dev libopenblas-dev liblapacke-dev
      libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
CUDA_FLAG="-DANVIL_CUDA=OFF"
command -v nvcc >/dev/null && CUDA_FLAG="-DANVIL_CUDA=ON"

echo "[setup] configuring $BUILD_DIR ($CUDA_FLAG)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$CUDA_FLAG" "$@" >/dev/null
echo "[setup] building with $(nproc) jobs"
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "[setup] done: $BUILD_DIR/tools/anvil/anvil"
