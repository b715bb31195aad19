"""A checkpoint's client state checked whole before anything is applied (issue 41, items 2 and 5): optimizer
param_groups and lr scheduler state outside the engine's own ranges are refused naming the file and the field with
the engine, its optimizer and scheduler as they were; loaded tensors are copies, not memory mapped from the file;
numpy entries of shapes numpy cannot make are refused naming the file. A tiny MLP on the CPU."""
import math
import shutil

import pytest
import torch

from zoffload import _ckpt
from test_checkpoint_safety import engine, resign, same, saved, snapshot, train  # noqa: F401 (saved: a fixture)

CS = _ckpt.CLIENT_STATE_FILE


def crafted(tmp_path, saved, edit):
    """A copy of @saved whose client state @edit(state) changed, and the client-state file's path."""
    root = tmp_path / "crafted"
    shutil.copytree(saved, root)
    cs = root / "global_step2" / CS
    state = _ckpt.read_client_state(str(cs))
    edit(state)
    cs.write_bytes(_ckpt.client_state_bytes(state))
    resign(cs.parent)  # crafted on purpose: past the checksum, to the checks of the values
    return root, cs


def set_group(key, value):
    def edit(state):
        state["optimizer"]["param_groups"][0][key] = value
    return edit


def set_sched(key, value):
    def edit(state):
        state["lr_scheduler"][key] = value
    return edit


def drop_optimizer(state):
    state["optimizer"] = None


CASES = [
    ("lr 150", set_group("lr", 150.0), r"optimizer.param_groups\[0\].lr: 150.0 is outside \[0, 100\]"),
    ("lr NaN", set_group("lr", math.nan), r"optimizer.param_groups\[0\].lr: nan is outside"),
    ("lr text", set_group("lr", "0.1"), r"optimizer.param_groups\[0\].lr: '0.1' is outside"),
    ("betas (5, -3)", set_group("betas", (5.0, -3.0)), r"optimizer.param_groups\[0\].betas: \(5.0, -3.0\): expected two"),
    ("betas 1", set_group("betas", (0.9, 1.0)), r"optimizer.param_groups\[0\].betas"),
    ("weight_decay NaN", set_group("weight_decay", math.nan), r"optimizer.param_groups\[0\].weight_decay: nan"),
    ("eps -1", set_group("eps", -1.0), r"optimizer.param_groups\[0\].eps: -1.0"),
    ("base_lrs NaN", set_sched("base_lrs", [math.nan]), r"lr_scheduler.base_lrs: \[nan\]: expected numbers"),
    ("last_epoch text", set_sched("last_epoch", "x"), r"lr_scheduler.last_epoch: 'x': expected an integer"),
    ("optimizer null", drop_optimizer, r"optimizer: null: the checkpoint was saved without an optimizer"),
]


@pytest.mark.parametrize("name,edit,msg", CASES, ids=[c[0] for c in CASES])
def test_out_of_range_settings_refused_before_anything_is_applied(tmp_path, saved, name, edit, msg):
    """Before: lr 150 loaded the engine (global_steps 1 -> 3) and then failed in set_lr naming no file, and every
    later step failed the same; NaN or text in the scheduler, betas (5, -3) and weight_decay NaN loaded."""
    e, sched = engine(5)
    train(e, 1)
    before = snapshot(e, sched)
    groups = [dict(g) for g in e.optimizer.param_groups]
    root, cs = crafted(tmp_path, saved, edit)
    with pytest.raises(_ckpt.CheckpointError, match=msg) as info:
        e.load_checkpoint(root)
    assert str(cs) in str(info.value)
    assert same(snapshot(e, sched), before), name
    assert [dict(g) for g in e.optimizer.param_groups] == groups
    train(e, 1)  # and the engine still steps
    assert e.global_steps == 2
    e.close()


def test_loaded_tensors_are_copies_not_the_file(tmp_path, saved):
    """Before: rewriting 4 bytes of client_state.safetensors after the load changed the returned tensor
    ([0,1,2,3] -> [0,1,2,1000]), and truncating the file killed the process with SIGBUS."""
    root = tmp_path / "mapped"
    shutil.copytree(saved, root)
    e, _ = engine(5)
    _, client = e.load_checkpoint(root)
    t = client["t"]
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    cs = root / "global_step2" / CS
    raw = bytearray(cs.read_bytes())
    at = bytes(raw).rfind(torch.tensor([3.0]).numpy().tobytes())
    assert at > 0
    with open(cs, "r+b") as f:  # in place, as a writer to the same inode would
        f.seek(at)
        f.write(torch.tensor([1000.0]).numpy().tobytes())
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    with open(cs, "r+b") as f:
        f.truncate(8)
    assert float(t.sum()) == 6.0  # a mapping would raise SIGBUS here
    e.close()


@pytest.mark.parametrize("shape", [[2 ** 62, 0], [1] * 40], ids=["2^62x0", "40 dims"])
def test_numpy_entries_of_impossible_shapes_named(tmp_path, shape):
    """Before: a raw ValueError from numpy, without the file."""
    np = pytest.importorskip("numpy")
    path = tmp_path / CS
    path.write_bytes(_ckpt.client_state_bytes({"a": np.zeros(0, dtype=np.float32)}))
    state = _ckpt.read_client_state(str(path))
    assert state["a"].shape == (0,)
    # the same file with the ndarray's recorded shape replaced
    import json
    from safetensors.torch import load_file, save_file
    meta_path = str(path)
    from safetensors import safe_open
    with safe_open(meta_path, framework="pt") as f:
        meta = f.metadata()
    doc = json.loads(meta[_ckpt._META_KEY])
    doc["state"]["dict"][0][1]["ndarray"]["shape"] = shape
    meta[_ckpt._META_KEY] = json.dumps(doc)
    save_file(load_file(meta_path), meta_path, metadata=meta)
    with pytest.raises(_ckpt.CheckpointError, match=r"client state at a: ndarray of") as info:
        _ckpt.read_client_state(meta_path)
    assert meta_path in str(info.value)
