"""The `external` communicator's same-host transport (comm/comm_external.c): two processes on torch.distributed's
gloo, a communicator split from zoffload.comm.torch_comm() as the engine splits it, and its collectives moved
through shared memory: the same results as the callbacks give (ZO_COMM_EXTERNAL_SHM=0), sizes that take many
chunks of the 2 MiB slots, in place, reductions in rank order, operations in flight on two communicators started
in opposite orders by the two ranks, and no callback collective after the set-up (the callbacks still carry the
set-up and the split). A peer that dies leaves an error, not a hang."""
import os
import subprocess
import sys
import textwrap

import pytest

from test_comm import _free_port

WORKER = textwrap.dedent("""
    import ctypes, os, sys, torch, torch.distributed as dist
    import zoffload.comm as c
    from zoffload import _lib
    L = _lib.lib
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    for name, args in (("zo_comm_split", [vp, ctypes.c_int, ctypes.c_int, ctypes.POINTER(vp)]),
                       ("zo_comm_reduce_scatter", [vp, vp, vp, sz, ctypes.c_int]),
                       ("zo_comm_all_reduce", [vp, vp, sz, ctypes.c_int]),
                       ("zo_comm_iall_gather", [vp, vp, vp, sz, ctypes.POINTER(vp)]),
                       ("zo_comm_iall_reduce", [vp, vp, sz, ctypes.c_int, ctypes.POINTER(vp)]),
                       ("zo_comm_wait", [vp])):
        getattr(L, name).restype, getattr(L, name).argtypes = ctypes.c_int, args
    c.init_distributed(dist_backend="gloo", verbose=False)
    r, w = dist.get_rank(), dist.get_world_size()
    calls = {"n": 0}
    for name in ("all_gather", "all_reduce", "broadcast", "barrier"):
        def counted(*a, _f=getattr(dist, name), **k):
            calls["n"] += 1
            return _f(*a, **k)
        setattr(dist, name, counted)
    top = c.torch_comm()
    subs = []
    for _ in range(2):
        s = vp()
        _lib.check(L.zo_comm_split(top, 0, r, ctypes.byref(s)), "split")
        subs.append(s)
    sub = subs[0]
    calls["n"] = 0
    if os.environ.get("DIE") and r == 1:
        os._exit(0)
    F32 = 0

    def data(n, rank, dtype=torch.float32):
        g = torch.Generator().manual_seed(1000 + rank)
        return torch.randn(n, generator=g).to(dtype)
    sums = []
    for n in (1, 1000, 300001, 1 << 20 | 7):  # the last: 4 MiB of fp32, three chunks of an all-reduce
        # all-gather, then in place (send is this rank's block of recv)
        src = data(n, r)
        out = torch.empty(w * n)
        _lib.check(L.zo_comm_all_gather(sub, src.data_ptr(), out.data_ptr(), n * 4), "all_gather")
        assert torch.equal(out, torch.cat([data(n, q) for q in range(w)])), n
        out2 = torch.zeros(w * n)
        out2[r * n:(r + 1) * n] = src
        _lib.check(L.zo_comm_all_gather(sub, out2.data_ptr() + r * n * 4, out2.data_ptr(), n * 4), "in place")
        assert torch.equal(out2, out), n
        # reduce-scatter in rank order, then in place
        full = data(w * n, r)
        want = data(w * n, 0)[r * n:(r + 1) * n].clone()
        for q in range(1, w):
            want += data(w * n, q)[r * n:(r + 1) * n]
        got = torch.empty(n)
        _lib.check(L.zo_comm_reduce_scatter(sub, full.data_ptr(), got.data_ptr(), n, F32), "reduce_scatter")
        assert torch.equal(got, want), n
        _lib.check(L.zo_comm_reduce_scatter(sub, full.data_ptr(), full.data_ptr() + r * n * 4, n, F32), "in place")
        assert torch.equal(full[r * n:(r + 1) * n], want), n
        # all-reduce; an fp64 one; a broadcast from the last rank
        buf = data(n, r)
        _lib.check(L.zo_comm_all_reduce(sub, buf.data_ptr(), n, F32), "all_reduce")
        want = data(n, 0)
        for q in range(1, w):
            want += data(n, q)
        assert torch.equal(buf, want), n
        d = data(n, r, torch.float64)
        _lib.check(L.zo_comm_all_reduce_f64(sub, ctypes.cast(d.data_ptr(), ctypes.POINTER(ctypes.c_double)), n),
                   "all_reduce_f64")
        assert torch.equal(d, sum(data(n, q, torch.float64) for q in range(w))), n
        b = data(n * 4, r, torch.float32).view(torch.uint8)[:n].clone()
        _lib.check(L.zo_comm_broadcast(sub, b.data_ptr(), n, w - 1), "broadcast")
        assert torch.equal(b, data(n * 4, w - 1, torch.float32).view(torch.uint8)[:n]), n
        _lib.check(L.zo_comm_barrier(sub), "barrier")
        sums.append(float(buf.double().sum()))
    # operations in flight on both communicators, started in opposite orders on the two ranks: each completes
    n = 3 << 20
    ga, gb = data(n, r), torch.empty(w * n)
    ra = data(n, r)
    reqs = [vp(), vp()]
    order = (0, 1) if r == 0 else (1, 0)
    for k in order:
        if k == 0:
            _lib.check(L.zo_comm_iall_gather(subs[0], ga.data_ptr(), gb.data_ptr(), n * 4, ctypes.byref(reqs[0])),
                       "iall_gather")
        else:
            _lib.check(L.zo_comm_iall_reduce(subs[1], ra.data_ptr(), n, F32, ctypes.byref(reqs[1])), "iall_reduce")
    for k in reversed(order):
        _lib.check(L.zo_comm_wait(reqs[k]), "wait")
    assert torch.equal(gb, torch.cat([data(n, q) for q in range(w)]))
    assert torch.equal(ra, sum(data(n, q) for q in range(w)))
    print("rank", r, "callback collectives after the split:", calls["n"], "sums", sums, flush=True)
    for s in subs:
        L.zo_comm_destroy(s)
    L.zo_comm_destroy(top)
""")



def _two_ranks(**env):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_"))}
    e.update(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], env=dict(e, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=180)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate()[0] + "\n(timed out)")
    return [p.returncode for p in procs], outs


def _counts_and_sums(outs):
    got = []
    for o in outs:
        line = [x for x in o.splitlines() if x.startswith("rank ")]
        assert line, o
        _, rest = line[-1].split("after the split: ")
        n, sums = rest.split(" sums ")
        got.append((int(n), sums))
    return got


def test_shared_memory_matches_callbacks():
    rcs, outs = _two_ranks()
    assert rcs == [0, 0], "\n".join(outs)
    shm = _counts_and_sums(outs)
    rcs, outs = _two_ranks(ZO_COMM_EXTERNAL_SHM="0")
    assert rcs == [0, 0], "\n".join(outs)
    cb = _counts_and_sums(outs)
    assert [n for n, _ in shm] == [0, 0], shm  # everything through shared memory
    assert all(n > 0 for n, _ in cb), cb  # everything through gloo
    assert shm[0][1] == shm[1][1] == cb[0][1] == cb[1][1], (shm, cb)


def test_shared_memory_peer_gone():
    rcs, outs = _two_ranks(DIE="1")
    assert rcs[1] == 0, outs[1]
    assert rcs[0] != 0 and "(timed out)" not in outs[0], outs[0]
    assert "over shared memory (rank 0 of 2) failed: rank 1 (pid" in outs[0] and "is gone" in outs[0], outs[0]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
