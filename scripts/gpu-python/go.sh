#!/usr/bin/env bash
# On the GPU machine, from the repo root: python package built against the bundle, pytest, the
# CUDA tests of issue 20 and the linalg benches beside torch.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
tar -C /tmp -xJf gpu-carry/b.tar.xz
CUDNN=$(python3 -c "import nvidia.cudnn;print(list(nvidia.cudnn.__path__)[0])")/lib
export LD_LIBRARY_PATH=/tmp/b/lib:$CUDNN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import sysconfig,os;i=sysconfig.get_paths()['include'];print(i, os.path.exists(i+'/Python.h'))"
python3 -c "import pytest" 2>/dev/null && rm -f gpu-carry/whl/{pytest,iniconfig,pluggy,packaging}-*; python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site gpu-carry/whl/*.whl
export PYTHONPATH=/tmp/site
t0=$(date +%s)
(cmake -S gpu-carry/pyext -B /tmp/pyb -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUNDLE=/tmp/b \
   -DPython_EXECUTABLE=$(command -v python3) > $OUT/pyext.log 2>&1 && ninja -C /tmp/pyb >> $OUT/pyext.log 2>&1) \
  || { echo "pyext build failed"; tail -40 $OUT/pyext.log; }
echo "pyext build $(( $(date +%s) - t0 )) s"
export PYTHONPATH=/tmp/pyb/python:/tmp/site
python3 -c "import anvil; print(anvil.__version__, anvil.cuda.is_available(), anvil.cuda.device_count())"
timeout 300 python3 -m pytest -q -p no:cacheprovider -rs python/tests > $OUT/pytest.log 2>&1; echo "pytest rc $?"
tail -25 $OUT/pytest.log
timeout 60 python3 python/bench/overhead.py --device cuda 2>&1 | tail -5
if [[ "${GO20:-1}" == 1 ]]; then
  timeout 200 /tmp/b/run.sh anvil_tests --gtest_filter='Dev/Elementwise*.*/cuda:Dev/Index.*/cuda:Dev/Linalg*.*/cuda:LinalgGraph.*:Dev/Models.*/cuda:ModelsCuda.*:Dev/Vae.*/cuda:-*TiledVideoDecodeMemoryStable*' > $OUT/cuda-tests.log 2>&1
  echo "cuda tests rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" $OUT/cuda-tests.log | head -20
  if [[ "${BENCH:-0}" == 1 ]]; then
  timeout 200 /tmp/b/run.sh anvil bench-ops --device cuda --filter linalg --json $OUT/bench.json > $OUT/bench.log 2>&1
  timeout 120 python3 /tmp/b/scripts/torch_bench_ops.py $OUT/bench.json > $OUT/torch.log 2>&1; tail -40 $OUT/torch.log
  fi
fi
