#!/usr/bin/env bash
# deps.sh - install the Debian packages zoffload builds and runs with, when missing.
# Sourced by scripts/train.sh and scripts/test.sh; safe to run on its own.
set -euo pipefail
ZO_PACKAGES=(build-essential cmake pkg-config liburing-dev libhwloc-dev libjemalloc-dev
             libjansson-dev libopenblas-openmp-dev fortunes fio gnuplot-nox libisal-dev time python3)
missing=()
for p in "${ZO_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "zoffload: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "zoffload: missing packages; run as root:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
