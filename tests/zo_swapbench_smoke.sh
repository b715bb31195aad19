#!/usr/bin/env bash
# zo_swapbench_smoke.sh - runs `zo-swapbench --quick` on a scratch directory under the build dir and
# checks its exit status, printed report and the JSON fields (grep/sed/awk only). It checks the tool
# works and reports; it does not judge the disk's speed.
# usage: zo_swapbench_smoke.sh ZO_SWAPBENCH_BINARY SCRATCH_PARENT_DIR
set -u
bin=${1:?usage: zo_swapbench_smoke.sh BIN DIR}
parent=${2:?usage: zo_swapbench_smoke.sh BIN DIR}
[ -x "$bin" ] || { echo "SKIP: $bin not built"; exit 77; }
dir=$(mktemp -d "$parent/swapbench-smoke.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "$0:${BASH_LINENO[0]}: FAIL: $*"; fails=$((fails + 1)); }

# 1. --help names every flag and exits 0.
help=$("$bin" --help) || fail "--help exited $?"
for flag in --path --size --bytes --max-seconds --block-sizes --queue-depths --ops --reps --json --plot --quick --no-fio --fio-variants --help; do
  grep -q -- "$flag" <<<"$help" || fail "--help does not mention $flag"
done

# 2. Bad input is refused with a message, not a crash.
"$bin" --path "$dir" --size banana >/dev/null 2>"$dir/err" && fail "--size banana accepted"
grep -q "size" "$dir/err" || fail "--size banana: no message naming --size: $(cat "$dir/err")"
"$bin" --path "$dir" --block-sizes 1000 >/dev/null 2>&1 && fail "--block-sizes 1000 (not a multiple of 4K) accepted"
"$bin" --path "$dir/does-not-exist" --quick --no-fio >/dev/null 2>"$dir/err" && fail "missing --path directory accepted"
grep -q "does-not-exist" "$dir/err" || fail "missing directory not named in the error: $(cat "$dir/err")"

# 3. The quick sweep.
out=$("$bin" --path "$dir" --quick --json "$dir/sb.json") 
rc=$?
[ "$rc" -eq 0 ] || fail "--quick exited $rc"
echo "$out"
json="$dir/sb.json"
[ -s "$json" ] || { fail "no JSON written"; echo "$fails failure(s)"; exit 1; }

grep -q '"aio": {"block_size": [0-9]*, "queue_depth": [0-9]*}' <<<"$out" || fail "no \"aio\" block printed"
grep -Eq '^  (PASS|MISS|n/a) ' <<<"$out" || fail "no target lines printed"
grep -q '^Best settings:' <<<"$out" || fail "no best settings printed"

for key in '"results": \[' '"best": {' '"read": {' '"write": {' '"aio": {'; do
  grep -q "$key" "$json" || fail "JSON lacks $key"
done
for field in op engine block_size queue_depth registered_buffers sqpoll gbps; do
  grep -q "\"$field\":" "$json" || fail "JSON results lack \"$field\""
done
# --quick: 2 block sizes x 2 queue depths x 2 ops per engine (times ring variants for zoffload).
n_zo=$(grep -c '"engine": "zoffload"' "$json")
n_pr=$(grep -c '"engine": "pread"' "$json")
[ "$n_zo" -ge 8 ] || fail "zoffload results: $n_zo, want >= 8"
[ "$n_pr" -ge 8 ] || fail "pread results: $n_pr, want >= 8"
if command -v fio >/dev/null 2>&1; then
  n_fio=$(grep -c '"engine": "fio"' "$json")
  [ "$n_fio" -ge 8 ] || fail "fio is installed but fio results: $n_fio, want >= 8"
fi
grep -q '"op": "read"' "$json" || fail "no read results"
grep -q '"op": "write"' "$json" || fail "no write results"
grep -q '"ok": false' "$json" && fail "a measurement failed: $(grep -m1 '"note"' "$json")"
# Every throughput is a positive number.
bad=$(sed -n 's/^ *"gbps": \(.*\),*$/\1/p' "$json" | tr -d ',' | awk '!($1 > 0) {print}' | head -1)
n_g=$(grep -c '"gbps":' "$json")
[ "$n_g" -ge 16 ] || fail "only $n_g gbps fields"
[ -z "$bad" ] || fail "a gbps value is not positive: '$bad'"
# The best entries are zoffload's and carry a block size and a queue depth from the sweep.
best_bs=$(sed -n '/"best": {/,$p' "$json" | sed -n 's/^ *"block_size": \([0-9]*\),*$/\1/p' | head -1)
case "$best_bs" in 131072 | 1048576) ;; *) fail "best block_size '$best_bs' is not one of the --quick sizes" ;; esac

# 4. The private directory is gone after the run.
left=$(find "$dir" -maxdepth 1 -name 'zoffload-*' | head -1)
[ -z "$left" ] || fail "private swap directory left behind: $left"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "PASS"
exit 0
