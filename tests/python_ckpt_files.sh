#!/usr/bin/env bash
# python_ckpt_files.sh LIBZOFFLOAD SOURCE_DIR - python/tests/test_ckpt_files.py alone (the Python front's temporary
# files and save_checkpoint()'s root lock), with Debian's torch (/usr/bin/python3) against the library just built,
# as python_tests.sh runs the whole package. Exit 77 without torch or pytest.
set -u
lib=$1 src=$2
py=/usr/bin/python3
"$py" -c "import torch, pytest" 2>/dev/null || { echo "skip: /usr/bin/python3 lacks torch or pytest"; exit 77; }
unset GLIBC_TUNABLES LD_PRELOAD
export ZOFFLOAD_LIBRARY=$lib PYTHONPATH=$src/python
cd "${TMPDIR:-/tmp}" || exit 1
exec "$py" -m pytest -q -p no:cacheprovider "$src/python/tests/test_ckpt_files.py"
