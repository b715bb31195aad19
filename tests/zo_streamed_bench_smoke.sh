#!/usr/bin/env bash
# zo_streamed_bench_smoke.sh - tools/zo-streamed-bench.sh runs end to end (3 steps of the tiny config, one
# repetition) and prints its verdict line; a bad argument is refused. No timing is judged.
# Usage: zo_streamed_bench_smoke.sh <zo-train>
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench="$here/../tools/zo-streamed-bench.sh"
out=$(bash "$bench" --zo-train "$1" --config "$here/configs/tiny.json" --steps 3 --reps 1 --report-only 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" = 0 ] || { echo "FAIL: the benchmark exited $rc"; exit 1; }
for want in '^rep 1: resident [0-9.]* ms/step | streamed [0-9.]* ms/step | ratio [0-9.]*' \
            '(medians) | ratio [0-9.]* (limit 1.05): \(PASS\|FAIL\)$'; do
  printf '%s\n' "$out" | grep -q "$want" || { echo "FAIL: no line matching '$want'"; exit 1; }
done
err=$(bash "$bench" --zo-train "$1" --reps 0 2>&1); rc=$?
[ "$rc" = 2 ] && printf '%s' "$err" | grep -q -- "--reps: need at least 1" ||
  { echo "FAIL: --reps 0: exit $rc, '$err'"; exit 1; }
echo "zo_streamed_bench_smoke: ok"
