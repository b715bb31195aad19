#!/usr/bin/env bash
# zo_train_dpu_resume.sh ZO_TRAIN CONFIG CORPUS - the delayed parameter update after its warm-up
# (zoffload.delayed_param_update_warmup_steps W) with the optimizer state on cpu and on nvme:
# - the first W + 1 steps log the plain run's losses bit for bit (step W + 1 still computes with fresh weights;
#   its update is the first delayed one) and step W + 2 does not (it computes one update stale);
# - a checkpoint taken during the warm-up resumes across the switch bit for bit (losses and exported weights of
#   20 steps straight = 10, save, and a new process resuming for 10);
# - a checkpoint taken after the switch publishes the pending update first, so the resumed run equals the run
#   that saved at that step and went on (--save-every), bit for bit.
# Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-dpu-resume.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/nvme"
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$@"; }
mkcfg() { # NAME WARMUP: the config with the delayed update after WARMUP steps
  sed "0,/{/s//{\n  \"zoffload\": {\"delayed_param_update\": true, \"delayed_param_update_warmup_steps\": $2},/" \
    "$cfg" >"$work/$1.json"
  grep -q delayed_param_update_warmup_steps "$work/$1.json" || fail "could not write the config $1"
}
run() { # NAME CONFIG ARGS...: one zo-train run, output in $work/NAME.out, JSON in $work/NAME.jsonl
  local name=$1 c=$2
  shift 2
  "$zo" --config "$c" --data "$corpus" --threads 2 --no-sample --nvme-path "$work/nvme" --print-every 1 \
        --log-json "$work/$name.jsonl" "$@" >"$work/$name.out" 2>&1 \
    || { cat "$work/$name.out"; fail "zo-train $name exited non-zero"; }
}
# resumed_same NAME CONFIG STRAIGHT-ARGS...: with the optimizer on $o, 20 steps straight (with STRAIGHT-ARGS) and 10
# steps + --save + a new process resuming for 10 log the same 20 losses and export the same weights
resumed_same() {
  local n=$1 c=$2
  shift 2
  run "$n-straight" "$c" --offload-optimizer "$o" --steps 20 "$@" --export-safetensors "$work/$n-straight.st"
  run "$n-first" "$c" --offload-optimizer "$o" --steps 10 --save "$work/$n-ckpt"
  run "$n-resumed" "$c" --offload-optimizer "$o" --steps 20 --resume "$work/$n-ckpt" \
      --export-safetensors "$work/$n-resumed.st"
  grep -q "resumed from .* at step 10" "$work/$n-resumed.out" || fail "$n: the second run did not resume at step 10"
  losses "$work/$n-straight.jsonl" >"$work/a"
  losses "$work/$n-first.jsonl" "$work/$n-resumed.jsonl" | sed 's/^[^:]*jsonl://' >"$work/b"
  [ "$(wc -l <"$work/a")" -eq 20 ] || fail "$n: expected 20 logged losses"
  cmp -s "$work/a" "$work/b" || { diff "$work/a" "$work/b" | head -4; fail "$n: losses differ after resume"; }
  cmp -s "$work/$n-straight.st" "$work/$n-resumed.st" || fail "$n: final weights differ after resume"
}
mkcfg w4 4
mkcfg w12 12
for o in cpu nvme; do
  # the switch: the plain run's losses up to step W + 1, then not
  run "$o-plain" "$cfg" --offload-optimizer "$o" --steps 8
  run "$o-w4" "$work/w4.json" --offload-optimizer "$o" --steps 8
  losses "$work/$o-plain.jsonl" >"$work/a"
  losses "$work/$o-w4.jsonl" >"$work/b"
  [ "$(wc -l <"$work/a")" -eq 8 ] || fail "$o: expected 8 logged losses, got $(wc -l <"$work/a")"
  cmp -s <(head -5 "$work/a") <(head -5 "$work/b") \
    || { diff "$work/a" "$work/b" | head -4; fail "$o: steps 1-5 differ from the plain run during the warm-up"; }
  cmp -s <(sed -n 6p "$work/a") <(sed -n 6p "$work/b") \
    && fail "$o: step 6 has the plain run's loss: the update after the warm-up was not delayed"
  echo "ok   $o, warm-up 4: steps 1-5 as the plain run, step 6 $(sed -n 6p "$work/b" | sed 's/.*://') (plain $(sed -n 6p "$work/a" | sed 's/.*://'))"

  # saved during the warm-up (step 10 of 12): the resumed run crosses the switch as the straight one does
  resumed_same "$o-w12" "$work/w12.json"
  echo "ok   $o, warm-up 12, saved at step 10: 20 losses and the weights identical across the switch"

  # saved after the switch (step 10, warm-up 4): equal to the run that saved there and went on
  resumed_same "$o-w4s" "$work/w4.json" --save "$work/$o-w4s-s" --save-every 10
  echo "ok   $o, warm-up 4, saved at step 10: identical to the run that saved there (--save-every 10)"
  [ -z "$(ls -A "$work/nvme")" ] || fail "$o: swap files left behind"
done
echo PASS
