"""ZeRO stage 3 in the Python front: a parameter's storage exists only while a module uses it.

Between uses every parameter holds an empty tensor; the engine keeps its working weights on the tier
offload_param names (cpu or nvme) and fetches them along its recorded trace, prefetching ahead. Hooks:
  - forward pre-hook of a module with parameters of its own: fetch the parameters of its whole subtree (a module
    may use a child's weights without calling the child, as nn.MultiheadAttention does with out_proj) and point
    each parameter's storage at a copy of the fetched weights (on the CPU widened to fp32 from bf16/fp16; on the
    GPU in the working dtype, copied on torch's current stream);
  - forward post-hook: release them, and wrap the module's outputs in an autograd function whose backward
    fetches them again before the module's own backward runs (torch 1.13 has no full backward pre-hook);
  - the parameter's gradient hook (after accumulation): hand the gradient over (in every micro-step: accumulate
    before the boundary, ready in it; .grad freed) and release the parameter;
  - the root module's pre/post hooks: a pass outside training (torch.no_grad(), or model.eval()) runs with the
    engine's trace off, so evaluation between steps neither breaks nor replaces the training steps' prefetch order;
    and a pass that raised (its post-hooks never ran) has its fetches released when the next one begins.
The same references are counted per parameter, so nested and repeated calls fetch and release in pairs. Source:
DeepSpeed's ZeRO-3 (runtime/zero/parameter_offload.py: pre/post forward hooks, PreBackwardFunction).
"""
import ctypes

import torch

from . import _lib
from .engine import _DT, Engine


class _PreBackward(torch.autograd.Function):
    """Identity on the module's outputs; its backward fetches the module's parameters back first."""

    @staticmethod
    def forward(ctx, eng, ids, *outs):
        ctx.eng, ctx.ids = eng, ids
        return tuple(o.view_as(o) for o in outs)

    @staticmethod
    def backward(ctx, *grads):
        ctx.eng._for_backward(ctx.ids)
        return (None, None) + grads


class Stage3Engine(Engine):
    def __init__(self, model, config, _read=None, device=None, model_parameters=None):
        super().__init__(model, config, _read, device, model_parameters)
        self.index = {id(p): i for i, (_, p) in enumerate(self.params)}
        self.live = [0] * len(self.params)  # engine fetches not yet released
        self.bwd = [False] * len(self.params)  # fetched for backward, released by the gradient hook
        self.empty = torch.empty(0, dtype=self.place.param_dtype(self.wdtype), device=self.place.device)
        with torch.no_grad():
            for _, p in self.params:
                p.data = self.empty  # the working weights live on the engine's tier now
        # first and last hooks of the root module: around every fetch and release of a pass
        self.module_hooks = [model.register_forward_pre_hook(lambda mod, inp: self._pass_begins())]
        self._in_pass = False  # between the root module's pre- and post-hook
        self._outside = False  # the pass is outside training (evaluation, no grad): not in the trace
        for m in model.modules():
            if not any(True for _ in m.parameters(recurse=False)):
                continue
            ids = tuple(self.index[id(p)] for p in m.parameters() if id(p) in self.index)
            self.module_hooks.append(m.register_forward_pre_hook(lambda mod, inp, ids=ids: self._acquire(ids)))
            self.module_hooks.append(m.register_forward_hook(lambda mod, inp, out, ids=ids: self._forward_done(ids, out)))
        self.module_hooks.append(model.register_forward_hook(lambda mod, inp, out: self._pass_ends()))

    # --- passes: evaluation outside the trace, and recovery from a pass that raised ---

    def _pass_begins(self):
        """The root module's forward starts (registered before the per-module hooks, and _pass_ends after them,
        so the root's own fetch and release are inside).
        A previous pass still open raised an exception: its post-hooks never ran, so the parameters it fetched
        are released now (a parameter left fetched would keep a stale copy of its weights after the next step).
        An evaluation pass (no grad, or the model in eval mode) fetches without recording or following the trace,
        so the training steps keep theirs (zo_engine_set_trace). The root module is not re-entered."""
        if self._in_pass:
            self._recover()
        self._in_pass = True
        if torch.is_grad_enabled() and self.module.training:
            return
        self._outside = True
        _lib.check(_lib.lib.zo_engine_set_trace(self.eng, 0), "set_trace")

    def _pass_ends(self):
        self._in_pass = False
        if self._outside:
            self._outside = False
            _lib.check(_lib.lib.zo_engine_set_trace(self.eng, 1), "set_trace")

    def _recover(self):
        for i, n in enumerate(self.live):
            for _ in range(n):
                self._release(i)
            self.bwd[i] = False
        self._pass_ends()

    # --- parameter storage ---

    def _fetch(self, i):
        n, p = self.params[i]
        ptr, dt = ctypes.c_void_p(), ctypes.c_int()
        with self.place.ordered():  # afterwards torch's current stream waits for the weights to land
            _lib.check(_lib.lib.zo_engine_fetch(self.eng, self.handles[i], ctypes.byref(ptr), ctypes.byref(dt)),
                       "fetch '%s'" % n)
        self.live[i] += 1
        if self.live[i] > 1:
            return
        # A copy in torch's memory, never a view of the engine's buffer: autograd may keep views of a weight (a
        # slice of nn.MultiheadAttention's in_proj_weight) past the release, when the engine reuses the buffer.
        # On the GPU the copy is a device-to-device copy queued on torch's current stream, which the fetch made
        # wait for the weights to land; the release orders the buffer's reuse after it.
        t = _DT[dt.value]
        with torch.no_grad():
            w = self.place.view(ptr.value, self.shapes[i].numel(), t)
            p.data = w.to(self.place.param_dtype(t), copy=True).view(self.shapes[i])

    def _release(self, i):
        n, p = self.params[i]
        self.live[i] -= 1
        if self.live[i] == 0:
            with torch.no_grad():
                p.data = self.empty
        with self.place.ordered():
            _lib.check(_lib.lib.zo_engine_release(self.eng, self.handles[i]), "release '%s'" % n)

    def _acquire(self, ids):
        for i in ids:
            self._fetch(i)

    def _forward_done(self, ids, out):
        wrap = torch.is_grad_enabled()
        for i in ids:
            self._release(i)
        if not wrap:
            return None
        if isinstance(out, torch.Tensor):
            return _PreBackward.apply(self, ids, out)[0] if out.requires_grad else None
        if isinstance(out, (tuple, list)):
            idx = [k for k, o in enumerate(out) if isinstance(o, torch.Tensor) and o.requires_grad]
            if not idx:
                return None
            wrapped = _PreBackward.apply(self, ids, *[out[k] for k in idx])
            res = list(out)
            for k, w in zip(idx, wrapped):
                res[k] = w
            return type(out)(res) if isinstance(out, tuple) else res
        return None

    def _for_backward(self, ids):
        for i in ids:
            if not self.bwd[i]:
                self.bwd[i] = True
                self._fetch(i)

    def _on_grad(self, i):
        super()._on_grad(i)  # the hand-over (grad_accumulate, or grad_ready in the boundary micro-step)
        if self.bwd[i]:
            self.bwd[i] = False
            self._release(i)

    def _after_step(self):
        for i in range(len(self.params)):  # parameters backward fetched but gave no gradient
            if self.bwd[i]:
                self.bwd[i] = False
                self._release(i)

    def _write_back(self):
        return None  # the hooks fetch the weights when a module runs; between uses parameters are empty

    def close(self):
        for h in getattr(self, "module_hooks", []):
            h.remove()
        self.module_hooks = []
        super().close()
