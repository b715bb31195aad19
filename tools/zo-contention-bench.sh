#!/usr/bin/env bash
# zo-contention-bench.sh - zo-train's step time with and without N busy neighbour processes on the same cores.
# A benchmark, not a test: ctest only smoke-runs it (zo_contention_bench_smoke), never judges its timings.
#
# Each repetition runs the same zo-train command twice, once on an otherwise idle machine and once beside N
# processes of `sh -c 'while :; do :; done'` (started before, killed by PID after). The time compared is the
# training loop's: zo-train's closing "per step X ms" (forward, backward and optimizer step; no startup, no
# validation) times the step count; the process's wall time is printed beside it.
#
#   fair share  = (N + cores) / cores
#     zo-train runs `cores` compute threads; with N always-runnable neighbours the scheduler gives each of the
#     N + cores threads cores / (N + cores) of a core, so a program that scales with its cores slows down by
#     (N + cores) / cores. 3 neighbours on 2 cores: 2.5.
#   slowdown    = median busy step time / median idle step time
#   verdict     = PASS when slowdown / fair share <= 2 (--limit), else FAIL (exit 1 unless --report-only)
#
# Usage: tools/zo-contention-bench.sh [--zo-train PATH] [--config FILE] [--steps N] [--busy N] [--reps R]
#                                     [--limit X] [--report-only] [-- extra zo-train arguments]
# Defaults: build/tools/zo-train, tests/configs/tiny.json, 40 steps, 3 neighbours, 3 repetitions, limit 2.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
zo_train="$root/build/tools/zo-train"
config="$root/tests/configs/tiny.json"
steps=40 busy=3 reps=3 limit=2 report_only=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --zo-train) zo_train="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --busy) busy="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --limit) limit="$2"; shift 2 ;;
    --report-only) report_only=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "zo-contention-bench: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in steps busy reps; do
  case "${!v}" in ''|*[!0-9]*) echo "zo-contention-bench: --$v: expected a whole number, got '${!v}'" >&2; exit 2 ;; esac
done
[ "$steps" -ge 1 ] || { echo "zo-contention-bench: --steps: need at least 1" >&2; exit 2; }
[ "$reps" -ge 1 ] || { echo "zo-contention-bench: --reps: need at least 1" >&2; exit 2; }
[ -x "$zo_train" ] || { echo "zo-contention-bench: $zo_train is not an executable (build first, or --zo-train)" >&2; exit 2; }
[ -r "$config" ] || { echo "zo-contention-bench: cannot read --config $config" >&2; exit 2; }
cores=$(nproc)

pids=()
stop_busy() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_busy EXIT
trap 'exit 130' INT TERM

# run_once LABEL: runs zo-train, prints "step_seconds wall_seconds"
run_once() {
  local out t0 t1 per
  t0=$(date +%s.%N)
  if ! out=$("$zo_train" --config "$config" --steps "$steps" "${extra[@]}" 2>&1); then
    echo "zo-contention-bench: zo-train failed ($1):" >&2
    printf '%s\n' "$out" | tail -20 >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  per=$(printf '%s\n' "$out" | sed -n 's/^zo-train: per step \([0-9.]*\) ms.*/\1/p' | tail -1)
  [ -n "$per" ] || { echo "zo-contention-bench: no 'per step' line in zo-train's output ($1)" >&2; printf '%s\n' "$out" | tail -5 >&2; exit 1; }
  # "per step" is the loop's time (every step, validation left out) over the step count
  awk -v p="$per" -v n="$steps" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f %.3f\n", p * n / 1e3, b - a }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "zo-contention-bench: $zo_train --config $config --steps $steps ${extra[*]}"
echo "zo-contention-bench: $cores cores, $busy busy neighbours, $reps repetitions | load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
idle_s=() busy_s=()
for r in $(seq 1 "$reps"); do
  si= sb=
  read -r si wi < <(run_once "idle, repetition $r") || true
  [ -n "${si:-}" ] || exit 1 # run_once said why
  for _ in $(seq 1 "$busy"); do
    sh -c 'while :; do :; done' &
    pids+=($!)
  done
  sleep 0.2 # let the neighbours reach the run queue
  read -r sb wb < <(run_once "busy, repetition $r") || true
  stop_busy
  [ -n "${sb:-}" ] || exit 1
  idle_s+=("$si") busy_s+=("$sb")
  printf 'rep %d: idle %.3f s (wall %.2f s) | %d busy %.3f s (wall %.2f s) | slowdown %.2fx | load %s\n' "$r" "$si" "$wi" \
    "$busy" "$sb" "$wb" "$(awk -v a="$sb" -v b="$si" 'BEGIN { print a / b }')" "$(cut -d' ' -f1-3 /proc/loadavg)"
done
mi=$(printf '%s\n' "${idle_s[@]}" | median)
mb=$(printf '%s\n' "${busy_s[@]}" | median)
awk -v mi="$mi" -v mb="$mb" -v n="$busy" -v c="$cores" -v lim="$limit" -v steps="$steps" 'BEGIN {
  fair = (n + c) / c; slow = mb / mi; r = slow / fair
  printf "idle: %.3f s for %d steps (%.2f ms/step, median of the repetitions)\n", mi, steps, mi / steps * 1e3
  printf "busy: %.3f s for %d steps (%.2f ms/step) beside %d busy neighbours\n", mb, steps, mb / steps * 1e3, n
  printf "slowdown %.2fx | fair share (N + cores) / cores = (%d + %d) / %d = %.2fx | slowdown / fair share %.2f (limit %g): %s\n",
         slow, n, c, c, fair, r, lim, r <= lim ? "PASS" : "FAIL"
  exit r <= lim ? 0 : 3
}' && exit 0
[ "$report_only" = 1 ] && exit 0
exit 1
