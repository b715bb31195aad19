#!/usr/bin/env bash
# zo_train_dpu.sh ZO_TRAIN CONFIG CORPUS - delayed parameter update (zoffload.delayed_param_update):
# the same short run with and without DPU; both must train (val loss falls by 0.5), and the
# DPU run's final val loss must stay within 0.25 of the plain run's (the cost of computing
# with weights one update stale). Prints both curves' end points. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-dpu.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
sed '0,/{/s//{\n  "zoffload": {"delayed_param_update": true},/' "$cfg" >"$work/dpu.json"
grep -q delayed_param_update "$work/dpu.json" || fail "could not write the DPU config"
for run in plain dpu; do
  c=$cfg
  [ $run = dpu ] && c=$work/dpu.json
  "$zo" --config "$c" --data "$corpus" --offload-optimizer cpu --threads 2 --steps 60 --no-sample \
        --log-json "$work/$run.jsonl" >"$work/$run.out" 2>&1 || { cat "$work/$run.out"; fail "$run run failed"; }
done
val() { grep -o '"val_loss": *[-0-9.eE+]*' "$1" | tail -1 | sed 's/.*: *//'; }
init=$(grep -o 'val [0-9.]* (initial' "$work/plain.out" | awk '{print $2}')
p=$(val "$work/plain.jsonl") d=$(val "$work/dpu.jsonl")
echo "val loss after 60 steps: initial $init, plain $p, delayed parameter update $d"
awk -v a="$init" -v b="$d" 'BEGIN { exit !(b < a - 0.5) }' || fail "DPU run did not train: $init -> $d"
awk -v a="$p" -v b="$d" 'BEGIN { exit !(b - a < 0.25 && a - b < 0.25) }' || fail "DPU run strays from the plain run"
cmp -s <(grep -o '"loss": *[-0-9.eE+]*' "$work/plain.jsonl") <(grep -o '"loss": *[-0-9.eE+]*' "$work/dpu.jsonl") \
  && fail "DPU gave the same losses as the plain run: the update was not delayed"
echo PASS
