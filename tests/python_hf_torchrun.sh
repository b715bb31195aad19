#!/usr/bin/env bash
# python_hf_torchrun.sh LIBZOFFLOAD SOURCE_DIR [STAGE] - zoffload.hf.ZoffloadTrainer on two ranks started by torchrun
# (CPU, gloo): python/tests/hf_torchrun.py, 6 steps of a tiny GPT2LMHeadModel. STAGE 2 (the default): the optimizer
# on cpu; STAGE 3: parameters and optimizer on nvme, the model built under zoffload.zero.Init (zoffload.hf.from_config).
# Each rank builds its model from its own seed (its rank): the engine starts every rank from rank 0's weights.
#   1. one rank with gradient_accumulation_steps 2 and two ranks with 1 train on the same global batch (4 sequences
#      per step): rank r's loss at step k equals, to the last bit, the one rank's micro-batch 2k + r (accelerate
#      deals the Trainer's batches to the ranks in turn, and the engine's mean over two ranks of one micro-batch
#      each is its mean over two accumulated micro-batches), and every step's lr is the same;
#   2. save_model's consolidated weights (final/model.safetensors, written by rank 0) equal the one rank's, tensor
#      for tensor, every key of the model's state dict present;
#   3. the two ranks' checkpoint-3 (save_steps 3: the engine's global_step3 with one shard file per rank) resumed
#      on two ranks gives the uninterrupted run's losses of steps 4-6 to the last bit.
# Exit 77 without torch.distributed.run, transformers or accelerate. ZO_KEEP=1 keeps the work directory.
set -u
lib=$1 src=$2 stage=${3:-2}
py=/usr/bin/python3
"$py" -c "import torch.distributed.run, transformers, accelerate" 2>/dev/null \
  || { echo "skip: /usr/bin/python3 lacks torch.distributed.run, transformers or accelerate"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-pyhftorchrun.XXXXXX")
[ -n "${ZO_KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
export ZOFFLOAD_LIBRARY=$lib PYTHONPATH=$src/python OMP_NUM_THREADS=1
script=$src/python/tests/hf_torchrun.py
case $stage in
  2) what="stage 2 (optimizer on cpu)" ;;
  3) what="stage 3 (parameters and optimizer on nvme, built under zero.Init)" ;;
  *) echo "usage: python_hf_torchrun.sh LIBZOFFLOAD SOURCE_DIR [2|3]"; exit 2 ;;
esac
fail() { echo "FAIL: $*"; exit 1; }
torchrun() { # torchrun with a fresh port and log directory; --redirects/--tee: see python_torchrun.sh
  local port
  port=$("$py" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  rm -rf "$work/logs"
  "$py" -m torch.distributed.run --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$port" \
    --redirects 2 --tee 2 --log_dir "$work/logs" "$@"
}
"$py" "$script" "$stage" 2 6 "$work/one" "$work/one.loss" >"$work/one.out" 2>&1 \
  || { tail -20 "$work/one.out"; fail "one rank, gradient_accumulation_steps 2"; }
torchrun "$script" "$stage" 1 6 "$work/two" "$work/two.loss" >"$work/two.out" 2>&1 \
  || { grep -v '^\[W' "$work/two.out" | tail -30; fail "two ranks under torchrun"; }
for r in 0 1; do
  awk -v r=$r 'NR % 2 == (r + 1) % 2' "$work/one.loss.rank0" >"$work/want.rank$r"
  cmp -s "$work/want.rank$r" "$work/two.loss.rank$r" \
    || { paste "$work/want.rank$r" "$work/two.loss.rank$r"; fail "rank $r's losses differ from one rank's micro-batches"; }
  cmp -s "$work/one.loss.rank0.lr" "$work/two.loss.rank$r.lr" \
    || { paste "$work/one.loss.rank0.lr" "$work/two.loss.rank$r.lr"; fail "rank $r's lrs differ from one rank's"; }
done
echo "ok   torchrun --nproc_per_node 2, ZoffloadTrainer $what: $(wc -l <"$work/two.loss.rank0") steps, each rank's losses and lrs identical to one rank accumulating 2 micro-batches"
"$py" - "$work/one/final/model.safetensors" "$work/two/final/model.safetensors" <<'PY' || fail "save_model's consolidated weights"
import sys
import torch
from safetensors.torch import load_file
import transformers
want, got = load_file(sys.argv[1]), load_file(sys.argv[2])
cfg = transformers.GPT2Config(vocab_size=96, n_positions=16, n_embd=32, n_layer=2, n_head=2)
keys = set(transformers.GPT2LMHeadModel(cfg).state_dict()) - {"lm_head.weight"}  # tied to wte, saved once
bad = [k for k in sorted(keys) if k not in got or k not in want or not torch.equal(want[k], got[k])]
if bad or set(got) != set(want):
    print("rank 0's final/model.safetensors differs from one rank's: %s; keys only in one: %s"
          % (bad[:8], sorted(set(got) ^ set(want))[:8]))
    sys.exit(1)
print("ok   save_model on two ranks: rank 0's consolidated weights (%d tensors) equal the one-rank run's" % len(got))
PY
[ -f "$work/two/checkpoint-3/global_step3/rank00001.bin" ] || fail "no rank00001.bin in checkpoint-3/global_step3"
torchrun "$script" "$stage" 1 6 "$work/res" "$work/res.loss" "$work/two/checkpoint-3" >"$work/res.out" 2>&1 \
  || { grep -v '^\[W' "$work/res.out" | tail -30; fail "resume from checkpoint-3 on two ranks"; }
for r in 0 1; do
  tail -n 3 "$work/two.loss.rank$r" | cmp -s - "$work/res.loss.rank$r" \
    || { paste "$work/two.loss.rank$r" "$work/res.loss.rank$r"; fail "rank $r: the resumed losses differ"; }
done
echo "ok   resumed from checkpoint-3 on two ranks: steps 4-6's losses identical to the uninterrupted run"
echo PASS
