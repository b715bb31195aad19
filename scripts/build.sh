#!/usr/bin/env bash
# build.sh - configure and build zoffload into ./build (Release). Extra args go to cmake.
# With ZO_DEBS=DIR the libraries come from carried .deb files (see scripts/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
if [ -n "${ZO_DEBS:-}" ]; then . "${ZO_DEPS_PREFIX:-build/deps}/env.sh"; fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
