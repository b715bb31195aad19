#!/usr/bin/env bash
# zo_train_tiers.sh ZO_TRAIN CONFIG CORPUS - a short zo-train run gives losses identical to
# the last bit for every combination of offload_param.device (none, cpu, nvme) and
# offload_optimizer.device (none, cpu, nvme), and with parameters on nvme partly or wholly
# cached in host memory (offload_param.max_in_cpu); with parameter offload the device memory
# limit is below the size of the model's working weights. The loss must go down.
# Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-tiers.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Device bytes for the tiny config (34688 parameters in bf16, largest tensor 8192 elements,
# 2 micro-batches a step): the streamed model's gradient ring (twice the largest tensor in
# fp32: 65536 B) + 48 KiB for fetched working weights, below the 69376 B of working weights
# plus the ring; with the optimizer state on the device add its 16 B/param (fp32 master, two
# moments and the fp32 gradient sum of the 2 micro-batches) and the regions' alignment.
grads=65536 fetch=49152 state=590000
mkdir -p "$work/nvme"
for p in none cpu nvme; do
  for o in none cpu nvme; do
    name="param-$p.opt-$o"
    limit=0
    if [ "$p" != none ]; then
      limit=$((grads + fetch))
      [ "$o" = none ] && limit=$((limit + state))
    fi
    "$zo" --config "$cfg" --data "$corpus" --offload-optimizer "$o" --offload-param "$p" \
          --device-memory-limit "$limit" --nvme-path "$work/nvme" \
          --threads 2 --log-json "$work/$name.jsonl" "$@" >"$work/$name.out" 2>&1 \
      || { cat "$work/$name.out"; fail "zo-train with offload_param=$p offload_optimizer=$o exited non-zero"; }
    # "loss" and "val_loss" printed with 17 significant digits: equal text means equal bits.
    grep -o '"\(loss\|val_loss\)": *[-0-9.eE+]*' "$work/$name.jsonl" >"$work/$name.loss"
    [ -s "$work/$name.loss" ] || fail "no losses logged for $name"
    [ -z "$(ls -A "$work/nvme")" ] || fail "swap files left behind by $name: $(ls -A "$work/nvme")"
    grep -q "optimizer state: $o | parameters: $([ "$p" = none ] && echo device || echo "$p")" "$work/$name.out" \
      || fail "$name did not report its tiers"
    if ! cmp -s "$work/param-none.opt-none.loss" "$work/$name.loss"; then
      diff "$work/param-none.opt-none.loss" "$work/$name.loss" | head -5
      fail "losses of $name differ from offload_param=none offload_optimizer=none"
    fi
    echo "ok   $name (device limit ${limit} B): $(wc -l <"$work/$name.loss") loss values identical"
  done
done
# The host cache of nvme parameters (offload_param.max_in_cpu written): the first tensors whose elements add up
# to at most max_in_cpu keep their working copy in host memory. 17000 of the 34688 elements (a split) and all of
# them give the same losses; the cached tensors are never read from params.swp: fewer NVMe reads than with the
# key absent (the optimizer state on cpu: params.swp is all the NVMe traffic), none with every tensor cached.
last_reads() { grep -o '"nvme_read_bytes": *[0-9]*' "$1" | tail -1 | sed 's/.*: *//'; }
reads0=$(last_reads "$work/param-nvme.opt-cpu.jsonl")
for m in 17000 1000000; do
  name="param-nvme.max_in_cpu-$m.opt-cpu"
  sed "s/\"buffer_size\": 100000/\"buffer_size\": 100000, \"max_in_cpu\": $m/" "$cfg" >"$work/cache.json"
  grep -q "\"max_in_cpu\": $m" "$work/cache.json" || fail "could not write max_in_cpu into a copy of $cfg"
  "$zo" --config "$work/cache.json" --data "$corpus" --offload-optimizer cpu --offload-param nvme \
        --device-memory-limit $((grads + fetch)) --nvme-path "$work/nvme" \
        --threads 2 --log-json "$work/$name.jsonl" "$@" >"$work/$name.out" 2>&1 \
    || { cat "$work/$name.out"; fail "zo-train with offload_param nvme, max_in_cpu $m exited non-zero"; }
  grep -o '"\(loss\|val_loss\)": *[-0-9.eE+]*' "$work/$name.jsonl" >"$work/$name.loss"
  [ -s "$work/$name.loss" ] || fail "no losses logged for $name"
  [ -z "$(ls -A "$work/nvme")" ] || fail "swap files left behind by $name: $(ls -A "$work/nvme")"
  if ! cmp -s "$work/param-none.opt-none.loss" "$work/$name.loss"; then
    diff "$work/param-none.opt-none.loss" "$work/$name.loss" | head -5
    fail "losses of $name differ from offload_param=none offload_optimizer=none"
  fi
  reads=$(last_reads "$work/$name.jsonl")
  if [ "$m" = 1000000 ]; then
    [ "$reads" = 0 ] || fail "$name: every tensor cached, yet $reads bytes were read from NVMe"
  else
    [ -n "$reads" ] && [ -n "$reads0" ] && [ "$reads" -lt "$reads0" ] \
      || fail "$name: $reads bytes read from NVMe, not fewer than the $reads0 without max_in_cpu"
  fi
  echo "ok   $name: $(wc -l <"$work/$name.loss") loss values identical; NVMe reads $reads0 -> $reads bytes"
done
initial=$(grep -o 'val [0-9.]* (initial' "$work/param-none.opt-none.out" | awk '{print $2}')
last=$(grep -o '"val_loss": *[-0-9.eE+]*' "$work/param-none.opt-none.jsonl" | tail -1 | sed 's/.*: *//')
echo "val loss: initial $initial, last $last"
awk -v a="$initial" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' || fail "val loss did not fall by 0.5: $initial -> $last"
echo PASS
