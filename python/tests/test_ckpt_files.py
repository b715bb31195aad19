"""Checkpoint files the Python front writes (ds_api.py): _write_atomic() never opens or follows what is planted at a
temporary name and never replaces anything but a regular file (client_state.pt, `latest`, save_16bit_model's file,
zero_to_fp32's output all go through it), and save_checkpoint() holds its root for the engine's run with the C
library's lock (zo_checkpoint_lock): a second process saving there is refused naming the first. A tiny MLP on the
CPU."""
import os
import stat
import subprocess
import sys

import pytest
import torch

import zoffload
from zoffload import _lib
from zoffload.ds_api import _write_atomic

VICTIM = b"the victim's own bytes\n"

CHILD = r"""
import sys, torch, zoffload
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 4))
cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
       "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
       "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
engine, _, _, _ = zoffload.initialize(model=model, config=cfg)
engine.save_checkpoint(sys.argv[1], tag="first")
print("saved", flush=True)
sys.stdin.readline()
engine.close()
print("closed", flush=True)
"""


def engine():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    return zoffload.initialize(model=model, config=cfg)[0]


def victim(tmp_path):
    v = tmp_path / "victim"
    v.write_bytes(VICTIM)
    return v


def plant(directory, name, target):
    """Links to @target at every name the writers use or used for @name: NAME.tmp and .NAME.PID.0..9.tmp."""
    links = [directory / (name + ".tmp")]
    links += [directory / (".%s.%d.%d.tmp" % (name, os.getpid(), n)) for n in range(10)]
    for link in links:
        os.symlink(target, link)
    return links


def test_write_atomic_steps_around_planted_links(tmp_path):
    v = victim(tmp_path)
    links = plant(tmp_path, "out.bin", v)
    _write_atomic(str(tmp_path / "out.bin"), lambda f: f.write(b"new"))
    assert (tmp_path / "out.bin").read_bytes() == b"new" and not (tmp_path / "out.bin").is_symlink()
    assert v.read_bytes() == VICTIM
    assert all(link.is_symlink() for link in links)  # not ours: left as they were
    assert sorted(p.name for p in tmp_path.iterdir() if not p.is_symlink()) == ["out.bin", "victim"]


@pytest.mark.parametrize("kind", ["symbolic link", "FIFO", "directory"])
def test_write_atomic_refuses_what_is_not_a_regular_file(tmp_path, kind):
    v = victim(tmp_path)
    out = tmp_path / "out.bin"
    {"symbolic link": lambda: os.symlink(v, out), "FIFO": lambda: os.mkfifo(out),
     "directory": lambda: os.mkdir(out)}[kind]()
    before = os.lstat(out)
    with pytest.raises(OSError, match="'%s' is a %s, not a regular file: not replacing it" % (out, kind)):
        _write_atomic(str(out), lambda f: f.write(b"new"))
    after = os.lstat(out)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode) and after.st_ino == before.st_ino
    assert v.read_bytes() == VICTIM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin", "victim"]  # no temporary file left


def test_save_checkpoint_links_at_latest_temporaries(tmp_path):
    v = victim(tmp_path)
    root = tmp_path / "ckpt"
    root.mkdir()
    links = plant(root, "latest", v)
    e = engine()
    assert e.save_checkpoint(str(root), tag="t1") is True
    e.close()
    assert v.read_bytes() == VICTIM
    assert (root / "latest").read_text() == "t1\n" and not (root / "latest").is_symlink()
    assert all(link.is_symlink() for link in links)
    os.unlink(root / "latest")
    os.symlink(v, root / "latest")  # `latest` itself a link: refused, naming it
    e = engine()
    with pytest.raises(zoffload.ZoffloadError, match="latest' is a symbolic link, not a regular file.*nothing saved"):
        e.save_checkpoint(str(root), tag="t2")
    e.close()
    assert (root / "latest").is_symlink() and v.read_bytes() == VICTIM


def start_child(root):
    """CHILD on @root: it saves one checkpoint (holding the root), says "saved", and closes on a line of stdin."""
    return subprocess.Popen([sys.executable, "-c", CHILD, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def test_two_processes_saving_to_one_root(tmp_path):
    root = tmp_path / "ckpt"
    child = start_child(root)
    try:
        assert child.stdout.readline() == "saved\n", child.stderr.read()
        e = engine()
        with pytest.raises(_lib.ZoffloadError) as ex:
            e.save_checkpoint(str(root), tag="second")
        msg = str(ex.value)
        assert "is in use by another run: pid %d on host %s, started " % (child.pid, os.uname().nodename) in msg, msg
        assert "command: " in msg and "-c" in msg, msg
        assert not (root / "second").exists() and (root / "latest").read_text() == "first\n"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "closed\n", child.stderr.read()
        assert not (root / ".zoffload-lock").exists()  # close() let go of it
        assert e.save_checkpoint(str(root), tag="second") is True  # the root is free now
        assert (root / ".zoffload-lock").exists()  # and ours until close()
        e.close()
        assert not (root / ".zoffload-lock").exists()
    finally:
        child.kill()
        child.wait()


def test_root_of_a_killed_process_is_taken_over(tmp_path):
    root = tmp_path / "ckpt"
    child = start_child(root)
    try:
        assert child.stdout.readline() == "saved\n", child.stderr.read()
    finally:
        child.kill()
        child.wait()
    assert (root / ".zoffload-lock").exists()  # its record stays; the kernel dropped its lock
    e = engine()
    assert e.save_checkpoint(str(root), tag="after") is True
    e.close()
    assert (root / "latest").read_text() == "after\n"
