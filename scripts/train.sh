#!/usr/bin/env bash
# train.sh - the main job: build, then train the default GPT on Debian's fortunes
# with the default config (optimizer state offloaded to pinned host memory).
# Extra arguments go to zo-train (see build/tools/zo-train --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec build/tools/zo-train --config configs/default.json "$@"
