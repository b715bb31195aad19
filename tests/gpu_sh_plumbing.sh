#!/usr/bin/env bash
# gpu_sh_plumbing.sh SOURCE_DIR BUILD_DIR - scripts/gpu.sh's plumbing on a machine without a GPU (`gpu.sh --dry`:
# nothing is built, the zo-train stages run a tiny config on the host device): the default group's bounds fit the
# 480 s budget; the report holds one line per stage, in order, each PASS, FAIL, SKIP or TIMEOUT; no stage that needs a
# GPU says PASS; each measuring stage's figures are there (tokens/s, the breakdown, the limit ratio against its
# target, the machine's rates, the arena's); with a zo-train that offers --cuda-kernels (a wrapper) perf_124m and
# cuda_vs_host run and report both kernel sets and parse the "kernels:" line; a hung stage is cut off at its bound
# (TIMEOUT) and the stages after it still run and report; a spent budget starts no stage. Not a test of the GPU
# stages themselves (they need a GPU). Exit 0 pass, 1 fail.
set -u
src=$1 bd=$2 part=${3:-all}
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-gpu-sh.XXXXXX")
trap 'rm -rf "$work"' EXIT
# the default group and the second (--all), in the script's order
defaults=(build perf_124m cuda_vs_host ctest_gpu machine_rates gpt_10b gpt_10b_nvme python_cuda sanitizer_memcheck
          nccl_1rank arena_gpu)
stages=(build perf_124m cuda_vs_host ctest_gpu machine_rates gpt_10b gpt_10b_nvme gpt_10b_infinity python_cuda
        sanitizer_memcheck nccl_1rank arena_gpu sanitizer_racecheck sanitizer_synccheck torch_nccl wheel_cuda
        onednn_bf16 ratio_124m adam_device ranks_1gpu nccl_ranks)
fail=0
no() { echo "FAIL: $*"; fail=1; }
export GOMP_SPINCOUNT=10000 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if [ "$part" = kernel-sets ]; then
# 1b. a zo-train that offers --cuda-kernels (a wrapper of the real one: it takes the flag, refuses a bad set, and
# prints a "kernels:" line per set): perf_124m and cuda_vs_host run both sets and report each
mkdir -p "$work/wrap/tools"
cat >"$work/wrap/tools/zo-train" <<EOF
#!/usr/bin/env bash
ks= args=()
while [ \$# -gt 0 ]; do
  case \$1 in
    --help) "$bd/tools/zo-train" --help; echo "  --cuda-kernels SET       baseline|fused"; exit 0 ;;
    --cuda-kernels) ks=\$2; shift ;;
    *) args+=("\$1") ;;
  esac
  shift
done
case \$ks in '' | baseline | fused) ;; *) echo "zo-train: --cuda-kernels: '\$ks'" >&2; exit 2 ;; esac
echo "\${ks:-none}" >>"$work/wrap/sets"
"$bd/tools/zo-train" "\${args[@]}" || exit
case \$ks in
  baseline) echo "kernels: gemm 20.5 ms attention 30.25 ms other 12.0 ms (per step, CUDA events)" ;;
  fused) echo "kernels: gemm 15.5 ms attention 4.75 ms other 3.0 ms (per step, CUDA events)" ;;
esac
EOF
chmod +x "$work/wrap/tools/zo-train"
ZO_BUILD=$work/wrap ZO_GPU_OUT=$work/ks ZO_NVME=$work/nvme bash "$src/scripts/gpu.sh" --dry --only perf_124m,cuda_vs_host \
  >"$work/ks.out" 2>&1 || no "the two kernel sets' dry run failed: $(tail -5 "$work/ks.out")"
cat "$work/ks/report.txt"
grep -qE '^perf_124m .*baseline [0-9]+ tok/s, MFU n/a, kernels a step: gemm 20.5 ms, attention 30.25 ms, other 12.0 ms;.*fused [0-9]+ tok/s, MFU n/a, kernels a step: gemm 15.5 ms, attention 4.75 ms, other 3.0 ms;.*fused over baseline [0-9.]+x tok/s' "$work/ks/report.txt" ||
  no "perf_124m did not report each kernel set's kernels line and the speed-up"
grep -qE '^cuda_vs_host .*\[baseline\] max rel diff 0\.00e\+00 .*tier param_nvme: equal bit for bit;.*\[fused\] max rel diff 0\.00e\+00 .*tier param_nvme: equal bit for bit;' "$work/ks/report.txt" ||
  no "cuda_vs_host did not compare and resume with each kernel set"
# perf_124m: one run a set; cuda_vs_host: the host run without the flag, then per set the cuda run and 3 tiers x 2
[ "$(sort "$work/wrap/sets" | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ')" = "baseline=8 fused=8 none=1 " ] ||
  no "zo-train's runs by kernel set: $(sort "$work/wrap/sets" | uniq -c | tr '\n' ' ')"
[ $fail -eq 0 ] && echo PASS
exit $fail
fi
# 0. the default group's bounds fit the default budget (8 minutes: the lent GPU's 15 include its start-up)
list=$(bash "$src/scripts/gpu.sh" --list)
[ "$(echo "$list" | awk '$2 == "default" {print $1}' | tr '\n' ' ')" = "${defaults[*]} " ] ||
  no "--list's default group: $(echo "$list" | awk '$2 == "default" {print $1}' | tr '\n' ' ')"
sum=$(echo "$list" | awk '$2 == "default" {s += $3} END {print s}')
[ "$sum" -le 480 ] || no "the default group's bounds add up to $sum s, more than 480"
echo "$list" | grep -q "^default group: $sum s of bounds; budget 480 s\$" || no "--list's sum line: $(echo "$list" | tail -1)"
# 1. every stage, dry (no wheel carried: wheel_cuda skips)
ZO_BUILD=$bd ZO_GPU_OUT=$work/all ZO_NVME=$work/nvme ZO_WHEEL= bash "$src/scripts/gpu.sh" --dry --all >"$work/all.out" 2>&1
rc=$?
cat "$work/all.out"
r=$work/all/report.txt
[ -f "$r" ] || { echo "FAIL: no report $r"; exit 1; }
got=$(awk '{print $1}' "$r" | tr '\n' ' ')
[ "$got" = "${stages[*]} " ] || no "report stages '$got', expected '${stages[*]} '"
awk '$2 !~ /^(PASS|FAIL|SKIP|TIMEOUT)$/ {print "FAIL: result " $2 " of " $1; bad = 1} END {exit bad}' "$r" || fail=1
awk '$3 !~ /^[0-9]+s$/ {print "FAIL: wall " $3 " of " $1; bad = 1} END {exit bad}' "$r" || fail=1
grep -q '^build  *PASS ' "$r" || no "build is not PASS (--dry of an existing build)"
# the stages that need no GPU: build (listed), the machine's rates, oneDNN's products on the CPU
for s in machine_rates onednn_bf16; do grep -qE "^$s +PASS " "$r" || no "$s (no GPU needed) is not PASS"; done
grep -vE '^(build|machine_rates|onednn_bf16) ' "$r" | grep -q ' PASS ' && no "a GPU stage says PASS without a GPU"
grep -qE '^ratio_124m .*ratio [0-9.]+.*with DPU [0-9]+ tok/s \(ratio [0-9.]+' "$r" ||
  no "ratio_124m's stand-in gave no tokens/s ratios"
grep -qE '^perf_124m .*SKIP .* [0-9]+ tok/s, MFU n/a, kernels n/a \(zo-train printed no .kernels:. line\);' "$r" ||
  no "perf_124m's stand-in gave no tokens/s, or not 'n/a' for the missing MFU and kernels line"
grep -qE '^cuda_vs_host .*max rel diff 0\.00e\+00 at step .*tier opt_cpu: equal bit for bit;.*tier param_nvme: equal' "$r" ||
  no "cuda_vs_host's stand-in (host against host) is not equal, or a tier's resume is not bit for bit"
grep -qE '^machine_rates .*Adam adamw_bf16g_out_bf16s [0-9.]+ GB/s.*NVMe read [0-9.]+ GB/s, write [0-9.]+ GB/s' "$r" ||
  no "machine_rates gave no Adam or NVMe rates"
for s in gpt_10b gpt_10b_nvme gpt_10b_infinity; do
  grep -qE "^$s .*steps 4, loss .*; steps 3-4: [0-9.]+ ms = compute [0-9.]+ \+ exposed: fetch .*adam [0-9.]+, swap [0-9.]+\); limit ratio [0-9.]+ \(bound [0-9.]+ s, [a-z]+" "$r" ||
    no "$s's stand-in gave no breakdown or limit ratio"
done
grep -qE '^gpt_10b .*target >= 0\.8: (met|not met)' "$r" || no "gpt_10b's limit ratio is not set against 0.8"
grep -qE '^gpt_10b_nvme .*target >= 0\.6: (met|not met)' "$r" || no "gpt_10b_nvme's limit ratio is not set against 0.6"
grep -qE '^arena_gpu .*half: compaction [0-9.]+ GB/s against plain D2D [0-9.]+ GB/s.*allocations \(d_model [0-9]+, 576 pairs\): arena [0-9.]+ us a pair, cuMemAlloc n/a, cuMemAllocAsync pool n/a' "$r" ||
  no "arena_gpu's stand-in gave no compaction or allocation-trace figures"
grep -qE '^wheel_cuda +SKIP .*no wheel carried' "$r" || no "wheel_cuda without ZO_WHEEL is not SKIP saying why"
grep -qE '^ranks_1gpu .*stage 1, 2 ranks on 1 GPU \(mpi\): 3 losses, max rel diff .*stage 3, 2 ranks.*stage 3d, 2 ranks' "$r" ||
  no "ranks_1gpu's stand-in (two ranks of the host device over mpi) gave no comparison per stage"
grep -qE '^nccl_ranks +SKIP ' "$r" || no "nccl_ranks is not SKIP without GPUs"
[ $rc -eq 0 ] || no "exit $rc with no stage FAILed or TIMEd OUT"
grep -q '^== report' "$work/all.out" || no "the report is not printed at the end"
# 2. a hung stage: cut off at its bound (2 s), the run goes on, the exit status says so; --only picks stages (in the
# script's order, whatever the order asked) and a run without build reuses the build as it is
ZO_GPU_HANG=gpt_10b ZO_GPU_BOUND_gpt_10b=2 ZO_BUILD=$bd ZO_GPU_OUT=$work/hang ZO_NVME=$work/nvme \
  bash "$src/scripts/gpu.sh" --dry --only ratio_124m,gpt_10b >"$work/hang.out" 2>&1
rc=$?
cat "$work/hang/report.txt"
grep -qE '^gpt_10b +TIMEOUT +[2-9]s +cut off at 2 s' "$work/hang/report.txt" || no "the hung stage is not TIMEOUT at 2 s"
grep -qE '^ratio_124m +SKIP ' "$work/hang/report.txt" || no "the stage after the hung one did not report"
[ "$(awk '{print $1}' "$work/hang/report.txt" | tr '\n' ' ')" = "gpt_10b ratio_124m " ] ||
  no "--only ratio_124m,gpt_10b ran other stages or another order: $(cat "$work/hang/report.txt")"
bash "$src/scripts/gpu.sh" --dry --only nosuchstage >/dev/null 2>&1 && no "--only accepted an unknown stage"
[ $rc -ne 0 ] || no "exit 0 after a TIMEOUT"
# 3. a spent budget: no stage starts, each still has its line
ZO_GPU_BUDGET_S=0 ZO_BUILD=$bd ZO_GPU_OUT=$work/spent bash "$src/scripts/gpu.sh" --dry >"$work/spent.out" 2>&1
[ "$(grep -c 'TIMEOUT .*not started' "$work/spent/report.txt")" -eq ${#defaults[@]} ] ||
  no "a spent budget: $(cat "$work/spent/report.txt")"
[ "$(awk '{print $1}' "$work/spent/report.txt" | tr '\n' ' ')" = "${defaults[*]} " ] ||
  no "without --all the stages are not the default group: $(awk '{print $1}' "$work/spent/report.txt" | tr '\n' ' ')"
[ $fail -eq 0 ] && echo PASS
exit $fail
