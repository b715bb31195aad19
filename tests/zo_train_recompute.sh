#!/usr/bin/env bash
# zo_train_recompute.sh ZO_TRAIN CONFIG CORPUS - activation checkpointing (train.activation_checkpointing):
# the same short run with it off and on, optimizer state on cpu and parameters offloaded to cpu (so the
# recompute fetches each block's weights again through the hook); every logged loss and val loss must be
# identical to the last bit, and the runs must train. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-recompute.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for ac in off on; do
  "$zo" --config "$cfg" --data "$corpus" --offload-optimizer cpu --offload-param cpu --threads 2 --steps 30 \
        --no-sample --activation-checkpointing $ac --log-json "$work/$ac.jsonl" >"$work/$ac.out" 2>&1 \
    || { cat "$work/$ac.out"; fail "run with activation checkpointing $ac failed"; }
  grep -q "activation checkpointing: $ac" "$work/$ac.out" || fail "the $ac run does not say activation checkpointing $ac"
done
losses() { grep -o '"\(val_\)\?loss": *[-0-9.eE+]*' "$1"; }
n=$(losses "$work/off.jsonl" | wc -l)
[ "$n" -ge 2 ] || fail "too few logged losses ($n)"
cmp -s <(losses "$work/off.jsonl") <(losses "$work/on.jsonl") || {
  paste <(losses "$work/off.jsonl") <(losses "$work/on.jsonl"); fail "losses differ with activation checkpointing"; }
init=$(grep -o 'val [0-9.]* (initial' "$work/off.out" | awk '{print $2}')
last=$(grep -o '"val_loss": *[-0-9.eE+]*' "$work/on.jsonl" | tail -1 | sed 's/.*: *//')
awk -v a="$init" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }' || fail "did not train: val $init -> $last"
echo "$n losses identical with activation checkpointing off and on (val $init -> $last)"
echo PASS
