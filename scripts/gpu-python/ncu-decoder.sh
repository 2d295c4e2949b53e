#!/usr/bin/env bash
# On the GPU machine, from the repo root (gpu-carry/ made as README.md says): Nsight Compute on
# one persistent decoder step of a bench shape (SHAPE, default qwen3-30b-a3b; DTYPE, default
# fp8-block): warp-state statistics and the SASS lines with the most stall samples, into $OUT.
cd "$(dirname "$0")/.."
[[ -d /tmp/b ]] || tar -C /tmp -xJf gpu-carry/b.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
tag=${SHAPE:-qwen3-30b-a3b}-${DTYPE:-fp8-block}
# The bench runs its persistent steps after the graph ones; the 3rd persistent launch is a warm one.
timeout ${NCU_LIMIT:-240} $NCU --clock-control none -k regex:decoder_step_kernel --launch-skip 2 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section SpeedOfLight -f -o /tmp/prof-$tag \
  /tmp/b/run.sh anvil bench --shape ${SHAPE:-qwen3-30b-a3b} --dtype ${DTYPE:-fp8-block} --device cuda -p 0 -n 4 -r 1 \
  > $OUT/ncu-$tag.log 2>&1
echo "ncu rc $? ($tag)"; grep -E "==PROF==|==ERROR==|==WARNING==" $OUT/ncu-$tag.log | head -5
$NCU -i /tmp/prof-$tag.ncu-rep --page details > $OUT/details-$tag.txt 2>&1
grep -E "Duration|Memory Throughput|DRAM Throughput|Warp Cycles Per Issued|Stall|Issued Ipc" $OUT/details-$tag.txt | head -20
$NCU -i /tmp/prof-$tag.ncu-rep --page source --csv --print-source sass > $OUT/sass-$tag.csv 2>&1
echo "sass lines: $(wc -l < $OUT/sass-$tag.csv)"
