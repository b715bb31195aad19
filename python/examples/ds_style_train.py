"""A training script written as DeepSpeed's own examples are (argparse + deepspeed.add_config_arguments, the
initialize 4-tuple with training_data, a train/eval loop, save/load by string tag), run on zoffload by changing
only the import below. A small torch GPT (train_gpt.py's) on a byte corpus.

    python ds_style_train.py --deepspeed --deepspeed_config ds_config.json --steps 20 --save_dir ckpt
    python ds_style_train.py --deepspeed --deepspeed_config ds_config.json --steps 20 --save_dir ckpt --load_dir ckpt

Without --deepspeed_config it writes a stage-2, offload-to-cpu config with an AdamW optimizer and a WarmupLR
scheduler next to --save_dir (or in the working directory). Prints one line per step: "step N loss L lr R".
"""
import argparse
import json
import os
import sys

import torch

import zoffload as deepspeed  # the one change from a DeepSpeed script: `import deepspeed`

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_gpt import GPT, corpus  # noqa: E402


class Windows(torch.utils.data.Dataset):
    """(input, target) windows of @seq bytes of the corpus, every @stride bytes."""

    def __init__(self, data, seq=32, stride=7):
        self.data, self.seq = data, seq
        self.starts = list(range(0, len(data) - seq - 1, stride))

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        s = self.starts[i]
        return self.data[s:s + self.seq], self.data[s + 1:s + 1 + self.seq]


def default_config(path, stage=2, nvme=None):
    off = {"device": "nvme", "nvme_path": nvme} if nvme else {"device": "cpu"}
    zero = {"stage": stage, "offload_optimizer": off}
    if stage == 3:
        zero["offload_param"] = dict(off)
    cfg = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 10,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                                                     "weight_decay": 0.01}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-3,
                                                        "warmup_num_steps": 5}},
           "gradient_clipping": 1.0, "zero_optimization": zero}
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def get_args():
    parser = argparse.ArgumentParser(description="GPT on bytes, DeepSpeed style")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps")
    parser.add_argument("--eval_every", type=int, default=10)
    parser.add_argument("--save_dir", default=None)
    parser.add_argument("--load_dir", default=None)
    parser.add_argument("--ckpt_tag", default=None, help="the tag to load (default: latest)")
    parser.add_argument("--stage", type=int, default=2, help="ZeRO stage of the generated config")
    parser.add_argument("--nvme", default=None, help="offload to this directory (generated config)")
    parser.add_argument("--local_rank", type=int, default=-1, help="passed by the deepspeed launcher")
    parser = deepspeed.add_config_arguments(parser)
    return parser.parse_args()


def main():
    args = get_args()
    if args.deepspeed_config is None:
        where = args.save_dir or "."
        os.makedirs(where, exist_ok=True)
        args.deepspeed_config = default_config(os.path.join(where, "ds_config.json"), args.stage, args.nvme)
    torch.manual_seed(1337)
    model = GPT(layers=1)
    dataset = Windows(corpus())
    model_engine, optimizer, trainloader, lr_scheduler = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), training_data=dataset)

    if args.load_dir:
        path, client_state = model_engine.load_checkpoint(args.load_dir, args.ckpt_tag)
        start_epoch = client_state["epoch"] if path else 0
        print("loaded %s at step %d (epoch %d)" % (path, model_engine.global_steps, start_epoch))
    else:
        start_epoch = 0

    epoch = start_epoch
    data_iter = iter(trainloader)
    while model_engine.global_steps < args.steps:
        model_engine.train()
        try:
            x, y = next(data_iter)
        except StopIteration:
            epoch += 1
            trainloader.sampler.set_epoch(epoch)
            data_iter = iter(trainloader)
            x, y = next(data_iter)
        loss = model_engine(x, y)
        model_engine.backward(loss)
        model_engine.step()
        if model_engine.micro_steps % model_engine.gradient_accumulation_steps() == 0:  # a step was taken
            print("step %d loss %.6f lr %.6e" % (model_engine.global_steps, loss.item(),
                                                 model_engine.get_lr()[0]))
        if model_engine.global_steps % args.eval_every == 0 and \
                model_engine.micro_steps % model_engine.gradient_accumulation_steps() == 0:
            model_engine.eval()
            with torch.no_grad():
                ex, ey = dataset[0]
                print("eval step %d loss %.6f" % (model_engine.global_steps,
                                                  model_engine(ex[None], ey[None]).item()))
    if args.save_dir:
        model_engine.save_checkpoint(args.save_dir, tag="global_step%d" % model_engine.global_steps,
                                     client_state={"epoch": epoch, "rng": torch.get_rng_state()})


if __name__ == "__main__":
    main()
