#!/usr/bin/env python3
"""zo_train_reference.py ZO_TRAIN SOURCE_DIR - zo-train against scripts/gpt_reference.py (PyTorch), and the
10B presets' first steps.

1. A small model shaped by configs/gpt-10b.json's training settings (AdamW betas 0.9/0.95, weight decay 0.1,
   clipping 1.0, bf16, a linear warmup that reaches its peak within the run), trained 8 steps by zo-train and by the
   PyTorch reference, with the Adam moments in fp32 and in bf16: the losses, learning rates and gradient norms of
   every step agree (losses within 0.02: bf16 products here, fp32 there; the bf16 moments' stochastic rounding
   draws differ). A defect in the model, the engine's step or Adam, the initialisation, the batches or the
   schedule shows as a step that disagrees.
2. configs/gpt-10b.json and gpt-10b-infinity.json: over the run's train.steps, the learning rate of every step
   times n_layer stays within 6.4e-5. At d_model 4096 an Adam update moves every weight by about the learning rate
   in the same direction for every position, and the blocks' shifts of the residual stream add up over the layers:
   with the warmup of 5 steps these presets had, the third step (lr 3e-5, x 47 layers = 1.4e-3) took gpt-10b's loss
   from 11.6 to 20.5 on an H200, and a 1-layer 4096-wide model given 47 x that learning rate rose alike (12.0 to
   31.4); 6.4e-5 is the most the 1-layer model was given (47 x the preset's step 20 with a warmup of 2000 steps)
   on a run whose loss fell (12.0 to 3.8 over 20 steps, validation 11.9 to 3.9; docs/zo-train.md).

Exit 0 pass, 1 fail, 77 skip (no torch in this Python).
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401  (the reference needs it)
except ImportError:
    print("skip: no torch in this Python")
    sys.exit(77)

zo_train, src = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(src, "scripts"))
import gpt_reference  # noqa: E402

fail = 0


def check(ok, what):
    global fail
    print(("ok: " if ok else "FAIL: ") + what)
    fail |= not ok


with open(os.path.join(src, "configs", "gpt-10b.json")) as f:
    preset = json.load(f)

# ---- 1. zo-train and the reference, step by step
with tempfile.TemporaryDirectory(prefix="zo_train_reference.") as tmp:
    for state in ("fp32", "bf16"):
        c = json.loads(json.dumps(preset))
        c["model"] = {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab": 512}
        c["train_batch_size"] = c["train_micro_batch_size_per_gpu"] = 4
        c["gradient_accumulation_steps"] = 1
        c["zero_optimization"] = {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": False}}
        c["zoffload"] = {"optimizer_state_dtype": state}
        c["scheduler"]["params"].update(warmup_max_lr=3e-3, warmup_num_steps=4, total_num_steps=8)
        c["optimizer"]["params"]["lr"] = 3e-3
        c["train"].update(steps=8, val_windows=1, activation_checkpointing=False)
        cfg = os.path.join(tmp, f"small-{state}.json")
        with open(cfg, "w") as f:
            json.dump(c, f)
        ours_log, ref_log = os.path.join(tmp, f"ours-{state}.jsonl"), os.path.join(tmp, f"ref-{state}.jsonl")
        r = subprocess.run([zo_train, "--config", cfg, "--print-every", "1", "--no-sample", "--threads", "1",
                            "--device", "host", "--log-json", ours_log], capture_output=True, text=True)
        if r.returncode != 0:
            check(False, f"zo-train ({state} state) exit {r.returncode}: {r.stderr.strip()[-400:]}")
            continue
        r = subprocess.run([sys.executable, os.path.join(src, "scripts", "gpt_reference.py"), "--config", cfg,
                            "--steps", "8", "--threads", "1", "--log-json", ref_log],
                           capture_output=True, text=True)
        if r.returncode != 0:
            check(False, f"gpt_reference.py ({state} state) exit {r.returncode}: {r.stderr.strip()[-400:]}")
            continue
        ours = [json.loads(line) for line in open(ours_log)]
        ref = [json.loads(line) for line in open(ref_log)]
        check(len(ours) == 8 and len(ref) == 8, f"{state} state: 8 steps logged by each ({len(ours)}, {len(ref)})")
        worst = 0.0
        for o, p in zip(ours, ref):
            dl = abs(o["loss"] - p["loss"])
            worst = max(worst, dl)
            lr_ok = abs(o["lr"] - p["lr"]) <= 1e-6 * max(p["lr"], 1e-12) + 1e-12
            gn_ok = abs(o["grad_norm"] - p["grad_norm"]) <= 0.02 * p["grad_norm"]
            if dl > 0.02 or not lr_ok or not gn_ok:
                check(False, f"{state} state, step {o['step']}: zo-train loss {o['loss']:.4f} lr {o['lr']:.4e} "
                      f"grad_norm {o['grad_norm']:.4f}; reference {p['loss']:.4f} {p['lr']:.4e} "
                      f"{p['grad_norm']:.4f}")
        check(ours[-1]["loss"] < ours[0]["loss"] - 0.5,
              f"{state} state: the loss falls (step 1 {ours[0]['loss']:.4f}, step 8 {ours[-1]['loss']:.4f})")
        print(f"{state} state: largest loss difference over 8 steps {worst:.4f} (step 1: zo-train "
              f"{ours[0]['loss']:.4f}, reference {ref[0]['loss']:.4f})")

# ---- 2. the 10B and 100B presets' learning rate over their run, times their depth
LR_DEPTH_MAX = 6.4e-5
for name in ("gpt-10b.json", "gpt-10b-infinity.json", "gpt-100b-infinity.json"):
    with open(os.path.join(src, "configs", name)) as f:
        c = json.load(f)
    steps, L = c["train"]["steps"], c["model"]["n_layer"]
    lr, step = max((gpt_reference.lr_at(c, s), s) for s in range(1, steps + 1))
    check(lr * L <= LR_DEPTH_MAX,
          f"{name}: the largest learning rate of its {steps} steps, {lr:.3g} (step {step}), x n_layer {L} = "
          f"{lr * L:.3g} (at most {LR_DEPTH_MAX:g})")

sys.exit(1 if fail else 0)
