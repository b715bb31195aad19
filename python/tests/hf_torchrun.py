"""zoffload.hf.ZoffloadTrainer on the ranks a launcher started (tests/python_hf_torchrun.sh): a tiny GPT2LMHeadModel
(dropout off, so the ranks' RNG streams do not enter the losses) at stage 2 with the optimizer on cpu, or at stage 3
with parameters and optimizer on nvme (the model built under zoffload.zero.Init by zoffload.hf.from_config), the
Trainer's own AdamW and linear schedule. Usage:
    hf_torchrun.py STAGE GAS STEPS OUTDIR LOSSES [RESUME_FROM]
STAGE: 2 or 3; GAS: gradient_accumulation_steps; STEPS: max_steps; OUTDIR: the Trainer's output_dir (save_steps 3 writes
checkpoint-3 there); LOSSES: each rank writes LOSSES.rankR, one line per micro-batch: "<global step> <loss as
float.hex()>" (the loss compute_loss returned, before any division), and LOSSES.rankR.lr, the lr of each optimizer
step; after training, save_model(OUTDIR/final) writes the consolidated weights (rank 0). Two ranks at GAS 1 see,
at step k, the micro-batches one rank at GAS 2 sees as micro-batches 2k and 2k + 1 (accelerate deals the Trainer's
batches to the ranks in turn)."""
import os
import sys

import torch
import transformers

import zoffload.hf as zh
import zoffload.zero
from hf_tokens import SEQ, VOCAB, Tokens


class Recorder(zh.ZoffloadTrainer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.rows, self.lrs = [], []

    def compute_loss(self, model, inputs, return_outputs=False):
        out = super().compute_loss(model, inputs, return_outputs)
        if not return_outputs:
            self.rows.append("%d %s" % (self.state.global_step, out.item().hex()))
        return out

    def training_step(self, model, inputs):
        before = self.zo_engine.global_steps if self.zo_engine is not None else 0
        out = super().training_step(model, inputs)
        if self.zo_engine.global_steps != before:
            self.lrs.append(self.zo_engine.last_info["lr"].hex())
        return out


def main():
    stage, gas, steps, outdir, losses = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    resume = sys.argv[6] if len(sys.argv) > 6 else None
    # each rank its own initial weights: the engine starts every rank from rank 0's (as DeepSpeed's zero.Init and
    # engine broadcast them), so the two ranks still train the one rank's model
    torch.manual_seed(int(os.environ.get("RANK", "0")))
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    zc = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "train_batch_size": "auto", "gradient_clipping": "auto",
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    if stage == 3:
        nvme = os.path.join(outdir, "nvme")
        os.makedirs(nvme, exist_ok=True)
        zc["zero_optimization"] = {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": nvme},
                                   "offload_optimizer": {"device": "nvme", "nvme_path": nvme}}
        model = zh.from_config(transformers.GPT2LMHeadModel, cfg, zc)
        assert all(zoffload.zero.is_zero_param(p) for p in model.parameters())
    else:
        model = transformers.GPT2LMHeadModel(cfg)
    args = transformers.TrainingArguments(
        output_dir=outdir, max_steps=steps, per_device_train_batch_size=2, gradient_accumulation_steps=gas,
        learning_rate=2e-3, warmup_steps=2, weight_decay=0.01, logging_steps=1, save_strategy="steps", save_steps=3,
        report_to=[], use_cpu=True, seed=3, disable_tqdm=True, dataloader_drop_last=True)
    t = Recorder(model=model, args=args, train_dataset=Tokens(64), zoffload_config=zc)
    t.train(resume_from_checkpoint=resume)
    e = t.zo_engine
    rank = e.rank
    assert e.world_size == int(os.environ.get("WORLD_SIZE", "1")), (e.world_size, os.environ.get("WORLD_SIZE"))
    assert e.train_batch_size() == 2 * gas * e.world_size, e.train_batch_size()
    with open("%s.rank%d" % (losses, rank), "w") as f:
        f.write("\n".join(t.rows) + "\n")
    with open("%s.rank%d.lr" % (losses, rank), "w") as f:
        f.write("\n".join(t.lrs) + "\n")
    t.save_model(os.path.join(outdir, "final"))
    print("rank %d of %d: %d micro-batches, %d steps, global step %d" % (rank, e.world_size, len(t.rows), len(t.lrs),
                                                                          t.state.global_step), flush=True)


if __name__ == "__main__":
    main()
