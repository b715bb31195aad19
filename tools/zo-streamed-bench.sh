#!/usr/bin/env bash
# zo-streamed-bench.sh - the CPU model's step time streamed against resident, in the same run on the same machine.
# A benchmark, not a test: ctest only smoke-runs it (zo_streamed_bench_smoke), never judges its timings.
#
# The streamed model (train.model_memory "streamed", the default) holds one layer group's fp32 weights and
# gradients at a time and hands every tensor's gradient to the engine as its group ends; the resident model holds
# the whole model in fp32 and hands gradients over in the last micro-batch. The streamed path must not slow a
# model that fits down. Each repetition runs the same zo-train command twice, resident then streamed, so both
# see the same machine; the time compared is zo-train's closing "per step X ms" (forward, backward, optimizer
# step; no start-up, no validation).
#
#   ratio   = median streamed ms/step / median resident ms/step
#   verdict = PASS when ratio <= 1.05 (--limit), else FAIL (exit 1 unless --report-only)
#
# Usage: tools/zo-streamed-bench.sh [--zo-train PATH] [--config FILE] [--steps N] [--reps R] [--limit X]
#                                   [--report-only] [-- extra zo-train arguments]
# Defaults: build/tools/zo-train, configs/default.json, 100 steps, 3 repetitions, limit 1.05.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
zo_train="$root/build/tools/zo-train"
config="$root/configs/default.json"
steps=100 reps=3 limit=1.05 report_only=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --zo-train) zo_train="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --limit) limit="$2"; shift 2 ;;
    --report-only) report_only=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "zo-streamed-bench: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in steps reps; do
  case "${!v}" in ''|*[!0-9]*) echo "zo-streamed-bench: --$v: expected a whole number, got '${!v}'" >&2; exit 2 ;; esac
done
[ "$steps" -ge 1 ] || { echo "zo-streamed-bench: --steps: need at least 1" >&2; exit 2; }
[ "$reps" -ge 1 ] || { echo "zo-streamed-bench: --reps: need at least 1" >&2; exit 2; }
awk -v l="$limit" 'BEGIN { exit !(l + 0 > 0) }' || { echo "zo-streamed-bench: --limit: expected a number > 0, got '$limit'" >&2; exit 2; }
[ -x "$zo_train" ] || { echo "zo-streamed-bench: $zo_train is not an executable (build first, or --zo-train)" >&2; exit 2; }
[ -r "$config" ] || { echo "zo-streamed-bench: cannot read --config $config" >&2; exit 2; }

# run_once MODE: zo-train's "per step" milliseconds with --model-memory MODE
run_once() {
  local out per
  if ! out=$("$zo_train" --config "$config" --steps "$steps" --no-sample --model-memory "$1" "${extra[@]}" 2>&1); then
    echo "zo-streamed-bench: zo-train --model-memory $1 failed:" >&2
    printf '%s\n' "$out" | tail -20 >&2
    exit 1
  fi
  per=$(printf '%s\n' "$out" | sed -n 's/^zo-train: per step \([0-9.]*\) ms.*/\1/p' | tail -1)
  [ -n "$per" ] || { echo "zo-streamed-bench: no 'per step' line in zo-train's output ($1)" >&2; exit 1; }
  echo "$per"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "zo-streamed-bench: $zo_train --config $config --steps $steps ${extra[*]}"
echo "zo-streamed-bench: $(nproc) cores, $reps repetitions | load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
res=() str=()
for r in $(seq 1 "$reps"); do
  a=$(run_once resident) || exit 1
  b=$(run_once streamed) || exit 1
  res+=("$a") str+=("$b")
  printf 'rep %d: resident %.2f ms/step | streamed %.2f ms/step | ratio %.3f | load %s\n' "$r" "$a" "$b" \
    "$(awk -v a="$a" -v b="$b" 'BEGIN { print b / a }')" "$(cut -d' ' -f1-3 /proc/loadavg)"
done
mr=$(printf '%s\n' "${res[@]}" | median)
ms=$(printf '%s\n' "${str[@]}" | median)
awk -v mr="$mr" -v ms="$ms" -v lim="$limit" 'BEGIN {
  r = ms / mr
  printf "resident %.2f ms/step, streamed %.2f ms/step (medians) | ratio %.3f (limit %g): %s\n", mr, ms, r, lim,
         r <= lim ? "PASS" : "FAIL"
  exit r <= lim ? 0 : 3
}' && exit 0
[ "$report_only" = 1 ] && exit 0
exit 1
