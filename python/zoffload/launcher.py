"""zoffload - the `deepspeed` launcher: start a training script's ranks as `deepspeed script.py ARGS` does, on
this node or on several, then wait for them.

    zoffload [--num_gpus N] [--include/-i SPEC | --exclude/-e SPEC] [--master_port P] [--no_local_rank]
             SCRIPT [ARGS...]                                                          one node
    zoffload --hostfile/-H FILE [--num_nodes K] [--num_gpus N] [-i SPEC | -e SPEC] [--master_addr A]
             [--master_port P] [--launcher openmpi] [--launcher_args "..."] SCRIPT [ARGS...]    several, through mpirun
    zoffload --num_nodes K --node_rank R --master_addr A [--num_gpus N] [--no_ssh] SCRIPT [ARGS...]
                                                  several, run once on each node, through torchrun's rendezvous
    python -m zoffload.launcher ...                                                          (the same)

One node: each rank is `python SCRIPT ARGS --local_rank=I` (DeepSpeed's launcher appends it; --no_local_rank leaves
it out) with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR (default 127.0.0.1) and MASTER_PORT
(default 29500) in its environment, as torchrun sets them, so zoffload.initialize and zoffload.comm.init_distributed
find the ranks. N defaults to the GPUs torch sees (CUDA_VISIBLE_DEVICES respected), else 1. The launcher's exit
status is the first failing rank's (the others are stopped: SIGTERM, then SIGKILL after 10 s), else 0; SIGINT and
SIGTERM are passed to every rank. With several ranks and no OMP_NUM_THREADS in the environment, each rank gets
OMP_NUM_THREADS = the cores this process may use divided by the ranks (at least 1), as torchrun sets it (to 1):
ranks whose OpenMP threads outnumber the cores wait on each other's spinning threads (on 2 cores, 2 ranks of the
Python front's stage 3 took 1126 ms a step with torch's default of 2 threads each, 346 ms with 1).

Several nodes are handed to an existing launcher, never started by hand here (zoffload._hosts reads DeepSpeed's
hostfile and --include/--exclude syntax):
  - a hostfile with several hosts left after --include/--exclude/--num_nodes (or one, with --force_multi): Open
    MPI's mpirun, started once, which reaches the other hosts itself (ssh, a batch system): one app context per
    host (`-np S -H host:S`), ranks numbered host by host in the hostfile's order, CUDA_VISIBLE_DEVICES set per
    host when --include/--exclude picked slots other than the first S, MASTER_ADDR (--master_addr, else the first
    host) and MASTER_PORT exported, with the variables DeepSpeed's launcher exports (PYTHON*, NCCL*, UCX*, OMP_*,
    ZO_*, ZOFFLOAD_*). The engine's ranks then run over MPI (zoffload.comm). --launcher_args go to mpirun.
  - --node_rank R (DeepSpeed's --no_ssh mode: the launcher is run on every node): torchrun
    (python -m torch.distributed.run --nnodes K --node_rank R --nproc_per_node N --master_addr A --master_port P,
    its static rendezvous at A:P, node 0 listening there); K from --num_nodes, else the hostfile's hosts, and N
    from --num_gpus, else this node's slots in the hostfile, else the GPUs torch sees; A is required (or the
    hostfile's first host). The engine's ranks run over torch.distributed.
Each rank of a hand-off is `python -m zoffload._rank SCRIPT ARGS`, which appends --local_rank=I as above. The exit
status is mpirun's or torchrun's.
"""
import argparse
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import _hosts


def _default_procs():
    try:
        import torch
        return max(1, torch.cuda.device_count())
    except Exception:  # noqa: BLE001 (no torch or no CUDA: one rank)
        return 1


def _parser():
    ap = argparse.ArgumentParser(prog="zoffload", description="start a training script's ranks, as `deepspeed "
                                 "script.py` does: on this node, or on several through mpirun or torchrun")
    ap.add_argument("-H", "--hostfile", default=None, help="MPI-style hostfile (`worker-0 slots=4` a line) of the "
                    "hosts to run on (default: %s when it exists, else this node)" % _hosts.DEFAULT_HOSTFILE)
    ap.add_argument("-i", "--include", default="", help="hosts and slots to use: NAME[:SLOT[,SLOT...]][@...]")
    ap.add_argument("-e", "--exclude", default="", help="hosts and slots not to use (the same format)")
    ap.add_argument("--num_nodes", type=int, default=-1, help="the first K hosts of the hostfile; with "
                    "--node_rank, the nodes of the job")
    ap.add_argument("--node_rank", type=int, default=-1, help="this node's index in [0, K): run the launcher on "
                    "every node (torchrun's rendezvous at --master_addr:--master_port)")
    ap.add_argument("--no_ssh", action="store_true", help="DeepSpeed's flag for --node_rank launches (implied)")
    ap.add_argument("--num_gpus", "--num_procs", "--num_accelerators", dest="n", type=int, default=None,
                    help="ranks per node (default: the GPUs torch sees, else 1; with a hostfile, each host's slots)")
    ap.add_argument("--master_addr", default="", help="node 0's address (default: 127.0.0.1 on one node, the "
                    "hostfile's first host on several)")
    ap.add_argument("--master_port", type=int, default=29500)
    ap.add_argument("--launcher", default="openmpi", help="the multi-node launcher for a hostfile: openmpi "
                    "(mpirun); pdsh, slurm, mvapich, mpich and impi are not handed to")
    ap.add_argument("--launcher_args", default="", help="extra arguments for mpirun, one string")
    ap.add_argument("--force_multi", action="store_true", help="hand a hostfile of one host to mpirun too")
    ap.add_argument("--no_local_rank", action="store_true", help="do not append --local_rank=I to the script's "
                    "arguments")
    ap.add_argument("--no_python", action="store_true", help="SCRIPT is an executable, not a Python file")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    return ap


def parse(argv):
    """The parsed flags, with .mode ("local", "mpirun" or "torchrun") and .hosts ({host: [slot, ...]}: the local
    node's slots, the hosts mpirun gets, or this node's slots under torchrun, keyed by its index); argparse's
    error (exit 2) naming the flag for what cannot run."""
    ap = _parser()
    a = ap.parse_args(argv)
    if a.n is not None and a.n < 1:
        ap.error("--num_gpus %d: at least 1" % a.n)
    if not 0 < a.master_port < 65536:
        ap.error("--master_port %d: not a port" % a.master_port)
    if a.no_ssh and a.node_rank < 0:
        ap.error("--no_ssh: give this node's --node_rank (and --num_nodes, --master_addr)")
    path = a.hostfile or _hosts.DEFAULT_HOSTFILE
    try:
        hosts = _hosts.read_hostfile(path) if a.hostfile or os.path.exists(path) else None
    except OSError as e:
        ap.error("--hostfile %s: %s" % (path, e.strerror or e))
    except _hosts.HostfileError as e:
        ap.error("--hostfile %s" % e)
    try:
        if a.node_rank >= 0:
            _plan_torchrun(a, hosts, ap)
        elif hosts is not None:
            res = _hosts.select(hosts, a.include, a.exclude, a.num_nodes, a.n or -1)
            if len(res) > 1 or a.force_multi:
                if a.launcher.lower() not in ("openmpi", "mpirun", "ompi"):
                    ap.error("--launcher %s: zoffload hands several hosts to Open MPI's mpirun (--launcher openmpi), "
                             "or runs on every node with --node_rank (torchrun's rendezvous)" % a.launcher)
                a.mode, a.hosts = "mpirun", res
                a.master_addr = a.master_addr or next(iter(res))
            else:
                a.mode, a.hosts = "local", res
        else:
            if a.num_nodes > 1:
                ap.error("--num_nodes %d: several nodes need a --hostfile (mpirun reaches them) or --node_rank on "
                         "each node (torchrun)" % a.num_nodes)
            a.mode = "local"
            a.hosts = _local_slots(a)
    except _hosts.HostfileError as e:
        ap.error(str(e))
    a.master_addr = a.master_addr or "127.0.0.1"
    return a


def _local_slots(a):
    """{"localhost": [slots]}: this node's ranks, picked by --include/--exclude/--num_gpus from its devices."""
    if not a.include and not a.exclude:
        return {"localhost": list(range(a.n or _default_procs()))}
    return _hosts.select({"localhost": max(a.n or 0, _default_procs())}, a.include, a.exclude, -1, a.n or -1)


def _plan_torchrun(a, hosts, ap):
    if hosts is not None:
        res = _hosts.select(hosts, a.include, a.exclude, a.num_nodes, a.n or -1)
        nodes = len(res)
        if a.node_rank >= nodes:
            ap.error("--node_rank %d: the hostfile gives %d node(s)" % (a.node_rank, nodes))
        name = list(res)[a.node_rank]
        a.hosts = {name: res[name]}
        a.master_addr = a.master_addr or next(iter(res))
    else:
        if a.num_nodes < 1:
            ap.error("--node_rank %d: give --num_nodes (the job's nodes), or a --hostfile" % a.node_rank)
        nodes = a.num_nodes
        if a.node_rank >= nodes:
            ap.error("--node_rank %d: expected 0 .. %d (--num_nodes %d)" % (a.node_rank, nodes - 1, nodes))
        if not a.master_addr and nodes > 1:
            ap.error("--node_rank %d of %d nodes: give --master_addr (node 0's address, the same on every node)"
                     % (a.node_rank, nodes))
        a.hosts = _local_slots(a)
    a.mode, a.nodes = "torchrun", nodes


log = logging.getLogger("zoffload.launcher")


def _omp_threads(n):
    """OMP_NUM_THREADS for each of @n ranks: the cores this process may use, shared out (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // n)


def _visible(slots):
    """CUDA_VISIBLE_DEVICES for a node's @slots when they are not simply its first len(@slots) devices, else None."""
    return None if list(slots) == list(range(len(slots))) else ",".join(str(s) for s in slots)


# What DeepSpeed's multi-node runners export to the other nodes (deepspeed/launcher/multinode_runner.py), and
# zoffload's own variables.
_EXPORTED = ("PYTHON", "NCCL", "UCX", "MV2", "OMP_", "ZO_", "ZOFFLOAD_")


def _rank_cmd(a):
    """What torchrun and mpirun start for each rank: zoffload._rank, which appends --local_rank=I."""
    return (["-m", "zoffload._rank"] + (["--no_python"] if a.no_python else [])
            + (["--no_local_rank"] if a.no_local_rank else []) + [a.script] + a.args)


def mpirun_command(a, mpirun="mpirun"):
    """The mpirun command line for the hosts of @a (parse()'s result, mode "mpirun"): one app context per host."""
    cmd = [mpirun] + shlex.split(a.launcher_args)
    cmd += ["-x", "MASTER_ADDR=%s" % a.master_addr, "-x", "MASTER_PORT=%d" % a.master_port]
    for k in sorted(os.environ):
        if k.startswith(_EXPORTED):
            cmd += ["-x", k]
    for i, (host, slots) in enumerate(a.hosts.items()):
        if i:
            cmd.append(":")
        cmd += ["-np", str(len(slots)), "-H", "%s:%d" % (host, len(slots))]
        vis = _visible(slots)
        if vis is not None:
            cmd += ["env", "CUDA_VISIBLE_DEVICES=%s" % vis]
        cmd += [sys.executable, "-u"] + _rank_cmd(a)
    return cmd


def _torch_std_broken():
    """Debian's torch 1.13 under Python 3.11 reads torchrun's default --redirects/--tee "0" as None and fails in
    to_map(); True there."""
    try:
        from torch.distributed.elastic.multiprocessing.api import Std
        return Std.from_str("0") is None
    except Exception:  # noqa: BLE001 (no torch.distributed.elastic: torchrun itself will say so)
        return False


def torchrun_command(a, log_dir=None):
    """The torchrun command line for this node (@a: parse()'s result, mode "torchrun")."""
    slots = next(iter(a.hosts.values()))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(a.nodes), "--node_rank", str(a.node_rank),
           "--nproc_per_node", str(len(slots)), "--master_addr", a.master_addr, "--master_port", str(a.master_port)]
    if log_dir is not None:  # stderr through a log file and tee'd back: what the default does elsewhere
        cmd += ["--redirects", "2", "--tee", "2", "--log_dir", log_dir]
    return cmd + _rank_cmd(a)


def _handoff(a):
    """Several nodes: mpirun or torchrun started with this launcher's flags; its exit status."""
    env = dict(os.environ)
    tmp = None
    if a.mode == "mpirun":
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            print("zoffload: several hosts are started through Open MPI's mpirun, which is not on PATH",
                  file=sys.stderr)
            return 2
        cmd = mpirun_command(a, mpirun)
    else:
        vis = _visible(next(iter(a.hosts.values())))
        if vis is not None:
            env["CUDA_VISIBLE_DEVICES"] = vis
        if _torch_std_broken():
            tmp = tempfile.mkdtemp(prefix="zoffload-torchrun-")
        cmd = torchrun_command(a, tmp)
    print("zoffload: %s" % " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    try:
        status = _wait([subprocess.Popen(cmd, env=env)])
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if status:
        print("zoffload: %s exited with status %d" % (a.mode, status), file=sys.stderr)
    return status


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    if a.mode != "local":
        return _handoff(a)
    slots = next(iter(a.hosts.values()))
    n = len(slots)
    procs = []
    extra = {}
    vis = _visible(slots)
    if vis is not None:
        extra["CUDA_VISIBLE_DEVICES"] = vis
    if n > 1 and "OMP_NUM_THREADS" not in os.environ:
        extra["OMP_NUM_THREADS"] = str(_omp_threads(n))
        log.warning("zoffload: OMP_NUM_THREADS=%s for each of the %d ranks (the cores shared out; set it to choose)",
                    extra["OMP_NUM_THREADS"], n)
    for i in range(n):
        env = dict(os.environ, RANK=str(i), LOCAL_RANK=str(i), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR=a.master_addr, MASTER_PORT=str(a.master_port), **extra)
        cmd = ([] if a.no_python else [sys.executable, "-u"]) + [a.script] + a.args
        if not a.no_local_rank:
            cmd.append("--local_rank=%d" % i)
        procs.append(subprocess.Popen(cmd, env=env))
    return _wait(procs)


def _wait(procs):
    """Wait for @procs (the ranks, or the one launcher handed to); SIGINT and SIGTERM passed on; the first failing
    one stops the others. The exit status as a shell reports it."""

    def forward(sig, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    try:
        while any(p.poll() is None for p in procs):
            bad = [p for p in procs if p.poll() not in (None, 0)]
            if bad and len(procs) > 1:
                status = bad[0].returncode
                print("zoffload: rank %d exited with status %d; stopping the others" % (procs.index(bad[0]), status),
                      file=sys.stderr)
                for p in procs:
                    if p.poll() is None:
                        p.terminate()
                deadline = time.monotonic() + 10
                while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                    time.sleep(0.1)
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                break
            time.sleep(0.05)
        for p in procs:
            p.wait()
            if status == 0 and p.returncode != 0:
                status = p.returncode
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return status if status >= 0 else 128 - status  # a rank killed by signal S: 128 + S, as a shell reports it


if __name__ == "__main__":
    sys.exit(main())
