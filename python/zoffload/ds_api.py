"""DeepSpeed's API over zoffload's engine: deepspeed.initialize()'s arguments and 4-tuple, add_config_arguments, a
client optimizer's hyper-parameters taken as the engine's, a client lr scheduler honoured, the engine's DeepSpeed
methods (train/eval, counters, checkpoints by string tag with client_state stored without pickle, save_16bit_model).
Not the engine itself (engine.py, stage3.py) nor the offline converter (zero_to_fp32.py).

    import zoffload as deepspeed
    engine, optimizer, loader, scheduler = deepspeed.initialize(args=args, model=model,
                                                                model_parameters=model.parameters(),
                                                                training_data=dataset)
"""
import copy
import ctypes
import errno
import json
import math
import os
import re
import stat
import warnings
import weakref

import torch

from . import _ckpt, _lib
from ._ckpt import CheckpointError

# beside the C engine's manifest.json and rankNNNNN.bin, written by rank 0 (_ckpt.py: the format)
CLIENT_STATE_FILE = _ckpt.CLIENT_STATE_FILE
LEGACY_CLIENT_STATE_FILE = _ckpt.LEGACY_CLIENT_STATE_FILE  # older checkpoints' pickle (torch.save)
_CONVERT_HINT = ("A checkpoint you made yourself with an older zoffload can be converted once (this runs the pickle): "
                 "zoffload.ds_api.convert_legacy_client_state(checkpoint_dir).")


def add_config_arguments(parser):
    """deepspeed.add_config_arguments(): --deepspeed (a flag) and --deepspeed_config (the JSON path initialize(args=)
    reads), plus DeepSpeed's deprecated --deepscale / --deepscale_config, hidden. Returns @parser."""
    import argparse
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="Enable DeepSpeed (helper flag for user code, no impact on the engine)")
    group.add_argument("--deepspeed_config", default=None, type=str, help="DeepSpeed json configuration file.")
    group.add_argument("--deepscale", default=False, action="store_true", help=argparse.SUPPRESS)
    group.add_argument("--deepscale_config", default=None, type=str, help=argparse.SUPPRESS)
    return parser


def config_source(args, config, config_params):
    """The config initialize() uses, as deepspeed.initialize picks it: @config, else @config_params (its alias),
    else args.deepspeed_config (or the deprecated args.deepscale_config). ValueError when none is given, or when
    @args names a file as well as @config (DeepSpeed refuses that too)."""
    if config is None:
        config = config_params
    from_args = None
    if args is not None:
        from_args = getattr(args, "deepspeed_config", None) or getattr(args, "deepscale_config", None)
    if config is not None and from_args is not None:
        raise ValueError("zoffload.initialize: a config in args.deepspeed_config (%r) and config= (or config_params=) "
                         "too; pass one (DeepSpeed refuses both)" % (from_args,))
    config = config if config is not None else from_args
    if config is None:
        raise ValueError("zoffload.initialize: no config: pass config= (a dict or a JSON file path), config_params=, "
                         "or args with --deepspeed_config (zoffload.add_config_arguments)")
    return config


def dist_init(dist_init_required):
    """initialize(dist_init_required=...) as DeepSpeed takes it, before the engine picks its communicator
    (comm.engine_comm()): True: torch.distributed initialised now unless it is (zoffload.comm.init_distributed:
    torchrun's variables, MPI discovery under mpirun, else one rank on 127.0.0.1). None: left to the engine, which
    initialises it when torchrun / the deepspeed launcher started several ranks (under mpirun the engine runs over
    MPI and leaves torch.distributed alone). False: never initialised here; torchrun's several ranks without an
    initialised process group are then refused (RuntimeError naming the fix), where DeepSpeed fails at its first
    collective."""
    from . import comm
    if dist_init_required is None:
        return
    if dist_init_required:
        comm.init_distributed(verbose=False)
        return
    rank, world, _, _, source = comm.launch_info()
    if source == "torchrun" and world > 1 and not comm.is_initialized():
        raise RuntimeError("zoffload.initialize: dist_init_required=False, but torch.distributed is not initialised "
                           "and the launcher started %d ranks (RANK=%d): call torch.distributed.init_process_group() "
                           "or zoffload.comm.init_distributed() before initialize(), or leave dist_init_required "
                           "None" % (world, rank))


def _qualname(obj):
    t = type(obj)
    return "%s.%s" % (t.__module__, t.__qualname__)


def client_optimizer_block(opt):
    """(the config "optimizer" block, the parameter groups to train) of a client optimizer instance:
    torch.optim.Adam (L2 weight decay), torch.optim.AdamW, zoffload.optim.CPUAdam or a DeepSpeedCPUAdam/FusedAdam
    (adamw_mode). The engine runs one lr, betas and eps: every group must agree on them (ValueError naming the
    group); a group's weight_decay becomes its parameters' own. TypeError naming the class of an optimizer the
    engine cannot run (SGD, Adagrad, ...)."""
    from .optim import CPUAdam
    name = type(opt).__name__
    groups = getattr(opt, "param_groups", None)
    if isinstance(opt, torch.optim.AdamW):  # before Adam: newer torch derives AdamW from Adam
        adamw = True
    elif isinstance(opt, CPUAdam) or name in ("DeepSpeedCPUAdam", "FusedAdam"):
        adamw = bool(groups[0].get("adamw_mode", getattr(opt, "adam_w_mode", True))) if groups else True
    elif isinstance(opt, torch.optim.Adam):
        adamw = False
    else:
        raise TypeError("zoffload.initialize: optimizer %s cannot run in the engine, which runs Adam/AdamW on the "
                        "offload tier; pass torch.optim.Adam, torch.optim.AdamW, zoffload.optim.CPUAdam "
                        "(DeepSpeedCPUAdam's arguments) or a callable returning one, or leave optimizer= out and set "
                        "the config's \"optimizer\" section" % _qualname(opt))
    if not groups:
        raise ValueError("zoffload.initialize: optimizer %s has no parameter groups" % _qualname(opt))
    g0 = groups[0]
    for gi, g in enumerate(groups):
        for key, bad in (("amsgrad", True), ("maximize", True)):
            if g.get(key, False) == bad:
                raise ValueError("zoffload.initialize: optimizer %s param_groups[%d] sets %s=True, which the engine "
                                 "does not run" % (_qualname(opt), gi, key))
        for key in ("lr", "betas", "eps", "bias_correction"):
            a, b = g.get(key), g0.get(key)
            if (tuple(a) if isinstance(a, (list, tuple)) else a) != (tuple(b) if isinstance(b, (list, tuple)) else b):
                raise ValueError("zoffload.initialize: optimizer %s param_groups[%d]['%s'] = %r but param_groups[0] "
                                 "has %r; the engine runs one %s for every parameter"
                                 % (_qualname(opt), gi, key, a, b, key))
    params = {"lr": float(g0["lr"]), "betas": [float(b) for b in g0["betas"]], "eps": float(g0["eps"]),
              "weight_decay": float(g0.get("weight_decay", 0.0)),
              "bias_correction": bool(g0.get("bias_correction", True)), "adam_w_mode": adamw}
    model_parameters = [{"params": list(g["params"]), "weight_decay": float(g.get("weight_decay", 0.0))}
                        for g in groups]
    return {"type": "Adam", "params": params}, model_parameters


def with_client_optimizer(read, optimizer, model, model_parameters):
    """@read (initialize's (text, name, dict) of the config) with the client @optimizer's hyper-parameters as its
    "optimizer" section, and the parameter groups to train. A callable is called with @model_parameters (or the
    model's parameters) first, as DeepSpeed does. A config "optimizer" section is replaced, with a warning naming
    it: DeepSpeed uses the client optimizer then too. Returns (read, model_parameters, the optimizer instance)."""
    if callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer):
        optimizer = optimizer(list(model_parameters) if model_parameters is not None else list(model.parameters()))
    block, groups = client_optimizer_block(optimizer)
    text, name, cfg = read
    if "optimizer" in cfg:
        warnings.warn("zoffload.initialize: the config's \"optimizer\" section (%s) is not used: the client optimizer "
                      "%s is, with lr %g, as DeepSpeed does" % (name, _qualname(optimizer), block["params"]["lr"]))
    cfg = dict(cfg, optimizer=block)
    return (json.dumps(cfg), name, cfg), groups, optimizer


class ZeroOptimizer(torch.optim.Optimizer):
    """The optimizer initialize() returns (DeepSpeed returns its ZeRO optimizer wrapper): param_groups whose "lr"
    schedulers read and set (the client optimizer's own list when one was passed, so a scheduler built on either
    drives the engine), step() and zero_grad() delegating to the engine, state_dict() of the groups' settings (the
    fp32 master weights and Adam state live in the engine: save_checkpoint() saves them)."""

    def __init__(self, engine, param_groups=None):
        head = engine.resolved.optimizer.params
        defaults = {"lr": head.lr, "betas": (head.get("betas[0]"), head.get("betas[1]")), "eps": head.eps,
                    "weight_decay": head.weight_decay, "bias_correction": head.bias_correction}
        params = [p for _, p in engine.params]
        super().__init__([{"params": params}] if params else [{"params": [torch.zeros(0, requires_grad=True)]}],
                         defaults)
        if param_groups is not None:
            self.param_groups = param_groups  # shared with the client optimizer
        self.engine = engine

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.engine.step()
        return loss

    def zero_grad(self, set_to_none=True):
        self.engine.zero_grad()

    def state_dict(self):
        return {"state": {}, "param_groups": [{k: v for k, v in g.items() if k != "params"}
                                              for g in self.param_groups]}

    def load_state_dict(self, state_dict):
        for g, s in zip(self.param_groups, state_dict.get("param_groups", [])):
            g.update({k: v for k, v in s.items() if k != "params"})


class ConfigLRScheduler:
    """The config's "scheduler" section as the engine runs it (zo_config_lr_at: WarmupLR, WarmupDecayLR,
    WarmupCosineLR), the scheduler initialize() returns when the client passed none: get_lr()/get_last_lr() are
    the lr of the next step; step() is the engine's to call (it advances with the applied steps)."""

    def __init__(self, engine):
        self.engine = engine
        self.last_batch_iteration = -1

    def step(self, last_batch_iteration=None):
        self.last_batch_iteration = (self.last_batch_iteration + 1 if last_batch_iteration is None
                                     else last_batch_iteration)

    def get_lr(self):
        return [_lib.lib.zo_config_lr_at(self.engine._cfg, self.engine.applied_steps + 1)]

    get_last_lr = get_lr

    def state_dict(self):
        return {"last_batch_iteration": self.last_batch_iteration}

    def load_state_dict(self, sd):
        self.last_batch_iteration = sd["last_batch_iteration"]


class DeepSpeedEngineAPI:
    """DeepSpeedEngine's methods, mixed into Engine (engine.py): the parts of DeepSpeed's engine API that are not
    the training step itself."""

    optimizer = None  # ZeroOptimizer (initialize() attaches it)
    lr_scheduler = None  # the client's, a ConfigLRScheduler, or None
    training_dataloader = None
    _lr_client = False  # the lr comes from optimizer.param_groups (a client scheduler or the caller set it)
    _lr_shown = None  # the lr last written into param_groups from the config's schedule

    # --- what initialize() attaches ---

    def _attach(self, optimizer, lr_scheduler):
        self.optimizer = optimizer
        if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
            lr_scheduler = lr_scheduler(optimizer)  # DeepSpeed: a callable takes the optimizer
        self._lr_client = lr_scheduler is not None
        if lr_scheduler is None and self.resolved.scheduler.type != "none":
            lr_scheduler = ConfigLRScheduler(self)
        self.lr_scheduler = lr_scheduler
        if not self._lr_client:
            self._show_lr()
        self._sync_lr()
        self._reporter.report_progress(0)  # DeepSpeed's "step=0, ..." line once the optimizer is set up

    def _show_lr(self):
        """The config's lr of the next step into the optimizer's param_groups (what DeepSpeed's scheduler does)."""
        if self.optimizer is not None and not self._lr_client:
            lr = _lib.lib.zo_config_lr_at(self._cfg, self.applied_steps + 1)
            for g in self.optimizer.param_groups:
                g["lr"] = lr
            self._lr_shown = lr

    def _sync_lr(self):
        """The lr in the optimizer's param_groups to the engine (zo_engine_set_lr) when a client scheduler drives it
        or the caller changed it; before the boundary micro-step's backward (updates start as gradients land)."""
        if self.optimizer is None:
            return
        lrs = sorted({float(g["lr"]) for g in self.optimizer.param_groups})
        if len(lrs) > 1:
            raise ValueError("zoffload: optimizer.param_groups have the learning rates %s; the engine runs one lr for "
                             "every parameter" % lrs)
        if lrs and (self._lr_client or lrs[0] != self._lr_shown):
            self._lr_client = True
            _lib.check(_lib.lib.zo_engine_set_lr(self.eng, lrs[0]), "zoffload: lr from optimizer.param_groups")

    def _after_boundary(self):
        """After an optimizer step: the scheduler stepped when the step was applied (DeepSpeed skips it on an fp16
        overflow), and the next lr shown or handed to the engine."""
        if self.lr_scheduler is not None and self.was_step_applied():
            with warnings.catch_warnings():  # the client's torch optimizer's step() is the engine's, not called
                warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
                self.lr_scheduler.step()
        self._show_lr()
        self._sync_lr()

    # --- DeepSpeedEngine's accessors ---

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        self.module.eval()
        return self

    def zero_grad(self):
        """Gradients the model holds set to None (those engine.backward() handed over are None already)."""
        for _, p in self.params:
            p.grad = None

    def train_batch_size(self):
        return int(self.resolved.train_batch_size)

    def train_micro_batch_size_per_gpu(self):
        return int(self.resolved.train_micro_batch_size_per_gpu)

    def gradient_accumulation_steps(self):
        return int(self.resolved.gradient_accumulation_steps)

    @property
    def global_rank(self):
        return self.rank

    @property
    def local_rank(self):
        lr, var = ctypes.c_int(), ctypes.c_char_p()
        _lib.check(_lib.lib.zo_device_local_rank(ctypes.byref(lr), ctypes.byref(var)), "the local rank")
        return lr.value if var.value else 0

    @property
    def device(self):
        return torch.device(self.place.device)

    def destroy(self):
        """DeepSpeed's name for releasing the engine's resources at the end of a run: close() (the engine, its swap
        files and communicator freed; the model keeps its weights)."""
        self.close()

    def bfloat16_enabled(self):
        """The config's bf16 block is enabled (the engine's working dtype is bf16)."""
        return bool(self.resolved.bf16.enabled)

    def fp16_enabled(self):
        """The config's fp16 block is enabled (the engine's working dtype is fp16, with loss scaling)."""
        return bool(self.resolved.fp16.enabled)

    # --- the wrapped module's, as DeepSpeed's engine (an nn.Module around it) answers them ---

    def parameters(self, recurse=True):
        return self.module.parameters(recurse)

    def named_parameters(self, prefix="", recurse=True):
        return self.module.named_parameters(prefix, recurse)

    def buffers(self, recurse=True):
        return self.module.buffers(recurse)

    def named_buffers(self, prefix="", recurse=True):
        return self.module.named_buffers(prefix, recurse)

    def modules(self):
        return self.module.modules()

    def named_modules(self, *args, **kwargs):
        return self.module.named_modules(*args, **kwargs)

    def children(self):
        return self.module.children()

    def state_dict(self, *args, **kwargs):
        """The module's state_dict: its keys without DeepSpeed's "module." prefix (DeepSpeed's engine is an
        nn.Module whose child is the model). At stage 3 the parameters are empty between uses: use
        save_16bit_model() or consolidated_state_dict() for the weights."""
        return self.module.state_dict(*args, **kwargs)

    # --- checkpoints, DeepSpeed's way ---

    def save_checkpoint(self, save_dir, tag=None, client_state={}, save_latest=True):  # noqa: B006 (DeepSpeed's)
        """DeepSpeed's save_checkpoint: the checkpoint SAVE_DIR/TAG (default "global_step<global_steps>"), crash-safe
        (zo_engine_save with the name TAG: master weights, Adam state on its tier, step, loss scaler, this engine's
        counters), @client_state with the lr scheduler's and the optimizer's settings in TAG/client_state.safetensors
        (rank 0; no pickle: tensors and numpy arrays in the safetensors data, the rest JSON in its header, so
        @client_state holds None, bool, int, float, str, bytes, lists, tuples, dicts, tensors and numpy arrays:
        TypeError naming the entry of anything else, before anything is written), then SAVE_DIR/latest naming TAG
        when @save_latest. SAVE_DIR is this engine's from the first save there until close() (_hold_save_root): another
        process saving there meanwhile is refused. Several ranks: a collective call with the same arguments.
        Returns True."""
        tag = "global_step%d" % self.global_steps if tag is None else str(tag)
        extra = {"client_state": client_state,
                 "lr_scheduler": (self.lr_scheduler.state_dict() if self.lr_scheduler is not None
                                  and hasattr(self.lr_scheduler, "state_dict") else None),
                 "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
                 "lr_client": self._lr_client}
        blob = _ckpt.client_state_bytes(extra)  # every rank: one refuses what they all refuse, before the collective
        self._hold_save_root(save_dir)  # before anything under it changes
        app = json.dumps({"micro_steps": self.micro_steps, "global_steps": self.global_steps,
                          "applied_steps": self.applied_steps})
        # The client state goes into the C save as one of its files: written and synced in the save's temporary
        # directory with the rest, listed with its CRC32C in the manifest, switched into place with the checkpoint
        # in one step (a reused tag's old checkpoint stays whole until then), `latest` moved after it. A kill at
        # any moment leaves the old checkpoint or the new one, each with its own client state.
        files = (_lib.SaveFile * 1)()
        files[0].name, files[0].data, files[0].nbytes = CLIENT_STATE_FILE.encode(), ctypes.cast(
            ctypes.c_char_p(blob), ctypes.c_void_p), len(blob)
        opts = _lib.SaveOpts(tag=-1, app_state=app.encode(), keep_last=0, name=tag.encode(),
                             no_latest=int(not save_latest), files=files, n_files=1 if self.rank == 0 else 0)
        _fault("py-before-save")
        _lib.check(_lib.lib.zo_engine_save(self.eng, str(save_dir).encode(), ctypes.byref(opts), None, 0),
                   "save_checkpoint '%s'" % tag)
        _fault("py-saved")
        return True

    _save_root = None  # (path, weakref.finalize releasing its zo_checkpoint_lock, None off rank 0) or None

    def _hold_save_root(self, save_dir):
        """save_checkpoint()'s root held for this engine's run with zo_checkpoint_lock (the lock zo-train and
        zo_engine_save take; zoffload/checkpoint.h), from the first save there until close(), the engine's
        collection or the process's end: another process's run is then refused there naming this one, and this one
        is refused (ZoffloadError naming the owner's pid, host, start time and command) while another run holds
        it. A save to another root moves the hold there. Rank 0 locks; every rank raises with it."""
        root = os.path.abspath(str(save_dir))
        if self._save_root is not None and self._save_root[0] == root:
            return
        handle, err = ctypes.c_void_p(), None
        if self.rank == 0:
            try:
                _lib.check(_lib.lib.zo_checkpoint_lock(root.encode(), ctypes.byref(handle)), "save_checkpoint")
            except _lib.ZoffloadError as e:
                err = e
        if self.world_size > 1 and self.all_reduce_mean(1.0 if err else 0.0) > 0:
            raise err or _lib.ZoffloadError("ZO_ERR_INVALID_USAGE", "save_checkpoint: rank 0 could not lock the "
                                            "checkpoint root %s (its error says why)" % root)
        if err is not None:
            raise err
        self._release_save_root()
        self._save_root = (root, weakref.finalize(self, _lib.lib.zo_checkpoint_unlock, handle.value)
                           if handle.value else None)

    def _release_save_root(self):
        """Let go of the root _hold_save_root() holds (close() calls it)."""
        held, self._save_root = self._save_root, None
        if held is not None and held[1] is not None:
            held[1]()

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True, load_optimizer_states=True,
                        load_lr_scheduler_states=True, load_module_only=False):
        """DeepSpeed's load_checkpoint: LOAD_DIR/TAG, TAG read from LOAD_DIR/latest when None. Returns (its path,
        client_state), or (None, None) with a warning when there is no `latest` or no such checkpoint (as DeepSpeed).
        By default the engine restores master weights, Adam state, step and loss scaler together (zo_engine_load,
        every checksum verified first), this engine's counters, the optimizer's param_groups settings and the lr
        scheduler. As DeepSpeed with ZeRO:
          load_module_only=True: the weights only (fp32 masters from the checkpoint, the working copy rebuilt); Adam
            state, its step, the loss scaler, global_steps/micro_steps, the optimizer's settings and the lr scheduler
            stay as this engine has them (a fresh engine: zero moments, step 0): fine-tuning from a checkpoint.
          load_optimizer_states=False: the weights as above, Adam state, step and loss scaler kept as this engine has
            them, but global_steps/micro_steps and (with load_lr_scheduler_states) a client lr scheduler restored.
            The config's "scheduler" follows the engine's Adam step count, so it restarts with it.
          load_lr_scheduler_states=False: the lr scheduler keeps its state.
          load_module_strict=False: tensors matched by name; a trained parameter the checkpoint lacks ("missing")
            keeps its value and Adam state, a checkpoint tensor the model lacks ("unexpected") is ignored; both are
            named in one warning and kept in self.last_load_incompatible_keys as (missing, unexpected) lists, the
            fields of torch's load_state_dict result. A matched name of another size is still an error.
        The files are untrusted input, read and checked before anything changes: `latest` must hold one valid name
        (offload/checkpoint/save.c's rule) of a directory under LOAD_DIR that is not a symbolic link; the client state
        is client_state.safetensors (no pickle); an older checkpoint's client_state.pt (a pickle) is loaded only
        with torch.load(weights_only=True) on a torch where that is safe (2.6 on), else refused. Any error
        (CheckpointError, a ValueError, or ZoffloadError from the library) names the file and leaves this engine,
        its optimizer and scheduler as they were."""
        load_dir = str(load_dir)
        if tag is None:
            tag = _ckpt.read_latest(load_dir)
            if tag is None:
                warnings.warn("zoffload load_checkpoint: unable to find latest file at %s, if trying to load latest "
                              "checkpoint please pass a tag" % os.path.join(load_dir, "latest"))
                return None, None
        path = os.path.join(load_dir, str(tag))
        if not os.path.isdir(path):
            warnings.warn("zoffload load_checkpoint: the checkpoint %s does not exist" % path)
            return None, None
        weights_only = bool(load_module_only or not load_optimizer_states)
        load_opt = self.optimizer is not None and not weights_only
        load_sched = (load_lr_scheduler_states and not load_module_only and self.lr_scheduler is not None
                      and hasattr(self.lr_scheduler, "load_state_dict"))
        # 1. everything read and checked, on every rank, before anything changes
        failure = None
        try:
            cfile, extra = self._read_client_state(path)
            self._check_client_settings(cfile, extra, load_opt, load_sched)
            counters = self._read_counters(path)
        except Exception as e:  # CheckpointError naming the file, an OSError, no safetensors package, ...
            failure = e
        if self.world_size > 1 and self.all_reduce_mean(1.0 if failure is not None else 0.0) > 0 and failure is None:
            failure = CheckpointError("load_checkpoint %s: another rank could not read its checkpoint files (its "
                                      "error names them); nothing loaded" % path)
        if failure is not None:
            raise failure
        # 2. the optimizer's settings and the scheduler (their own checks), undone if anything after fails
        saved = self._python_state(load_sched)
        try:
            if load_opt and extra.get("optimizer"):
                self.optimizer.load_state_dict(extra["optimizer"])
                self._lr_client = self._lr_client or bool(extra.get("lr_client"))
                lrs = {g.get("lr") for g in self.optimizer.param_groups}
                if len(lrs) > 1 or not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in lrs):
                    raise ValueError("the optimizer's param_groups lr %s: one finite lr >= 0 for every group"
                                     % sorted(lrs, key=repr))
            if load_sched and extra.get("lr_scheduler") is not None:
                self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
        except Exception as e:
            self._restore_python_state(saved)
            raise CheckpointError("%s: the %s state does not load: %s: %s" % (
                cfile, "optimizer or lr scheduler", type(e).__name__, e)) from e
        # 3. the engine: zo_engine_load_ex checks every field and checksum first and changes nothing on an error
        raw = ctypes.c_void_p()
        missing, unexpected = [], []

        def unmatched(name, is_unexpected, _user):
            (unexpected if is_unexpected else missing).append(name.decode(errors="backslashreplace"))

        cb = _lib.LoadOnUnmatched(unmatched)  # alive for the call
        opts = _lib.LoadOpts(weights_only=int(weights_only), not_strict=int(not load_module_strict),
                             on_unmatched=cb, user=None)
        try:
            _lib.check(_lib.lib.zo_engine_load_ex(self.eng, path.encode(), ctypes.byref(opts), ctypes.byref(raw)),
                       "load_checkpoint")
        except BaseException:
            self._restore_python_state(saved)
            raise
        if raw.value:
            _lib.libc.free(raw)  # the app_state the manifest holds: read and checked in step 1
        # 4. what cannot fail any more
        if not load_module_only:
            self.micro_steps, self.global_steps = counters
        self.applied_steps = int(_lib.lib.zo_engine_steps_applied(self.eng))  # the checkpoint's unless weights_only
        self.last_load_incompatible_keys = (missing, unexpected)
        if (missing or unexpected) and self.rank == 0:
            warnings.warn("zoffload load_checkpoint(load_module_strict=False) %s: missing keys (kept as they were) %s; "
                          "unexpected keys (ignored) %s" % (path, missing, unexpected))
        self._write_back()
        self._show_lr()
        self._sync_lr()
        return path, extra.get("client_state", {})

    def _read_client_state(self, path):
        """(the file, its dict) of checkpoint @path's client state: client_state.safetensors, else an older
        checkpoint's client_state.pt through _ckpt.load_pickle (refused where unsafe), else (None, {}). Checked:
        a dict whose "optimizer" is None or a dict with a list of dict param_groups, "lr_scheduler" None or a dict.
        CheckpointError naming the file."""
        cfile = os.path.join(path, CLIENT_STATE_FILE)
        legacy = os.path.join(path, LEGACY_CLIENT_STATE_FILE)
        listed = self._listed_files(path)
        if listed is not None:  # the save wrote it with the checkpoint: read through the library, size and CRC32C
            if CLIENT_STATE_FILE not in listed:
                if os.path.lexists(cfile):
                    raise CheckpointError("%s: not listed in the checkpoint's manifest.json: not written by its save"
                                          % cfile)
                return None, {}
            data, n = ctypes.c_void_p(), ctypes.c_size_t()
            _lib.check(_lib.lib.zo_checkpoint_read_file(path.encode(), CLIENT_STATE_FILE.encode(), ctypes.byref(data),
                                                        ctypes.byref(n)), "load_checkpoint")
            try:
                blob = ctypes.string_at(data, n.value)
            finally:
                _lib.libc.free(data)
            extra = _ckpt.client_state_from_bytes(blob, cfile)
        elif os.path.lexists(cfile):  # a checkpoint from before the manifest listed it: no checksum to verify
            extra = _ckpt.read_client_state(cfile)
        elif os.path.lexists(legacy):
            cfile, extra = legacy, _ckpt.load_pickle(legacy, _CONVERT_HINT)
        else:
            return None, {}
        if not isinstance(extra, dict):
            raise CheckpointError("%s: a %s, not the dict save_checkpoint() writes" % (cfile, type(extra).__name__))
        opt, sched = extra.get("optimizer"), extra.get("lr_scheduler")
        if opt is not None and not (isinstance(opt, dict) and isinstance(opt.get("param_groups", []), list)
                                    and all(isinstance(g, dict) for g in opt.get("param_groups", []))):
            raise CheckpointError("%s: \"optimizer\" is not an optimizer state dict (param_groups a list of dicts)"
                                  % cfile)
        if sched is not None and not isinstance(sched, dict):
            raise CheckpointError("%s: \"lr_scheduler\" is a %s, not a state dict" % (cfile, type(sched).__name__))
        return cfile, extra

    @staticmethod
    def _listed_files(path):
        """The names rank 0's manifest.json of checkpoint @path lists under "files" (the files its save wrote beside
        the engine's: zo_save_opts.files), or None when it has no such list (a checkpoint from before it existed) or
        cannot be read here (zo_engine_load_ex then names what is wrong with it)."""
        m = _read_manifest(os.path.join(path, "manifest.json"))
        files = m.get("files") if isinstance(m, dict) else None
        if not isinstance(files, list):
            return None
        return {f.get("name") for f in files if isinstance(f, dict)}

    # The engine's own ranges (zoffload/config.h, zo_adam_check_hparams, zo_engine_set_lr) for what a loaded
    # optimizer param_group may hold; a value outside is refused before anything is applied.
    _LR_MAX = 100.0  # ZO_CONFIG_LR_MAX

    def _check_client_settings(self, cfile, extra, load_opt, load_sched):
        """What load_checkpoint will hand the optimizer, the scheduler and then the engine, checked with the engine's
        own ranges before anything is applied: every optimizer param_group's lr (one lr for all groups, in [0, 100]),
        betas (two numbers in [0, 1)), eps and weight_decay (finite, >= 0); the lr scheduler's state key by key
        against this scheduler's own state_dict() (the same kinds of values; every number finite; base_lrs and
        _last_lr in [0, 100]; last_epoch and _step_count integers). CheckpointError naming @cfile and the field."""
        def bad(field, why):
            return CheckpointError("%s: %s: %s" % (cfile, field, why))

        def num(x):
            return isinstance(x, (int, float)) and not isinstance(x, bool)

        if load_opt and cfile is not None and "optimizer" in extra and extra["optimizer"] is None:
            raise bad("optimizer", "null: the checkpoint was saved without an optimizer, and this engine has one; "
                      "pass load_optimizer_states=False to load its weights only")
        opt = extra.get("optimizer") if load_opt else None
        if opt is not None:
            lrs = set()
            for i, g in enumerate(opt.get("param_groups", [])):
                where = "optimizer.param_groups[%d]" % i
                if "lr" in g:
                    lr = g["lr"]
                    if not (num(lr) and math.isfinite(lr) and 0 <= lr <= self._LR_MAX):
                        raise bad(where + ".lr", "%r is outside [0, %g]" % (lr, self._LR_MAX))
                    lrs.add(float(lr))
                if "betas" in g:
                    b = g["betas"]
                    if not (isinstance(b, (list, tuple)) and len(b) == 2
                            and all(num(x) and math.isfinite(x) and 0 <= x < 1 for x in b)):
                        raise bad(where + ".betas", "%r: expected two numbers in [0, 1)" % (b,))
                for k in ("eps", "weight_decay"):
                    if k in g and not (num(g[k]) and math.isfinite(g[k]) and g[k] >= 0):
                        raise bad("%s.%s" % (where, k), "%r: expected a finite number >= 0" % (g[k],))
            if len(lrs) > 1:
                raise bad("optimizer.param_groups", "the learning rates %s: the engine runs one lr for every "
                          "parameter" % sorted(lrs))
        sched = extra.get("lr_scheduler") if load_sched else None
        if sched is not None:
            mine = self.lr_scheduler.state_dict()
            for k, v in sched.items():
                field = "lr_scheduler.%s" % k
                if k in ("base_lrs", "_last_lr"):
                    if not (isinstance(v, (list, tuple))
                            and all(num(x) and math.isfinite(x) and 0 <= x <= self._LR_MAX for x in v)):
                        raise bad(field, "%r: expected numbers in [0, %g]" % (v, self._LR_MAX))
                elif k in ("last_epoch", "_step_count", "last_batch_iteration"):
                    if not (isinstance(v, int) and not isinstance(v, bool)):
                        raise bad(field, "%r: expected an integer" % (v,))
                elif num(v) and not math.isfinite(v):
                    raise bad(field, "%r: not a finite number" % (v,))
                elif k in mine and mine[k] is not None and v is not None and num(mine[k]) != num(v):
                    raise bad(field, "a %s where this scheduler holds a %s" % (type(v).__name__,
                                                                            type(mine[k]).__name__))

    def _read_counters(self, path):
        """(micro_steps, global_steps) of the app_state in this rank's manifest of checkpoint @path, read before
        zo_engine_load_ex applies anything (which passes app_state through unchecked): each a non-negative integer,
        0 when absent; CheckpointError naming the manifest and field otherwise. A manifest that is missing or not
        JSON gives (0, 0) here: zo_engine_load_ex then refuses it, naming it."""
        mfile = os.path.join(path, "manifest.json" if self.world_size == 1 else "manifest-rank%05d.json" % self.rank)
        m = _read_manifest(mfile)
        app = m.get("app_state") if isinstance(m, dict) else None
        if app is None:
            return 0, 0
        if not isinstance(app, dict):
            raise CheckpointError("%s: app_state is a %s, not an object" % (mfile, type(app).__name__))
        out = []
        for key in ("micro_steps", "global_steps"):
            v = app.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 62:
                raise CheckpointError("%s: app_state.%s is %r, not a count" % (mfile, key, v))
            out.append(v)
        return tuple(out)

    def _python_state(self, with_scheduler):
        """What load_checkpoint may change on the Python side, to put back (_restore_python_state)."""
        groups = ([{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
                  if self.optimizer is not None else None)
        sched = copy.deepcopy(self.lr_scheduler.state_dict()) if with_scheduler else None
        return groups, sched, self._lr_client

    def _restore_python_state(self, saved):
        groups, sched, self._lr_client = saved
        if groups is not None:
            for g, s in zip(self.optimizer.param_groups, groups):
                for k in [k for k in g if k != "params" and k not in s]:
                    del g[k]
                g.update(s)
        if sched is not None:
            self.lr_scheduler.load_state_dict(sched)

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin"):
        """DeepSpeed's save_16bit_model: the consolidated model state_dict in the working dtype (bf16 / fp16 when the
        config enables it, else fp32, as DeepSpeed's module holds them), trained parameters from the engine's fp32
        masters (all ranks' shards gathered: a collective call) and buffers / frozen parameters from the module, to
        SAVE_DIR/SAVE_FILENAME by rank 0: torch.save, or the safetensors format when the name ends .safetensors.
        Returns True."""
        os.makedirs(str(save_dir), exist_ok=True)
        path = os.path.join(str(save_dir), save_filename)
        state = self.consolidated_state_dict(dtype=self.wdtype)
        if self.rank == 0:
            if save_filename.endswith(".safetensors"):
                from safetensors.torch import save_file
                _write_atomic(path, lambda f: f.write(_safetensors_bytes(save_file, state)))
            else:
                _write_atomic(path, lambda f: torch.save(state, f))
        self.all_reduce_mean(0.0)
        return True

    def consolidated_state_dict(self, dtype=torch.float32):
        """The model's state_dict with every trained parameter from the engine's consolidated fp32 masters (a
        collective call over the ranks: zo_engine_export_safetensors to a temporary file rank 0 reads back), cast to
        @dtype; other entries (buffers, frozen parameters) as the module holds them, floating ones cast too."""
        import tempfile
        from safetensors.torch import load_file
        tmpdir = None
        if self.rank == 0:
            tmpdir = tempfile.mkdtemp(prefix="zoffload-16bit-")
        # every rank passes the same path; only rank 0 writes it (the others' is never created)
        name = os.path.join(tmpdir or tempfile.gettempdir(), "masters.safetensors")
        name = self._same_path(name)
        self.export_safetensors(name)
        out = {}
        if self.rank == 0:
            masters = load_file(name)
            os.unlink(name)
            os.rmdir(os.path.dirname(name))
            for k, v in self.module.state_dict().items():
                t = masters.get(k, v)
                out[k] = t.to(dtype) if t.is_floating_point() else t.clone()
        return out

    def _zero3_consolidated_16bit_state_dict(self):
        """What Hugging Face and accelerate call on DeepSpeed's engine: consolidated_state_dict() in the working
        dtype (rank 0 gets it; the others an empty dict)."""
        return self.consolidated_state_dict(dtype=self.wdtype)

    def _same_path(self, path):
        """rank 0's @path on every rank (the collective export names one file)."""
        if self.world_size == 1:
            return path
        n = 4096
        buf = (ctypes.c_double * n)()
        raw = path.encode()[:n - 1] if self.rank == 0 else b""
        for i, c in enumerate(raw):
            buf[i] = float(c)
        # a sum over the ranks, the others adding zeros: rank 0's bytes
        _lib.check(_lib.lib.zo_comm_all_reduce_f64(self.comm, buf, n), "checkpoint path")
        return bytes(int(buf[i]) for i in range(n) if buf[i] != 0).decode()


def _read_manifest(mfile):
    """The JSON of the manifest @mfile (a regular file, at most 1 GiB read), or None when it is missing, not a
    regular file or not JSON: what load_checkpoint reads from it ahead of the library is then absent, and
    zo_engine_load_ex refuses the manifest, naming it."""
    try:
        _ckpt.check_regular(mfile)
        with open(mfile, "rb") as f:
            return json.loads(f.read(1 << 30))
    except (OSError, ValueError, RecursionError, CheckpointError):
        return None


def _fault(stage):
    """The Python stages of save_checkpoint() for the crash-safety test (python/tests/test_save_kill.py), as the C
    library's ck_fault (offload/checkpoint/checkpoint_internal.h): ZO_CKPT_KILL_AT=STAGE kills this process with SIGKILL there.
    Unset or another stage: nothing."""
    if os.environ.get("ZO_CKPT_KILL_AT") == stage:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


def _safetensors_bytes(save_file, state):
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as t:
        save_file({k: v.contiguous() for k, v in state.items()}, t.name, metadata={"format": "pt"})
        with open(t.name, "rb") as f:
            return f.read()


def _replaceable(path):
    """OSError naming @path when it is there and not a regular file (lstat: a symbolic link, a directory, a device,
    a FIFO), which _write_atomic never replaces."""
    try:
        m = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(m):
        kind = ("a symbolic link" if stat.S_ISLNK(m) else "a directory" if stat.S_ISDIR(m) else "a device"
                if stat.S_ISCHR(m) or stat.S_ISBLK(m) else "a FIFO" if stat.S_ISFIFO(m) else "not a regular file")
        raise OSError(errno.EEXIST, "zoffload: '%s' is %s, not a regular file: not replacing it" % (path, kind))


def _write_atomic(path, write):
    """@write(binary file) into a new temporary file beside @path, fsynced and renamed over @path, the directory
    fsynced: the C library's way (base/tmpfile.c). The temporary file is DIR/.NAME.PID.N.tmp made with
    O_EXCL|O_NOFOLLOW (N the first free of 0..99): whatever is planted at a name (a symbolic link to someone's file)
    is skipped, never opened or followed. @path itself must be absent or a regular file: anything else (a symbolic
    link, a directory, a device, a FIFO) is refused with OSError naming it, before and again just before the
    rename, and left as it is."""
    path = str(path)
    d, base = os.path.split(path)
    _replaceable(path)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for n in range(100):
        tmp = os.path.join(d, ".%s.%d.%d.tmp" % (base[:200], os.getpid(), n))
        try:
            fd = os.open(tmp, flags, 0o644)
            break
        except FileExistsError:
            continue
    else:
        raise OSError(errno.EEXIST, "zoffload: no free temporary name beside '%s' (.%s.%d.0.tmp to .99.tmp taken)"
                      % (path, base[:200], os.getpid()))
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        _replaceable(path)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    d = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(d)
    finally:
        os.close(d)


def training_dataloader(engine, training_data, collate_fn):
    """DeepSpeed's deepspeed_io(): a torch DataLoader of @training_data in micro-batches of
    train_micro_batch_size_per_gpu (the resolved config's), each rank reading its part through a DistributedSampler
    (shuffled, seeded as torch's default 0: call loader.sampler.set_epoch(n) per epoch, as with DeepSpeed)."""
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    sampler = DistributedSampler(training_data, num_replicas=engine.world_size, rank=engine.rank)
    return DataLoader(training_data, batch_size=engine.train_micro_batch_size_per_gpu(), sampler=sampler,
                      collate_fn=collate_fn)


def convert_legacy_client_state(checkpoint_dir):
    """The client_state.pt (a pickle) of a checkpoint an older zoffload wrote, rewritten as client_state.safetensors
    (no pickle), which load_checkpoint() reads; the .pt is removed once the new file is durable. It UNPICKLES the
    file, running any code it names: call it only on a checkpoint you made yourself. @checkpoint_dir: the checkpoint
    (SAVE_DIR/TAG). TypeError naming an entry the new format cannot hold (nothing changed then). Returns the new
    file's path."""
    legacy = os.path.join(str(checkpoint_dir), LEGACY_CLIENT_STATE_FILE)
    _ckpt.check_regular(legacy)
    extra = torch.load(legacy, map_location="cpu", weights_only=False)  # the caller vouches for this file
    blob = _ckpt.client_state_bytes(extra)
    out = os.path.join(str(checkpoint_dir), CLIENT_STATE_FILE)
    _write_atomic(out, lambda f: f.write(blob))
    os.unlink(legacy)
    return out
