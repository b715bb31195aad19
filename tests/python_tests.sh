#!/usr/bin/env bash
# python_tests.sh LIBZOFFLOAD SOURCE_DIR [TEST_FILE] - the Python package's tests (python/tests, pytest) against the
# library just built, with Debian's torch (/usr/bin/python3; $ZO_PYTHON names another interpreter), then the CPUAdam benchmark at a small size as a smoke
# run (it reports its ratio; speed is judged at 100M parameters by hand, not here); with TEST_FILE (relative to
# python/tests), that file alone and no benchmark. Exit 77 without torch or pytest.
# The interpreter starts as a user's would, without extra static TLS, so the pinned pool runs without jemalloc
# (zoffload/pinned.h); test_initialize.py's allocator test runs the other two ways in subprocesses.
set -u
lib=$1 src=$2
py=${ZO_PYTHON:-/usr/bin/python3}
"$py" -c "import torch, pytest" 2>/dev/null || { echo "skip: $py lacks torch or pytest"; exit 77; }
unset GLIBC_TUNABLES LD_PRELOAD
export ZOFFLOAD_LIBRARY=$lib PYTHONPATH=$src/python
if [ $# -ge 3 ]; then
  cd "${TMPDIR:-/tmp}" || exit 1
  exec "$py" -m pytest -q -p no:cacheprovider "$src/python/tests/$3"
fi
skip=(--ignore="$src/python/tests/test_cuda.py")
# with Debian's torch, test_logging.py and test_tools_cmd.py have ctests of their own (python_logging,
# python_tools_cmd): not run twice; another interpreter ($ZO_PYTHON: python_package_torch2) runs them here
[ -z "${ZO_PYTHON:-}" ] && skip+=(--ignore="$src/python/tests/test_logging.py" --ignore="$src/python/tests/test_tools_cmd.py")
"$py" -m pytest -q -p no:cacheprovider "${skip[@]}" "$src/python/tests" || exit 1
"$py" "$src/python/benchmarks/cpu_adam_bench.py" --params 4e6 --steps 3 || exit 1
