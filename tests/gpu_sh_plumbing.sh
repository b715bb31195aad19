#!/usr/bin/env bash
# gpu_sh_plumbing.sh SOURCE_DIR BUILD_DIR - scripts/gpu.sh's plumbing on a machine without a GPU (`gpu.sh --dry`:
# nothing is built, the zo-train stages run a tiny config on the host device): the report holds one line per stage,
# in order, each PASS, FAIL, SKIP or TIMEOUT; no stage that needs a GPU says PASS; a hung stage is cut off at its
# bound (TIMEOUT) and the stages after it still run and report; a spent budget starts no stage. Not a test of the
# GPU stages themselves (they need a GPU). Exit 0 pass, 1 fail.
set -u
src=$1 bd=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-gpu-sh.XXXXXX")
trap 'rm -rf "$work"' EXIT
stages=(build ctest_gpu cuda_vs_host python_cuda nccl_1rank adam_device sanitizer_memcheck sanitizer_racecheck
        sanitizer_synccheck ratio_124m gpt_10b ranks_1gpu nccl_ranks)
fail=0
no() { echo "FAIL: $*"; fail=1; }
export GOMP_SPINCOUNT=10000 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# 1. every stage, dry
ZO_BUILD=$bd ZO_GPU_OUT=$work/all ZO_NVME=$work/nvme bash "$src/scripts/gpu.sh" --dry >"$work/all.out" 2>&1
rc=$?
cat "$work/all.out"
r=$work/all/report.txt
[ -f "$r" ] || { echo "FAIL: no report $r"; exit 1; }
got=$(awk '{print $1}' "$r" | tr '\n' ' ')
[ "$got" = "${stages[*]} " ] || no "report stages '$got', expected '${stages[*]} '"
awk '$2 !~ /^(PASS|FAIL|SKIP|TIMEOUT)$/ {print "FAIL: result " $2 " of " $1; bad = 1} END {exit bad}' "$r" || fail=1
awk '$3 !~ /^[0-9]+s$/ {print "FAIL: wall " $3 " of " $1; bad = 1} END {exit bad}' "$r" || fail=1
grep -q '^build  *PASS ' "$r" || no "build is not PASS (--dry of an existing build)"
grep -vE '^build ' "$r" | grep -q ' PASS ' && no "a GPU stage says PASS without a GPU"
grep -qE '^ratio_124m .*ratio [0-9.]+.*with DPU [0-9]+ tok/s \(ratio [0-9.]+' "$r" ||
  no "ratio_124m's stand-in gave no tokens/s ratios"
grep -qE '^cuda_vs_host .*max rel diff 0\.00e\+00 at step .*tier opt_cpu: equal bit for bit;.*tier param_nvme: equal' "$r" ||
  no "cuda_vs_host's stand-in (host against host) is not equal, or a tier's resume is not bit for bit"
grep -qE '^ranks_1gpu .*stage 1, 2 ranks on 1 GPU \(mpi\): 3 losses, max rel diff .*stage 3, 2 ranks.*stage 3d, 2 ranks' "$r" ||
  no "ranks_1gpu's stand-in (two ranks of the host device over mpi) gave no comparison per stage"
grep -qE '^nccl_ranks +SKIP ' "$r" || no "nccl_ranks is not SKIP without GPUs"
[ $rc -eq 0 ] || no "exit $rc with no stage FAILed or TIMEd OUT"
grep -q '^== report' "$work/all.out" || no "the report is not printed at the end"
# 2. a hung stage: cut off at its bound (2 s), the run goes on, the exit status says so; --only picks stages (in the
# script's order, whatever the order asked) and a run without build reuses the build as it is
ZO_GPU_HANG=ratio_124m ZO_GPU_BOUND_ratio_124m=2 ZO_BUILD=$bd ZO_GPU_OUT=$work/hang ZO_NVME=$work/nvme \
  bash "$src/scripts/gpu.sh" --dry --only gpt_10b,ratio_124m >"$work/hang.out" 2>&1
rc=$?
cat "$work/hang/report.txt"
grep -qE '^ratio_124m +TIMEOUT +[2-9]s +cut off at 2 s' "$work/hang/report.txt" || no "the hung stage is not TIMEOUT at 2 s"
grep -qE '^gpt_10b +SKIP ' "$work/hang/report.txt" || no "the stage after the hung one did not report"
[ "$(awk '{print $1}' "$work/hang/report.txt" | tr '\n' ' ')" = "ratio_124m gpt_10b " ] ||
  no "--only gpt_10b,ratio_124m ran other stages or another order: $(cat "$work/hang/report.txt")"
bash "$src/scripts/gpu.sh" --dry --only nosuchstage >/dev/null 2>&1 && no "--only accepted an unknown stage"
[ $rc -ne 0 ] || no "exit 0 after a TIMEOUT"
# 3. a spent budget: no stage starts, each still has its line
ZO_GPU_BUDGET_S=0 ZO_BUILD=$bd ZO_GPU_OUT=$work/spent bash "$src/scripts/gpu.sh" --dry >"$work/spent.out" 2>&1
[ "$(grep -c 'TIMEOUT .*not started' "$work/spent/report.txt")" -eq ${#stages[@]} ] ||
  no "a spent budget: $(cat "$work/spent/report.txt")"
[ $fail -eq 0 ] && echo PASS
exit $fail
