"""zoffload-zero-to-fp32 (python/zoffload/zero_to_fp32.py) on checkpoints from someone else (issue 41, item 6): it
reads them under the C loader's rules (offload/checkpoint/load.c, what `zo-train --resume` applies). Each hostile
checkpoint below is refused in time (no hang on a FIFO), with one line naming the file and no traceback; a valid
one (written by zo-train, else by the Python engine) still converts to the same weights.

ZO_Z2F_PYTHONPATH=DIR runs the converter from another copy of the package (to show the old one failing)."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PYPATH = os.environ.get("ZO_Z2F_PYTHONPATH") or os.path.dirname(HERE)
STEP = "step-000000000002"


def _zo_train():
    exe = os.environ.get("ZO_TRAIN")
    lib = os.environ.get("ZOFFLOAD_LIBRARY")
    if not exe and lib:
        exe = os.path.join(os.path.dirname(os.path.abspath(lib)), "tools", "zo-train")
    return exe if exe and os.access(exe, os.X_OK) else None


def _make_checkpoint(root):
    """A valid checkpoint under @root (a save_dir holding `latest`); its directory."""
    exe = _zo_train()
    corpus = "/usr/share/games/fortunes"
    cfgf = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "configs", "tiny.json")
    if exe and os.path.isdir(corpus) and os.path.isfile(cfgf):
        r = subprocess.run([exe, "--config", cfgf, "--data", corpus, "--steps", "2", "--no-sample", "--save",
                            str(root)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return os.path.join(str(root), STEP)
    import zoffload  # no zo-train here: the Python engine's save_checkpoint writes the same format
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
    e, _, _, _ = zoffload.initialize(model=model, config=cfg)
    for _ in range(2):
        loss = torch.nn.functional.mse_loss(e(torch.randn(4, 8)), torch.randn(4, 4))
        e.backward(loss)
        e.step()
    e.save_checkpoint(str(root), tag=STEP)
    e.close()
    return os.path.join(str(root), STEP)


def convert(src, out, *extra):
    env = dict(os.environ, PYTHONPATH=PYPATH)
    return subprocess.run([sys.executable, "-m", "zoffload.zero_to_fp32", str(src), str(out)] + list(extra),
                          env=env, capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("good")
    d = _make_checkpoint(root / "ck")
    with open(os.path.join(d, "manifest.json")) as f:  # the reference: the master runs read here, by hand
        m = json.load(f)
    assert m["world_size"] == 1
    ref = {}
    with open(os.path.join(d, "rank00000.bin"), "rb") as f:
        for t in m["tensors"]:
            f.seek(t["master"]["offset"])
            raw = bytearray(f.read(t["master"]["nbytes"]))
            ref[t["name"]] = torch.frombuffer(raw, dtype=torch.float32).view(t["shape"]) if raw else \
                torch.zeros(t["shape"])
    return d, ref


def _copy(good, tmp_path):
    d = str(tmp_path / "ck")
    shutil.copytree(good[0], d)
    return d


def _edit(d, fn):
    """The manifest of @d rewritten: fn(manifest) changes it (or returns the new bytes)."""
    p = os.path.join(d, "manifest.json")
    with open(p) as f:
        m = json.load(f)
    b = fn(m)
    with open(p, "wb") as f:
        f.write(b if isinstance(b, bytes) else json.dumps(m).encode())


def _t0(m, **kv):
    m["tensors"][0].update(kv)


def _master(m, **kv):
    m["tensors"][0]["master"].update(kv)


def _fifo(d):
    os.unlink(os.path.join(d, "rank00000.bin"))
    os.mkfifo(os.path.join(d, "rank00000.bin"))
    return "rank00000.bin"


def _link(d, name):
    p = os.path.join(d, name)
    os.rename(p, p + ".real")
    os.symlink(name + ".real", p)
    return name


def _sparse_manifest(d):
    p = os.path.join(d, "manifest.json")
    with open(p, "r+b") as f:
        f.truncate((2 << 30) + 7)
    return "manifest.json"


def _flip(d, m):
    p = os.path.join(d, "rank00000.bin")
    off = m["tensors"][0]["master"]["offset"] + 5
    with open(p, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x40]))
    return "rank00000.bin"


# (case, how to make it from a valid checkpoint directory, the file the message must name, a word it must hold)
CASES = [
    ("fifo_rank_file", _fifo, "rank00000.bin", "FIFO"),
    ("symlinked_rank_file", lambda d: _link(d, "rank00000.bin"), "rank00000.bin", "symbolic link"),
    ("symlinked_manifest", lambda d: _link(d, "manifest.json"), "manifest.json", "symbolic link"),
    ("manifest_2GiB", _sparse_manifest, "manifest.json", "more than"),
    ("deep_nesting", lambda d: _edit(d, lambda m: b"[" * 100000), "manifest.json", "depth"),
    ("non_utf8", lambda d: _edit(d, lambda m: json.dumps(m).encode().replace(b'"name": "', b'"name": "\xff\xc3(', 1)),
     "manifest.json", "malformed JSON"),
    ("shape_2p62", lambda d: _edit(d, lambda m: _t0(m, shape=[2 ** 62, 2 ** 62, 4])), "manifest.json", "shape"),
    ("offset_neg", lambda d: _edit(d, lambda m: _master(m, offset=-4096)), "manifest.json", "offset"),
    ("offset_int64max", lambda d: _edit(d, lambda m: _master(m, offset=2 ** 63 - 1)), "manifest.json", "offset"),
    ("nbytes_past_end", lambda d: _edit(d, lambda m: _master(m, offset=(1 << 40))), "manifest.json", "past the end"),
    ("unknown_dtype", lambda d: _edit(d, lambda m: _master(m, dtype="fp128")), "manifest.json", "fp128"),
    ("rank_files_passwd", lambda d: _edit(d, lambda m: m.update(rank_files=["../../../../etc/passwd"])),
     "manifest.json", "rank_files"),
    ("rank_files_dev_zero", lambda d: _edit(d, lambda m: m.update(rank_files=["/dev/zero"])), "manifest.json",
     "rank_files"),
    ("rank_files_100k", lambda d: _edit(d, lambda m: m.update(rank_files=["rank00000.bin"] * 100000)),
     "manifest.json", "rank_files"),
    ("file_dev_zero", lambda d: _edit(d, lambda m: _t0(m, file="/dev/zero")), "manifest.json", "file"),
    ("file_dotdot", lambda d: _edit(d, lambda m: _t0(m, file="../../../../etc/passwd")), "manifest.json", "file"),
    ("tensors_100k", lambda d: _edit(d, lambda m: m.update(tensors=[m["tensors"][0]] * 100000)), "manifest.json",
     "listed twice"),
    ("numel_huge", lambda d: _edit(d, lambda m: _t0(m, numel=2 ** 62, shape=[2 ** 62])), "manifest.json",
     "elements"),
    ("files_not_array", lambda d: _edit(d, lambda m: m.update(files={"name": "x"})), "manifest.json", "files"),
    ("files_dotdot", lambda d: _edit(d, lambda m: m.update(files=[{"name": "../../etc/passwd", "nbytes": 1,
                                                                   "crc32c": "00000000"}])),
     "manifest.json", "files[0].name"),
    ("crc_mismatch", None, "rank00000.bin", "CRC32C"),
]


@pytest.mark.parametrize("case,make,names,word", CASES, ids=[c[0] for c in CASES])
def test_hostile_checkpoint_refused_naming_the_file(good, tmp_path, case, make, names, word):
    d = _copy(good, tmp_path)
    if make is None:
        with open(os.path.join(d, "manifest.json")) as f:
            _flip(d, json.load(f))
    else:
        make(d)
    out = tmp_path / "out.pt"
    try:
        r = convert(d, out)
    except subprocess.TimeoutExpired:
        pytest.fail("%s: the converter still runs after 30 s" % case)
    err = r.stderr.strip()
    assert r.returncode in (1, 2), (r.returncode, err)
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("zoffload-zero-to-fp32: "), err
    assert os.path.join(d, names) in err, err
    assert word in err, err
    assert not out.exists()


def test_valid_checkpoint_converts_the_same(good, tmp_path):
    d, ref = good
    for src in (d, os.path.dirname(d)):  # the directory itself, and the save_dir through `latest`
        out = tmp_path / "w.pt"
        r = convert(src, out)
        assert r.returncode == 0, r.stderr
        assert re.search(r"%d tensors" % len(ref), r.stdout), r.stdout
        sd = torch.load(str(out))
        assert list(sd) == list(ref) and all(torch.equal(sd[k], ref[k]) for k in ref)
        assert all(v.dtype == torch.float32 for v in sd.values())
