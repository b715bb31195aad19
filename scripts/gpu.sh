#!/usr/bin/env bash
# gpu.sh [--dry] [STAGE...] - the one prepared, bounded check for a machine with an NVIDIA GPU (H100/H200, 16 cores,
# the CUDA toolkit with compute-sanitizer, CMake, ninja, a python3 whose torch sees the GPU). Not a benchmark suite:
# each stage is cut off at its bound (`timeout`), and the whole run stops starting stages after $ZO_GPU_BUDGET_S
# (default 470 s), so `timeout 480 ./scripts/gpu.sh` always ends with the report printed.
#
# The Debian libraries come as .deb files: `bash scripts/deps.sh --download debs` on a machine with apt, the
# repository with debs/ copied over, then on the GPU machine:
#     ZO_DEBS=debs timeout 480 ./scripts/gpu.sh
# (unpacked with `dpkg -x` under build/deps, no root; see docs/gpu-check.md). Without ZO_DEBS the build runs
# scripts/deps.sh as the other scripts do (installs missing packages as root).
#
# Stages, in order of value; STAGE arguments pick some (default: all). Bound in seconds, then what it does:
#   build                180  deps (unpack ZO_DEBS), cmake -G Ninja into $ZO_BUILD (build-gpu), ninja -j16
#   ctest_gpu             90  ctest -L gpu -E python_cuda: CUDA device conformance, every zo-train kernel against the
#                             CPU model's gradients, the NCCL comm on one GPU
#   sanitizer_memcheck    60  the gpu-labelled C test programs once under compute-sanitizer --tool memcheck
#   sanitizer_racecheck   30  ... --tool racecheck
#   sanitizer_synccheck   30  ... --tool synccheck
#   adam_device           45  ctest -R test_adam_device: device Adam against CPU Adam
#   ratio_124m           120  gpt2-124m, 20 steps with the optimizer on cpu, then 20 all on the GPU
#                             (--offload-optimizer none): median tokens/s after 2 warm-up steps, and their ratio
#   gpt_10b              150  configs/gpt-10b.json for 10 steps: steps done, tokens/s, peak device memory
#   nccl_1rank            30  ctest -R test_comm_nccl: the nccl backend on one rank
#   python_cuda          120  ctest -R python_cuda: the Python front's CUDA path ($ZO_PYTHON, else the first of
#                             python3, /usr/bin/python3 whose torch sees the GPU)
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
[ $inner -eq 0 ] && [ "${1:-}" = "--dry" ] && { dry=1; shift; }
[ "${ZO_DEVICE:-}" = host ] && dry=1
ALL=(build ctest_gpu sanitizer_memcheck sanitizer_racecheck sanitizer_synccheck adam_device ratio_124m gpt_10b
     nccl_1rank python_cuda)
declare -A BOUND=([build]=180 [ctest_gpu]=90 [sanitizer_memcheck]=60 [sanitizer_racecheck]=30
                  [sanitizer_synccheck]=30 [adam_device]=45 [ratio_124m]=120 [gpt_10b]=150 [nccl_1rank]=30
                  [python_cuda]=120)
budget=${ZO_GPU_BUDGET_S:-470}
bd=${ZO_BUILD:-build-gpu}
out=${ZO_GPU_OUT:-gpu-results}
nvme=${ZO_NVME:-$bd/gpu-nvme}
jobs=${ZO_JOBS:-16}
gpu=${ZO_GPU_HAVE:-0}
if [ $inner -eq 0 ]; then
  stages=("$@")
  [ ${#stages[@]} -eq 0 ] && stages=("${ALL[@]}")
  for s in "${stages[@]}"; do
    [ -n "${BOUND[$s]+set}" ] || { echo "gpu.sh: unknown stage '$s' (stages: ${ALL[*]})" >&2; exit 2; }
  done
fi
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
  local gen=()
  command -v ninja >/dev/null && [ ! -f "$bd/Makefile" ] && gen=(-G Ninja)
  cmake -S . -B "$bd" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release || return 1
  cmake --build "$bd" -j"$jobs"
}
fig_build() {
  grep -m1 -o 'zoffload: CUDA kernels .*' "$1"
  grep -m1 -o 'zoffload: NCCL not found' "$1"
  grep -c -E '^\[[0-9]+/[0-9]+\]|Building' "$1" | sed 's/$/ build steps/'
}
do_ctest_gpu() { ctest --test-dir "$bd" -L gpu -E python_cuda --output-on-failure --timeout 80; }
fig_ctest() {
  python3 - "$1" <<'EOF'
import re, sys
t = open(sys.argv[1], errors="replace").read()
if "No tests were found" in t:
    print("no such test in this build;")
    sys.exit()
m = re.findall(r"(\d+) tests failed out of (\d+)", t)
if not m and re.search(r"^skip: ", t, re.M):
    sys.exit()  # the stage skipped before ctest (it says why)
bad = re.findall(r"^\s*\d+ - (\S+) \((Failed|Timeout|Not Run|SEGFAULT|Exception)[^)]*\)", t, re.M)
skip = re.findall(r"^\s*\d+ - (\S+) \(Skipped\)", t, re.M)
s = f"ctest: {m[-1][1]} tests, {m[-1][0]} failed" if m else "ctest: no summary"
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
do_sanitizer() {
  local tool=$1 n=0 bad=0 skipped=0 cmd
  local cs nv
  nv=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$bd/CMakeCache.txt" 2>/dev/null)
  for cs in "$(command -v compute-sanitizer)" "${nv:+$(dirname "$nv")/compute-sanitizer}" \
            /usr/local/cuda/bin/compute-sanitizer ""; do [ -n "$cs" ] && [ -x "$cs" ] && break; done
  [ -n "$cs" ] || { echo "skip: no compute-sanitizer (PATH, beside nvcc, /usr/local/cuda/bin)"; return 77; }
  while read -r cmd; do
    n=$((n + 1))
    echo "-- compute-sanitizer --tool $tool $cmd"
    eval "\"\$cs\" --tool $tool --error-exitcode 86 --print-limit 20 $cmd"
    local rc=$?
    case $rc in 0) ;; 77) skipped=$((skipped + 1)) ;; *) bad=$((bad + 1)); echo "-- exit $rc" ;; esac
  done < <(gpu_test_cmds)
  echo "sanitizer $tool: $n programs, $skipped skipped (77), $bad failed"
  [ $n -gt 0 ] && [ $bad -eq 0 ]
}
fig_sanitizer() { grep -E '^sanitizer |ERROR SUMMARY: [1-9]' "$1" | sort | uniq -c | sed 's/^ *//' | head -4; }
do_adam_device() { ctest --test-dir "$bd" -R '^test_adam_device$' --no-tests=error --output-on-failure --timeout 40; }
# zo-train NAME ARGS...: one run, its JSON lines in $out/NAME.jsonl
zt() {
  local name=$1
  shift
  echo "-- zo-train $name: $*"
  "$bd/tools/zo-train" --data "${ZO_CORPUS:-/usr/share/games/fortunes}" --nvme-path "$nvme" --no-sample \
    --log-json "$out/$name.jsonl" "$@"
}
# median tokens/s of a run's JSON lines after 2 warm-up steps
tps() {
  python3 - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("tokens_per_s") is not None]
w = rows[2:] or rows
print(f"{statistics.median(r['tokens_per_s'] for r in w):.0f}" if w else "0")
EOF
}
do_ratio_124m() {
  mkdir -p "$nvme"
  rm -f "$out"/ratio_124m-*.jsonl
  local cfg=(--config configs/gpt2-124m.json --steps 20) dev=(--device cuda)
  [ $dry -eq 1 ] && cfg=(--config configs/default.json --steps 3) dev=(--device host)
  zt ratio_124m-opt-cpu "${cfg[@]}" "${dev[@]}" || return 1
  zt ratio_124m-all-gpu "${cfg[@]}" "${dev[@]}" --offload-optimizer none || return 1
  local a b
  a=$(tps "$out/ratio_124m-opt-cpu.jsonl") b=$(tps "$out/ratio_124m-all-gpu.jsonl")
  python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); r = a / b if b else 0
print(f'ratio_124m: optimizer cpu {a:.0f} tok/s, all on the GPU {b:.0f} tok/s, ratio {r:.3f} (target >= 0.9)')
sys.exit(0 if r >= 0.9 else 1)" "$a" "$b"
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
          f"peak device {max(r.get('device_peak_bytes', 0) for r in rows) / 2**30:.1f} GiB;")
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
  ctest --test-dir "$bd" -R '^test_comm_nccl$' --no-tests=error --output-on-failure --timeout 25
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
  ctest --test-dir "$bd" -R '^python_cuda$' --no-tests=error --output-on-failure --timeout 115
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
  echo "# gpu.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(hostname)," \
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
  stage sanitizer_memcheck gpu fig_sanitizer do_sanitizer memcheck
  stage sanitizer_racecheck gpu fig_sanitizer do_sanitizer racecheck
  stage sanitizer_synccheck gpu fig_sanitizer do_sanitizer synccheck
  stage adam_device gpu fig_ctest do_adam_device
  stage ratio_124m gpu fig_ratio do_ratio_124m
  stage gpt_10b gpu fig_10b do_gpt_10b
  stage nccl_1rank gpu fig_ctest do_nccl
  stage python_cuda gpu fig_ctest do_python_cuda
fi
echo
echo "== report ($report), $((SECONDS - start)) s in all:"
cat "$out/header.txt" "$report" | tee "$out/report-full.txt"
exit $status
