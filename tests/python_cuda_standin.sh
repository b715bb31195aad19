#!/usr/bin/env bash
# python_cuda_standin.sh LIBZOFFLOAD SOURCE_DIR - python/tests/test_cuda_standin.py: the parts of the Python front's
# CUDA placement that run without torch.cuda, against the stand-in libcudart (ctest sets LD_LIBRARY_PATH to it and
# FAKE_CUDA_DEVICES=2). Debian's torch (/usr/bin/python3) is CPU-only, so CUDA models themselves cannot run here:
# python_cuda.sh runs them on a GPU. Exit 77 without torch or pytest.
set -u
lib=$1 src=$2
py=/usr/bin/python3
"$py" -c "import torch, pytest" 2>/dev/null || { echo "skip: /usr/bin/python3 lacks torch or pytest"; exit 77; }
export ZOFFLOAD_LIBRARY=$lib PYTHONPATH=$src/python
"$py" -m pytest -q -rs -p no:cacheprovider "$src/python/tests/test_cuda_standin.py"
