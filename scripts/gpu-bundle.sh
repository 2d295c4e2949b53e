#!/usr/bin/env bash
# Packs a CUDA build into one self-contained folder for the GPU machine:
#   OUT_DIR/bin   the test executables (tests/anvil_tests, any other test binary) and tools/anvil/anvil
#   OUT_DIR/lib   every shared library they link that is not part of the base system (CUDA
#                 runtime and cuBLAS(Lt), Highway, OpenBLAS / BLAS / LAPACK, libgomp, GoogleTest, ...)
#   OUT_DIR/run.sh  runs a bundled binary with LD_LIBRARY_PATH pointing at OUT_DIR/lib
# glibc, libstdc++, libm and libgcc_s stay the GPU machine's own (newer there, and ABI-compatible);
# the NVIDIA driver (libcuda) always comes from the GPU machine.
#   scripts/gpu-bundle.sh BUILD_DIR OUT_DIR
# GPU_BUNDLE_EXCLUDE (an extended regex on library names) leaves more libraries to the target,
# e.g. GPU_BUNDLE_EXCLUDE='^lib(cudart|cublas|cublasLt|cusolver|cusparse|nvJitLink)[.-]' when it
# has the same CUDA toolkit (libcublasLt alone is over 500 MB; cuSOLVER pulls in cuSPARSE and
# nvJitLink, 260 MB).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build_dir="$(cd "$1" && pwd)"
out_dir="$2"
mkdir -p "$out_dir/bin" "$out_dir/lib"
out_dir="$(cd "$out_dir" && pwd)"

# ---- binaries
bins=()
while IFS= read -r -d '' f; do
  bins+=("$f")
done < <(find "$build_dir/tests" -maxdepth 2 -type f -perm -u+x ! -name '*.so*' ! -name '*.sh' ! -name '*_shared' -print0 2>/dev/null || true)
[[ -x "$build_dir/tools/anvil/anvil" ]] && bins+=("$build_dir/tools/anvil/anvil")
if [[ ${#bins[@]} -eq 0 ]]; then
  echo "[gpu-bundle] no test or tool binaries under $build_dir (configure with -DANVIL_TESTS=ON -DANVIL_BENCH=ON)" >&2
  exit 1
fi

# Libraries that must come from the target system, never from the bundle.
is_system_lib() {
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
      libresolv.so* | libutil.so* | libstdc++.so* | libgcc_s.so* | libcuda.so* | libnvidia-*.so*)
      return 0 ;;
  esac
  return 1
}

declare -A copied=()
missing=0
for b in "${bins[@]}"; do
  cp -f "$b" "$out_dir/bin/"
  echo "[gpu-bundle] bin/$(basename "$b")"
  # ldd lists the whole dependency closure as "soname => path (addr)".
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    is_system_lib "$name" && continue
    [[ -n "${GPU_BUNDLE_EXCLUDE:-}" && "$name" =~ ${GPU_BUNDLE_EXCLUDE} ]] && continue
    if [[ "$path" == "not" ]]; then
      echo "[gpu-bundle] warning: $(basename "$b") needs $name, which is not found on this machine" >&2
      missing=1
      continue
    fi
    [[ -n "${copied[$name]:-}" ]] && continue
    cp -fL "$path" "$out_dir/lib/$name"  # under its soname, which is what the loader looks for
    copied[$name]=1
    echo "[gpu-bundle] lib/$name  <- $path"
  done < <(ldd "$b")
done

# The PyTorch comparison script reads the bench JSON there (scripts/gpu-check.sh runs it).
mkdir -p "$out_dir/scripts"
cp -f "$(dirname "${BASH_SOURCE[0]}")/torch_bench_ops.py" "$(dirname "${BASH_SOURCE[0]}")/torch_vae_bench.py" \
  "$out_dir/scripts/"

cat > "$out_dir/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs a bundled binary with the bundled libraries:  ./run.sh anvil_tests --gtest_filter='*cuda*'
#                                                    ./run.sh anvil info
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [[ $# -eq 0 ]]; then
  echo "usage: $0 BINARY [ARGS...]   (binaries: $(ls "$here/bin" | tr '\n' ' '))" >&2
  exit 2
fi
exe="$1"
shift
[[ "$exe" == */* ]] || exe="$here/bin/$exe"
exec "$exe" "$@"
EOF
chmod +x "$out_dir/run.sh"

{
  echo "bundle made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "from $build_dir"
  git -C "$build_dir/.." rev-parse HEAD 2>/dev/null | sed 's/^/commit /' || true
  echo "binaries: $(ls "$out_dir/bin" | tr '\n' ' ')"
  echo "libraries: $(ls "$out_dir/lib" | tr '\n' ' ')"
} > "$out_dir/MANIFEST.txt"

echo "[gpu-bundle] wrote $out_dir ($(du -sh "$out_dir" | cut -f1)); run: $out_dir/run.sh anvil info"
if [[ $missing -ne 0 ]]; then
  echo "[gpu-bundle] some libraries were not found here; the bundle needs them on the GPU machine" >&2
fi
