"""zoffload.initialize(): deepspeed.initialize's entry point. It reads and resolves the config (engine.py's
_read_config and _resolve), builds the engine the config asks for (engine.Engine, or stage3.Stage3Engine at ZeRO
stage 3) and attaches DeepSpeed's optimizer and scheduler views (ds_api). Apart from engine.py so that the engine
classes import downward only: stage3 -> engine -> ds_api, and this module above both."""
from . import ds_api
from .engine import Engine, _read_config, _resolve
from .stage3 import Stage3Engine


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None, lr_scheduler=None,
               mpu=None, dist_init_required=None, collate_fn=None, config=None, config_params=None, device=None):
    """deepspeed.initialize(): hand @model's trainable parameters to a zoffload engine and return
    (engine, optimizer, training_dataloader, lr_scheduler) as DeepSpeed does.

    The engine is an Engine (a Stage3Engine at zero_optimization.stage 3, whose parameters hold storage only while a
    module uses them). The config: @config (a DeepSpeed-style dict or a JSON file path), else @config_params, else
    args.deepspeed_config (zoffload.add_config_arguments); ValueError when there is none or two.
    @optimizer: None (the config's "optimizer" section), a torch.optim.Adam / AdamW, zoffload.optim.CPUAdam or
    DeepSpeedCPUAdam-style instance whose hyper-parameters (lr, betas, eps, weight_decay per group, adamw_mode)
    become the engine's, replacing a config "optimizer" section with a warning (DeepSpeed also uses the client's),
    or a callable taking the parameters and returning one; any other optimizer is refused (TypeError naming it).
    The returned optimizer (ZeroOptimizer) has param_groups whose "lr" schedulers set, step()/zero_grad()
    delegating to the engine. @lr_scheduler: a scheduler over that optimizer (or over the client's, whose
    param_groups it shares) or a callable taking the optimizer; engine.step() steps it after each applied
    optimizer step and the engine runs the lr it sets. Without one the config's "scheduler" section runs (returned
    as a ConfigLRScheduler; None when the config has none). @training_data: a torch Dataset, returned as a
    DataLoader of train_micro_batch_size_per_gpu with a DistributedSampler over the ranks and @collate_fn; else None.
    @model_parameters: which parameters to train and their groups (a group's "weight_decay" replaces the config's).
    @mpu is accepted and unused (no model parallelism). @dist_init_required as DeepSpeed's (ds_api.dist_init):
    True initialises torch.distributed now, None lets the engine do it when torchrun started several ranks, False
    never does (refused under torchrun's several ranks without an initialised process group). zoffload's own: @device, where the model computes, "cpu" or "cuda[:N]" (default: its
    parameters' device); a model too large for the GPU is built on the CPU and given device="cuda", so the GPU holds
    the working weights (bf16/fp16 when the config enables them) and never the fp32 model. Raises
    zoffload.ZoffloadError naming the JSON path of a bad config or the library's reason, TypeError for parameters
    or an optimizer it cannot take, RuntimeError when torch has no CUDA device for device="cuda"."""
    if model is None:
        raise ValueError("zoffload.initialize: model= is required")
    read = _read_config(ds_api.config_source(args, config, config_params))
    ds_api.dist_init(dist_init_required)
    client_opt = None
    if optimizer is not None:
        read, model_parameters, client_opt = ds_api.with_client_optimizer(read, optimizer, model, model_parameters)
    resolved = _resolve(model, config, read, device)
    if resolved.view.zero_optimization.stage == 3:  # as the library resolved it (legacy forms included)
        engine = Stage3Engine(model, config, resolved, device, model_parameters)
    else:
        engine = Engine(model, config, resolved, device, model_parameters)
    opt = ds_api.ZeroOptimizer(engine, client_opt.param_groups if client_opt is not None else None)
    engine._attach(opt, lr_scheduler)
    if training_data is not None:
        engine.training_dataloader = ds_api.training_dataloader(engine, training_data, collate_fn)
    return engine, opt, engine.training_dataloader, engine.lr_scheduler
