"""ZeRO stage 3 in the Python front: a parameter's storage exists only while a module uses it.

Between uses every parameter holds an empty tensor; the engine keeps its working weights on the tier
offload_param names (cpu or nvme) and fetches them along its recorded trace, prefetching ahead. Hooks:
  - forward pre-hook of a module with parameters of its own or external ones (zero.register_external_parameter):
    fetch those (the whole subtree for a leaf: nn.MultiheadAttention and nn.TransformerEncoderLayer, which use their
    children's weights without calling them, and the modules utils.set_z3_leaf_modules or the config's
    zero_optimization.leaf_module flagged; a leaf's descendants get no hooks; a root module's own parameters for
    its whole forward, as DeepSpeed)
    and point each parameter's storage at a copy of the fetched weights (on the CPU widened to fp32 from
    bf16/fp16; on the GPU in the working dtype, copied on torch's current stream);
  - frozen parameters (requires_grad=False) live in a store on offload_param's tier (zero.Store), fetched by the
    same hooks, for backward only when an input of the module needs a gradient or the module trains parameters
    of its own, released by hooks on those inputs (else at backward's end); zero.Init's parameters are registered
    by ds_shape and loaded from Init's store;
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
    def forward(ctx, eng, ids, fids, *outs):
        ctx.eng, ctx.ids, ctx.fids = eng, ids, fids
        return tuple(o.view_as(o) for o in outs)

    @staticmethod
    def backward(ctx, *grads):
        ctx.eng._for_backward(ctx.ids, ctx.fids)
        return (None, None, None) + grads


# modules whose forward uses their children's weights without calling the children (nn.MultiheadAttention's
# out_proj; the encoder layer's fast path reads its attention's weights): their hooks fetch the whole subtree
_SUBTREE = (torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer)


_linear = torch.nn.functional.linear


class _Linear(torch.autograd.Function):
    """torch.nn.functional.linear during a stage-3 pass of a model zero.Init built with mem_efficient_linear (its
    default, as DeepSpeed's LinearFunctionForZeroStage3): saves the weight parameter itself, not the transposed
    view of its fetched copy that addmm saves, so the copy is freed at the module's release and not kept until
    backward (without it every weight's working copy lives from its forward to its backward: at the end of the
    forward pass, the whole model). Backward re-fetches it (the hooks) and recomputes the product under
    autograd: the same gradients bit for bit as torch's linear, for one more matrix product per linear."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w, b)
        return _linear(x, w, b)

    @staticmethod
    def backward(ctx, grad):
        x, w, b = ctx.saved_tensors
        need = ctx.needs_input_grad
        with torch.enable_grad():
            ins = [t.detach().requires_grad_(n) if t is not None else None for t, n in zip((x, w, b), need)]
            out = _linear(*ins)
            want = [t for t, n in zip(ins, need) if t is not None and n]
            got = iter(torch.autograd.grad(out, want, grad)) if want else iter(())
        return tuple(next(got) if t is not None and n else None for t, n in zip(ins, need))


def _mem_efficient_linear(input, weight, bias=None):
    if torch.is_grad_enabled() and getattr(weight, "_zo_ref", None) is not None:
        return _Linear.apply(input, weight, bias)
    return _linear(input, weight, bias)


class Stage3Engine(Engine):
    def __init__(self, model, config, _read=None, device=None, model_parameters=None):
        # a model zero.Init built with mem_efficient_linear: F.linear saves the weight parameter, not its copy's view
        self._linear_swap = any(getattr(getattr(p, "_zo_ref", None), "mem_efficient_linear", False)
                                for p in model.parameters())
        with torch.no_grad():  # zero.Init partitioned these already: registered by shape, loaded from its store
            for p in model.parameters():
                if hasattr(p, "_zo_ref") and p._zo_ref.engine is None and p.requires_grad:
                    p.data = torch.zeros((), dtype=p.dtype, device=p.device).expand(p._zo_ref.shape)
        super().__init__(model, config, _read, device, model_parameters)
        self.index = {id(p): i for i, (_, p) in enumerate(self.params)}
        self.live = [0] * len(self.params)  # engine fetches not yet released
        self.bwd = [False] * len(self.params)  # fetched for backward, released by the gradient hook
        self.empty = torch.empty(0, dtype=self.place.param_dtype(self.wdtype), device=self.place.device)
        with torch.no_grad():
            for i, (_, p) in enumerate(self.params):
                p.data = self.empty  # the working weights live on the engine's tier now
                self._mark(p, None, None, i, False)
        self._offload_frozen(model)
        # first and last hooks of the root module: around every fetch and release of a pass
        self.module_hooks = [model.register_forward_pre_hook(lambda mod, inp: self._pass_begins())]
        self._in_pass = False  # between the root module's pre- and post-hook
        # fetches a module's pre-hook made inside backward (activation checkpointing's recompute) whose post-hook
        # has not run yet: released at backward's end if it never does (_release_recomputed)
        self._recomputed = []
        self._outside = False  # the pass is outside training (evaluation, no grad): not in the trace
        from .zero import external_parameters
        from .utils import apply_leaf_module_config, z3_leaf_module
        # (the config is a dict, its zero_optimization an object or absent: the library's parser checked both)
        apply_leaf_module_config(model, (self.config.get("zero_optimization") or {}).get("leaf_module"))
        # a leaf (a _SUBTREE module, or one utils.set_z3_leaf_modules or the config flagged) fetches its whole subtree;
        # the modules inside it get no hooks of their own
        leaves = {id(m): m for m in model.modules() if isinstance(m, _SUBTREE) or z3_leaf_module(m)}
        inside = {id(c) for m in leaves.values() for c in m.modules() if c is not m}
        for m in model.modules():
            if id(m) in inside:
                continue
            sub = list(m.modules()) if id(m) in leaves else [m]
            own = list(m.parameters(recurse=id(m) in leaves)) + [q for c in sub for q in external_parameters(c)]
            if not own:
                continue
            if z3_leaf_module(m):
                for q in own:
                    q.ds_z3_leaf_module = m
            ids = tuple(sorted({self.index[id(p)] for p in own if id(p) in self.index}))
            fids = tuple(sorted({self.findex[id(p)] for p in own if id(p) in self.findex}))
            self.module_hooks.append(m.register_forward_pre_hook(
                lambda mod, inp, ids=ids, fids=fids: self._acquire(ids, fids, inp)))
            self.module_hooks.append(m.register_forward_hook(
                lambda mod, inp, out, ids=ids, fids=fids: self._forward_done(ids, fids, inp, out)))
        self.module_hooks.append(model.register_forward_hook(lambda mod, inp, out: self._pass_ends()))

    # --- frozen parameters (requires_grad=False): offloaded too, to offload_param's tier, fetched on use ---

    def _mark(self, p, store, key, index, frozen):
        from . import zero
        ref = getattr(p, "_zo_ref", None)
        if ref is None:
            ref = zero._Ref(store, key, p.shape if store is not None or index is None else self.shapes[index])
            zero._mark(p, ref, p.dtype)
        ref.engine, ref.index, ref.frozen = self, index, frozen
        p.ds_tensor = p.data

    def _offload_frozen(self, model):
        """Each parameter the engine does not train moves to a store on offload_param's tier (zero.Init's store when
        Init partitioned it): "nvme" a swap file under its nvme_path, else host memory; the parameter is left
        empty and its hooks fetch a copy on use (no Adam state: LoRA's frozen base model costs its weights only)."""
        from . import zero
        self.frozen, self.findex, self.fstore = [], {}, None
        seen = set()
        for n, p in model.named_parameters():
            if id(p) in self.index or id(p) in seen:
                continue
            seen.add(id(p))
            ref = getattr(p, "_zo_ref", None)
            if ref is None:
                if self.fstore is None:
                    off = self.resolved.zero_optimization.offload_param
                    nvme = off.device == "nvme"
                    self.fstore = zero.Store("nvme" if nvme else "cpu", off.nvme_path if nvme else None)
                key = len(self.frozen)
                self.fstore.put(key, p.detach())
                ref = zero._Ref(self.fstore, key, p.shape)
                zero._mark(p, ref, p.dtype)
            ref.engine, ref.index, ref.frozen = self, len(self.frozen), True
            self.findex[id(p)] = len(self.frozen)
            self.frozen.append((n, p))
        self.flive = [0] * len(self.frozen)
        self.fbwd = [False] * len(self.frozen)

    def _ffetch(self, f):
        n, p = self.frozen[f]
        self.flive[f] += 1
        if self.flive[f] == 1:
            ref = p._zo_ref
            with torch.no_grad():
                p.data = ref.store.read(ref.key).to(self.place.device, p.dtype, copy=True).view(ref.shape)

    def _frelease(self, f):
        n, p = self.frozen[f]
        self.flive[f] -= 1
        if self.flive[f] == 0:
            with torch.no_grad():
                p.data = torch.empty(0, dtype=p.dtype, device=p.data.device)

    def _frozen_backward_done(self, fids):
        for f in fids:
            if self.fbwd[f]:
                self.fbwd[f] = False
                self._frelease(f)

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
        if self._linear_swap:
            torch.nn.functional.linear = _mem_efficient_linear
        if torch.is_grad_enabled() and self.module.training:
            return
        self._outside = True
        _lib.check(_lib.lib.zo_engine_set_trace(self.eng, 0), "set_trace")

    def _pass_ends(self):
        self._in_pass = False
        if self._linear_swap:
            torch.nn.functional.linear = _linear
        if self._outside:
            self._outside = False
            _lib.check(_lib.lib.zo_engine_set_trace(self.eng, 1), "set_trace")

    def _recover(self):
        for i, n in enumerate(self.live):
            for _ in range(n):
                self._release(i)
            self.bwd[i] = False
        for f, n in enumerate(self.flive):
            for _ in range(n):
                self._frelease(f)
            self.fbwd[f] = False
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
            w = self.place.view(ptr.value, self.shapes[i].numel(), t, self._mem)
            p.data = w.to(self.place.param_dtype(t), copy=True).view(self.shapes[i])

    def _release(self, i):
        n, p = self.params[i]
        self.live[i] -= 1
        if self.live[i] == 0:
            with torch.no_grad():
                p.data = self.empty
        with self.place.ordered():
            _lib.check(_lib.lib.zo_engine_release(self.eng, self.handles[i]), "release '%s'" % n)

    def _acquire(self, ids, fids=(), inp=()):
        for i in ids:
            self._fetch(i)
        for f in fids:
            self._ffetch(f)
        if self._in_backward:
            self._recomputed.append((ids, fids))
        if fids and torch.is_grad_enabled():
            # The module's backward may need its frozen weights (for the gradient of its inputs): released once
            # the gradient of every input that needs one is complete (a hook on each input, which fires after all
            # of that input's consumers, this module included, ran their backward; the graph and its sums are
            # unchanged). Leftovers (an input whose hook never fires) are released at backward's end.
            ins = [x for x in inp if isinstance(x, torch.Tensor) and x.requires_grad]
            left = [len(ins)]

            def done(grad):
                left[0] -= 1
                if left[0] == 0:
                    self._frozen_backward_done(fids)
            for x in ins:
                x.register_hook(done)
        return None

    def _forward_done(self, ids, fids, inp, out):
        if self._in_backward:  # a recompute's module finished: its pre-hook's fetch is released below, as usual
            for k in range(len(self._recomputed) - 1, -1, -1):
                if self._recomputed[k] == (ids, fids):
                    del self._recomputed[k]
                    break
        wrap = torch.is_grad_enabled()
        for i in ids:
            self._release(i)
        for f in fids:
            self._frelease(f)
        if not wrap:
            return None
        # frozen weights are fetched for backward when some input needs a gradient, or when the module trains
        # parameters of its own, whose gradients may need them (w * mask, with mask frozen); else nothing needs them
        if not ids and not any(isinstance(x, torch.Tensor) and x.requires_grad for x in inp):
            fids = ()
        if isinstance(out, torch.Tensor):
            return _PreBackward.apply(self, ids, fids, out)[0] if out.requires_grad else None
        if isinstance(out, (tuple, list)):
            idx = [k for k, o in enumerate(out) if isinstance(o, torch.Tensor) and o.requires_grad]
            if not idx:
                return None
            wrapped = _PreBackward.apply(self, ids, fids, *[out[k] for k in idx])
            res = list(out)
            for k, w in zip(idx, wrapped):
                res[k] = w
            return type(out)(res) if isinstance(out, tuple) else res
        return None

    def _for_backward(self, ids, fids=()):
        for i in ids:
            if not self.bwd[i]:
                self.bwd[i] = True
                self._fetch(i)
        for f in fids:
            if not self.fbwd[f]:
                self.fbwd[f] = True
                self._ffetch(f)

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
        self._frozen_backward_done(range(len(self.frozen)))

    def backward(self, loss, scale_wrt_gas=True):
        try:
            super().backward(loss, scale_wrt_gas=scale_wrt_gas)
        finally:  # frozen weights a backward fetched whose inputs' gradient hooks did not all fire
            self._frozen_backward_done(range(len(self.frozen)))
            self._release_recomputed()

    def _release_recomputed(self):
        """torch's non-reentrant checkpoint stops a recompute as soon as the tensors backward needs exist (early
        stop, torch 2.2's default): the modules it stopped in never reach their post-hook, so their fetches are
        released here, after the backward that used them. Left fetched, a parameter kept its pre-step copy into the
        next step (its next fetch found it live): the losses of stage 3 left stage 2's from the second step on."""
        left, self._recomputed = self._recomputed, []
        for ids, fids in reversed(left):
            for i in ids:
                self._release(i)
            for f in fids:
                self._frelease(f)

    # --- zero.GatheredParameters and the consolidated state dict ---

    def _traced_off(self):
        """Fetches outside a training pass must not enter the trace: (turned off, so turn on after)."""
        if self._in_pass and not self._outside:
            return False
        _lib.check(_lib.lib.zo_engine_set_trace(self.eng, 0), "set_trace")
        return True

    def _gather(self, p):
        ref = p._zo_ref
        if ref.frozen:
            self._ffetch(ref.index)
            return
        off = self._traced_off()
        try:
            self._fetch(ref.index)
        finally:
            if off and not self._outside:
                _lib.check(_lib.lib.zo_engine_set_trace(self.eng, 1), "set_trace")

    def _scatter(self, p, modifier_rank):
        """End of GatheredParameters for @p: with @modifier_rank, that rank's values (broadcast) become its weights
        (trainable: fp32 master weights via zo_engine_load_param, whose Adam moments restart; frozen: its store);
        then released."""
        ref = p._zo_ref
        new = None
        if modifier_rank is not None:
            if not 0 <= modifier_rank < self.world_size:
                raise ValueError("GatheredParameters: modifier_rank %d outside [0, %d)" % (modifier_rank,
                                                                                          self.world_size))
            new = p.detach().to("cpu", torch.float32 if not ref.frozen else p.dtype, copy=True).contiguous()
            if self.world_size > 1:
                nbytes = new.numel() * new.element_size()
                _lib.check(_lib.lib.zo_comm_broadcast(self.comm, new.data_ptr(), nbytes, modifier_rank),
                           "GatheredParameters: broadcast")
        if ref.frozen:
            if new is not None:
                ref.store.put(ref.key, new.view(ref.shape))
            self._frelease(ref.index)
            return
        off = self._traced_off()
        try:
            self._release(ref.index)
        finally:
            if off and not self._outside:
                _lib.check(_lib.lib.zo_engine_set_trace(self.eng, 1), "set_trace")
        if new is not None:
            n = self.params[ref.index][0]
            _lib.check(_lib.lib.zo_engine_load_param(self.eng, self.handles[ref.index], new.data_ptr()),
                       "GatheredParameters: load '%s'" % n)

    def consolidated_state_dict(self, dtype=torch.float32):
        """The DeepSpeed API's consolidated_state_dict (trained parameters from the consolidated fp32 masters), with
        frozen parameters read from their stores: at stage 3 the module holds them empty. A collective call."""
        out = super().consolidated_state_dict(dtype)
        if self.rank == 0:
            for key, v in self.module.state_dict(keep_vars=True).items():
                if id(v) in self.findex:
                    ref = v._zo_ref
                    t = ref.store.read(ref.key).view(ref.shape)
                    out[key] = t.to(dtype, copy=True) if t.is_floating_point() else t.clone()
        return out

    def _zero3_consolidated_16bit_state_dict(self):
        """DeepSpeed's engine._zero3_consolidated_16bit_state_dict(): {name: tensor} with every key of
        module.state_dict() (tied parameters under each of their names, persistent buffers), the trained
        parameters as the engine's working weights (what the last step produced from the fp32 master weights:
        bf16/fp16 when the config enables them, else fp32), frozen ones as stored, all whole and on the CPU.
        A collective call with several ranks (each rank fetches every tensor, the engine all-gathers); rank 0
        gets the dict, the others an empty one, as DeepSpeed does. Call between steps."""
        import collections
        out = collections.OrderedDict()
        keep = self.rank == 0
        off = self._traced_off()
        try:
            for key, v in self.module.state_dict(keep_vars=True).items():
                if id(v) in self.index:
                    i = self.index[id(v)]
                    ptr, dt = ctypes.c_void_p(), ctypes.c_int()
                    with self.place.ordered():
                        _lib.check(_lib.lib.zo_engine_fetch(self.eng, self.handles[i], ctypes.byref(ptr),
                                                            ctypes.byref(dt)), "fetch '%s'" % key)
                    try:
                        if keep:
                            t = self.place.view(ptr.value, self.shapes[i].numel(), _DT[dt.value], self._mem)
                            out[key] = t.to("cpu", copy=True).view(self.shapes[i])
                    finally:
                        with self.place.ordered():
                            _lib.check(_lib.lib.zo_engine_release(self.eng, self.handles[i]), "release '%s'" % key)
                elif id(v) in self.findex:
                    if keep:
                        ref = v._zo_ref
                        out[key] = ref.store.read(ref.key).to("cpu", copy=True).view(ref.shape)
                elif keep:
                    out[key] = v.detach().to("cpu", copy=True)
        finally:
            if off and not self._outside:
                _lib.check(_lib.lib.zo_engine_set_trace(self.eng, 1), "set_trace")
        return out

    def _initial_value(self, p):
        ref = getattr(p, "_zo_ref", None)
        if ref is None or ref.store is None:
            return super()._initial_value(p)
        v = ref.store.read(ref.key).to(torch.float32).contiguous()
        ref.store.drop(ref.key)  # the engine has the values now: the store's copy goes
        ref.store, ref.key = None, None
        return v

    def _write_back(self):
        return None  # the hooks fetch the weights when a module runs; between uses parameters are empty

    def _remove_hooks(self):
        for h in getattr(self, "module_hooks", []):
            h.remove()
        self.module_hooks = []
        super()._remove_hooks()
