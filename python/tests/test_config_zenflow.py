"""zero_optimization.zenflow (DeepSpeed's ZenFlow: top-k gradient columns updated each step, the rest every
update_interval steps) is refused by name with the reason, not accepted with no effect: zoffload would run exact
Adam on every element and train a different model than DeepSpeed does. null (DeepSpeed's default, ZenFlow off)
is accepted without a word; a misspelling is suggested as zenflow."""
import os
import sys

import pytest

import zoffload

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT  # noqa: E402

ZENFLOW = {"topk_ratio": 0.1, "update_interval": 2, "select_strategy": "auto", "overlap_step": True}  # DeepSpeed's


def _cfg(**zero):
    return {"train_micro_batch_size_per_gpu": 1,
            "zero_optimization": dict({"stage": 2, "offload_optimizer": {"device": "cpu"}}, **zero)}


@pytest.mark.parametrize("value", [ZENFLOW, {}, True])
def test_zenflow_refused_with_reason(value):
    with pytest.raises(zoffload.ZoffloadError) as e:
        zoffload.initialize(model=GPT(layers=1), config=_cfg(zenflow=value))
    msg = str(e.value)
    assert "config: zero_optimization.zenflow: ZenFlow (top-k stall-free updates) is not built in zoffload" in msg
    assert "exact Adam to every element every step; remove the key (or set it to null)" in msg
    assert msg.endswith("(ZO_ERR_CONFIG)")


def test_zenflow_null_accepted_silently(capfd):
    engine, *_ = zoffload.initialize(model=GPT(layers=1), config=_cfg(zenflow=None))
    engine.close()
    assert "zenflow" not in capfd.readouterr().err


def test_zenflow_misspelt_suggested():
    with pytest.raises(zoffload.ZoffloadError, match="zero_optimization.zenflw: not a DeepSpeed or zoffload key; "
                                                     "did you mean zero_optimization.zenflow\\?"):
        zoffload.initialize(model=GPT(layers=1), config=_cfg(zenflw=ZENFLOW))
