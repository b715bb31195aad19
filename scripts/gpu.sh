#!/usr/bin/env bash
# gpu.sh [STAGE...] - the GPU run, on a machine with an NVIDIA GPU, the CUDA toolkit and CMake.
# Installs missing Debian packages and builds (as scripts/build.sh); where the machine has no
# package registry, carry them: `bash scripts/deps.sh --download debs` on a machine with apt, copy
# the repository, then `ZO_DEBS=debs ./scripts/gpu.sh` (unpacked under build/deps, never into /).
# Stages (default: all, in this order), each writing under gpu-results/ (or $ZO_GPU_OUT):
#   tests     zo-report (the GPU, its bf16 peak, PCIe link, NUMA node) and ctest -L gpu: the CUDA
#             device conformance and the gradient check of every zo-train kernel against the CPU model
#   124m      GPT-2 124M-sized on the fortunes corpus, optimizer on cpu, then the same run with
#             everything on the GPU (--offload-optimizer none): loss, tokens/s and their ratio
#   10b       the 10B-sized preset (optimizer and bf16 state on cpu), 12 steps
#   infinity  the 10B ZeRO-Infinity preset (parameters on cpu, optimizer state on NVMe), 10 steps
#   largest   the largest model zo-train can train here with everything offloaded: --dry-run over
#             growing depths at d_model 4096 for each tier layout, then 3 steps of the largest that fits,
#             and the refusal of the next size (what limited it)
#   bench     zo-stepbench, zo-swapbench, zo-arenabench against limits measured in the same run
#   torch     the PyTorch front: Hugging Face's GPT2LMHeadModel (124M-sized, from a config) trained through
#             zoffload.initialize(device="cuda") with the optimizer on cpu, against torch.optim.AdamW on the GPU
#             in the same run: tokens/s and peak GPU memory of both (python/benchmarks/gpu_train_bench.py)
# The Python parts (ctest python_cuda in `tests`, and `torch`) need an interpreter whose torch sees the GPU:
# $ZO_PYTHON, else the first of python3 and /usr/bin/python3 that has one.
# A summary (tokens/s, MFU, peak device memory, per-step exposed times) ends the run and is
# written to gpu-results/summary.txt. $ZO_NVME (default build/gpu-nvme) holds swap files.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh || exit 1
[ -n "${ZO_DEBS:-}" ] && . build/deps/env.sh
corpus=${ZO_CORPUS:-/usr/share/games/fortunes}
nvme=${ZO_NVME:-build/gpu-nvme}
out=${ZO_GPU_OUT:-gpu-results}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(tests 124m 10b infinity largest bench torch)
if [ -z "${ZO_PYTHON:-}" ]; then
  for py in python3 /usr/bin/python3; do
    if "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
      export ZO_PYTHON=$py
      break
    fi
  done
fi
mkdir -p "$nvme" "$out"
zt=build/tools/zo-train
dev=${ZO_DEVICE:-cuda} # host: exercise this script on a machine without a GPU
status=0
want() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
# train NAME ARGS...: one zo-train run on the GPU, its log and JSON under $out
train() {
  local name=$1
  shift
  echo "== zo-train $name: $*"
  "$zt" --device "$dev" --data "$corpus" --nvme-path "$nvme" --no-sample --log-json "$out/$name.jsonl" "$@" 2>&1 |
    tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "FAILED: zo-train $name (exit $rc)"; status=1; }
}

if want tests; then
  build/tools/zo-report --path "$nvme" --json >"$out/report.json" || status=1
  ctest --test-dir build -L gpu --output-on-failure 2>&1 | tee "$out/ctest-gpu.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if want 124m; then
  train gpt2-124m-opt-cpu --config configs/gpt2-124m.json --steps 200
  train gpt2-124m-all-gpu --config configs/gpt2-124m.json --steps 200 --offload-optimizer none
fi
want 10b && train gpt-10b --config configs/gpt-10b.json --steps 12
want infinity && train gpt-10b-infinity --config configs/gpt-10b-infinity.json --steps 10
if want largest; then
  # tier layouts, most offloaded last: optimizer cpu; + parameters cpu; optimizer nvme + parameters cpu; all nvme
  best="" best_n=0 best_layout="" limit=""
  for layout in "cpu none" "cpu cpu" "nvme cpu" "nvme nvme"; do
    set -- $layout
    for L in 24 32 40 48 56 64 72 80 96 112 128 160 192; do
      cfg=$out/largest-L$L.json
      python3 - configs/gpt-10b-infinity.json "$cfg" "$L" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["model"]["n_layer"] = int(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"), indent=1)
EOF
      args=(--config "$cfg" --offload-optimizer "$1" --offload-param "$2")
      if "$zt" --device "$dev" --nvme-path "$nvme" --dry-run "${args[@]}" >"$out/largest.dry" 2>&1; then
        n=$(sed -n 's/.*: \([0-9]*\) parameters in.*/\1/p' "$out/largest.dry")
        if [ "$n" -gt "$best_n" ]; then best_n=$n best="${args[*]}" best_layout=$layout; fi
      else
        echo "largest: n_layer $L, optimizer $1, parameters $2 refused: $(grep 'error:' "$out/largest.dry")"
        [ "$layout" = "$best_layout" ] && limit="n_layer $L: $(grep 'error:' "$out/largest.dry")"
        break
      fi
    done
  done
  echo "largest that fits: $best_n parameters ($best); the next depth with that layout: ${limit:-not refused}" |
    tee "$out/largest.txt"
  # shellcheck disable=SC2086
  [ -n "$best" ] && train largest $best --steps 3
fi
if want bench; then
  build/tools/zo-stepbench --device cuda --params 1G --layers 32 --offload-param cpu --offload-optimizer cpu \
    --compute-ms-per-layer 20 --steps 6 --nvme-path "$nvme" --device-limit 8G --json "$out/stepbench.json" || status=1
  build/tools/zo-swapbench --device cuda --path "$nvme" --json "$out/swapbench.json" || status=1
  build/tools/zo-arenabench --device cuda --json "$out/arenabench.json" || status=1
fi
if want torch; then
  if [ -n "${ZO_PYTHON:-}" ]; then
    echo "== PyTorch front: $ZO_PYTHON python/benchmarks/gpu_train_bench.py"
    ZOFFLOAD_LIBRARY=build/libzoffload.so PYTHONPATH=python "$ZO_PYTHON" python/benchmarks/gpu_train_bench.py --layers 12 --d-model 768 --heads 12 --batch 8 --seq 512 \
      2>&1 | tee "$out/torch-gpt2.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  else
    echo "torch: no Python here has a torch that sees the GPU; set ZO_PYTHON" | tee "$out/torch-gpt2.log"
  fi
fi

# Summary of every zo-train run: medians over the steps after the first two (warm-up).
python3 - "$out" <<'EOF' | tee "$out/summary.txt"
import glob, json, os, statistics as st, sys
out = sys.argv[1]
runs = {}
for f in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
    rows = [json.loads(l) for l in open(f) if l.strip()]
    rows = [r for r in rows if "tokens_per_s" in r]
    if not rows:
        continue
    name = os.path.basename(f)[:-6]
    w = rows[2:] or rows
    med = lambda k: st.median(r[k] for r in w if r.get(k) is not None) if any(r.get(k) is not None for r in w) else float("nan")
    runs[name] = med("tokens_per_s")
    print(f"{name}: steps {rows[0]['step']}..{rows[-1]['step']} | loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f} | "
          f"{med('tokens_per_s'):.0f} tok/s | {med('model_tflops'):.1f} TFLOP/s | MFU {100 * med('mfu'):.1f}% | "
          f"peak device {max(r['device_peak_bytes'] for r in rows) / 2**30:.2f} GiB | ms/step {med('step_ms'):.1f}: "
          f"fwd {med('forward_ms'):.1f} bwd {med('backward_ms'):.1f} exposed: fetch {med('fetch_wait_ms'):.1f} "
          f"optimizer {med('optimizer_ms'):.1f} (adam {med('adam_ms'):.1f}, swap {med('swap_wait_ms'):.1f})")
if "gpt2-124m-opt-cpu" in runs and "gpt2-124m-all-gpu" in runs:
    r = runs["gpt2-124m-opt-cpu"] / runs["gpt2-124m-all-gpu"]
    print(f"gpt2-124m: optimizer on cpu / everything on the GPU = {r:.3f} tokens/s (limit 0.9): {'PASS' if r >= 0.9 else 'FAIL'}")
EOF
exit $status
