#!/usr/bin/env bash
# zo_train_resume.sh ZO_TRAIN CONFIG CORPUS - resume is exact: for every combination of
# offload_optimizer.device and offload_param.device (none, cpu, nvme), 20 steps straight and
# 10 steps + --save + a new process resuming for 10 log the same losses to the last bit and
# export byte-identical weights (safetensors, fp32); with parameter offload under a device
# limit below the model. Also: a checkpoint taken with the state on nvme resumes with it on
# cpu (the format does not depend on the tier), the app state names a wrong model, and a
# flipped byte in a shard file is reported naming the file and the tensor; --seed on resume warns that it is not
# used; a resume at the last step reports the checkpoint's val loss (no nan). Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-resume.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
grads=65536 fetch=49152 state=590000 # as in zo_train_tiers.sh
mkdir -p "$work/nvme"
losses() { grep -o '"step":[0-9]*,"loss":[^,]*,"val_loss":[^,]*' "$@"; }
run() { # NAME ARGS...: one zo-train run, output in $work/NAME.out, JSON in $work/NAME.jsonl
  local name=$1
  shift
  "$zo" --config "$cfg" --data "$corpus" --threads 2 --no-sample --nvme-path "$work/nvme" \
        --log-json "$work/$name.jsonl" "$@" >"$work/$name.out" 2>&1 \
    || { cat "$work/$name.out"; fail "zo-train $name exited non-zero"; }
}
for p in none cpu nvme; do
  for o in none cpu nvme; do
    limit=0
    if [ "$p" != none ]; then
      limit=$((grads + fetch))
      [ "$o" = none ] && limit=$((limit + state))
    fi
    t=(--offload-optimizer "$o" --offload-param "$p" --device-memory-limit "$limit")
    n="p$p-o$o"
    run "$n-straight" "${t[@]}" --steps 20 --export-safetensors "$work/$n-straight.st"
    run "$n-first" "${t[@]}" --steps 10 --save "$work/$n-ckpt"
    run "$n-resumed" "${t[@]}" --steps 20 --save "$work/$n-ckpt" --resume latest \
        --export-safetensors "$work/$n-resumed.st"
    grep -q "resumed from .* at step 10" "$work/$n-resumed.out" || fail "$n: the second run did not resume at step 10"
    losses "$work/$n-straight.jsonl" >"$work/a"
    losses "$work/$n-first.jsonl" "$work/$n-resumed.jsonl" | sed 's/^[^:]*jsonl://' >"$work/b"
    [ "$(wc -l <"$work/a")" -ge 4 ] || fail "$n: too few logged losses"
    cmp -s "$work/a" "$work/b" || { diff "$work/a" "$work/b" | head -4; fail "$n: losses differ after resume"; }
    cmp -s "$work/$n-straight.st" "$work/$n-resumed.st" || fail "$n: final weights differ after resume"
    [ -z "$(ls -A "$work/nvme")" ] || fail "$n: swap files left behind"
    echo "ok   offload_param $p, offload_optimizer $o: $(wc -l <"$work/a") losses and $(stat -c %s "$work/$n-straight.st") bytes of weights identical"
  done
done

# A checkpoint taken with the optimizer state on nvme continues with it in host memory.
run cross "${t[@]}" --offload-optimizer cpu --offload-param none --device-memory-limit 0 --steps 20 \
    --resume "$work/pnone-onvme-ckpt/step-000000000010" --export-safetensors "$work/cross.st"
cmp -s "$work/cross.st" "$work/pnone-ocpu-straight.st" || fail "nvme checkpoint resumed on cpu: weights differ"
echo "ok   a checkpoint of nvme state resumed with the state on cpu: same weights"

# --seed on resume is not used (the checkpoint's seed and RNG state are): a warning names the flag, the weights are
# the straight run's (was: silently ignored).
run seed --offload-optimizer cpu --offload-param none --device-memory-limit 0 --steps 20 \
    --resume "$work/pnone-ocpu-ckpt/step-000000000010" --seed 7 --export-safetensors "$work/seed.st"
grep -q "warning: --resume: --seed 7 is not used: the run continues the checkpoint's (seed 1337)" "$work/seed.out" \
  || { cat "$work/seed.out"; fail "--seed on resume: no warning naming it"; }
cmp -s "$work/seed.st" "$work/pnone-ocpu-straight.st" || fail "--seed on resume: weights differ from the straight run's"
echo "ok   --seed 7 on resume: $(grep -o 'warning: .*(seed 1337)' "$work/seed.out"); same weights"

# Resumed at the last step (checkpoint step == --steps): nothing to train, the checkpoint's val loss reported, exit 0
# (was: "0 steps ... train loss nan | val loss 5.xxxx -> nan").
run final --offload-optimizer cpu --offload-param none --device-memory-limit 0 --steps 20 \
    --resume "$work/pnone-ocpu-ckpt"
val=$(grep -o '"step":20,[^}]*"val_loss":[^,}]*' "$work/pnone-ocpu-straight.jsonl" | sed 's/.*"val_loss"://')
want=$(printf 'no steps trained (resumed at step 20, which is --steps) | val loss %.4f (the checkpoint' "$val")
grep -qF "$want" "$work/final.out" || { cat "$work/final.out"; fail "resumed at the last step: no '$want'"; }
grep -qi nan "$work/final.out" && { cat "$work/final.out"; fail "resumed at the last step: nan in the output"; }
echo "ok   resumed at the last step: $(grep 'done:' "$work/final.out")"

# The wrong model is refused by name; so is a flipped byte, naming the file and the tensor.
ck="$work/pnone-ocpu-ckpt"
printf '{"train_batch_size": 8, "model": {"n_layer": 3, "n_head": 2, "d_model": 32, "seq_len": 32}}\n' >"$work/other.json"
"$zo" --config "$work/other.json" --data "$corpus" --no-sample --resume "$ck" >"$work/wrong.out" 2>&1 \
  && fail "a checkpoint of another model was accepted"
grep -q "error: --resume: .*tensors: the checkpoint has 28, this engine registered 40" "$work/wrong.out" \
  || { cat "$work/wrong.out"; fail "another model: no error naming the tensor count"; }
echo "ok   another model: $(grep error: "$work/wrong.out")"
f=$(ls "$ck"/step-000000000020/rank*.bin)
off=$(python3 - "$f" "$ck/step-000000000020/manifest.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[2]))["tensors"][1]          # wpe
off = t["exp_avg_sq"]["offset"]
with open(sys.argv[1], "r+b") as f:                      # flip one bit of a byte inside its exp_avg_sq
    f.seek(off + 3)
    b = f.read(1)
    f.seek(off + 3)
    f.write(bytes([b[0] ^ 0x40]))
print(off)
EOF
)
"$zo" --config "$cfg" --data "$corpus" --no-sample --resume "$ck" --steps 21 >"$work/flip.out" 2>&1 \
  && fail "a flipped byte was not detected"
grep -q "error: --resume: checkpoint '$f': tensor 'wpe' exp_avg_sq at offset $off .*CRC32C" "$work/flip.out" \
  || { cat "$work/flip.out"; fail "the flipped byte was not reported with file, tensor and offset"; }
echo "ok   flipped byte: $(grep error: "$work/flip.out")"
echo PASS
