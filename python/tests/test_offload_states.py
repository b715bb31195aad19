"""engine.offload_states() / reload_states() (DeepSpeed 0.16+) on CPU models, whose engine's device memory is the
host backend's (zo_engine_offload_states moves it as on a GPU): the engine's device reservation given back while
offloaded (memory(): device_bytes 0, arena capacity 0, the host copy counted), a forward refused naming
reload_states() while lp_params are offloaded and still running with them kept, backward refused by the engine;
training after offload_states + reload_states identical to the bit with training straight through, at stage 2
(optimizer "cpu" and "none") and stage 3 (nvme); DeepSpeed's arguments (include as its OffloadStateTypeEnum values,
device cpu/none/nvme), refused by name when wrong; close() while offloaded keeps the parameters' values."""
import logging
import os
import sys

import pytest
import torch

import zoffload
from zoffload import offload_states as zs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT, batches, config, corpus, train_steps  # noqa: E402


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
    cfg["zero_optimization"]["offload_optimizer"]["pin_memory"] = tier != "none"
    cfg["zero_optimization"]["stage"] = stage
    if stage == 3:
        cfg["zero_optimization"]["offload_param"] = {"device": tier, "nvme_path": str(tmp_path)}
    engine, *_ = zoffload.initialize(model=GPT(layers=1), config=cfg)
    return engine


def _masters(engine):
    return {n: engine.master_weights(n).clone() for n, _ in engine.params}


def _moved_line(caplog):
    return [r.getMessage() for r in caplog.records if "moved from the engine's" in r.getMessage()]


@pytest.mark.parametrize("stage,tier", [(2, "cpu"), (2, "none"), (3, "nvme")])
def test_training_continues_bit_identical(tmp_path, caplog, stage, tier):
    a, b = _engine(tmp_path / "a", stage, tier), _engine(tmp_path / "b", stage, tier)
    ia, ib = batches(corpus(), 4, 32, 0), batches(corpus(), 4, 32, 0)
    first = train_steps(a, ia, 3)
    assert train_steps(b, ib, 3) == first
    before = b.memory()
    assert before["arena"]["capacity"] > 0
    S = zs.OffloadStateTypeEnum
    # what the engine holds in its device memory: the working weights (stage 2) or their cached copies (stage 3),
    # and with offload_optimizer "none" the optimizer's states and gradients too
    want = [S.lp_params] if tier != "none" else [S.optim_states, S.hp_params, S.lp_params, S.lp_grads]
    assert zs.info(b)["held"] == want
    with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
        assert b.offload_states() is None  # as DeepSpeed's
    during = b.memory()
    info = zs.info(b)
    assert info["offloaded"] == want and b._offloaded_states == want and info["held"] == []
    assert during["device_bytes"] == 0 and during["arena"]["capacity"] == 0
    assert info["released_bytes"] == before["arena"]["capacity"]
    assert during["host_bytes"] == before["host_bytes"] + info["host_bytes"]
    if stage == 2:  # the working weights (and state) now in the host copy
        assert info["host_bytes"] >= before["param_bytes"] + (before["state_bytes"] if tier == "none" else 0)
    line = _moved_line(caplog)
    assert len(line) == 1 and line[0].startswith("zoffload: offload_states: %s moved from the engine's device "
                                                 "(host backend) memory to pageable host memory (%d bytes)"
                                                 % (", ".join(s.value for s in want), info["host_bytes"])), line
    if tier != "none":
        assert "not moved: optim_states (%s" % ("NVMe" if tier == "nvme" else "host memory") in caplog.text
    x, y = next(batches(corpus(), 4, 32, 0))
    with pytest.raises(RuntimeError, match=r"lp_params are offloaded .*call engine.reload_states\(\) first"):
        b(x, y)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
        b.reload_states()
        b.reload_states()  # nothing offloaded: silent
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "zoffload: reload_states: %s back in the engine's device memory" % ", ".join(s.value for s in want)]
    after = b.memory()
    assert after["arena"]["capacity"] == before["arena"]["capacity"]
    assert after["device_bytes"] == before["device_bytes"] and after["host_bytes"] == before["host_bytes"]
    assert zs.info(b)["offloaded"] == [] and b._offloaded_states == []
    assert train_steps(b, ib, 4) == train_steps(a, ia, 4)
    ma, mb = _masters(a), _masters(b)
    assert all(torch.equal(ma[n], mb[n]) for n in ma)
    a.close()
    b.close()


def test_lp_params_kept_the_model_still_runs(tmp_path, caplog):
    """include without lp_params (optimizer "none": its states and gradients are in the engine's device memory):
    those move, the working weights stay in device memory (at new addresses the parameters follow), so the model
    still runs forward (e.g. to generate) with the same output; backward and step are refused naming the offloaded
    states, before anything is computed; after reload_states training is bit-identical."""
    a, b = _engine(tmp_path / "a", 2, "none"), _engine(tmp_path / "b", 2, "none")
    ia, ib = batches(corpus(), 4, 32, 0), batches(corpus(), 4, 32, 0)
    assert train_steps(b, ib, 2) == train_steps(a, ia, 2)
    x, y = next(batches(corpus(), 4, 32, 7))
    with torch.no_grad():
        want = a(x, y).item()
    S = zs.OffloadStateTypeEnum
    with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
        b.offload_states(include=[S.optim_states, "hp_params", "lp_grads"])
    info = zs.info(b)
    assert info["offloaded"] == [S.optim_states, S.hp_params, S.lp_grads]
    assert info["kept_device_bytes"] >= b.memory()["param_bytes"] > 0
    assert b.memory()["device_bytes"] == info["kept_device_bytes"]
    assert b.memory()["arena"]["capacity"] == 0
    with torch.no_grad():
        assert b(x, y).item() == want
    loss = b(x, y)
    for call in (lambda graph=loss: b.backward(graph), b.step):
        with pytest.raises(RuntimeError, match=r"optim_states, hp_params, lp_grads are offloaded .*reload_states"):
            call()
    del loss  # its graph views the parameters
    b.reload_states()
    assert train_steps(b, ib, 3) == train_steps(a, ia, 3)
    ma, mb = _masters(a), _masters(b)
    assert all(torch.equal(ma[n], mb[n]) for n in ma)
    a.close()
    b.close()


def test_views_of_the_engine_memory_refused(tmp_path):
    """A tensor taken from a parameter views the engine's device memory, which offload_states() frees: refused,
    nothing moved, training goes on; once it is gone the offload works."""
    e = _engine(tmp_path)
    it = batches(corpus(), 4, 32, 0)
    train_steps(e, it, 1)
    v = next(e.module.parameters()).detach()
    with pytest.raises(RuntimeError, match=r"1 tensor\(s\) taken from the model's parameters .* Nothing was moved"):
        e.offload_states()
    assert zs.info(e)["offloaded"] == [] and e.memory()["arena"]["capacity"] > 0
    assert torch.equal(v, next(e.module.parameters()))  # still viewing the engine's weights
    train_steps(e, it, 1)
    del v
    x, y = next(it)
    e.backward(e(x, y))  # mid-step (the gradients handed over): refused by the engine, the parameters unchanged
    with pytest.raises(zoffload.ZoffloadError, match="handed over since the last step"):
        e.offload_states()
    e.step()
    e.offload_states()
    assert zs.info(e)["offloaded"] == [zs.OffloadStateTypeEnum.lp_params]
    e.reload_states()
    train_steps(e, it, 1)
    e.close()


def test_close_while_offloaded_keeps_the_parameters(tmp_path):
    e = _engine(tmp_path)
    train_steps(e, batches(corpus(), 4, 32, 0), 1)
    want = {n: p.detach().clone() for n, p in e.module.named_parameters()}
    e.offload_states()
    assert all(p.isnan().all() and p.stride() == (0,) * p.dim() for p in e.module.parameters())
    e.close()
    got = dict(e.module.named_parameters())
    assert all(torch.equal(got[n], want[n]) for n in want)


def test_include_and_device_as_deepspeed_takes_them(tmp_path, caplog):
    e = _engine(tmp_path)
    with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
        e.offload_states(include=[zs.OffloadStateTypeEnum.optim_states, "hp_params"], device=zs.OffloadDeviceEnum.cpu,
                         pin_memory=False, non_blocking=True)
    assert [r.getMessage() for r in caplog.records if r.name == "zoffload.offload_states"] == [
        'zoffload: offload_states: not in the engine\'s device memory, so not moved: optim_states (host memory, '
        'offload_optimizer.device "cpu"); hp_params (host memory, offload_optimizer.device "cpu")']
    assert zs.info(e)["offloaded"] == [] and e.memory()["arena"]["capacity"] > 0
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
        e.reload_states(non_blocking=True)  # nothing was moved: silent
    assert [r for r in caplog.records if r.name == "zoffload.offload_states"] == []
    with caplog.at_level(logging.INFO, logger="zoffload.offload_states"):
        e.offload_states(device="none")
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "zoffload.offload_states"] == [
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
    """Where a GPU model's states live (the INFO line for those not moved): optimizer state in host memory,
    working weights resident on the GPU (stages 1-2)."""
    w = zs.placement(True, MEM, "cpu", "nvme", 0, stage=2)
    S = zs.OffloadStateTypeEnum
    assert w[S.optim_states] == ("host memory", 800, 'offload_optimizer.device "cpu"')
    assert w[S.hp_params] == ("host memory", 400, 'offload_optimizer.device "cpu"')
    assert w[S.lp_grads] == ("host memory", 200, 'offload_optimizer.device "cpu"')
    assert w[S.lp_params] == ("GPU memory", 100, "stage 2: resident")
    assert zs.placement(True, MEM, "cpu", "cpu", 0, stage=3)[S.lp_params] == ("host memory", 100,
                                                                           'offload_param.device "cpu"')
    assert w[S.contiguous_grad_buffer][1] == 0
