"""fork() after zoffload.initialize() (issue 41, item 4): the child (a DataLoader worker, or any os.fork()) inherits a
copy of the parent's engine, but none of its threads. Its normal interpreter exit must neither hang nor crash (it
used to destroy the parent's engine from the exit handler: zo_adam_pool_destroy waiting on threads the child does not
have, or SIGSEGV), must leave the parent's checkpoint root lock (.zoffload-lock) in place and held, and a step in the
child raises a clear error naming both processes. The parent's engine goes on as before. A tiny MLP on the CPU; each
case runs in a child interpreter (a hang there is a timeout, not a hung pytest)."""
import os
import subprocess
import sys

import pytest

SCRIPT = r'''
import ctypes, os, sys, time
import torch
import zoffload
from zoffload import _lib

root, child_uses = sys.argv[1], sys.argv[2] == "use"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
       "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
       "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
e, _, _, _ = zoffload.initialize(model=model, config=cfg)
x = torch.randn(4, 8)
e.backward(e(x).pow(2).mean())
e.step()
e.save_checkpoint(root)  # holds root/.zoffload-lock until close
lock = os.path.join(root, ".zoffload-lock")
assert os.path.exists(lock)
sys.stdout.flush()

pid = os.fork()
if pid == 0:
    # the child: uses the engine (refused at once) or not at all, then returns normally: the interpreter's exit
    # (atexit, finalizers) runs, as in a DataLoader worker's process
    if child_uses:
        try:
            e.backward(e(x).pow(2).mean())
            e.step()
        except RuntimeError as err:
            print("CHILD-REFUSED:", err, flush=True)
        else:
            print("CHILD-NOT-REFUSED", flush=True)
    print("CHILD-END", flush=True)
    sys.exit(0)

deadline = time.monotonic() + 30
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("CHILD-HUNG", flush=True)
        sys.exit(3)
    time.sleep(0.02)
print("CHILD-STATUS", os.waitstatus_to_exitcode(status), flush=True)
print("LOCK-PRESENT", os.path.exists(lock), flush=True)
# another process is refused the root (the parent still holds it)
probe = ("import ctypes, sys; from zoffload import _lib; h = ctypes.c_void_p(); "
         "sys.exit(0 if _lib.lib.zo_checkpoint_lock(sys.argv[1].encode(), ctypes.byref(h)) != 0 else 1)")
import subprocess
r = subprocess.run([sys.executable, "-c", probe, root], timeout=60)
print("LOCK-HELD", r.returncode == 0, flush=True)
# the parent's engine still works
e.backward(e(x).pow(2).mean())
e.step()
e.close()
print("LOCK-AFTER-CLOSE", os.path.exists(lock), flush=True)
print("PARENT-OK", flush=True)
'''


def run(tmp_path, mode):
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "ckpt"), mode], capture_output=True, text=True,
                       timeout=120)
    return r, r.stdout


@pytest.mark.parametrize("mode", ["idle", "use"])
def test_forked_child_exits_cleanly_and_leaves_the_lock(tmp_path, mode):
    """The child returns normally (idle: never touches the engine, as a DataLoader worker; use: tries a step):
    exit status 0, no hang, the parent's lock file still there and held, the parent's engine steps and closes."""
    r, out = run(tmp_path, mode)
    assert "CHILD-HUNG" not in out, out + r.stderr
    assert "CHILD-STATUS 0" in out, out + r.stderr
    assert "LOCK-PRESENT True" in out, out + r.stderr
    assert "LOCK-HELD True" in out, out + r.stderr
    assert "LOCK-AFTER-CLOSE False" in out, out + r.stderr
    assert "PARENT-OK" in out and r.returncode == 0, out + r.stderr


def test_step_in_forked_child_raises_naming_both_processes(tmp_path):
    r, out = run(tmp_path, "use")
    assert "CHILD-NOT-REFUSED" not in out, out + r.stderr
    line = next((s for s in out.splitlines() if s.startswith("CHILD-REFUSED:")), None)
    assert line is not None, out + r.stderr
    assert "a forked child (pid" in line and "create a new engine in the child" in line, line
    pid = int(line.split("created by process ")[1].split(";")[0])
    assert pid > 0 and "(pid %d)" % pid not in line, line  # parent and child named, and they differ
