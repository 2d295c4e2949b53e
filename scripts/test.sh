#!/usr/bin/env bash
# Builds anvil (CPU, plus CUDA compile-only when nvcc exists) and runs every test through CTest.
# CUDA tests run when a GPU is present and skip (saying why) when not.
#   scripts/test.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"
shift || true
bash scripts/setup.sh "$BUILD_DIR" "$@"
echo "[test] running the suite in $BUILD_DIR"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 1800
