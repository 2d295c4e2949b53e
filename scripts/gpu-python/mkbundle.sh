#!/usr/bin/env bash
# Here: packs build-cuda's binaries, libanvil_shared.so, libanvil_runtime_shared.a and the nanobind wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf /tmp/b gpu-carry/b.tar.xz
GPU_BUNDLE_EXCLUDE='^lib(cudart|cublas|cublasLt|cusolver|cusparse|nvJitLink|cudnn[a-z_]*)[.-]' \
  bash scripts/gpu-bundle.sh build-cuda /tmp/b > /dev/null
cp build-cuda/src/libanvil.a build-cuda/src/runtime/libanvil_runtime.a /tmp/b/lib/
for l in $(ldd build-cuda/src/shared/libanvil*.so | awk '$3 ~ /^\// {print $1 "=" $3}'); do
  n=${l%%=*}; p=${l#*=}
  case $n in libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libcuda.so*|libcudart*|libcublas*|libcusolver*|libcusparse*|libnvJitLink*|libcudnn*) continue;; esac
  [[ -f /tmp/b/lib/$n ]] || cp -L "$p" /tmp/b/lib/$n
done
for n in libpcre2-8.so.0 libutf8proc.so.2 libpng16.so.16; do
  p=$(ldconfig -p | awk -v n=$n '$1==n {print $NF; exit}'); [[ -n $p && ! -f /tmp/b/lib/$n ]] && cp -L $p /tmp/b/lib/$n || true
done
du -sh /tmp/b; ls -la /tmp/b/lib | awk '{print $5, $9}' | sort -n | tail -8
tar -C /tmp -cf - b | xz -T1 --lzma2=preset=6,dict=256MiB > gpu-carry/b.tar.xz  # one window over the three copies of the CUDA code
mkdir -p gpu-carry/whl
ls gpu-carry/whl/nanobind-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps --only-binary=:all: nanobind==3.1.0 -d gpu-carry/whl
du -sh gpu-carry/b.tar.xz gpu-carry/whl
