"""The throughput timer's device synchronizations (monitor.Reporter._sync_now): only in the micro-steps of the
optimizer steps whose figures steps_per_print prints, not at every micro-step (a host sync there stalls the queue the
engine keeps full). A CPU engine whose reporter is told it runs on CUDA, torch.cuda.synchronize replaced by a
recorder of the engine's step counters at each call; the printed throughput lines still appear at the same steps with
rates that are numbers."""
import re

import torch

import zoffload
from test_logging import Records, _model


def _run(monkeypatch, gas, steps, spp, breakdown=False):
    cfg = {"train_batch_size": 4 * gas, "gradient_accumulation_steps": gas, "steps_per_print": spp,
           "wall_clock_breakdown": breakdown, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    engine, *_ = zoffload.initialize(model=_model(), config=cfg)
    engine._reporter.cuda = True  # as on a GPU: the timers would synchronize the device
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append((engine.global_steps, engine.micro_steps)))
    try:
        with Records() as rec:
            x, y = torch.randn(4, 8), torch.randn(4, 1)
            for _ in range(steps * gas):
                loss = torch.nn.functional.mse_loss(engine(x), y)
                engine.backward(loss)
                engine.step()
    finally:
        engine.close()
    return syncs, rec.messages()


def test_syncs_only_in_printing_steps(monkeypatch):
    gas, spp = 2, 5
    syncs, lines = _run(monkeypatch, gas=gas, steps=12, spp=spp)
    # optimizer steps 5 and 10 print: each of their micro-steps synchronizes at its first forward and at its step()
    # (global_steps counts the steps done: 4 while step 5 runs, 5 once its boundary step() has counted it)
    want = []
    for step in (5, 10):
        for m in range(gas):
            micro = (step - 1) * gas + m
            want.append((step - 1, micro))  # forward_begin
            want.append((step if m == gas - 1 else step - 1, micro + 1))  # step_end
    assert syncs == want, syncs
    tput = [m for m in lines if "SamplesPerSec" in m]
    assert [re.search(r"global_step=(\d+)", m).group(1) for m in tput] == ["5", "10"]
    for m in tput:  # the printed rates are measured (positive numbers), not -inf
        cur = float(re.search(r"CurrSamplesPerSec=([0-9.e+-]+|-?inf)", m).group(1))
        avg = float(re.search(r"RunningAvgSamplesPerSec=([0-9.e+-]+|-?inf)", m).group(1))
        assert cur > 0 and avg > 0, m


def test_breakdown_still_synchronizes_its_timers(monkeypatch):
    """wall_clock_breakdown asks for timings: its timers synchronize at every call, as DeepSpeed's."""
    syncs, lines = _run(monkeypatch, gas=1, steps=4, spp=2, breakdown=True)
    assert {g for g, _ in syncs} == {0, 1, 2, 3, 4}
    assert any(m.startswith("[Rank 0] time (ms), mean per optimizer step of steps 3-4") for m in lines), lines
