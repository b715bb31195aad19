"""zoffload.initialize(): a torch model's parameters handed to libzoffload's engine, which keeps their fp32
master weights and Adam state on the tier the DeepSpeed-style config names (offload_optimizer "cpu" or
"nvme"), runs the optimizer step there, and gives the updated working weights back to the model.

    engine = zoffload.initialize(model=model, config="ds_config.json")   # or a dict
    for batch in data:
        loss = engine(batch)          # the model's forward
        engine.backward(loss)         # loss x loss scale (fp16) / gradient accumulation steps, then backward;
                                      # each gradient goes to the engine from its hook and .grad is freed
        engine.step()                 # every micro-step; at an accumulation boundary Adam, weights back

ZeRO stages 1, 2 and 3 (stage3.py: module hooks fetch and release parameters), on one rank or on the ranks
mpirun or torchrun started (comm.py), checkpoints (save_checkpoint / load_checkpoint over zo_engine_save / zo_engine_load). CPU
models run on the engine's host device; CUDA models (or a CPU model with device="cuda") on its CUDA backend,
ordered against torch.cuda.current_stream() (_device.py says how parameters meet the engine's GPU memory).
"""
import atexit
import contextlib
import ctypes
import json
import os
import re
import stat
import sys
import warnings
import weakref

import torch

from . import _ckpt, _device, _lib, _log, _precision
from . import offload_states as _offload_states
from . import comm as _comm
from . import monitor as _monitor
from .ds_api import DeepSpeedEngineAPI

_DT = {_lib.DTYPE_F32: torch.float32, _lib.DTYPE_BF16: torch.bfloat16, _lib.DTYPE_F16: torch.float16}


# The library's JSON parser (jansson) reads nesting up to 2048 deep; Python's json, a recursion limit deep (1000 by
# default). Config text is read and written with the limit raised past what the library takes.
_JSON_DEPTH = 3 * 2048


@contextlib.contextmanager
def _deep_json():
    """Python's json within this block reads and writes nesting as deep as the library's parser accepts."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, _JSON_DEPTH))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _read_config(config):
    """(JSON text, the name its errors give, the parsed dict: a copy) of @config, a DeepSpeed-style dict or a
    JSON file path. A file is judged by the library's parser (zo_config_parse(), as zo-train reads it): a file
    that is not JSON, not UTF-8, empty, or not an object is a ZoffloadError naming it with the parser's line and
    column; one that is not a regular file (a FIFO, a directory, a device) is refused at once (opened
    non-blocking, never read or waited on). Nesting as deep as the library reads (2048) is read (_deep_json)."""
    if isinstance(config, dict):
        with _deep_json():
            text = json.dumps(config)
            return text, "config", json.loads(text)
    name = os.fsdecode(config)
    raw = _read_regular_file(name)
    try:
        with _deep_json():
            conf = json.loads(raw.decode("utf-8"))
        if isinstance(conf, dict):
            return raw.decode("utf-8"), name, conf
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        pass
    # not JSON, not UTF-8, deeper than the library reads or not an object: the library's parser says why, naming the
    # file, line and column
    _check_json(raw, name)
    raise _config_error(name, "not a JSON object that Python's json reads")


def _shown(text, keep=60):
    """@text for a message: its first @keep characters with the unprintable ones (control characters, the bytes
    of a file name that are not UTF-8) and the backslash escaped, then "... (N characters)" when it was longer."""
    out = "".join(c if c.isprintable() and c != "\\" else c.encode("unicode_escape", "backslashreplace").decode()
                  for c in text[:keep])
    return out if len(text) <= keep else "%s... (%d characters)" % (out, len(text))


def _config_error(name, why):
    return _lib.ZoffloadError("ZO_ERR_CONFIG", "zoffload.initialize: config: %s: %s (ZO_ERR_CONFIG)"
                              % (_shown(name, 4096), why))


def _read_regular_file(name):
    """The bytes of the config file @name; ZoffloadError naming it when it cannot be read or is not a regular file
    (opened non-blocking, so a FIFO without a writer is refused, not waited on)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise _config_error(name, "cannot read config: %s" % (e.strerror or e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _config_error(name, "not a regular file (%s); a config is a JSON file" % _ckpt.file_kind(st.st_mode))
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    except OSError as e:
        raise _config_error(name, "cannot read config: %s" % (e.strerror or e)) from None
    finally:
        os.close(fd)


def _check_json(raw, name):
    """ZoffloadError with the library's message (naming @name, with line and column) when zo_config_parse() finds
    @raw not to be a JSON object (found before any key is read: nothing is logged then); its other judgements
    (ranges, batch sizes for this rank count) wait for _resolve(), which parses the config for the engine's ranks."""
    cfg = ctypes.create_string_buffer(_lib.lib.zo_config_sizeof())
    app = (ctypes.c_char_p * 1)()
    opts = _lib.ConfigOpts(app_blocks=ctypes.cast(app, ctypes.c_void_p), world_size=1,
                           auto_values=_lib.auto_values_pointer())
    src = _shown(name, 4096)  # the library prints the name as given: control characters escaped here
    st = _lib.lib.zo_config_parse(raw, len(raw), src.encode(), ctypes.byref(opts), cfg)
    if st == 0:
        return
    msg = _lib.lib.zo_last_error().decode(errors="replace")
    rest = msg[len(src):] if msg.startswith(src) else ""
    if re.match(r":\d+:\d+: malformed JSON", rest) or rest.startswith(": expected a JSON object at the top level"):
        _lib.check(st, "zoffload.initialize: config")


_SAME_AS_CONFIG = ("lr", "betas", "eps")  # group keys the engine takes from the config only


def _param_groups(model, model_parameters, head):
    """The (name, parameter) pairs to train, in the model's order, and {id(parameter): weight_decay} for those
    whose group sets one. @model_parameters as torch optimizers and deepspeed.initialize take it: None (every
    parameter that requires grad), an iterable of parameters, or of dicts (parameter groups) with "params" and
    optionally "weight_decay"; a group's "lr", "betas" or "eps" must equal the resolved config's optimizer params
    (@head, _lib.ConfigView: the engine runs one schedule), and any other key is refused by name."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if model_parameters is None:
        return named, {}
    items = list(model_parameters)
    groups = items if items and isinstance(items[0], dict) else [{"params": items}]
    o = head.optimizer.params
    opt = {"lr": o.lr, "betas": [o.get("betas[0]"), o.get("betas[1]")], "eps": o.eps}
    names = {id(p): n for n, p in model.named_parameters()}
    chosen, decay = set(), {}
    for gi, g in enumerate(groups):
        if not isinstance(g, dict) or "params" not in g:
            raise TypeError("zoffload.initialize: model_parameters[%d] is not a parameter group (a dict with "
                            "'params')" % gi)
        for key, value in g.items():
            if key in ("params", "weight_decay", "name"):
                continue
            if key in _SAME_AS_CONFIG:
                want = opt.get(key)
                if want is None or (list(value) if isinstance(value, (tuple, list)) else value) != want:
                    raise ValueError("zoffload.initialize: model_parameters[%d]['%s'] = %r, but the engine runs "
                                     "optimizer.params.%s = %r for every parameter; leave it out of the group"
                                     % (gi, key, value, key, want))
                continue
            raise ValueError("zoffload.initialize: model_parameters[%d] has '%s'; a group may set only "
                             "'weight_decay' (and 'lr', 'betas', 'eps' equal to the config's)" % (gi, key))
        ps = g["params"]
        ps = [ps] if isinstance(ps, torch.Tensor) else list(ps)
        for p in ps:
            if id(p) not in names:
                raise ValueError("zoffload.initialize: model_parameters[%d] holds a tensor of shape %s that is not "
                                 "a parameter of the model" % (gi, tuple(p.shape)))
            if id(p) in chosen:
                raise ValueError("zoffload.initialize: parameter '%s' is in more than one group" % names[id(p)])
            chosen.add(id(p))
            if "weight_decay" in g:
                decay[id(p)] = float(g["weight_decay"])
    return [(n, p) for n, p in named if id(p) in chosen], decay


class _Resolved:
    """The config as initialize() read it (config: the dict), where the model computes (place), the engine's ranks
    (comm, rank, world) and the config as the library resolved it for them (buf, view: _lib.ConfigView), parsed
    once: initialize() picks the engine class by its zero_optimization.stage."""


def _resolve(model, config, read=None, device=None):
    """The _Resolved of @config (@read: _read_config's tuple of it, when read already) for @model on @device."""
    text, name, conf = read or _read_config(config)
    place = _device.placement(model, device)
    zcfg = conf.get("zoffload", {})
    extra = {}
    if place.cuda and isinstance(zcfg, dict) and "device_arena_bytes" not in zcfg:
        # the GPU's rest stays with torch's caching allocator (the engine's default takes 90% of it)
        extra["device_arena_bytes"] = "fit"
    if isinstance(zcfg, dict) and "early_adam" not in zcfg:
        # Adam waits for step(), as DeepSpeed's: any number of backward() calls before it add up
        # (zo_engine_grad_reopen); "early_adam": true overlaps Adam with backward for one backward a step
        extra["early_adam"] = False
    if extra:
        conf["zoffload"] = dict(zcfg, **extra)
        with _deep_json():
            text = json.dumps(conf)
    cfg = ctypes.create_string_buffer(_lib.lib.zo_config_sizeof())
    # The ranks a launcher started: one, or data-parallel ranks, each training on its own part of the global
    # batch (the caller's data loader decides which), over MPI under mpirun, over torch.distributed under
    # torchrun / the deepspeed launcher or when the script initialised it (comm.engine_comm() says how).
    comm = _comm.engine_comm()
    rank, world = _lib.lib.zo_comm_rank(comm), _lib.lib.zo_comm_size(comm)
    app = (ctypes.c_char_p * 1)()  # no application blocks
    opts = _lib.ConfigOpts(app_blocks=ctypes.cast(app, ctypes.c_void_p), world_size=world,
                           auto_values=_lib.auto_values_pointer())
    raw = text.encode()
    _lib.check(_lib.lib.zo_config_parse(raw, len(raw), _shown(name, 4096).encode(), ctypes.byref(opts), cfg),
               "zoffload.initialize: config")
    r = _Resolved()
    r.config, r.place, r.comm, r.rank, r.world, r.buf = conf, place, comm, rank, world, cfg
    r.view = _lib.ConfigView(cfg)
    return r


class _Handles:
    """The C objects one engine owns, freed once by _free_handles(): the engine (its memory, its swap files and
    their directory nvme_path/zoffload-rank<R>), the gradient hand-over, the placement's stream, the gradient ring,
    the device, the communicator. Holds nothing that refers back to the engine, so its finalizer does not keep the
    engine alive."""
    __slots__ = ("eng", "handover", "dev", "ring", "comm", "place", "__weakref__")

    def __init__(self):
        self.eng = self.handover = self.dev = self.ring = self.comm = self.place = None


_live_handles = set()  # every _Handles not freed yet: _at_exit frees them


def _free_handles(h):
    if h.handover is not None and h.handover.value:
        _lib.lib.zo_grad_handover_destroy(h.handover)
    h.handover = None
    if h.eng:
        _lib.lib.zo_engine_destroy(h.eng)  # the swap files and the swap directory go with it
    h.eng = None
    if h.place is not None:
        h.place.close()
    h.place = None
    if h.dev:
        if h.ring is not None and h.ring.value:
            _lib.lib.zo_device_free(h.dev, h.ring)
        _lib.lib.zo_device_destroy(h.dev)
    h.dev = h.ring = None
    if h.comm:
        _lib.lib.zo_comm_destroy(h.comm)
    h.comm = None
    _live_handles.discard(h)


class _Memory:
    """The engine's memory, as a token: the open engine holds it, and so does every tensor that views the engine's
    memory (place.view's buffer object, kept by torch as long as the storage). When the last reference goes, its
    finalizer frees the engine's handles (_free_handles): no tensor Python can reach points into freed memory."""
    __slots__ = ("__weakref__",)


_open_engines = weakref.WeakSet()  # engines not closed yet, for _at_exit


@atexit.register
def _at_exit():
    """At interpreter exit (a normal one, or an uncaught exception): every engine still open is closed without
    copying its parameters (their storage becomes empty: the process is ending), and every engine's handles are
    freed, those that tensors still view too, so no swap file or swap directory is left behind for the next run to
    remove."""
    for e in list(_open_engines):
        e._close(copy_params=False)
    for h in list(_live_handles):
        _free_handles(h)


def _after_fork_in_child():
    """os.fork() (a DataLoader worker, multiprocessing's fork start method): the engines and handles the child
    inherits are its parent's, whose threads, streams, swap files and checkpoint lock the child does not have.
    Destroying them would hang or crash the child and take the swap files and lock from the parent; so the child
    forgets them (no close, no finalizer, nothing at exit) and every method of an inherited engine raises
    RuntimeError naming both processes. Engines the child creates itself are its own."""
    parent, me = os.getppid(), os.getpid()
    for e in list(_open_engines):
        e._closed = True  # _close() and __del__ do nothing
        held = getattr(e, "_save_root", None)  # save_checkpoint()'s root lock: the parent's, not released here
        if held is not None and held[1] is not None:
            held[1].detach()
        e.__class__ = _closed_class(type(e), forked=(parent, me))
    _open_engines.clear()
    for h in list(_live_handles):
        h.eng = h.handover = h.dev = h.ring = h.comm = h.place = None  # _free_handles() then frees nothing
    _live_handles.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _closed_method(name, prop=False, forked=None):
    what = "engine(...)" if name == "__call__" else "engine.%s%s" % (name, " read" if prop else "()")
    if forked:
        why = ("zoffload: %s: this engine was created by process %d; a forked child (pid %d) cannot use it (its "
               "threads, swap files and checkpoint lock stay with the parent): create a new engine in the child"
               % ((what,) + tuple(forked)))
    else:
        why = ("zoffload: %s after engine.close(): its memory, swap files and device are freed; make a new engine "
               "with zoffload.initialize()" % what)

    def closed(self, *args, **kwargs):
        raise RuntimeError(why)
    closed.__name__ = name
    return property(closed) if prop else closed


_closed_classes = {}


def _closed_class(cls, forked=None):
    """@cls with every method and property it defines (Engine's, DeepSpeedEngineAPI's, a subclass's: public and
    private, __call__ included) replaced by one raising RuntimeError that names it; close() and __del__ stay. What a
    closed engine becomes: a call into the library with freed handles would crash the interpreter. @forked: (parent
    pid, child pid): what an engine inherited by a forked child becomes (_after_fork_in_child), its message saying so."""
    key = (cls, forked)
    if key not in _closed_classes:
        ns = {}
        for klass in cls.__mro__:
            if klass is object:
                continue
            for name, attr in vars(klass).items():
                if name in ns or name in ("close", "_close", "__del__", "__init__") or (
                        name.startswith("__") and name != "__call__"):
                    continue
                if isinstance(attr, property):
                    ns[name] = _closed_method(name, prop=True, forked=forked)
                elif callable(attr) or isinstance(attr, (staticmethod, classmethod)):
                    ns[name] = _closed_method(name, forked=forked)
        _closed_classes[key] = type(("Inherited" if forked else "Closed") + cls.__name__, (cls,), ns)
    return _closed_classes[key]


def _state(name, doc):
    """A property over the private field _<name>: read and set as a plain attribute while the engine is open, so
    that _closed_class() makes reading it after close() raise as every property does."""
    field = "_" + name

    def get(self):
        return getattr(self, field)

    def set(self, value):
        setattr(self, field, value)
    get.__name__ = set.__name__ = name
    return property(get, set, doc=doc)


class Engine(DeepSpeedEngineAPI):
    """What zoffload.initialize() returns first. Not thread-safe. DeepSpeed's engine methods beyond the training
    step (train/eval, counters, save_checkpoint/load_checkpoint by string tag, save_16bit_model) are in
    ds_api.DeepSpeedEngineAPI."""

    _closed = False
    micro_steps = _state("micro_steps", "step() calls so far (DeepSpeed's engine.micro_steps)")
    global_steps = _state("global_steps", "optimizer steps so far, skipped fp16 steps included (DeepSpeed's)")
    applied_steps = _state("applied_steps", "optimizer steps applied (fp16 overflow skips not counted), as the "
                                            "engine counts them")
    last_info = _state("last_info", "the last optimizer step's zo_step_info as a dict (None before the first)")
    handed_in_backward = _state("handed_in_backward", "zo_engine_grad_ready() calls from the gradient hooks")
    accumulated_in_backward = _state("accumulated_in_backward",
                                     "zo_engine_grad_accumulate() calls from the gradient hooks")

    def __init__(self, model, config, _read=None, device=None, model_parameters=None):
        self.module = model
        r = _read if isinstance(_read, _Resolved) else _resolve(model, config, _read, device)  # initialize()'s
        self.config, self.place, self.comm, self.rank, self.world_size = r.config, r.place, r.comm, r.rank, r.world
        _log.set_rank(self.rank)  # the rank the log lines name, from the communicator
        _monitor.configure(r.config)  # reporting keys checked, log_level set, before the engine's threads start
        # What the engine owns is freed when it is closed and no tensor views its memory (_Memory), or at exit.
        self._h = _Handles()
        self._h.comm, self._h.place = self.comm, self.place
        _live_handles.add(self._h)
        self._mem = _Memory()
        self._finalizer = weakref.finalize(self._mem, _free_handles, self._h)
        self._finalizer.atexit = False  # _at_exit frees it, after the open engines' parameters let go
        _open_engines.add(self)
        self._cfg = cfg = r.buf  # kept: the lr schedule
        # Every setting this class uses comes from the resolved config, as the library parsed it (defaults filled
        # in, gradient_accumulation_steps derived from train_batch_size / micro batch / ranks), not from the JSON.
        self.resolved = head = r.view
        self.gas = int(head.gradient_accumulation_steps)
        self.params, decay = _param_groups(model, model_parameters, head)
        self.shapes = [p.shape for _, p in self.params]
        _precision.check_param_dtypes(self.params, self.place.cuda)
        self.dev = self._h.dev = ctypes.c_void_p()
        _lib.check(_lib.lib.zo_device_create(self.place.kind, self.place.ordinal, 0, ctypes.byref(self.dev)),
                   "zo_device_create(%s)" % self.place.device)
        self.eng = self._h.eng = ctypes.c_void_p()
        _lib.check(_lib.lib.zo_engine_create(cfg, self.dev, self.comm, ctypes.byref(self.eng)), "zo_engine_create")
        self.place.bind(_lib.lib, self.dev, self.eng)
        self.gdtype = _lib.lib.zo_engine_grad_dtype(self.eng)
        self.wdtype = _DT[_lib.lib.zo_engine_working_dtype(self.eng)]
        # a 16-bit model computes in the working dtype (cast to it as DeepSpeed does); refused without fp16/bf16
        self.buffer_dtype = _precision.buffer_dtype(r.config)  # None: buffers keep their dtype
        compute = _precision.model_compute_dtype(model, self.params, self.wdtype, self.place.cuda, self.buffer_dtype)
        if not self.place.cuda:
            self.place.compute = compute
        self.handles = []
        # The dtype each gradient is handed over in: the working precision (zo_engine_grad_dtype()), or fp32 when
        # micro-batches are accumulated and the model computes in fp32 (the engine sums fp32 then, so the sum
        # of the micro-batches rounds as one larger batch would).
        self.f32_ok = self.gas > 1
        gsz = torch.tensor([], dtype=_DT[self.gdtype]).element_size()
        if self.f32_ok:
            gsz = max(gsz, 4)
        for n, p in self.params:
            h = ctypes.c_void_p()
            _lib.check(_lib.lib.zo_engine_register_param(self.eng, n.encode(), p.numel(), ctypes.byref(h)),
                       "register '%s'" % n)
            if p.dim() >= 1:  # the shape, for checkpoints' manifests and export_safetensors()
                dims = (ctypes.c_int64 * p.dim())(*p.shape)
                _lib.check(_lib.lib.zo_engine_set_param_shape(h, p.dim(), dims), "shape of '%s'" % n)
            if id(p) in decay:
                _lib.check(_lib.lib.zo_engine_set_param_weight_decay(self.eng, h, decay[id(p)]),
                           "weight_decay of '%s'" % n)
            self.handles.append(h)
        # CPU models: gradients reach the engine through a ring in the host device's memory, twice the largest
        # tensor in the hand-over dtype (each slot 64-byte aligned), reused from its start after a
        # zo_engine_grad_fence(); torch's .grad is freed as soon as it is copied in.
        self.ring, self.ring_bytes = ctypes.c_void_p(), 0
        self._h.ring = self.ring
        if not self.place.cuda and self.params:
            self.ring_bytes = 2 * (max(p.numel() for _, p in self.params) * gsz + 64)
            _lib.check(_lib.lib.zo_device_malloc(self.dev, self.ring_bytes, ctypes.byref(self.ring)),
                       "gradient ring (%d bytes)" % self.ring_bytes)
        _lib.check(_lib.lib.zo_engine_finalize(self.eng), "zo_engine_finalize")
        # Every rank starts from rank 0's values, as DeepSpeed's engine (and zero.Init) broadcast them: ranks that
        # built their models from different seeds would otherwise each keep the shard of a different model.
        with torch.no_grad():
            for (n, p), h in zip(self.params, self.handles):
                src = self._initial_value(p)  # one tensor at a time
                if self.world_size > 1 and src.numel():
                    _lib.check(_lib.lib.zo_comm_broadcast(self.comm, src.data_ptr(), src.numel() * 4, 0),
                               "broadcast of '%s' from rank 0" % n)
                _lib.check(_lib.lib.zo_engine_load_param(self.eng, h, src.data_ptr()), "load '%s'" % n)
        if self.world_size > 1:
            self._broadcast_rest(model)
        self._aliased = [None] * len(self.params)  # stages 1-2: the engine address a parameter views, or None
        # The gradients' hand-over space (zoffload/handover.h: one fence when the next gradient does not fit): on
        # the CPU the ring (64-byte aligned slots); on CUDA the bytes of the gradients handed over, kept alive in
        # _gkeep until a fence on torch's stream, twice the largest gradient in fp32.
        self._gkeep = []
        cap, align, fstream = ((2 * max([s.numel() for s in self.shapes] + [0]) * 4, 1, self.place.zstream)
                               if self.place.cuda else (self.ring_bytes, 64, None))
        self.handover = self._h.handover = ctypes.c_void_p()
        _lib.check(_lib.lib.zo_grad_handover_create(self.eng, cap, align, fstream, ctypes.byref(self.handover)),
                   "zo_grad_handover_create")
        _lib.check(_lib.lib.zo_engine_set_trace(self.eng, 0), "set_trace")  # not part of any step's fetch order
        self._write_back()
        _lib.check(_lib.lib.zo_engine_set_trace(self.eng, 1), "set_trace")
        if self.place.cuda:
            self._move_rest(model)
        self.micro_steps = 0
        self.global_steps = 0
        self.last_info = None
        self.applied_steps = 0  # optimizer steps applied (fp16 overflow skips not counted), as the engine counts
        # Gradients go to the engine as backward produces them, in every micro-step (zo_engine_grad_accumulate
        # before the boundary, zo_engine_grad_ready in it, so Adam on the CPU overlaps the rest of the boundary's
        # backward), and each .grad is freed once handed over: backward never holds a full set of gradients.
        # torch's post-accumulate-grad hook (torch >= 2.1), else a hook on each parameter's AccumulateGrad node
        # (what DeepSpeed does on older torch).
        self._in_backward = False  # inside engine.backward(): the hooks hand gradients over
        self._backward_seen = False  # a backward() since the last step() (step() without one and no .grad raises)
        self._boundary = False
        self._boundary_backward = False  # a backward() of the boundary micro-step handed gradients (grad_ready)
        self._handed = [False] * len(self.params)  # zo_engine_grad_ready() made since the step or a reopen
        self._held = [False] * len(self.params)  # zo_engine_grad_ready() made in this optimizer step
        self.hooks = []
        self._keep_nodes = []  # torch < 2.1: the AccumulateGrad nodes the hooks hang on
        self.handed_in_backward = 0  # zo_engine_grad_ready() calls from the hooks
        self.accumulated_in_backward = 0  # zo_engine_grad_accumulate() calls from the hooks
        # The hooks hold the engine weakly: torch 2 keeps a parameter's hooks where Python's collector does not look
        # while autograd also holds the parameter, so a strong reference made the engine -> parameter -> hook ->
        # engine cycle uncollectable (an engine dropped without close() kept its memory and swap files).
        ref = weakref.ref(self)

        def on_grad(i):
            def hook(*_):
                e = ref()
                if e is not None:
                    e._on_grad(i)
            return hook

        for i, (_, p) in enumerate(self.params):
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self.hooks.append(p.register_post_accumulate_grad_hook(on_grad(i)))
            else:
                node = p.expand_as(p).grad_fn.next_functions[0][0]  # the AccumulateGrad node of p
                self.hooks.append(node.register_hook(on_grad(i)))
                self._keep_nodes.append(node)
        # steps_per_print lines, wall_clock_breakdown, the monitors (monitor.py); where the state lives, said once
        self._reporter = _monitor.Reporter(self)
        _log.log_dist(_monitor.placement_line(self))

    def _initial_value(self, p):
        """The fp32 host tensor zo_engine_load_param() starts parameter @p from (stage3.py: zero.Init's store)."""
        return p.detach().to(device="cpu", dtype=torch.float32).contiguous()

    def _broadcast_rest(self, model):
        """Several ranks: what the engine does not hold (frozen parameters, buffers such as running statistics)
        from rank 0 too, as DeepSpeed's engine broadcasts the module at start, so every rank computes with one
        model. Empty tensors (stage 3's partitioned frozen parameters) are left alone."""
        trained = {id(p) for _, p in self.params}
        with torch.no_grad():
            for m in model.modules():
                rest = [(k, b) for k, b in m._buffers.items() if b is not None]
                rest += [(k, p) for k, p in m._parameters.items() if p is not None and id(p) not in trained]
                for key, t in rest:
                    if not t.numel():
                        continue
                    host = t.detach().to("cpu", copy=True).contiguous()
                    _lib.check(_lib.lib.zo_comm_broadcast(self.comm, host.data_ptr(), host.numel() * host.element_size(),
                                                          0), "broadcast of %s '%s' from rank 0" % (type(m).__name__, key))
                    t.copy_(host)

    def _move_rest(self, model):
        """CUDA: what the engine does not hold (buffers, frozen parameters) to the GPU: frozen floating-point
        parameters in the working dtype; buffers in their own dtype, floating ones in data_types.buffer_dtype when
        the config gives it (DeepSpeed 0.19's engine: parameters cast, buffers preserved unless buffer_dtype)."""
        trained = {id(p) for _, p in self.params}
        with torch.no_grad():
            for m in model.modules():
                for key, b in m._buffers.items():
                    if b is not None:
                        bdt = self.buffer_dtype if b.is_floating_point() else None
                        m._buffers[key] = b.to(self.place.device, bdt)
                for p in m.parameters(recurse=False):
                    if id(p) not in trained:
                        p.data = p.data.to(self.place.device, self.wdtype if p.is_floating_point() else None)

    # --- the training loop ---

    def __call__(self, *args, **kwargs):
        t0 = self._reporter.forward_begin()
        out = self.module(*args, **kwargs)
        self._reporter.forward_end(t0)
        return out

    forward = __call__

    @property
    def loss_scale(self):
        return _lib.lib.zo_engine_loss_scale(self.eng)

    def backward(self, loss, scale_wrt_gas=True):
        """loss x loss scale (1 unless fp16) / gradient_accumulation_steps (not divided with scale_wrt_gas=False,
        DeepSpeed's argument: the caller's loss is already normalised over the accumulated batch, as transformers'
        Trainer passes it), then loss.backward(); each parameter's
        gradient goes to the engine as soon as backward has accumulated it (zo_engine_grad_accumulate, or
        zo_engine_grad_ready in the last micro-step of an accumulation) and its .grad is set to None. Returns
        after zo_engine_grad_fence(): the engine has read every gradient out of memory torch may reuse.
        Several backward() calls in one micro-step add up, as torch's .grad does (a GAN's discriminator on real
        and on generated samples, then one step()): before the boundary through zo_engine_grad_accumulate; in
        the boundary micro-step (every one with gradient_accumulation_steps 1) a further backward() first waits
        for the gradients handed over so far to land (zo_engine_grad_reopen) and hands its own over to be added
        to them. That needs Adam to wait for step() (zoffload.early_adam false, the default here); with
        "early_adam": true Adam may start during the first backward() and a second one is refused
        (ZoffloadError naming the key) before it computes anything."""
        _offload_states.refuse_while_offloaded(self, "backward")
        self._backward_seen = True
        boundary = self.is_gradient_accumulation_boundary()
        if boundary and self._boundary_backward:
            self._reopen("engine.backward() called again before engine.step() in micro-step %d, the one that "
                         "ends the accumulation" % self.micro_steps)
        self._boundary = boundary
        if self._boundary:
            self._sync_lr()  # updates may start as the gradients land
        t0 = self._reporter.backward_begin()
        self._in_backward = True
        try:
            (loss * (self.loss_scale / self.gas if scale_wrt_gas else self.loss_scale)).backward()
        finally:
            if self._boundary and any(self._handed):
                self._boundary_backward = True
            self._in_backward = self._boundary = False
            self._fence()
        self._reporter.backward_end(t0, loss, scale_wrt_gas, self.gas)

    def _reopen(self, why):
        """zo_engine_grad_reopen(): the gradients handed over in this boundary micro-step have landed and take
        further contributions; the hooks hand every parameter over again."""
        with self.place.ordered():
            _lib.check(_lib.lib.zo_engine_grad_reopen(self.eng), "zoffload: %s" % why)
        self._handed = [False] * len(self.params)

    def _fence(self):
        """zo_grad_handover_fence() (zo_engine_grad_fence()): the gradients handed over so far are read; the ring
        and torch's memory of the kept gradients are free again (on the GPU: for work queued on torch's stream from
        here on)."""
        with self.place.ordered():
            _lib.check(_lib.lib.zo_grad_handover_fence(self.handover), "zo_engine_grad_fence")
        self._gkeep = []

    def _hand_over(self, i, last=True):
        """Parameter @i's .grad (zeros when it has none) to the engine: zo_engine_grad_ready() when @last, else
        zo_engine_grad_accumulate(); in fp32 when accumulation is on and the gradient is fp32, else in the working
        dtype. The .grad is set to None: the engine has its copy, or (CUDA) the tensor is kept until a fence."""
        n, p = self.params[i]
        h = self.handles[i]
        g = p.grad if p.grad is not None else torch.zeros(self.shapes[i], dtype=_DT[self.gdtype],
                                                          device=self.place.device)
        code = _lib.DTYPE_F32 if self.f32_ok and g.dtype == torch.float32 else self.gdtype
        g = g.detach().to(_DT[code]).contiguous()
        nbytes = g.numel() * g.element_size()
        at, fenced = ctypes.c_size_t(), ctypes.c_int()
        with self.place.ordered():
            # Its place in the hand-over space: when it does not fit, a fence first (the engine has read everything
            # handed over; backward's end fences the rest), and the kept gradients go.
            _lib.check(_lib.lib.zo_grad_handover_reserve(self.handover, nbytes, ctypes.byref(at), ctypes.byref(fenced)),
                       "gradient of '%s'" % n)
            if fenced.value:
                self._gkeep = []
            if self.place.cuda:
                # The engine copies this rank's shard out of torch's memory on its copy stream, after the work
                # queued on the compute stream so far; torch must not reuse the memory before a fence: kept.
                self._gkeep.append(g)
                buf = g.data_ptr()
            else:
                buf = self.ring.value + at.value
                _lib.check(_lib.lib.zo_memcpy(self.dev, buf, g.data_ptr(), nbytes, _lib.COPY_H2D),
                           "gradient of '%s'" % n)
            # zo_engine_grad_ready() when last, else zo_engine_grad_accumulate()
            _lib.check(_lib.lib.zo_grad_handover_put(self.handover, h, buf, code, int(last)),
                       "%s '%s'" % ("grad_ready" if last else "grad_accumulate", n))
        p.grad = None
        if last:
            self._handed[i] = self._held[i] = True

    def _on_grad(self, i):
        if not self._in_backward or self._handed[i]:
            return  # outside engine.backward() .grad accumulates as torch does; step() hands it over
        with torch.no_grad():
            self._hand_over(i, last=self._boundary)
        if self._boundary:
            self.handed_in_backward += 1
        else:
            self.accumulated_in_backward += 1

    def get_lr(self):
        """[the learning rate the next optimizer step applies] (the config's schedule as DeepSpeed runs it: skipped
        fp16 steps do not advance it; or the client scheduler's: each group of initialize()'s optimizer), a list as
        DeepSpeed's engine.get_lr() returns."""
        if self.optimizer is not None:
            return [float(g["lr"]) for g in self.optimizer.param_groups]
        return [_lib.lib.zo_config_lr_at(self._cfg, self.applied_steps + 1)]

    def get_global_grad_norm(self):
        """The last step's global L2 norm of the unscaled gradient, before clipping (None before the first)."""
        return self.last_info["grad_norm"] if self.last_info else None

    def was_step_applied(self):
        """False when the last step was skipped (fp16 overflow: nothing updated, the loss scale lowered)."""
        return bool(self.last_info) and not self.last_info["skipped"]

    def is_gradient_accumulation_boundary(self):
        """True in the last micro-step of each optimizer step (gradient_accumulation_steps of the resolved
        config), from its forward until its step() returns, as DeepSpeed's engine: (micro_steps + 1) % gas == 0,
        micro_steps counting the step() calls so far."""
        return (self.micro_steps + 1) % self.gas == 0

    def step(self):
        """Call after every backward(). At an accumulation boundary: the gradients backward did not hand over to
        the engine (zeros for a parameter without one; a .grad made outside backward()), the optimizer step (clipping, loss scaling, the schedule: all the engine's),
        the new working weights into the model's parameters, gradients cleared. Returns the step's
        zo_step_info as a dict, or None between boundaries. RuntimeError when neither backward() nor a .grad
        made outside it came since the last step() (DeepSpeed steps on regardless: with nothing to apply, a bug)."""
        _offload_states.refuse_while_offloaded(self, "step")
        if not self._backward_seen and not any(self._held) and all(p.grad is None for _, p in self.params):
            raise RuntimeError("zoffload: engine.step() without engine.backward(loss) since the last step(): no "
                               "gradient to apply; call engine.backward(loss) before each step()")
        t0 = self._reporter.step_begin()
        if not self.is_gradient_accumulation_boundary():
            self._backward_seen = False
            self.micro_steps += 1
            self._reporter.step_end(t0, None)
            return None
        late = [i for i, ((_, p), held) in enumerate(zip(self.params, self._held)) if held and p.grad is not None]
        if late:  # .grad from a backward outside engine.backward() after engine.backward() handed theirs over
            self._reopen("engine.step(): %s hold .grad made outside engine.backward() after it handed their "
                         "gradients over" % ", ".join("'%s'" % self.params[i][0] for i in late[:8]))
        self._backward_seen = False
        self._sync_lr()
        with torch.no_grad(), self.place.ordered():
            for i in reversed(range(len(self.params))):
                # those backward did not reach (zeros), a .grad made outside it (added to what the engine holds)
                if not self._held[i] or i in late:
                    self._hand_over(i)
            self._handed = [False] * len(self.params)
            self._held = [False] * len(self.params)
            info = _lib.StepInfo()
            _lib.check(_lib.lib.zo_engine_step(self.eng, ctypes.byref(info)), "zo_engine_step")
            self._gkeep = []  # every gradient copy has landed: the hand-over space is free without a fence
            _lib.lib.zo_grad_handover_reset(self.handover)
            self._boundary_backward = False
            self._after_step()
        for _, p in self.params:
            p.grad = None
        self.micro_steps += 1
        self.global_steps += 1
        self.last_info = {k: getattr(info, k) for k, _ in _lib.StepInfo._fields_}
        self.applied_steps = info.step
        self._after_boundary()
        self._reporter.step_end(t0, self.last_info)  # steps_per_print lines, monitors
        return self.last_info

    def _after_step(self):
        """Stages 1-2: the new working weights into the model's parameters (stage 3 fetches them in its hooks)."""
        self._write_back()

    def _write_back(self):
        """The engine's working weights (after load or a step) into the model's parameters. Where the parameter's
        dtype is the working dtype (always on the GPU; fp32 configs on the CPU) it views the engine's resident
        copy: one copy of the weights, the step writes the new ones in place (the pointer is compared each time;
        on the GPU the fetch makes the compute stream wait for them; on the CPU for fp32 configs and 16-bit models,
        _precision.py). An fp32 CPU model with bf16/fp16 working weights gets them widened into its fp32
        parameters."""
        with torch.no_grad(), self.place.ordered():
            for i, ((n, p), h) in enumerate(zip(self.params, self.handles)):
                ptr, dt = ctypes.c_void_p(), ctypes.c_int()
                _lib.check(_lib.lib.zo_engine_fetch(self.eng, h, ctypes.byref(ptr), ctypes.byref(dt)),
                           "fetch '%s'" % n)
                t = _DT[dt.value]
                if self.place.param_dtype(t) == t:
                    if self._aliased[i] != ptr.value:
                        self._alias(i, ptr.value, t)
                else:
                    nbytes = p.numel() * torch.tensor([], dtype=t).element_size()
                    host = torch.empty(p.numel(), dtype=t)
                    # the host device's memory is host memory: a copy out of it through the engine's device
                    _lib.check(_lib.lib.zo_memcpy(self.dev, host.data_ptr(), ptr, nbytes, _lib.COPY_D2H), "weights")
                    p.copy_(host.view(p.shape))
                _lib.check(_lib.lib.zo_engine_release(self.eng, h), "release '%s'" % n)

    def _alias(self, i, ptr, dtype):
        """Parameter i views the engine's working weights at address @ptr as @dtype (stages 1-2), recorded in
        _aliased[i]; no copy."""
        p = self.params[i][1]
        p.data = self.place.view(ptr, p.numel(), dtype, self._mem).view(self.shapes[i])
        self._aliased[i] = ptr

    def _unalias(self, data_of):
        """Every parameter that views the engine's working weights takes data_of(parameter) as its data instead and
        is no longer recorded in _aliased. Under torch.no_grad()."""
        for i, at in enumerate(getattr(self, "_aliased", [])):
            if at is not None:
                p = self.params[i][1]
                p.data = data_of(p)
                self._aliased[i] = None

    def all_reduce_mean(self, value):
        """The mean of a float over the ranks (e.g. the loss for logging); the value itself on one rank."""
        v = ctypes.c_double(float(value))
        _lib.check(_lib.lib.zo_comm_all_reduce_f64(self.comm, ctypes.byref(v), 1), "all_reduce_mean")
        return v.value / self.world_size

    def _index(self, name):
        for i, (n, _) in enumerate(self.params):
            if n == name:
                return i
        raise KeyError(name)

    def master_shard(self, name):
        """(offset, values): this rank's part of parameter @name's fp32 master weights, as the engine holds them
        (a new 1-D tensor of the elements [offset, offset + len) of the flattened parameter)."""
        i = self._index(name)  # by the registered shape: at stage 3 the parameter itself is empty between uses
        out = torch.empty(self.shapes[i].numel(), dtype=torch.float32)
        off, cnt = ctypes.c_size_t(), ctypes.c_size_t()
        _lib.check(_lib.lib.zo_engine_get_master(self.eng, self.handles[i], out.data_ptr(), ctypes.byref(off),
                                                 ctypes.byref(cnt)), "master weights of '%s'" % name)
        return off.value, out if cnt.value == out.numel() else out[:cnt.value].clone()

    def master_weights(self, name):
        """The fp32 master weights of parameter @name in its shape (a new tensor). On several ranks each holds
        a shard: use master_shard(), or export_safetensors() for the whole model."""
        off, values = self.master_shard(name)
        shape = self.shapes[self._index(name)]
        if off != 0 or values.numel() != shape.numel():
            raise ValueError("master_weights('%s'): this rank holds elements [%d, %d) of %d; use master_shard() or "
                             "export_safetensors()" % (name, off, off + values.numel(), shape.numel()))
        return values.view(shape)

    def export_safetensors(self, path, dtype=torch.float32):
        """zo_engine_export_safetensors(): the consolidated fp32 master weights of every trained parameter, in
        @dtype (torch.float32 or torch.bfloat16, rounded to nearest even), under their model names and shapes,
        to @path in the safetensors format that safetensors.torch.load_file and Hugging Face's from_pretrained
        read (what DeepSpeed's save_16bit_model gives). Written beside @path and renamed over it (a link, directory,
        device or FIFO at @path is refused: ZoffloadError naming it). Several ranks: a collective call, every rank
        passes the same @path and rank 0 writes it. Returns @path as a string."""
        codes = {torch.float32: _lib.DTYPE_F32, torch.bfloat16: _lib.DTYPE_BF16}
        if dtype not in codes:
            raise TypeError("export_safetensors: dtype %s; torch.float32 or torch.bfloat16" % dtype)
        _lib.check(_lib.lib.zo_engine_export_safetensors(self.eng, str(path).encode(), codes[dtype]),
                   "export_safetensors")
        return str(path)

    def memory(self):
        """zo_engine_mem_info(): bytes this rank holds per tier and by kind, and traffic so far, as a dict (the
        device arena's statistics under "arena"). The engine's GPU memory is its own reservation, outside torch's
        caching allocator: add memory()["arena"]["capacity"] to torch.cuda.max_memory_reserved() for the GPU total."""
        m = _lib.EngineMem()
        _lib.check(_lib.lib.zo_engine_mem_info(self.eng, ctypes.byref(m)), "zo_engine_mem_info")
        out = {k: getattr(m, k) for k, _ in _lib.EngineMem._fields_ if k != "arena"}
        out["arena"] = {k: getattr(m.arena, k) for k, _ in _lib.ArenaStats._fields_}
        return out

    # --- DeepSpeed 0.16+'s offload_states / reload_states (offload_states.py) ---

    def offload_states(self, include=None, device="cpu", pin_memory=True, non_blocking=False):
        """DeepSpeed's engine.offload_states(): @include, the states (OffloadStateTypeEnum members or their names;
        None: all), @device "cpu" (OffloadDeviceEnum: "none" warns and does nothing, "nvme" is refused as DeepSpeed
        refuses it). The named states in the engine's device memory move to host memory (page-locked with
        @pin_memory on a GPU) and the engine's device memory is given back; those the config keeps in host memory
        or on NVMe stay (said at INFO). Call it between step() and the next forward; until reload_states(), a
        forward (with lp_params offloaded), backward() and step() are refused. Synchronous (@non_blocking is
        accepted). ValueError naming a bad @include value or @device. See offload_states.py."""
        chosen = _offload_states.offload(self, include, device, pin_memory)
        self._offloaded_states = list(dict.fromkeys(getattr(self, "_offloaded_states", []) + chosen))

    def reload_states(self, non_blocking=False):
        """DeepSpeed's engine.reload_states(): what offload_states() moved comes back bit for bit and the model's
        parameters view the engine's weights again; training continues as without the round trip."""
        _offload_states.reload(self)
        self._offloaded_states = []

    def close(self):
        """Free the engine (its swap files and nvme_path/zoffload-rank<R> removed), its device and communicator.
        Parameters that viewed the engine's memory get copies of their own first, so the model stays usable. A
        tensor taken from them before close() (a view, .data, .detach()) still views the engine's memory: that
        memory, and with it the engine and its swap files, is then freed when the last such tensor is collected
        (a warning says so), and at interpreter exit at the latest. Afterwards every method of the engine raises
        RuntimeError naming it. Idempotent; also done when the object is collected and at interpreter exit."""
        self._close(copy_params=True)

    def _close(self, copy_params):
        if self._closed:
            return
        self._closed = True
        _open_engines.discard(self)
        self._release_save_root()  # save_checkpoint()'s root (ds_api.py)
        if copy_params and getattr(self, "_states_hook", None) is not None:
            _offload_states.reload_for_close(self)  # lp_params offloaded: back, so the parameters keep their values
        with torch.no_grad():
            self._unalias(lambda p: p.data.clone() if copy_params else torch.empty(0, dtype=p.dtype, device=p.device))
        self._remove_hooks()
        if getattr(self, "_reporter", None) is not None:
            self._reporter.close()  # the monitors' files and writers
        self.eng = self.dev = self.comm = self.ring = None
        self._mem = None  # the handles are freed now, unless a tensor still views the engine's memory
        fin = getattr(self, "_finalizer", None)
        if fin is not None and fin.alive and copy_params:
            warnings.warn("zoffload: engine.close(): tensors taken from the parameters before close() still view the "
                          "engine's memory; it, the engine and its swap files are freed when the last of them is "
                          "collected (or at exit)")
        self.__class__ = _closed_class(type(self))

    def _remove_hooks(self):
        """The hooks that call into the engine, removed at close."""
        for h in getattr(self, "hooks", []):
            h.remove()
        self.hooks, self._keep_nodes = [], []

    def __del__(self):
        self._close(copy_params=True)
