#!/usr/bin/env bash
# gpu.sh [NVME_DIR] - the GPU checks, on a machine with an NVIDIA GPU and the CUDA toolkit:
# installs missing Debian packages and builds (as scripts/build.sh), runs the GPU test suite
# (ctest -L gpu: device conformance on CUDA), then the GPU benchmarks, each against a limit
# measured in the same run, writing their JSON under gpu-results/ (or $ZO_GPU_OUT):
#   zo-report      the GPU, its PCIe link and NUMA node, pinned registration
#   zo-stepbench   params and optimizer state on cpu: link GB/s against the in-run pinned-copy
#                  limit, and overlap efficiency, with compute per layer above the transfer time
#   zo-swapbench   NVMe -> pinned -> GPU reads against min(disk, H2D) limits
#   zo-arenabench  compaction cost per GB moved against a plain D2D copy loop, and the CUDA
#                  virtual-memory remap alternative
# NVME_DIR (default: a directory under build/) holds the swap and benchmark files.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
nvme=${1:-build/gpu-nvme}
out=${ZO_GPU_OUT:-gpu-results}
mkdir -p "$nvme" "$out"
set -x
build/tools/zo-report --path "$nvme" --json >"$out/report.json"
ctest --test-dir build -L gpu --output-on-failure
build/tools/zo-stepbench --device cuda --params 1G --layers 32 --offload-param cpu --offload-optimizer cpu \
  --compute-ms-per-layer 20 --steps 6 --nvme-path "$nvme" --device-limit 8G --json "$out/stepbench.json"
build/tools/zo-swapbench --device cuda --path "$nvme" --json "$out/swapbench.json"
build/tools/zo-arenabench --device cuda --json "$out/arenabench.json"
