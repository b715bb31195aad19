"""Config keys through the Python front, which hands the dict to the library as JSON (json.dumps) and adds no
key of its own but zoffload.device_arena_bytes on a GPU: an unknown key in a block the library reads raises
zoffload.ZoffloadError carrying the library's whole message (the JSON path and the closest known key), from a
dict and from a file; a documented DeepSpeed key with no effect here warns once, by name; HF accelerate's
"steps_per_print": float("inf") (json.dumps writes Infinity) is accepted."""
import json
import os
import sys

import pytest

import zoffload

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT  # noqa: E402

BASE = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}

ERRORS = [
    ({"zero_optimization": {"stag": 2}},
     "config: zero_optimization.stag: not a DeepSpeed or zoffload key; did you mean zero_optimization.stage?"),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"devise": "cpu"}}},
     "config: zero_optimization.offload_optimizer.devise: not a DeepSpeed or zoffload key; did you mean "
     "zero_optimization.offload_optimizer.device?"),
    ({"zero_optimisation": {"stage": 2}},
     "config: zero_optimisation: not a DeepSpeed or zoffload key; did you mean zero_optimization?"),
    ({"optimizer": {"type": "AdamW", "params": {"betaz": [0.9, 0.99]}}},
     "config: optimizer.params.betaz: not a parameter of AdamW (it takes lr, betas, eps, weight_decay, "
     "bias_correction, adam_w_mode, amsgrad); DeepSpeed would reject it too; did you mean optimizer.params.betas?"),
    ({"fp16": {"enabeld": True}},
     "config: fp16.enabeld: not a DeepSpeed or zoffload key; did you mean fp16.enabled?"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"devise": "cpu"}}},  # the stage-3 engine parses it too
     "config: zero_optimization.offload_param.devise: not a DeepSpeed or zoffload key; did you mean "
     "zero_optimization.offload_param.device?"),
]


@pytest.mark.parametrize("extra,msg", ERRORS)
def test_unknown_key_raises_the_library_message(extra, msg):
    cfg = dict(BASE, **extra)
    with pytest.raises(zoffload.ZoffloadError) as e:
        zoffload.initialize(model=GPT(layers=1), config=cfg)
    assert "zoffload.initialize: config: " + msg + " (ZO_ERR_CONFIG)" == str(e.value)


def test_unknown_key_in_a_file(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(dict(BASE, fp16={"enabeld": True}), indent=1))
    with pytest.raises(zoffload.ZoffloadError, match="ds.json: fp16.enabeld: not a DeepSpeed or zoffload key; "
                                                     "did you mean fp16.enabled\\?"):
        zoffload.initialize(model=GPT(layers=1), config=str(path))


def test_inert_keys_warn_once_and_infinity(capfd):
    cfg = dict(BASE, steps_per_print=float("inf"), comms_logger={"enabled": False}, wall_clock_breakdown=False,
               flops_profiler={"enabled": False}, tensorboard={"enabled": False})
    engine, _, _, _ = zoffload.initialize(model=GPT(layers=1), config=cfg)
    assert engine.resolved.steps_per_print == 2**63 - 1  # never print
    err = capfd.readouterr().err
    for key in ("comms_logger", "wall_clock_breakdown", "flops_profiler", "tensorboard"):
        assert err.count("config: %s is accepted but has no effect yet" % key) == 1, err
    assert "not a DeepSpeed or zoffload key" not in err
