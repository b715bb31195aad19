#!/usr/bin/env bash
# gpu.sh [--dry] [--all] [--list] [--only STAGE,...] [STAGE...] - the one prepared, bounded check for a machine
# with an NVIDIA GPU (H100/H200, 16 cores, the CUDA toolkit with compute-sanitizer, CMake, ninja, a python3 whose
# torch sees the GPU). It measures how far the GPU runs are from the machine's limit, not just PASS. Each stage is
# cut off at its bound (`timeout`), and the whole run stops starting stages after $ZO_GPU_BUDGET_S (default 480 s:
# the default group's bounds add up to it), so `timeout 510 ./scripts/gpu.sh` always ends with the report printed.
#
# The Debian libraries come as .deb files: `bash scripts/deps.sh --download debs` on a machine with apt, the
# repository with debs/ copied over, then on the GPU machine:
#     ZO_DEBS=debs timeout 510 ./scripts/gpu.sh
# (unpacked with `dpkg -x` under build/deps, no root; see docs/gpu-check.md). Without ZO_DEBS the build runs
# scripts/deps.sh as the other scripts do (installs missing packages as root). A wheel built here (`pip wheel .`)
# and carried as $ZO_WHEEL is what the wheel_cuda stage installs.
#
# Stages, in order of value; `--only a,b` or STAGE arguments pick some, `--all` adds the second group to the default
# one (a run without `build` reuses $ZO_BUILD as it is); `--list` prints each stage's group and bound. Bound in
# seconds, the wall seen on an H200 (2026-11-27, docs/gpu-runs/; - not run there yet), then what it does. A GPU is
# lent for 15 minutes in all, its start-up included: the default group's bounds add up to 480 s (8 minutes); the
# second group (about 305 s more: gpt_10b_infinity, and what ran and passed there at e673e66 or needs two GPUs) is for a rerun or a longer
# lease.
#   build                115   16  deps (unpack ZO_DEBS), cmake -G Ninja into $ZO_BUILD (build-gpu) for this GPU's
#                                  architecture (ZO_CUDA_ARCHS, else nvidia-smi's compute capability), ninja -j16
#   perf_124m             25    -  gpt2-124m all on the GPU at micro-batch 32, 12 steps: median tokens/s and MFU after
#                                  2 warm-up steps, and zo-train's "kernels:" line (per-step GEMM, attention and other
#                                  kernel time from CUDA events; n/a where zo-train prints none); with each kernel set
#                                  where zo-train has --cuda-kernels (baseline, fused), their speed-up
#   cuda_vs_host          45   23  a small config trained 30 steps with --device cuda and with --device host: losses
#                                  within the bf16 tolerance, the loss falling; then each tier on cuda (optimizer cpu,
#                                  optimizer nvme, parameters nvme) 4 steps, resumed from step 2: bit for bit; with
#                                  each kernel set where zo-train has --cuda-kernels
#   ctest_gpu             10    5  ctest -L gpu, less the tests that have a stage of their own: CUDA device
#                                  conformance, every zo-train kernel against the CPU model's gradients
#   machine_rates         15    -  the rates the limit ratios divide by, on this machine: zo-adambench (the presets'
#                                  Adam variants, 2^26 elements, every core) and zo-swapbench at $ZO_NVME (the presets'
#                                  aio block size and queue depth, zoffload's engine, read and write)
#   gpt_10b               75   91  configs/gpt-10b.json with the optimizer on cpu, $ZO_GPU_10B_STEPS (6) steps: loss,
#                                  tokens/s, zo-train's per-step breakdown (compute, exposed fetch, Adam, swap) and
#                                  the limit ratio (scripts/limit_ratio.py: the step's lower bound, max of compute at
#                                  50% of the GPU's peak, PCIe at the rate measured in the run, Adam at zo-adambench's
#                                  rate, NVMe at zo-swapbench's, over the measured step; target >= 0.8)
#   gpt_10b_nvme          85  119  the same, the preset as it is (optimizer nvme, placement auto; target >= 0.6)
#   gpt_10b_infinity      70    -  configs/gpt-10b-infinity.json (stage 3, parameters on NVMe, optimizer cpu),
#                                  $ZO_GPU_INF_STEPS (4) steps: the same figures
#   python_cuda           65   56  ctest -R python_cuda: the Python front's CUDA path, ordered against torch's streams
#                                  ($ZO_PYTHON, else the first of python3, /usr/bin/python3 whose torch sees the GPU)
#   sanitizer_memcheck    30   24  the gpu-labelled C test programs once under compute-sanitizer --tool memcheck
#                                  (API errors not reported: the tests provoke some on purpose and check each)
#   nccl_1rank             5    2  ctest -R test_comm_nccl: the nccl backend on one rank (libnccl opened at the first
#                                  communicator)
#   arena_gpu             10    -  zo-arenabench --device cuda: the defragmenting arena's compactions against a plain
#                                  device-to-device copy loop and CUDA virtual-memory remapping, and one step's
#                                  allocations on the arena against cuMemAlloc/cuMemFree and CUDA's caching pool
# The second group (--all, or by name):
#   sanitizer_racecheck   40   32  ... --tool racecheck over every kernel, the model's GEMMs by a plain kernel of
#                                  ours instead of cuBLAS (ZO_GPT_CUDA_GEMM=reference; see do_sanitizer)
#   sanitizer_synccheck   10    4  ... --tool synccheck, our own kernels
#   torch_nccl            15    -  python/tests/test_import_order.py under the GPU machine's CUDA torch (its own,
#                                  newer NCCL): zoffload and torch imported in either order (without pytest, its
#                                  three checks inline)
#   wheel_cuda            25    -  the carried wheel ($ZO_WHEEL) installed into a venv of $ZO_PYTHON: its library on
#                                  the GPU (scripts/wheel_cuda_smoke.py, outside the checkout); SKIP without a wheel
#   onednn_bf16           15    -  ctest test_gemm_bf16 and zo_train_gemm_bf16: the CPU model's bf16 products through
#                                  the oneDNN of the carried .debs
#   ratio_124m            20   14  gpt2-124m 20 steps all on the GPU, with the optimizer on cpu, and on cpu with
#                                  ZeRO-Offload's delayed parameter update: median per-step tokens/s after 2 warm-up
#                                  steps; PASS when the DPU run reaches 0.9 of all-on-the-GPU
#   adam_device            5    1  ctest -R test_adam_device: device Adam against CPU Adam
#   ranks_1gpu            45    -  two ranks on the one GPU through the mpi backend (host collectives; NCCL refuses
#                                  two ranks on one device): configs/default.json at stages 1, 2, 3 (parameters on
#                                  cpu) and 3d (stage 3, parameters partitioned in device memory), 8 sequences a
#                                  rank against one rank with two micro-batches of 8: every
#                                  loss within cuda_vs_host's 2%; the figures: the largest difference, bit equality
#   nccl_ranks            60    -  two or more GPUs: ctest test_comm_nccl_np2 and ranks_1gpu's stages 2 and 3d over
#                                  nccl on two GPUs; SKIP with the reason on one GPU (the several-rank NCCL paths
#                                  then ran only on the stand-in, ctest nccl_fake_np2/np3)
# A measuring stage PASSes when it ran and its figures could be computed; its target (MFU, limit ratio) is stated
# beside them, met or not. Every stage appends one line to $ZO_GPU_OUT/report.txt (default gpu-results/) as soon as
# it ends:
#   STAGE RESULT WALL_s FIGURES      RESULT: PASS, FAIL, SKIP (could not run here: no GPU, no tool) or TIMEOUT
# (cut off at its bound, or not started because the run's budget was spent), so a run cut off from outside still
# tells what passed. Logs beside it, one per stage (and one per zo-train run, NAME.out, with its NAME.jsonl). The
# report is printed at the end; exit 0 when no stage FAILed or TIMEd OUT.
#
# --dry (or ZO_DEVICE=host): the plumbing on a machine without a GPU, in seconds: build is `cmake --build -n` of an
# existing $ZO_BUILD (nothing is built), the zo-train stages run configs/default.json for 3 or 4 steps on the host
# device, the benchmarks their --quick sizes, each stage has three times its bound, and every stage that needs a GPU
# reports SKIP whatever its stand-in did (ctests gpu_sh_plumbing, gpu_sh_kernel_sets). Knobs: ZO_GPU_BOUND_<stage>=S overrides one bound; ZO_GPU_HANG=<stage> replaces that
# stage's command with a sleep (a test of the cut-off); ZO_NVME (default $ZO_BUILD/gpu-nvme) holds swap files;
# ZO_CORPUS the corpus; ZO_GPU_10B_STEPS, ZO_GPU_INF_STEPS the 10B runs' steps.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
self=$PWD/scripts/gpu.sh
# `gpu.sh --stage-cmd FN ARGS...` is this script calling itself under `timeout` (which runs programs, not shell
# functions): FN with the run's settings from the environment, and nothing else.
inner=0
[ "${1:-}" = "--stage-cmd" ] && { inner=1; shift; }
dry=${ZO_GPU_DRY:-0}
# the default group (its bounds add up to the default budget) and the second, each in order of value
ALL=(build perf_124m cuda_vs_host ctest_gpu machine_rates gpt_10b gpt_10b_nvme python_cuda sanitizer_memcheck
     nccl_1rank arena_gpu)
MORE=(gpt_10b_infinity sanitizer_racecheck sanitizer_synccheck torch_nccl wheel_cuda onednn_bf16 ratio_124m
      adam_device ranks_1gpu nccl_ranks)
# build: 15 s on the H200 machine before the fused kernels; cuDNN's attention through cudnn-frontend is one heavy
# translation unit (about 5 minutes on 2 busy cores here), so its bound is a guess until a GPU run times it
declare -A BOUND=([build]=115 [perf_124m]=25 [cuda_vs_host]=45 [ctest_gpu]=10 [machine_rates]=15 [gpt_10b]=75
                  [gpt_10b_nvme]=85 [gpt_10b_infinity]=70 [python_cuda]=65 [sanitizer_memcheck]=30 [nccl_1rank]=5
                  [arena_gpu]=10
                  [sanitizer_racecheck]=40 [sanitizer_synccheck]=10 [torch_nccl]=15 [wheel_cuda]=25
                  [onednn_bf16]=15 [ratio_124m]=20 [adam_device]=5 [ranks_1gpu]=45 [nccl_ranks]=60)
budget=${ZO_GPU_BUDGET_S:-480}
bd=${ZO_BUILD:-build-gpu}
out=${ZO_GPU_OUT:-gpu-results}
nvme=${ZO_NVME:-$bd/gpu-nvme}
jobs=${ZO_JOBS:-16}
gpu=${ZO_GPU_HAVE:-0}
if [ $inner -eq 0 ]; then
  stages=()
  while [ $# -gt 0 ]; do
    case $1 in
      --dry) dry=1 ;;
      --all) stages+=("${ALL[@]}" "${MORE[@]}") ;;
      --list) # the stages, their group and bound, and the default group's sum against the budget
        sum=0
        for s in "${ALL[@]}"; do echo "$s default ${BOUND[$s]}"; sum=$((sum + BOUND[$s])); done
        for s in "${MORE[@]}"; do echo "$s more ${BOUND[$s]}"; done
        echo "default group: ${sum} s of bounds; budget ${budget} s"
        exit 0 ;;
      --only) [ $# -ge 2 ] || { echo "gpu.sh: --only needs STAGE[,STAGE...]" >&2; exit 2; }
              IFS=, read -r -a more <<<"$2"; stages+=("${more[@]}"); shift ;;
      --only=*) IFS=, read -r -a more <<<"${1#--only=}"; stages+=("${more[@]}") ;;
      -h | --help) sed -n '2,/^set -uo/p' "$self" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      -*) echo "gpu.sh: unknown option '$1' (--dry, --all, --list, --only STAGE,...)" >&2; exit 2 ;;
      *) stages+=("$1") ;;
    esac
    shift
  done
  [ ${#stages[@]} -eq 0 ] && stages=("${ALL[@]}")
  for s in "${stages[@]}"; do
    [ -n "${BOUND[$s]+set}" ] || { echo "gpu.sh: unknown stage '$s' (stages: ${ALL[*]} ${MORE[*]})" >&2; exit 2; }
  done
fi
[ "${ZO_DEVICE:-}" = host ] && dry=1
report=$out/report.txt
start=$SECONDS
status=0

# record STAGE RESULT WALL FIGURES: one report line, written at once
record() {
  printf '%-20s %-7s %6ss  %s\n' "$1" "$2" "$3" "$4" | tee -a "$report"
  case $2 in FAIL | TIMEOUT) status=1 ;; esac
}
# bounded SECONDS: the stage's bound, or what is left of the run's budget when that is less (0: none left)
# (--dry: three times the bound, the stand-ins running on whatever machine this is)
bounded() {
  local b=${BOUND[$1]} left=$((budget - (SECONDS - start)))
  local o="ZO_GPU_BOUND_$1"
  [ $dry -eq 1 ] && b=$((b * 3))
  [ -n "${!o:-}" ] && b=${!o}
  [ "$left" -lt "$b" ] && b=$left
  [ "$b" -lt 1 ] && b=0
  echo "$b"
}
# stage NAME NEEDS_GPU FIGURES_FN CMD...: CMD under `timeout`, its output in $out/NAME.log; FIGURES_FN (or -) prints
# the figures from the log. A stage that needs a GPU reports SKIP without one, whatever its stand-in did.
stage() {
  local name=$1 needs_gpu=$2 fig=$3
  shift 3
  local want=0 s
  for s in "${stages[@]}"; do [ "$s" = "$name" ] && want=1; done
  [ $want -eq 1 ] || return 0
  local b
  b=$(bounded "$name")
  if [ "$b" -eq 0 ]; then
    record "$name" TIMEOUT 0 "not started: the run's ${budget} s budget is spent"
    return 0
  fi
  echo "== $name (bound ${b} s): $*"
  local t0=$SECONDS
  if [ "${ZO_GPU_HANG:-}" = "$name" ]; then set -- sleep 3600; else set -- bash "$self" --stage-cmd "$@"; fi
  timeout -k 5 "$b" "$@" >"$out/$name.log" 2>&1
  local rc=$? wall=$((SECONDS - t0))
  local figures=""
  [ "$fig" != - ] && figures=$("$fig" "$out/$name.log" 2>/dev/null | tr '\n' ' ')
  tail -n 5 "$out/$name.log" | sed 's/^/   /'
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record "$name" TIMEOUT "$wall" "cut off at ${b} s; ${figures}log $out/$name.log"
  elif [ "$needs_gpu" = gpu ] && [ $gpu -eq 0 ]; then
    record "$name" SKIP "$wall" "no GPU here (stand-in exit $rc) ${figures}"
  elif [ $rc -eq 77 ]; then
    record "$name" SKIP "$wall" "${figures}$(grep -m1 -i 'skip' "$out/$name.log")"
  elif [ $rc -eq 0 ]; then
    record "$name" PASS "$wall" "$figures"
  else
    record "$name" FAIL "$wall" "exit $rc; ${figures}log $out/$name.log"
  fi
}

# ---------------------------------------------------------------- the stages' commands (run under `timeout`)
do_build() {
  if [ $dry -eq 1 ]; then
    [ -f "$bd/CMakeCache.txt" ] || { echo "--dry: no configured build in $bd (set ZO_BUILD)"; return 1; }
    cmake --build "$bd" -- -n >/dev/null && echo "--dry: $bd configured; cmake --build -n lists its steps"
    return
  fi
  if [ -n "${ZO_DEBS:-}" ]; then
    bash scripts/deps.sh || return 1 # unpacks ZO_DEBS under build/deps (no root), writes build/deps/env.sh
    . "${ZO_DEPS_PREFIX:-build/deps}/env.sh"
  else
    bash scripts/deps.sh || return 1
  fi
  local gen=() arch=${ZO_CUDA_ARCHS:-}
  command -v ninja >/dev/null && [ ! -f "$bd/Makefile" ] && gen=(-G Ninja)
  # this GPU's architecture only (compute capability 9.0 -> 90): half the nvcc work of the default "80;90"
  [ -z "$arch" ] && arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  case $arch in '' | *[!0-9\;]*) arch="80;90" ;; esac
  # -Werror for CUDA depends on the host compiler: the ctest cuda_werror_sources checks it where the project is
  # built every day; a warning of this image's compiler must not cost the GPU run
  cmake -S . -B "$bd" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DZO_CUDA_WERROR=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" || return 1
  cmake --build "$bd" -j"$jobs"
}
fig_build() {
  grep -m1 -o 'zoffload: CUDA kernels .*' "$1"
  grep -m1 -o 'zoffload: NCCL not found' "$1"
  grep -c -E '^\[[0-9]+/[0-9]+\]|Building' "$1" | sed 's/$/ build steps/'
}
# the tests with a stage of their own are not run twice
do_ctest_gpu() {
  # a build that found cudnn-frontend (carried by deps.sh) must run the fused set's attention on cuDNN
  local req=0
  grep -qE '^ZO_CUDNN_FE_DIR:PATH=/' "$bd/CMakeCache.txt" 2>/dev/null && req=1
  ZO_TEST_REQUIRE_CUDNN=$req ctest --test-dir "$bd" -L gpu -E '^(python_cuda|test_adam_device|test_comm_nccl)$' -V \
    --timeout 55
}
fig_ctest() {
  python3 - "$1" <<'EOF'
import re, sys
t = open(sys.argv[1], errors="replace").read()
if "No tests were found" in t:
    print("no such test in this build;")
    sys.exit()
# "100% tests passed, 0 tests failed out of 5" or, by CMake version, "100% tests passed out of 5"
m = re.findall(r"\d+% tests passed(?:, (\d+) tests? failed)? out of (\d+)", t)
if not m and re.search(r"^skip: ", t, re.M):
    sys.exit()  # the stage skipped before ctest (it says why)
bad = re.findall(r"^\s*\d+ - (\S+) \((Failed|Timeout|Not Run|SEGFAULT|Exception)[^)]*\)", t, re.M)
skip = re.findall(r"^\s*\d+ - (\S+) \(Skipped\)", t, re.M)
s = f"ctest: {m[-1][1]} tests, {m[-1][0] or 0} failed" if m else "ctest: no summary"
s += "".join(f", {n} ({w})" for n, w in bad) + (f", skipped: {' '.join(skip)}" if skip else "")
print(s + ";")
EOF
}
# The C test programs labelled gpu (not Python, not mpirun), as ctest would run them; not test_comm_nccl in a build
# without NCCL (it fails there, "built without NCCL", and ctest counts that a skip: tests/CMakeLists.txt).
gpu_test_cmds() {
  local ex='python|np[0-9]'
  grep -q '^ZO_BUILT_WITH_NCCL:INTERNAL=0' "$bd/CMakeCache.txt" 2>/dev/null && ex="$ex|^test_comm_nccl\$"
  ctest --test-dir "$bd" -L gpu -E "$ex" --show-only=json-v1 2>/dev/null | python3 -c '
import json, shlex, sys
for t in json.load(sys.stdin).get("tests", []):
    if t.get("command"): print(" ".join(shlex.quote(a) for a in t["command"]))'
}
# The kernels of this tree (every `__global__ void NAME` of gpu/ and tools/), as one regular expression
own_kernels_regex() {
  grep -ho '__global__ void [A-Za-z_0-9]*' gpu/*.cu tools/*/*.cu 2>/dev/null | awk '{print $3}' | sort -u | paste -sd'|'
}
# The tools' options: memcheck reports no API errors (--report-api-errors no): the tests provoke some on purpose
# (test_device's whole-GPU cudaMalloc, a copy from a pointer that is not device memory) and check each return code
# themselves, and NCCL probes its kernels with cudaFuncGetAttributes at start-up; a memory error in a kernel is
# still reported. racecheck and synccheck look at shared memory and barriers, in our own kernels only, and only in
# the programs that launch them (not test_comm: its kernels are NCCL's). synccheck: --kernel-name regex=... (matched
# in the mangled names). racecheck: with that filter the sanitizer failed internally on an H200 (below), and over
# every kernel cuBLAS's GEMMs took test_gpt_cuda past 90 s; so it runs with ZO_GPT_CUDA_GEMM=reference, which makes
# every GEMM of the model a plain kernel of ours (models/gpt_cuda.h): no cuBLAS kernel runs, and every
# kernel is checked.
do_sanitizer() {
  local tool=$1 n=0 bad=0 skipped=0 cmd opts=()
  local cs nv
  nv=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$bd/CMakeCache.txt" 2>/dev/null)
  for cs in "$(command -v compute-sanitizer)" "${nv:+$(dirname "$nv")/compute-sanitizer}" \
            /usr/local/cuda/bin/compute-sanitizer ""; do [ -n "$cs" ] && [ -x "$cs" ] && break; done
  [ -n "$cs" ] || { echo "skip: no compute-sanitizer (PATH, beside nvcc, /usr/local/cuda/bin)"; return 77; }
  "$cs" --version 2>&1 | tail -1
  local envs=()
  case $tool in
    memcheck) opts=(--report-api-errors no) ;;
    racecheck) envs=(ZO_GPT_CUDA_GEMM=reference) ;;
    *) local re
       re=$(own_kernels_regex)
       [ -n "$re" ] || { echo "no __global__ kernels found in gpu/ and tools/"; return 1; }
       opts=(--kernel-name "regex=$re") ;;
  esac
  while read -r cmd; do
    [ "$tool" != memcheck ] && [[ "$cmd" == */test_comm\ * ]] && continue
    n=$((n + 1))
    echo "-- ${envs[*]:+${envs[*]} }compute-sanitizer --tool $tool ${opts[*]} $cmd"
    local t0=$SECONDS
    eval "set -- $cmd" # the command as ctest gives it, each argument shell-quoted
    # On an H200 (compute-sanitizer 2025.3.1) racecheck with the kernel filter stopped test_gpt_cuda at its first
    # forward: "Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception", then an illegal
    # address reported at the launch after cuBLAS's first GEMM (which the filter leaves unchecked); memcheck over
    # every kernel found nothing there. Hence racecheck's environment above.
    env "${envs[@]}" "$cs" --tool "$tool" "${opts[@]}" --error-exitcode 86 --print-limit 20 "$@"
    local rc=$?
    echo "-- exit $rc after $((SECONDS - t0)) s"
    case $rc in 0) ;; 77) skipped=$((skipped + 1)) ;; *) bad=$((bad + 1)) ;; esac
  done < <(gpu_test_cmds)
  echo "sanitizer $tool: $n programs, $skipped skipped (77), $bad failed"
  [ $n -gt 0 ] && [ $bad -eq 0 ]
}
fig_sanitizer() { grep -E '^sanitizer |ERROR SUMMARY: [1-9]' "$1" | sort | uniq -c | sed 's/^ *1 //; s/^ *//' | head -4; }
do_adam_device() { ctest --test-dir "$bd" -R '^test_adam_device$' --no-tests=error -V --timeout 18; }
# zo-train NAME ARGS...: one run, its JSON lines in $out/NAME.jsonl
zt() {
  local name=$1
  shift
  echo "-- zo-train $name: $*"
  "$bd/tools/zo-train" --data "${ZO_CORPUS:-/usr/share/games/fortunes}" --nvme-path "$nvme" --no-sample \
    --log-json "$out/$name.jsonl" "$@" 2>&1 | tee "$out/$name.out"
}
# The CUDA kernel sets to run: "baseline fused" where zo-train's --help lists --cuda-kernels, else "-" (the one set
# it has; no flag). kset_flags SET: the flag for SET, as words.
kernel_sets() {
  # the whole --help first: grep -q would stop reading at the match and, under pipefail, zo-train's SIGPIPE would
  # read as "no such flag"
  local help
  help=$("$bd/tools/zo-train" --help 2>/dev/null)
  case $help in *--cuda-kernels*) echo "baseline fused" ;; *) echo "-" ;; esac
}
kset_flags() { [ "$1" = - ] || echo "--cuda-kernels $1"; }
# kset_name BASE SET: a run's name, BASE alone for the one set
kset_name() { if [ "$2" = - ]; then echo "$1"; else echo "$1-$2"; fi; }
# derive SRC DST PATH=JSON...: DST is the config SRC with each dotted PATH set to the JSON value (e.g.
# steps_per_print=1, zoffload.delayed_param_update=true)
derive() {
  python3 - "$@" <<'EOF'
import json, sys
src, dst, sets = sys.argv[1], sys.argv[2], sys.argv[3:]
c = json.load(open(src))
for kv in sets:
    path, val = kv.split("=", 1)
    keys = path.split(".")
    d = c
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    d[keys[-1]] = json.loads(val)
json.dump(c, open(dst, "w"), indent=1)
EOF
}
# median per-step tokens/s of a run's JSON lines (steps_per_print 1) after 2 warm-up steps
tps() {
  python3 - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("tokens_per_s") is not None]
w = rows[2:] or rows
print(f"{statistics.median(r['tokens_per_s'] for r in w):.0f}" if w else "0")
EOF
}
# cuda_vs_host: is training on the GPU right? The same small config (configs/default.json: 4 layers, d_model 128,
# bf16 working weights, AdamW on cpu) for 30 steps on each device, from the same seed and batches. Tolerance: at
# every step |loss_cuda - loss_host| <= 0.02 loss_host. Both compute from the same bf16 weights, but the CUDA model
# rounds its activations and gradients to bf16 (8 significant bits, 0.4% per rounding; test_gpt_cuda sees 0.3% to
# 1.3% relative L2 error in one step's gradients) and the difference compounds through Adam over the steps. The
# loss must fall: step 30's cuda loss below 0.8 of step 1's (the host run goes 5.56 -> 3.36). Then each tier on
# cuda for 4 steps with a checkpoint every 2, and a second run resumed from step 2's checkpoint: steps 3 and 4's
# loss and gradient norm equal bit for bit (zo-train's CUDA kernels use fixed-order reductions, no atomics).
do_cuda_vs_host() {
  mkdir -p "$nvme" || return 1
  local cfg=$out/cuda_vs_host.json n=30 dev=cuda ks kf fail=0 summary=""
  [ $dry -eq 1 ] && n=3 dev=host
  derive configs/default.json "$cfg" steps_per_print=1 || return 1
  rm -f "$out"/cvh-*.jsonl
  zt cvh-host --config "$cfg" --steps $n --device host || return 1
  for ks in $(kernel_sets); do
    read -r -a kf <<<"$(kset_flags "$ks")"
    cvh_set "$cfg" $n $dev "$ks" "${kf[@]}" || { fail=1; summary="$summary ${ks/#-/the one set}"; }
  done
  [ $fail -eq 0 ] || { echo "cuda_vs_host: failed with kernels:$summary"; return 1; }
}
# cvh_set CFG N DEVICE SET FLAGS...: cuda_vs_host with one kernel set (SET "-": the only one, no flag): the N-step
# comparison against the host run, then each tier's resume
cvh_set() {
  local cfg=$1 n=$2 dev=$3 ks=$4
  shift 4
  local tag="" c t flags ck fail=0 summary=""
  [ "$ks" != - ] && tag=" [$ks]"
  c=$(kset_name cvh-cuda "$ks")
  zt "$c" --config "$cfg" --steps $n --device $dev "$@" || return 1
  python3 - "$out/cvh-host.jsonl" "$out/$c.jsonl" $n "$tag" <<'EOF' || return 1
import json, sys
h, c = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
n, tag = int(sys.argv[3]), sys.argv[4]
if len(h) != n or len(c) != n:
    sys.exit(f"cuda_vs_host{tag}: expected {n} logged steps, host logged {len(h)}, cuda {len(c)}")
rel = [abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(h, c)]
worst = max(range(n), key=lambda i: rel[i])
ok = rel[worst] <= 0.02
fall = c[-1]["loss"] < 0.8 * c[0]["loss"] if n >= 10 else True
print(f"cuda_vs_host{tag}: {n} steps, loss host {h[0]['loss']:.4f} -> {h[-1]['loss']:.4f}, cuda {c[0]['loss']:.4f} -> "
      f"{c[-1]['loss']:.4f}, max rel diff {rel[worst]:.2e} at step {worst + 1} (tolerance 2e-2)"
      + ("" if ok else " OVER") + ("" if fall else ", the cuda loss did not fall below 0.8 of step 1's"))
sys.exit(0 if ok and fall else 1)
EOF
  for t in opt_cpu opt_nvme param_nvme; do
    case $t in
      opt_cpu) flags=(--offload-optimizer cpu) ;;
      opt_nvme) flags=(--offload-optimizer nvme) ;;
      param_nvme) flags=(--offload-param nvme) ;;
    esac
    c=$(kset_name "cvh-$t" "$ks")
    ck=$nvme/$c-ck
    rm -rf "$ck"
    zt "$c" --config "$cfg" --steps 4 --device $dev "$@" "${flags[@]}" --save "$ck" --save-every 2 --keep-last 0 &&
      zt "$c-resumed" --config "$cfg" --steps 4 --device $dev "$@" "${flags[@]}" \
        --resume "$(ls -d "$ck"/step-* | sort | head -1)" &&
      python3 - "$out/$c.jsonl" "$out/$c-resumed.jsonl" "$t" "$tag" <<'EOF'
import json, sys
a, b = ({r["step"]: r for r in (json.loads(l) for l in open(p) if l.strip())} for p in sys.argv[1:3])
t, tag = sys.argv[3], sys.argv[4]
same = [s for s in (3, 4) if s in a and s in b and (a[s]["loss"], a[s]["grad_norm"]) == (b[s]["loss"], b[s]["grad_norm"])]
print(f"cuda_vs_host{tag}: tier {t}: 4 steps, loss {a[1]['loss']:.6f} -> {a[4]['loss']:.6f}; resumed from step 2: "
      f"steps 3, 4 " + ("equal bit for bit" if len(same) == 2 else
      f"DIFFER: step 4 loss {a[4]['loss']!r} vs {b.get(4, {}).get('loss')!r}"))
sys.exit(0 if len(same) == 2 else 1)
EOF
    [ $? -eq 0 ] || { fail=1; summary="$summary $t"; }
  done
  [ $fail -eq 0 ] || { echo "cuda_vs_host$tag: tiers failed:$summary"; return 1; }
}
# per kernel set: "[SET] max rel diff X at step N cuda A -> B tier T: equal bit for bit;..."
fig_cvh() {
  python3 - "$1" <<'EOF'
import re, sys
t = open(sys.argv[1], errors="replace").read()
out = []
head = r"^cuda_vs_host(?: \[(\w+)\])?: \d+ steps, .*?cuda ([0-9.]+ -> [0-9.]+), (max rel diff \S+ at step \d+)"
for m in re.finditer(head, t, re.M):
    tag = m.group(1)
    tiers = re.findall(r"^cuda_vs_host" + (r" \[" + tag + r"\]" if tag else "") +
                       r": (tier \w+): 4 steps.*resumed from step 2: steps 3, 4 (.*)$", t, re.M)
    out.append((f"[{tag}] " if tag else "") + f"{m.group(3)} cuda {m.group(2)} " +
               "".join(f"{a}: {b};" for a, b in tiers))
out += re.findall(r"^cuda_vs_host.*(?:tiers failed|failed with kernels).*$", t, re.M)
print(" ".join(out))
EOF
}
# ratio_124m: what offloading the optimizer to the CPU costs against keeping it on the GPU, on GPT-2 small
# (configs/gpt2-124m.json, gradient clipping 1.0), per step: all on the GPU (device Adam), the optimizer on cpu as
# configured (the CPU Adam runs after the backward: clipping needs the global norm first, so nothing hides it), and
# on cpu with ZeRO-Offload's delayed parameter update (step N's Adam runs during step N+1's forward and backward).
# The target, ZeRO-Offload's claim that the CPU step can be hidden: the DPU run at 0.9 or more of all-on-the-GPU.
do_ratio_124m() {
  mkdir -p "$nvme" || return 1
  rm -f "$out"/ratio_124m-*.jsonl
  local src=configs/gpt2-124m.json n=20 dev=(--device cuda)
  [ $dry -eq 1 ] && src=configs/default.json n=3 dev=(--device host)
  derive "$src" "$out/ratio_124m.json" steps_per_print=1 || return 1
  derive "$src" "$out/ratio_124m-dpu.json" steps_per_print=1 zoffload.delayed_param_update=true || return 1
  zt ratio_124m-all-gpu --config "$out/ratio_124m.json" --steps $n "${dev[@]}" --offload-optimizer none || return 1
  zt ratio_124m-opt-cpu --config "$out/ratio_124m.json" --steps $n "${dev[@]}" || return 1
  zt ratio_124m-opt-cpu-dpu --config "$out/ratio_124m-dpu.json" --steps $n "${dev[@]}" || return 1
  local a c p
  a=$(tps "$out/ratio_124m-all-gpu.jsonl") c=$(tps "$out/ratio_124m-opt-cpu.jsonl")
  p=$(tps "$out/ratio_124m-opt-cpu-dpu.jsonl")
  python3 -c "import sys; a, c, p = map(float, sys.argv[1:4]); rc, rp = (c / a, p / a) if a else (0, 0)
print(f'ratio_124m: all on the GPU {a:.0f} tok/s; optimizer cpu {c:.0f} tok/s (ratio {rc:.3f}), with DPU {p:.0f}' +
      f' tok/s (ratio {rp:.3f}, target >= 0.9)')
sys.exit(0 if rp >= 0.9 else 1)" "$a" "$c" "$p"
}
fig_ratio() { grep -m1 '^ratio_124m:' "$1" | sed 's/^ratio_124m: //'; }
# perf_124m: how fast the CUDA model is, all on the GPU: gpt2-124m at micro-batch 32 (train_batch_size 32), the
# optimizer on the device, 12 steps logged each; median tokens/s and MFU after 2 warm-up steps, and the last
# "kernels:" line of zo-train (per step: gemm MS ms attention MS ms other MS ms, from CUDA events). With each kernel
# set zo-train offers (kernel_sets). The target: MFU >= 40% (llm.c's efficiency), stated beside the figures.
do_perf_124m() {
  mkdir -p "$nvme" || return 1
  local src=configs/gpt2-124m.json n=12 dev=cuda mb=32 ks kf runs=()
  [ $dry -eq 1 ] && src=configs/default.json n=4 dev=host mb=8
  derive "$src" "$out/perf_124m.json" steps_per_print=1 train_micro_batch_size_per_gpu=$mb train_batch_size=$mb \
    gradient_accumulation_steps=1 || return 1
  rm -f "$out"/perf_124m*.jsonl
  for ks in $(kernel_sets); do
    read -r -a kf <<<"$(kset_flags "$ks")"
    zt "$(kset_name perf_124m "$ks")" --config "$out/perf_124m.json" --steps $n --device $dev \
      --offload-optimizer none "${kf[@]}" || return 1
    runs+=("$ks")
  done
  python3 - "$out" "${runs[@]}" <<'EOF'
import json, re, statistics, sys
out, sets = sys.argv[1], sys.argv[2:]
figs = {}
for ks in sets:
    name = "perf_124m" if ks == "-" else f"perf_124m-{ks}"
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.strip()]
    w = rows[2:] or rows
    tps = statistics.median(r["tokens_per_s"] for r in w)
    mfus = [r["mfu"] for r in w if r.get("mfu") is not None]
    mfu = statistics.median(mfus) if mfus else None
    kl = [l for l in open(f"{out}/{name}.out", errors="replace") if re.match(r"(zo-train: )?kernels:", l)]
    m = re.search(r"gemm ([0-9.]+) ms attention ([0-9.]+) ms other ([0-9.]+) ms", kl[-1]) if kl else None
    kern = (f"kernels a step: gemm {m.group(1)} ms, attention {m.group(2)} ms, other {m.group(3)} ms" if m else
            "kernels n/a (zo-train printed no 'kernels:' line)")
    figs[ks] = (tps, mfu)
    print(f"perf_124m{'' if ks == '-' else ' [' + ks + ']'}: {tps:.0f} tok/s, MFU "
          + (f"{100 * mfu:.1f}%" if mfu is not None else "n/a") + f", {kern}")
if "baseline" in figs and "fused" in figs and figs["baseline"][0] > 0:
    print(f"perf_124m: fused over baseline {figs['fused'][0] / figs['baseline'][0]:.2f}x tok/s")
best = max((f[1] for f in figs.values() if f[1] is not None), default=None)
print("perf_124m: target MFU >= 40%: " + ("n/a (no GPU peak)" if best is None else
      f"{'met' if best >= 0.40 else 'not met'} (best {100 * best:.1f}%)"))
EOF
}
fig_perf() { grep '^perf_124m' "$1" | sed 's/^perf_124m\( \[\([a-z]*\)\]\)\{0,1\}: /\2 /; s/^ //; s/$/;/'; }
# machine_rates: the rates the 10B stages' limit ratios divide by, measured here: zo-adambench with the presets'
# Adam variants (bf16 gradients and working copy; fp32 or bf16 moments) at 2^26 elements on every core, and
# zo-swapbench at $ZO_NVME with zoffload's engine at the presets' aio block size and queue depth (configs/gpt-10b.json),
# read and write, with the host<->device link limit on the GPU. rates-adam.json and rates-swap.json in $ZO_GPU_OUT.
do_machine_rates() {
  mkdir -p "$nvme" || return 1
  local adam=(--sizes 2^26 --threads all --reps 3 --warmup 1) swap=(--size 1G --bytes 512M --max-seconds 0.5 --reps 2)
  local dev=cuda bs qd
  [ $dry -eq 1 ] && adam=(--quick) swap=(--quick) dev=host
  read -r bs qd < <(python3 -c "import json; a = json.load(open('configs/gpt-10b.json')).get('aio', {})
print(a.get('block_size', 1048576), a.get('queue_depth', 32))") || return 1
  [ $dry -eq 1 ] && [ "$qd" -gt 8 ] && qd=8 # --quick's file holds 16 blocks of 1M
  rm -f "$out"/rates-*.json
  "$bd/tools/zo-adambench" "${adam[@]}" --variants adamw_bf16g_out_bf16s,adamw_bf16g_out \
    --json "$out/rates-adam.json" || return 1
  "$bd/tools/zo-swapbench" --path "$nvme" "${swap[@]}" --block-sizes "$bs" --queue-depths "$qd" --ops read,write \
    --no-fio --device $dev --json "$out/rates-swap.json" || return 1
  python3 - "$out/rates-adam.json" "$out/rates-swap.json" <<'EOF'
import json, sys
sys.path.insert(0, "scripts")
from limit_ratio import best_adam_row  # the row the limit ratios divide by
a, s = (json.load(open(p)) for p in sys.argv[1:3])
parts = []
for v in ("adamw_bf16g_out_bf16s", "adamw_bf16g_out"):
    x = best_adam_row(a, v)
    if x:
        parts.append(f"Adam {v} {x['gbps']:.1f} GB/s ({x['params_per_s'] / 1e9:.2f} Gparams/s, {x['threads']} threads)")
b = s.get("best", {})
parts.append("NVMe " + ", ".join(f"{op} {b[op]['gbps']:.2f} GB/s" for op in ("read", "write") if op in b) +
             f" (zoffload, {s['config']['path']})")
link = s.get("link_limit") or {}
if isinstance(link, dict) and link.get("h2d_gbps"):
    parts.append(f"link h2d {link['h2d_gbps']:.1f} GB/s, d2h {link.get('d2h_gbps', 0):.1f} GB/s")
print("machine_rates: " + "; ".join(parts))
EOF
}
fig_rates() { grep -m1 '^machine_rates:' "$1" | sed 's/^machine_rates: //; s/$/;/'; }
# gpt10b NAME CONFIG STEPS FLAGS...: a 10B run on the GPU (--dry: configs/default.json 4 steps on the host), logged
# every step, one validation window (a logged step validates), the link's rates measured in the run
# (ZO_SPEEDS_REMEASURE); then its figures and the limit ratio (scripts/limit_ratio.py) against machine_rates' files
# (measured now when that stage did not run).
gpt10b() {
  local name=$1 src=$2 n=$3
  shift 3
  mkdir -p "$nvme" || return 1
  local dev=cuda
  [ $dry -eq 1 ] && src=configs/default.json n=4 dev=host
  derive "$src" "$out/$name.json" steps_per_print=1 train.val_windows=1 || return 1
  rm -f "$out/$name.jsonl"
  # the link measured in this run (--dry: the cache as it is, not rewritten with a busy machine's figures)
  ZO_SPEEDS_REMEASURE=$((1 - dry)) zt "$name" --config "$out/$name.json" --steps "$n" --device $dev "$@" || return 1
  if [ ! -f "$out/rates-adam.json" ] || [ ! -f "$out/rates-swap.json" ]; then
    echo "-- the machine's rates, for the limit ratio (machine_rates did not run)"
    do_machine_rates >"$out/$name-rates.log" 2>&1 || echo "machine_rates failed: $out/$name-rates.log"
  fi
  local var=adamw_bf16g_out args=()
  python3 -c "import json, sys; c = json.load(open(sys.argv[1]))
sys.exit(0 if c.get('zoffload', {}).get('optimizer_state_dtype') == 'bf16' else 1)" "$out/$name.json" &&
    var=adamw_bf16g_out_bf16s
  [ -f "$out/rates-adam.json" ] && args+=(--adam-json "$out/rates-adam.json" --adam-variant $var)
  [ -f "$out/rates-swap.json" ] && args+=(--swap-json "$out/rates-swap.json")
  python3 scripts/limit_ratio.py --log "$out/$name.jsonl" "${args[@]}" --label "$name:"
}
# the figures of a 10B run: steps, loss, tokens/s, MFU, device and pinned memory; the breakdown; the limit ratio
# against its target (gpt_10b 0.8, gpt_10b_nvme 0.6)
fig_10b() {
  local target=
  case $(basename "$1") in gpt_10b.log) target=0.8 ;; gpt_10b_nvme.log) target=0.6 ;; esac
  python3 - "${1%.log}.jsonl" "$1" "$target" <<'EOF'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "tokens_per_s" in r]
log = open(sys.argv[2], errors="replace").read()
if rows:
    w = rows[2:] or rows
    mfus = [r["mfu"] for r in w if r.get("mfu") is not None]
    print(f"steps {len(rows)}, loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}, "
          f"{statistics.median(r['tokens_per_s'] for r in w):.0f} tok/s"
          + (f", MFU {100 * statistics.median(mfus):.1f}%" if mfus else "") + ", "
          f"device: peak live {max(r.get('arena_peak_live_bytes', 0) for r in rows) / 2**30:.1f} GiB of an arena of "
          f"{max(r.get('arena_capacity_bytes', 0) for r in rows) / 2**30:.1f} GiB, "
          f"pinned host {max(r.get('pinned_bytes', 0) for r in rows) / 2**30:.1f} GiB;")
else:
    print("no step logged;")
m = re.search(r"^\S+ breakdown: per step over steps (\S+): (.*)$", log, re.M)
if m:
    print(f"steps {m.group(1)}: {m.group(2)};")
m = re.search(r"^\S+ limit ratio ([0-9.]+): bound (\S+ s) \(([^)]*)\) over the measured step (\S+ s)", log, re.M)
if m:
    t = sys.argv[3]
    print(f"limit ratio {m.group(1)} (bound {m.group(2)}, {m.group(3)}; step {m.group(4)})"
          + (f", target >= {t}: {'met' if float(m.group(1)) >= float(t) else 'not met'}" if t else "") + ";")
EOF
}
do_gpt_10b() { gpt10b gpt_10b configs/gpt-10b.json "${ZO_GPU_10B_STEPS:-6}" --offload-optimizer cpu; }
do_gpt_10b_nvme() { gpt10b gpt_10b_nvme configs/gpt-10b.json "${ZO_GPU_10B_STEPS:-6}" --offload-optimizer nvme; }
do_gpt_10b_infinity() {
  if [ $dry -eq 1 ]; then gpt10b gpt_10b_infinity - 4 --offload-param nvme
  else gpt10b gpt_10b_infinity configs/gpt-10b-infinity.json "${ZO_GPU_INF_STEPS:-4}"; fi
}
# arena_gpu: zo-arenabench on the GPU (--dry: the emulated device)
do_arena_gpu() {
  local a=(--device cuda --capacity 2G --rounds 4)
  [ $dry -eq 1 ] && a=(--device host --capacity 64M --rounds 2)
  "$bd/tools/zo-arenabench" "${a[@]}" --json "$out/arena_gpu.json"
}
fig_arena() {
  python3 - "${1%.log}.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
s = [f"{x['name']}: compaction {x['compact_gbps']:.1f} GB/s against plain D2D {x['baseline_gbps']:.1f} GB/s "
     f"({x['ratio']:.2f}x, {x['compactions']} compactions, {x['bytes_moved'] / 1e6:.0f} MB moved)"
     for x in d["scenarios"]]
t = d.get("allocation_trace")
if isinstance(t, dict):
    s.append(f"a step's allocations (d_model {t['d_model']}, {t['pairs_per_round']} pairs): " + ", ".join(
        f"{a['allocator']} {a['us_per_pair']:.2f} us a pair" if a["measured"] else f"{a['allocator']} n/a"
        for a in t["allocators"]))
v = d.get("vmm")
if isinstance(v, dict) and v.get("measured"):
    s.append(f"vmm remap {v['remap_s_per_gb']:.4f} s/GB ({v['pages']} pages)")
print(d["device_name"] + ": " + "; ".join(s) + ";")
EOF
}
# torch_nccl: python/tests/test_import_order.py under this machine's CUDA torch and its NCCL (libzoffload maps no
# NCCL of its own; zoffload and torch in either order); without pytest, the same three checks inline
do_torch_nccl() {
  local py lib order fail=0
  py=$(stage_python)
  "$py" -c "import torch" 2>/dev/null || { echo "skip: $py has no torch"; return 77; }
  lib=$(cd "$bd" && pwd)/libzoffload.so
  echo "python: $py, torch $("$py" -c 'import torch; print(torch.__version__)')"
  if "$py" -c "import pytest" 2>/dev/null; then
    ZOFFLOAD_LIBRARY=$lib PYTHONPATH=$PWD/python "$py" -m pytest -q -p no:cacheprovider python/tests/test_import_order.py
    return
  fi
  echo "note: $py has no pytest: test_import_order.py's checks inline"
  "$py" -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])
m = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libnccl' in l.split()[-1]})
print('library alone maps NCCL:', m); sys.exit(1 if m else 0)" "$lib" || fail=1
  for order in "zoffload, torch" "torch, zoffload"; do
    ZOFFLOAD_LIBRARY=$lib PYTHONPATH=$PWD/python "$py" -c "import $order
import torch.distributed
m = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libnccl' in l.split()[-1]})
print('import $order ->', torch.__version__, torch.distributed.is_nccl_available(), m)" || fail=1
  done
  [ $fail -eq 0 ] && echo "3 passed" || echo "failed"
  return $fail
}
fig_pytest() { grep -m1 -E '[0-9]+ (passed|failed)' "$1" | sed 's/=//g; s/^ *//; s/ *$/;/'; grep -m1 '^skip: ' "$1"; }
# wheel_cuda: the carried wheel ($ZO_WHEEL: a zoffload-*.whl, or a directory holding one) installed into a fresh venv
# of this machine's CUDA python (its torch through --system-site-packages; nothing fetched), then
# scripts/wheel_cuda_smoke.py run from outside the checkout with nothing pointing at it
do_wheel_cuda() {
  local whl=${ZO_WHEEL:-} py
  [ -d "$whl" ] && whl=$(ls "$whl"/zoffload-*.whl 2>/dev/null | head -1)
  if [ -z "$whl" ] || [ ! -f "$whl" ]; then
    echo "skip: no wheel carried (ZO_WHEEL: a zoffload-*.whl or its directory)"
    return 77
  fi
  py=$(stage_python)
  local v=$out/wheel-venv
  rm -rf "$v" "$out/wheel-run"
  mkdir -p "$out/wheel-run"
  "$py" -m venv --system-site-packages "$v" || return 1
  "$v/bin/python" -m pip install -q --no-deps --no-index "$whl" || return 1
  echo "installed $(basename "$whl") into $v"
  (cd "$out/wheel-run" && env -u ZOFFLOAD_LIBRARY -u LD_LIBRARY_PATH -u PYTHONPATH \
    "$v/bin/python" "$OLDPWD/scripts/wheel_cuda_smoke.py")
}
fig_wheel() { grep -E '^(3 steps on|FAIL: |skip: )' "$1" | sed 's/$/;/'; }
# onednn_bf16: the CPU model's bf16 products through oneDNN (the carried libdnnl): the product test and zo-train's
do_onednn_bf16() {
  ctest --test-dir "$bd" -R '^(test_gemm_bf16|zo_train_gemm_bf16)$' --no-tests=error -V --timeout 14
}
# the first of python3, /usr/bin/python3 whose torch sees a GPU (stdout); 1 when none
gpu_python() {
  local py
  for py in python3 /usr/bin/python3; do
    if "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
      echo "$py"
      return 0
    fi
  done
  return 1
}
# the python a stage runs: $ZO_PYTHON, else gpu_python's, else python3 (stdout)
stage_python() {
  if [ -n "${ZO_PYTHON:-}" ]; then echo "$ZO_PYTHON"; else gpu_python || echo python3; fi
}
do_nccl() {
  if grep -q '^ZO_BUILT_WITH_NCCL:INTERNAL=0' "$bd/CMakeCache.txt" 2>/dev/null; then
    echo "skip: $bd was built without NCCL (none beside the CUDA toolkit, in \$NCCL_ROOT or python3's nvidia-nccl" \
      "wheel: see the build log's 'zoffload: NCCL' line)"
    return 77
  fi
  ctest --test-dir "$bd" -R '^test_comm_nccl$' --no-tests=error -V --timeout 18
}
do_python_cuda() {
  [ -n "${ZO_PYTHON:-}" ] || { ZO_PYTHON=$(gpu_python) && export ZO_PYTHON; }
  echo "python: ${ZO_PYTHON:-none whose torch sees the GPU}"
  ctest --test-dir "$bd" -R '^python_cuda$' --no-tests=error -V --timeout 85
}

# ranks_np NAME NP STAGE ARGS...: the several-rank run (np 1: the reference, two micro-batches of 8; else NP ranks of
# 8 sequences each) of configs/default.json at STAGE (parameters on cpu at stage 3; STAGE 3d: stage 3 with the
# parameters partitioned in device memory, offload_param "none"), 10 steps (3 --dry) on cuda (host
# --dry), each rank limited to 40 GB of device memory so that two fit on one GPU; ARGS (PATH=JSON) go to derive.
ranks_np() {
  local name=$1 np=$2 st=$3
  shift 3
  local n=10 dev=cuda lim=(--device-memory-limit 40000000000) off='{"device": "none"}'
  [ $dry -eq 1 ] && n=3 dev=host lim=()
  [ "$st" = 3 ] && off='{"device": "cpu", "pin_memory": true}'
  [ "$st" = 3d ] && st=3
  derive configs/default.json "$out/$name.json" steps_per_print=1 zero_optimization.stage="$st" \
    zero_optimization.offload_param="$off" train_micro_batch_size_per_gpu=8 \
    gradient_accumulation_steps=$((np == 1 ? 2 : 1)) train_batch_size=$((np == 1 ? 16 : 8 * np)) "$@" || return 1
  if [ "$np" = 1 ]; then
    zt "$name" --config "$out/$name.json" --steps $n --device $dev "${lim[@]}"
    return
  fi
  local mpirun
  mpirun=$(command -v mpirun || command -v mpiexec) || return 1
  echo "-- $mpirun -np $np zo-train $name"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mpirun" --oversubscribe --bind-to none -np "$np" \
    "${ranks_mpi_args[@]}" "$bd/tools/zo-train" --data "${ZO_CORPUS:-/usr/share/games/fortunes}" --nvme-path "$nvme" \
    --no-sample --log-json "$out/$name.jsonl" --config "$out/$name.json" --steps $n --device $dev "${lim[@]}"
}
# ranks_cmp REF RUN WHAT: every logged loss of RUN within 2% of REF's (cuda_vs_host's tolerance); prints the figures
ranks_cmp() {
  python3 - "$out/$1.jsonl" "$out/$2.jsonl" "$3" <<'EOF'
import json, sys
def losses(f):
    return [(r["step"], r["loss"]) for r in map(json.loads, (l for l in open(f) if l.strip())) if "loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if not a or [s for s, _ in a] != [s for s, _ in b]:
    print(f"{sys.argv[3]}: steps differ: {len(a)} against {len(b)} logged")
    sys.exit(1)
rel = max(abs(x - y) / abs(x) for (_, x), (_, y) in zip(a, b))
same = all(x == y for (_, x), (_, y) in zip(a, b))
print(f"{sys.argv[3]}: {len(a)} losses, max rel diff {rel:.2e} to one rank{' (equal bit for bit)' if same else ''}")
sys.exit(0 if rel <= 0.02 else 1)
EOF
}
do_ranks_1gpu() {
  command -v mpirun >/dev/null || command -v mpiexec >/dev/null || {
    echo "skip: no mpirun here (openmpi-bin)"
    return 77
  }
  mkdir -p "$nvme" || return 1
  # both ranks on GPU 0: LOCAL_RANK names the device (zo_device_local_ordinal); the ranks come from MPI
  ranks_mpi_args=(-x LOCAL_RANK=0)
  local st bad=0
  for st in 1 2 3 3d; do
    ranks_np "ranks_1gpu-s$st-ref" 1 "$st" || return 1
    ranks_np "ranks_1gpu-s$st-np2" 2 "$st" zoffload.comm='"mpi"' || return 1
    ranks_cmp "ranks_1gpu-s$st-ref" "ranks_1gpu-s$st-np2" "ranks_1gpu stage $st, 2 ranks on 1 GPU (mpi)" || bad=1
  done
  return $bad
}
fig_ranks() { grep -E '^(ranks_1gpu|nccl_ranks) ' "$1" | sed 's/^[a-z_0-9]* //; s/$/;/'; }
do_nccl_ranks() {
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "${n:-0}" -lt 2 ]; then
    echo "skip: ${n:-0} GPU here; NCCL needs a GPU per rank (it refuses two ranks on one device), so the several-rank" \
      "NCCL paths ran only on the stand-in (ctest nccl_fake_np2/np3)"
    return 77
  fi
  if grep -q '^ZO_BUILT_WITH_NCCL:INTERNAL=0' "$bd/CMakeCache.txt" 2>/dev/null; then
    echo "skip: $bd was built without NCCL"
    return 77
  fi
  command -v mpirun >/dev/null || command -v mpiexec >/dev/null || {
    echo "skip: no mpirun here (openmpi-bin)"
    return 77
  }
  ctest --test-dir "$bd" -R '^test_comm_nccl_np2$' --no-tests=error -V --timeout 25 || return 1
  mkdir -p "$nvme" || return 1
  ranks_mpi_args=()
  ranks_np nccl_ranks-ref 1 2 || return 1
  ranks_np nccl_ranks-np2 2 2 zoffload.comm='"nccl"' || return 1
  ranks_cmp nccl_ranks-ref nccl_ranks-np2 "nccl_ranks stage 2, 2 GPUs (nccl)" || return 1
  # stage 3 with each rank's blocks in device memory, gathered device to device
  ranks_np nccl_ranks-3d-ref 1 3d || return 1
  ranks_np nccl_ranks-3d-np2 2 3d zoffload.comm='"nccl"' || return 1
  ranks_cmp nccl_ranks-3d-ref nccl_ranks-3d-np2 "nccl_ranks stage 3d (parameters in device memory), 2 GPUs (nccl)"
}

# ---------------------------------------------------------------- the run
if [ $inner -eq 1 ]; then
  "$@"
  exit
fi
mkdir -p "$out"
: >"$report"
if [ $dry -eq 0 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then gpu=1; fi
export ZO_GPU_DRY=$dry ZO_GPU_HAVE=$gpu ZO_BUILD=$bd ZO_GPU_OUT=$out ZO_NVME=$nvme ZO_JOBS=$jobs
{
  echo "# gpu.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(n=$(git status --porcelain 2>/dev/null | wc -l); [ "$n" -gt 0 ] && echo " + $n changed paths (a copied tree's .git can be older than its files)") on $(hostname)," \
    "$(nproc) cores, budget ${budget} s$([ $dry -eq 1 ] && echo ', --dry (plumbing only)')"
  if [ $gpu -eq 1 ]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/# GPU: /'
  else echo "# GPU: none$([ $dry -eq 1 ] && echo ' (--dry)'): the GPU stages report SKIP"; fi
} >"$out/header.txt"
cat "$out/header.txt"
stage build cpu fig_build do_build
# the carried libraries (build ran scripts/deps.sh in its own process): LD_LIBRARY_PATH and ZO_CORPUS for the rest
[ -n "${ZO_DEBS:-}" ] && [ -f "${ZO_DEPS_PREFIX:-build/deps}/env.sh" ] && . "${ZO_DEPS_PREFIX:-build/deps}/env.sh"
if [ ! -x "$bd/tools/zo-train" ]; then
  for s in "${ALL[@]:1}" "${MORE[@]}"; do
    for w in "${stages[@]}"; do [ "$w" = "$s" ] && record "$s" SKIP 0 "no build in $bd"; done
  done
else
  # the default group, then the second (--all): in order of value
  stage perf_124m gpu fig_perf do_perf_124m
  stage cuda_vs_host gpu fig_cvh do_cuda_vs_host
  stage ctest_gpu gpu fig_ctest do_ctest_gpu
  stage machine_rates cpu fig_rates do_machine_rates
  stage gpt_10b gpu fig_10b do_gpt_10b
  stage gpt_10b_nvme gpu fig_10b do_gpt_10b_nvme
  stage gpt_10b_infinity gpu fig_10b do_gpt_10b_infinity
  stage python_cuda gpu fig_ctest do_python_cuda
  stage sanitizer_memcheck gpu fig_sanitizer do_sanitizer memcheck
  stage nccl_1rank gpu fig_ctest do_nccl
  stage arena_gpu gpu fig_arena do_arena_gpu
  stage sanitizer_racecheck gpu fig_sanitizer do_sanitizer racecheck
  stage sanitizer_synccheck gpu fig_sanitizer do_sanitizer synccheck
  stage torch_nccl gpu fig_pytest do_torch_nccl
  stage wheel_cuda gpu fig_wheel do_wheel_cuda
  stage onednn_bf16 cpu fig_ctest do_onednn_bf16
  stage ratio_124m gpu fig_ratio do_ratio_124m
  stage adam_device gpu fig_ctest do_adam_device
  stage ranks_1gpu gpu fig_ranks do_ranks_1gpu
  stage nccl_ranks gpu fig_ranks do_nccl_ranks
fi
echo
echo "== report ($report), $((SECONDS - start)) s in all:"
cat "$out/header.txt" "$report" | tee "$out/report-full.txt"
exit $status
