"""train_gpt.py - a small torch GPT (byte-level, causal) trained on Debian's fortunes corpus with zoffload:
the optimizer state offloaded to the CPU (or NVMe) by the DeepSpeed-style config below, the model and its
training loop unchanged but for three lines.

    ZOFFLOAD_LIBRARY=build/libzoffload.so PYTHONPATH=python /usr/bin/python3 python/examples/train_gpt.py --steps 200 [--nvme DIR] [--device cuda]
"""
import argparse
import glob
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)  # causal: no look ahead
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=256, d=64, layers=2, heads=4, seq=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def corpus():
    """The bytes of Debian's fortunes (package fortunes), else a fixed pseudo-random text."""
    files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*") if os.path.isfile(f) and "." not in
                   os.path.basename(f))
    data = b"".join(open(f, "rb").read() for f in files)
    if len(data) < 10000:
        data = bytes(torch.randint(32, 127, (200000,), generator=torch.Generator().manual_seed(0)).tolist())
    return torch.tensor(list(data), dtype=torch.long)


def batches(data, batch, seq, seed):
    g = torch.Generator().manual_seed(seed)
    while True:
        ix = torch.randint(0, len(data) - seq - 1, (batch,), generator=g)
        x = torch.stack([data[i:i + seq] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + seq] for i in ix])
        yield x, y


def train_steps(engine, it, steps, infos=None):
    """@steps training steps of @engine on the (x, y) batches of @it (forward, engine.backward, engine.step): the
    losses as floats, and each step's info (what step() returned) appended to @infos when given."""
    losses = []
    for _ in range(steps):
        x, y = next(it)
        loss = engine(x, y)
        engine.backward(loss)
        info = engine.step()
        if infos is not None:
            infos.append(info)
        losses.append(loss.item())
    return losses


def config(lr=3e-3, device="cpu", nvme=None, batch=8, bf16=False):
    off = {"device": device, "pin_memory": True}
    if device == "nvme":
        off["nvme_path"] = nvme
    return {"bf16": {"enabled": bf16}, "train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": lr, "betas": [0.9, 0.95], "eps": 1e-8,
                                                      "weight_decay": 0.01}},
            "zero_optimization": {"stage": 2, "offload_optimizer": off}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--nvme", help="put the optimizer state in swap files under this directory")
    ap.add_argument("--device", default="cpu", help="where the model computes: cpu, cuda, cuda:N")
    ap.add_argument("--bf16", action="store_true", help="bf16 working weights and gradients")
    a = ap.parse_args()
    import zoffload
    torch.manual_seed(1337)
    model = GPT()  # built on the CPU; initialize() puts the working weights where --device says
    engine, _, _, _ = zoffload.initialize(model=model, device=a.device,
                                          config=config(device="nvme" if a.nvme else "cpu", nvme=a.nvme, bf16=a.bf16))
    data = corpus()
    it = batches(data, 8, 32, 0)
    for step in range(1, a.steps + 1):
        x, y = (t.to(a.device) for t in next(it))
        loss = engine(x, y)
        engine.backward(loss)
        info = engine.step()
        if step % 20 == 0 or step == 1:
            print("step %4d | loss %.4f | lr %.2e | grad norm %.3f" % (step, loss.item(), info["lr"],
                                                                         info["grad_norm"]))
    engine.close()


if __name__ == "__main__":
    main()
