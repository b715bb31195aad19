"""zoffload.comm on one process: the launcher-less answers (rank 0 of 1, collectives that leave the tensor as it
is), init_distributed() as deepspeed.init_distributed (gloo with no launcher; dist_init_required=False leaves
torch.distributed alone), the engine on a torchrun-style environment of one rank, and the `external` C
communicator over torch.distributed: its collectives on host buffers, a split, and a failing callback's exception
text in the library's message. Two ranks: tests/python_torchrun.sh (torchrun against mpirun). Each case runs in a
subprocess of its own (torch.distributed is process-wide state)."""
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

import zoffload.comm as zcomm


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _run(code, **env):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("OMPI_", "PMI_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                             "MASTER_ADDR", "MASTER_PORT")}
    e.update(env)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_no_launcher():
    if "RANK" in os.environ or "OMPI_COMM_WORLD_SIZE" in os.environ:
        pytest.skip("run under a launcher")
    assert (zcomm.get_rank(), zcomm.get_world_size(), zcomm.get_local_rank()) == (0, 1, 0)
    assert not zcomm.is_initialized()
    t = torch.tensor([1.5, -2.0])
    zcomm.all_reduce(t, op=zcomm.ReduceOp.MAX)
    zcomm.broadcast(t, 0)
    zcomm.barrier()
    assert t.tolist() == [1.5, -2.0]


def test_init_distributed():
    out = _run("""
        import torch, torch.distributed as dist, zoffload.comm as c
        c.init_distributed(dist_init_required=False)
        assert not c.is_initialized()
        c.init_distributed(dist_backend="gloo", verbose=False)
        assert c.is_initialized() and dist.get_backend() == "gloo", dist.get_backend()
        assert (c.get_rank(), c.get_world_size()) == (0, 1)
        c.init_distributed()  # already: nothing
        t = torch.tensor([3.0, 5.0])
        c.all_reduce(t, op=c.ReduceOp.AVG)
        c.barrier()
        print("ok", t.tolist())
        """, MASTER_PORT=str(_free_port()))
    assert "ok [3.0, 5.0]" in out, out


def test_engine_torchrun_env_one_rank():
    out = _run("""
        import os, sys, torch, zoffload
        sys.path.insert(0, os.path.join(%r, "..", "examples"))
        from train_gpt import GPT, config
        torch.manual_seed(0)
        eng = zoffload.initialize(model=GPT(layers=1), config=config(device="cpu", batch=2))
        eng = eng[0] if isinstance(eng, tuple) else eng  # DeepSpeed's 4-tuple, where initialize returns one
        assert (eng.rank, eng.world_size) == (0, 1)
        print("ok", zoffload._lib.lib.zo_comm_backend(eng.comm).decode())
        eng.close()
        """ % os.path.dirname(os.path.abspath(__file__)),
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    assert "ok self" in out, out


def test_external_comm_over_torch():
    out = _run("""
        import ctypes, torch, torch.distributed as dist, zoffload.comm as c
        from zoffload import _lib
        c.init_distributed(dist_backend="gloo", verbose=False)
        comm = c.torch_comm()
        L = _lib.lib
        assert L.zo_comm_backend(comm) == b"external"
        v = (ctypes.c_double * 2)(1.25, 2.5)
        _lib.check(L.zo_comm_all_reduce_f64(comm, v, 2), "all_reduce_f64")
        g, h = torch.arange(6, dtype=torch.uint8), torch.zeros(4, dtype=torch.uint8)
        _lib.check(L.zo_comm_all_gather(comm, g.data_ptr() + 2, h.data_ptr(), 4), "all_gather")
        _lib.check(L.zo_comm_barrier(comm), "barrier")
        L.zo_comm_split.restype, L.zo_comm_split.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                                                         ctypes.POINTER(ctypes.c_void_p)]
        sub = ctypes.c_void_p()
        _lib.check(L.zo_comm_split(comm, 0, 0, ctypes.byref(sub)), "split")
        assert (L.zo_comm_rank(sub), L.zo_comm_size(sub)) == (0, 1)
        def boom(*a, **k):
            raise RuntimeError("gloo connection closed")
        dist.all_reduce = boom
        st = L.zo_comm_all_reduce_f64(sub, v, 2)
        print("status", L.zo_status_string(st).decode(), "|", L.zo_last_error().decode())
        L.zo_comm_destroy(sub)
        L.zo_comm_destroy(comm)
        print("ok", list(v), h.tolist())
        """, MASTER_PORT=str(_free_port()))
    assert "ok [1.25, 2.5] [2, 3, 4, 5]" in out, out
    assert ("status ZO_ERR_SYSTEM | comm external: all_reduce of 2 fp64 elements failed (callback returned 4): "
            "RuntimeError: gloo connection closed") in out, out
