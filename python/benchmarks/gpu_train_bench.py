"""gpu_train_bench.py - Hugging Face's GPT2LMHeadModel (built from a config: random weights, nothing downloaded)
trained on one GPU two ways in the same run, on the same batches:
  - torch:    the model on the GPU in fp32 under bf16 autocast, torch.optim.AdamW on the GPU (fused=True where this
              torch has it, else foreach=True): weights, gradients and both moments in GPU memory;
  - zoffload: zoffload.initialize(device="cuda") with offload_optimizer cpu (or nvme with --nvme) and bf16: the
              GPU holds bf16 working weights and gradients, the fp32 masters and Adam state live on the host tier.
Reports tokens/s (median step time of --steps after --warmup steps) and peak GPU memory for both: torch's
max_memory_reserved plus, for zoffload, its device arena (a reservation outside torch's allocator). Falls back
to train_gpt.py's GPT when transformers is not installed.

    ZOFFLOAD_LIBRARY=build/libzoffload.so PYTHONPATH=python python3 python/benchmarks/gpu_train_bench.py \\
        --layers 12 --d-model 768 --batch 8 --seq 512

Exit 77 without a CUDA device.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from train_gpt import batches, corpus  # noqa: E402


def build(a):
    torch.manual_seed(0)
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        from train_gpt import GPT
        return GPT(d=a.d_model, layers=a.layers, heads=a.heads, seq=a.seq), False
    cfg = GPT2Config(n_layer=a.layers, n_head=a.heads, n_embd=a.d_model, vocab_size=a.vocab, n_positions=a.seq)
    return GPT2LMHeadModel(cfg), True


def loss_of(model, hf, x, y):
    return model(input_ids=x, labels=x).loss if hf else model(x, y)


def timed(step, data, a):
    ts = []
    for k in range(a.warmup + a.steps):
        x, y = next(data)
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step(x, y)
        torch.cuda.synchronize()
        if k >= a.warmup:
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts), loss


def run_torch(a):
    model, hf = build(a)
    model.cuda()
    kw = {"lr": 1e-4, "betas": (0.9, 0.95), "weight_decay": 0.01}
    try:
        opt, how = torch.optim.AdamW(model.parameters(), fused=True, **kw), "fused=True"
    except (TypeError, RuntimeError):
        opt, how = torch.optim.AdamW(model.parameters(), foreach=True, **kw), "foreach=True"

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(model, hf, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()
    torch.cuda.reset_peak_memory_stats()
    t, loss = timed(step, batches(corpus(), a.batch, a.seq, 0), a)
    peak = torch.cuda.max_memory_reserved()
    n = sum(p.numel() for p in model.parameters())
    del model, opt
    torch.cuda.empty_cache()
    return t, peak, loss, how, n


def run_zoffload(a):
    import zoffload
    model, hf = build(a)  # on the CPU: the GPU never holds the fp32 model
    tier = {"device": "nvme", "nvme_path": a.nvme} if a.nvme else {"device": "cpu", "pin_memory": True}
    engine, _, _, _ = zoffload.initialize(model=model, device="cuda", config={
        "train_micro_batch_size_per_gpu": a.batch, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "weight_decay": 0.01}},
        "zero_optimization": {"stage": 2, "offload_optimizer": tier}})

    def step(x, y):
        loss = loss_of(engine, hf, x, y)
        engine.backward(loss)
        engine.step()
        return loss.item()
    torch.cuda.reset_peak_memory_stats()
    t, loss = timed(step, batches(corpus(), a.batch, a.seq, 0), a)
    peak = torch.cuda.max_memory_reserved() + engine.memory()["arena"]["capacity"]
    info = engine.last_info
    engine.close()
    return t, peak, loss, info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--nvme", help="offload the optimizer state to swap files under this directory")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("skip: no CUDA device visible to torch")
        sys.exit(77)
    a.vocab = max(a.vocab, 256)  # the corpus is bytes
    tt, tpeak, tloss, how, n = run_torch(a)
    zt, zpeak, zloss, info = run_zoffload(a)
    tok = a.batch * a.seq
    print("%s: %d parameters, batch %d x %d tokens, %s" % (torch.cuda.get_device_name(), n, a.batch, a.seq,
                                                             "optimizer on nvme" if a.nvme else "optimizer on cpu"))
    print("torch AdamW (%s, bf16 autocast): %.4f s/step, %.0f tokens/s, peak GPU memory %.3f GiB, loss %.4f"
          % (how, tt, tok / tt, tpeak / 2**30, tloss))
    print("zoffload (stage 2, bf16):         %.4f s/step, %.0f tokens/s, peak GPU memory %.3f GiB, loss %.4f"
          % (zt, tok / zt, zpeak / 2**30, zloss))
    print("  last step: grad wait %.4f s, adam %.4f s, copies %.4f s" % (info["grad_wait_s"], info["adam_s"],
                                                                       info["copy_s"]))
    print("ratios zoffload/torch: tokens/s %.3fx, peak GPU memory %.3fx" % (tt / zt, zpeak / tpeak))


if __name__ == "__main__":
    main()
