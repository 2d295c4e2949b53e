#!/usr/bin/env bash
# Runs the CUDA checks from a bundle made by scripts/gpu-bundle.sh and writes a report:
#   REPORT_DIR/nvidia-smi.txt, info.txt                 the machine and what anvil sees
#   REPORT_DIR/<test binary>.xml / .log                 GoogleTest results of every test binary
#   REPORT_DIR/memcheck.log                             compute-sanitizer memcheck of the CUDA tests
#   REPORT_DIR/bench-cuda.json / .log                   anvil bench-ops --device cuda
#   REPORT_DIR/torch-cuda.json / .log                   the same cases in PyTorch (when python3 has torch)
#   REPORT_DIR/vae-<n>.log, torch-vae-<n>.log           anvil bench --vae on CUDA for each VAE_BENCH entry,
#                                                       and diffusers + PyTorch on it (when python3 has diffusers)
#   REPORT_DIR/summary.txt                              pass / fail / skip counts and every step's status
# Every step runs even when an earlier one fails; the exit status is 1 if anything failed.
#   scripts/gpu-check.sh BUNDLE_DIR REPORT_DIR
# Time limits (seconds) from the environment: TEST_TIMEOUT (3600), MEMCHECK_TIMEOUT (1800),
# BENCH_TIMEOUT (1200). VAE_BENCH: ";"-separated `anvil bench --vae` argument lists (default
# "wan2.2 --tiled;flux"; empty: none). MEMCHECK_FILTER overrides the gtest filter of the memcheck run;
# BENCH_FILTER limits the benchmark cases (bench-ops --filter); TEST_FILTER is a gtest filter for
# the test binaries (default: every test).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUNDLE_DIR REPORT_DIR" >&2
  exit 2
fi
bundle="$(cd "$1" && pwd)"
mkdir -p "$2"
report="$(cd "$2" && pwd)"
run="$bundle/run.sh"
summary="$report/summary.txt"
: > "$summary"
failed=0

note() { echo "$*" | tee -a "$summary"; }

# step NAME LOGFILE CMD...: runs CMD with its output in LOGFILE, records the status, never aborts.
step() {
  local name="$1" log="$2"
  shift 2
  local start rc=0
  start=$(date +%s)
  echo "[gpu-check] $name ..."
  "$@" > "$log" 2>&1 || rc=$?
  local secs=$(( $(date +%s) - start ))
  if [[ $rc -eq 0 ]]; then
    note "PASS  $name (${secs} s)"
  else
    [[ $rc -eq 124 ]] && note "FAIL  $name: timed out after ${secs} s (log: $(basename "$log"))" \
                      || note "FAIL  $name: exit status $rc after ${secs} s (log: $(basename "$log"))"
    failed=1
  fi
  return 0
}

# Counts from a GoogleTest XML report: "tests failures skipped" (gtest >= 1.10 marks skips).
gtest_counts() {
  local xml="$1"
  local tests failures errors skipped
  tests=$(grep -o -m1 '<testsuites[^>]*' "$xml" | grep -o ' tests="[0-9]*"' | grep -o '[0-9]*' || echo 0)
  failures=$(grep -o -m1 '<testsuites[^>]*' "$xml" | grep -o ' failures="[0-9]*"' | grep -o '[0-9]*' || echo 0)
  errors=$(grep -o -m1 '<testsuites[^>]*' "$xml" | grep -o ' errors="[0-9]*"' | grep -o '[0-9]*' || echo 0)
  skipped=$(grep -c 'result="skipped"' "$xml" || true)
  echo "${tests:-0} $(( ${failures:-0} + ${errors:-0} )) ${skipped:-0}"
}

note "anvil gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
[[ -f "$bundle/MANIFEST.txt" ]] && sed 's/^/  /' "$bundle/MANIFEST.txt" >> "$summary"

# ---- the machine
if command -v nvidia-smi > /dev/null; then
  step "nvidia-smi" "$report/nvidia-smi.txt" nvidia-smi
else
  note "FAIL  nvidia-smi: not found (is the NVIDIA driver installed?)"
  failed=1
fi
step "anvil info" "$report/info.txt" "$run" anvil info
grep -E '^cuda' "$report/info.txt" | sed 's/^/      /' >> "$summary" || true

# ---- test binaries
total_tests=0 total_failed=0 total_skipped=0
for exe in "$bundle"/bin/*; do
  name="$(basename "$exe")"
  [[ "$name" == "anvil" ]] && continue
  xml="$report/$name.xml"
  rm -f "$xml"
  step "$name" "$report/$name.log" timeout "${TEST_TIMEOUT:-3600}" "$run" "$name" --gtest_output="xml:$xml" \
    ${TEST_FILTER:+--gtest_filter="$TEST_FILTER"}
  if [[ -f "$xml" ]]; then
    read -r t f s < <(gtest_counts "$xml")
    note "      $name: $t tests, $(( t - f - s )) passed, $f failed, $s skipped"
    total_tests=$(( total_tests + t )) total_failed=$(( total_failed + f )) total_skipped=$(( total_skipped + s ))
    grep -E '^\[  FAILED  \] [A-Za-z]' "$report/$name.log" | sort -u | sed 's/^/      /' >> "$summary" || true
    # A CUDA test that skips on the GPU machine means the GPU was not seen: say so loudly.
    if grep -q 'CUDA not available' "$report/$name.log"; then
      note "      warning: $name skipped CUDA tests: $(grep -m1 -o 'CUDA not available.*' "$report/$name.log")"
    fi
  else
    note "      $name: no XML report (crashed before finishing?)"
  fi
done

# ---- compute-sanitizer memcheck of the CUDA tests
sanitizer="$(command -v compute-sanitizer || true)"
[[ -z "$sanitizer" && -x /usr/local/cuda/bin/compute-sanitizer ]] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
if [[ -n "$sanitizer" && -x "$bundle/bin/anvil_tests" ]]; then
  # The out-of-memory test is left out: its intended cudaMalloc failure counts as an API error.
  filter="${MEMCHECK_FILTER:-*/cuda:*Cuda*:*CUDA*:*Graph*:*Stream*:*Allocator*-Large*:CudaTest.OutOfMemoryThenKeepsWorking}"
  step "memcheck (anvil_tests --gtest_filter=$filter)" "$report/memcheck.log" \
    env LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    timeout "${MEMCHECK_TIMEOUT:-1800}" "$sanitizer" --tool memcheck --error-exitcode 99 --leak-check no \
    "$bundle/bin/anvil_tests" --gtest_filter="$filter"
  grep -E 'ERROR SUMMARY' "$report/memcheck.log" | tail -1 | sed 's/^/      /' >> "$summary" || true
else
  note "SKIP  memcheck: compute-sanitizer not found"
fi

# ---- benchmarks
step "anvil bench-ops --device cuda" "$report/bench-cuda.log" \
  timeout "${BENCH_TIMEOUT:-1200}" "$run" anvil bench-ops --device cuda --filter "${BENCH_FILTER:-}" \
  --json "$report/bench-cuda.json"
sed -n '/^ceiling (best/,$p' "$report/bench-cuda.log" | sed 's/^/      /' >> "$summary" || true
if [[ -f "$report/bench-cuda.json" ]] && python3 -c 'import torch' 2>/dev/null; then
  step "PyTorch on the same cases" "$report/torch-cuda.log" \
    timeout "${BENCH_TIMEOUT:-1200}" python3 "$bundle/scripts/torch_bench_ops.py" "$report/bench-cuda.json" \
    --json "$report/torch-cuda.json"
  grep -E 'geometric|^torch' "$report/torch-cuda.log" | sed 's/^/      /' >> "$summary" || true
else
  note "SKIP  PyTorch comparison: no bench JSON or no torch in python3"
fi

# ---- VAE decodes at real shapes beside diffusers
IFS=';' read -r -a vae_runs <<< "${VAE_BENCH-wan2.2 --tiled;flux}"
n=0
for args in "${vae_runs[@]}"; do
  [[ -z "$args" ]] && continue
  n=$(( n + 1 ))
  # shellcheck disable=SC2086
  step "anvil bench --vae $args --device cuda" "$report/vae-$n.log" \
    timeout "${BENCH_TIMEOUT:-1200}" "$run" anvil bench --vae $args --device cuda -r 3
  grep -E '^\| ' "$report/vae-$n.log" | tail -1 | sed 's/^/      /' >> "$summary" || true
  if python3 -c 'import diffusers' 2>/dev/null; then
    # shellcheck disable=SC2086
    step "diffusers bench --vae $args" "$report/torch-vae-$n.log" \
      timeout "${BENCH_TIMEOUT:-1200}" python3 "$bundle/scripts/torch_vae_bench.py" --vae $args --device cuda -r 3
    grep -E '^\| ' "$report/torch-vae-$n.log" | tail -1 | sed 's/^/      /' >> "$summary" || true
  fi
done

note ""
note "tests: $total_tests, passed $(( total_tests - total_failed - total_skipped )), failed $total_failed, skipped $total_skipped"
note "result: $([[ $failed -eq 0 ]] && echo PASS || echo FAIL)  (report in $report)"
exit $failed
