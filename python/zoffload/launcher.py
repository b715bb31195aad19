"""zoffload - the `deepspeed` launcher for one node: start a training script's ranks as `deepspeed --num_gpus N
script.py ARGS` does, then wait for them.

    zoffload [--num_gpus N | --num_procs N] [--master_addr A] [--master_port P] [--no_local_rank] SCRIPT [ARGS...]
    python -m zoffload.launcher ...                                                          (the same)

Each rank is `python SCRIPT ARGS --local_rank=I` (DeepSpeed's launcher appends it; --no_local_rank leaves it out)
with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (default
29500) in its environment, as torchrun sets them, so zoffload.initialize and zoffload.comm.init_distributed find
the ranks. N defaults to the GPUs torch sees (CUDA_VISIBLE_DEVICES respected), else 1. The launcher's exit status
is the first failing rank's (the others are stopped: SIGTERM, then SIGKILL after 10 s), else 0; SIGINT and SIGTERM
are passed to every rank. With several ranks and no OMP_NUM_THREADS in the environment, each rank gets
OMP_NUM_THREADS = the cores this process may use divided by the ranks (at least 1), as torchrun sets it (to 1):
ranks whose OpenMP threads outnumber the cores wait on each other's spinning threads (on 2 cores, 2 ranks of the
Python front's stage 3 took 1126 ms a step with torch's default of 2 threads each, 346 ms with 1). Several nodes (DeepSpeed's hostfile, --num_nodes > 1) are not built: use torchrun or
mpirun there.
"""
import argparse
import logging
import os
import signal
import subprocess
import sys
import time


def _default_procs():
    try:
        import torch
        return max(1, torch.cuda.device_count())
    except Exception:  # noqa: BLE001 (no torch or no CUDA: one rank)
        return 1


def parse(argv):
    ap = argparse.ArgumentParser(prog="zoffload", description="start a training script's ranks on this node, as "
                                 "`deepspeed --num_gpus N script.py` does")
    ap.add_argument("--num_gpus", "--num_procs", "--num_accelerators", dest="n", type=int, default=None,
                    help="ranks to start (default: the GPUs torch sees, else 1)")
    ap.add_argument("--num_nodes", type=int, default=1, help="1 only (several nodes: torchrun or mpirun)")
    ap.add_argument("--master_addr", default="127.0.0.1")
    ap.add_argument("--master_port", type=int, default=29500)
    ap.add_argument("--no_local_rank", action="store_true", help="do not append --local_rank=I to the script's "
                    "arguments")
    ap.add_argument("--no_python", action="store_true", help="SCRIPT is an executable, not a Python file")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.num_nodes != 1:
        ap.error("--num_nodes %d: one node only (use torchrun or mpirun across nodes)" % a.num_nodes)
    if a.n is None:
        a.n = _default_procs()
    if a.n < 1:
        ap.error("--num_gpus %d: at least 1" % a.n)
    if not 0 < a.master_port < 65536:
        ap.error("--master_port %d: not a port" % a.master_port)
    return a


log = logging.getLogger("zoffload.launcher")


def _omp_threads(n):
    """OMP_NUM_THREADS for each of @n ranks: the cores this process may use, shared out (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // n)


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    procs = []
    extra = {}
    if a.n > 1 and "OMP_NUM_THREADS" not in os.environ:
        extra["OMP_NUM_THREADS"] = str(_omp_threads(a.n))
        log.warning("zoffload: OMP_NUM_THREADS=%s for each of the %d ranks (the cores shared out; set it to choose)",
                    extra["OMP_NUM_THREADS"], a.n)
    for i in range(a.n):
        env = dict(os.environ, RANK=str(i), LOCAL_RANK=str(i), WORLD_SIZE=str(a.n), LOCAL_WORLD_SIZE=str(a.n),
                   MASTER_ADDR=a.master_addr, MASTER_PORT=str(a.master_port), **extra)
        cmd = ([] if a.no_python else [sys.executable, "-u"]) + [a.script] + a.args
        if not a.no_local_rank:
            cmd.append("--local_rank=%d" % i)
        procs.append(subprocess.Popen(cmd, env=env))

    def forward(sig, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    try:
        while any(p.poll() is None for p in procs):
            bad = [p for p in procs if p.poll() not in (None, 0)]
            if bad:
                status = bad[0].returncode
                print("zoffload: rank %d exited with status %d; stopping the others" % (procs.index(bad[0]),
                      status), file=sys.stderr)
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
