#!/usr/bin/env bash
# zo_stepbench_smoke.sh - runs zo-stepbench on a tiny synthetic model (parameters and optimizer state on
# NVMe, emulated link) in a scratch directory under the build dir, and checks its exit status, printed
# report and the JSON keys the issue's contract names (grep/sed/awk only). It checks the tool works and
# reports; it does not judge the disk's or the pipeline's speed, nor the step model's accuracy (no timing
# thresholds): the predicted step is checked to be there, the placement options to reach the planner, and kept
# optimizer state to lower the NVMe reads (byte counts). The machine speeds are cached in the scratch
# directory ($ZO_SPEEDS_CACHE), never under $HOME.
# usage: zo_stepbench_smoke.sh ZO_STEPBENCH_BINARY SCRATCH_PARENT_DIR
set -u
bin=${1:?usage: zo_stepbench_smoke.sh BIN DIR}
parent=${2:?usage: zo_stepbench_smoke.sh BIN DIR}
[ -x "$bin" ] || { echo "SKIP: $bin not built"; exit 77; }
dir=$(mktemp -d "$parent/stepbench-smoke.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
export ZO_SPEEDS_CACHE="$dir/speeds.json" # the planner's speeds: measured once here, then cached here
fails=0
fail() { echo "$0:${BASH_LINENO[0]}: FAIL: $*"; fails=$((fails + 1)); }
# top-level JSON number KEY of FILE (the file's two-space layout)
top() { sed -n "s/^  \"$1\": \([^,]*\),*\$/\1/p" "$2"; }
# the number KEY of the top-level object OBJ of FILE
nested() { sed -n "/^  \"$2\": {/,/^  }/p" "$3" | sed -n "s/^    \"$1\": \([^,]*\),*\$/\1/p"; }
# 0 when $1 is a positive finite number as jansson writes one
positive() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] && awk -v v="$1" 'BEGIN { exit !(v + 0 > 0) }'; }

# 1. --help names every flag and exits 0.
help=$("$bin" --help) || fail "--help exited $?"
for flag in --params --layers --nvme-path --steps --compute-ms-per-layer --offload-param --offload-optimizer \
  --device --device-limit --link-gbps --sub-group-size --buffer-count --bf16 --fp32 --json --gas --placement \
  --optimizer-max-in-cpu --param-max-in-cpu --placement-host-bytes --help; do
  grep -q -- "$flag" <<<"$help" || fail "--help does not mention $flag"
done

# 2. Bad input is refused with a message naming the flag, not a crash.
"$bin" --params banana --layers 2 --nvme-path "$dir" --steps 1 >/dev/null 2>"$dir/err" && fail "--params banana accepted"
grep -q -- "--params" "$dir/err" || fail "--params banana: no message naming --params: $(cat "$dir/err")"
"$bin" --params 1000 --layers 2 --nvme-path "$dir/does-not-exist" --steps 1 >/dev/null 2>"$dir/err" &&
  fail "missing --nvme-path directory accepted"
grep -q "does-not-exist" "$dir/err" || fail "missing directory not named in the error: $(cat "$dir/err")"
# --link-gbps 1e-9 hung (every transfer ~1e9 s): refused naming the range; bounded by timeout so a hang fails
timeout -k 10 60 "$bin" --params 1000 --layers 2 --nvme-path "$dir" --steps 1 --link-gbps 1e-9 >/dev/null 2>"$dir/err"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "--link-gbps 1e-9: rc $rc (124: a hang), want refused"
grep -q -- "--link-gbps: expected 0 (unlimited) or a number in \[0.1, 1e+06\] GB/s, got '1e-9'" "$dir/err" ||
  fail "--link-gbps 1e-9: no message naming the range: $(cat "$dir/err")"
"$bin" --params 1000 --layers 2 --nvme-path "$dir" --steps 1 --offload-param gpu >/dev/null 2>"$dir/err" &&
  fail "--offload-param gpu accepted"
"$bin" --layers 2 --nvme-path "$dir" --steps 1 >/dev/null 2>&1 && fail "missing --params accepted"
# --params beyond what an engine holds, or what this machine holds, is refused before the tool allocates (2^62+1
# grew RSS until killed); bounded by ulimit -v and timeout so a regression fails, not hangs.
for n in 4611686018427387905 1e14; do
  (ulimit -v 4000000; timeout 60 "$bin" --params $n --layers 2 --nvme-path "$dir" --steps 1 --no-baseline) \
    >"$dir/out" 2>"$dir/err"
  rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] || fail "--params $n: exit $rc, want a refusal: $(tail -3 "$dir/err")"
  grep -q -- "--params" "$dir/err" || fail "--params $n: no message naming --params: $(tail -3 "$dir/err")"
  grep -q "link limit" "$dir/out" && fail "--params $n: the link was measured (allocated) before the refusal"
done
for bad in "--placement planner" "--optimizer-max-in-cpu -5" "--param-max-in-cpu 1.5" "--placement-host-bytes x"; do
  # shellcheck disable=SC2086 # the option and its value, two words
  "$bin" --params 1000 --layers 2 --nvme-path "$dir" --steps 1 $bad >/dev/null 2>"$dir/err" && fail "$bad accepted"
  grep -q -- "${bad%% *}" "$dir/err" || fail "$bad: no message naming ${bad%% *}: $(cat "$dir/err")"
done
"$bin" --params 1000 --layers 2 --nvme-path "$dir" --steps 1 --device gpu >/dev/null 2>"$dir/err" && fail "--device gpu accepted"
grep -q -- "--device" "$dir/err" || fail "--device gpu: no message naming --device: $(cat "$dir/err")"

# 3. A tiny run: 2M parameters in 4 layers, everything on NVMe, 3 steps.
json="$dir/sb.json"
out=$("$bin" --params 2M --layers 4 --nvme-path "$dir" --steps 3 --compute-ms-per-layer 1 \
  --offload-param nvme --offload-optimizer nvme --link-gbps 8 --sub-group-size 262144 --buffer-count 4 \
  --json "$json" 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || fail "run exited $rc"
[ -s "$json" ] || { fail "no JSON written"; echo "$fails failure(s)"; exit 1; }
grep -Eq '^  (PASS|MISS|n/a) +disk' <<<"$out" || fail "no disk target line printed"
grep -Eq '^  (PASS|MISS|n/a) +overlap' <<<"$out" || fail "no overlap target line printed"
n_steps=$(grep -c '^step [0-9]*:' <<<"$out")
[ "$n_steps" -eq 3 ] || fail "printed $n_steps step lines, want 3"

# Contract keys (issue 5) at the top level, then the extras.
for key in params step_s disk_gbps baseline_disk_gbps overlap_efficiency; do
  grep -q "^  \"$key\": " "$json" || fail "JSON lacks top-level \"$key\""
done
for key in config per_step targets exposed baseline definitions params_per_s link_gbps fetch_wait_s; do
  grep -q "\"$key\": " "$json" || fail "JSON lacks \"$key\""
done
# The link limit measured in the same run (host device: the emulated link) and the ratios against it.
for key in device device_name link_h2d_gbps link_d2h_gbps link_ratio link_h2d_ratio link_d2h_ratio link_bytes_from \
  link_limit; do
  grep -q "^  \"$key\": " "$json" || fail "JSON lacks top-level \"$key\""
done
grep -q '^  "device": "host"' "$json" || fail "device is not \"host\""
grep -q '^    "device": "host"' "$json" || fail "config.device is not \"host\""
for key in chunk_bytes h2d_gbps d2h_gbps duplex_gbps duplex_h2d_gbps duplex_d2h_gbps; do
  v=$(sed -n '/^  "link_limit": {/,/^  }/p' "$json" | sed -n "s/^    \"$key\": \\([^,]*\\),*\$/\\1/p")
  awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || fail "link_limit.$key is '$v', want a positive number"
done
sed -n '/^  "link_limit": {/,/^  }/p' "$json" | grep -q '"ok": true' || fail "link_limit not measured: $(grep -A14 '"link_limit"' "$json")"
c=$(sed -n '/^  "link_limit": {/,/^  }/p' "$json" | sed -n 's/^    "chunk_bytes": \([0-9]*\),*$/\1/p')
[ "$c" = "1000000" ] || fail "link_limit.chunk_bytes is '$c', want 1000000 (one layer of 500000 bf16)"
grep -Eq '^link limit \(.*H2D [0-9.]+ GB/s, D2H [0-9.]+ GB/s, full duplex [0-9.]+ GB/s' <<<"$out" || fail "no link limit line printed"
grep -Eq '^  link vs limit: [0-9.]+ of full duplex' <<<"$out" || fail "no link vs limit line printed"
p=$(sed -n 's/^  "params": \([0-9]*\),*$/\1/p' "$json")
[ "$p" = "2000000" ] || fail "params is '$p', want 2000000"
# Top-level rates and times are positive numbers (baseline measured: the run used nvme).
for key in step_s disk_gbps baseline_disk_gbps overlap_efficiency params_per_s link_gbps link_ratio link_h2d_ratio \
  link_d2h_ratio; do
  v=$(sed -n "s/^  \"$key\": \\([^,]*\\),*\$/\\1/p" "$json")
  awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || fail "\"$key\" is '$v', want a positive number"
done
# The placement and the predicted step (zo_engine_place before finalize), printed and in the JSON beside the
# measured figures; the keys above stay.
grep -Eq '^  placement "config": placement: optimizer state [0-9]+ of [0-9]+ elements' <<<"$out" ||
  fail "no placement line printed"
grep -Eq '^  predicted step [0-9.]+ ms \(bound by [a-z]+\)' <<<"$out" || fail "no \"predicted step\" line printed"
grep -Eq '^    step +[0-9.]+ ms +[0-9.]+ ms +[0-9.]+$' <<<"$out" || fail "no measured against predicted step row"
grep -Eq '^    nvme read +[0-9.]+ GB +[0-9.]+ GB' <<<"$out" || fail "no measured against predicted nvme read row"
for key in predicted_step_ms step_over_predicted nvme_read_bytes nvme_write_bytes predicted_nvme_read_bytes \
  predicted_nvme_write_bytes nvme_read_over_predicted nvme_write_over_predicted; do
  v=$(top "$key" "$json")
  positive "$v" || fail "\"$key\" is '$v', want a positive finite number"
done
for key in step_ms compute_ms nvme_read_bytes nvme_write_bytes; do
  v=$(sed -n '/^    "predicted": {/,/^    }/p' "$json" | sed -n "s/^      \"$key\": \([^,]*\),*\$/\1/p")
  positive "$v" || fail "placement.predicted.$key is '$v', want a positive finite number"
done
# compute = 4 layers x 2 passes x 1 ms x gas 1, and 2 fetches of each layer per step
c=$(sed -n '/^    "rates": {/,/^    }/p' "$json" | sed -n 's/^      "compute_s": \([^,]*\),*$/\1/p')
awk -v v="$c" 'BEGIN { exit !(v > 0.008 - 1e-12 && v < 0.008 + 1e-12) }' || fail "placement.rates.compute_s is '$c', want 0.008"
c=$(sed -n '/^    "rates": {/,/^    }/p' "$json" | sed -n 's/^      "fetches_per_step": \([^,]*\),*$/\1/p')
awk -v v="$c" 'BEGIN { exit !(v == 2) }' || fail "placement.rates.fetches_per_step is '$c', want 2"
grep -q '^  "placement": {' "$json" && grep -q '^    "mode": "config",' "$json" || fail "JSON placement.mode is not \"config\""
n_ps=$(grep -c '"step": [0-9]' "$json")
[ "$n_ps" -eq 3 ] || fail "per_step has $n_ps entries, want 3"
grep -Eq '"status": "(PASS|MISS|n/a)"' "$json" || fail "targets carry no status"

# 3b. --placement auto: the planner chooses the split and the run goes on. zo-stepbench prints no loss or checksum
# to compare across placements (zo_train_placement.sh checks the bits). --placement-host-bytes caps what the
# planner keeps in host memory: at 1 byte no sub-group fits, so none is kept.
out5=$("$bin" --params 2M --layers 4 --nvme-path "$dir" --steps 3 --compute-ms-per-layer 1 --offload-param nvme \
  --offload-optimizer nvme --link-gbps 8 --sub-group-size 262144 --no-baseline --placement auto --json "$dir/auto.json" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || { echo "$out5"; fail "--placement auto run exited $rc"; }
grep -Eq '^  placement "auto": placement: optimizer state [0-9]+ of [0-9]+ elements' <<<"$out5" ||
  fail "--placement auto: no placement line"
grep -Eq '^  predicted step [0-9.]+ ms' <<<"$out5" || fail "--placement auto: no \"predicted step\" line"
grep -q '^    "mode": "auto",' "$dir/auto.json" || fail "--placement auto: JSON placement.mode is not \"auto\""
grep -q '^    "placement": "auto",' "$dir/auto.json" || fail "--placement auto: JSON config.placement is not \"auto\""
for key in predicted_step_ms step_over_predicted; do
  v=$(top "$key" "$dir/auto.json")
  positive "$v" || fail "--placement auto: \"$key\" is '$v', want a positive finite number"
done
"$bin" --params 2M --layers 4 --nvme-path "$dir" --steps 2 --compute-ms-per-layer 0 --offload-optimizer nvme \
  --sub-group-size 262144 --no-baseline --placement auto --placement-host-bytes 1 --json "$dir/cap.json" >"$dir/out" 2>&1 ||
  { cat "$dir/out"; fail "--placement-host-bytes 1 run exited non-zero"; }
v=$(nested resident_sub_groups placement "$dir/cap.json")
[ "$v" = 0 ] || fail "--placement auto --placement-host-bytes 1: $v sub-groups kept in host memory, want 0"

# 3c. --optimizer-max-in-cpu keeps the last sub-groups' state in host memory: fewer NVMe reads per step, measured
# and predicted, than with none kept. Byte counts, not times: 8 sub-groups of 262144 elements (12 state bytes
# each); with none kept at least the 4 that 4 buffers cannot hold are read each step (how many more depends on
# timing), with 1.6M kept 6 stay in host memory and at most the other 2 are read.
for m in 0 1.6M; do
  "$bin" --params 2M --layers 4 --nvme-path "$dir" --steps 4 --compute-ms-per-layer 0 --offload-optimizer nvme \
    --sub-group-size 262144 --buffer-count 4 --no-baseline --optimizer-max-in-cpu $m --json "$dir/opt$m.json" \
    >"$dir/out" 2>&1 || { cat "$dir/out"; fail "--optimizer-max-in-cpu $m run exited non-zero"; }
done
v0=$(nested resident_sub_groups placement "$dir/opt0.json") v1=$(nested resident_sub_groups placement "$dir/opt1.6M.json")
[ "$v0" = 0 ] && [ "$v1" = 6 ] || fail "resident sub-groups: '$v0' with --optimizer-max-in-cpu 0, '$v1' with 1.6M; want 0 and 6"
for key in nvme_read_bytes predicted_nvme_read_bytes; do
  r0=$(top $key "$dir/opt0.json") r1=$(top $key "$dir/opt1.6M.json")
  positive "$r0" && awk -v a="$r1" -v b="$r0" 'BEGIN { exit !(a + 0 < b + 0) }' ||
    fail "$key per step: $r1 with --optimizer-max-in-cpu 1.6M, $r0 with 0; want fewer"
done

# 4. Optimizer on cpu, fp32, no disk: baseline is null, the run still reports.
out2=$("$bin" --params 100000 --layers 2 --nvme-path "$dir" --steps 2 --compute-ms-per-layer 0 \
  --offload-param cpu --offload-optimizer cpu --fp32 --link-gbps 0 --json "$dir/cpu.json" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || { echo "$out2"; fail "cpu/cpu run exited $rc"; }
grep -q '^  "baseline_disk_gbps": null' "$dir/cpu.json" || fail "cpu run: baseline_disk_gbps is not null"
grep -Eq '^  n/a +disk' <<<"$out2" || fail "cpu run: disk target not n/a"

# 4b. --gas N: N micro-batches a step, all but the last through zo_engine_grad_accumulate.
"$bin" --params 1000 --layers 2 --nvme-path "$dir" --steps 1 --gas 0 >/dev/null 2>"$dir/err" && fail "--gas 0 accepted"
grep -q -- "--gas" "$dir/err" || fail "--gas 0: no message naming --gas: $(cat "$dir/err")"
out4=$("$bin" --params 1M --layers 2 --nvme-path "$dir" --steps 2 --compute-ms-per-layer 0 --offload-optimizer nvme \
  --no-baseline --gas 2 --json "$dir/gas2.json" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || { echo "$out4"; fail "--gas 2 run exited $rc"; }
grep -q '^    "gas": 2,' "$dir/gas2.json" || fail "--gas 2: config.gas is not 2"
grep -q '^  gradient_accumulation_steps 2: 2 forward and backward passes per step' <<<"$out4" ||
  fail "--gas 2: no gradient_accumulation_steps line: $out4"

# 5. --device cuda: 77 with "no CUDA device" on a machine without a GPU (this one, usually); a full run with one.
out3=$("$bin" --params 100000 --layers 2 --nvme-path "$dir" --steps 2 --compute-ms-per-layer 0 --offload-param cpu \
  --offload-optimizer cpu --fp32 --device cuda --device-limit 256M --json "$dir/cuda.json" 2>&1)
rc=$?
case $rc in
  77) grep -q "no CUDA device" <<<"$out3" || fail "--device cuda exited 77 without saying \"no CUDA device\": $out3" ;;
  0) grep -q '^  "device": "cuda"' "$dir/cuda.json" || fail "--device cuda run: JSON device is not \"cuda\"" ;;
  *) echo "$out3"; fail "--device cuda exited $rc, want 77 (no GPU) or 0" ;;
esac

# 6. Nothing left behind: no private swap directory, no baseline file.
left=$(find "$dir" -maxdepth 1 \( -name 'zoffload-*' -o -name 'zo-stepbench-baseline*' \) | head -1)
[ -z "$left" ] || fail "left behind: $left"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "PASS"
exit 0
