#!/usr/bin/env python3
"""wheel_cuda_smoke.py - the installed zoffload package's own library on a GPU (gpu.sh's wheel_cuda stage runs it in
a venv where the wheel is installed, from outside the checkout, with ZOFFLOAD_LIBRARY, LD_LIBRARY_PATH and
PYTHONPATH unset): the library the package loads sees a CUDA device (it was built with CUDA and finds a libcudart
through its RUNPATH or the loader), and a small MLP given device="cuda", its optimizer state on the CPU, takes three
steps that change every weight and lower the loss on one batch. Prints where the package, its library and the
process's libcudart came from. Exit 0 pass, 1 fail, 77 when torch sees no GPU."""
import os
import sys

import torch


def mapped(word):
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if word in line.split()[-1]})


def inside(path, root):
    path, root = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([path, root]) == root


def main():
    if not torch.cuda.is_available():
        print("skip: torch sees no CUDA device")
        return 77
    import zoffload
    import zoffload._lib as L

    fails = []
    n = L.lib.zo_device_cuda_count()
    print("zoffload %s; library %s (found: %s); CUDA devices it sees: %d"
          % (zoffload.__file__, zoffload.__library__, L.source, n))
    if n <= 0:
        fails.append("the package's library sees no CUDA device (built without CUDA, or no libcudart found)")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 8))
    cfg = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
    losses = []
    if not fails:
        engine, _, _, _ = zoffload.initialize(model=model, config=cfg, device="cuda")
        before = [p.detach().clone() for p in model.parameters()]
        x = torch.randn(16, 64, device="cuda")
        y = torch.randn(16, 8, device="cuda")
        for _ in range(3):
            loss = (engine(x) - y).pow(2).mean()
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        torch.cuda.synchronize()
        moved = sum(int(not torch.equal(a, b.detach())) for a, b in zip(before, model.parameters()))
        on_gpu = all(p.is_cuda for p in model.parameters())
        print("3 steps on %s: loss %s; %d of %d tensors changed"
              % (torch.cuda.get_device_name(0), " -> ".join("%.5f" % v for v in losses), moved, len(before)))
        if not on_gpu:
            fails.append("the parameters are not on the GPU")
        if moved != len(before):
            fails.append("the steps left %d tensors unchanged" % (len(before) - moved))
        if not losses[-1] < losses[0]:
            fails.append("the loss did not fall over 3 steps on one batch")
        engine.close()
    libs = mapped("libzoffload")
    print("libzoffload mapped: %s; libcudart mapped: %s" % (", ".join(libs) or "none",
                                                            ", ".join(mapped("libcudart")) or "none"))
    fails += ["%s lies outside %s (not the installed package's)" % (p, sys.prefix) for p in libs
              if not inside(p, sys.prefix)]
    if not libs:
        fails.append("no libzoffload in /proc/self/maps")
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
