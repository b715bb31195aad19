"""zoffload.zero: ZeRO stage 3 as DeepSpeed scripts write it (deepspeed.zero.Init, GatheredParameters,
register_external_parameter). Not the engine: these partition a model while it is built and hand its values to
the Stage3Engine (stage3.py) that zoffload.initialize() creates afterwards.

    with zoffload.zero.Init(config_dict_or_path=ds_config):     # remote_device from offload_param.device
        model = GPT()                                             # each module's parameters leave as it is built
    engine = zoffload.initialize(model=model, config=ds_config)   # stage 3: takes them without materialising them
    with zoffload.zero.GatheredParameters(model.wte.weight, modifier_rank=0):
        model.wte.weight[0].zero_()                               # written back to the master weights on exit

Design. The engine sizes every tier for all tensors at zo_engine_finalize(), so it cannot exist while the model is
still being built (its tensors are not known yet). Init therefore partitions into a store of its own: when a
module's __init__ returns (the outermost __init__ of that object: super().__init__ chains count once), each of
its own parameters (recurse=False) not yet partitioned has its values copied to the store and its data replaced
by an empty tensor, DeepSpeed's ds_tensor; ds_shape, ds_numel, ds_id and ds_status are set as DeepSpeed sets them.
The store is remote_device's tier: "cpu", a tensor per parameter in host memory; "nvme", one swap file under
offload_param.nvme_path (unlinked at once, freed with its last parameter), written with pwrite and read back one
parameter at a time. zoffload.initialize() at stage 3 registers the parameters by ds_shape and loads each one's
values from the store into the engine (zo_engine_load_param), one at a time, freeing the store's copy after:
the full model never exists in host memory (with "nvme"; with "cpu" the store and the engine's pinned master
weights coexist until the load).

While Init is active, a parameter already partitioned is still usable by the code that builds the model: a
parent module that re-initialises a child's parameter (nn.MultiheadAttention's constant_(out_proj.bias, 0),
GPT-2's self.apply(_init_weights), `.weight.data.normal_()`) gets the full values from the store and its
changes go back to it (a Parameter subclass's __torch_function__ does it for every torch function and method
but bookkeeping attributes; the class is restored on exit). After exit, read or change values with
GatheredParameters.

Limits: a module's parameters are whole until its __init__ returns (peak host memory: the largest module's own
parameters, plus one parameter for nvme); every rank keeps the whole tensors in its store until initialize()
(the engine keeps only the rank's shard); Init-partitioned parameters train at stage 3 only; before
initialize(), GatheredParameters' writes stay on the rank that makes them (there is no communicator yet), and
initialize() starts every rank's trained parameters and buffers from rank 0's values (frozen parameters that
Init partitioned stay each rank's own; the others are broadcast too).
"""
import ctypes
import itertools
import json
import os
import tempfile

import torch

from . import _lib

__all__ = ["Init", "GatheredParameters", "register_external_parameter", "unregister_external_parameter",
           "ZeroParamStatus", "is_zero_param"]


class ZeroParamStatus:
    """DeepSpeed's ds_status values (a parameter's data: whole, empty, or being fetched)."""
    AVAILABLE = "AVAILABLE"
    NOT_AVAILABLE = "NOT_AVAILABLE"
    INFLIGHT = "INFLIGHT"


def _parse(config):
    """(buffer, _lib.ConfigView) of @config (a dict or a JSON file path) as the library resolves it, for the
    world size the launcher's environment gives (zo_launch_info_get)."""
    if isinstance(config, dict):
        text, name = json.dumps(config), "config"
    else:
        with open(config) as f:
            text, name = f.read(), str(config)
    li = _lib.LaunchInfo()
    _lib.check(_lib.lib.zo_launch_info_get(ctypes.byref(li)), "zoffload.zero.Init: the launcher's environment")
    buf = ctypes.create_string_buffer(_lib.lib.zo_config_sizeof())
    app = (ctypes.c_char_p * 1)()
    opts = _lib.ConfigOpts(app_blocks=ctypes.cast(app, ctypes.c_void_p), world_size=li.world_size, auto_values=_lib.auto_values_pointer())
    raw = text.encode()
    _lib.check(_lib.lib.zo_config_parse(raw, len(raw), name.encode(), ctypes.byref(opts), buf),
               "zoffload.zero.Init: config")
    return buf, _lib.ConfigView(buf)


# --- the store a partitioned parameter's values live in until the engine takes them ---

class Store:
    """Whole tensors by key, on host memory ("cpu") or in one unlinked swap file under a directory ("nvme")."""

    def __init__(self, device, nvme_path=None):
        self.fd = None
        if device not in ("cpu", "nvme"):
            raise ValueError("zoffload.zero: remote_device %r; \"cpu\" or \"nvme\"" % (device,))
        self.device = device
        self.meta = {}  # key -> (offset, nbytes, shape, dtype)
        self.host = {}  # cpu: key -> tensor
        self.cache = {}  # nvme: key -> tensor read and possibly changed, written back by evict()
        self.fd, self.end = None, 0
        if device == "nvme":
            if not nvme_path:
                raise ValueError("zoffload.zero: remote_device \"nvme\" needs a directory: "
                                 "zero_optimization.offload_param.nvme_path in the config")
            os.makedirs(nvme_path, exist_ok=True)
            fd, path = tempfile.mkstemp(prefix="zoffload-init-", suffix=".swp", dir=nvme_path)
            os.unlink(path)  # lives while the descriptor is open
            self.fd, self.path = fd, path

    def put(self, key, t):
        t = t.detach().to("cpu").contiguous()
        if self.fd is None:
            self.host[key] = t.clone() if t.data_ptr() and t._base is not None else t
            self.meta[key] = (0, 0, t.shape, t.dtype)
            return
        self.cache.pop(key, None)
        nbytes = t.numel() * t.element_size()
        off = self.meta[key][0] if key in self.meta and self.meta[key][1] >= nbytes else self.end
        if off == self.end:
            self.end += (nbytes + 4095) // 4096 * 4096
        mv = memoryview(t.view(-1).view(torch.uint8).numpy()) if nbytes else memoryview(b"")
        done = 0
        while done < nbytes:
            done += os.pwrite(self.fd, mv[done:], off + done)
        self.meta[key] = (off, nbytes, t.shape, t.dtype)

    def read(self, key):
        """A new tensor (cpu: the stored one itself) with the values of @key."""
        if key in self.host:
            return self.host[key]
        if key in self.cache:
            return self.cache[key]
        off, nbytes, shape, dtype = self.meta[key]
        raw = torch.empty(nbytes, dtype=torch.uint8)
        mv, done = memoryview(raw.numpy()), 0
        while done < nbytes:
            n = os.preadv(self.fd, [mv[done:]], off + done)
            if n <= 0:
                raise OSError("zoffload.zero: short read of %d bytes at offset %d of %s" % (nbytes, off, self.path))
            done += n
        return raw.view(dtype).view(shape)

    def get(self, key):
        """The live tensor of @key: changes to it reach the store (nvme: at evict())."""
        if self.fd is None:
            return self.host[key]
        if key not in self.cache:
            self.cache[key] = self.read(key)
        return self.cache[key]

    def evict(self, keep=()):
        for key in [k for k in self.cache if k not in keep]:
            self.put(key, self.cache.pop(key))

    def drop(self, key):
        self.host.pop(key, None)
        self.cache.pop(key, None)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __del__(self):
        self.close()


class _Ref:
    """Where a partitioned parameter's values are: a store key, or (after initialize) the engine's handle."""

    def __init__(self, store, key, shape):
        self.store, self.key, self.shape = store, key, torch.Size(shape)
        self.engine, self.index, self.frozen = None, None, False
        self.mem_efficient_linear = False


_ids = itertools.count()
_active = []  # the Init contexts entered, innermost last


def is_zero_param(p):
    return hasattr(p, "_zo_ref")


def _mark(p, ref, dtype=None):
    with torch.no_grad():
        p.data = torch.empty(0, dtype=dtype or p.dtype, device=p.device)
    p._zo_ref = ref
    p.ds_id = next(_ids)
    p.ds_shape = ref.shape
    p.ds_numel = ref.shape.numel()
    p.ds_status = ZeroParamStatus.NOT_AVAILABLE
    p.ds_tensor = p.data


# the attributes of a partitioned parameter that need not its values (everything else is run on them)
_PASS = {"grad_fn", "requires_grad", "requires_grad_", "grad", "is_leaf", "device", "dtype", "register_hook",
         "__hash__", "_version", "retains_grad", "retain_grad", "name", "layout", "is_sparse", "is_cuda", "is_meta",
         "__reduce_ex__", "__deepcopy__", "__setstate__", "_backward_hooks", "__class__", "__dict__", "_base",
         "register_post_accumulate_grad_hook", "_is_view", "is_quantized", "is_mkldnn", "is_floating_point"}


class _Partitioned(torch.nn.Parameter):
    """The class of a parameter Init partitioned, while Init is active: any torch function or method on it runs on
    its whole values from the store (in-place changes stay there); `p.data = t` replaces them."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = torch.overrides.resolve_name(func) or getattr(func, "__name__", "")
        attr = name[len("torch.Tensor."):] if name.startswith("torch.Tensor.") else name
        base = attr.split(".")[0]
        with torch._C.DisableTorchFunction():
            if base in _PASS or (attr.endswith(".__set__") and base != "data"):
                return func(*args, **kwargs)
            if attr == "data.__set__":
                p, value = args[0], args[1]
                ref = p._zo_ref
                ref.store.put(ref.key, value)
                ref.shape = torch.Size(value.shape)
                p.ds_shape, p.ds_numel = ref.shape, ref.shape.numel()
                return func(p, torch.empty(0, dtype=value.dtype, device=value.device))
            seen = {}

            def sub(a):
                if isinstance(a, torch.Tensor) and hasattr(a, "_zo_ref") and a._zo_ref.engine is None:
                    seen[id(a)] = a
                    return a
                if isinstance(a, (list, tuple)):
                    return type(a)(sub(x) for x in a)
                return a
            sub(args)
            sub(list(kwargs.values()))
            stores = {id(p._zo_ref.store): p._zo_ref.store for p in seen.values()}
            for st in stores.values():
                st.evict(keep={p._zo_ref.key for p in seen.values() if p._zo_ref.store is st})
            full = {k: p._zo_ref.store.get(p._zo_ref.key) for k, p in seen.items()}

            def put(a):
                if isinstance(a, torch.Tensor) and id(a) in full:
                    return full[id(a)]
                if isinstance(a, (list, tuple)):
                    return type(a)(put(x) for x in a)
                return a
            out = func(*put(args), **{k: put(v) for k, v in kwargs.items()})
            for k, t in full.items():
                if out is t:
                    return seen[k]
            return out


class Init:
    """deepspeed.zero.Init: parameters partitioned as their modules are built (see the module's comment).
    @config_dict_or_path (or @config): the DeepSpeed-style config initialize() will get; remote_device defaults to
    its zero_optimization.offload_param.device ("none" means "cpu" here) and "nvme" stores under its
    offload_param.nvme_path. @remote_device: "cpu" or "nvme". @enabled False: a no-op context. @dtype: the dtype
    the partitioned parameters take (their values are stored as built). A config whose resolved
    zero_optimization.stage is not 3 turns Init off (the parameters stay whole). @module: partition a model built
    already (each module's own parameters). Other DeepSpeed arguments are accepted and ignored (one rank group)."""

    def __init__(self, module=None, data_parallel_group=None, mem_efficient_linear=True, remote_device=None,
                 pin_memory=False, config_dict_or_path=None, config=None, enabled=True, dtype=None, mpu=None,
                 **ignored):
        self.enabled = enabled
        self.dtype = dtype
        self.mem_efficient_linear = mem_efficient_linear
        self.params = []  # partitioned here: their class goes back to Parameter at exit
        self.wrapped = []  # (class, its own __init__)
        if not enabled:
            return
        cfg = config_dict_or_path if config_dict_or_path is not None else config
        nvme = None
        if cfg is not None:
            self._buf, view = _parse(cfg)
            if view.zero_optimization.stage != 3:  # only stage 3 takes partitioned parameters: they stay whole
                self.enabled = False
                return
            off = view.zero_optimization.offload_param
            if remote_device is None:
                remote_device = "nvme" if off.device == "nvme" else "cpu"
            nvme = off.nvme_path or view.zero_optimization.offload_optimizer.nvme_path or None
        remote_device = remote_device or "cpu"
        self.store = Store(remote_device, nvme)
        if module is not None:
            for m in module.modules():
                self._partition(m)

    def _partition(self, module):
        for key, p in list(module._parameters.items()):
            if p is None or hasattr(p, "_zo_ref"):
                continue
            k = len(self.store.meta)
            while k in self.store.meta:
                k += 1
            self.store.put(k, p.detach())
            ref = _Ref(self.store, k, p.shape)
            ref.mem_efficient_linear = self.mem_efficient_linear
            _mark(p, ref, self.dtype)
            if _active and _active[-1] is self:
                p.__class__ = _Partitioned
            self.params.append(p)

    def _wrap(self, cls):
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_zo_wrapped", None) is not None:
            return

        def __init__(mod, *args, **kwargs):
            depth = mod.__dict__.get("_zo_init_depth", 0)
            object.__setattr__(mod, "_zo_init_depth", depth + 1)
            try:
                init(mod, *args, **kwargs)
            finally:
                object.__setattr__(mod, "_zo_init_depth", depth)
            if depth == 0:
                mod.__dict__.pop("_zo_init_depth", None)
                if _active:
                    _active[-1]._partition(mod)
        __init__._zo_wrapped = init
        __init__.__name__, __init__.__doc__ = init.__name__, init.__doc__
        cls.__init__ = __init__
        self.wrapped.append((cls, init))

    def __enter__(self):
        if not self.enabled:
            return self
        _active.append(self)
        todo = [torch.nn.Module]
        while todo:
            c = todo.pop()
            self._wrap(c)
            todo.extend(c.__subclasses__())
        init_self = self

        def __init_subclass__(cls, **kwargs):
            init_self._wrap(cls)
        self._had_subclass_hook = "__init_subclass__" in torch.nn.Module.__dict__
        self._old_subclass_hook = torch.nn.Module.__dict__.get("__init_subclass__")
        torch.nn.Module.__init_subclass__ = classmethod(__init_subclass__)
        for p in self.params:
            p.__class__ = _Partitioned
        return self

    def __exit__(self, *exc):
        if not self.enabled:
            return False
        for cls, init in reversed(self.wrapped):
            cls.__init__ = init
        self.wrapped = []
        if self._had_subclass_hook:
            torch.nn.Module.__init_subclass__ = self._old_subclass_hook
        else:
            del torch.nn.Module.__init_subclass__
        _active.remove(self)
        self.store.evict()
        for p in self.params:
            if type(p) is _Partitioned:
                p.__class__ = torch.nn.Parameter
        return False


# --- after construction ---

def _as_list(params):
    if params is None:
        return []
    if isinstance(params, torch.Tensor):
        return [params]
    return list(params)


class GatheredParameters:
    """deepspeed.zero.GatheredParameters: inside the context each partitioned parameter of @params (one, or an
    iterable; others are left alone) holds its whole values (after initialize(): the engine's working weights,
    fetched outside the training trace; before: Init's store). On exit, when @modifier_rank is not None, the
    values of rank @modifier_rank (broadcast to the others) become the parameter's: after initialize() its fp32
    master weights (zo_engine_load_param: the working copy is rebuilt and the parameter's Adam moments restart
    at zero), before it the store's; then the parameters are released. @modifier_rank None: released, any change
    dropped. @fwd_module: accepted (DeepSpeed registers the parameters as external to it). @enabled False: no-op."""

    def __init__(self, params, modifier_rank=None, fwd_module=None, enabled=True):
        self.params = [p for p in _as_list(params) if hasattr(p, "_zo_ref")] if enabled else []
        self.modifier_rank = modifier_rank
        if fwd_module is not None:
            for p in self.params:
                register_external_parameter(fwd_module, p)

    def __enter__(self):
        with torch.no_grad():
            for p in self.params:
                ref = p._zo_ref
                if ref.engine is not None:
                    ref.engine._gather(p)
                else:
                    v = ref.store.read(ref.key)
                    p.data = v.clone() if ref.store.fd is None else v
                p.ds_status = ZeroParamStatus.AVAILABLE
        return self

    def __exit__(self, *exc):
        with torch.no_grad():
            for p in self.params:
                ref = p._zo_ref
                if ref.engine is not None:
                    ref.engine._scatter(p, self.modifier_rank if exc[0] is None else None)
                else:
                    if self.modifier_rank is not None and exc[0] is None:
                        ref.store.put(ref.key, p.data)
                        ref.shape = torch.Size(p.shape)
                    p.data = torch.empty(0, dtype=p.dtype, device=p.device)
                p.ds_status = ZeroParamStatus.NOT_AVAILABLE
        return False


def register_external_parameter(module, parameter):
    """deepspeed.zero.register_external_parameter: @parameter (of another module) is used in @module's forward, so
    stage 3 fetches it in @module's forward pre-hook and releases it after, as its own. Register before
    zoffload.initialize() (in the module's __init__, as DeepSpeed's examples do)."""
    if not isinstance(parameter, torch.nn.Parameter):
        raise TypeError("register_external_parameter: %s is not a torch.nn.Parameter" % type(parameter).__name__)
    ext = module.__dict__.setdefault("_zo_external_params", {})
    ext[id(parameter)] = parameter


def unregister_external_parameter(module, parameter):
    module.__dict__.get("_zo_external_params", {}).pop(id(parameter), None)


def external_parameters(module):
    return list(module.__dict__.get("_zo_external_params", {}).values())
