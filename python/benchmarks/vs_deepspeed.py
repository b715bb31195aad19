"""vs_deepspeed.py - zoffload against the real DeepSpeed and plain torch AdamW, side by side in one run.

One GPT-style model (byte vocabulary, pre-LayerNorm blocks, about 100M parameters by default), the same
initial weights, the same batches of Debian's fortunes, fp32 throughout, trained for --steps steps:
  torch      torch.optim.AdamW, the reference losses
  zoffload   zoffload.initialize(...) with the DeepSpeed config below
  deepspeed  deepspeed.initialize(...) with the same config (DS_ACCELERATOR=cpu, gloo, one rank)
at three placements: stage 2 with the optimizer on cpu, stage 3 with optimizer and parameters on cpu, stage 3 with
both on nvme (--nvme-path). Every run is its own process (peak RSS is that process's); runs alternate within each
of --rounds rounds (zoffload first in odd rounds, DeepSpeed first in even ones), so a slow minute of the machine
falls on both. Per run: the median seconds per step after --warmup steps; per framework and placement: the
median over the rounds, the peak RSS, and the loss difference to torch's at fixed steps.

The config leaves gradient_clipping out unless --gradient-clipping gives it (torch then clips with
clip_grad_norm_ too): DeepSpeed 0.19.8 reads the missing key as 1.0 (GRADIENT_CLIPPING_DEFAULT, changed from 0 by
deepspeedai/DeepSpeed#8068), zoffload as 0, no clipping, as DeepSpeed did before.

Run with the torch 2 venv's python (scripts/torch2-env.sh DIR; ZOFFLOAD_LIBRARY from its activate script):
    DIR/bin/python python/benchmarks/vs_deepspeed.py --nvme-path /path/on/nvme
The last line is one JSON object: zoffload_s_per_step, deepspeed_s_per_step, torch_s_per_step (stage 2 cpu) and
every figure of the table.
"""
import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

PLACEMENTS = {
    "s2_cpu": dict(stage=2, opt="cpu", param=None),
    "s3_cpu": dict(stage=3, opt="cpu", param="cpu"),
    "s3_nvme": dict(stage=3, opt="nvme", param="nvme"),
}
LR, BETAS, EPS, WD = 3e-4, (0.9, 0.95), 1e-8, 0.01


def ds_config(a, placement):
    p = PLACEMENTS[placement]
    zero = {"stage": p["stage"], "offload_optimizer": {"device": p["opt"], "pin_memory": False}}
    if p["opt"] == "nvme":
        zero["offload_optimizer"]["nvme_path"] = a.nvme_path
        zero["offload_optimizer"]["buffer_count"] = 4
    if p["param"]:
        zero["offload_param"] = {"device": p["param"], "pin_memory": False}
        if p["param"] == "nvme":
            zero["offload_param"].update(nvme_path=a.nvme_path, buffer_count=5,
                                         buffer_size=max(int(1e8), 4 * a.d_model * a.d_model * 2))
        zero["stage3_param_persistence_threshold"] = 0
    clip = {} if a.gradient_clipping is None else {"gradient_clipping": a.gradient_clipping}
    return {
        **clip,
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD}},
        "zero_optimization": zero,
        "aio": {"block_size": 1048576, "queue_depth": 8, "single_submit": False, "overlap_events": True},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


# ---------------------------------------------------------------- the child: one framework, one placement


def model_and_data(a):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, c, nh):
            super().__init__()
            self.nh = nh
            self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.fc, self.out = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(256, a.d_model), nn.Embedding(a.seq, a.d_model)
            self.blocks = nn.ModuleList(Block(a.d_model, a.heads) for _ in range(a.layers))
            self.ln_f, self.head = nn.LayerNorm(a.d_model), nn.Linear(a.d_model, 256, bias=False)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for b in self.blocks:
                x = b(x)
            return F.cross_entropy(self.head(self.ln_f(x)).reshape(-1, 256), targets.reshape(-1))

    torch.manual_seed(1234)
    model = GPT()
    data = b"".join(open(f, "rb").read() for f in sorted(glob.glob(os.path.join(a.corpus, "*")))
                    if os.path.isfile(f) and not f.endswith(".dat"))
    if len(data) < a.seq + 2:
        raise SystemExit("vs_deepspeed: no corpus in %s (--corpus DIR; Debian's: apt-get install fortunes)" % a.corpus)
    g = torch.Generator().manual_seed(7)
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    batches = []
    for _ in range(a.steps):
        starts = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=g)
        x = torch.stack([buf[s:s + a.seq] for s in starts]).long()
        y = torch.stack([buf[s + 1:s + a.seq + 1] for s in starts]).long()
        batches.append((x, y))
    return model, batches


def child(a):
    import torch
    torch.set_num_threads(a.threads)
    model, batches = model_and_data(a)
    n_params = sum(p.numel() for p in model.parameters())
    t_init = time.perf_counter()
    if a.framework == "torch":
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)

        def step(x, y):
            loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if a.gradient_clipping:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.gradient_clipping)
            opt.step()
            return loss.item()
        close = None
    else:
        if a.framework == "deepspeed":
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=str(29500 + os.getpid() % 1000))
            import deepspeed as ds
            ds.init_distributed(dist_backend="gloo")
        else:
            import zoffload as ds
        engine, _, _, _ = ds.initialize(model=model, model_parameters=model.parameters(),
                                        config=ds_config(a, a.placement))

        def step(x, y):
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            return loss.item()
        close = getattr(engine, "close", None)
    t_init = time.perf_counter() - t_init
    losses, times = [], []
    for x, y in batches:
        t0 = time.perf_counter()
        losses.append(step(x, y))
        times.append(time.perf_counter() - t0)
    if close:
        close()
    print("RESULT " + json.dumps({
        "framework": a.framework, "placement": a.placement, "params": n_params, "init_s": t_init,
        "step_s": times, "losses": losses,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}), flush=True)


# ---------------------------------------------------------------- the parent: rounds, alternation, the table


def run_child(a, framework, placement):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", framework, "--placement", placement]
    for k in ("steps", "layers", "d_model", "heads", "seq", "batch", "threads", "nvme_path", "corpus",
              "gradient_clipping"):
        if getattr(a, k) is not None:
            cmd += ["--" + k.replace("_", "-"), str(getattr(a, k))]
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS=str(a.threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit("vs_deepspeed: %s %s failed (exit %d):\n%s" % (framework, placement, p.returncode,
                                                                   (p.stdout + p.stderr)[-6000:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median (default 2)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--nvme-path", default=os.path.join(tempfile.gettempdir(), "vs_deepspeed_nvme"),
                    help="swap directory of the nvme runs (default: vs_deepspeed_nvme under $TMPDIR)")
    ap.add_argument("--corpus", default=os.environ.get("ZO_CORPUS", "/usr/share/games/fortunes"),
                    help="directory of text files (default: $ZO_CORPUS, else Debian's fortunes, as zo-train's)")
    ap.add_argument("--placements", default="s2_cpu,s3_cpu,s3_nvme")
    ap.add_argument("--gradient-clipping", type=float, default=None,
                    help="the config's gradient_clipping, and torch's clip_grad_norm_ (default: the key left out, "
                         "which DeepSpeed 0.19.8 reads as 1.0 and zoffload as 0, no clipping)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds for one run (default 1800)")
    ap.add_argument("--child", choices=("torch", "zoffload", "deepspeed"), dest="framework")
    ap.add_argument("--placement", default="s2_cpu")
    a = ap.parse_args()
    if a.framework:
        return child(a)
    os.makedirs(a.nvme_path, exist_ok=True)
    places = [p for p in a.placements.split(",") if p]
    for p in places:
        if p not in PLACEMENTS:
            raise SystemExit("vs_deepspeed: unknown placement %r (of %s)" % (p, ", ".join(PLACEMENTS)))
    runs = {}
    for r in range(a.rounds):
        order = [("torch", "s2_cpu")]
        for p in places:
            pair = [("zoffload", p), ("deepspeed", p)]
            order += pair if r % 2 == 0 else pair[::-1]
        for fw, p in order:
            res = run_child(a, fw, p)
            med = statistics.median(res["step_s"][a.warmup:] or res["step_s"])
            print("round %d %-9s %-7s %.3f s/step, peak RSS %.2f GiB, init %.1f s, losses %s" % (
                r + 1, fw, p, med, res["peak_rss_gib"], res["init_s"],
                " ".join("%.4f" % l for l in res["losses"])), flush=True)
            runs.setdefault((fw, p), []).append((med, res))
    ref = runs[("torch", "s2_cpu")][0][1]["losses"]
    at = sorted({min(len(ref), s) - 1 for s in (1, len(ref) // 2, len(ref))})
    print("\nmodel: %d parameters (%d layers, d_model %d), batch %d x %d tokens, %d steps, %d threads, %d rounds"
          % (ref and runs[("torch", "s2_cpu")][0][1]["params"], a.layers, a.d_model, a.batch, a.seq, a.steps,
             a.threads, a.rounds))
    print("%-10s %-8s %12s %14s %12s  %s" % ("framework", "place", "s/step", "(each round)", "peak RSS",
                                             "loss - torch's at steps " + ", ".join(str(s + 1) for s in at)))
    out = {}
    for (fw, p), lst in runs.items():
        meds = [m for m, _ in lst]
        med = statistics.median(meds)
        rss = max(res["peak_rss_gib"] for _, res in lst)
        diffs = [lst[0][1]["losses"][s] - ref[s] for s in at]
        maxdiff = max(abs(l - t) for l, t in zip(lst[0][1]["losses"], ref))
        print("%-10s %-8s %12.3f %14s %9.2f GiB  %s (max |diff| %.2e)" % (
            fw, p, med, "/".join("%.2f" % m for m in meds), rss, " ".join("%+.2e" % d for d in diffs), maxdiff))
        out["%s_%s" % (fw, p)] = {"s_per_step": med, "rounds": meds, "peak_rss_gib": rss, "max_loss_diff": maxdiff}
    for fw in ("zoffload", "deepspeed"):
        if (fw, "s2_cpu") in runs:
            out["%s_s_per_step" % fw] = out["%s_s2_cpu" % fw]["s_per_step"]
    out["torch_s_per_step"] = out["torch_s2_cpu"]["s_per_step"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
