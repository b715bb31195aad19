"""The engine's lifetime and its backward calls (issue 30, items 5-7): repeated backward() calls add up or are
refused by name, never dropped; a closed engine refuses every method by name and no tensor keeps pointing into its
freed memory; the swap directory nvme_path/zoffload-rank<R> is removed on close and at interpreter exit. A tiny MLP
on the CPU; the exit and use-after-close checks run in child interpreters (the old code crashed in them)."""
import gc
import os
import subprocess
import sys

import pytest
import torch

import zoffload


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def cfg(gas=1, stage=2, nvme=None):
    c = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": gas,
         "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu"}},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
    if nvme:
        c["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": str(nvme)}
        if stage == 3:
            c["zero_optimization"]["offload_param"] = {"device": "nvme", "nvme_path": str(nvme)}
    return c


def xs(n):
    g = torch.Generator().manual_seed(7)
    return [torch.randn(4, 8, generator=g) for _ in range(n)]


def torch_norm(*losses_of):
    """The L2 norm of the gradient torch's .grad holds after backward() of each loss in turn (they add up)."""
    m = mlp()
    for f in losses_of:
        f(m).backward()
    return torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters())).item()


def near(a, b):
    return abs(a - b) <= 1e-6 + 1e-5 * abs(b)


def test_second_backward_in_boundary_adds_up():
    """gradient_accumulation_steps 1: the first backward() hands the step's gradients over (grad_ready); a second one
    before step() adds its gradients to them (zo_engine_grad_reopen), as torch's .grad and DeepSpeed do: the step's
    norm is that of the sum. Before, the second one was refused (and before that, dropped silently). With
    "early_adam": true (Adam overlapping the first backward) the second is refused naming the key, before it
    computes anything, and the step applies the first's gradients whole."""
    x1, x2 = xs(2)
    both = torch_norm(lambda m: m(x1).pow(2).mean(), lambda m: m(x2).pow(2).mean())
    e, _, _, _ = zoffload.initialize(model=mlp(), config=cfg())
    e.backward(e(x1).pow(2).mean())
    e.backward(e(x2).pow(2).mean())
    assert near(e.step()["grad_norm"], both)
    e.close()
    e, _, _, _ = zoffload.initialize(model=mlp(), config=cfg())
    e.backward(e(x1).pow(2).mean() + e(x2).pow(2).mean())
    assert near(e.step()["grad_norm"], both)
    e.close()
    early = cfg()
    early["zoffload"] = {"early_adam": True}
    e, _, _, _ = zoffload.initialize(model=mlp(), config=early)
    e.backward(e(x1).pow(2).mean())
    with pytest.raises(zoffload.ZoffloadError, match=r"zoffload\.early_adam is true"):
        e.backward(e(x2).pow(2).mean())
    assert near(e.step()["grad_norm"], torch_norm(lambda m: m(x1).pow(2).mean()))
    e.close()


def test_backward_calls_before_the_boundary_add_up():
    """gradient_accumulation_steps 2: two backward() calls in the first micro-step and one in the second sum, as
    torch's .grad does (each loss / 2, DeepSpeed's scaling)."""
    x1, x2, x3 = xs(3)
    e, _, _, _ = zoffload.initialize(model=mlp(), config=cfg(gas=2))
    e.backward(e(x1).pow(2).mean())
    e.backward(e(x2).pow(2).mean())
    assert e.step() is None
    e.backward(e(x3).pow(2).mean())
    got = e.step()["grad_norm"]
    want = torch_norm(*[lambda m, x=x: m(x).pow(2).mean() / 2 for x in (x1, x2, x3)])
    assert near(got, want), (got, want)
    e.close()


def test_plain_backward_after_the_boundary_backward_adds_up():
    """A loss.backward() outside engine.backward() after the boundary micro-step's engine.backward() leaves .grad
    on parameters whose gradients the engine already has: step() adds it to them (before, it refused, and before
    that, dropped them)."""
    x1, x2 = xs(2)
    e, _, _, _ = zoffload.initialize(model=mlp(), config=cfg())
    e.backward(e(x1).pow(2).mean())
    e(x2).pow(2).mean().backward()
    got = e.step()["grad_norm"]
    assert near(got, torch_norm(lambda m: m(x1).pow(2).mean(), lambda m: m(x2).pow(2).mean())), got
    e.close()


CLOSED = r"""
import gc, os, sys, warnings, torch, zoffload
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
c = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
     "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": sys.argv[1]}},
     "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
e, opt, _, _ = zoffload.initialize(model=model, config=c)
e.backward(e(torch.randn(4, 64)).sum()); e.step()
view = model[0].weight.detach()[1:3]            # views the engine's memory
want = view.clone()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    e.close()
print("close warned", any("still view" in str(x.message) for x in w), flush=True)
swap = os.path.join(sys.argv[1], "zoffload-rank0")
print("swap dir while the view lives", os.path.isdir(swap), flush=True)
bad = []
def refused(what, f):
    try:
        f()
        why = "it returned"
    except RuntimeError as x:
        why = None if "after engine.close()" in str(x) else str(x)
    except Exception as x:
        why = "%s: %s" % (type(x).__name__, x)
    if why is not None:
        bad.append("%s (%s)" % (what, why))
    print(what, "refused" if why is None else "NOT refused: " + why, flush=True)
refused("backward", lambda: e.backward(model(torch.randn(4, 64)).sum()))
refused("step", lambda: e.step())
refused("optimizer.step", lambda: opt.step())
calls = [n for n in dir(zoffload.Engine) if not n.startswith("_") and n != "close"
         and callable(getattr(zoffload.Engine, n))] + ["__call__"]
for n in calls:
    refused(n, lambda n=n: getattr(e, n)())
for n in ("loss_scale", "local_rank"):
    refused(n, lambda n=n: getattr(e, n))
print("calls", len(calls) + 5, "not refused", bad)
print("model runs", tuple(model(torch.randn(2, 64)).shape))
e2, _, _, _ = zoffload.initialize(model=torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4)),
                                  config=dict(c, zero_optimization={"stage": 2}))
junk = [torch.full((4096,), 7.0) for _ in range(64)]
print("view unchanged", torch.equal(view, want))
del view; gc.collect()
print("swap dir after the view went", os.path.isdir(swap))
e2.close()
"""


def test_closed_engine_refuses_every_method_and_views_stay_valid(tmp_path):
    """After close(): every method (public ones, engine(...), properties, through the optimizer) raises RuntimeError
    naming it; the model still runs (its parameters got copies); a view taken before close() keeps the engine's
    memory alive and unchanged until it goes, then the engine (and its swap directory) is freed. Before:
    engine.backward() after close() crashed (zo_engine_loss_scale(NULL)), step() raised an unrelated TypeError,
    and the view read freed memory."""
    r = subprocess.run([sys.executable, "-c", CLOSED, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])
    out = r.stdout
    for line in ("close warned True", "swap dir while the view lives True", "not refused []", "model runs (2, 4)",
                 "view unchanged True", "swap dir after the view went False"):
        assert line in out, (line, out, r.stderr[-3000:])


EXIT = r"""
import os, sys, torch, zoffload
for stage, sub in ((2, "s2"), (3, "s3")):
    nvme = os.path.join(sys.argv[1], sub)
    os.makedirs(nvme)
    c = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
         "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "nvme", "nvme_path": nvme}},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
    if stage == 3:
        c["zero_optimization"]["offload_param"] = {"device": "nvme", "nvme_path": nvme}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    class Run: pass
    run = Run()
    run.engine, run.opt, _, _ = zoffload.initialize(model=model, config=c)
    run.self = run  # in a reference cycle, as a trainer object holding the engine often is
    run.engine.backward(run.engine(torch.randn(4, 8)).sum()); run.engine.step()
    print(sub, sorted(os.listdir(nvme)))
    globals()["keep_" + sub] = run
# exits without close()
"""


def test_swap_dir_removed_on_close_and_at_exit(tmp_path):
    """nvme_path/zoffload-rank0 is gone after close() and after an interpreter that never called close() exits,
    at stages 2 and 3; the next run finds nothing to remove. Before: a stage-3 run left it behind and the next run
    removed it with a warning ('removed stale swap directory')."""
    nvme = tmp_path / "close"
    nvme.mkdir()
    e, _, _, _ = zoffload.initialize(model=mlp(), config=cfg(stage=3, nvme=nvme))
    e.backward(e(xs(1)[0]).sum())
    e.step()
    assert os.listdir(nvme) == ["zoffload-rank0"]
    e.close()
    assert os.listdir(nvme) == []
    for attempt in ("first", "second"):
        r = subprocess.run([sys.executable, "-c", EXIT, str(tmp_path / attempt)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
        assert "s2 ['zoffload-rank0']" in r.stdout and "s3 ['zoffload-rank0']" in r.stdout, r.stdout
        left = {s: os.listdir(tmp_path / attempt / s) for s in ("s2", "s3")}
        assert left == {"s2": [], "s3": []}, (attempt, left, r.stderr[-2000:])
        assert "stale" not in r.stderr, r.stderr[-2000:]


def test_gc_of_an_unclosed_engine_frees_it(tmp_path):
    """An engine dropped without close() (model and engine collected together) is freed: its swap directory goes."""
    nvme = tmp_path / "gc"
    nvme.mkdir()
    e, _, _, _ = zoffload.initialize(model=mlp(), config=cfg(nvme=nvme))
    e.backward(e(xs(1)[0]).sum())
    e.step()
    del e
    gc.collect()
    assert os.listdir(nvme) == []


def test_counters_refused_after_close():
    """global_steps, micro_steps, applied_steps, last_info and the hand-over counts are read like any property
    while the engine is open (and set by it) and raise RuntimeError naming them after close(), as every property
    does. Before: they still read after close()."""
    e, _, _, _ = zoffload.initialize(model=mlp(), config=cfg())
    e.backward(e(xs(1)[0]).sum())
    e.step()
    assert (e.global_steps, e.micro_steps, e.applied_steps) == (1, 1, 1)
    assert e.last_info["step"] == 1
    e.close()
    for name in ("global_steps", "micro_steps", "applied_steps", "last_info", "handed_in_backward",
                 "accumulated_in_backward"):
        with pytest.raises(RuntimeError, match=r"engine\.%s read after engine\.close\(\)" % name):
            getattr(e, name)
