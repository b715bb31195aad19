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
for flag in --path --size --bytes --max-seconds --block-sizes --queue-depths --ops --repeat --reps --stripe-size --json --plot --quick --no-fio --fio-variants --device --help; do
  grep -q -- "$flag" <<<"$help" || fail "--help does not mention $flag"
done

# 2. Bad input is refused with a message, not a crash.
"$bin" --path "$dir" --size banana >/dev/null 2>"$dir/err" && fail "--size banana accepted"
grep -q "size" "$dir/err" || fail "--size banana: no message naming --size: $(cat "$dir/err")"
"$bin" --path "$dir" --block-sizes 1000 >/dev/null 2>&1 && fail "--block-sizes 1000 (not a multiple of 4K) accepted"
# A queue depth the measurement cannot use is refused before anything is allocated (it grew to 7.9 GB of
# pread buffers and threads on a 16 MiB file); bounded by ulimit -v and timeout so a regression fails, not hangs.
(ulimit -v 2000000; timeout 30 "$bin" --path "$dir" --quick --no-fio --ops read --queue-depths 32768) \
  >/dev/null 2>"$dir/err"
rc=$?
[ "$rc" -eq 2 ] || fail "--queue-depths 32768 on a 16 MiB file: exit $rc, want 2 (refused): $(tail -3 "$dir/err")"
grep -q -- "--queue-depths: 32768" "$dir/err" || fail "--queue-depths 32768: no message naming it: $(tail -3 "$dir/err")"
"$bin" --path "$dir/does-not-exist" --quick --no-fio >/dev/null 2>"$dir/err" && fail "missing --path directory accepted"
grep -q "does-not-exist" "$dir/err" || fail "missing directory not named in the error: $(cat "$dir/err")"
"$bin" --path "$dir" --quick --no-fio --device gpu >/dev/null 2>"$dir/err" && fail "--device gpu accepted"
grep -q -- "--device" "$dir/err" || fail "--device gpu: no message naming --device: $(cat "$dir/err")"

# 3. The quick sweep.
out=$("$bin" --path "$dir" --quick --json "$dir/sb.json") 
rc=$?
[ "$rc" -eq 0 ] || fail "--quick exited $rc"
echo "$out"
json="$dir/sb.json"
[ -s "$json" ] || { fail "no JSON written"; echo "$fails failure(s)"; exit 1; }

grep -q '"aio": {"block_size": [0-9]*, "queue_depth": [0-9]*}' <<<"$out" || fail "no \"aio\" block printed"
grep -Eq '^op +bs +qd +engine +GB/s +min-max +IOPS +p50 us +p99 us +p99.9 us +CPU s/GB' <<<"$out" ||
  fail "no table header with IOPS, latency percentiles and CPU"
# a row: median GB/s, min-max, IOPS, three latencies and CPU s/GB, all numbers
grep -Eq '^read +128K +8 zoffload +[0-9.]+ +[0-9.]+-[0-9.]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+$' <<<"$out" ||
  fail "no complete zoffload read row"
grep -iq 'issue\|target' <<<"$out" && fail "development notes in the report: $(grep -i 'issue\|target' <<<"$out" | head -2)"
if command -v fio >/dev/null 2>&1; then
  grep -q '^Compared with fio' <<<"$out" || fail "no comparison with fio"
  grep -Eq '^read +128K +8 fio +[0-9.]+ +[0-9.]+-[0-9.]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+$' <<<"$out" ||
    fail "no complete fio read row"
fi
grep -q '^Best settings:' <<<"$out" || fail "no best settings printed"

for key in '"results": \[' '"best": {' '"read": {' '"write": {' '"aio": {'; do
  grep -q "$key" "$json" || fail "JSON lacks $key"
done
for field in op engine block_size queue_depth registered_buffers sqpoll gbps gbps_min gbps_max iops latency_us p50 p99 p99_9 cpu_s_per_gb reps; do
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

# The link limit and the NVMe -> pinned -> device read pass (host device here: copies at memcpy speed).
for key in '"device": {' '"kind": "host"' '"link_limit": {' '"nvme_to_device": {' '"ran": true'; do
  grep -q "$key" "$json" || fail "JSON lacks $key"
done
for key in h2d_gbps d2h_gbps duplex_gbps duplex_h2d_gbps duplex_d2h_gbps; do
  v=$(sed -n '/^  "link_limit": {/,/^  }/p' "$json" | sed -n "s/^    \"$key\": \\([^,]*\\),*\$/\\1/p")
  awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || fail "link_limit.$key is '$v', want a positive number"
done
for key in achieved_gbps limit_gbps ratio disk_read_gbps h2d_limit_gbps chunk_bytes bytes; do
  v=$(sed -n '/^  "nvme_to_device": {/,/^  }/p' "$json" | sed -n "s/^    \"$key\": \\([^,]*\\),*\$/\\1/p")
  awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || fail "nvme_to_device.$key is '$v', want a positive number"
done
# The pass moves the bytes of one measurement (the whole 16M file with --quick) in chunks of the link limit's size.
c1=$(sed -n '/^  "link_limit": {/,/^  }/p' "$json" | sed -n 's/^    "chunk_bytes": \([0-9]*\),*$/\1/p')
c2=$(sed -n '/^  "nvme_to_device": {/,/^  }/p' "$json" | sed -n 's/^    "chunk_bytes": \([0-9]*\),*$/\1/p')
[ -n "$c1" ] && [ "$c1" = "$c2" ] || fail "link_limit.chunk_bytes '$c1' differs from nvme_to_device.chunk_bytes '$c2'"
b=$(sed -n '/^  "nvme_to_device": {/,/^  }/p' "$json" | sed -n 's/^    "bytes": \([0-9]*\),*$/\1/p')
[ "$b" = "16777216" ] || fail "nvme_to_device.bytes is '$b', want 16777216"
grep -Eq '^  link limit \(.*H2D [0-9.]+ GB/s, D2H [0-9.]+ GB/s, full duplex' <<<"$out" || fail "no link limit line printed"
grep -Eq '^  [0-9.]+ GB/s: [0-9]+ bytes in .* of min\(disk read' <<<"$out" || fail "no read pass line printed"

# --device cuda: 77 with "no CUDA device" without a GPU (this machine, usually); 0 with one.
out3=$("$bin" --path "$dir" --quick --no-fio --ops read --device cuda --json "$dir/cuda.json" 2>&1)
rc=$?
case $rc in
  77) grep -q "no CUDA device" <<<"$out3" || fail "--device cuda exited 77 without saying \"no CUDA device\": $out3" ;;
  0) grep -q '"kind": "cuda"' "$dir/cuda.json" || fail "--device cuda run: JSON device kind is not \"cuda\"" ;;
  *) echo "$out3"; fail "--device cuda exited $rc, want 77 (no GPU) or 0" ;;
esac

# Two paths: each alone, then the files striped across both (zoffload only there), and the summary.
mkdir -p "$dir/a" "$dir/b"
out2=$("$bin" --path "$dir/a" --path "$dir/b" --quick --no-fio --ops read --block-sizes 128K \
  --queue-depths 8 --repeat 1 --json "$dir/st.json" 2>&1) || fail "two paths exited $?: $(tail -3 <<<"$out2")"
grep -q "^Striped across $dir/a, $dir/b" <<<"$out2" || fail "no striped table: $out2"
grep -Eq '^  read +striped x2 +[0-9.]+ GB/s .*x the fastest single directory' <<<"$out2" ||
  fail "no striping summary line: $out2"
grep -q '"striping": {' "$dir/st.json" || fail "JSON lacks striping"
grep -q '"path": "striped"' "$dir/st.json" || fail "JSON has no striped results"
# each directory's private directories are gone
left=$(find "$dir/a" "$dir/b" -mindepth 1 | head -1)
[ -z "$left" ] || fail "left in a striped directory: $left"

# tmpfs is memory: warned.
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && shm=$(mktemp -d /dev/shm/swapbench-smoke.XXXXXX); then
  out4=$("$bin" --path "$shm" --size 1M --no-fio --ops read --block-sizes 128K --queue-depths 1 --repeat 1 2>&1)
  rm -rf "$shm"
  grep -q "warning: $shm is on tmpfs, which is memory" <<<"$out4" || fail "no tmpfs warning: $(head -3 <<<"$out4")"
fi

# 4. SIGINT mid-sweep: it reports what was measured and exits 130 (128 + SIGINT), not 0.
"$bin" --path "$dir" --no-fio --reps 50 >"$dir/int.out" 2>&1 &
pid=$!
sleep 1
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] || fail "SIGINT mid-sweep: exit status $rc, want 130"
grep -q "interrupted; reporting what was measured" "$dir/int.out" || fail "SIGINT mid-sweep: no 'interrupted' line"
grep -Eq 'n/a: *$' "$dir/int.out" && fail "SIGINT mid-sweep: an empty 'n/a:' line"
grep -Eq '^(read|write) .* error ' "$dir/int.out" && fail "SIGINT mid-sweep: a row reported as an error"

# 5. The private directory is gone after the run.
left=$(find "$dir" -maxdepth 1 -name 'zoffload-*' | head -1)
[ -z "$left" ] || fail "private swap directory left behind: $left"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "PASS"
exit 0
