#!/usr/bin/env bash
# zo_train_init_threads.sh ZO_TRAIN CONFIG CORPUS - the initial weights do not depend on the thread count: one step
# of CONFIG at --threads 1 and at --threads 2 logs the same validation loss of the initial weights and the same
# step-1 training loss (forward and backward of the first batch on those weights, before any update), to the last bit
# of --log-json's 17 digits. gpt_param_init forks above its work threshold (default.json's tensors do; on a busy
# machine zo-train may take fewer threads, and the losses must match all the same); test_gpt_threads checks the
# forks themselves. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-init-threads.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for t in 1 2; do
  "$zo" --config "$cfg" --data "$corpus" --threads $t --steps 1 --no-sample --log-json "$work/t$t.jsonl" \
    >"$work/t$t.out" 2>&1 || { cat "$work/t$t.out"; fail "the run at --threads $t failed"; }
  grep -q '^zo-train: start-up: .* initial weights of [0-9]* parameters' "$work/t$t.out" \
    || { cat "$work/t$t.out"; fail "the run at --threads $t prints no start-up line"; }
done
first() { grep -m1 -o "\"$1\": *[-0-9.eE+]*" "$2" | sed 's/.*: *//'; }
initval() { grep -o 'val [0-9.]* (initial weights' "$1" | awk '{print $2}'; }
l1=$(first loss "$work/t1.jsonl") l2=$(first loss "$work/t2.jsonl")
[ -n "$l1" ] && [ -n "$l2" ] || fail "no step-1 loss in the JSON logs ('$l1', '$l2')"
[ "$l1" = "$l2" ] || fail "step-1 loss differs: $l1 at --threads 1, $l2 at --threads 2"
v1=$(initval "$work/t1.out") v2=$(initval "$work/t2.out")
[ -n "$v1" ] && [ "$v1" = "$v2" ] || fail "validation loss of the initial weights differs: '$v1' at --threads 1, '$v2' at 2"
echo "step-1 loss $l1 and initial val $v1 at --threads 1 and 2"
echo PASS
