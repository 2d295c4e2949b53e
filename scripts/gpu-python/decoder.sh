#!/usr/bin/env bash
# On the GPU machine, from the repo root (gpu-carry/ made as README.md says): the persistent
# decoder step's CUDA tests (and the MoE suite's: moe.cu shares its routing), the Qwen3-0.6B and
# Qwen3-30B-A3B bfloat16 / fp8-block (MOE=0: not) benches with every decode path and --trace (time
# per op), then compute-sanitizer memcheck and racecheck on small decoder tests (TESTS=0, DENSE=0,
# DTYPES="bfloat16", SANITIZERS="" leave parts out). Each step runs
# only while enough of LIMIT seconds (default 480) is left, so a short device lease still returns
# the first steps' results.
cd "$(dirname "$0")/.."
L=${LIMIT:-480}
left() { (( L - SECONDS > $1 )); }
tar -C /tmp -xJf gpu-carry/b.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
if [[ "${TESTS:-1}" == 1 ]]; then
  timeout 150 /tmp/b/run.sh anvil_tests --gtest_filter='PersistentDecoder.*:ModelsCuda.*:Dev/Models.*/cuda:Dev/Moe*.*/cuda' > $OUT/dec.log 2>&1
  echo "decoder tests rc $? at ${SECONDS}s"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|rror|Expected|Which is|Value of|cosine|residual|greedy|tests ran" $OUT/dec.log | head -40
fi
[[ "${DENSE:-1}" == 1 ]] && left 60 && { timeout 60 /tmp/b/run.sh anvil bench --shape qwen3-0.6b --device cuda -p 0 -n 128 -r 2 --trace > $OUT/bench.log 2>&1
  echo "bench rc $?"; tail -18 $OUT/bench.log; }
if [[ "${MOE:-1}" == 1 ]]; then
  for dt in ${DTYPES:-bfloat16 fp8-block}; do
    left 120 && { timeout 120 /tmp/b/run.sh anvil bench --shape qwen3-30b-a3b --dtype $dt --device cuda -p 0 -n 64 -r 2 --trace > $OUT/bench-moe-$dt.log 2>&1
      echo "moe $dt bench rc $?"; tail -20 $OUT/bench-moe-$dt.log; }
  done
fi
CS=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || command -v compute-sanitizer)
for tool in ${SANITIZERS-memcheck racecheck}; do
  left 100 && { timeout 100 $CS --tool $tool --target-processes all --print-limit 20 /tmp/b/run.sh anvil_tests \
    --gtest_filter='PersistentDecoder.MatchesEagerHeadDim16Float16:PersistentDecoder.CheckedModeAndRepeatedLaunches:PersistentDecoder.MoeUnnormalisedFloat16' > $OUT/$tool.log 2>&1
    echo "$tool rc $?"; grep -E "SUMMARY|\.cuh?:[0-9]" $OUT/$tool.log | sort | uniq -c | head -16; }
done
echo "end at ${SECONDS}s"
