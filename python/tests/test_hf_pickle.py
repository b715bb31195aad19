"""zoffload.hf.ZoffloadTrainer resume reads no pickle plainly (issue 41, item 1): the RNG state it saves is a
safetensors file (rng_state.safetensors, no pickle) and comes back on resume; a checkpoint's rng_state.pth or
pytorch_model.bin (files of another run, pickles) go through _ckpt.load_pickle, which refuses them on a torch that
cannot load them safely (CheckpointError naming the file) and never runs the code they name. Skipped without
transformers or accelerate."""
import os
import random

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import zoffload.hf as zh  # noqa: E402
from zoffload import _ckpt  # noqa: E402
from zoffload._ckpt import CheckpointError  # noqa: E402
from hf_tokens import SEQ, VOCAB, Tokens  # noqa: E402


class Evil:
    """Unpickling it opens (creates) the marker file: the proof that a load ran the file's code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def model(seed=0):
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=16,
                                                                n_layer=1, n_head=2))


def zconfig():
    return {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto", "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}


def trainer(tmp_path, steps=4, seed=0, **kw):
    base = dict(output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=2,
                learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=3,
                disable_tqdm=True)
    base.update(kw)
    return zh.ZoffloadTrainer(model=model(seed), args=transformers.TrainingArguments(**base),
                              train_dataset=Tokens(16), zoffload_config=zconfig())


def saved_checkpoint(tmp_path):
    """checkpoint-2 of a 4-step run saving every 2 steps (the engine's checkpoint, `latest`, the RNG state)."""
    trainer(tmp_path / "a", save_strategy="steps", save_steps=2).train()
    return tmp_path / "a" / "out" / "checkpoint-2"


def refused(excinfo, path):
    assert str(path) in str(excinfo.value), str(excinfo.value)


def test_rng_state_pth_not_unpickled(tmp_path):
    """A checkpoint's rng_state.pth whose unpickling creates a file: resume raises CheckpointError naming it (on
    this torch; from 2.6 weights_only=True refuses the global) and the file does not exist."""
    ck = saved_checkpoint(tmp_path)
    for f in ("rng_state.safetensors", "rng_state.pth"):
        if (ck / f).exists():
            os.remove(ck / f)
    marker = tmp_path / "marker_rng"
    torch.save({"python": Evil(str(marker))}, str(ck / "rng_state.pth"))
    with pytest.raises(CheckpointError) as ei:
        trainer(tmp_path / "b", seed=5).train(resume_from_checkpoint=str(ck))
    refused(ei, ck / "rng_state.pth")
    assert not marker.exists()


def test_pytorch_model_bin_without_latest_not_unpickled(tmp_path):
    """A Trainer checkpoint without the engine's (`latest`) holding a pickled pytorch_model.bin: refused by name,
    its code not run."""
    ck = tmp_path / "ck"
    ck.mkdir()
    marker = tmp_path / "marker_bin"
    torch.save({"transformer.wte.weight": Evil(str(marker))}, str(ck / "pytorch_model.bin"))
    with pytest.raises(CheckpointError) as ei:
        trainer(tmp_path / "b").train(resume_from_checkpoint=str(ck))
    refused(ei, ck / "pytorch_model.bin")
    assert not marker.exists()


def test_optimizer_pt_without_latest_not_unpickled(tmp_path):
    """A plain Trainer checkpoint (model.safetensors, optimizer.pt, scheduler.pt, no `latest`): the weights load,
    the pickled optimizer.pt is refused by name and its code not run."""
    ck = tmp_path / "ck"
    ck.mkdir()
    model(1).save_pretrained(str(ck), safe_serialization=True)
    transformers.TrainerState(global_step=2, max_steps=4).save_to_json(str(ck / "trainer_state.json"))
    marker = tmp_path / "marker_opt"
    torch.save({"state": Evil(str(marker))}, str(ck / "optimizer.pt"))
    torch.save({"last_epoch": Evil(str(marker))}, str(ck / "scheduler.pt"))
    with pytest.raises(CheckpointError) as ei:
        trainer(tmp_path / "b").train(resume_from_checkpoint=str(ck))
    refused(ei, ck / "optimizer.pt")
    assert not marker.exists()


def test_rng_state_saved_without_pickle_and_restored(tmp_path):
    """The RNG state the trainer saves is rng_state.safetensors (read back without pickle, no rng_state.pth), and
    resume sets exactly it: torch's, numpy's and Python's generators give what they gave after saving."""
    ck = tmp_path / "ck"
    t = trainer(tmp_path / "a", steps=1)
    torch.manual_seed(11)
    np.random.seed(12)
    random.seed(13)
    t._save_rng_state(str(ck))
    want = (torch.rand(4), np.random.rand(3), random.random())
    assert (ck / "rng_state.safetensors").is_file() and not (ck / "rng_state.pth").exists()
    state = _ckpt.read_client_state(str(ck / "rng_state.safetensors"))
    assert {"python", "numpy", "cpu"} <= set(state) and state["cpu"].dtype == torch.uint8
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    t._load_rng_state(str(ck))
    got = (torch.rand(4), np.random.rand(3), random.random())
    assert torch.equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and got[2] == want[2]


def test_resume_round_trip_restores_rng(tmp_path):
    """save_steps=2 of a 4-step run; a fresh trainer resumed from checkpoint-2 (a model of other weights) ends
    with the uninterrupted run's weights, and the RNG state it restored is the one saved in checkpoint-2."""
    full = trainer(tmp_path / "a", save_strategy="steps", save_steps=2)
    full.train()
    ck = tmp_path / "a" / "out" / "checkpoint-2"
    assert (ck / "rng_state.safetensors").is_file() and not (ck / "rng_state.pth").exists()
    saved = _ckpt.read_client_state(str(ck / "rng_state.safetensors"))
    resumed = trainer(tmp_path / "b", seed=5)
    seen = {}
    load = resumed._load_rng_state

    def spy(checkpoint):
        load(checkpoint)
        seen["cpu"] = torch.random.get_rng_state()
    resumed._load_rng_state = spy
    resumed.train(resume_from_checkpoint=str(ck))
    assert torch.equal(seen["cpu"], saved["cpu"])
    assert resumed.state.global_step == 4
    for n, p in full.model.named_parameters():
        assert torch.equal(p, dict(resumed.model.named_parameters())[n]), n
