"""Where zoffload.initialize() puts a model (zoffload/_device.py), on any machine: the device chosen from the
parameters or device=, the errors for what it cannot take, the "fit" arena a GPU model gets, and Engine.memory()
against the byte counts the engine's header promises. The CUDA paths themselves run in test_cuda.py."""
import os
import sys

import pytest
import torch

import zoffload

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT, config  # noqa: E402


def _padded(numels, size):
    return sum((n * size + 255) // 256 * 256 for n in numels)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: test_cuda.py runs the CUDA path")
def test_cuda_without_a_gpu_is_refused():
    with pytest.raises(RuntimeError, match="device cuda asked for, but torch sees no CUDA device"):
        zoffload.initialize(model=GPT(), config=config(), device="cuda")


def test_devices_it_cannot_take():
    with pytest.raises(TypeError, match="device meta: zoffload drives cpu and cuda models"):
        zoffload.initialize(model=GPT(), config=config(), device="meta")
    m = GPT()
    m.head.weight = torch.nn.Parameter(torch.empty(m.head.weight.shape, device="meta"))
    with pytest.raises(TypeError, match="parameters are on cpu, meta"):
        zoffload.initialize(model=m, config=config())
    with pytest.raises(TypeError, match="device cpu, but parameters are on meta"):
        zoffload.initialize(model=m, config=config(), device="cpu")
    m = GPT().to(torch.float64)
    with pytest.raises(TypeError, match="parameter 'wte.weight' is torch.float64; a CPU model trains with fp32"):
        zoffload.initialize(model=m, config=config())


def _fit_capacity(shapes, stage=2, bf16=True, live=None, key="bf16"):
    """The arena capacity of an engine with zoffload.device_arena_bytes "fit" (what a CUDA model gets unless
    the config sets it) for parameters of @shapes; the host device runs the same sizing rule."""
    class Params(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s)) for s in shapes])
    cfg = config()
    del cfg["bf16"]
    cfg[key] = {"enabled": bf16}
    cfg["zoffload"] = {"device_arena_bytes": "fit"}
    if stage == 3:
        cfg["zero_optimization"].update({"stage": 3, "offload_param": {"device": "cpu"}})
        if live is not None:
            cfg["zero_optimization"]["stage3_max_live_parameters"] = live
    e, _, _, _ = zoffload.initialize(model=Params(), config=cfg)
    cap = e.memory()["arena"]["capacity"]
    e.close()
    return cap


def test_arena_fit_rule():
    shapes = [torch.Size([1000]), torch.Size([10, 10]), torch.Size([3])]
    # stages 1-2: the resident working weights, each tensor 256-byte aligned (bf16, fp32, bf16 by its other key)
    assert _fit_capacity(shapes) == 2048 + 256 + 256
    assert _fit_capacity(shapes, bf16=False) == 4096 + 512 + 256
    assert _fit_capacity(shapes, key="bfloat16") == 2048 + 256 + 256
    # stage 3: all copies when the bound is larger; else stage3_max_live_parameters elements (at least the
    # largest tensor, which the engine checks) + twice the largest + 256 per tensor
    assert _fit_capacity(shapes, stage=3, live=1000) == min(2560, 2048 + 4096 + 768) == 2560
    ten = [torch.Size([1000])] * 10
    assert _fit_capacity(ten, stage=3, live=1000) == 2048 + 2 * 2048 + 256 * 10 < 10 * 2048
    big = [torch.Size([1 << 20])] * 8
    assert _fit_capacity(big, stage=3, live=1 << 20) == (2 << 20) + 2 * (2 << 20) + 256 * 8


def test_memory_reports_the_engine_bytes():
    m = GPT()
    numels = [p.numel() for p in m.parameters()]
    for bf16, w in ((False, 4), (True, 2)):
        e, _, _, _ = zoffload.initialize(model=m, config=config(bf16=bf16))
        mem = e.memory()
        e.close()
        n = sum(numels)
        assert mem["param_bytes"] == n * w, mem  # resident working weights, w bytes each
        # the arena (the GPU reservation on CUDA) is that block, each tensor's region 256-byte aligned
        assert mem["arena"]["capacity"] == _padded(numels, w) and mem["arena"]["n_live_blocks"] == 1
        assert mem["state_bytes"] == 3 * n * 4  # fp32 masters, exp_avg, exp_avg_sq
        assert mem["grad_bytes"] == n * w
        assert mem["nvme_bytes"] == 0 and mem["comm_bytes"] == 0


def test_parameters_view_the_engine_weights():
    """fp32 working weights on the CPU (and every dtype on the GPU): the parameters are views of the engine's
    resident block, a step writes the new weights in place, close() gives them copies of their own."""
    from train_gpt import batches, corpus
    m = GPT()
    e, _, _, _ = zoffload.initialize(model=m, config=config())
    cap = e.memory()["arena"]["capacity"]
    ptrs = [p.data_ptr() for _, p in e.params]
    assert max(ptrs) - min(ptrs) < cap  # all inside the one resident block
    x, y = next(batches(corpus(), 8, 32, 0))
    e.backward(e(x, y))
    e.step()
    assert [p.data_ptr() for _, p in e.params] == ptrs
    for n, p in e.params:
        assert torch.equal(p.detach(), e.master_weights(n)), n  # fp32 working weights are the masters
    after = {n: p.detach().clone() for n, p in e.params}
    e.close()
    for n, p in e.params:
        assert p.data_ptr() not in ptrs and torch.equal(p.detach(), after[n]), n
    # bf16 working weights: where torch's CPU kernels train in bf16 (torch 2) the model is cast to bf16 as DeepSpeed
    # casts it, else the CPU model keeps fp32 parameters of its own; either way they hold the bf16 weights
    from zoffload._precision import cpu_kernels
    want = torch.bfloat16 if cpu_kernels(torch.bfloat16) else torch.float32
    m = GPT()
    e, _, _, _ = zoffload.initialize(model=m, config=config(bf16=True))
    for n, p in e.params:
        assert p.dtype == want and torch.equal(p.detach(), e.master_weights(n).bfloat16().to(want)), n
    e.close()


_LOCAL_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


def test_local_ordinal_from_every_launcher(monkeypatch):
    """device="cuda" with no index takes the launcher's local rank: torchrun, Open MPI, MPICH, Slurm, in that order;
    a malformed value or one past the GPUs is an error naming the variable (never a silent GPU 0)."""
    from zoffload import _lib
    for v in _LOCAL_VARS:
        monkeypatch.delenv(v, raising=False)
    assert _lib.local_ordinal(4) == (0, None)
    for v in _LOCAL_VARS:
        monkeypatch.setenv(v, "3")
        assert _lib.local_ordinal(4) == (3, v)
        monkeypatch.delenv(v)
    monkeypatch.setenv("SLURM_LOCALID", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    assert _lib.local_ordinal(4) == (1, "OMPI_COMM_WORLD_LOCAL_RANK")
    with pytest.raises(_lib.ZoffloadError, match="OMPI_COMM_WORLD_LOCAL_RANK=1, but this process sees 1 CUDA device"):
        _lib.local_ordinal(1)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x1")
    with pytest.raises(_lib.ZoffloadError, match='OMPI_COMM_WORLD_LOCAL_RANK="x1" is not a local rank'):
        _lib.local_ordinal(4)
