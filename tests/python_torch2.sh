#!/usr/bin/env bash
# python_torch2.sh LIBZOFFLOAD SOURCE_DIR - the Python package's tests (python_tests.sh) under the registry's torch
# 2.x: the venv that scripts/torch2-env.sh made, named by $ZO_TORCH2_VENV. Exit 77 (skip) when it is not set or
# holds no python: the default test command downloads nothing.
set -u
venv=${ZO_TORCH2_VENV:-}
[ -n "$venv" ] || { echo "skip: ZO_TORCH2_VENV is not set (scripts/torch2-env.sh DIR makes the venv)"; exit 77; }
[ -x "$venv/bin/python" ] || { echo "skip: ZO_TORCH2_VENV=$venv has no bin/python"; exit 77; }
"$venv/bin/python" -c 'import torch; print("torch", torch.__version__, "from", torch.__file__)'
ZO_PYTHON=$venv/bin/python exec bash "$(dirname "$0")/python_tests.sh" "$@"
