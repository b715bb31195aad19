"""engine.offload_states() / reload_states() (DeepSpeed 0.16+): DeepSpeed's arguments (include as its
OffloadStateTypeEnum values, device cpu/none/nvme), refused by name when wrong; where each state lives reported
(INFO for host memory and NVMe, a WARNING with the bytes for GPU memory, which stays: the GPU cases from
offload_states.placement() with a GPU engine's numbers); training after offload_states + reload_states identical
to the bit with training straight through, at stage 2 (cpu) and stage 3 (nvme)."""
import logging
import os
import sys

import pytest
import torch

import zoffload
from zoffload import offload_states as zs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT, batches, config, corpus  # noqa: E402


@pytest.fixture(autouse=True)
def _zoffload_records(caplog):
    """The zoffload logger has its own handler and does not propagate to the root (as DeepSpeed's): its records
    are handed to caplog's handler too."""
    lg = logging.getLogger("zoffload")
    lg.addHandler(caplog.handler)
    yield
    lg.removeHandler(caplog.handler)


def _engine(tmp_path, stage=2, tier="cpu"):
    torch.manual_seed(7)
    if tier == "nvme":
        os.makedirs(tmp_path)
    cfg = config(device=tier, nvme=str(tmp_path) if tier == "nvme" else None, batch=4)
    cfg["zero_optimization"]["stage"] = stage
    if stage == 3:
        cfg["zero_optimization"]["offload_param"] = {"device": tier, "nvme_path": str(tmp_path)}
    engine, *_ = zoffload.initialize(model=GPT(layers=1), config=cfg)
    return engine


def _train(engine, it, steps):
    losses = []
    for _ in range(steps):
        x, y = next(it)
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def _masters(engine):
    return {n: engine.master_weights(n).clone() for n, _ in engine.params}


@pytest.mark.parametrize("stage,tier", [(2, "cpu"), (3, "nvme")])
def test_training_continues_bit_identical(tmp_path, caplog, stage, tier):
    a, b = _engine(tmp_path / "a", stage, tier), _engine(tmp_path / "b", stage, tier)
    ia, ib = batches(corpus(), 4, 32, 0), batches(corpus(), 4, 32, 0)
    first = _train(a, ia, 3)
    assert _train(b, ib, 3) == first
    with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
        b.offload_states()
        b.reload_states()
    text = caplog.text
    where = "NVMe" if tier == "nvme" else "host memory"
    assert ("offload_states: nothing to move (a CPU model: its engine runs on the host): optim_states (%d bytes) in %s"
            % (2 * (b.memory()["state_bytes"] // 3), where)) in text, text
    assert "reload_states: optim_states, hp_params, lp_params, lp_grads, contiguous_grad_buffer were not moved" in text
    assert "stay in GPU memory" not in text
    assert _train(b, ib, 4) == _train(a, ia, 4)
    ma, mb = _masters(a), _masters(b)
    assert all(torch.equal(ma[n], mb[n]) for n in ma)
    a.close()
    b.close()


def test_include_and_device_as_deepspeed_takes_them(tmp_path, caplog):
    e = _engine(tmp_path)
    with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
        e.offload_states(include=[zs.OffloadStateTypeEnum.optim_states, "hp_params"], device=zs.OffloadDeviceEnum.cpu,
                         pin_memory=False, non_blocking=True)
    line = [r.getMessage() for r in caplog.records if "nothing to move" in r.getMessage()]
    assert len(line) == 1 and "optim_states" in line[0] and "hp_params" in line[0] and "lp_params" not in line[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
        e.reload_states(non_blocking=True)
        e.reload_states()  # nothing offloaded: silent
    assert [r.getMessage() for r in caplog.records] == [
        "zoffload: reload_states: optim_states, hp_params were not moved; nothing to bring back"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
        e.offload_states(device="none")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "zoffload: offload_states: no device given (device none); nothing offloaded")]
    e.close()


@pytest.mark.parametrize("kw,msg", [
    ({"include": ["optim_states", "momentum"]}, "include has 'momentum', not a state DeepSpeed offloads; valid: "
     "optim_states, hp_params, lp_params, lp_grads, contiguous_grad_buffer"),
    ({"include": "weights"}, "include has 'weights'"),
    ({"device": "gpu"}, "device 'gpu'; valid: none, cpu, nvme"),
    ({"device": "nvme"}, "device nvme: NVMe is not a target for offloading states"),
])
def test_bad_arguments_named(tmp_path, kw, msg):
    e = _engine(tmp_path)
    with pytest.raises(ValueError) as err:
        e.offload_states(**kw)
    assert msg in str(err.value)
    e.close()


def test_closed_engine_refuses():
    e = _engine(None)
    e.close()
    with pytest.raises(RuntimeError, match=r"engine.offload_states\(\) after engine.close\(\)"):
        e.offload_states()


MEM = {"state_bytes": 3 * 400, "grad_bytes": 200, "param_bytes": 100}


def test_gpu_placement_optimizer_on_cpu():
    """A GPU model, optimizer state on host memory, working weights resident on the GPU (stages 1-2)."""
    w = zs.placement(True, MEM, "cpu", "nvme", 0, stage=2)
    S = zs.OffloadStateTypeEnum
    assert w[S.optim_states] == ("host memory", 800, 'offload_optimizer.device "cpu"')
    assert w[S.hp_params] == ("host memory", 400, 'offload_optimizer.device "cpu"')
    assert w[S.lp_grads] == ("host memory", 200, 'offload_optimizer.device "cpu"')
    assert w[S.lp_params] == ("GPU memory", 100, "stage 2: resident")
    assert zs.placement(True, MEM, "cpu", "cpu", 0, stage=3)[S.lp_params] == ("host memory", 100,
                                                                           'offload_param.device "cpu"')
    assert w[S.contiguous_grad_buffer][1] == 0


def test_gpu_state_that_stays_is_warned_with_bytes(caplog):
    """offload() on a GPU engine (a stand-in object with a GPU engine's numbers: torch here has no CUDA): the
    states in GPU memory named in a WARNING with their bytes, the rest at INFO."""

    class Z:
        stage = 3

        class offload_optimizer:
            device = "none"

        class offload_param:
            device = "nvme"

    class Engine:
        class resolved:
            zero_optimization = Z

        class place:
            cuda = True

        def memory(self):
            return MEM

    emptied = []
    orig = torch.cuda.empty_cache
    torch.cuda.empty_cache = lambda: emptied.append(1)
    try:
        with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
            zs.offload(Engine(), None, "cpu", True, False)
    finally:
        torch.cuda.empty_cache = orig
    recs = {r.levelname: r.getMessage() for r in caplog.records}
    assert recs["WARNING"].startswith(
        'zoffload: offload_states: optim_states (800 bytes, offload_optimizer.device "none"), hp_params (400 bytes, '
        'offload_optimizer.device "none"), lp_grads (200 bytes, offload_optimizer.device "none") stay in GPU memory '
        "(1400 bytes in all)")
    assert "lp_params (100 bytes) in NVMe" in recs["INFO"]
    assert emptied == [1]
