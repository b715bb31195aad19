"""installed_smoke.py [SOURCE_DIR] - one step through the zoffload an installer put in this interpreter's
environment (tests/python_installed.sh runs it from a directory outside the checkout): import torch and zoffload,
initialize a small MLP with its optimizer state on the CPU, backward, step, and check that the step changed the
weights and that every libzoffload the process mapped (/proc/self/maps) lies inside sys.prefix (the venv), none in
SOURCE_DIR. Prints the package's file, the library's path and where the package found it. Exit 0 pass, 1 fail."""
import os
import sys

import torch

import zoffload


def mapped(name):
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if name in line and "/" in line})


def inside(path, root):
    path, root = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([path, root]) == root


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else None
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    before = [p.detach().clone() for p in model.parameters()]
    cfg = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
    engine, _, _, _ = zoffload.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    x = torch.randn(8, 16)
    loss = engine(x).pow(2).mean()
    engine.backward(loss)
    engine.step()
    moved = sum(int(not torch.equal(a, b.detach())) for a, b in zip(before, model.parameters()))
    libs = mapped("libzoffload")
    print("zoffload %s from %s" % (zoffload.__file__, sys.prefix))
    print("loss %.6f; %d of %d tensors changed by the step" % (loss.item(), moved, len(before)))
    print("libzoffload mapped: %s (found: %s, zoffload.__library__ %s)"
          % (", ".join(libs) or "none", zoffload._lib.source, zoffload.__library__))
    fails = []
    if moved != len(before):
        fails.append("the step left %d tensors unchanged" % (len(before) - moved))
    if not libs:
        fails.append("no libzoffload in /proc/self/maps")
    fails += ["%s lies outside %s" % (p, sys.prefix) for p in libs if not inside(p, sys.prefix)]
    if src:  # (the venv itself may lie in the checkout's build tree)
        fails += ["%s lies in the source checkout %s" % (p, src) for p in libs
                  if inside(p, src) and not inside(p, sys.prefix)]
        if inside(zoffload.__file__, src) and not inside(zoffload.__file__, sys.prefix):
            fails.append("zoffload was imported from the checkout (%s), not the install" % zoffload.__file__)
    engine.close()
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
