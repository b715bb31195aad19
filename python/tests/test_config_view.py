"""_lib.ConfigView: the Python front reads the resolved config by DeepSpeed JSON path (zo_config_get_*()), with no
ctypes mirror of zo_config_t's layout, so a field added anywhere in the struct breaks nothing here."""
import ctypes
import inspect
import json

import pytest

import zoffload
from zoffload import _lib, ds_api, engine, stage3, zero


def _view(cfg):
    buf = ctypes.create_string_buffer(_lib.lib.zo_config_sizeof())
    raw = json.dumps(cfg).encode()
    _lib.check(_lib.lib.zo_config_parse(raw, len(raw), b"config", None, buf), "parse")
    return _lib.ConfigView(buf)


def test_every_path_reads_with_its_type():
    v = _view({"train_batch_size": 6, "train_micro_batch_size_per_gpu": 3,
               "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})
    paths = _lib.config_paths()
    assert len(paths) > 60 and "zero_optimization.offload_param.device" in paths
    py = {_lib.CFG_I64: int, _lib.CFG_F64: float, _lib.CFG_BOOL: bool, _lib.CFG_STR: str}
    for p in paths:
        assert type(v.get(p)) is py[_lib.lib.zo_config_key_type(p.encode())], p
    assert (v.gradient_accumulation_steps, v.zero_optimization.stage) == (2, 3)
    assert v.zero_optimization.offload_param.device == "cpu" and v.zero_optimization.offload_param.nvme_path == ""
    assert (v.scheduler.type, v.optimizer.type, v.get("optimizer.params.betas[1]")) == ("none", "Adam", 0.999)
    with pytest.raises(zoffload.ZoffloadError, match=r'config path "zero_optimization\.stag": not a key'):
        v.get("zero_optimization.stag")
    with pytest.raises(AttributeError, match=r"zero_optimization\.stag"):
        v.zero_optimization.stag


def test_no_layout_mirror_of_zo_config_t():
    """No ctypes Structure in the package spells out zo_config_t's fields (they broke silently when a field was
    inserted: offload_param.device read as 2004037424), and no config buffer is viewed through from_buffer."""
    for mod in (_lib, zero, engine, stage3, ds_api):
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, ctypes.Structure):
                names = {f[0] for f in getattr(obj, "_fields_", [])}
                assert not names & {"train_batch_size", "zero_optimization", "offload_param", "warmup_min_lr"}, \
                    "%s.%s mirrors zo_config_t" % (mod.__name__, name)
        assert "from_buffer(" not in inspect.getsource(mod), mod.__name__
