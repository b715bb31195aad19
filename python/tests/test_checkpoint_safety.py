"""Checkpoints as untrusted input (issue 30, items 1 and 4): load_checkpoint runs no code from the files (client
state without pickle, pickle files refused unless torch.load(weights_only=True) is safe), `latest` is checked as the
C library checks it, and a load that fails names the file and leaves the engine as it was. A tiny MLP on the CPU."""
import json
import os
import re
import shutil

import pytest
import torch

import zoffload
from zoffload import _ckpt, ds_api


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _lambda(step):
    return 1.0 / (1 + step)


def engine(seed=0):
    model = mlp(seed)
    client = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(client, _lambda)
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    e, _, _, s = zoffload.initialize(model=model, optimizer=client, lr_scheduler=sched, config=cfg)
    return e, s


def train(e, steps):
    for k in range(steps):
        g = torch.Generator().manual_seed(k)
        x, y = torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)
        e.backward(torch.nn.functional.mse_loss(e(x), y))
        e.step()


def snapshot(e, sched):
    """Everything a load changes: the masters, counters, Adam's step, the lr and the scheduler."""
    return ({n: e.master_weights(n).clone() for n, _ in e.params}, e.global_steps, e.micro_steps, e.applied_steps,
            e.get_lr(), sched.state_dict())


def same(a, b):
    return all(torch.equal(a[0][k], b[0][k]) for k in a[0]) and a[1:] == b[1:]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A checkpoint root (ckpt/latest -> global_step2) whose client state holds a tensor."""
    root = tmp_path_factory.mktemp("saved") / "ckpt"
    e, _ = engine()
    train(e, 2)
    e.save_checkpoint(root, client_state={"t": torch.arange(4.0), "epoch": 1})
    e.close()
    return root


class Payload:
    """Unpickling this runs a shell command that creates @marker."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, ("touch '%s'" % self.marker,))


def rewrite_manifest(ckpt_dir, edit):
    """manifest.json of checkpoint @ckpt_dir passed through @edit(dict)."""
    mf = os.path.join(str(ckpt_dir), "manifest.json")
    with open(mf) as f:
        m = json.load(f)
    edit(m)
    with open(mf, "w") as f:
        json.dump(m, f)


def resign(ckpt_dir):
    """The manifest's "files" entries of checkpoint @ckpt_dir made to match the files as they are now (a test that
    crafts a client state on purpose, to reach the checks behind the checksum)."""
    import ctypes
    from zoffload import _lib

    def edit(m):
        for f in m.get("files", []):
            data = open(os.path.join(str(ckpt_dir), f["name"]), "rb").read()
            f["nbytes"] = len(data)
            f["crc32c"] = "%08x" % _lib.lib.zo_swap_crc32c(0, ctypes.c_char_p(data), len(data))
    rewrite_manifest(ckpt_dir, edit)


def as_legacy(ckpt_dir):
    """Checkpoint @ckpt_dir as a zoffload before zo_save_opts.files wrote it: no "files" list in its manifest."""
    rewrite_manifest(ckpt_dir, lambda m: m.pop("files", None))


def test_client_state_round_trips_without_pickle(tmp_path):
    e, _ = engine()
    train(e, 1)
    np = pytest.importorskip("numpy")
    state = {"t": torch.arange(6.0).view(2, 3)[:, 1:], "bf": torch.ones(2, dtype=torch.bfloat16), "epoch": 3,
             "nested": {"pair": (1, "a"), "list": [None, True, 2.5], 7: b"\x00raw"}, "arr": np.arange(3),
             "np_rng": np.random.RandomState(5).get_state(), "np_scalar": np.int64(9)}
    e.save_checkpoint(tmp_path, tag="a", client_state=state)
    files = sorted(os.listdir(tmp_path / "a"))
    assert "client_state.safetensors" in files and "client_state.pt" not in files, files
    from safetensors.torch import load_file  # a plain safetensors file: the tensors, no code
    assert len(load_file(str(tmp_path / "a" / "client_state.safetensors"))) == 5
    path, got = e.load_checkpoint(tmp_path)
    assert path == str(tmp_path / "a")
    assert torch.equal(got["t"], state["t"]) and got["bf"].dtype == torch.bfloat16 and got["epoch"] == 3
    assert got["nested"] == {"pair": (1, "a"), "list": [None, True, 2.5], 7: b"\x00raw"}
    assert isinstance(got["arr"], np.ndarray) and got["arr"].tolist() == [0, 1, 2]
    rng = np.random.RandomState()
    rng.set_state(got["np_rng"])  # a uint32 array, ints and a float in a tuple: as get_state() gave them
    assert rng.randint(1 << 30) == np.random.RandomState(5).randint(1 << 30)
    assert type(got["np_scalar"]) is np.int64 and got["np_scalar"] == 9
    # what it cannot hold is refused by name, before anything is written
    with pytest.raises(TypeError, match=r"client_state\['bad'\]\[1\] is a builtins.object"):
        e.save_checkpoint(tmp_path, tag="b", client_state={"bad": [1, object()]})
    assert not (tmp_path / "b").exists()
    e.close()


FILES = ["global_step2/client_state.pt", "latest", "global_step2/manifest.json", "global_step2/rank00000.bin",
         "global_step2/client_state.safetensors"]


@pytest.mark.parametrize("weights_only_safe", [False, True])
def test_pickle_payload_in_every_file_runs_nothing(tmp_path, saved, monkeypatch, weights_only_safe):
    """A pickle whose unpickling runs `touch MARKER` placed, in turn, as each file of a checkpoint (and as an older
    checkpoint's client_state.pt): nothing runs, the load fails naming the file, the engine is as it was.
    weights_only_safe: as on a torch >= 2.6, where client_state.pt goes to torch.load(weights_only=True)."""
    monkeypatch.setattr(_ckpt, "pickle_loads_safely", lambda: weights_only_safe)
    marker = tmp_path / "MARKER"
    e, sched = engine(5)
    before = snapshot(e, sched)
    for rel in FILES:
        work = tmp_path / rel.replace("/", "_")
        shutil.copytree(saved, work)
        if rel.endswith(".pt"):  # an older checkpoint: its client state is the pickle
            (work / "global_step2" / "client_state.safetensors").unlink(missing_ok=True)
            as_legacy(work / "global_step2")
        torch.save(Payload(marker), str(work / rel))
        with pytest.raises(Exception) as info:
            e.load_checkpoint(work)
        assert not marker.exists(), "the payload in %s ran" % rel
        assert str(work / rel) in str(info.value), (rel, info.value)
        assert same(snapshot(e, sched), before), rel
    e.close()


def test_hf_weights_pickle_refused_safetensors_preferred(tmp_path, monkeypatch):
    """zoffload.hf.load_pretrained_weights: a payload as pytorch_model.bin runs nothing and is refused naming it
    (torch.load(weights_only=True) refuses it where that is safe); model.safetensors is read before it."""
    hf = pytest.importorskip("zoffload.hf")
    marker = tmp_path / "MARKER"
    model = mlp(3)
    torch.save(Payload(marker), str(tmp_path / "pytorch_model.bin"))
    for safe in (False, True):
        monkeypatch.setattr(_ckpt, "pickle_loads_safely", lambda safe=safe: safe)
        with pytest.raises(_ckpt.CheckpointError, match="pytorch_model.bin"):
            hf.load_pretrained_weights(model, str(tmp_path))
        assert not marker.exists()
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": {"w": "../outside.bin"}}))
    with pytest.raises(_ckpt.CheckpointError, match="names the shard '../outside.bin'"):
        hf.load_pretrained_weights(model, str(tmp_path))
    from safetensors.torch import save_file
    want = mlp(4).state_dict()
    save_file(want, str(tmp_path / "model.safetensors"))
    hf.load_pretrained_weights(model, str(tmp_path))  # the .bin and its index are never opened
    assert all(torch.equal(model.state_dict()[k], want[k]) for k in want)
    assert not marker.exists()


LATEST = {"parent": "../outside\n", "absolute": "%s\n", "dot": ".\n", "dotdot": "..\n", "slash": "a/b\n",
          "space": "global_step2 x\n", "two-lines": "global_step2\nextra\n",
          "5013-bytes": "global_step2\n" + "x" * 5000, "empty": "", "symlink": "link\n", "file": "afile\n"}


@pytest.mark.parametrize("content", list(LATEST.values()), ids=list(LATEST))
def test_latest_is_checked_as_in_c(tmp_path, saved, content):
    """`latest` must hold one name of a directory under the root (1..255 printable ASCII bytes, no '/' or space,
    not starting with '.'), not a symbolic link: each bad one is refused naming `latest`, the engine unchanged.
    Before, Python joined whatever it held: '../outside' and an absolute path loaded the checkpoint there."""
    root = tmp_path / "root"
    shutil.copytree(saved, root)
    shutil.copytree(saved / "global_step2", tmp_path / "outside")  # a valid checkpoint outside the root
    os.symlink(str(tmp_path / "outside"), str(root / "link"))
    (root / "afile").write_text("x")
    (root / "latest").write_text(content.replace("%s", str(tmp_path / "outside")))
    e, sched = engine(5)
    before = snapshot(e, sched)
    with pytest.raises(_ckpt.CheckpointError, match=re.escape(str(root / "latest"))):
        e.load_checkpoint(root)
    assert same(snapshot(e, sched), before)
    from zoffload import zero_to_fp32
    with pytest.raises(_ckpt.CheckpointError, match="latest"):
        zero_to_fp32.get_fp32_state_dict_from_zoffload_checkpoint(str(root))
    for ok in ("global_step2", "global_step2\n"):  # DeepSpeed writes no newline, zoffload one
        (root / "latest").write_text(ok)
        assert e.load_checkpoint(root)[0] == str(root / "global_step2")
    e.close()


def test_failed_load_changes_nothing_and_names_the_file(tmp_path, saved):
    """The client state is read and checked before the library applies the checkpoint: a truncated one fails
    naming it, with the engine's weights, counters, lr and scheduler as they were (before: the weights, step and
    counters were loaded, then torch.load failed naming no file). The same for app_state counters that are not
    counts, which the library passes through unchecked."""
    e, sched = engine(5)
    train(e, 3)
    before = snapshot(e, sched)
    root = tmp_path / "cut"
    shutil.copytree(saved, root)
    cs = next(p for p in (root / "global_step2").iterdir() if p.name.startswith("client_state"))
    cs.write_bytes(cs.read_bytes()[:len(cs.read_bytes()) // 2])
    with pytest.raises(Exception) as info:
        e.load_checkpoint(root)
    assert str(cs) in str(info.value), info.value
    assert same(snapshot(e, sched), before)
    root = tmp_path / "app"
    shutil.copytree(saved, root)
    mf = root / "global_step2" / "manifest.json"
    m = json.loads(mf.read_text())
    m["app_state"]["global_steps"] = "many"
    mf.write_text(json.dumps(m))
    with pytest.raises(_ckpt.CheckpointError, match=r"manifest.json: app_state.global_steps is 'many'"):
        e.load_checkpoint(root)
    assert same(snapshot(e, sched), before)
    path, client = e.load_checkpoint(saved)  # the intact checkpoint loads
    assert path == str(saved / "global_step2") and client["epoch"] == 1
    assert (e.global_steps, e.applied_steps, sched.last_epoch) == (2, 2, 2)
    e.close()


def test_legacy_client_state_converts_once(tmp_path, saved):
    """An older checkpoint's client_state.pt is refused on this torch with a message naming the conversion;
    convert_legacy_client_state (for a checkpoint one trusts) rewrites it without pickle and it then loads."""
    root = tmp_path / "old"
    shutil.copytree(saved, root)
    d = root / "global_step2"
    extra = _ckpt.read_client_state(str(d / "client_state.safetensors"))
    os.unlink(d / "client_state.safetensors")
    torch.save(extra, str(d / "client_state.pt"))
    as_legacy(d)
    e, _ = engine(5)
    if not _ckpt.pickle_loads_safely():
        with pytest.raises(_ckpt.CheckpointError, match="convert_legacy_client_state"):
            e.load_checkpoint(root)
    ds_api.convert_legacy_client_state(str(d))
    assert sorted(os.listdir(d)) == ["client_state.safetensors", "manifest.json", "rank00000.bin"]
    _, client = e.load_checkpoint(root)
    assert torch.equal(client["t"], torch.arange(4.0)) and client["epoch"] == 1
    e.close()


def test_malformed_client_state_is_refused_by_name(tmp_path):
    """Client-state files crafted to break the reader: each is a CheckpointError naming the file, never another
    exception, and nothing in them is run or trusted (object arrays, names of tensors it does not hold)."""
    from safetensors.torch import save
    deep = '{"list": [' * 100000 + "]}" * 100000  # deeper than any recursion limit
    u8 = {"0": torch.zeros(8, dtype=torch.uint8)}
    bad = [({"list": 3}, {}), ({"dict": [[1]]}, {}), ({"tensor": "zz"}, {}), ({"bytes": "!!"}, {}),
           ({"weird": 1}, {}), ({"list": [], "tuple": []}, {}), ([1, 2], {}), ({"dict": [[{"list": []}, 1]]}, {}),
           ({"ndarray": {"tensor": "0", "dtype": "|O", "shape": [1], "scalar": False}}, u8),
           ({"ndarray": {"tensor": "0", "dtype": "<f8", "shape": [2], "scalar": False}}, u8),
           ({"dict": [["a", {"tensor": "0"}], ["b", {"tensor": "0"}]]}, u8), ({"dict": []}, u8), (deep, {})]
    for i, (tree, tensors) in enumerate(bad):
        f = tmp_path / ("bad%d.safetensors" % i)
        text = ('{"version": 1, "state": %s}' % tree) if tree is deep else json.dumps({"version": 1, "state": tree})
        f.write_bytes(save(tensors, metadata={"zoffload.client_state": text}))
        with pytest.raises(_ckpt.CheckpointError, match=re.escape(str(f))):
            _ckpt.read_client_state(str(f))
    f = tmp_path / "plain.safetensors"
    f.write_bytes(save({"x": torch.zeros(1)}))
    with pytest.raises(_ckpt.CheckpointError, match="no 'zoffload.client_state' entry"):
        _ckpt.read_client_state(str(f))
