#!/usr/bin/env bash
# CPU bench-ops of the decode hot path's case groups, each followed by the same cases in PyTorch
# CPU at the same thread count (scripts/torch_bench_ops.py). For a quiet machine: other load
# skews both sides.
#   scripts/cpu-bench-compare.sh [BUILD_DIR]      PYTHON=/path/to/python-with-torch (default python3)
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
py="${PYTHON:-python3}"
out="$(mktemp -d)"
for f in "linear bf16 m1" "scaled_linear" "grouped_mm bf16" "moe_" "softmax f32 1x151936" "rms_norm" "silu_mul" \
         "rope" "sample_greedy" "attention decode bf16 32q/8kv hd80 ctx 4096" "topk8"; do
  j="$out/$(echo "$f" | tr ' />-' '____').json"
  "$build/tools/anvil/anvil" bench-ops --device cpu --filter "$f" --json "$j" | grep -vE "^  "
  "$py" scripts/torch_bench_ops.py "$j"
done
