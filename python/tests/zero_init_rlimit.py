"""zero_init_rlimit.py LIMIT_BYTES INIT NVME_DIR VOCAB D LAYERS STEPS - a child of test_zero_init.py: under an
address-space limit (RLIMIT_AS, what `ulimit -v` sets; 0: none), build a GPT-2-shaped model (tied embedding,
pre-LayerNorm blocks of causal self-attention and a 4x MLP) with zoffload.zero.Init (INIT 1, remote_device nvme)
or plainly (INIT 0), train it STEPS steps at stage 3 with parameters and optimizer state on NVMe, and print one
JSON line: the losses, the model's fp32 bytes and /proc/self/status's VmPeak/VmSize at each phase."""
import json
import os
import resource
import sys

limit, init, nvme = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
vocab, d, layers, steps = (int(x) for x in sys.argv[4:8])
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import zoffload  # noqa: E402
import zoffload.zero  # noqa: E402


def _init(**kw):
    """zoffload.initialize's engine (the DeepSpeed 4-tuple's first item, or the engine itself)."""
    r = zoffload.initialize(**kw)
    return r[0] if isinstance(r, tuple) else r


def vm():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmPeak", "VmSize", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) * 1024
    return out


class Attn(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        a = (q @ k.transpose(-2, -1)) / (c // self.heads) ** 0.5
        a = a.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(d), Attn(d, heads), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT2(nn.Module):
    def __init__(self, vocab, d, layers, heads=8, seq=64):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        # GPT-2's head is the token embedding, used outside its module: registered as DeepSpeed's users do
        zoffload.zero.register_external_parameter(self, self.wte.weight)
        nn.init.normal_(self.wte.weight, std=0.02)  # GPT-2's init, on a child's parameter Init partitioned already

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
       "zero_optimization": {"stage": 3, "sub_group_size": 1 << 20,
                             "stage3_max_live_parameters": vocab * d,
                             "offload_optimizer": {"device": "nvme", "nvme_path": nvme, "buffer_count": 2},
                             "offload_param": {"device": "nvme", "nvme_path": nvme, "buffer_count": 2,
                                           "buffer_size": vocab * d, "max_in_cpu": vocab * d}},
       "zoffload": {"device_arena_bytes": "fit"}}
os.makedirs(nvme, exist_ok=True)
phases = {"imported": vm()}
torch.manual_seed(0)
try:
    if init:
        with zoffload.zero.Init(config_dict_or_path=cfg, remote_device="nvme"):
            model = GPT2(vocab, d, layers)
    else:
        model = GPT2(vocab, d, layers)
    numel = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
    phases["built"] = vm()
    engine = _init(model=model, config=cfg)
    phases["initialized"] = vm()
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randint(0, vocab, (2, 17), generator=g)
        loss = engine(x[:, :-1], x[:, 1:])
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
        phases["step%d" % len(losses)] = vm()
    phases["trained"] = vm()
    mem = engine.memory()
    engine.close()
    print(json.dumps({"ok": True, "losses": losses, "fp32_bytes": 4 * numel, "phases": phases,
                      "engine": {k: v for k, v in mem.items() if k != "arena"}}))
except MemoryError as e:  # the limit bit (torch raises RuntimeError for a failed allocation, Python MemoryError)
    print(json.dumps({"ok": False, "error": "MemoryError: %s" % e, "phases": phases}))
except RuntimeError as e:
    print(json.dumps({"ok": False, "error": "%s: %s" % (type(e).__name__, str(e)[:300]), "phases": phases}))
