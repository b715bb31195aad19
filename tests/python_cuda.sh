#!/usr/bin/env bash
# python_cuda.sh LIBZOFFLOAD SOURCE_DIR - the Python front on a GPU: python/tests/test_cuda.py (CUDA models
# through zoffload.initialize(device="cuda"), ordered against torch's streams), then the GPU training benchmark at
# a small size as a smoke run (it prints tokens/s and peak GPU memory against torch AdamW; judged by hand at
# GPT-2 small size). Exit 77 unless the interpreter's torch sees a CUDA device and libzoffload was built with
# CUDA and sees one too. The interpreter is $ZO_PYTHON, else /usr/bin/python3 (Debian's torch is CPU-only, so
# on a GPU machine point ZO_PYTHON at an interpreter with a CUDA torch). It needs no pytest: without one,
# test_cuda.py runs as a script (`python test_cuda.py`, its tests run by python/tests/plain_runner.py).
set -u
lib=$1 src=$2
py=${ZO_PYTHON:-/usr/bin/python3}
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null ||
  { echo "skip: $py has no torch that sees a CUDA device (set ZO_PYTHON to one that has)"; exit 77; }
export ZOFFLOAD_LIBRARY=$lib PYTHONPATH=$src/python
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # deterministic cuBLAS, for test_cuda.py's bit-for-bit comparisons
"$py" -c "import zoffload._lib as L, sys; sys.exit(0 if L.lib.zo_device_cuda_count() > 0 else 1)" ||
  { echo "skip: $lib sees no CUDA device (built without CUDA?)"; exit 77; }
if "$py" -c "import pytest" 2>/dev/null; then
  "$py" -m pytest -q -s -p no:cacheprovider "$src/python/tests/test_cuda.py" || exit 1
else # the same tests, run by python/tests/plain_runner.py
  echo "note: $py has no pytest: running test_cuda.py's tests with plain python (python/tests/plain_runner.py)"
  "$py" "$src/python/tests/test_cuda.py" || exit 1
fi
"$py" "$src/python/benchmarks/gpu_train_bench.py" --layers 2 --d-model 256 --heads 4 --vocab 256 --seq 128 \
  --batch 4 --steps 3 --warmup 1 || exit 1
