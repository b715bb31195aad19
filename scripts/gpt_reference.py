#!/usr/bin/env python3
"""gpt_reference.py - zo-train's first steps again in PyTorch (CPU, float32), to check its losses.

The same model (models/gpt.c: GPT-2, pre-LayerNorm, tanh GELU, tied wte), the same initial weights
(gpt_param_init's counter-based normals, bit for bit up to float32 log/cos), the same batches
(models/data.c: the corpus split into 4096-byte blocks by a splitmix64 hash, windows drawn by
splitmix64 from train.seed), the same step (engine: global gradient norm, clipping to
gradient_clipping, AdamW as base/adam_elem.h with bias correction, the learning rate of
config/config.c's zo_config_lr_at, DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR) and,
with bf16 on, the same precision split: the forward and backward run on the weights rounded to
bf16 (the engine's working copy), Adam on float32 masters; `--state-dtype bf16` keeps exp_avg and
exp_avg_sq in bf16 with stochastic rounding (zoffload.optimizer_state_dtype "bf16").

Each step prints the loss, the learning rate, the global gradient norm before clipping, the norm of
the update, the mean log-sum-exp of the logits over the whole vocabulary and over the 256 byte ids,
the RMS of the last block's output and the share of its energy in the one direction common to all
positions, and, per kind of tensor, the update's RMS against the weights' RMS:

    /usr/bin/python3 scripts/gpt_reference.py --config FILE [--n-layer N] [--seq-len T] [--batch B] \\
        [--steps 20] [--state-dtype fp32|bf16] [--log-json OUT]

(the overrides replace model.n_layer, model.seq_len and train_micro_batch_size_per_gpu). Compare with
`zo-train --config FILE --print-every 1 --log-json OUT` on a config with the same values: its `loss`,
`lr` and `grad_norm` agree to the bf16 products' rounding (at d_model 4096, 1 layer, T 64, B 4, with
configs/gpt-10b.json's former 5-step warmup: 11.8312, 11.9947, 12.0251, then 8.6724 here and 8.6725 in
zo-train). The ctest zo_train_reference compares the two on a small model.
"""
import argparse
import json
import math
import os
import stat
import sys

import numpy as np
import torch
import torch.nn.functional as F

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
PER_LAYER = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
             "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
             "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")


def sm64(z):
    """splitmix64's finaliser of z + gamma (models/rng.h), for a Python int."""
    z = (z + GAMMA) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def sm64_np(z):
    """sm64 over a numpy uint64 array (multiplication wraps modulo 2^64)."""
    z = z + np.uint64(GAMMA)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


# ---------------------------------------------------------------- the parameters (models/gpt.c)

def param_specs(L, C, V, T):
    """(name, shape, kind, std) in gpt_param_specs' order; kind 0 normal, 1 ones, 2 zeros."""
    std_proj = 0.02 / math.sqrt(2.0 * L)
    out = [("wte", (V, C), 0, 0.02), ("wpe", (T, C), 0, 0.02)]
    for layer in range(L):
        shapes = [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,),
                  (C, 4 * C), (C,)]
        for k, (nm, sh) in enumerate(zip(PER_LAYER, shapes)):
            kind = 1 if nm.startswith("ln") and nm.endswith("weight") else 2 if len(sh) == 1 else 0
            std = std_proj if nm.endswith("c_proj.weight") else 0.02
            out.append((f"h.{layer}.{nm}", sh, kind, std))
    out += [("ln_f.weight", (C,), 1, 0.02), ("ln_f.bias", (C,), 2, 0.02)]
    return out


def param_init(i, shape, kind, std, seed):
    """gpt_param_init(): N(0, std) by splitmix64 + Box-Muller on element pairs (key of seed and i)."""
    n = int(np.prod(shape))
    if kind == 1:
        return torch.ones(shape)
    if kind == 2:
        return torch.zeros(shape)
    key = sm64(seed ^ sm64(0x5A17 + i))
    pairs = n // 2 + (n & 1)
    out = np.empty(2 * pairs, dtype=np.float32)
    chunk = 1 << 22
    two_pi = np.float32(6.28318530717958647)
    for b in range(0, pairs, chunk):
        k = np.arange(b, min(pairs, b + chunk), dtype=np.uint64)
        c = np.uint64(key) + np.uint64(2) * k
        u1 = ((sm64_np(c) >> np.uint64(40)).astype(np.float32) + np.float32(1)) * np.float32(2**-24)
        u2 = ((sm64_np(c + np.uint64(1)) >> np.uint64(40)).astype(np.float32) + np.float32(1)) \
            * np.float32(2**-24)
        rad = np.sqrt(np.float32(-2) * np.log(u1))
        th = two_pi * u2
        sr = np.float32(std) * rad
        out[2 * b:2 * b + 2 * len(k):2] = sr * np.cos(th)
        out[2 * b + 1:2 * b + 2 * len(k):2] = sr * np.sin(th)
    return torch.from_numpy(out[:n].reshape(shape))


# ---------------------------------------------------------------- the corpus (models/data.c)

def read_corpus(path):
    if os.path.isdir(path):
        names = sorted((n for n in os.listdir(path) if not n.endswith((".dat", ".u8"))),
                       key=lambda s: s.encode())
        data = b""
        for n in names:
            full = os.path.join(path, n)
            if stat.S_ISREG(os.lstat(full).st_mode):
                with open(full, "rb") as f:
                    data += f.read()
        return data
    with open(path, "rb") as f:
        return f.read()


def split_corpus(data, val_fraction, split_seed):
    """The train and val splits: 4096-byte blocks, block k to val when its hash is below the fraction."""
    nblk = (len(data) + 4095) // 4096
    key = sm64(split_seed)
    thr = int(val_fraction * 9007199254740992.0)
    hs = [sm64(k ^ key) for k in range(nblk)]
    is_val = [(h >> 11) < thr for h in hs]
    if val_fraction > 0 and not any(is_val):
        is_val[min(range(nblk), key=lambda k: (hs[k], -k))] = True
    if all(is_val) and nblk > 1:
        is_val[max(range(nblk), key=lambda k: (hs[k], k))] = False
    blocks = [data[k * 4096:(k + 1) * 4096] for k in range(nblk)]
    train = b"".join(b for b, v in zip(blocks, is_val) if not v)
    val = b"".join(b for b, v in zip(blocks, is_val) if v)
    return train, val


class Batches:
    """data_next_batch(): B windows of T+1 bytes, starts by Lemire's multiply-shift of splitmix64."""

    def __init__(self, split, seed):
        self.src = np.frombuffer(split, dtype=np.uint8)
        self.state = (seed ^ GAMMA) & M64

    def next(self, B, T):
        rng = len(self.src) - T
        rows = []
        for _ in range(B):
            self.state = (self.state + GAMMA) & M64
            start = (sm64(self.state) * rng) >> 64
            rows.append(self.src[start:start + T + 1].astype(np.int64))
        w = torch.from_numpy(np.stack(rows))
        return w[:, :-1], w[:, 1:]


# ---------------------------------------------------------------- the model

def forward(P, L, NH, idx, tgt):
    B, T = idx.shape
    C = P["wte"].shape[1]
    x = P["wte"][idx] + P["wpe"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for layer in range(L):
        p = lambda nm: P[f"h.{layer}.{nm}"]  # noqa: E731
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), 1e-5)
        q, k, v = F.linear(h, p("attn.c_attn.weight"), p("attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p("attn.c_proj.weight"), p("attn.c_proj.bias"))
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), 1e-5)
        h = F.gelu(F.linear(h, p("mlp.c_fc.weight"), p("mlp.c_fc.bias")), approximate="tanh")
        x = x + F.linear(h, p("mlp.c_proj.weight"), p("mlp.c_proj.bias"))
    res = x.detach()
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
    logits = x @ P["wte"].t()
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.reshape(-1)), logits, res


# ---------------------------------------------------------------- the schedule (config/config.c)

def lr_at(cfg, step):
    """zo_config_lr_at(): step t (from 1) runs DeepSpeed's iteration t - 2."""
    opt = cfg.get("optimizer", {}).get("params", {})
    sch = cfg.get("scheduler")
    lr = opt.get("lr", 1e-3)
    if not sch:
        return lr
    sp, typ = sch.get("params", {}), sch["type"]
    it = max(step, 1) - 2
    w = max(2, sp.get("warmup_num_steps", 1000))
    log_type = sp.get("warmup_type", "log") == "log"
    warm = 0.0
    if 0 <= it < w:
        warm = math.log(it + 1) / math.log(w) if log_type else it / w
    if typ in ("WarmupLR", "WarmupDecayLR"):
        lo, hi = sp.get("warmup_min_lr", 0.0), sp.get("warmup_max_lr", 0.001)
        if it < 0:
            return lo
        if it < w:
            return lo + (hi - lo) * warm
        if typ == "WarmupLR":
            return hi
        g = (sp["total_num_steps"] - it) / max(1.0, sp["total_num_steps"] - w)
        return lo + (hi - lo) * max(g, 0.0)
    if typ == "WarmupCosineLR":
        if it < 0:
            return 0.0
        r0, rmin = sp.get("warmup_min_ratio", 0.0), sp.get("cos_min_ratio", 0.0001)
        if it < w:
            ratio = r0 + warm * (1 - r0)
        else:
            ratio = (1 + math.cos(math.pi * (it - w + 1) / (sp["total_num_steps"] - w))) / 2
            ratio = max(0.0, rmin + (1 - rmin) * ratio)
        return lr * ratio
    sys.exit(f"gpt_reference.py: scheduler.type {typ!r} is not one zo-train runs")


# ---------------------------------------------------------------- bf16

def to_bf16(t):
    """Round to nearest even, kept in float32 (the engine's working copy)."""
    return t.to(torch.bfloat16).to(torch.float32)


def to_bf16_sr(t, gen):
    """Stochastic rounding to bf16 (adam_elem.h: add 16 random low bits, truncate), kept in float32."""
    bits = t.view(torch.int32)
    r = torch.randint(0, 1 << 16, t.shape, generator=gen, dtype=torch.int32)
    finite = torch.isfinite(t)
    out = ((bits + r) & ~0xFFFF).view(torch.float32)
    return torch.where(finite, out, t)


def group_of(name):
    for g in ("wte", "wpe", "c_attn.weight", "attn.c_proj.weight", "c_fc.weight", "mlp.c_proj.weight"):
        if name.endswith(g) or name == g:
            return g
    return "ln+bias"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="zo-train JSON config")
    ap.add_argument("--n-layer", type=int, help="override model.n_layer")
    ap.add_argument("--seq-len", type=int, help="override model.seq_len")
    ap.add_argument("--batch", type=int, help="override train_micro_batch_size_per_gpu")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--state-dtype", choices=("fp32", "bf16"),
                    help="Adam's moments; default the config's zoffload.optimizer_state_dtype")
    ap.add_argument("--data", help="corpus; default the config's data.path")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--log-json", help="write one JSON object per step to this file")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    with open(a.config) as f:
        cfg = json.load(f)
    m = cfg["model"]
    L = a.n_layer or m["n_layer"]
    NH, C, V = m["n_head"], m["d_model"], m["vocab"]
    T = a.seq_len or m["seq_len"]
    B = a.batch or cfg.get("train_micro_batch_size_per_gpu", 8)
    gas = cfg.get("gradient_accumulation_steps", 1)
    state_dtype = a.state_dtype or cfg.get("zoffload", {}).get("optimizer_state_dtype", "fp32")
    bf16 = cfg.get("bf16", {}).get("enabled", False)
    seed = cfg.get("train", {}).get("seed", 1337)
    dcfg = cfg.get("data", {})
    data = read_corpus(a.data or dcfg.get("path", "/usr/share/games/fortunes"))
    train, _ = split_corpus(data, dcfg.get("val_fraction", 0.05), dcfg.get("seed", 1))
    batches = Batches(train, seed)
    op = cfg.get("optimizer", {}).get("params", {})
    b1, b2 = op.get("betas", (0.9, 0.999))
    eps, wd = op.get("eps", 1e-8), op.get("weight_decay", 0.0)
    clip = cfg.get("gradient_clipping", 0.0)

    specs = param_specs(L, C, V, T)
    master = {nm: param_init(i, sh, kind, std, seed) for i, (nm, sh, kind, std) in enumerate(specs)}
    mom = {nm: torch.zeros_like(p) for nm, p in master.items()}
    vel = {nm: torch.zeros_like(p) for nm, p in master.items()}
    gen = torch.Generator().manual_seed(seed)
    print(f"gpt_reference: L {L} C {C} NH {NH} V {V} T {T} B {B} gas {gas}: "
          f"{sum(p.numel() for p in master.values())} parameters; bf16 {'on' if bf16 else 'off'}, "
          f"Adam state {state_dtype}, clipping {clip}, betas ({b1}, {b2}), eps {eps}, wd {wd}",
          flush=True)
    log = open(a.log_json, "w") if a.log_json else None
    for step in range(1, a.steps + 1):
        P = {nm: (to_bf16(p) if bf16 else p.clone()).requires_grad_(True) for nm, p in master.items()}
        loss_sum = 0.0
        grads = {nm: torch.zeros_like(p) for nm, p in master.items()}
        for _ in range(gas):
            idx, tgt = batches.next(B, T)
            loss, logits, res = forward(P, L, NH, idx, tgt)
            gs = torch.autograd.grad(loss / gas, list(P.values()))
            for (nm, _), g in zip(P.items(), gs):
                grads[nm] += to_bf16(g) if bf16 else g
            loss_sum += loss.item() / gas
        with torch.no_grad():
            lg = logits.view(-1, V)
            used = lg[:, :256]
            lse = torch.logsumexp(lg, dim=1)
            lse_used = torch.logsumexp(used, dim=1)
            # the last block's output: its RMS, and the share of its energy in the direction common
            # to every position (1: every position the same vector)
            r = res.reshape(-1, C)
            res_rms = float(r.pow(2).mean().sqrt())
            shared = float(r.mean(0).pow(2).sum() / r.pow(2).sum(1).mean())
        del P, logits, gs, res
        norm = math.sqrt(sum(float(torch.linalg.vector_norm(g, dtype=torch.float64)) ** 2 for g in grads.values()))
        coef = clip / (norm + 1e-6) if clip > 0 and norm > clip else 1.0
        lr = lr_at(cfg, step)
        bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
        step_size = lr / bc1
        sqrt_bc2 = torch.tensor(math.sqrt(bc2), dtype=torch.float32)
        upd2, groups = 0.0, {}
        lr_wd = torch.tensor(lr * wd, dtype=torch.float32)
        for nm, p in master.items():
            g = grads[nm].mul_(torch.tensor(coef, dtype=torch.float32))
            mm = mom[nm].mul_(b1).add_(torch.tensor(1 - b1, dtype=torch.float32) * g)
            vv = vel[nm].mul_(b2).add_((torch.tensor(1 - b2, dtype=torch.float32) * g) * g)
            delta = mm / vv.sqrt().div_(sqrt_bc2).add_(eps)
            delta.mul_(-step_size).sub_(p * lr_wd)  # the decoupled decay, then Adam's step
            if state_dtype == "bf16":
                mom[nm], vel[nm] = to_bf16_sr(mm, gen), to_bf16_sr(vv, gen)
            d2 = float(torch.linalg.vector_norm(delta, dtype=torch.float64)) ** 2
            w2 = float(torch.linalg.vector_norm(p, dtype=torch.float64)) ** 2
            p.add_(delta)
            del delta, g
            grads[nm] = None
            upd2 += d2
            gr = groups.setdefault(group_of(nm), [0.0, 0.0, 0])
            gr[0] += d2
            gr[1] += w2
            gr[2] += p.numel()
        rms = {g: (math.sqrt(d / n), math.sqrt(w / n)) for g, (d, w, n) in groups.items()}
        line = (f"step {step:3d} | lr {lr:.3e} | loss {loss_sum:.4f} | grad_norm {norm:.4e} | "
                f"clip {coef:.3g} | update {math.sqrt(upd2):.4e} | logit lse all {lse.mean():.2f} "
                f"bytes {lse_used.mean():.2f} | residual rms {res_rms:.3g} shared {shared:.3f} | "
                "update rms / weight rms: "
                + ", ".join(f"{g} {d:.2e}/{w:.2e}" for g, (d, w) in rms.items()))
        print(line, flush=True)
        if log:
            log.write(json.dumps({"step": step, "lr": lr, "loss": loss_sum, "grad_norm": norm,
                                  "clip": coef, "update_norm": math.sqrt(upd2),
                                  "lse_all": float(lse.mean()), "lse_bytes": float(lse_used.mean()),
                                  "residual_rms": res_rms, "residual_shared": shared,
                                  "update_rms": {g: d for g, (d, _) in rms.items()},
                                  "weight_rms": {g: w for g, (_, w) in rms.items()}}) + "\n")
            log.flush()


if __name__ == "__main__":
    main()
