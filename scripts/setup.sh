#!/usr/bin/env bash
# Installs anvil's Debian dependencies when missing (as root), then configures and builds.
#   scripts/setup.sh [BUILD_DIR] [extra cmake args...]
# CUDA is built when nvcc is found (also under /usr/local/cuda/bin); nothing needs a GPU to build.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${1:-build}"
shift || true

PKGS=(build-essential cmake ninja-build pkg-config libhwy-dev libopenblas-openmp-dev liblapacke-dev
      libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev libpng-dev)
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

# cuDNN's header-only frontend for CUDA builds: the include/ folder of PyPI's nvidia-cudnn-frontend
# wheel (headers only; libcudnn itself is loaded at run time), unpacked once into the build folder.
# Without it CUDA convolutions run as im2col + cuBLASLt.
CUDNN_FRONTEND_VERSION=1.32.0
fe_dir="$BUILD_DIR/_deps/cudnn-frontend"
if [[ $CUDA_FLAG == "-DANVIL_CUDA=ON" && ! -f "$fe_dir/include/cudnn_frontend.h" ]]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    ($SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip >/dev/null) || true
  fi
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
       --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" >/dev/null 2>&1; then
    mkdir -p "$fe_dir"
    python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' "$tmp"/*.whl "$fe_dir"
    echo "[setup] cudnn-frontend $CUDNN_FRONTEND_VERSION headers in $fe_dir"
  else
    echo "[setup] cudnn-frontend not downloadable: CUDA convolutions will run as im2col + cuBLASLt"
  fi
  rm -rf "$tmp"
fi

# The Python package (python/, nanobind): built when nanobind, NumPy and pytest import or install
# from PyPI; its pytest suite then runs with the others under CTest. -DANVIL_PYTHON=OFF skips it.
PY_FLAG="-DANVIL_PYTHON=OFF"
if command -v python3 >/dev/null; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    ($SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip >/dev/null) || true
  fi
  export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
  py_reqs=("nanobind>=2.2" "numpy>=2.1" pytest)  # NumPy 2.1: DLPack 1.0 (writable Tensor.numpy())
  if python3 -c 'import nanobind, numpy, pytest; assert tuple(map(int, numpy.__version__.split(".")[:2])) >= (2, 1)' \
       2>/dev/null || python3 -m pip install -q "${py_reqs[@]}" 2>/dev/null ||
     python3 -m pip install -q --break-system-packages "${py_reqs[@]}" 2>/dev/null; then
    PY_FLAG="-DANVIL_PYTHON=ON"
  else
    echo "[setup] nanobind / NumPy / pytest could not be installed: building without the Python package"
  fi
fi

echo "[setup] configuring $BUILD_DIR ($CUDA_FLAG $PY_FLAG)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$CUDA_FLAG" "$PY_FLAG" "$@" >/dev/null
echo "[setup] building with $(nproc) jobs"
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "[setup] done: $BUILD_DIR/tools/anvil/anvil"
