#!/usr/bin/env bash
# tools_flags.sh ZO_TRAIN ZO_STEPBENCH ZO_ADAMBENCH ZO_ARENABENCH ZO_REPORT CONFIG - the tools' command
# lines: a mistyped flag gets one error line naming the nearest flag (no usage dump), exit 2; a prefix of
# several flags, a flag without its value and a value given to a switch each get their own line; every
# byte-size flag of zo-train takes a size with a unit (80G) and refuses junk naming the flag.
# Exit 0 pass, 1 fail.
set -u
train=$1 stepbench=$2 adambench=$3 arenabench=$4 report=$5 cfg=$6 swapbench=$7
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-flags.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# expect NAME WANT BIN ARGS...: BIN ARGS exits 2 and its stderr is the single line WANT (fixed string).
expect() {
  local name=$1 want=$2 bin=$3
  shift 3
  timeout -k 10 60 "$bin" "$@" >"$work/out" 2>"$work/err"
  local rc=$? n
  n=$(wc -l <"$work/err")
  if [ $rc -ne 2 ] || [ "$n" -ne 1 ] || [ "$(cat "$work/err")" != "$want" ] || [ -s "$work/out" ]; then
    echo "FAIL $name: rc=$rc (want 2), $n stderr lines (want 1: '$want'); stderr, then stdout:"
    cat "$work/err" "$work/out" | head -5
    failures=$((failures + 1))
  else
    echo "ok   $name: $want"
  fi
}
for t in "zo-train:$train" "zo-stepbench:$stepbench" "zo-adambench:$adambench" \
         "zo-arenabench:$arenabench" "zo-report:$report"; do
  name=${t%%:*} bin=${t#*:}
  if [ "$name" = zo-train ]; then typo=--log-jsn flag=--log-json; else typo=--jsn flag=--json; fi
  expect "$name $typo" "$name: error: unknown flag $typo; did you mean $flag? ($name --help lists the flags)" \
    "$bin" $typo x
  expect "$name --hlep=1" "$name: error: unknown flag --hlep; did you mean --help? ($name --help lists the flags)" \
    "$bin" --hlep=1
  expect "$name --zzzzzz" "$name: error: unknown flag --zzzzzz ($name --help lists the flags)" "$bin" --zzzzzz
  expect "$name --help=x" "$name: error: --help takes no value ($name --help lists the flags)" "$bin" --help=x
done
t="zo-train: error:"
h="(zo-train --help lists the flags)"
expect "zo-train --print-evry" "$t unknown flag --print-evry; did you mean --print-every? $h" "$train" --print-evry 5
expect "zo-train --stpes" "$t unknown flag --stpes; did you mean --steps? $h" "$train" --stpes 5
expect "zo-train -steps" "$t unknown flag -steps; did you mean --steps? $h" "$train" -steps 5
expect "zo-train -q" "$t unknown flag -q $h" "$train" -q
expect "zo-train --steps (no value)" "$t --steps needs a value $h" "$train" --steps
expect "zo-train --sa" "$t flag --sa is ambiguous: --save, --save-every $h" "$train" --sa x
expect "zo-stepbench --steps (no value)" "zo-stepbench: error: --steps needs a value (zo-stepbench --help lists the flags)" \
  "$stepbench" --steps
expect "zo-swapbench --pth" \
  "zo-swapbench: error: unknown flag --pth; did you mean --path? (zo-swapbench --help lists the flags)" "$swapbench" --pth /tmp
expect "zo-swapbench --path (no value)" \
  "zo-swapbench: error: --path needs a value (zo-swapbench --help lists the flags)" "$swapbench" --path
expect "zo-arenabench --rounds (no value)" \
  "zo-arenabench: error: --rounds needs a value (zo-arenabench --help lists the flags)" "$arenabench" --rounds

# byte sizes: 80G is 80 x 2^30 in the plan, junk is refused naming the flag
out=$(timeout -k 10 120 "$train" --config "$cfg" --no-sample --dry-run --device-memory-limit 80G 2>&1)
rc=$?
if [ $rc -ne 0 ] || ! grep -q '^device .* 85899345920 .*limit 80.0 GiB' <<<"$out"; then
  echo "FAIL --device-memory-limit 80G --dry-run: rc=$rc, no device line with 85899345920 available bytes:"
  grep -E '^device|error' <<<"$out" | head -5
  failures=$((failures + 1))
else
  echo "ok   --device-memory-limit 80G --dry-run: $(grep -m1 '^device ' <<<"$out" | tr -s ' ')"
fi
for a in "--device-memory-limit 512MiB" "--assume-host-memory 64G" "--assume-nvme-free 2T" "--device-memory-limit 85899345920"; do
  # shellcheck disable=SC2086
  timeout -k 10 120 "$train" --config "$cfg" --no-sample --dry-run $a >"$work/out" 2>&1
  rc=$?
  # a fit or a refusal of the plan (1) is fine; a bad flag value (2) is not
  if [ $rc -eq 2 ] || grep -q "error: ${a%% *}" "$work/out"; then
    echo "FAIL $a: refused as a flag value (rc $rc): $(grep error "$work/out" | head -2)"
    failures=$((failures + 1))
  else
    echo "ok   $a: accepted (dry run exit $rc)"
  fi
done
expect "--device-memory-limit 80X" \
  "$t --device-memory-limit: expected a byte size >= 0 (an integer, or with a unit: 80G, 512MiB = powers of 1024, 1GB = 10^9), got '80X'" \
  "$train" --device-memory-limit 80X
expect "--device-memory-limit 1e9" \
  "$t --device-memory-limit: expected a byte size >= 0 (an integer, or with a unit: 80G, 512MiB = powers of 1024, 1GB = 10^9), got '1e9'" \
  "$train" --device-memory-limit 1e9
expect "zo-stepbench --device-limit 1e9" "zo-stepbench: --device-limit: bad value '1e9' (see --help)" \
  "$stepbench" --device-limit 1e9
expect "--assume-host-memory -1G" \
  "$t --assume-host-memory: expected a byte size >= 1 (an integer, or with a unit: 80G, 512MiB = powers of 1024, 1GB = 10^9), got '-1G'" \
  "$train" --assume-host-memory -1G
[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all passed"
