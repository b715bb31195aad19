"""The Python front on a GPU (ctest python_cuda, labels python;gpu; skipped without a CUDA device and a CUDA torch).

The small GPT of train_gpt.py, built on the CPU and given device="cuda": its parameters become views of the
engine's working weights in GPU memory (stages 1-2) or copies fetched by the module hooks (stage 3), its
gradients are copied out of torch's memory by the engine, ordered against torch's current stream.

Determinism: python_cuda.sh sets CUBLAS_WORKSPACE_CONFIG and these tests turn on
torch.use_deterministic_algorithms and the math attention kernel, so two runs that feed the engine the same
gradients compute the same thing to the last bit. That makes "bit-identical" a fair demand between tiers (cpu,
nvme), stages (2, 3) and streams (default, a side stream): they differ only in where the optimizer state lives,
how the weights reach the GPU and which stream orders the copies; any difference is a bug (a race between a copy
and a kernel shows up as one). Against torch.optim.AdamW on the same GPU the tolerance is test_initialize.py's
1e-4 relative, for the reasons given there (the optimizer's last-bit rounding, amplified slowly).

Without pytest, `python test_cuda.py [test_name ...]` runs the same tests through plain_runner.py (python_cuda.sh
does that where the interpreter has no pytest); exit 77 there when torch sees no CUDA device.
"""
import os
import sys

import torch

import zoffload

try:
    import pytest
except ImportError:  # run as a script by plain_runner.py (see __main__ below)
    pytest = None

if pytest:
    pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT, batches, config, corpus  # noqa: E402

STEPS = 50


def _deterministic():
    """Around every test: pytest's autouse fixture, plain_runner's @fixture."""
    torch.use_deterministic_algorithms(True)
    flags = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled())
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    yield
    torch.backends.cuda.enable_flash_sdp(flags[0])
    torch.backends.cuda.enable_mem_efficient_sdp(flags[1])
    torch.use_deterministic_algorithms(False)


if pytest:
    deterministic = pytest.fixture(autouse=True, name="deterministic")(_deterministic)


def _run(tier="cpu", nvme=None, stage=2, bf16=False, stream=None, steps=STEPS, model=None):
    torch.manual_seed(1337)
    model = model or GPT()
    cfg = config(device=tier, nvme=nvme, bf16=bf16)
    if stage == 3:
        cfg["zero_optimization"].update({"stage": 3, "offload_param": {"device": tier, "nvme_path": nvme}})
    engine, _, _, _ = zoffload.initialize(model=model, config=cfg, device="cuda")
    it = batches(corpus(), 8, 32, 0)
    losses = []
    ctx = torch.cuda.stream(stream) if stream is not None else torch.cuda.stream(torch.cuda.current_stream())
    with ctx:
        for _ in range(steps):
            x, y = (t.cuda(non_blocking=True) for t in next(it))
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.detach())  # no host sync inside the loop: ordering is the engine's job
    torch.cuda.synchronize()
    masters = {n: engine.master_weights(n).clone() for n, _ in engine.params}
    mem = engine.memory()
    engine.close()
    return [v.item() for v in losses], masters, mem, model


def _torch_run(steps=STEPS):
    torch.manual_seed(1337)
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    it = batches(corpus(), 8, 32, 0)
    losses = []
    for _ in range(steps):
        x, y = (t.cuda() for t in next(it))
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, {n: p.detach().float().cpu() for n, p in model.named_parameters()}


def _same(a, b):
    assert a[0] == b[0], "losses differ: first at step %d" % next(i for i, (x, y) in enumerate(zip(a[0], b[0]))
                                                                   if x != y)
    for n in a[1]:
        assert torch.equal(a[1][n], b[1][n]), n


def test_parameters_view_the_engine_weights():
    torch.manual_seed(1337)
    model = GPT()
    engine, _, _, _ = zoffload.initialize(model=model, config=config(bf16=True), device="cuda")
    for n, p in engine.params:
        assert p.is_cuda and p.dtype == torch.bfloat16, (n, p.device, p.dtype)
    for b in model.buffers():
        assert b.is_cuda
    mem = engine.memory()
    need = sum((p.numel() * 2 + 255) // 256 * 256 for _, p in engine.params)
    assert mem["arena"]["capacity"] == need, (mem["arena"], need)  # sized to the resident weights, not 90%
    engine.close()
    for _, p in engine.params:  # copies of their own after close: the model stays usable
        assert p.is_cuda and p.numel() > 0


def test_stage2_matches_torch_adamw():
    z = _run()
    t = _torch_run()
    worst = max(abs(a - b) / abs(b) for a, b in zip(z[0], t[0]))
    print("GPU stage 2 vs torch AdamW: worst relative loss difference %.3g over %d steps" % (worst, STEPS))
    assert worst < 1e-4
    assert z[0][-1] < z[0][0] - 1.0  # it learned


def test_cpu_and_nvme_bit_identical(tmp_path):
    _same(_run("cpu"), _run("nvme", str(tmp_path)))


def test_stage3_equals_stage2(tmp_path):
    s2 = _run("cpu")
    _same(s2, _run("cpu", stage=3))
    _same(s2, _run("nvme", str(tmp_path), stage=3))


def test_side_stream_equals_default_stream():
    """Everything on a stream that is not the one the engine bound at initialize: ordered() must make the two
    wait for each other around every engine call, or a copy races a kernel."""
    _same(_run(), _run(stream=torch.cuda.Stream()))
    _same(_run(stage=3), _run(stage=3, stream=torch.cuda.Stream()))


def test_bf16_stage3_equals_stage2():
    a, b = _run(bf16=True), _run(bf16=True, stage=3)
    _same(a, b)
    assert a[0][-1] < a[0][0] - 1.0


def test_peak_memory_below_torch_adamw():
    """The GPU holds working weights and gradients (fp32 here: 8 bytes a parameter) instead of torch AdamW's
    weights, gradients and two moments (16 bytes): with a parameter-heavy model the peak must be well below."""
    def big():
        return GPT(d=512, layers=4, heads=8)
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(1337)
    model = big().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = (t.cuda() for t in next(batches(corpus(), 2, 32, 0)))
    for _ in range(2):
        model(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch_peak = torch.cuda.max_memory_allocated()
    del model, opt
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    _, _, mem, _ = _run(model=big(), steps=2)
    zo_peak = torch.cuda.max_memory_allocated() + mem["arena"]["capacity"]
    print("peak GPU memory: torch AdamW %d bytes, zoffload %d bytes (%.2fx)" % (torch_peak, zo_peak,
                                                                                 zo_peak / torch_peak))
    assert zo_peak < 0.75 * torch_peak


if __name__ == "__main__":
    import plain_runner  # beside this file, which is sys.path[0] when run as a script

    if not torch.cuda.is_available():
        print("skip: torch sees no CUDA device")
        sys.exit(77)
    sys.exit(plain_runner.run(globals(), fixture=_deterministic, only=sys.argv[1:]))
