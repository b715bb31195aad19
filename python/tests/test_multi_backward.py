"""Several engine.backward() calls before one engine.step() (DeepSpeedExamples' gan: the discriminator's loss on
real samples, then on generated ones, then one step) add up exactly as torch adds them in .grad: an engine fed
two backward() calls per optimizer step ends with the master weights, bit for bit, of an engine to which torch's
own .grad sums of the same two losses are handed at step(). Every ZeRO stage, the cpu and nvme optimizer tiers,
gradient_accumulation_steps 1 and 2, fp32 and bf16. The engine's gradient shard takes each pass's contribution
(zo_engine_grad_reopen between them); no parameter holds a .grad after backward(). With "early_adam": true (Adam
overlapping the first backward) the second backward() is refused naming the key, before it computes anything.
"""
import os
import sys

import pytest
import torch

import zoffload

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT, batches, config, corpus  # noqa: E402

STEPS = 3


def _run(cfg, gas, through_engine):
    """STEPS optimizer steps of a 1-layer GPT; the boundary micro-step has two losses (two batches). Through the
    engine: engine.backward() on each. Else torch sums both in .grad (loss.backward() outside the engine, scaled
    as the engine scales) and step() hands the sum over, on an engine configured with gradient accumulation 1
    that steps every gas micro-steps (torch's .grad holding the whole accumulation). Returns (losses, masters,
    .grad seen after any engine.backward())."""
    torch.manual_seed(1337)
    model = GPT(layers=1)
    if cfg.get("bf16", {}).get("enabled"):
        model = model.to(torch.bfloat16)
    engine, _, _, _ = zoffload.initialize(
        model=model, config=cfg if through_engine else dict(cfg, gradient_accumulation_steps=1))
    it = batches(corpus(), 2, 32, 0)
    losses, leftover = [], False
    for _ in range(STEPS):
        for mb in range(gas):
            passes = 2 if mb == gas - 1 else 1
            for _k in range(passes):
                x, y = next(it)
                loss = engine(x, y)
                if through_engine:
                    engine.backward(loss)
                    leftover |= any(p.grad is not None for p in model.parameters())
                else:
                    (loss * (engine.loss_scale / gas)).backward()
                losses.append(loss.item())
            if through_engine or mb == gas - 1:
                engine.step()
    masters = {n: engine.master_weights(n).clone() for n, _ in engine.params}
    engine.close()
    return losses, masters, leftover


CASES = [(stage, tier, gas, bf16) for stage in (1, 2, 3) for tier in ("cpu", "nvme") for gas in (1, 2)
         for bf16 in (False, True) if not (bf16 and gas == 2)]


@pytest.mark.parametrize("stage,tier,gas,bf16", CASES)
def test_two_backward_equal_torch_sum(tmp_path, stage, tier, gas, bf16):
    cfg = config(device=tier, nvme=str(tmp_path), batch=2, bf16=bf16)
    cfg["zero_optimization"]["stage"] = stage
    cfg["gradient_accumulation_steps"] = gas
    if stage == 3 and tier == "nvme":
        cfg["zero_optimization"]["offload_param"] = {"device": "nvme", "nvme_path": str(tmp_path)}
    le, me, leftover = _run(cfg, gas, True)
    lt, mt, _ = _run(cfg, gas, False)
    assert not leftover, "a parameter held a .grad after engine.backward()"
    assert le == lt
    for n in me:
        assert torch.equal(me[n], mt[n]), n
    print("\nstage %d %s gas %d %s: %d losses equal, last %.4f; %d masters equal bit for bit" % (
        stage, tier, gas, "bf16" if bf16 else "fp32", len(le), le[-1], len(me)))


def test_early_adam_refuses_second_backward():
    cfg = config(batch=2)
    cfg["zoffload"] = {"early_adam": True}
    torch.manual_seed(1337)
    model = GPT(layers=1)
    engine, _, _, _ = zoffload.initialize(model=model, config=cfg)
    it = batches(corpus(), 2, 32, 0)
    x, y = next(it)
    engine.backward(engine(x, y))
    loss = engine(*next(it))
    with pytest.raises(zoffload.ZoffloadError, match=r"zoffload\.early_adam is true"):
        engine.backward(loss)
    assert all(p.grad is None for p in model.parameters())  # nothing computed
    engine.step()  # the first backward's gradients still step
    engine.close()
