"""Hugging Face's Trainer on zoffload (zoffload.hf.ZoffloadTrainer): a GPT2LMHeadModel built from a small config
trains STEPS steps at stage 2 (optimizer on cpu) and at stage 3 (parameters and optimizer on nvme, the model
built under zoffload.zero.Init), with HF's ZeRO-3 template config ("auto" values from TrainingArguments) and the
Trainer's linear-warmup schedule; then a fresh model resumes the stage-3 run from checkpoint-STEPS/2. Prints each
step's loss and lr beside the Trainer's schedule, and whether stage 3 and the resumed run match. Not a benchmark.

    python3 python/examples/train_hf_trainer.py [--steps 50] [--layers 2] [--d 64]
"""
import argparse
import json
import os
import tempfile

import torch
import transformers

import zoffload.hf as zh

HERE = os.path.dirname(os.path.abspath(__file__))


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, vocab, seq):
        self.x = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(1))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class Recorder(zh.ZoffloadTrainer):
    """Each step's loss (full precision) and the lr the engine ran it with."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.rows = []

    def training_step(self, model, inputs):
        out = super().training_step(model, inputs)
        self.rows.append((self.zo_engine.global_steps, out.item(), self.zo_engine.last_info["lr"]))
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d", type=int, default=64)
    opt = ap.parse_args()
    work = tempfile.mkdtemp(prefix="zo-hf-")
    mcfg = transformers.GPT2Config(vocab_size=96, n_positions=16, n_embd=opt.d, n_layer=opt.layers, n_head=2)
    data = Tokens(8 * opt.steps, 96, 16)

    def zconfig(stage, name):
        with open(os.path.join(HERE, "..", "..", "tests", "configs", "hf_zero3_nvme.json")) as f:
            c = json.load(f)
        del c["scheduler"]  # the Trainer's schedule (its create_scheduler) drives the lr
        z = c["zero_optimization"]
        nvme = os.path.join(work, "nvme-" + name)  # one per engine: a live engine holds its swap directory
        os.makedirs(nvme, exist_ok=True)
        if stage == 3:
            z["offload_optimizer"]["nvme_path"] = z["offload_param"]["nvme_path"] = nvme
        else:
            z["stage"], z["offload_optimizer"] = 2, {"device": "cpu"}
            del z["offload_param"]
        return c

    def train(stage, name, seed=0, resume=None):
        zc = zconfig(stage, name)
        torch.manual_seed(seed)
        model = (zh.from_config(transformers.GPT2LMHeadModel, mcfg, zc) if stage == 3
                 else transformers.GPT2LMHeadModel(mcfg))
        args = transformers.TrainingArguments(
            output_dir=os.path.join(work, name), max_steps=opt.steps, per_device_train_batch_size=2,
            learning_rate=2e-3, warmup_steps=opt.steps // 10, weight_decay=0.01, save_steps=opt.steps // 2,
            logging_steps=opt.steps, report_to=[], use_cpu=True, seed=3, disable_tqdm=True)
        t = Recorder(model=model, args=args, train_dataset=data, zoffload_config=zc)
        t.train(resume_from_checkpoint=resume)
        return t

    s2 = train(2, "stage2")
    s3 = train(3, "stage3")
    ck = os.path.join(work, "stage3", "checkpoint-%d" % (opt.steps // 2))
    res = train(3, "resumed", seed=7, resume=ck)
    want = _schedule(opt.steps)
    print("step  loss(stage 2)       loss(stage 3 nvme)  loss(resumed)       lr(engine)        lr(Trainer's schedule)")
    resumed = {r[0]: r[1] for r in res.rows}
    for (step, l2, lr), (_, l3, _), w in zip(s2.rows, s3.rows, want):
        print("%4d  %.12f  %.12f  %-18s  %.10e  %.10e" % (step, l2, l3, "%.12f" % resumed[step] if step in resumed
                                                         else "-", lr, w))
    print("stage 3 nvme == stage 2, every loss bit for bit: %s" % ([r[1] for r in s3.rows] == [r[1] for r in s2.rows]))
    print("resumed from %s == uninterrupted, steps %d-%d bit for bit: %s"
          % (os.path.basename(ck), opt.steps // 2 + 1, opt.steps,
             [r[1] for r in res.rows] == [r[1] for r in s3.rows[opt.steps // 2:]]))
    print("engine lr == Trainer's schedule rounded to fp32, every step: %s"
          % (len(s2.rows) == opt.steps and all(lr == float(torch.tensor(w, dtype=torch.float32))
                                               for (_, _, lr), w in zip(s2.rows, want))))


def _schedule(steps):
    ref = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=2e-3)
    sched = transformers.get_scheduler("linear", ref, num_warmup_steps=steps // 10, num_training_steps=steps)
    out = []
    for _ in range(steps):
        out.append(sched.get_last_lr()[0])
        ref.step()
        sched.step()
    return out


if __name__ == "__main__":
    main()
