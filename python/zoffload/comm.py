"""zoffload.comm: the collectives a DeepSpeed training script calls (deepspeed.comm's subset: init_distributed,
is_initialized, get_rank, get_world_size, get_local_rank, barrier, all_reduce, broadcast), and the communicator
the engine runs its ranks over. Not a collectives library of its own: it delegates to torch.distributed or to
libzoffload's C communicator (zoffload/comm.h).

Launchers (the same rules the engine follows, Engine.__init__ -> engine_comm()):
  torchrun / the deepspeed launcher (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set), or a script that
      initialised torch.distributed itself: torch.distributed. init_process_group is called here when the script
      has not (gloo on CPU, NCCL when torch has CUDA), as deepspeed.init_distributed does. The engine's own
      collectives (gradient reduce-scatter, weight all-gather) move host buffers, so they run over gloo process
      groups of their own (torch.distributed.new_group(backend="gloo")) whatever the script's backend, through
      libzoffload's `external` communicator whose callbacks are the functions below (_ext_*).
  mpirun (OMPI_COMM_WORLD_*, PMI_*): the engine uses the C `mpi` communicator, as before, even when the script
      initialised torch.distributed too; this module's calls use MPI (a communicator of its own over
      MPI_COMM_WORLD) unless torch.distributed is initialised, which init_distributed() does from the MPI environment (rank 0's host name broadcast over MPI, as DeepSpeed's
      mpi_discovery does with mpi4py).
  neither: one rank.
"""
import atexit
import collections
import ctypes
import datetime
import itertools
import os
import socket

import torch
import torch.distributed as dist

from . import _lib

ReduceOp = dist.ReduceOp


def launch_info():
    """(rank, world_size, local_rank, local_size, source) from the launcher's environment, as the C library reads
    it (zo_launch_info_get(): Open MPI's variables first, then torchrun's, then PMI's; source "openmpi",
    "torchrun", "pmi" or "none")."""
    li = _lib.LaunchInfo()
    _lib.check(_lib.lib.zo_launch_info_get(ctypes.byref(li)), "zoffload.comm: the launcher's environment")
    return li.rank, li.world_size, li.local_rank, li.local_size, li.source.decode()


def _mpi_launched():
    return launch_info()[4] in ("openmpi", "pmi")


def is_initialized():
    """True once torch.distributed is initialised (by the script, init_distributed() or the engine)."""
    return dist.is_available() and dist.is_initialized()


def _default_backend():
    return "nccl" if torch.cuda.is_available() else "gloo"


def init_distributed(dist_backend=None, auto_mpi_discovery=True, distributed_port=29500, verbose=True,
                     timeout=datetime.timedelta(minutes=30), init_method=None, dist_init_required=None, config=None,
                     rank=-1, world_size=-1):
    """deepspeed.init_distributed(): initialise torch.distributed unless it is already (or @dist_init_required is
    False). @dist_backend: None picks NCCL when torch has CUDA, else gloo. Under mpirun (no RANK in the
    environment, @auto_mpi_discovery) RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR (rank 0's host name, broadcast
    over MPI) and MASTER_PORT (@distributed_port) are set from MPI's variables first; with no launcher at all,
    one rank on 127.0.0.1:@distributed_port. With NCCL the rank's GPU is LOCAL_RANK's. @config is accepted and
    unused (DeepSpeed reads its comms logger from it)."""
    if dist_init_required is None:
        dist_init_required = not is_initialized()
    if not dist_init_required or is_initialized():
        return
    backend = dist_backend or _default_backend()
    if rank < 0 and world_size < 0 and "RANK" not in os.environ:
        r, w, lr, ls, source = launch_info()
        if source in ("openmpi", "pmi") and auto_mpi_discovery:
            if "MASTER_ADDR" not in os.environ:
                name = ctypes.create_string_buffer(socket.gethostname().encode()[:255], 256)
                _lib.check(_lib.lib.zo_comm_broadcast(_c_comm(), name, 256, 0), "init_distributed: rank 0's host")
                os.environ["MASTER_ADDR"] = name.value.decode()
        elif source == "none":
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(distributed_port))
        for k, v in (("RANK", r), ("WORLD_SIZE", w), ("LOCAL_RANK", lr), ("LOCAL_WORLD_SIZE", ls)):
            os.environ.setdefault(k, str(v))
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    kw = {"backend": backend, "timeout": timeout, "init_method": init_method or "env://"}
    if rank >= 0 and world_size >= 0:
        kw.update(rank=rank, world_size=world_size)
    dist.init_process_group(**kw)
    if verbose and dist.get_rank() == 0:
        print("zoffload.comm: torch.distributed initialised, backend %s, %d ranks" % (backend, dist.get_world_size()),
              flush=True)


def get_rank(group=None):
    """This process's rank: torch.distributed's when initialised, else the launcher's (0 without one)."""
    if is_initialized():
        return dist.get_rank(group) if group is not None else dist.get_rank()
    return launch_info()[0]


def get_world_size(group=None):
    """The number of ranks: torch.distributed's when initialised, else the launcher's (1 without one)."""
    if is_initialized():
        return dist.get_world_size(group) if group is not None else dist.get_world_size()
    return launch_info()[1]


def get_local_rank():
    """This process's rank on its node (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, ...; 0 without a launcher)."""
    return launch_info()[2]


# --- without torch.distributed, under mpirun: the C communicator ---
_c = None


def _c_comm():
    """A C communicator over the launcher's ranks (zo_comm_create_from_env: `mpi`, or `self` for one rank), made
    on first use and kept for the process."""
    global _c
    if _c is None:
        c = ctypes.c_void_p()
        _lib.check(_lib.lib.zo_comm_create_from_env(ctypes.byref(c)), "zoffload.comm")
        _c = c
    return _c


def _cpu_contig(tensor):
    return tensor.detach().to("cpu").contiguous()


def barrier(group=None):
    """Return when every rank has entered the barrier."""
    if is_initialized():
        return dist.barrier(group=group) if group is not None else dist.barrier()
    if get_world_size() > 1:
        _lib.check(_lib.lib.zo_comm_barrier(_c_comm()), "zoffload.comm.barrier")


def _reduce(stack, op):
    """Reduce the per-rank rows of @stack (ranks, ...) with @op, in rank order."""
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        out = stack[0].clone()
        for row in stack[1:]:
            out += row
        if op == ReduceOp.AVG:
            out = out / stack.shape[0] if out.is_floating_point() else out // stack.shape[0]
        return out
    if op == ReduceOp.MAX:
        return stack.amax(0)
    if op == ReduceOp.MIN:
        return stack.amin(0)
    if op == ReduceOp.PRODUCT:
        return stack.prod(0)
    raise ValueError("zoffload.comm.all_reduce: op %s; SUM, AVG, MAX, MIN or PRODUCT" % op)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce @tensor over the ranks in place (op: ReduceOp.SUM, AVG, MAX, MIN, PRODUCT). Over torch.distributed
    when it is initialised (AVG as SUM then division where the backend lacks AVG, as gloo does), else over the
    C communicator (an all-gather of every rank's bytes, reduced here in rank order). Returns None, or
    torch.distributed's work object when @async_op and torch.distributed runs it."""
    if is_initialized():
        kw = {"group": group} if group is not None else {}
        if op == ReduceOp.AVG and dist.get_backend(group) != "nccl":
            dist.all_reduce(tensor, op=ReduceOp.SUM, **kw)
            if tensor.is_floating_point():
                tensor.div_(dist.get_world_size(group))
            else:
                tensor.floor_divide_(dist.get_world_size(group))
            return None
        return dist.all_reduce(tensor, op=op, async_op=async_op, **kw)
    world = get_world_size()
    if world == 1:
        return None
    src = _cpu_contig(tensor)
    nbytes = src.numel() * src.element_size()
    stack = torch.empty((world,) + tuple(src.shape), dtype=src.dtype)
    _lib.check(_lib.lib.zo_comm_all_gather(_c_comm(), src.data_ptr(), stack.data_ptr(), nbytes),
               "zoffload.comm.all_reduce")
    with torch.no_grad():
        tensor.copy_(_reduce(stack, op))
    return None


def broadcast(tensor, src, group=None, async_op=False):
    """Rank @src's @tensor replaces every other rank's (in place)."""
    if is_initialized():
        kw = {"group": group} if group is not None else {}
        return dist.broadcast(tensor, src, async_op=async_op, **kw)
    if get_world_size() == 1:
        return None
    buf = _cpu_contig(tensor)
    _lib.check(_lib.lib.zo_comm_broadcast(_c_comm(), buf.data_ptr(), buf.numel() * buf.element_size(), src),
               "zoffload.comm.broadcast")
    with torch.no_grad():
        tensor.copy_(buf)
    return None


# --- the engine's communicator over torch.distributed: libzoffload's `external` backend ---
#
# The engine calls these from the thread that calls zo_engine_* (the Python thread running the training loop:
# ctypes takes the GIL for the callback), never from its own threads, so nothing here is called concurrently.
# A context (ctx) is an integer key of _groups; an operation's handle one of _works. Every operation is started
# with async_op=True and completed at wait/test: the engine starts gradient reductions on one communicator and
# stage-3 gathers on another in an order that may differ between ranks, which only independent process groups
# (each gloo group has its own connections and worker threads) can serve without deadlock.

class _Group:
    def __init__(self, pg, ranks):
        self.pg, self.ranks = pg, ranks  # the process group; its members' global ranks, by group rank


_groups, _works, _errors = {}, {}, {}
_ids = itertools.count(1)
_DT = {_lib.COMM_ELEM_F32: torch.float32, _lib.COMM_ELEM_F64: torch.float64}


def _view(addr, n, dtype):
    """A tensor on the @n elements of @dtype at host address @addr (no copy)."""
    esz = torch.tensor([], dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_uint8 * (n * esz)).from_address(addr), dtype=dtype)


def _guard(fn):
    """A callback: exceptions become ZO_ERR_SYSTEM with their text kept for the `error` callback."""
    def run(ctx, *args):
        try:
            return fn(_groups[ctx], *args) or 0
        except Exception as e:  # noqa: BLE001 (every failure goes back to C as a status)
            _errors[ctx] = "%s: %s" % (type(e).__name__, e)
            return int(_lib.Status.SYSTEM)
    return run


def _start(handle, work, finish=None, keep=None):
    h = next(_ids)
    _works[h] = (work, finish, keep)
    handle[0] = h


def _ext_all_gather(g, send, recv, nbytes, handle):
    n = len(g.ranks)
    src = _view(send, nbytes, torch.uint8).clone()  # in place allowed: @send may be a block of @recv
    outs = list(_view(recv, n * nbytes, torch.uint8).view(n, nbytes).unbind(0))
    _start(handle, dist.all_gather(outs, src, group=g.pg, async_op=True), keep=(src, outs))


def _ext_reduce_scatter(g, send, recv, recv_n, elem, handle):
    # an all-reduce of a copy, then this rank's block: gloo has no reduce_scatter in this torch
    n, dt = len(g.ranks), _DT[elem]
    full = _view(send, n * recv_n, dt).clone()
    me = g.ranks.index(dist.get_rank())
    out = _view(recv, recv_n, dt)

    def finish():
        out.copy_(full[me * recv_n:(me + 1) * recv_n])
    _start(handle, dist.all_reduce(full, group=g.pg, async_op=True), finish, (full, out))


def _ext_all_reduce(g, buf, n, elem, handle):
    t = _view(buf, n, _DT[elem])
    _start(handle, dist.all_reduce(t, group=g.pg, async_op=True), keep=t)


def _ext_broadcast(g, buf, nbytes, root, handle):
    t = _view(buf, nbytes, torch.uint8)
    _start(handle, dist.broadcast(t, g.ranks[root], group=g.pg, async_op=True), keep=t)


def _ext_barrier(g, handle):
    _start(handle, dist.barrier(group=g.pg, async_op=True))


# A completed operation's work object and tensors stay referenced here a while after wait(): the gloo worker thread
# that ran it drops its own references only after it marked the work complete. Were the worker's the last ones,
# it would free tensors Python created, taking the GIL to do so; when that happens while the interpreter is
# finalising (a rank that exits right after its last collective, e.g. save_model on a rank that does not write),
# Python ends the worker thread inside a noexcept destructor: "terminate called without an active exception",
# SIGABRT at exit. With the last references here, Python frees them (its own thread, holding the GIL) and
# _hold_at_exit keeps the recent ones for good.
_done = collections.deque(maxlen=64)


def _finish(h):
    work, finish, keep = _works.pop(h)
    work.wait()
    if finish:
        finish()
    _done.append((work, keep))


@atexit.register
def _hold_at_exit():
    """At exit (before the interpreter is finalised): the operations completed last, and any still in flight, are
    never freed, so no gloo worker thread frees a Python tensor during finalisation."""
    for held in (_done, _works):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(held))


def _ext_wait(g, h):
    _finish(h)


def _ext_test(g, h, done):
    done[0] = 0
    if _works[h][0].is_completed():
        _finish(h)
        done[0] = 1


def _ext_split(g, color, key, new_ctx, new_rank, new_size):
    """MPI_Comm_split over a group that spans the world (torch.distributed.new_group must be entered by every
    process, so a sub-group's split is refused): one gloo group per colour, every rank creating every group in
    the same order."""
    world = dist.get_world_size()
    if len(g.ranks) != world:
        raise RuntimeError("split of a communicator of %d of the %d ranks is not supported over torch.distributed "
                           "(new_group is collective over the whole world)" % (len(g.ranks), world))
    mine = (color, key, dist.get_rank())
    everyone = [None] * world
    dist.all_gather_object(everyone, mine, group=g.pg)
    got = None
    for c in sorted({e[0] for e in everyone}):
        ranks = [e[2] for e in sorted((e for e in everyone if e[0] == c), key=lambda e: (e[1], e[2]))]
        pg = dist.new_group(ranks=ranks, backend="gloo")
        if c == color:
            got = _Group(pg, ranks)
    ctx = next(_ids)
    _groups[ctx] = got
    new_ctx[0], new_rank[0], new_size[0] = ctx, got.ranks.index(dist.get_rank()), len(got.ranks)


def _ext_destroy(ctx):
    """Forget @ctx. Its process group stays with torch.distributed (destroying a group is not safe while a peer
    may still use it): each engine leaves two gloo groups behind (three at stage 3) until the process ends."""
    try:
        _groups.pop(ctx, None)
        _errors.pop(ctx, None)
    except Exception:  # noqa: BLE001 (called from C, maybe at interpreter shutdown)
        pass


def _ext_error(ctx, msg, cap):
    text = _errors.pop(ctx, "").encode(errors="replace")[:cap - 1] + b"\0"
    ctypes.memmove(msg, text, len(text))


# One ops struct for every external communicator, alive as long as the module (C keeps its own copy of the
# pointers; the CFUNCTYPE objects must outlive every communicator).
_OPS = _lib.CommExternalOps(
    _lib.CommAllGather(_guard(_ext_all_gather)), _lib.CommReduceScatter(_guard(_ext_reduce_scatter)),
    _lib.CommAllReduce(_guard(_ext_all_reduce)), _lib.CommBroadcast(_guard(_ext_broadcast)),
    _lib.CommBarrier(_guard(_ext_barrier)), _lib.CommWait(_guard(_ext_wait)), _lib.CommTest(_guard(_ext_test)),
    _lib.CommSplit(_guard(_ext_split)), _lib.CommDestroy(_ext_destroy), _lib.CommError(_ext_error))


def torch_comm():
    """A new C communicator (`external`) over every rank of the initialised torch.distributed world, on a gloo
    process group: the default group when it is gloo, else a new one (host buffers; NCCL's groups take CUDA
    tensors only). The caller frees it with zo_comm_destroy()."""
    pg = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    ctx = next(_ids)
    _groups[ctx] = _Group(pg, list(range(dist.get_world_size())))
    out = ctypes.c_void_p()
    st = _lib.lib.zo_comm_create_external(ctypes.byref(_OPS), ctx, dist.get_rank(), dist.get_world_size(),
                                          ctypes.byref(out))
    if st != 0:
        _groups.pop(ctx, None)
    _lib.check(st, "zoffload: a communicator over torch.distributed")
    return out


def engine_comm(backend=None):
    """The communicator an engine runs its ranks over (a new C handle: zo_comm_destroy() it): under mpirun, MPI
    (libzoffload's own transport: no Python on the engine's collective path), whether or not the script
    initialised torch.distributed too; else over torch.distributed when it is initialised, or when torchrun /
    the deepspeed launcher started several ranks (init_distributed(@backend) first: None picks NCCL when torch
    has CUDA, else gloo); else one rank (`self`)."""
    source, world = launch_info()[4], launch_info()[1]
    if source not in ("openmpi", "pmi"):
        if not is_initialized() and source == "torchrun" and world > 1:
            init_distributed(dist_backend=backend, verbose=False)
        if is_initialized() and dist.get_world_size() > 1:
            return torch_comm()
    c = ctypes.c_void_p()
    _lib.check(_lib.lib.zo_comm_create_from_env(ctypes.byref(c)), "zoffload.initialize: ranks")
    return c
