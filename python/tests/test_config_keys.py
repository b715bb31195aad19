"""Config keys through the Python front, which hands the dict to the library as JSON (json.dumps) and adds no
key of its own but zoffload.device_arena_bytes on a GPU: an unknown key in a block the library reads raises
zoffload.ZoffloadError carrying the library's whole message (the JSON path and the closest known key), from a
dict and from a file; a documented DeepSpeed key with no effect here warns once, by name, only where the run differs
from DeepSpeed's (Hugging Face's stage 2 and 3 examples warn about nothing); HF accelerate's
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


def test_inert_keys_and_infinity(capfd):
    """Keys the Python front acts on (wall_clock_breakdown, the monitors) and DeepSpeed keys left off say nothing;
    one asked for and not built (comms_logger enabled) warns once, through the zoffload logger (on stderr)."""
    cfg = dict(BASE, steps_per_print=float("inf"), comms_logger={"enabled": True}, wall_clock_breakdown=False,
               flops_profiler={"enabled": False}, tensorboard={"enabled": False})
    engine, _, _, _ = zoffload.initialize(model=GPT(layers=1), config=cfg)
    assert engine.resolved.steps_per_print == 2**63 - 1  # never print
    err = capfd.readouterr().err
    assert err.count("[WARNING] [Rank 0] config: comms_logger is accepted but has no effect in zoffload") == 1, err
    for key in ("wall_clock_breakdown", "flops_profiler", "tensorboard"):
        assert "config: %s" % key not in err, err
    assert "not a DeepSpeed or zoffload key" not in err


def _hf_filled(cfg):
    """@cfg with Hugging Face's "auto" values as the Trainer would fill them (tests need no Trainer)."""
    return json.loads(json.dumps(cfg).replace('"auto"', "null"), object_hook=lambda d: {
        k: v if v is not None else AUTO.get(k, v) for k, v in d.items()})


AUTO = {"enabled": False, "lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "warmup_min_lr": 0,
        "warmup_max_lr": 1e-4, "warmup_num_steps": 10, "total_num_steps": 100, "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0, "train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
        "reduce_bucket_size": 4096, "stage3_prefetch_bucket_size": 3686, "stage3_param_persistence_threshold": 640}

# Hugging Face's ZeRO-2 example (transformers' DeepSpeed docs)
HF_ZERO2 = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                 "warmup_num_steps": "auto"}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "allgather_partitions": True, "allgather_bucket_size": 2e8, "overlap_comm": True,
                          "reduce_scatter": True, "reduce_bucket_size": 2e8, "contiguous_gradients": True},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False}
HF_ZERO3_NVME = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "configs", "hf_zero3_nvme.json")


@pytest.mark.parametrize("stage", [2, 3])
def test_hf_examples_cry_no_wolf(stage, tmp_path, capfd):
    """Hugging Face's stage 2 and stage 3 (NVMe) examples: no warning at all (their contiguous_gradients,
    reduce_scatter, allgather_partitions, aio threads, fast_init, ..._on_model_save are what zoffload does, or knobs
    it has no use for); at stage 3 through zero.Init and initialize(), which both parse the config, the info lines
    (shown with ZO_LOG_LEVEL=info) come once each."""
    import logging
    if stage == 2:
        cfg = _hf_filled(HF_ZERO2)
    else:
        with open(HF_ZERO3_NVME) as f:
            cfg = _hf_filled(json.load(f))
        for block in ("offload_optimizer", "offload_param"):
            cfg["zero_optimization"][block]["nvme_path"] = str(tmp_path)
    lib = logging.getLogger("zoffload.lib")
    seen = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = seen.append
    old = lib.level
    lib.setLevel(logging.INFO)
    lib.addHandler(handler)
    try:
        if stage == 3:
            with zoffload.zero.Init(config_dict_or_path=cfg):
                model = GPT(layers=1)
        else:
            model = GPT(layers=1)
        engine, _, _, _ = zoffload.initialize(model=model, config=cfg)
        engine.close()
    finally:
        lib.removeHandler(handler)
        lib.setLevel(old)
    config_lines = [r.getMessage() for r in seen if "config: " in r.getMessage()]
    assert not [r for r in seen if r.levelno >= logging.WARNING], [r.getMessage() for r in seen]
    assert len(config_lines) == len(set(config_lines)), config_lines
    if stage == 3:
        assert any("config: aio.thread_count is not used by zoffload" in m for m in config_lines), config_lines
    assert "WARNING" not in capfd.readouterr().err
