"""zoffload for Hugging Face: transformers' Trainer (ZoffloadTrainer), accelerate (accelerate_initialize), and
models built or loaded with their parameters partitioned by zoffload.zero.Init (from_config, from_pretrained).
Not a stand-in for the `deepspeed` distribution: nothing here registers package metadata or a `deepspeed` module,
so transformers' own DeepSpeed paths (is_deepspeed_zero3_enabled(), accelerate's DeepSpeedPlugin) stay off; this
module does their work with zoffload's engine instead. TrainingArguments here is transformers' with deepspeed= (and
`accelerate launch --use_deepspeed`'s config file) taken aside for ZoffloadTrainer before transformers' DeepSpeed
checks run, so a script keeps its deepspeed= and changes one import.

    from zoffload.hf import ZoffloadTrainer, from_config
    model = from_config(GPT2LMHeadModel, GPT2Config(...), "ds_config.json")   # stage 3: partitioned as built
    trainer = ZoffloadTrainer(model=model, args=TrainingArguments(...), train_dataset=ds,
                              zoffload_config="ds_config.json")              # HF's "auto" values welcome
    trainer.train()                                      # or train(resume_from_checkpoint="out/checkpoint-20")

Why a Trainer subclass: transformers 4.36 decides DeepSpeed from `accelerator.state.deepspeed_plugin`, which
accelerate only creates with the `deepspeed` package installed (it imports it in the plugin and in prepare()), and
transformers' zero-3 loading (`is_deepspeed_zero3_enabled()` in modeling_utils) runs `import deepspeed` too. What
the Trainer lets a subclass replace is enough: create_optimizer_and_scheduler (the engine), training_step
(engine.backward and engine.step), save_model / _save_optimizer_and_scheduler (the consolidated weights and the
engine's checkpoint in checkpoint-N) and _load_from_checkpoint / _load_optimizer_and_scheduler (resume). A
TrainerCallback cannot change how backward runs, and accelerate has no plugin point for another ZeRO engine.
"""
import json
import logging
import os

import torch

from . import _ckpt, _lib
from . import zero as _zero
from ._ckpt import CheckpointError
from .ds_api import _write_atomic  # save_checkpoint's writer: no name planted beside the file is followed

logger = logging.getLogger(__name__)

def _config_dict(config):
    """The config as a dict (a dict or a JSON file path: JSON with Infinity/NaN as Python's json reads it)."""
    if isinstance(config, dict):
        return config
    with open(config) as f:
        return json.load(f)


def auto_values(hidden_size=None, micro_batch=None, gradient_accumulation_steps=None, lr=None, betas=None,
                eps=None, weight_decay=None, gradient_clipping=None, warmup_num_steps=None, total_num_steps=None,
                fp16=None, bf16=None):
    """A _lib.ConfigAuto for the keys a config leaves "auto" (None: unknown, so "auto" there is an error naming the
    key). The library fills them in (zo_config_parse, zoffload/config.h) and logs each once."""
    a = _lib.ConfigAuto()
    _lib.lib.zo_config_auto_init(a)
    for field, v in (("hidden_size", hidden_size), ("train_micro_batch_size_per_gpu", micro_batch),
                     ("gradient_accumulation_steps", gradient_accumulation_steps),
                     ("warmup_num_steps", warmup_num_steps), ("total_num_steps", total_num_steps)):
        if v is not None:
            setattr(a, field, int(v))
    for field, v in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay),
                     ("gradient_clipping", gradient_clipping)):
        if v is not None:
            setattr(a, field, float(v))
    if betas is not None:
        a.beta1, a.beta2 = float(betas[0]), float(betas[1])
    if fp16 is not None:
        a.fp16 = int(bool(fp16))
    if bf16 is not None:
        a.bf16 = int(bool(bf16))
    return a


def _hidden_size(model_config):
    """What HF's trainer_config_finalize takes as hidden_size: config.hidden_size, else max(config.hidden_sizes)."""
    if model_config is None:
        return None
    h = getattr(model_config, "hidden_size", None)
    if h is None and getattr(model_config, "hidden_sizes", None):
        h = max(model_config.hidden_sizes)
    return h


def trainer_auto_values(args, num_training_steps=None, model=None):
    """The "auto" values HF's HfTrainerDeepSpeedConfig (trainer_config_process, trainer_config_finalize) fills
    from TrainingArguments @args: train_micro_batch_size_per_gpu = per_device_train_batch_size,
    gradient_accumulation_steps, train_batch_size = their product x ranks (the library derives it), lr =
    learning_rate, betas = (adam_beta1, adam_beta2), eps = adam_epsilon, weight_decay, gradient_clipping =
    max_grad_norm, fp16 / bf16 (or their _full_eval), scheduler warmup_min_lr 0, warmup_max_lr = learning_rate,
    warmup_num_steps = args.get_warmup_steps(@num_training_steps), total_num_steps = @num_training_steps, and the
    hidden-size ones from @model's config."""
    return auto_values(
        hidden_size=_hidden_size(getattr(model, "config", None)), micro_batch=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon, weight_decay=args.weight_decay,
        gradient_clipping=args.max_grad_norm or 0.0,
        warmup_num_steps=args.get_warmup_steps(num_training_steps) if num_training_steps else None,
        total_num_steps=num_training_steps, fp16=args.fp16 or args.fp16_full_eval,
        bf16=args.bf16 or args.bf16_full_eval)


def _init_auto(model_config, training_args):
    """The ConfigAuto zero.Init's parse takes in from_config / from_pretrained: from @training_args when given (as
    TrainingArguments(deepspeed=...) has filled them when HF builds a model under zero.Init), else only the hidden
    size, plus batch 1, accumulation 1 and lr 0 for the batch and optimizer keys. Init itself reads only
    zero_optimization's stage and offload_param, which cannot be "auto"."""
    if training_args is not None:
        return trainer_auto_values(training_args, None, _Cfg(model_config))
    return auto_values(hidden_size=_hidden_size(model_config), micro_batch=1, gradient_accumulation_steps=1, lr=0.0,
                       betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, gradient_clipping=0.0, warmup_num_steps=0,
                       total_num_steps=1, fp16=False, bf16=False)


class _Cfg:
    def __init__(self, config):
        self.config = config


# --- models built or loaded under zoffload.zero.Init (what HF does when is_deepspeed_zero3_enabled()) ---

def from_config(model_class, config, zoffload_config, training_args=None, **kwargs):
    """@model_class (a PreTrainedModel class, or an Auto class such as AutoModelForCausalLM) built from @config
    (a PretrainedConfig) under zoffload.zero.Init(config_dict_or_path=@zoffload_config): at stage 3 each parameter
    is partitioned to offload_param's tier as its module is constructed, as transformers' from_config does under
    deepspeed.zero.Init when is_deepspeed_zero3_enabled(). At stages 0-2 Init is off and this is a plain build.
    "auto" keys are filled from @training_args (TrainingArguments) when given. @kwargs go to the class."""
    with _lib.auto_values(_init_auto(config, training_args)):
        with _zero.Init(config_dict_or_path=zoffload_config):
            if hasattr(model_class, "_from_config"):
                return model_class._from_config(config, **kwargs)
            return model_class.from_config(config, **kwargs)


def _checkpoint_files(path):
    """The weight files of a save_pretrained() directory, shards in their index's order: model.safetensors (or its
    sharded index) before pytorch_model.bin (a pickle: _tensors loads it only where that is safe). A shard the
    index names must be a plain file name in @path of the index's kind (CheckpointError naming the index)."""
    for index, single in (("model.safetensors.index.json", "model.safetensors"),
                          ("pytorch_model.bin.index.json", "pytorch_model.bin")):
        ip = os.path.join(path, index)
        if os.path.lexists(ip):
            _ckpt.check_regular(ip, follow=True)
            try:
                with open(ip, "rb") as f:
                    wm = json.loads(f.read())["weight_map"]
                shards = sorted(set(wm.values()))
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
                raise CheckpointError("%s: not a weight index (a JSON object with a \"weight_map\" of shard "
                                      "names): %s: %s" % (ip, type(e).__name__, e)) from None
            ext = single[single.index("."):]
            for s in shards:
                if not (_ckpt.name_ok(s) and s.endswith(ext)):
                    raise CheckpointError("%s names the shard %r: a shard is a file name in %s ending %s"
                                          % (ip, s, path, ext))
            return [os.path.join(path, s) for s in shards]
        if os.path.lexists(os.path.join(path, single)):
            return [os.path.join(path, single)]
    raise FileNotFoundError("zoffload.hf.from_pretrained: %s has no model.safetensors, pytorch_model.bin or their "
                            "sharded index" % path)


def _tensors(file):
    """(name, tensor) of one weight file, a tensor at a time for safetensors; a torch file (pickle) read whole with
    _ckpt.load_pickle (torch.load(weights_only=True) where this torch makes that safe, else refused). Errors are
    CheckpointError naming @file."""
    if file.endswith(".safetensors"):
        _ckpt.check_regular(file, follow=True)
        from safetensors import safe_open
        try:
            f = safe_open(file, framework="pt", device="cpu")
        except Exception as e:  # safetensors_rust.SafetensorError
            raise CheckpointError("%s: not a safetensors file: %s: %s" % (file, type(e).__name__, e)) from e
        with f:
            for k in f.keys():
                yield k, f.get_tensor(k)
    else:
        sd = _ckpt.load_pickle(file, "Save the model with save_pretrained(safe_serialization=True) (model.safetensors, "
                                     "which loads without pickle) and load that.", follow=True)
        if not isinstance(sd, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                               for k, v in sd.items()):
            raise CheckpointError("%s: not a state dict (names to tensors)" % file)
        for k in list(sd):
            yield k, sd.pop(k)


def load_pretrained_weights(model, path):
    """The weights of the save_pretrained() directory @path into @model, whose parameters may be partitioned by
    zero.Init: each is written through zero.GatheredParameters(p, modifier_rank=0) (into Init's store before
    initialize(), the engine's masters after), buffers directly; names with or without the model's
    base_model_prefix match, as from_pretrained's. Returns (missing_keys, unexpected_keys), logged as HF does."""
    params, buffers = {}, {}  # every name, tied ones included (torch 1.13's named_parameters has no remove_duplicate)
    for mname, mod in model.named_modules(remove_duplicate=False):
        for table, own in ((params, mod._parameters), (buffers, mod._buffers)):
            for n, t in own.items():
                if t is not None:
                    table[mname + "." + n if mname else n] = t
    prefix = getattr(model, "base_model_prefix", "") or ""
    seen, unexpected = set(), []
    with torch.no_grad():
        for file in _checkpoint_files(path):
            for key, t in _tensors(file):
                name = key
                if name not in params and name not in buffers and prefix:
                    if (prefix + "." + name) in params or (prefix + "." + name) in buffers:
                        name = prefix + "." + name
                    elif name.startswith(prefix + ".") and name[len(prefix) + 1:] in params:
                        name = name[len(prefix) + 1:]
                if name in params:
                    p = params[name]
                    shape = tuple(getattr(p, "ds_shape", p.shape))
                    if tuple(t.shape) != shape:
                        raise ValueError("zoffload.hf.from_pretrained: %s in %s is %s, the model's %s is %s"
                                         % (key, file, tuple(t.shape), name, shape))
                    with _zero.GatheredParameters([p], modifier_rank=0):
                        p.data.copy_(t)
                elif name in buffers:
                    buffers[name].copy_(t)
                else:
                    unexpected.append(key)
                    continue
                seen.add(name)
    tied = {n for n, p in params.items() if any(p is q and m in seen for m, q in params.items())}
    missing = [n for n in params if n not in seen and n not in tied]
    if missing:
        logger.warning("zoffload.hf.from_pretrained: weights not in %s, left as initialised: %s", path, missing)
    if unexpected:
        logger.warning("zoffload.hf.from_pretrained: weights in %s the model does not have: %s", path, unexpected)
    return missing, unexpected


def from_pretrained(model_class, path, zoffload_config, training_args=None, config=None, **kwargs):
    """transformers' from_pretrained under zero-3 for zoffload: the model of the local save_pretrained() directory
    @path (its config.json unless @config is given) built by from_config() under zoffload.zero.Init, then its
    weights loaded tensor by tensor into the partitioned parameters (load_pretrained_weights), so the whole fp32
    model never exists in this process at stage 3. In eval mode, as from_pretrained returns it. Local directories
    only (no Hub download)."""
    from transformers import AutoConfig
    if config is None:
        config = AutoConfig.from_pretrained(path)
    model = from_config(model_class, config, zoffload_config, training_args, **kwargs)
    load_pretrained_weights(model, path)
    model.eval()
    return model


# --- the Trainer ---

class _TrainerOptimizer(torch.optim.Optimizer):
    """What the Trainer (and accelerate's AcceleratedOptimizer around it) holds as its optimizer: the engine's
    param_groups and state_dict, a step() that does nothing (ZoffloadTrainer.training_step steps the engine after
    every backward, as DeepSpeed's engine.step(); accelerate's DeepSpeedOptimizerWrapper.step is a no-op too)."""

    def __init__(self, zero_optimizer):  # noqa: super().__init__ not called: the groups are the engine optimizer's
        self.zero_optimizer = zero_optimizer
        self.param_groups = zero_optimizer.param_groups
        self.defaults = zero_optimizer.defaults
        self.state = {}
        self._optimizer_step_pre_hooks = {}
        self._optimizer_step_post_hooks = {}

    def step(self, closure=None):
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none=True):
        self.zero_optimizer.zero_grad(set_to_none)

    def state_dict(self):
        return self.zero_optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.zero_optimizer.load_state_dict(state_dict)


class _TrainerScheduler:
    """The Trainer's lr_scheduler: the engine steps the real one after each applied optimizer step (a client
    scheduler, or the config's "scheduler" run in the library), so step() here does nothing (accelerate's
    DeepSpeedSchedulerWrapper does the same); get_last_lr() and the state dicts are the real one's."""

    def __init__(self, scheduler):
        self.scheduler = scheduler

    def step(self, *args, **kwargs):
        pass

    def get_last_lr(self):
        return self.scheduler.get_last_lr()

    def get_lr(self):
        return self.scheduler.get_lr()

    def state_dict(self):
        return self.scheduler.state_dict()

    def load_state_dict(self, sd):
        self.scheduler.load_state_dict(sd)


def _deepspeed_arg(value, what):
    """The config TrainingArguments(deepspeed=@value) names, as HF reads it: a dict, a JSON file path, or JSON text
    (plain or base64, as HfDeepSpeedConfig takes it). A path is kept as given (errors name the file)."""
    if isinstance(value, dict) or os.path.exists(os.fsdecode(value)):
        return value
    import base64
    for text in (value, None):
        try:
            if text is None:
                text = base64.urlsafe_b64decode(value).decode("utf-8")
            conf = json.loads(text)
        except (ValueError, TypeError):
            continue
        if isinstance(conf, dict):
            return conf
    raise ValueError("%s=%r: neither a JSON file that exists, nor JSON text (plain or base64) of an object"
                     % (what, value if len(str(value)) <= 200 else str(value)[:200] + "..."))


def _take_deepspeed(targs):
    """The config @targs (TrainingArguments, or None) carries for DeepSpeed, taken over for zoffload, or None:
    zoffload.hf.TrainingArguments' zoffload_config; transformers' own TrainingArguments(deepspeed=...) (made where
    the deepspeed package is installed), whose DeepSpeed plugin, HF DeepSpeed config and ACCELERATE_USE_DEEPSPEED
    are dropped so that the Trainer's Accelerator does not start DeepSpeed; or, under `accelerate launch
    --use_deepspeed`, the plugin's config."""
    if targs is None:
        return None
    cfg = getattr(targs, "zoffload_config", None)
    if cfg is not None:
        return cfg
    plugin = getattr(targs, "deepspeed_plugin", None)
    if getattr(targs, "deepspeed", None):
        cfg = _deepspeed_arg(targs.deepspeed, "TrainingArguments.deepspeed")
    elif plugin is not None and getattr(plugin, "hf_ds_config", None) is not None:
        cfg = getattr(plugin.hf_ds_config, "config", None)
    if cfg is None:
        return None
    targs.deepspeed, targs.deepspeed_plugin = None, None
    if getattr(targs, "hf_deepspeed_config", None) is not None:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config
        unset_hf_deepspeed_config()
        targs.hf_deepspeed_config = None
    os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)
    logger.info("ZoffloadTrainer: the arguments' DeepSpeed config runs on zoffload's engine")
    targs.zoffload_config = cfg
    return cfg


def _training_arguments_class():
    from transformers import TrainingArguments as HfTrainingArguments
    return HfTrainingArguments


class TrainingArguments(_training_arguments_class()):
    """transformers.TrainingArguments whose deepspeed= (or --deepspeed, through HfArgumentParser) selects zoffload
    instead of the deepspeed package: the config is taken aside before transformers' checks (which need DeepSpeed
    installed and would make accelerate start it) and kept as zoffload_config, which ZoffloadTrainer runs; the
    deepspeed attribute then reads None. Under `accelerate launch --use_deepspeed --deepspeed_config_file F`
    (ACCELERATE_USE_DEEPSPEED, ACCELERATE_DEEPSPEED_CONFIG_FILE in the environment) F is the config the same way,
    and ACCELERATE_USE_DEEPSPEED is removed from this process's environment so that accelerate's Accelerator
    does not start DeepSpeed; accelerate's other DeepSpeed flags (--zero_stage, --offload_*) are not read (a
    ValueError says so when no config file is given). Everything else is transformers' own."""

    def __post_init__(self):
        cfg, what = self.deepspeed, "TrainingArguments.deepspeed"
        if not cfg and os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
            cfg, what = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"), "ACCELERATE_DEEPSPEED_CONFIG_FILE"
            if not cfg or cfg == "none":
                raise ValueError("zoffload.hf.TrainingArguments: ACCELERATE_USE_DEEPSPEED=true (accelerate launch "
                                 "--use_deepspeed) without a config file: zoffload reads the DeepSpeed config from "
                                 "--deepspeed_config_file (accelerate's --zero_stage and --offload_* flags are not "
                                 "read)")
        self.zoffload_config = _deepspeed_arg(cfg, what) if cfg else None
        if cfg:
            self.deepspeed = None
            os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)
        super().__post_init__()


def _trainer_class():
    from transformers import Trainer
    return Trainer


class ZoffloadTrainer(_trainer_class()):
    """transformers.Trainer training through a zoffload engine. The DeepSpeed-style config (a dict or a JSON path)
    comes from the arguments' deepspeed= (TrainingArguments above, or transformers' own where the deepspeed
    package is installed: its DeepSpeed plugin is then dropped) or from @zoffload_config (not both), with HF's
    "auto" values allowed, filled from the TrainingArguments as HF does for DeepSpeed (trainer_auto_values). As
    with DeepSpeed under HF: a config "optimizer" section is the engine's optimizer, else the Trainer's own
    (create_optimizer(): AdamW with no decay on biases and norms) becomes the engine's hyper-parameters (zoffload
    refuses non-Adam ones by name); a config "scheduler" section runs in the library, else the Trainer's
    (create_scheduler(): args.lr_scheduler_type, warmup) is the engine's client scheduler. The engine (zo_engine,
    DeepSpeed's model_wrapped) is built at the start of train(); its gradient_accumulation_steps and micro batch
    must equal the arguments' (ValueError otherwise, as HF's mismatch check). save_steps write the consolidated
    weights (save_pretrained) and the engine's checkpoint (global_stepN/ and latest) into checkpoint-N;
    train(resume_from_checkpoint=...) loads the latter."""

    def __init__(self, *args, zoffload_config=None, **kwargs):
        targs = kwargs.get("args", args[1] if len(args) > 1 else None)
        from_args = _take_deepspeed(targs)
        if zoffload_config is not None and from_args is not None:
            raise ValueError("ZoffloadTrainer: the config given twice, as zoffload_config= and as the "
                             "TrainingArguments' deepspeed=; give one")
        zoffload_config = from_args if zoffload_config is None else zoffload_config
        if zoffload_config is None:
            raise ValueError("ZoffloadTrainer: no config: pass TrainingArguments(deepspeed=...) (zoffload.hf's "
                             "TrainingArguments) or zoffload_config= (the DeepSpeed-style config, a dict or a JSON "
                             "path)")
        super().__init__(*args, **kwargs)
        # The engine's config decides the precision (fp16/bf16 "auto" <- args.fp16/bf16), as DeepSpeed's does under
        # HF: no torch autocast around forward (the Trainer's CPU amp, accelerate's wrapper from prepare_model).
        self.use_cpu_amp = False
        self.accelerator.native_amp = False
        self.zoffload_config = zoffload_config
        self.zo_engine = None
        self._zo_resume = None
        # Several ranks (torchrun): the Trainer's accelerator.prepare(model) would wrap the model in
        # DistributedDataParallel, whose construction broadcasts rank 0's parameters and whose backward all-reduces
        # the gradients; the engine reduces them itself (as DeepSpeed's engine replaces DDP under HF), so the model
        # is taken as it is. Other objects (data loaders) are prepared as before.
        prepare_model = self.accelerator.prepare_model

        def _prepare_model(model, device_placement=None, evaluation_mode=False):
            if self.zo_engine is not None and model is self.model:
                return model
            return prepare_model(model, device_placement=device_placement, evaluation_mode=evaluation_mode)

        self.accelerator.prepare_model = _prepare_model

    # --- the engine, at the start of train() ---

    def create_optimizer_and_scheduler(self, num_training_steps):
        if self.zo_engine is not None:
            return
        import zoffload
        cfg = _config_dict(self.zoffload_config)
        # which sections the config has decides whose optimizer and scheduler run (HF's deepspeed_optim_sched)
        client_opt = None if "optimizer" in cfg else self.create_optimizer()
        client_sched = None
        if "scheduler" not in cfg:
            def client_sched(opt):
                return self.create_scheduler(num_training_steps, optimizer=opt)
        auto = trainer_auto_values(self.args, num_training_steps, self.model)
        with _lib.auto_values(auto):
            engine, zopt, _, sched = zoffload.initialize(model=self.model, optimizer=client_opt,
                                                         lr_scheduler=client_sched, config=self.zoffload_config)
        bad = []
        if engine.gradient_accumulation_steps() != self.args.gradient_accumulation_steps:
            bad.append("gradient_accumulation_steps=%d vs gradient_accumulation_steps=%d"
                       % (engine.gradient_accumulation_steps(), self.args.gradient_accumulation_steps))
        if engine.train_micro_batch_size_per_gpu() != self.args.per_device_train_batch_size:
            bad.append("train_micro_batch_size_per_gpu=%d vs per_device_train_batch_size=%d"
                       % (engine.train_micro_batch_size_per_gpu(), self.args.per_device_train_batch_size))
        if bad:
            engine.close()
            raise ValueError("ZoffloadTrainer: the zoffload config and the TrainingArguments disagree (config vs "
                             "arguments): %s; set them \"auto\" or make them equal" % "; ".join(bad))
        self.zo_engine = engine
        self.optimizer = _TrainerOptimizer(zopt)
        self.lr_scheduler = _TrainerScheduler(sched)
        self._created_lr_scheduler = False  # transformers 5 drops a scheduler it created itself; this one is ours

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        """transformers 5 no longer calls create_optimizer_and_scheduler() from train(): the engine is built here,
        before its create_optimizer() and create_scheduler(), which then keep the engine's."""
        self.create_optimizer_and_scheduler(num_training_steps=max_steps)
        return super()._prepare_for_training(max_steps, train_dataloader, resume_from_checkpoint)

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The Trainer's step with the engine's backward (loss / gradient_accumulation_steps; gradients handed to
        the engine as backward forms them) and the engine's step() after it (the optimizer step at each
        accumulation boundary, with clipping and the scheduler). transformers 4.46 and later pass
        @num_items_in_batch: the loss is then computed with it, and when the Trainer counts it as normalised over
        the accumulated batch already (a model that takes loss kwargs, or a compute_loss_func), the engine does
        not divide it again (scale_wrt_gas=False), as the Trainer tells DeepSpeed."""
        model.train()
        inputs = self._prepare_inputs(inputs)
        kw = {} if num_items_in_batch is None else {"num_items_in_batch": num_items_in_batch}
        with self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs, **kw)
        scaled = self._loss_scaled_for_ga(num_items_in_batch)
        self.zo_engine.backward(loss, scale_wrt_gas=not scaled)
        self.zo_engine.step()
        return loss.detach() if scaled else loss.detach() / self.args.gradient_accumulation_steps

    def _loss_scaled_for_ga(self, num_items_in_batch):
        """Whether compute_loss's result is already normalised over the accumulated batch (transformers' rule;
        False on versions without it)."""
        fixed = getattr(self, "loss_is_scaled_for_ga", None)
        if fixed is not None:
            return bool(fixed)
        return bool((getattr(self, "model_accepts_loss_kwargs", False) and num_items_in_batch is not None)
                    or getattr(self, "compute_loss_func", None) is not None)

    # --- saving and resuming ---

    def save_model(self, output_dir=None, _internal_call=False):
        """The consolidated weights (the engine's, in its working dtype: fp32 unless fp16/bf16 is enabled) through
        save_pretrained, as the Trainer saves a DeepSpeed model with stage3_gather_16bit_weights_on_model_save.
        A collective call with several ranks; the saving rank writes."""
        if self.zo_engine is None:
            return super().save_model(output_dir, _internal_call)
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        state = self.zo_engine._zero3_consolidated_16bit_state_dict()
        if self.args.should_save:
            self._save(output_dir, state_dict=state)
        if self.args.push_to_hub and not _internal_call:
            self.push_to_hub(commit_message="Model save")

    def _save_optimizer_and_scheduler(self, output_dir):
        """The engine's checkpoint in checkpoint-N (global_stepN/: master weights, Adam state, step, loss scale, the
        scheduler's and optimizer's state; latest naming it), as DeepSpeed's save_checkpoint(output_dir)."""
        if self.zo_engine is None:
            return super()._save_optimizer_and_scheduler(output_dir)
        self.zo_engine.save_checkpoint(output_dir)

    def _has_engine_checkpoint(self, checkpoint):
        return checkpoint is not None and os.path.isfile(os.path.join(checkpoint, "latest"))

    # Nothing the Trainer reads for us is unpickled plainly: transformers' own loaders (_load_rng_state,
    # _load_from_checkpoint, _load_best_model, _load_optimizer_and_scheduler) call torch.load, which runs whatever
    # code a pickle names, so each is replaced here. What we write is pickle-free (the RNG state as
    # rng_state.safetensors through _ckpt's client-state format, the weights as model.safetensors, the engine's
    # checkpoint); a pickle file of another run goes through _ckpt.load_pickle (torch.load(weights_only=True) on a
    # torch where that is safe, else CheckpointError naming the file).

    def _rng_file(self, directory, ext):
        if self.args.world_size > 1:
            return os.path.join(directory, "rng_state_%d.%s" % (self.args.process_index, ext))
        return os.path.join(directory, "rng_state.%s" % ext)

    def _save_rng_state(self, output_dir):
        """The Trainer's RNG state (Python's, numpy's, torch's cpu and cuda generators) as rng_state.safetensors
        (rng_state_<rank>.safetensors with several ranks): tensors and numpy arrays as tensors, the rest JSON, no
        pickle (_ckpt.client_state_bytes)."""
        import random
        import numpy as np
        state = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
        if torch.cuda.is_available():
            if str(getattr(self.args, "parallel_mode", "")).endswith("DISTRIBUTED"):
                state["cuda"] = list(torch.cuda.random.get_rng_state_all())
            else:
                state["cuda"] = torch.cuda.random.get_rng_state()
        os.makedirs(output_dir, exist_ok=True)
        data = _ckpt.client_state_bytes(state)
        _write_atomic(self._rng_file(output_dir, "safetensors"), lambda f: f.write(data))

    def _load_rng_state(self, checkpoint):
        """The RNG state _save_rng_state wrote (read without pickle); else a Trainer's rng_state.pth through
        _ckpt.load_pickle (refused on a torch that cannot load a pickle safely); neither there: left as it is,
        as the Trainer does."""
        if checkpoint is None:
            return
        path = self._rng_file(checkpoint, "safetensors")
        if os.path.lexists(path):
            state = _ckpt.read_client_state(path)
        else:
            path = self._rng_file(checkpoint, "pth")
            if not os.path.lexists(path):
                logger.info("ZoffloadTrainer: no RNG state in %s; reproducibility of the resumed run is not "
                            "guaranteed", checkpoint)
                return
            state = _ckpt.load_pickle(path, "Resume from a checkpoint ZoffloadTrainer saved (rng_state.safetensors, "
                                            "which loads without pickle), or delete %s to resume without the RNG "
                                            "state." % path)
        self._set_rng_state(state, path)

    def _set_rng_state(self, state, path):
        import random
        import numpy as np
        if not isinstance(state, dict) or not all(k in state for k in ("python", "numpy", "cpu")):
            raise CheckpointError("%s: not an RNG state (a dict of python, numpy and cpu)" % path)
        try:
            py = state["python"]
            if isinstance(py, list):  # a tuple survives the format; a list from elsewhere is taken as one
                py = tuple(tuple(e) if isinstance(e, list) else e for e in py)
            random.setstate(py)
            npst = state["numpy"]
            np.random.set_state(tuple(npst) if isinstance(npst, list) else npst)
            cpu = state["cpu"]
            if not isinstance(cpu, torch.Tensor) or cpu.dtype != torch.uint8:
                raise TypeError("cpu is a %s, not a uint8 tensor" % type(cpu).__name__)
            torch.random.set_rng_state(cpu)
        except (TypeError, ValueError, RuntimeError, OverflowError) as e:
            raise CheckpointError("%s: not an RNG state this process can take: %s: %s" % (path, type(e).__name__,
                                                                                         e)) from None
        cuda = state.get("cuda")
        if cuda is not None and torch.cuda.is_available():
            try:
                if isinstance(cuda, (list, tuple)):
                    torch.cuda.random.set_rng_state_all(list(cuda))
                else:
                    torch.cuda.random.set_rng_state(cuda)
            except Exception as e:
                logger.info("ZoffloadTrainer: the GPU RNG state of %s not restored (%s: %s): the resumed run will "
                            "differ from an uninterrupted one", path, type(e).__name__, e)

    def _load_weights_safely(self, directory, model=None):
        """The weights of the save_pretrained() directory @directory into @model (self.model) with
        load_pretrained_weights: model.safetensors (or its index) without pickle, pytorch_model.bin (or its
        shards) only through _ckpt.load_pickle. Returns whether @directory held model weights; adapters (PEFT)
        are loaded by the model's load_adapter only from adapter_model.safetensors."""
        model = self.model if model is None else model
        if any(os.path.lexists(os.path.join(directory, n)) for n in (
                "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")):
            load_pretrained_weights(model, directory)
            return True
        if os.path.lexists(os.path.join(directory, "adapter_model.bin")) and \
                not os.path.lexists(os.path.join(directory, "adapter_model.safetensors")):
            _ckpt.load_pickle(os.path.join(directory, "adapter_model.bin"),
                              "Save the adapter with safe_serialization=True (adapter_model.safetensors).")
        if os.path.lexists(os.path.join(directory, "adapter_model.safetensors")) and \
                hasattr(model, "load_adapter") and hasattr(model, "active_adapter"):
            model.load_adapter(directory, model.active_adapter, is_trainable=True)
            return True
        return False

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        """A checkpoint-N with the engine's checkpoint: its weights come back with the engine's state (after the
        engine exists); one without it (a plain Trainer checkpoint): its weights, read with no plain pickle load
        (_load_weights_safely)."""
        if self._has_engine_checkpoint(resume_from_checkpoint):
            self._zo_resume = resume_from_checkpoint
            return
        if not self._load_weights_safely(resume_from_checkpoint, model):
            raise ValueError("Can't find a valid checkpoint at %s" % resume_from_checkpoint)

    def _load_best_model(self):
        """load_best_model_at_end: the best checkpoint's engine checkpoint (weights with the engine's state, as
        DeepSpeed's deepspeed_load_checkpoint does); without one, its weights read with no plain pickle load."""
        best = self.state.best_model_checkpoint
        if self.zo_engine is not None and self._has_engine_checkpoint(best):
            path, _ = self.zo_engine.load_checkpoint(best)
            if path is None:
                raise FileNotFoundError("ZoffloadTrainer: no zoffload checkpoint in %s" % best)
            return
        if not self._load_weights_safely(best):
            logger.warning("ZoffloadTrainer: could not locate the best model at %s", best)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """The engine's checkpoint when @checkpoint has one; else a Trainer's optimizer.pt and scheduler.pt (both
        there, as the Trainer requires) through _ckpt.load_pickle; else nothing."""
        if checkpoint is None:
            return
        if self.zo_engine is None or not self._has_engine_checkpoint(checkpoint):
            files = [os.path.join(checkpoint, n) for n in ("optimizer.pt", "scheduler.pt")]
            if not all(os.path.lexists(f) for f in files):
                return
            what = ("Resume from a checkpoint ZoffloadTrainer saved (the engine's checkpoint, which loads without "
                    "pickle), or delete optimizer.pt and scheduler.pt to resume the weights only.")
            opt, sched = (_ckpt.load_pickle(f, what) for f in files)
            self.optimizer.load_state_dict(opt)
            self.lr_scheduler.load_state_dict(sched)
            return
        path, _ = self.zo_engine.load_checkpoint(checkpoint)
        if path is None:
            raise FileNotFoundError("ZoffloadTrainer: no zoffload checkpoint in %s" % checkpoint)


# --- accelerate ---

def accelerate_initialize(accelerator, model, config, *dataloaders, optimizer=None, lr_scheduler=None,
                          model_parameters=None):
    """zoffload under an accelerate script: the engine for @model (zoffload.initialize with @config, @optimizer,
    @lr_scheduler as DeepSpeed's initialize takes them) and @dataloaders prepared by @accelerator (sharded over
    its processes). "auto" keys are filled from what accelerate knows: gradient_accumulation_steps from
    accelerator.gradient_accumulation_steps, the micro batch from the first data loader's batch_size, fp16/bf16
    from accelerator.mixed_precision, lr, betas, eps, weight_decay from @optimizer's first group. The model is not
    given to accelerator.prepare (no DDP wrapper: the engine reduces gradients itself) and accelerate's autocast is
    not used (the engine's config decides the precision). Returns (engine, optimizer, lr_scheduler, *dataloaders):
    train with loss = engine(...); engine.backward(loss); engine.step(). An Accelerator with a DeepSpeedPlugin is
    refused: that needs the deepspeed package."""
    import zoffload
    if getattr(accelerator.state, "deepspeed_plugin", None) is not None:
        raise ValueError("zoffload.hf.accelerate_initialize: the Accelerator has a DeepSpeedPlugin, which runs the "
                         "deepspeed package; create it without one (zoffload is the ZeRO engine here)")
    g = optimizer.param_groups[0] if optimizer is not None and hasattr(optimizer, "param_groups") else {}
    micro = getattr(dataloaders[0], "batch_size", None) if dataloaders else None
    mp = str(getattr(accelerator, "mixed_precision", "no"))
    auto = auto_values(hidden_size=_hidden_size(getattr(model, "config", None)), micro_batch=micro,
                       gradient_accumulation_steps=accelerator.gradient_accumulation_steps, lr=g.get("lr"),
                       betas=g.get("betas"), eps=g.get("eps"), weight_decay=g.get("weight_decay"),
                       fp16=mp == "fp16", bf16=mp == "bf16")
    with _lib.auto_values(auto):
        engine, zopt, _, sched = zoffload.initialize(model=model, optimizer=optimizer, lr_scheduler=lr_scheduler,
                                                     config=config, model_parameters=model_parameters)
    prepared = accelerator.prepare(*dataloaders) if dataloaders else ()
    if len(dataloaders) == 1:
        prepared = (prepared,)
    return (engine, zopt, sched) + tuple(prepared)
