"""zoffload.optim.CPUAdam against torch's optimizers (run by ctest as `python_cpu_adam`, or by hand:
ZOFFLOAD_LIBRARY=build/libzoffload.so GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384 \\
    PYTHONPATH=python /usr/bin/python3 -m pytest python/tests).

Tolerance against torch: zoffload's kernel does torch's float32 operations in torch's order, with two
differences. (1) The last, p - (lr/bc1) * (m/denom), where torch's addcdiv computes p + (-lr/bc1 * m) / denom:
the two round differently, by up to an ulp of the update, and each step's parameter rounds once more. (2) The
constants: zo_adam_hparams holds beta1 and beta2 as float32 and forms 1 - beta from them, where torch forms
1 - beta in double from the Python float and rounds that: 1 - 0.9f = 0.100000024 against 0.1 (2.4e-7 relative),
1 - 0.999f = 0.00099998713 against 0.001 (1.3e-5 relative), so m and v differ by up to those fractions. v enters
the step under a square root, halving its share: each step differs by about 7e-6 relative at most, which over
100 steps of size lr = 1e-2 is below 1e-5 absolute, plus about sqrt(S) ulps of |p| from (1). We allow
2e-5 + 2e-6 |p| on parameters, 2e-5 relative on v and 1e-6 of |m| + sqrt(v) on m (a sum of
terms of either sign), and see about 1e-6 on parameters (printed).
"""
import copy
import math

import pytest
import torch

import zoffload
from zoffload.optim import CPUAdam

SHAPES = [(1,), (7,), (1000, 37), (4099,), (3, 5, 67)]


def _pair(adamw, wd=0.1, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, bias_correction=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.randn(s, generator=g) for s in SHAPES]
    qs = [p.clone() for p in ps]
    ours = CPUAdam(ps, lr=lr, betas=betas, eps=eps, weight_decay=wd, adamw_mode=adamw,
                   bias_correction=bias_correction)
    ref_cls = torch.optim.AdamW if adamw else torch.optim.Adam
    ref = ref_cls(qs, lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=False)
    return ps, qs, ours, ref, g


def _run(ps, qs, ours, ref, g, steps, grad_dtype=torch.float32):
    for _ in range(steps):
        grads = {}
        for p, q in zip(ps, qs):
            grad = torch.randn(p.shape, generator=g).to(grad_dtype)
            grads[p] = grad  # a 16-bit gradient for an fp32 parameter goes by step(grads=)
            q.grad = grad.float()  # torch widens a 16-bit gradient the same way: exactly
        ours.step(grads=grads)
        ref.step()


def _worst(ps, qs):
    return max(((p - q).abs() / (2e-5 + 2e-6 * q.abs())).max().item() for p, q in zip(ps, qs))


@pytest.mark.parametrize("adamw", [True, False], ids=["AdamW", "Adam-L2"])
@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_matches_torch(adamw, grad_dtype):
    ps, qs, ours, ref, g = _pair(adamw)
    _run(ps, qs, ours, ref, g, 100, grad_dtype)
    worst = _worst(ps, qs)
    diff = max((p - q).abs().max().item() for p, q in zip(ps, qs))
    print("%s %s: max |ours - torch| after 100 steps %.3g (%.3f of the tolerance)"
          % ("AdamW" if adamw else "Adam+L2", grad_dtype, diff, worst))
    assert worst <= 1.0
    for p, q in zip(ps, qs):  # the moments: torch's operations, 1 - beta formed in float32 (see the top)
        m, m_ref = ours.state[p]["exp_avg"], ref.state[q]["exp_avg"]
        v, v_ref = ours.state[p]["exp_avg_sq"], ref.state[q]["exp_avg_sq"]
        # m is a sum of terms of either sign: relative to the size of its terms, about sqrt(v)
        assert ((m - m_ref).abs() <= 1e-6 * (m_ref.abs() + v_ref.sqrt())).all()
        assert ((v - v_ref).abs() <= 2e-5 * v_ref).all()  # v's terms are all positive
        assert ours.state[p]["step"] == int(ref.state[q]["step"])


def test_no_bias_correction_and_betas():
    ps, qs, ours, ref, g = _pair(True, betas=(0.5, 0.75), eps=1e-3, wd=0.0)
    _run(ps, qs, ours, ref, g, 30)
    assert _worst(ps, qs) <= 1.0
    # without bias correction: torch has no switch; compare with bc1 = bc2 = 1 written out
    p = torch.randn(257, generator=torch.Generator().manual_seed(3))
    p0 = p.clone()
    opt = CPUAdam([p], lr=0.1, betas=(0.9, 0.99), eps=1e-6, bias_correction=False)
    grad = torch.randn(257, generator=torch.Generator().manual_seed(4))
    p.grad = grad
    opt.step()
    m = 0.1 * grad
    v = (0.01 * grad) * grad
    want = p0 - 0.1 * (m / (v.sqrt() + 1e-6))
    assert torch.allclose(p, want, rtol=0, atol=1e-6)


def test_param_groups():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(100, generator=g), torch.randn(50, generator=g)
    a2, b2 = a.clone(), b.clone()
    ours = CPUAdam([{"params": [a], "lr": 1e-1}, {"params": [b], "weight_decay": 0.5}], lr=1e-3)
    ref = torch.optim.AdamW([{"params": [a2], "lr": 1e-1}, {"params": [b2], "weight_decay": 0.5}], lr=1e-3,
                            weight_decay=0.0, foreach=False)
    for _ in range(10):
        for x, y in ((a, a2), (b, b2)):
            x.grad = torch.randn(x.shape, generator=g)
            y.grad = x.grad.clone()
        ours.step()
        ref.step()
    assert _worst([a, b], [a2, b2]) <= 1.0
    assert ours.param_groups[1]["lr"] == 1e-3 and ours.param_groups[0]["weight_decay"] == 0.0


def test_state_dict_round_trip_exact():
    """10 steps, save, a new optimizer (and parameters) loaded from it, 10 more: bit-identical to 20 straight."""
    ps, _, ours, _, g = _pair(True)
    straight = [p.clone() for p in ps]
    opt2 = CPUAdam(straight, lr=1e-2, weight_decay=0.1)
    grads = [[torch.randn(p.shape, generator=g) for p in ps] for _ in range(20)]
    for s in range(10):
        for p, q, gr in zip(ps, straight, grads[s]):
            p.grad, q.grad = gr.clone(), gr.clone()
        ours.step()
        opt2.step()
    saved = copy.deepcopy(ours.state_dict())
    resumed = [p.clone() for p in ps]
    opt3 = CPUAdam(resumed, lr=5.0)  # the hyperparameters come from the state dict
    opt3.load_state_dict(saved)
    assert opt3.param_groups[0]["lr"] == 1e-2
    for s in range(10, 20):
        for q, r, gr in zip(straight, resumed, grads[s]):
            q.grad, r.grad = gr.clone(), gr.clone()
        opt2.step()
        opt3.step()
    for q, r in zip(straight, resumed):
        assert torch.equal(q, r)


def test_copy_out_bf16_and_fp16():
    p = torch.randn(4099, generator=torch.Generator().manual_seed(5))
    p.grad = torch.randn(4099, generator=torch.Generator().manual_seed(6))
    out16 = torch.empty(4099, dtype=torch.bfloat16)
    outh = torch.empty(4099, dtype=torch.float16)
    opt = CPUAdam([p], lr=1e-2)
    opt.step(copy_out={p: out16})
    assert torch.equal(out16, p.to(torch.bfloat16))  # round to nearest even, as torch's cast
    p.grad = torch.randn(4099)
    opt.step(copy_out={p: outh})
    assert torch.equal(outh, p.to(torch.float16))


def test_errors_name_the_parameter():
    with pytest.raises(ValueError, match="amsgrad"):
        CPUAdam([torch.zeros(3)], amsgrad=True)
    with pytest.raises(ValueError, match="betas"):
        CPUAdam([torch.zeros(3)], betas=(1.0, 0.9))
    half = torch.zeros(3, dtype=torch.float16, requires_grad=True)
    opt = CPUAdam([torch.zeros(2), half])
    half.grad = torch.zeros(3, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"param_groups\[0\]\.params\[1\] \(shape \(3,\)\)"):
        opt.step()
    p = torch.zeros(4)
    with pytest.raises(TypeError, match="gradient of param_groups"):
        CPUAdam([p]).step(grads={p: torch.zeros(4, dtype=torch.float64)})
    # a value the library refuses comes back as ZoffloadError with its message
    q = torch.zeros(4)
    q.grad = torch.zeros(4)
    bad = CPUAdam([q])
    bad.param_groups[0]["eps"] = -1.0
    with pytest.raises(zoffload.ZoffloadError, match="eps"):
        bad.step()


def test_hparams_checked_as_float32():
    """The kernel computes in float32: a value that is 0 or infinite there is refused by name (eps 1e-50 was 0.0f and
    gave NaN weights on a zero gradient; weight_decay 1e40 was inf and gave NaN weights)."""
    p = torch.zeros(4)
    for kw, name in (({"eps": 1e-50}, "eps"), ({"weight_decay": 1e40}, "weight_decay"), ({"lr": 1e39}, "lr"),
                     ({"betas": (0.9, 0.9999999999)}, r"betas\[1\]"), ({"lr": float("nan")}, "lr")):
        with pytest.raises(ValueError, match=name + " must be"):
            CPUAdam([p], **kw)
    with pytest.raises(ValueError, match="weight_decay must be"):  # a group's own value too
        CPUAdam([{"params": [p], "weight_decay": 1e40}])
    CPUAdam([p], eps=0.0, betas=(0.0, 0.99999994))  # 0, and the largest float32 below 1: accepted


def test_library_reported():
    assert zoffload.__library__.endswith(".so") or ".so." in zoffload.__library__
    assert math.isfinite(float(torch.ones(1).sum()))
