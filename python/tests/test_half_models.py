"""fp16/bf16 models on the host device (a CPU model), as DeepSpeed takes them: model.half() with fp16.enabled,
model.to(torch.bfloat16) with bf16.enabled, at ZeRO stages 1, 2 and 3. The module's parameters are the working copy
in the config's dtype, the engine holds the fp32 masters (the parameters' values upcast at initialize), gradients
go over in the working dtype, and fp16's dynamic loss scale multiplies the loss in engine.backward().

The reference is written here in torch: the same 16-bit model, an fp32 copy of its parameters stepped by
torch.optim.AdamW with the 16-bit gradients upcast (divided by the same loss scale), the new masters copied back
rounded to the working dtype. The engine's AdamW and torch's differ in the last bits of an update
(test_initialize.py), and a master that sits on a rounding boundary of the 16-bit copy can then round the other
way, so the forward could differ by one 16-bit ulp in a few elements: over 12 steps we allow TOL_LOSS relative
on the losses and TOL_MASTER absolute on the fp32 masters (updates are lr = 1e-2 per step; seen: losses equal,
masters within 2.1e-6 for fp16 and 1.2e-7 for bf16). Adam is nearly blind to a constant factor in the gradient,
so the loss scale is checked through the step's reported gradient norm (unscaled), against the reference's
(TOL_NORM relative).

The model is elementwise (x * w + b, a square): torch 1.13's CPU kernels have no fp16 matmul, tanh or mse_loss.
"""
import copy

import pytest
import torch

import zoffload

STEPS = 12
N = 96
LR = 1e-2
TOL_LOSS = 1e-3
TOL_MASTER = 1e-4
TOL_NORM = 1e-4


class Layer(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(1.0 + 0.1 * torch.randn(n))
        self.b = torch.nn.Parameter(0.1 * torch.randn(n))

    def forward(self, x):
        h = x * self.w + self.b
        return h + 0.25 * h * h


class Elem(torch.nn.Module):
    def __init__(self, n=N):
        super().__init__()
        self.l1, self.l2 = Layer(n), Layer(n)
        self.scale = torch.nn.Parameter(torch.ones(n))  # a parameter of the root module itself

    def forward(self, x, t):
        d = self.l2(self.l1(x)) * self.scale - t
        return (d * d).mean()


def batch(k, dtype):
    g = torch.Generator().manual_seed(100 + k)
    x = torch.randn(8, N, generator=g)
    t = 0.5 * torch.sin(x) + 0.1
    return x.to(dtype), t.to(dtype)


def cfg(stage, fp16=False, bf16=False, **fp16_extra):
    c = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
         "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.01}},
         "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu"}}}
    if fp16:
        c["fp16"] = dict({"enabled": True, "initial_scale_power": 8}, **fp16_extra)
    if bf16:
        c["bf16"] = {"enabled": True}
    return c


def model(dtype):
    torch.manual_seed(7)
    return Elem().to(dtype)


def run_engine(m, c, dtype, steps=STEPS):
    """(losses, loss scales used, fp32 masters by name, the parameters' dtypes after initialize, the steps' reported
    gradient norms)."""
    engine, _, _, _ = zoffload.initialize(model=m, config=c)
    dtypes = {p.dtype for p in m.parameters()}
    losses, scales, norms = [], [], []
    for k in range(steps):
        x, t = batch(k, dtype)
        scales.append(engine.loss_scale)
        loss = engine(x, t)
        engine.backward(loss)
        norms.append(engine.step()["grad_norm"])
        assert engine.was_step_applied(), "step %d skipped (loss scale %g)" % (k, scales[-1])
        losses.append(loss.item())
    masters = {n: engine.master_weights(n).clone() for n, _ in engine.params}
    engine.close()
    return losses, scales, masters, dtypes, norms


def run_reference(m, dtype, scales, steps=STEPS):
    """torch AdamW on fp32 masters, driven by @m's forward and backward in its own (16-bit) dtype: the loss times
    the engine's loss scale of that step, the gradients upcast and divided by it, the new masters rounded back
    into @m's parameters. Returns (losses, masters by name, the unscaled gradient norms)."""
    params = dict(m.named_parameters())
    masters = {n: p.detach().float().clone().requires_grad_(True) for n, p in params.items()}
    opt = torch.optim.AdamW(list(masters.values()), lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    losses, norms = [], []
    for k in range(steps):
        x, t = batch(k, dtype)
        loss = m(x, t)
        (loss * scales[k]).backward()
        for n, p in params.items():
            masters[n].grad = p.grad.float() / scales[k]
            p.grad = None
        norms.append(torch.cat([v.grad.flatten() for v in masters.values()]).double().norm().item())
        opt.step()
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(masters[n].to(dtype))  # round to nearest even, as the engine's copy-out
        losses.append(loss.item())
    return losses, {n: v.detach() for n, v in masters.items()}, norms


def compare(got, want, dtype, what):
    (lg, mg), (lw, mw) = got, want
    rel = max(abs(a - b) / abs(b) for a, b in zip(lg, lw))
    dm = max((mg[n] - mw[n]).abs().max().item() for n in mw)
    print("\n%s: %d steps, losses %.4f -> %.4f, largest loss difference %.3g relative, masters %.3g absolute"
          % (what, len(lg), lg[0], lg[-1], rel, dm))
    assert lg[-1] < 0.9 * lg[0], "%s: the loss did not fall: %s" % (what, lg)
    assert rel <= TOL_LOSS, "%s: losses %s, torch %s" % (what, lg, lw)
    assert dm <= TOL_MASTER, "%s: masters differ by %g" % (what, dm)


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("dtype,key", [(torch.float16, "fp16"), (torch.bfloat16, "bf16")], ids=["fp16", "bf16"])
def test_half_model_trains_like_torch(stage, dtype, key):
    """model.half() + fp16.enabled, model.to(torch.bfloat16) + bf16.enabled: the parameters stay the 16-bit working
    copy, the masters start as their values upcast, and training follows the fp32-master reference."""
    m = model(dtype)
    init = {n: p.detach().float().clone() for n, p in m.named_parameters()}
    ref = copy.deepcopy(m)
    engine, _, _, _ = zoffload.initialize(model=m, config=cfg(stage, **{key: True}))
    for n, _ in engine.params:
        assert torch.equal(engine.master_weights(n), init[n]), "initial master of %s is not the parameter upcast" % n
    if stage < 3:
        assert {p.dtype for p in m.parameters()} == {dtype}
    if key == "fp16":
        assert engine.loss_scale == 256.0
    engine.close()
    m = copy.deepcopy(ref)
    losses, scales, masters, dtypes, norms = run_engine(m, cfg(stage, **{key: True}), dtype)
    assert dtypes == {dtype}, "parameters became %s" % dtypes
    want_l, want_m, want_n = run_reference(ref, dtype, scales)
    compare((losses, masters), (want_l, want_m), dtype, "%s model, stage %d" % (key, stage))
    dn = max(abs(a - b) / b for a, b in zip(norms, want_n))
    print("gradient norms %.4f -> %.4f, largest difference %.3g relative; loss scales %s"
          % (norms[0], norms[-1], dn, sorted(set(scales))))
    assert dn <= TOL_NORM, "gradient norms %s, torch %s" % (norms, want_n)


@pytest.mark.parametrize("stage", [2, 3])
def test_fp32_model_bf16_config(stage):
    """An fp32 CPU model with bf16.enabled: zoffload keeps fp32 parameters holding the bf16 working weights widened
    (torch's CPU kernels lack many bf16 ops); the gradient goes over rounded to bf16. Reference: fp32 forward at the
    bf16-rounded weights, gradients rounded to bf16, fp32-master AdamW. Where torch's CPU kernels train in bf16
    (torch 2: zoffload._precision.cpu_kernels) the model is cast to bf16 instead, as DeepSpeed's engine casts it:
    the same run, bit for bit, as the model cast to bf16 before initialize."""
    from zoffload._precision import cpu_kernels
    if cpu_kernels(torch.bfloat16):
        got = run_engine(model(torch.float32), cfg(stage, bf16=True), torch.bfloat16)
        want = run_engine(model(torch.bfloat16), cfg(stage, bf16=True), torch.bfloat16)
        assert got[3] == {torch.bfloat16} and got[0] == want[0] and got[2].keys() == want[2].keys()
        assert all(torch.equal(got[2][n], want[2][n]) for n in got[2])
        return
    m = model(torch.float32)
    ref = copy.deepcopy(m)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    losses, _, masters, dtypes, _ = run_engine(m, cfg(stage, bf16=True), torch.float32)
    assert dtypes == {torch.float32}
    params = dict(ref.named_parameters())
    want_m = {n: p.detach().clone().requires_grad_(True) for n, p in model(torch.float32).named_parameters()}
    opt = torch.optim.AdamW(list(want_m.values()), lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    want_l = []
    for k in range(STEPS):
        x, t = batch(k, torch.float32)
        loss = ref(x, t)
        loss.backward()
        for n, p in params.items():
            want_m[n].grad = p.grad.to(torch.bfloat16).float()
            p.grad = None
        opt.step()
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(want_m[n].to(torch.bfloat16).float())
        want_l.append(loss.item())
    compare((losses, masters), (want_l, {n: v.detach() for n, v in want_m.items()}), torch.float32,
            "fp32 model, bf16 config, stage %d" % stage)


def test_bf16_model_fp16_config_is_cast():
    """A bf16 model with fp16.enabled: its parameters cast to fp16 as DeepSpeed's engine does, and it trains."""
    m = model(torch.bfloat16)
    engine, _, _, _ = zoffload.initialize(model=m, config=cfg(2, fp16=True))
    assert {p.dtype for p in m.parameters()} == {torch.float16}
    for k in range(3):
        x, t = batch(k, torch.float16)
        loss = engine(x, t)
        engine.backward(loss)
        engine.step()
        assert engine.was_step_applied() and torch.isfinite(loss)
    engine.close()


class Rotary(torch.nn.Module):
    """A Llama-style fp32 buffer (the rotary frequencies) beside 16-bit parameters, and a frozen parameter."""

    def __init__(self, n):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(n) / n)), persistent=False)
        self.w = torch.nn.Parameter(torch.ones(n))
        self.frozen = torch.nn.Parameter(torch.ones(n), requires_grad=False)

    def forward(self, x):
        return ((x * self.w * self.frozen) * torch.cos(7.0 * self.inv_freq).to(x.dtype)).square().mean()


@pytest.mark.parametrize("stage", [2, 3])
def test_buffers_keep_their_dtype_unless_buffer_dtype(stage):
    """DeepSpeed 0.19's cast: the parameters (frozen ones too) to the working dtype, floating buffers kept (a rotary
    inv_freq rounded to bf16 moves every position's angle) unless data_types.buffer_dtype names a dtype."""
    for extra, want in (({}, torch.float32), ({"data_types": {"buffer_dtype": "bf16"}}, torch.bfloat16)):
        m = Rotary(16).to(torch.bfloat16)
        m.inv_freq = m.inv_freq.float()  # a model loaded in bf16 keeps it fp32 (transformers does)
        c = dict(cfg(stage, fp16=True), **extra)
        engine, _, _, _ = zoffload.initialize(model=m, model_parameters=[m.w], config=c)
        try:
            assert m.inv_freq.dtype == want and m.frozen.dtype == torch.float16, extra
            if stage != 3:
                assert m.w.dtype == torch.float16
            for k in range(2):
                loss = engine(torch.ones(16, dtype=torch.float16))
                engine.backward(loss)
                engine.step()
                assert torch.isfinite(loss)
        finally:
            engine.close()


def test_buffer_dtype_is_checked():
    m = Rotary(4).to(torch.bfloat16)
    with pytest.raises(zoffload.ZoffloadError, match="data_types.buffer_dtype"):
        zoffload.initialize(model=m, model_parameters=[m.w],
                            config=dict(cfg(2, bf16=True), data_types={"buffer_dtype": "int8"}))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_model_without_half_config_is_refused(dtype):
    """A 16-bit model with neither fp16 nor bf16 enabled: refused naming the parameter and the fixes (DeepSpeed
    versions that check raise "torch.float32 is enabled but the following parameters have dtype that is not
    torch.float32")."""
    with pytest.raises(TypeError, match=r"parameter 'scale' is %s, but the config enables neither fp16 nor bf16"
                       % str(dtype).replace(".", r"\.")):
        zoffload.initialize(model=model(dtype), config=cfg(2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_model_without_half_config_is_refused_on_cuda(dtype, monkeypatch):
    """The same refusal for a CUDA model (which would otherwise get fp32 parameters silently), decided by
    _precision.model_compute_dtype: called directly with cuda=True, and through initialize() with a placement
    that says cuda but runs on the host backend (torch here has no CUDA; test_cuda.py runs CUDA models on a GPU)."""
    from zoffload import _device, _precision
    m = model(dtype)
    params = list(m.named_parameters())
    with pytest.raises(TypeError, match=r"parameter 'scale' is %s, but the config enables neither fp16 nor bf16"
                       % str(dtype).replace(".", r"\.")):
        _precision.model_compute_dtype(m, params, torch.float32, cuda=True)
    assert _precision.model_compute_dtype(m, params, torch.bfloat16, cuda=True) == torch.bfloat16
    assert m.scale.dtype == dtype  # on CUDA the placement gives the parameters the working dtype, not this

    class CudaSaysPlacement(_device.HostPlacement):
        cuda = True

    monkeypatch.setattr(_device, "placement", lambda model, device: CudaSaysPlacement())
    with pytest.raises(TypeError, match=r"parameter 'scale' is %s, but the config enables neither fp16 nor bf16"
                       % str(dtype).replace(".", r"\.")):
        zoffload.initialize(model=model(dtype), config=cfg(2))


@pytest.mark.parametrize("stage", [2, 3])
def test_fp16_overflow_skips_and_halves_scale(stage):
    """An inf gradient in an fp16 model: the step is skipped (was_step_applied() False, masters and parameters
    unchanged) and the loss scale halves; the next finite step applies."""
    m = model(torch.float16)
    engine, _, _, _ = zoffload.initialize(model=m, config=cfg(stage, fp16=True, hysteresis=1))
    x, t = batch(0, torch.float16)
    loss = engine(x, t)
    engine.backward(loss)
    engine.step()
    assert engine.was_step_applied()
    before = {n: engine.master_weights(n).clone() for n, _ in engine.params}
    scale = engine.loss_scale
    x = x.clone()
    x[0, 0] = 6e4  # d(loss)/d(l1.w) of this element overflows fp16 once scaled
    loss = engine(x, t)
    engine.backward(loss)
    info = engine.step()
    assert not engine.was_step_applied() and info["skipped"] == 1
    assert engine.loss_scale == scale / 2, (scale, engine.loss_scale)
    for n, v in before.items():
        assert torch.equal(engine.master_weights(n), v), "%s changed in a skipped step" % n
    if stage == 2:
        assert torch.equal(m.l1.w.detach().float(), before["l1.w"].half().float())
    x, t = batch(1, torch.float16)
    loss = engine(x, t)
    engine.backward(loss)
    engine.step()
    assert engine.was_step_applied()
    engine.close()


def test_half_model_accumulation():
    """bf16 model, 2 micro-batches per step at stage 2: the bf16 gradients of loss / 2 go over in each micro-step and
    the engine sums them in fp32 (its accumulation dtype with gradient_accumulation_steps > 1). Reference: the same
    sum of upcast bf16 gradients, fp32-master AdamW."""
    c = dict(cfg(2, bf16=True), train_micro_batch_size_per_gpu=4, gradient_accumulation_steps=2)
    m = model(torch.bfloat16)
    ref = copy.deepcopy(m)
    engine, _, _, _ = zoffload.initialize(model=m, config=c)
    halves = (slice(0, 4), slice(4, 8))
    losses = []
    for k in range(2 * STEPS):
        x, t = batch(k // 2, torch.bfloat16)
        loss = engine(x[halves[k % 2]], t[halves[k % 2]])
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    assert engine.global_steps == STEPS and engine.was_step_applied()
    assert {p.dtype for p in m.parameters()} == {torch.bfloat16}
    masters = {n: engine.master_weights(n).clone() for n, _ in engine.params}
    engine.close()
    params = dict(ref.named_parameters())
    want_m = {n: p.detach().float().clone().requires_grad_(True) for n, p in params.items()}
    opt = torch.optim.AdamW(list(want_m.values()), lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    want_l = []
    for k in range(STEPS):
        x, t = batch(k, torch.bfloat16)
        acc = {n: torch.zeros_like(v) for n, v in want_m.items()}
        for h in halves:
            loss = ref(x[h], t[h])
            (loss / 2).backward()
            for n, p in params.items():
                acc[n] += p.grad.float()
                p.grad = None
            want_l.append(loss.item())
        for n in want_m:
            want_m[n].grad = acc[n]
        opt.step()
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(want_m[n].to(torch.bfloat16))
    compare((losses, masters), (want_l, {n: v.detach() for n, v in want_m.items()}), torch.bfloat16,
            "bf16 model, 2 micro-batches per step")


@pytest.mark.parametrize("stage", [2, 3])
def test_fp16_model_checkpoint_round_trip(tmp_path, stage):
    """An fp16 model saved after 3 steps and loaded into a fresh fp16 model continues exactly (losses, loss
    scale); save_16bit_model writes fp16 tensors equal to the masters rounded."""
    def steps(engine, ks):
        out = []
        for k in ks:
            x, t = batch(k, torch.float16)
            loss = engine(x, t)
            engine.backward(loss)
            engine.step()
            out.append(loss.item())
        return out
    engine, _, _, _ = zoffload.initialize(model=model(torch.float16), config=cfg(stage, fp16=True))
    steps(engine, range(3))
    engine.save_checkpoint(str(tmp_path), tag="global_step3")
    want = steps(engine, range(3, 6))
    scale = engine.loss_scale
    engine.save_16bit_model(str(tmp_path), "model.bin")
    masters = {n: engine.master_weights(n).clone() for n, _ in engine.params}
    engine.close()
    sd = torch.load(str(tmp_path / "model.bin"))
    for n, v in masters.items():
        assert sd[n].dtype == torch.float16 and torch.equal(sd[n], v.half()), n
    m = model(torch.float16)
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
    engine, _, _, _ = zoffload.initialize(model=m, config=cfg(stage, fp16=True))
    engine.load_checkpoint(str(tmp_path), tag="global_step3")
    got = steps(engine, range(3, 6))
    assert got == want and engine.loss_scale == scale, (got, want, engine.loss_scale, scale)
    engine.close()
