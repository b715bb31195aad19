"""python -m zoffload._rank [--no_python] [--no_local_rank] SCRIPT [ARGS...] - one rank of a multi-node launch
(zoffload.launcher hands those to torchrun or mpirun, which start this on every node): runs SCRIPT ARGS with
--local_rank=I appended as DeepSpeed's launcher appends it, I being this process's rank on its node (LOCAL_RANK
from torchrun, OMPI_COMM_WORLD_LOCAL_RANK from mpirun). The process is replaced (exec): signals and the exit
status are the script's own."""
import os
import sys


def main(argv):
    no_python = no_local_rank = False
    while argv and argv[0] in ("--no_python", "--no_local_rank"):
        no_python |= argv[0] == "--no_python"
        no_local_rank |= argv[0] == "--no_local_rank"
        argv = argv[1:]
    if not argv:
        sys.exit("usage: python -m zoffload._rank [--no_python] [--no_local_rank] SCRIPT [ARGS...]")
    cmd = list(argv)
    if not no_local_rank:
        local = os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"))
        if local is None:
            sys.exit("zoffload._rank: neither LOCAL_RANK (torchrun) nor OMPI_COMM_WORLD_LOCAL_RANK (mpirun) is set")
        cmd.append("--local_rank=%s" % local)
    if not no_python:
        cmd = [sys.executable, "-u"] + cmd
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
