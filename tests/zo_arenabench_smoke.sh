#!/usr/bin/env bash
# zo_arenabench_smoke.sh - runs zo-arenabench briefly on the host device (a small arena, two rounds) and
# checks its exit status, printed table and the JSON fields it promises (grep/sed/awk only), plus --help,
# bad flags, and --device cuda (77 with "no CUDA device" on a machine without a GPU). It checks the tool
# works and reports; it does not judge the figures.
# usage: zo_arenabench_smoke.sh ZO_ARENABENCH_BINARY SCRATCH_PARENT_DIR
set -u
bin=${1:?usage: zo_arenabench_smoke.sh BIN DIR}
parent=${2:?usage: zo_arenabench_smoke.sh BIN DIR}
[ -x "$bin" ] || { echo "SKIP: $bin not built"; exit 77; }
dir=$(mktemp -d "$parent/arenabench-smoke.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "$0:${BASH_LINENO[0]}: FAIL: $*"; fails=$((fails + 1)); }

# 1. --help names every flag and exits 0.
help=$("$bin" --help) || fail "--help exited $?"
for flag in --device --capacity --rounds --no-vmm --json --help; do
  grep -q -- "$flag" <<<"$help" || fail "--help does not mention $flag"
done

# 2. Bad flags: exit 2 with a message naming the flag.
"$bin" --device gpu >/dev/null 2>"$dir/err"; rc=$?
[ "$rc" -eq 2 ] || fail "--device gpu exited $rc, want 2"
grep -q -- "--device" "$dir/err" || fail "--device gpu: no message naming --device: $(cat "$dir/err")"
"$bin" --capacity banana >/dev/null 2>"$dir/err"; rc=$?
[ "$rc" -eq 2 ] || fail "--capacity banana exited $rc, want 2"
grep -q -- "--capacity" "$dir/err" || fail "--capacity banana: no message naming --capacity"

# 3. --device cuda: 77 and "no CUDA device" without a GPU; with one, a run (not judged here beyond exit 0).
"$bin" --device cuda --capacity 64M --rounds 1 --no-vmm >"$dir/cuda.out" 2>"$dir/cuda.err"; rc=$?
if [ "$rc" -eq 77 ]; then
  grep -q "no CUDA device" "$dir/cuda.err" || fail "--device cuda exited 77 without 'no CUDA device': $(cat "$dir/cuda.err")"
elif [ "$rc" -ne 0 ]; then
  fail "--device cuda exited $rc: $(cat "$dir/cuda.err")"
fi

# 4. A brief host run with JSON.
json="$dir/ab.json"
out=$("$bin" --device host --capacity 8M --rounds 2 --json "$json" 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || fail "host run exited $rc"
[ -s "$json" ] || { fail "no JSON written"; echo "$fails failure(s)"; exit 1; }
for name in half pinholes; do
  grep -Eq "^$name +2 +[1-9]" <<<"$out" || fail "no table line for scenario $name with compactions"
done
for key in device device_name capacity rounds compact_s_per_gb baseline_s_per_gb ratio scenarios vmm definitions; do
  grep -q "^  \"$key\": " "$json" || fail "JSON lacks top-level \"$key\""
done
grep -q '^  "device": "host"' "$json" || fail "device is not \"host\""
grep -q '^  "capacity": 8388608,' "$json" || fail "capacity is not 8388608"
grep -q '^  "vmm": null' "$json" || fail "vmm is not null on the host device"
for key in compact_s_per_gb baseline_s_per_gb ratio; do
  v=$(sed -n "s/^  \"$key\": \\([^,]*\\),*\$/\\1/p" "$json")
  awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || fail "\"$key\" is '$v', want a positive number"
done
# Per scenario: every field, and positive bytes moved, copies and rates.
for key in name rounds allocs compactions fragmentation_before bytes_moved copies mean_copy_bytes compact_seconds \
  compact_s_per_gb compact_gbps baseline_gbps baseline_s_per_gb ratio ok; do
  n=$(grep -c "^      \"$key\": " "$json")
  [ "$n" -eq 2 ] || fail "\"$key\" in $n scenario(s), want 2"
done
for key in compactions bytes_moved copies compact_gbps baseline_gbps; do
  sed -n "s/^      \"$key\": \\([^,]*\\),*\$/\\1/p" "$json" | while read -r v; do
    awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || echo "bad"
  done | grep -q bad && fail "a scenario's \"$key\" is not positive"
done
[ "$(grep -c '"ok": true' "$json")" -eq 2 ] || fail "not both scenarios ok"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "PASS"
exit 0
