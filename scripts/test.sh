#!/usr/bin/env bash
# test.sh - build, then run the whole test suite with ctest. Extra arguments go
# to ctest, e.g. `-L unit`, `-LE slow`, `-R swap`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
