#!/usr/bin/env bash
# zo_contention_bench_smoke.sh - tools/zo-contention-bench.sh runs end to end (2 steps of the tiny config, one busy
# neighbour, one repetition) and prints its verdict line; a bad argument is refused. No timing is judged.
# Usage: zo_contention_bench_smoke.sh <zo-train>
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench="$here/../tools/zo-contention-bench.sh"
out=$(bash "$bench" --zo-train "$1" --steps 2 --busy 1 --reps 1 --report-only 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" = 0 ] || { echo "FAIL: the benchmark exited $rc"; exit 1; }
for want in '^rep 1: idle [0-9.]* s' '^idle: ' '^busy: ' 'fair share (N + cores) / cores = (1 + [0-9]*) / [0-9]* = ' \
            'slowdown / fair share [0-9.]* (limit 2): \(PASS\|FAIL\)$'; do
  printf '%s\n' "$out" | grep -q "$want" || { echo "FAIL: no line matching '$want'"; exit 1; }
done
err=$(bash "$bench" --zo-train "$1" --steps x 2>&1); rc=$?
[ "$rc" = 2 ] && printf '%s' "$err" | grep -q -- "--steps: expected a whole number, got 'x'" ||
  { echo "FAIL: --steps x: exit $rc, '$err'"; exit 1; }
echo "zo_contention_bench_smoke: ok"
