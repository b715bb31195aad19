"""train_hf_gpt2.py - Hugging Face's GPT2LMHeadModel, built from a config (random weights: nothing is downloaded),
trained on Debian's fortunes with zoffload at ZeRO stage 3: the parameters live on the host tier or NVMe and
exist in the model only while a module computes with them. CPU only for now (the Python front does not drive
CUDA models yet).

    ZOFFLOAD_LIBRARY=build/libzoffload.so PYTHONPATH=python /usr/bin/python3 python/examples/train_hf_gpt2.py --steps 50 [--nvme DIR]
"""
import argparse
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import zoffload

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_gpt import batches, corpus  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--nvme", help="parameters and optimizer state in swap files under this directory")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--stage", type=int, default=3, choices=(1, 2, 3))
    ap.add_argument("--device", default="cpu", help="where the model computes: cpu, cuda, cuda:N")
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=a.layers, n_head=4, n_embd=a.d_model, vocab_size=256, n_positions=128))
    tier = {"device": "nvme", "nvme_path": a.nvme} if a.nvme else {"device": "cpu"}
    zero = {"stage": a.stage, "offload_optimizer": dict(tier)}
    if a.stage == 3:
        zero["offload_param"] = dict(tier)
    engine, _, _, _ = zoffload.initialize(model=model, device=a.device, config={
        "train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": a.bf16},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.01}},
        "gradient_clipping": 1.0, "zero_optimization": zero})
    print("%s: %d parameters on %s, zero stage %d, %s on %s; library %s"
          % (type(model).__name__, sum(s.numel() for s in engine.shapes), a.device, a.stage,
             "parameters and optimizer state" if a.stage == 3 else "optimizer state", tier["device"],
             zoffload.__library__))
    it = batches(corpus(), 8, 64, 0)
    for step in range(1, a.steps + 1):
        x = next(it)[0].to(a.device)
        loss = engine(input_ids=x, labels=x).loss
        engine.backward(loss)
        info = engine.step()
        if step == 1 or step % 10 == 0:
            print("step %4d | loss %.4f | grad norm %.3f | fetches prefetched %d, on demand %d"
                  % (step, loss.item(), info["grad_norm"], info["n_prefetch"], info["n_demand_fetch"]))
    engine.close()


if __name__ == "__main__":
    main()
