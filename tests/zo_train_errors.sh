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
  "$zo" --no-sample "$@" >"$work/out" 2>"$work/err"
  local rc=$?
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
[ $failures -eq 0 ] && echo PASS || { echo "$failures case(s) failed"; exit 1; }
