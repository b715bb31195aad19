"""ds_gradient_clipping.py - why DeepSpeed 0.19.8's losses leave torch's in docs/pytorch/vs-deepspeed.md: a config
without "gradient_clipping" clips the gradients' global norm at 1.0 there (GRADIENT_CLIPPING_DEFAULT, 0 until
deepspeedai/DeepSpeed#8068), where zoffload, torch and DeepSpeed before it do not clip.

Two small models (two nn.Linear layers; an nn.Embedding in front of them, whose gradient norms pass 1 from the
second step) trained by DeepSpeed's engine (ZeRO stage 2, offload_optimizer cpu, DeepSpeedCPUAdam as the client
optimizer, fp32, DS_ACCELERATOR=cpu, one rank) with the key left out and with "gradient_clipping": 0, against
torch.optim.AdamW from the same weights on the same batches, unclipped and clipped with clip_grad_norm_(1.0).
Prints the engine's resolved gradient_clipping(), torch's gradient norm at each step, and the largest weight
difference after each step. Run with the torch 2 venv's python:  DIR/bin/python ds_gradient_clipping.py"""
import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")
for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
             ("MASTER_PORT", "29621")):
    os.environ.setdefault(k, v)

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.ops.adam import DeepSpeedCPUAdam  # noqa: E402

STEPS, LR = 4, 1e-2
MODELS = ("two nn.Linear", "nn.Embedding + two nn.Linear")


def model(kind):
    torch.manual_seed(0)
    first = [torch.nn.Embedding(50, 8)] if kind == MODELS[1] else []
    return torch.nn.Sequential(*first, torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))


def batch(step, kind):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 8, generator=g) if kind == MODELS[0] else torch.randint(0, 10, (4,), generator=g)


def torch_run(kind, clip):
    m = model(kind)
    opt = torch.optim.AdamW(m.parameters(), lr=LR, weight_decay=0, foreach=False)
    weights, norms = [], []
    for s in range(STEPS):
        m(batch(s, kind)).pow(2).mean().backward()
        norms.append(torch.nn.utils.clip_grad_norm_(m.parameters(), clip if clip else float("inf")).item())
        opt.step()
        opt.zero_grad()
        weights.append([p.detach().clone() for p in m.parameters()])
    return weights, norms


def deepspeed_run(kind, clip_key):
    m = model(kind)
    cfg = {"train_batch_size": 4, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    if clip_key is not None:
        cfg["gradient_clipping"] = clip_key
    eng, _, _, _ = deepspeed.initialize(model=m, optimizer=DeepSpeedCPUAdam(m.parameters(), lr=LR), config=cfg)
    weights = []
    for s in range(STEPS):
        loss = eng(batch(s, kind)).pow(2).mean()
        eng.backward(loss)
        eng.step()
        weights.append([p.detach().clone() for p in eng.module.parameters()])
    return weights, eng.gradient_clipping()


def diff(a, b):
    return "  ".join("%.2e" % max((p - q).abs().max().item() for p, q in zip(x, y)) for x, y in zip(a, b))


def main():
    print("largest |weight - torch AdamW's weight| after steps 1..%d (lr %g)" % (STEPS, LR))
    for kind in MODELS:
        plain, norms = torch_run(kind, None)
        clipped, _ = torch_run(kind, 1.0)
        print("%s: torch's gradient norms %s" % (kind, "  ".join("%.3f" % n for n in norms)))
        for key in (None, 0.0):
            w, resolved = deepspeed_run(kind, key)
            what = "key left out" if key is None else "gradient_clipping %g" % key
            print("  DeepSpeed, %-21s (gradient_clipping() = %g): vs torch unclipped %s | vs clipped at 1.0 %s"
                  % (what, resolved, diff(w, plain), diff(w, clipped)), flush=True)


if __name__ == "__main__":
    main()
