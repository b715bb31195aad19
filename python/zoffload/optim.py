"""zoffload.optim.CPUAdam: torch.optim.Optimizer over zoffload's fused CPU Adam/AdamW (cpu_adam/ in the C
library: one pass over param, grad, exp_avg and exp_avg_sq per element, AVX-512/AVX2/scalar picked at run time,
on a persistent pool of threads bound to physical cores).

The update is, per element and in float32, exactly torch's (torch.optim.AdamW / Adam with foreach=False, same
operation order, no FMA contraction): with ``adamw_mode=True`` decoupled weight decay as torch.optim.AdamW,
with ``adamw_mode=False`` L2 weight decay added to the gradient as torch.optim.Adam.
"""
import ctypes
import struct

import torch

from . import _lib

_GRAD_DTYPES = {torch.float32: _lib.DTYPE_F32, torch.bfloat16: _lib.DTYPE_BF16, torch.float16: _lib.DTYPE_F16}


_F32_MIN, _F32_MAX = 1.1754943508222875e-38, 3.4028234663852886e38  # smallest normal, largest finite


def _check_f32(name, x, below_one=False):
    """@x >= 0 and the same number in float32, what the kernel computes in: 0 or a normal finite float32 (1e-50
    would be 0, 1e40 infinite), and below 1 there when @below_one (a beta: 1 - beta^step divides). Raises
    ValueError naming it."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        raise ValueError("CPUAdam: %s must be a number, got %r" % (name, x)) from None
    ok = x >= 0.0 and (x == 0.0 or _F32_MIN <= x <= _F32_MAX)
    if ok and below_one:
        ok = struct.unpack("f", struct.pack("f", x))[0] < 1.0
    if not ok:
        raise ValueError("CPUAdam: %s must be %s, and 0 or a normal float32 (magnitude in [%g, %g]: the update is "
                         "computed in float32), got %r" % (name, "in [0, 1) as float32" if below_one else ">= 0",
                                                           _F32_MIN, _F32_MAX, x))


def _check_group(group):
    """A parameter group's hyper-parameters, at construction (values changed later are checked by the library,
    whose refusals come back as ZoffloadError)."""
    _check_f32("lr", group["lr"])
    _check_f32("eps", group["eps"])
    _check_f32("weight_decay", group["weight_decay"])
    if len(group["betas"]) != 2:
        raise ValueError("CPUAdam: betas must be a pair, got %r" % (group["betas"],))
    _check_f32("betas[0]", group["betas"][0], below_one=True)
    _check_f32("betas[1]", group["betas"][1], below_one=True)


class _Pool:
    """The process's Adam thread pool (zo_adam_pool_t), created on first use and kept: its threads sleep when
    idle. Every CPUAdam shares it; tasks run one after another, each split across all its threads."""

    handle = None

    @classmethod
    def get(cls):
        if cls.handle is None:
            h = ctypes.c_void_p()
            _lib.check(_lib.lib.zo_adam_pool_create(None, ctypes.byref(h)), "zo_adam_pool_create")
            cls.handle = h
        return cls.handle


class CPUAdam(torch.optim.Optimizer):
    """Adam/AdamW on CPU tensors, with DeepSpeedCPUAdam's constructor.

    Parameters: fp32, contiguous, on the CPU. Gradients: fp32, bf16 or fp16 CPU tensors of the same shape (a
    16-bit gradient is widened exactly). State per parameter: ``step`` (int) and fp32 ``exp_avg``,
    ``exp_avg_sq``, as torch's Adam keeps them, so ``state_dict()`` / ``load_state_dict()`` round-trip exactly.

    ``step(closure=None, copy_out=None, grads=None)``: ``grads`` maps a parameter to its gradient when that is
    not ``p.grad`` (torch refuses a bf16 ``.grad`` on an fp32 parameter: pass a 16-bit gradient this way);
    ``copy_out`` maps a parameter to a tensor (bf16, fp16 or fp32, same number of elements, contiguous, CPU) that
    receives the updated weights in its dtype in the same pass (round to nearest even), e.g. the bf16 working
    copy a GPU fetches next.

    Errors: ValueError for bad arguments (``amsgrad`` is not supported), TypeError naming the parameter for a
    tensor it cannot update, zoffload.ZoffloadError with the library's message for anything the library refuses.
    Not thread-safe: one step at a time per optimizer.
    """

    def __init__(self, model_params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0.0, amsgrad=False, adamw_mode=True, fp32_optimizer_states=True):
        if amsgrad:
            raise ValueError("CPUAdam: amsgrad is not supported (nor by DeepSpeedCPUAdam)")
        if not fp32_optimizer_states:
            raise ValueError("CPUAdam: fp32_optimizer_states=False is not supported: the states are fp32")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, bias_correction=bias_correction,
                        adamw_mode=adamw_mode)
        _check_group(defaults)
        super().__init__(model_params, defaults)
        for group in self.param_groups:  # a group's own values
            _check_group(group)
        self.pool = _Pool.get()

    def __setstate__(self, state):
        super().__setstate__(state)
        self.pool = _Pool.get()

    def _name(self, p):
        for gi, group in enumerate(self.param_groups):
            for pi, q in enumerate(group["params"]):
                if q is p:
                    return "param_groups[%d].params[%d] (shape %s)" % (gi, pi, tuple(p.shape))
        return "a parameter of shape %s" % (tuple(p.shape),)

    @torch.no_grad()
    def step(self, closure=None, copy_out=None, grads=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        tasks, keep = [], []
        try:
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                for p in group["params"]:
                    g = p.grad if grads is None or p not in grads else grads[p]
                    if g is None:
                        continue
                    if p.device.type != "cpu" or p.dtype != torch.float32 or not p.is_contiguous():
                        raise TypeError("CPUAdam: %s must be a contiguous float32 CPU tensor, got %s on %s"
                                        % (self._name(p), p.dtype, p.device))
                    if g.is_sparse or g.device.type != "cpu" or g.dtype not in _GRAD_DTYPES:
                        raise TypeError("CPUAdam: the gradient of %s must be a dense fp32, bf16 or fp16 CPU tensor, "
                                        "got %s on %s" % (self._name(p), g.dtype, g.device))
                    if g.shape != p.shape:
                        raise TypeError("CPUAdam: the gradient of %s has shape %s" % (self._name(p), tuple(g.shape)))
                    g = g.contiguous()
                    st = self.state[p]
                    if not st:
                        st["step"] = 0
                        st["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                        st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                    st["step"] = int(st["step"]) + 1
                    out = None if copy_out is None else copy_out.get(p)
                    if out is not None and (out.device.type != "cpu" or out.numel() != p.numel()
                                            or out.dtype not in _GRAD_DTYPES or not out.is_contiguous()):
                        raise TypeError("CPUAdam: copy_out for %s must be a contiguous bf16, fp16 or fp32 CPU tensor "
                                        "of %d elements" % (self._name(p), p.numel()))
                    hp = _lib.AdamHparams(lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"],
                                          weight_decay=group["weight_decay"],
                                          mode=_lib.ADAM_MODE_ADAMW if group["adamw_mode"] else _lib.ADAM_MODE_L2,
                                          bias_correction=1 if group["bias_correction"] else 0,
                                          step=st["step"], grad_scale=1.0)
                    sh = _lib.AdamShard(param=p.data_ptr(), grad=g.data_ptr(), grad_dtype=_GRAD_DTYPES[g.dtype],
                                        exp_avg=st["exp_avg"].data_ptr(), exp_avg_sq=st["exp_avg_sq"].data_ptr(),
                                        state_dtype=_lib.DTYPE_F32,
                                        param_out=out.data_ptr() if out is not None else None,
                                        out_dtype=_GRAD_DTYPES[out.dtype] if out is not None else _lib.DTYPE_F32,
                                        n=p.numel(), seed=0)
                    task = ctypes.c_void_p()
                    _lib.check(_lib.lib.zo_adam_pool_submit(self.pool, ctypes.byref(hp), ctypes.byref(sh), 0,
                                                            ctypes.byref(task)),
                               "CPUAdam step of %s" % self._name(p))
                    tasks.append(task)
                    keep.append(g)  # the tensors stay alive until their task is done
        finally:
            status = 0
            for t in tasks:  # every queued task is waited for, even after an error
                s = _lib.lib.zo_adam_task_wait(t, None)
                status = status or s
        _lib.check(status, "CPUAdam step")
        return loss
