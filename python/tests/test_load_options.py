"""load_checkpoint's options as DeepSpeed has them (ds_api.py over zo_engine_load_ex): load_module_only /
load_optimizer_states=False (the weights only, Adam state fresh: fine-tuning), load_lr_scheduler_states=False and
load_module_strict=False (missing / unexpected names). A tiny MLP, a few steps, on the CPU."""
import json
import os
import struct
import warnings

import pytest
import torch

import zoffload

from test_ds_api import cfg, data, mlp, run, _lambda


def _masters(e):
    return {n: e.master_weights(n).clone().flatten() for n, _ in e.params}


def _cfg(lr, stage=2, nvme=None):
    c = cfg()
    c["optimizer"]["params"]["lr"] = lr
    c["zero_optimization"]["stage"] = stage
    if nvme is not None:  # the state on NVMe: the weights-only load writes the masters through the swap layer
        os.makedirs(nvme, exist_ok=True)
        c["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": nvme}
    return c


def _exp_avg_all_zero(ckpt):
    """(the manifest's step, whether every exp_avg / exp_avg_sq byte of rank 0's shard file is zero)"""
    with open(os.path.join(ckpt, "manifest.json")) as f:
        m = json.load(f)
    with open(os.path.join(ckpt, "rank00000.bin"), "rb") as f:
        blob = f.read()
    zero = all(not any(blob[t[k]["offset"]:t[k]["offset"] + t[k]["nbytes"]])
               for t in m["tensors"] for k in ("exp_avg", "exp_avg_sq"))
    nonzero_master = any(any(blob[t["master"]["offset"]:t["master"]["offset"] + t["master"]["nbytes"]])
                         for t in m["tensors"])
    return m["step"], zero and nonzero_master


@pytest.mark.parametrize("stage,tier", [(2, "cpu"), (3, "cpu"), (2, "nvme")])
def test_load_module_only_fine_tunes(tmp_path, stage, tier):
    nvme = str(tmp_path / "nvme") if tier == "nvme" else None
    e1, _, _, _ = zoffload.initialize(model=mlp(0), config=_cfg(1e-2, stage, nvme))
    run(e1, 3)
    e1.save_checkpoint(tmp_path / "a", tag="global_step3", client_state={"epoch": 1})
    saved = _masters(e1)
    assert _exp_avg_all_zero(str(tmp_path / "a" / "global_step3")) == (3, False)
    e1.close()
    # a new engine with another lr, the module's weights only
    e2, _, _, _ = zoffload.initialize(model=mlp(5), config=_cfg(3e-3, stage, nvme))
    path, client = e2.load_checkpoint(tmp_path / "a", load_module_only=True)
    assert path == str(tmp_path / "a" / "global_step3") and client == {"epoch": 1}
    got = _masters(e2)
    assert all(torch.equal(got[n], saved[n]) for n in saved)
    assert (e2.global_steps, e2.micro_steps, e2.applied_steps) == (0, 0, 0)
    e2.save_checkpoint(tmp_path / "b", tag="now")  # Adam's moments and step as a fresh engine's
    assert _exp_avg_all_zero(str(tmp_path / "b" / "now")) == (0, True)
    # training proceeds as a fresh engine started from the saved weights with lr 3e-3
    ref_model = mlp(5)
    with torch.no_grad():
        for n, p in ref_model.named_parameters():
            p.copy_(saved[n].view(p.shape))
    ref, _, _, _ = zoffload.initialize(model=ref_model, config=_cfg(3e-3, stage, nvme and nvme + "-ref"))
    assert run(e2, 3, 3) == run(ref, 3, 3)
    assert e2.last_info["lr"] == pytest.approx(3e-3)
    ref.close()
    e2.close()


def _sched_engine(seed, lr=1e-2):
    model = mlp(seed)
    client = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(client, _lambda)
    return zoffload.initialize(model=model, optimizer=client, lr_scheduler=sched, config=cfg(optimizer=False))


def test_load_optimizer_states_false_and_scheduler(tmp_path):
    e1, _, _, s1 = _sched_engine(0)
    run(e1, 3)
    e1.save_checkpoint(tmp_path, tag="global_step3")
    saved = _masters(e1)
    e1.close()
    # load_optimizer_states=False: weights, counters and the scheduler; Adam's state and step the engine's (fresh)
    e2, _, _, s2 = _sched_engine(5)
    e2.load_checkpoint(tmp_path, load_optimizer_states=False)
    assert all(torch.equal(_masters(e2)[n], saved[n]) for n in saved)
    assert (e2.global_steps, e2.micro_steps, e2.applied_steps, s2.last_epoch) == (3, 3, 0, 3)
    e2.save_checkpoint(tmp_path / "b", tag="now")
    assert _exp_avg_all_zero(str(tmp_path / "b" / "now")) == (0, True)
    e2.close()
    # load_lr_scheduler_states=False: everything else, the scheduler as it was
    e3, _, _, s3 = _sched_engine(5)
    e3.load_checkpoint(tmp_path, load_lr_scheduler_states=False)
    assert (e3.global_steps, e3.applied_steps, s3.last_epoch) == (3, 3, 0)
    e3.close()


class Other(torch.nn.Module):
    """mlp()'s first layer under the same name, its last one under another ("4" for "2")."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(9)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Identity(), torch.nn.Tanh(),
                                       torch.nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


def test_load_module_strict_false(tmp_path):
    e1, _, _, _ = zoffload.initialize(model=mlp(0), config=cfg())
    run(e1, 2)
    e1.save_checkpoint(tmp_path, tag="t")
    saved = _masters(e1)
    e1.close()
    model = torch.nn.Sequential(*Other().net)  # names 0.* and 4.*
    init = {n: p.detach().clone().flatten() for n, p in model.named_parameters()}
    e2, _, _, _ = zoffload.initialize(model=model, config=cfg())
    with pytest.raises(Exception, match="tensors"):
        e2.load_checkpoint(tmp_path, tag="t")  # strict: the names must match
    with pytest.warns(UserWarning, match=r"missing keys \(kept as they were\) \['4.weight', '4.bias'\]; "
                                         r"unexpected keys \(ignored\) \['2.weight', '2.bias'\]"):
        path, _ = e2.load_checkpoint(tmp_path, tag="t", load_module_strict=False)
    assert e2.last_load_incompatible_keys == (["4.weight", "4.bias"], ["2.weight", "2.bias"])
    got = _masters(e2)
    assert torch.equal(got["0.weight"], saved["0.weight"]) and torch.equal(got["0.bias"], saved["0.bias"])
    assert torch.equal(got["4.weight"], init["4.weight"]) and torch.equal(got["4.bias"], init["4.bias"])
    assert torch.equal(model[0].weight.detach().flatten(), saved["0.weight"])  # the module's weights too
    assert e2.applied_steps == 2
    run(e2, 1, 2)
    e2.close()
