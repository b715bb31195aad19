#!/usr/bin/env bash
# gpu.sh [--dry] [--only STAGE,...] [STAGE...] - the one prepared, bounded check for a machine with an NVIDIA GPU
# (H100/H200, 16 cores, the CUDA toolkit with compute-sanitizer, CMake, ninja, a python3 whose torch sees the GPU).
# Not a benchmark suite: each stage is cut off at its bound (`timeout`), and the whole run stops starting stages
# after $ZO_GPU_BUDGET_S (default 420 s), so `timeout 450 ./scripts/gpu.sh` always ends with the report printed.
#
# The Debian libraries come as .deb files: `bash scripts/deps.sh --download debs` on a machine with apt, the
# repository with debs/ copied over, then on the GPU machine:
#     ZO_DEBS=debs timeout 450 ./scripts/gpu.sh
# (unpacked with `dpkg -x` under build/deps, no root; see docs/gpu-check.md). Without ZO_DEBS the build runs
# scripts/deps.sh as the other scripts do (installs missing packages as root).
#
# Stages, in order of value; `--only a,b` or STAGE arguments pick some (default: all; a run without `build` reuses
# $ZO_BUILD as it is). Bound in seconds, the wall seen on an H200 (2026-11-27, docs/gpu-runs/; ~ where the stage
# failed there), then what it does. A GPU is lent for 15 minutes in all, its start-up included, so a rerun of the
# stages that failed (--only) fits beside a full run.
#   build                120   16  deps (unpack ZO_DEBS), cmake -G Ninja into $ZO_BUILD (build-gpu) for this GPU's
#                                  architecture (ZO_CUDA_ARCHS, else nvidia-smi's compute capability), ninja -j16
#   ctest_gpu             60    5  ctest -L gpu, less the tests that have a stage of their own: CUDA device
#                                  conformance, every zo-train kernel against the CPU model's gradients
#   cuda_vs_host          90   17  a small config trained 30 steps with --device cuda and with --device host: losses
#                                  within the bf16 tolerance, the loss falling; then each tier on cuda (optimizer cpu,
#                                  optimizer nvme, parameters nvme) 4 steps, resumed from step 2: bit for bit
#   python_cuda           90   56  ctest -R python_cuda: the Python front's CUDA path, ordered against torch's streams
#                                  ($ZO_PYTHON, else the first of python3, /usr/bin/python3 whose torch sees the GPU)
#   nccl_1rank            20    2  ctest -R test_comm_nccl: the nccl backend on one rank
#   adam_device           20    1  ctest -R test_adam_device: device Adam against CPU Adam
#   sanitizer_memcheck    60   24  the gpu-labelled C test programs once under compute-sanitizer --tool memcheck
#                                  (API errors not reported: the tests provoke some on purpose and check each)
#   sanitizer_racecheck   90   32  ... --tool racecheck over every kernel, the model's GEMMs by a plain kernel of
#                                  ours instead of cuBLAS (ZO_GPT_CUDA_GEMM=reference; see do_sanitizer)
#   sanitizer_synccheck   45    4  ... --tool synccheck, our own kernels
#   ratio_124m            75   14  gpt2-124m 20 steps all on the GPU, with the optimizer on cpu, and on cpu with
#                                  ZeRO-Offload's delayed parameter update: median per-step tokens/s after 2 warm-up
#                                  steps; PASS when the DPU run reaches 0.9 of all-on-the-GPU
#   gpt_10b              150  119  configs/gpt-10b.json for 10 steps (optimizer nvme, placement auto): steps done,
#                                  tokens/s, peak device memory
#   ranks_1gpu            90    -  two ranks on the one GPU through the mpi backend (host collectives; NCCL refuses
#                                  two ranks on one device): configs/default.json at stages 1, 2, 3 (parameters on
#                                  cpu) and 3d (stage 3, parameters partitioned in device memory), 8 sequences a
#                                  rank against one rank with two micro-batches of 8: every
#                                  loss within cuda_vs_host's 2%; the figures: the largest difference, bit equality
#   nccl_ranks            60    -  two or more GPUs: ctest test_comm_nccl_np2 and ranks_1gpu's stages 2 and 3d over nccl on
#                                  two GPUs; SKIP with the reason on one GPU (the several-rank NCCL paths then ran
#                                  only on the stand-in, ctest nccl_fake_np2/np3)
# Seen in all: 237 s of stages (racecheck over every kernel not included); with the start-up and the transfers a
# full run takes about 5 minutes of the 15 lent.
# Every stage appends one line to $ZO_GPU_OUT/report.txt (default gpu-results/) as soon as it ends:
#   STAGE RESULT WALL_s FIGURES      RESULT: PASS, FAIL, SKIP (could not run here: no GPU, no tool) or TIMEOUT
# (cut off at its bound, or not started because the run's budget was spent), so a run cut off from outside still
# tells what passed. Logs beside it, one per stage. The report is printed at the end; exit 0 when no stage FAILed
# or TIMEd OUT.
#
# --dry (or ZO_DEVICE=host): the plumbing on a machine without a GPU, in seconds: build is `cmake --build -n` of an
# existing $ZO_BUILD (nothing is built), the zo-train stages run configs/default.json for 3 steps on the host
# device, and every stage that needs a GPU reports SKIP whatever its stand-in did (ctest gpu_sh_plumbing).
# Knobs: ZO_GPU_BOUND_<stage>=S overrides one bound; ZO_GPU_HANG=<stage> replaces that stage's command with a
# sleep (a test of the cut-off); ZO_NVME (default $ZO_BUILD/gpu-nvme) holds swap files; ZO_CORPUS the corpus.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
self=$PWD/scripts/gpu.sh
# `gpu.sh --stage-cmd FN ARGS...` is this script calling itself under `timeout` (which runs programs, not shell
# functions): FN with the run's settings from the environment, and nothing else.
inner=0
[ "${1:-}" = "--stage-cmd" ] && { inner=1; shift; }
dry=${ZO_GPU_DRY:-0}
ALL=(build ctest_gpu cuda_vs_host python_cuda nccl_1rank adam_device sanitizer_memcheck sanitizer_racecheck
     sanitizer_synccheck ratio_124m gpt_10b ranks_1gpu nccl_ranks)
declare -A BOUND=([build]=120 [ctest_gpu]=60 [cuda_vs_host]=90 [python_cuda]=90 [nccl_1rank]=20 [adam_device]=20
                  [sanitizer_memcheck]=60 [sanitizer_racecheck]=90 [sanitizer_synccheck]=45 [ratio_124m]=75
                  [gpt_10b]=150 [ranks_1gpu]=90 [nccl_ranks]=60)
budget=${ZO_GPU_BUDGET_S:-420}
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
      --only) [ $# -ge 2 ] || { echo "gpu.sh: --only needs STAGE[,STAGE...]" >&2; exit 2; }
              IFS=, read -r -a more <<<"$2"; stages+=("${more[@]}"); shift ;;
      --only=*) IFS=, read -r -a more <<<"${1#--only=}"; stages+=("${more[@]}") ;;
      -h | --help) sed -n '2,/^set -uo/p' "$self" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      -*) echo "gpu.sh: unknown option '$1' (--dry, --only STAGE,...)" >&2; exit 2 ;;
      *) stages+=("$1") ;;
    esac
    shift
  done
  [ ${#stages[@]} -eq 0 ] && stages=("${ALL[@]}")
  for s in "${stages[@]}"; do
    [ -n "${BOUND[$s]+set}" ] || { echo "gpu.sh: unknown stage '$s' (stages: ${ALL[*]})" >&2; exit 2; }
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
bounded() {
  local b=${BOUND[$1]} left=$((budget - (SECONDS - start)))
  local o="ZO_GPU_BOUND_$1"
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
  ctest --test-dir "$bd" -L gpu -E '^(python_cuda|test_adam_device|test_comm_nccl)$' -V --timeout 55
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
    --log-json "$out/$name.jsonl" "$@"
}
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
  local cfg=$out/cuda_vs_host.json n=30 dev=cuda
  [ $dry -eq 1 ] && n=3 dev=host
  derive configs/default.json "$cfg" steps_per_print=1 || return 1
  rm -f "$out"/cvh-*.jsonl
  zt cvh-host --config "$cfg" --steps $n --device host || return 1
  zt cvh-cuda --config "$cfg" --steps $n --device $dev || return 1
  python3 - "$out/cvh-host.jsonl" "$out/cvh-cuda.jsonl" $n <<'EOF' || return 1
import json, sys
h, c = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
n = int(sys.argv[3])
if len(h) != n or len(c) != n:
    sys.exit(f"cuda_vs_host: expected {n} logged steps, host logged {len(h)}, cuda {len(c)}")
rel = [abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(h, c)]
worst = max(range(n), key=lambda i: rel[i])
ok = rel[worst] <= 0.02
fall = c[-1]["loss"] < 0.8 * c[0]["loss"] if n >= 10 else True
print(f"cuda_vs_host: {n} steps, loss host {h[0]['loss']:.4f} -> {h[-1]['loss']:.4f}, cuda {c[0]['loss']:.4f} -> "
      f"{c[-1]['loss']:.4f}, max rel diff {rel[worst]:.2e} at step {worst + 1} (tolerance 2e-2)"
      + ("" if ok else " OVER") + ("" if fall else ", the cuda loss did not fall below 0.8 of step 1's"))
sys.exit(0 if ok and fall else 1)
EOF
  local t flags ck fail=0 summary=""
  for t in opt_cpu opt_nvme param_nvme; do
    case $t in
      opt_cpu) flags=(--offload-optimizer cpu) ;;
      opt_nvme) flags=(--offload-optimizer nvme) ;;
      param_nvme) flags=(--offload-param nvme) ;;
    esac
    ck=$nvme/cvh-ck-$t
    rm -rf "$ck"
    zt cvh-$t --config "$cfg" --steps 4 --device $dev "${flags[@]}" --save "$ck" --save-every 2 --keep-last 0 &&
      zt cvh-$t-resumed --config "$cfg" --steps 4 --device $dev "${flags[@]}" \
        --resume "$(ls -d "$ck"/step-* | sort | head -1)" &&
      python3 - "$out/cvh-$t.jsonl" "$out/cvh-$t-resumed.jsonl" "$t" <<'EOF'
import json, sys
a, b = ({r["step"]: r for r in (json.loads(l) for l in open(p) if l.strip())} for p in sys.argv[1:3])
t = sys.argv[3]
same = [s for s in (3, 4) if s in a and s in b and (a[s]["loss"], a[s]["grad_norm"]) == (b[s]["loss"], b[s]["grad_norm"])]
print(f"cuda_vs_host: tier {t}: 4 steps, loss {a[1]['loss']:.6f} -> {a[4]['loss']:.6f}; resumed from step 2: "
      f"steps 3, 4 " + ("equal bit for bit" if len(same) == 2 else
      f"DIFFER: step 4 loss {a[4]['loss']!r} vs {b.get(4, {}).get('loss')!r}"))
sys.exit(0 if len(same) == 2 else 1)
EOF
    [ $? -eq 0 ] || { fail=1; summary="$summary $t"; }
  done
  [ $fail -eq 0 ] || { echo "cuda_vs_host: tiers failed:$summary"; return 1; }
}
fig_cvh() {
  grep -m1 -o 'max rel diff [^ ]* at step [0-9]*' "$1"
  grep -m1 -o 'cuda [0-9.]* -> [0-9.]*' "$1"
  grep -o 'tier [a-z_]*: .*' "$1" | sed 's/: 4 steps.*resumed from step 2: steps 3, 4 /: /' | tr '\n' ';'
  grep -m1 'tiers failed' "$1"
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
do_gpt_10b() {
  mkdir -p "$nvme"
  rm -f "$out/gpt_10b.jsonl"
  if [ $dry -eq 1 ]; then zt gpt_10b --config configs/default.json --steps 3 --device host
  else zt gpt_10b --config configs/gpt-10b.json --steps 10 --device cuda; fi
}
fig_10b() {
  python3 - "${1%.log}.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "tokens_per_s" in r]
if rows:
    w = rows[2:] or rows
    print(f"steps {len(rows)}, loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}, "
          f"{statistics.median(r['tokens_per_s'] for r in w):.0f} tok/s, "
          f"device: peak live {max(r.get('arena_peak_live_bytes', 0) for r in rows) / 2**30:.1f} GiB of an arena of "
          f"{max(r.get('arena_capacity_bytes', 0) for r in rows) / 2**30:.1f} GiB, "
          f"pinned host {max(r.get('pinned_bytes', 0) for r in rows) / 2**30:.1f} GiB;")
else:
    print("no step logged;")
EOF
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
  if [ -z "${ZO_PYTHON:-}" ]; then
    local py
    for py in python3 /usr/bin/python3; do
      if "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        export ZO_PYTHON=$py
        break
      fi
    done
  fi
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
  for s in "${ALL[@]:1}"; do
    for w in "${stages[@]}"; do [ "$w" = "$s" ] && record "$s" SKIP 0 "no build in $bd"; done
  done
else
  stage ctest_gpu gpu fig_ctest do_ctest_gpu
  stage cuda_vs_host gpu fig_cvh do_cuda_vs_host
  stage python_cuda gpu fig_ctest do_python_cuda
  stage nccl_1rank gpu fig_ctest do_nccl
  stage adam_device gpu fig_ctest do_adam_device
  stage sanitizer_memcheck gpu fig_sanitizer do_sanitizer memcheck
  stage sanitizer_racecheck gpu fig_sanitizer do_sanitizer racecheck
  stage sanitizer_synccheck gpu fig_sanitizer do_sanitizer synccheck
  stage ratio_124m gpu fig_ratio do_ratio_124m
  stage gpt_10b gpu fig_10b do_gpt_10b
  stage ranks_1gpu gpu fig_ranks do_ranks_1gpu
  stage nccl_ranks gpu fig_ranks do_nccl_ranks
fi
echo
echo "== report ($report), $((SECONDS - start)) s in all:"
cat "$out/header.txt" "$report" | tee "$out/report-full.txt"
exit $status
