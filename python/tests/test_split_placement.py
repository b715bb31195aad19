"""Split placement from the PyTorch front (zoffload/placement.h): the config passes through unchanged, so
zoffload.optimizer_max_in_cpu and "placement": "auto" reach the same planner as zo-train's. The losses and master
weights are the same bits whatever the split, and the engine holds less on NVMe the more it keeps in host memory.
The small GPT of train_gpt.py on the CPU, optimizer state on nvme."""
import os
import sys

import torch

import zoffload

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT, batches, config, corpus, train_steps  # noqa: E402

STEPS = 4
SPEEDS = {"nvme_read_gbps": 2, "nvme_write_gbps": 2, "h2d_gbps": 10, "d2h_gbps": 10, "adam_gparams_per_s": 1}


def _run(tmp_path, extra):
    cfg = config(device="nvme", nvme=str(tmp_path))
    cfg["zero_optimization"]["sub_group_size"] = 65536
    cfg["zoffload"] = dict({"speeds": SPEEDS}, **extra)
    torch.manual_seed(1337)
    engine, _, _, _ = zoffload.initialize(model=GPT(), config=cfg)
    losses = train_steps(engine, batches(corpus(), 8, 32, 0), STEPS)
    masters = {n: engine.master_weights(n) for n, _ in engine.params}
    mem = engine.memory()
    engine.close()
    return losses, masters, mem


def test_every_split_gives_the_same_bits(tmp_path, monkeypatch):
    monkeypatch.setenv("ZO_SPEEDS_CACHE", str(tmp_path / "speeds.json"))
    base = _run(tmp_path, {})
    for extra in ({"optimizer_max_in_cpu": 150000}, {"placement": "auto"},
                  {"placement": "auto", "placement_host_bytes": 1500000}):
        losses, masters, mem = _run(tmp_path, extra)
        assert losses == base[0], extra
        for n, w in base[1].items():
            assert torch.equal(w, masters[n]), (extra, n)
        assert mem["nvme_bytes"] < base[2]["nvme_bytes"], (extra, mem, base[2])
    assert not [f for f in os.listdir(tmp_path) if f.startswith("zoffload-rank")], "swap files left behind"
