"""Where zoffload.initialize() puts a model (zoffload/_device.py), on any machine: the device chosen from the
parameters or device=, the errors for what it cannot take, the GPU arena sizing rule, and Engine.memory()
against the byte counts the engine's header promises. The CUDA paths themselves run in test_cuda.py."""
import os
import sys

import pytest
import torch

import zoffload
from zoffload import _device

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


def test_arena_bytes_rule():
    shapes = [torch.Size([1000]), torch.Size([10, 10]), torch.Size([3])]
    cfg = config()
    assert _device.working_size(cfg) == 4
    assert _device.working_size(config(bf16=True)) == 2
    assert _device.working_size({"bfloat16": {"enabled": True}}) == 2
    assert _device.working_size({"fp16": {"enabled": "auto"}}) == 4  # only a literal true enables it
    assert _device.arena_bytes(cfg, shapes, 2) == 2048 + 256 + 256  # stage 2: every tensor, 256-byte aligned
    cfg["zero_optimization"].update({"stage": 3, "stage3_max_live_parameters": 100})
    # stage 3: 100 live elements (256 bytes) + twice the largest (2 x 2048) + 256 per tensor, under the total
    assert _device.arena_bytes(cfg, shapes, 2) == min(2560, 256 + 4096 + 768) == 2560
    cfg["zero_optimization"]["stage3_max_live_parameters"] = 0
    big = [torch.Size([1 << 20])] * 8
    assert _device.arena_bytes(cfg, big, 2) == 2 * (2 << 20) + 256 * 8


def test_memory_reports_the_engine_bytes():
    m = GPT()
    numels = [p.numel() for p in m.parameters()]
    for bf16, w in ((False, 4), (True, 2)):
        e = zoffload.initialize(model=m, config=config(bf16=bf16))
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
    e = zoffload.initialize(model=m, config=config())
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
    # bf16 working weights: the CPU model keeps fp32 parameters of its own, the bf16 weights widened into them
    m = GPT()
    e = zoffload.initialize(model=m, config=config(bf16=True))
    for n, p in e.params:
        assert p.dtype == torch.float32 and torch.equal(p.detach(), e.master_weights(n).bfloat16().float()), n
    e.close()
