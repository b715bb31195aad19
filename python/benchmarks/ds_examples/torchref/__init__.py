"""A plain-torch stand-in for `deepspeed`, the reference DeepSpeedExamples' scripts are compared with when their
import lines point here (`import torchref as deepspeed`): the model computes forward and backward as the script
builds it, its parameters cast to the config's fp16/bf16 dtype when one is enabled (buffers kept, as DeepSpeed
0.19's engine casts); fp32 master weights (the cast parameters' values) are updated by torch.optim.AdamW (Adam
when adam_w_mode is False; foreach=False) with the client optimizer's hyper-parameters, or the config's
"optimizer" block, then rounded into the parameters (round to nearest even). Data: DeepSpeed's loader under a
launcher (DistributedSampler, seed 0). The config's gradient_clipping (absent: none) clips the fp32 gradients'
global norm with clip_grad_norm_. One rank, no loss scaling, no gradient accumulation; save_checkpoint() writes
nothing. Used by finetune_zero3_side_by_side.py and the HelloDeepSpeed run of
docs/pytorch/vs-deepspeed.md."""
import json

import torch

from . import accelerator  # noqa: F401
from . import comm  # noqa: F401
from . import ops  # noqa: F401
from . import utils  # noqa: F401


def add_config_arguments(parser):
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true")
    group.add_argument("--deepspeed_config", default=None, type=str)
    return parser


def _hyper(optimizer, config):
    if optimizer is not None:
        g = optimizer.param_groups[0]
        return dict(lr=g["lr"], betas=g["betas"], eps=g["eps"], weight_decay=g["weight_decay"]), \
            g.get("adamw_mode", True)
    block = config["optimizer"]
    if block["type"].lower() not in ("adam", "adamw"):
        raise ValueError("torchref: optimizer type %s is not Adam/AdamW" % block["type"])
    p = block.get("params", {})
    adamw = block["type"].lower() == "adamw" or p.get("adam_w_mode", True)
    return dict(lr=p.get("lr", 1e-3), betas=tuple(p.get("betas", (0.9, 0.999))), eps=p.get("eps", 1e-8),
                weight_decay=p.get("weight_decay", 0.0)), adamw


class Engine:
    def __init__(self, model, optimizer, config):
        self.module, self.device = model, torch.device("cpu")
        half = [k for k in ("fp16", "bf16") if config.get(k, {}).get("enabled")]
        if half:
            dt = torch.float16 if half[0] == "fp16" else torch.bfloat16
            with torch.no_grad():
                for p in model.parameters():
                    if p.is_floating_point():
                        p.data = p.data.to(dt)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.master = [p.detach().float().clone() for p in self.params]
        hyper, adamw = _hyper(optimizer, config)
        self.opt = (torch.optim.AdamW if adamw else torch.optim.Adam)(self.master, foreach=False, **hyper)
        self.micro = config.get("train_micro_batch_size_per_gpu", config.get("train_batch_size"))
        self.clip = float(config.get("gradient_clipping", 0.0))

    def __call__(self, *a, **k):
        return self.module(*a, **k)

    def parameters(self, recurse=True):
        return self.module.parameters(recurse)

    def train(self, mode=True):
        self.module.train(mode)

    def backward(self, loss):
        loss.backward()

    @torch.no_grad()
    def step(self):
        for p, m in zip(self.params, self.master):
            m.grad = p.grad.float() if p.grad is not None else torch.zeros_like(m)
            p.grad = None
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.master, self.clip)
        self.opt.step()
        for p, m in zip(self.params, self.master):
            p.copy_(m)

    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True):
        return None


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None, collate_fn=None,
               config=None, **_):
    if config is None:
        with open(args.deepspeed_config) as f:
            config = json.load(f)
    engine = Engine(model, optimizer, config)
    loader = None
    if training_data is not None:
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler
        loader = DataLoader(training_data, batch_size=engine.micro, collate_fn=collate_fn,
                            sampler=DistributedSampler(training_data, num_replicas=1, rank=0))
    return engine, optimizer, loader, None
