#!/usr/bin/env bash
# zo_train_errors.sh ZO_TRAIN CONFIG - bad input ends zo-train with a non-zero status and
# a one-line error that names the thing. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-errors.XXXXXX")
trap 'chattr -i "$work/ro" 2>/dev/null; rm -rf "$work"' EXIT
failures=0
# expect NAME PATTERN ARGS...: zo-train ARGS must exit non-zero and print exactly one error line matching PATTERN.
expect() {
  local name=$1 pat=$2
  shift 2
  timeout -k 10 60 "$zo" --no-sample "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ $rc -eq 124 ] && echo "(timed out after 60 s: a hang)" >>"$work/err"
  local lines
  lines=$(grep -c '^zo-train: error:' "$work/err")
  if [ $rc -eq 0 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pat" "$work/err"; then
    echo "FAIL $name: rc=$rc, $lines error lines, want one matching '$pat'; stderr:"; cat "$work/err"
    failures=$((failures + 1))
  else
    echo "ok   $name: $(grep '^zo-train: error:' "$work/err")"
  fi
}
expect "missing --data" "$work/no-such-corpus" --config "$cfg" --data "$work/no-such-corpus"
: >"$work/empty.txt"
expect "empty corpus" "$work/empty.txt" --config "$cfg" --data "$work/empty.txt"
head -c 20 /etc/os-release >"$work/tiny.txt"
expect "corpus too small" "$work/tiny.txt" --config "$cfg" --data "$work/tiny.txt"
# --export-safetensors into a directory that is not there: refused at start-up, not after the run trained
expect "export directory missing" "export-safetensors: the directory '$work/no-such-dir' does not exist" \
  --config "$cfg" --data /usr/share/games/fortunes --steps 1 --export-safetensors "$work/no-such-dir/w.safetensors"
expect "nvme_path missing" "$work/no-such-dir" --config "$cfg" --offload-optimizer nvme --nvme-path "$work/no-such-dir"
: >"$work/file"
expect "nvme_path not a directory" "$work/file" --config "$cfg" --offload-optimizer nvme --nvme-path "$work/file"
mkdir -p "$work/ro"
if [ "$(id -u)" -ne 0 ]; then
  chmod 0500 "$work/ro"
  expect "nvme_path unwritable" "$work/ro" --config "$cfg" --offload-optimizer nvme --nvme-path "$work/ro"
elif chattr +i "$work/ro" 2>/dev/null; then # root ignores mode bits; an immutable directory still refuses
  expect "nvme_path unwritable (immutable)" "$work/ro" --config "$cfg" --offload-optimizer nvme --nvme-path "$work/ro"
  chattr -i "$work/ro"
else
  echo "note: running as root on a file system without chattr +i: unwritable-directory case not exercised"
fi
expect "missing config" "$work/none.json" --config "$work/none.json"
mkdir -p "$work/cfgdir"
expect "config is a directory" "config '$work/cfgdir' is a directory, not a JSON file" --config "$work/cfgdir"
# the config is read once: a pipe works (was: "malformed JSON" on the second reading, which found the pipe drained)
timeout -k 10 60 "$zo" --no-sample --config <(cat "$cfg") --dry-run >"$work/out" 2>"$work/err"
rc=$?
if [ $rc -ne 0 ] || ! grep -q 'dry run: the configuration fits' "$work/out"; then
  echo "FAIL --config <(cat tiny.json): rc=$rc, want 0 and a fitting dry run; stderr:"; cat "$work/err"
  failures=$((failures + 1))
else
  echo "ok   --config <(cat tiny.json): rc 0, $(grep -c . "$work/out") lines, the dry run fits"
fi
printf '{\n  "train_batch_size": 8,\n  "optimizer": {"type": "Adam",, }\n}\n' >"$work/bad.json"
expect "malformed config" "bad.json:3:" --config "$work/bad.json"
printf '{"train_batch_size": 8, "zero_optimization": {"offload_optimizer": {"device": "gpu"}}}\n' >"$work/enum.json"
expect "unknown enum" "zero_optimization.offload_optimizer.device" --config "$work/enum.json"
printf '{"train_batch_size": 8, "model": {"n_layer": "four"}}\n' >"$work/model.json"
expect "wrong type in model block" "model.n_layer" --config "$work/model.json"
expect "bad --steps" "--steps" --config "$cfg" --steps -3
expect "bad --offload-optimizer" "gpu" --config "$cfg" --offload-optimizer gpu
# A cuda device where none can be used (no GPU visible, or zo-train built without nvcc) is refused by name;
# on a machine with a GPU these runs would train, so they are left to the gpu tests there.
if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  echo "note: a GPU device node is present: the no-GPU cuda cases are not exercised"
else
  printf '{"train_batch_size": 8, "zoffload": {"device": "cuda"}}\n' >"$work/cuda.json"
  nogpu='no CUDA device is visible\|built without CUDA compute'
  expect "zoffload.device cuda" "$nogpu" --config "$work/cuda.json"
  expect "--device cuda" "$nogpu" --config "$cfg" --device cuda
fi
# A model far beyond this machine (206e9 parameters: fp32 weights, gradients and activations alone are
# terabytes) is refused by the start-up budget, naming host memory and its bytes, before anything is allocated.
printf '{"train_batch_size": 8, "model": {"n_layer": 4, "n_head": 64, "d_model": 65536, "seq_len": 32}}\n' >"$work/huge.json"
expect "206e9-parameter model" "start-up budget: .*host memory: needs [0-9]* bytes" --config "$work/huge.json"
printf '{"train_batch_size": 8, "zoffload": {"device": "gpu"}}\n' >"$work/badkind.json"
expect "bad zoffload.device" 'zoffload.device: expected "auto", "cuda" or "host"' --config "$work/badkind.json"
expect "bad --device" "--device: expected auto, cuda or host" --config "$cfg" --device gpu
# the CUDA model's kernel set: a bad value of the key or the flag; --kernel-times on the cpu
printf '{"train_batch_size": 8, "train": {"cuda_kernels": "fast"}}\n' >"$work/kernels.json"
expect "bad train.cuda_kernels" 'train.cuda_kernels: expected "baseline" or "fused", got fast' --config "$work/kernels.json"
expect "bad --cuda-kernels" "--cuda-kernels: expected baseline or fused, got 'fast'" --config "$cfg" --cuda-kernels fast
expect "--kernel-times on the cpu" "--kernel-times: times the CUDA model's kernels" --config "$cfg" --device host \
  --kernel-times --steps 1

# Numbers out of what their user can take: refused at parse time naming the key and the range, never cast to int
# (was: steps_per_print 2^32 SIGFPE, gas 2^32+1 trained with 1, micro 2^32+16 with 16, micro 2^62 x gas 4 "batch 0
# ... fits", eps 1e-50 -> 0.0f, weight_decay 1e40 NaN weights and an empty "zo-train: error: ", host_link_gbps 1e-9
# a hang). tiny.json: micro 4, gas 2, seq_len 32.
variant() { # variant NAME SED-EXPRESSION: tiny.json edited into $work/NAME.json
  sed -e "$2" "$cfg" >"$work/$1.json"
}
variant gas 's/"gradient_accumulation_steps": 2/"gradient_accumulation_steps": 4294967297/'
expect "gas 2^32+1" "gradient_accumulation_steps: 4294967297 is out of range \[1, 2147483647\]" --config "$work/gas.json"
variant mb 's/"train_micro_batch_size_per_gpu": 4/"train_micro_batch_size_per_gpu": 4294967312/'
expect "micro batch 2^32+16" "train_micro_batch_size_per_gpu: 4294967312 is out of range \[1, 67108863\]" \
  --config "$work/mb.json"
variant mbgas 's/"train_micro_batch_size_per_gpu": 4/"train_micro_batch_size_per_gpu": 4611686018427387904/;
               s/"gradient_accumulation_steps": 2/"gradient_accumulation_steps": 4/'
expect "micro 2^62 x gas 4 (dry run)" "train_micro_batch_size_per_gpu: .* does not fit in 64 bits" --config "$work/mbgas.json" --dry-run
# A live-parameter bound below the largest tensor (wte, 8192 elements): the dry run refuses what the run would.
variant live 's/"stage3_max_live_parameters": [0-9]*/"stage3_max_live_parameters": 1000/'
expect "stage3_max_live_parameters below the largest tensor (dry run)" \
  "zero_optimization.stage3_max_live_parameters: 1000 elements cannot hold the largest tensor (8192 elements)" \
  --config "$work/live.json" --offload-param cpu --dry-run
variant eps 's/"eps": 1e-08/"eps": 1e-50/'
expect "eps 1e-50" "optimizer.params.eps: expected a number in \[1.17549e-38, 1\], got 1e-50" --config "$work/eps.json"
variant wd 's/"weight_decay": 0.01/"weight_decay": 1e40/'
expect "weight_decay 1e40" "optimizer.params.weight_decay: expected a number in \[0, 1e+06\], got 1e+40" --config "$work/wd.json"
variant wd2 's/"weight_decay": 0.01/"weight_decay": 1000/'
expect "weight_decay x lr > 1" "optimizer.params.weight_decay: 1000 times the peak learning rate 0.003" --config "$work/wd2.json"
variant link 's/^{/{"zoffload": {"host_link_gbps": 1e-9},/'
expect "host_link_gbps 1e-9" "zoffload.host_link_gbps: expected 0 (no emulated link) or a number in \[0.1, 1e+06\] GB/s" \
  --config "$work/link.json"
variant nl 's/"n_layer": 2/"n_layer": 4294967297/'
expect "model.n_layer 2^32+1" "model.n_layer: expected an integer in \[1, 256\], got 4294967297" --config "$work/nl.json"
variant ds 's/"val_fraction": 0.1/"val_fraction": 0.1, "seed": 9223372036854775808.0/'
expect "data.seed 2^63" "data.seed: expected an integer in \[0, 9223372036854775807\]" --config "$work/ds.json"
expect "--threads 2^32" "--threads: expected an integer in \[1, 4096\], got '4294967296'" --config "$cfg" --threads 4294967296
expect "--keep-last 2^32" "--keep-last: expected an integer in \[0, 2147483647\]" --config "$cfg" --keep-last 4294967296
expect "--micro-batch 2^31" "--micro-batch: expected an integer in \[1, 2147483647\]" --config "$cfg" --micro-batch 2147483648
# steps_per_print beyond an int: trains, logging (validation, val loss) only the last step (was: 2^32 SIGFPE,
# 2^63-1 every step); steps 1 and 2 get progress lines without validation
for spp in 4294967296 9223372036854775807; do
  variant spp "s/\"steps_per_print\": 5/\"steps_per_print\": $spp/"
  timeout -k 10 60 "$zo" --no-sample --config "$work/spp.json" --steps 3 >"$work/out" 2>"$work/err"
  rc=$? logged=$(grep -c '^step .*| loss .*| val ' "$work/out")
  if [ $rc -ne 0 ] || [ "$logged" -ne 1 ] || ! grep -q '^step     3/3 | loss .* | val ' "$work/out"; then
    echo "FAIL steps_per_print $spp: rc=$rc, $logged logged steps, want rc 0 and step 3 only"; tail -3 "$work/err"
    failures=$((failures + 1))
  else
    echo "ok   steps_per_print $spp: rc 0, only step 3 logged"
  fi
done
# 200,000 unknown keys: 8 warnings and one summary line (was 200,000 lines)
awk 'BEGIN { printf "{\"train_batch_size\": 8"; for (i = 0; i < 200000; i++) printf ", \"k%d\": 1", i; print "}" }' \
  >"$work/unknown.json"
timeout -k 10 60 "$zo" --no-sample --config "$work/unknown.json" --dry-run >"$work/out" 2>"$work/err"
rc=$? warned=$(grep -c 'warning' "$work/err")
if [ $rc -eq 124 ] || [ "$warned" -ne 9 ] || ! grep -q 'and 199992 more keys that are not DeepSpeed or zoffload keys' "$work/err"; then
  echo "FAIL 200000 unknown keys: rc=$rc, $warned warning lines, want 9 with the count"; head -3 "$work/err"
  failures=$((failures + 1))
else
  echo "ok   200000 unknown keys: rc $rc, $warned warning lines: $(tail -1 "$work/err")"
fi
[ $failures -eq 0 ] && echo PASS || { echo "$failures case(s) failed"; exit 1; }
