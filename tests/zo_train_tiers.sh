#!/usr/bin/env bash
# zo_train_tiers.sh ZO_TRAIN CONFIG CORPUS - a short zo-train run with the optimizer state
# on each tier (none, cpu, nvme) must give losses identical to the last bit, and
# the loss must go down. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-tiers.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for dev in none cpu nvme; do
  mkdir -p "$work/nvme"
  "$zo" --config "$cfg" --data "$corpus" --offload-optimizer "$dev" --nvme-path "$work/nvme" \
        --threads 2 --log-json "$work/$dev.jsonl" "$@" >"$work/$dev.out" 2>&1 \
    || { cat "$work/$dev.out"; fail "zo-train with offload_optimizer.device=$dev exited $?"; }
  # "loss" and "val_loss" as printed with 17 significant digits: equal text means equal bits.
  grep -o '"\(loss\|val_loss\)": *[-0-9.eE+]*' "$work/$dev.jsonl" >"$work/$dev.loss"
  [ -s "$work/$dev.loss" ] || fail "no losses logged for $dev"
  [ -z "$(ls -A "$work/nvme")" ] || fail "swap files left behind in $work/nvme: $(ls -A "$work/nvme")"
done
grep -q 'optimizer state: nvme' "$work/nvme.out" || fail "nvme run did not report nvme optimizer state"
for dev in cpu nvme; do
  if ! cmp -s "$work/none.loss" "$work/$dev.loss"; then
    diff "$work/none.loss" "$work/$dev.loss" | head -5
    fail "losses with device=$dev differ from device=none"
  fi
done
first=$(grep -o '"val_loss": *[-0-9.eE+]*' "$work/none.jsonl" | head -1 | sed 's/.*: *//')
last=$(grep -o '"val_loss": *[-0-9.eE+]*' "$work/none.jsonl" | tail -1 | sed 's/.*: *//')
initial=$(grep -o 'val [0-9.]* (initial' "$work/none.out" | awk '{print $2}')
echo "val loss: initial $initial, first logged $first, last $last; $(wc -l <"$work/none.loss") loss values identical across none/cpu/nvme"
awk -v a="$initial" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' || fail "val loss did not fall by 0.5: $initial -> $last"
echo PASS
