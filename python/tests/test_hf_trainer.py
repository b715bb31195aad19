"""zoffload.hf: Hugging Face's Trainer (ZoffloadTrainer) at stage 2 (optimizer on cpu) and stage 3 (nvme) with a
tiny GPT2LMHeadModel built from a config, HF's "auto" values filled from TrainingArguments, the lr following the
Trainer's schedule, resume from checkpoint-N continuing exactly, models built and loaded under zero.Init
(from_config, from_pretrained), and accelerate (accelerate_initialize). Skipped without transformers or
accelerate (scripts/deps.sh installs both)."""
import json
import math
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import zoffload  # noqa: E402
import zoffload.hf as zh  # noqa: E402
import zoffload.zero as zero  # noqa: E402
from hf_tokens import SEQ, VOCAB, Tokens  # noqa: E402

HF_JSON = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "configs", "hf_zero3_nvme.json")


def gpt2_config():
    return transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=2)


def build(seed=0, stage=2, zc=None):
    """GPT2LMHeadModel from a config, random weights of @seed; under zero.Init at stage 3 (from_config)."""
    torch.manual_seed(seed)
    if stage == 3:
        return zh.from_config(transformers.GPT2LMHeadModel, gpt2_config(), zc)
    return transformers.GPT2LMHeadModel(gpt2_config())


def hf_config(stage, tmp_path, scheduler=False):
    """HF's ZeRO-3 NVMe template (tests/configs/hf_zero3_nvme.json, "auto" at every key the Trainer fills) with
    the swap directory under @tmp_path; stage 2: the optimizer on cpu, no offload_param. Without @scheduler the
    Trainer's own schedule runs."""
    with open(HF_JSON) as f:
        c = json.load(f)
    z = c["zero_optimization"]
    nvme = str(tmp_path / "nvme")
    os.makedirs(nvme, exist_ok=True)
    if stage == 3:
        z["offload_optimizer"]["nvme_path"] = z["offload_param"]["nvme_path"] = nvme
    else:
        z["stage"] = 2
        del z["offload_param"]
        z["offload_optimizer"] = {"device": "cpu"}
    if not scheduler:
        del c["scheduler"]
    return c


class Recorder(zh.ZoffloadTrainer):
    """Each micro-step's loss (full precision) and the lr each optimizer step ran with (the engine's step info)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.losses, self.lrs = [], []

    def compute_loss(self, model, inputs, return_outputs=False, **kw):  # transformers >= 4.46: num_items_in_batch
        out = super().compute_loss(model, inputs, return_outputs, **kw)
        if not return_outputs:  # training (evaluation asks for the outputs too)
            self.losses.append(out.item())
        return out

    def training_step(self, model, inputs, *rest):  # transformers >= 4.46: num_items_in_batch
        before = self.zo_engine.global_steps
        out = super().training_step(model, inputs, *rest)
        if self.zo_engine.global_steps != before:
            self.lrs.append(self.zo_engine.last_info["lr"])
        return out


def args(tmp_path, steps=50, **kw):
    base = dict(output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=2, learning_rate=2e-3,
                warmup_steps=5, weight_decay=0.01, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                seed=3, disable_tqdm=True)
    base.update(kw)
    return transformers.TrainingArguments(**base)


def trainer_schedule(a, steps):
    """The lr of each optimizer step as the Trainer's scheduler gives it, replayed on a torch optimizer."""
    opt = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=a.learning_rate)
    sched = transformers.get_scheduler(a.lr_scheduler_type, opt, num_warmup_steps=a.get_warmup_steps(steps),
                                       num_training_steps=steps)
    out = []
    for _ in range(steps):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


def f32(values):
    return torch.tensor(values, dtype=torch.float32).double().tolist()


def run(tmp_path, stage, steps=50, seed=0, resume=None, scheduler=False, **kw):
    zc = hf_config(stage, tmp_path, scheduler)
    a = args(tmp_path, steps, **kw)
    t = Recorder(model=build(seed, stage, zc), args=a, train_dataset=Tokens(), zoffload_config=zc)
    t.train(resume_from_checkpoint=resume)
    return t


def test_stage2_cpu_50_steps_lr_follows_trainer_schedule(tmp_path):
    """50 steps at stage 2 with the optimizer on cpu: the engine ran each step with the lr of the Trainer's
    linear-warmup schedule, the Trainer logged that schedule, the "auto" values came from the arguments."""
    t = run(tmp_path, 2)
    e = t.zo_engine
    assert (e.train_micro_batch_size_per_gpu(), e.gradient_accumulation_steps(), e.train_batch_size()) == (2, 1, 2)
    assert e.resolved.optimizer.params.lr == 2e-3 and e.resolved.optimizer.params.weight_decay == 0.01
    assert e.resolved.gradient_clipping == 1.0  # max_grad_norm
    want = trainer_schedule(t.args, 50)
    assert len(t.lrs) == 50
    assert t.lrs == f32(want)  # the engine runs the lr in fp32 (zo_engine_set_lr rounds it)
    logged = [h["learning_rate"] for h in t.state.log_history if "learning_rate" in h]
    assert logged == pytest.approx(want[1:] + [0.0], rel=1e-12, abs=0)  # logged after the step: the next lr
    assert len(t.losses) == 50 and all(torch.isfinite(torch.tensor(t.losses)))
    assert sum(t.losses[-10:]) < sum(t.losses[:10])


def test_stage3_nvme_50_steps_equals_stage2(tmp_path):
    """50 steps at stage 3 with parameters and optimizer state on nvme, the model built partitioned by
    zoffload.zero.Init (from_config): the losses and lrs of stage 2 bit for bit, every parameter empty between
    steps, and the saved model (save_pretrained of the consolidated weights) equal to the engine's masters."""
    s2 = run(tmp_path / "s2", 2)
    s3 = run(tmp_path / "s3", 3)
    assert type(s3.zo_engine).__name__ == "Stage3Engine"
    assert s3.losses == s2.losses
    assert s3.lrs == s2.lrs
    assert all(p.numel() == 0 for p in s3.model.parameters())
    ev2, ev3 = s2.evaluate(Tokens(8)), s3.evaluate(Tokens(8))  # the Trainer's evaluation through the hooks
    assert ev3["eval_loss"] == ev2["eval_loss"] and all(p.numel() == 0 for p in s3.model.parameters())
    s3.save_model(str(tmp_path / "final"))
    back = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "final"))
    for n, p in back.named_parameters():
        assert torch.equal(p, s3.zo_engine.master_weights(n)), n


def test_config_scheduler_auto_from_arguments(tmp_path):
    """The template's own WarmupDecayLR with "auto" warmup/total steps and lrs: filled from the arguments (warmup
    steps, max_steps, learning_rate) and run by the library; the Trainer logs that schedule."""
    t = run(tmp_path, 2, steps=8, scheduler=True, warmup_steps=3)
    s = t.zo_engine.resolved.scheduler.params
    assert (s.warmup_num_steps, s.total_num_steps, s.warmup_min_lr, s.warmup_max_lr) == (3, 8, 0.0, 2e-3)
    # DeepSpeed's WarmupDecayLR (log warmup), step k running the scheduler at last_batch_iteration k - 2
    want = [0.0]
    for it in range(7):
        gamma = math.log(it + 1) / math.log(3) if it < 3 else max(0.0, (8 - it) / (8 - 3))
        want.append(2e-3 * gamma)
    assert t.lrs == pytest.approx(f32(want), rel=1e-7, abs=0) and t.lrs[3] == f32([2e-3])[0]


@pytest.mark.parametrize("stage", [2, 3])
def test_resume_from_checkpoint_continues_exactly(tmp_path, stage):
    """save_steps=6 writes the engine's checkpoint into checkpoint-6; a new Trainer on a model of other weights,
    train(resume_from_checkpoint=checkpoint-6), gives the losses of the uninterrupted run's steps 7-12 bit for
    bit (gradient accumulation 2, dropout on: the Trainer's RNG state comes back too)."""
    kw = dict(save_strategy="steps", save_steps=6, gradient_accumulation_steps=2)
    full = run(tmp_path / "a", stage, steps=12, **kw)
    ck = tmp_path / "a" / "out" / "checkpoint-6"
    assert sorted(os.listdir(ck / "global_step6")) and (ck / "latest").read_text().strip() == "global_step6"
    assert (ck / "model.safetensors").is_file()
    resumed = run(tmp_path / "b", stage, steps=12, seed=7, resume=str(ck), **kw)
    assert len(full.losses) == 24 and len(resumed.losses) == 12
    assert resumed.losses == full.losses[12:]
    assert resumed.lrs == full.lrs[6:]
    assert resumed.state.global_step == 12


def test_bf16_model_from_arguments(tmp_path):
    """A "bf16": {"enabled": "auto"} block turned on by TrainingArguments(bf16=True) (the template's fp16 "auto"
    stays off): a model.to(torch.bfloat16) trains with bf16 working weights (no autocast: the
    engine's precision, as DeepSpeed's under HF), and the checkpoint's model.safetensors is bf16."""
    zc = hf_config(2, tmp_path)
    zc["bf16"] = {"enabled": "auto"}
    model = build().to(torch.bfloat16)
    t = Recorder(model=model, args=args(tmp_path, 4, bf16=True), train_dataset=Tokens(), zoffload_config=zc)
    assert not t.use_cpu_amp and not t.accelerator.native_amp
    t.train()
    assert t.zo_engine.wdtype == torch.bfloat16 and len(t.losses) == 4
    assert all(p.dtype == torch.bfloat16 for p in t.model.parameters())
    t.save_model(str(tmp_path / "final"))
    from safetensors.torch import load_file
    saved = load_file(str(tmp_path / "final" / "model.safetensors"))
    assert saved["transformer.wte.weight"].dtype == torch.bfloat16
    assert torch.equal(saved["transformer.wte.weight"].float(), t.zo_engine.master_weights("transformer.wte.weight")
                       .to(torch.bfloat16).float())


def test_mismatch_with_arguments_refused(tmp_path):
    """A config whose accumulation differs from the arguments' is refused naming both (HF's mismatch check)."""
    zc = hf_config(2, tmp_path)
    zc["gradient_accumulation_steps"], zc["train_batch_size"] = 4, 8
    t = zh.ZoffloadTrainer(model=build(), args=args(tmp_path, 2), train_dataset=Tokens(), zoffload_config=zc)
    with pytest.raises(ValueError, match="gradient_accumulation_steps=4 vs gradient_accumulation_steps=1"):
        t.train()


def test_optimizer_the_engine_cannot_run_refused(tmp_path):
    """args.optim="sgd" and a config without "optimizer": the Trainer's SGD is refused by name."""
    zc = hf_config(2, tmp_path)
    del zc["optimizer"]
    t = zh.ZoffloadTrainer(model=build(), args=args(tmp_path, 2, optim="sgd"), train_dataset=Tokens(),
                           zoffload_config=zc)
    with pytest.raises(TypeError, match="optimizer torch.optim.sgd.SGD cannot run in the engine"):
        t.train()


def test_hf_json_with_infinity_through_trainer(tmp_path):
    """HF's JSON as transformers writes it ("steps_per_print": Infinity), given as a file path: accepted."""
    zc = hf_config(2, tmp_path)
    zc["steps_per_print"] = float("inf")
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(zc))
    assert "Infinity" in path.read_text()
    t = Recorder(model=build(), args=args(tmp_path, 2), train_dataset=Tokens(), zoffload_config=str(path))
    t.train()
    assert len(t.losses) == 2


def test_from_pretrained_under_init(tmp_path):
    """from_pretrained at stage 3: built under zero.Init (every parameter partitioned: empty), the checkpoint's
    weights in the store, the engine's masters after initialize() equal to them, the first loss the plain
    model's."""
    torch.manual_seed(5)
    ref = transformers.GPT2LMHeadModel(gpt2_config())
    ref.save_pretrained(str(tmp_path / "pre"))
    nvme = str(tmp_path)
    zc = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": nvme},
                                "offload_optimizer": {"device": "nvme", "nvme_path": nvme}}}
    torch.manual_seed(9)  # other random weights: they must all be replaced
    m = zh.from_pretrained(transformers.GPT2LMHeadModel, str(tmp_path / "pre"), zc)
    assert not m.training
    assert all(zero.is_zero_param(p) and p.numel() == 0 for p in m.parameters())
    engine, *_ = zoffload.initialize(model=m, config=zc)
    for n, p in ref.named_parameters():
        assert torch.equal(engine.master_weights(n), p.detach()), n
    x = Tokens()[0]["input_ids"][None]
    assert torch.equal(m(input_ids=x, labels=x).loss, ref.eval()(input_ids=x, labels=x).loss)
    engine.close()


def test_accelerate(tmp_path):
    """An accelerate loop: Accelerator(gradient_accumulation_steps=2) and a data loader prepared by it, the engine
    from accelerate_initialize with "auto" batch keys filled from them; the losses of zoffload.initialize with
    the same values written out, bit for bit."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    AcceleratorState._reset_state(True)  # a singleton: the Trainers before (bf16=True) leave theirs
    zc = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
          "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    # mixed_precision named: TrainingArguments(bf16=True) above left ACCELERATE_MIXED_PRECISION=bf16 in os.environ
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2, mixed_precision="no")
    loader = torch.utils.data.DataLoader(Tokens(32), batch_size=2)
    opt = lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.0)  # noqa: E731
    model = build(4)
    engine, optimizer, sched, dl = zh.accelerate_initialize(acc, model, zc, loader,
                                                             optimizer=opt(model.parameters()))
    assert (engine.gradient_accumulation_steps(), engine.train_micro_batch_size_per_gpu()) == (2, 2)
    assert engine.wdtype == torch.float32  # "bf16": "auto" <- accelerator.mixed_precision "no"
    got = []
    for i, batch in enumerate(dl):
        loss = engine(**batch).loss
        engine.backward(loss)
        engine.step()
        got.append(loss.item())
        if i == 7:
            break
    engine.close()
    plain = dict(zc, gradient_accumulation_steps=2, train_micro_batch_size_per_gpu=2, train_batch_size=4,
                 bf16={"enabled": False})
    model = build(4)
    engine, *_ = zoffload.initialize(model=model, config=plain, optimizer=opt(model.parameters()))
    want = []
    for i, batch in enumerate(torch.utils.data.DataLoader(Tokens(32), batch_size=2)):
        loss = engine(**batch).loss
        engine.backward(loss)
        engine.step()
        want.append(loss.item())
        if i == 7:
            break
    steps = engine.global_steps
    engine.close()
    assert got == want and steps == 4
