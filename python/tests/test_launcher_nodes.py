"""The `zoffload` launcher's multi-node flags (DeepSpeed's: --hostfile, --include/--exclude, --num_nodes,
--node_rank/--no_ssh, --master_addr/--master_port, --launcher/--launcher_args, --force_multi): the hosts and slots
picked and the command handed to mpirun or torchrun, the refusals, and (ZOFFLOAD_SLOW_TESTS=1: ctest
python_launcher_nodes, label slow) real jobs: two "nodes" on this machine (two launcher invocations, --node_rank 0
and 1, one rank each, through torchrun's rendezvous) and a hostfile through mpirun, each training
python/tests/mpi_train.py to the same losses and weights, to the last bit, as one rank accumulating the two halves."""
import os
import shutil
import subprocess
import sys

import pytest

from test_comm import _free_port
from zoffload import _hosts, launcher

HERE = os.path.dirname(os.path.abspath(__file__))
MPI_TRAIN = os.path.join(HERE, "mpi_train.py")
slow = pytest.mark.skipif(os.environ.get("ZOFFLOAD_SLOW_TESTS") != "1",
                          reason="slow: ZOFFLOAD_SLOW_TESTS=1 (ctest python_launcher_nodes)")


def hostfile(tmp_path, text="# the pool\nworker-0 slots=4\nworker-1 slots=4  # second\n\nworker-2 slots=2\n"):
    p = tmp_path / "hostfile"
    p.write_text(text)
    return str(p)


def parse(*argv):
    return launcher.parse(list(argv) + ["train.py", "--epochs", "1"])


def test_hostfile_read_in_order(tmp_path):
    assert list(_hosts.read_hostfile(hostfile(tmp_path)).items()) == [("worker-0", 4), ("worker-1", 4),
                                                                      ("worker-2", 2)]


@pytest.mark.parametrize("text,msg", [("worker-0 slots=4\nworker-0 slots=2\n", ":2: host worker-0 given twice"),
                                      ("worker-0 4\n", ":1: 'worker-0 4': expected `HOSTNAME slots=N`"),
                                      ("worker-0 slots=0\n", ":1: 'worker-0 slots=0'"),
                                      ("# nothing\n", ": no hosts")])
def test_bad_hostfile_named(tmp_path, text, msg):
    with pytest.raises(_hosts.HostfileError) as e:
        _hosts.read_hostfile(hostfile(tmp_path, text))
    assert str(tmp_path / "hostfile") + msg in str(e.value)


def test_mpirun_command_one_context_per_host(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    a = parse("--hostfile", hostfile(tmp_path), "--include", "worker-0:1,3@worker-1", "--master_port", "29611",
              "--launcher_args", "--mca btl tcp,self")
    assert a.mode == "mpirun" and dict(a.hosts) == {"worker-0": [1, 3], "worker-1": [0, 1, 2, 3]}
    cmd = launcher.mpirun_command(a)
    rank = [sys.executable, "-u", "-m", "zoffload._rank", "train.py", "--epochs", "1"]
    at = cmd.index("-np")
    assert cmd[:at] == ["mpirun", "--mca", "btl", "tcp,self", "-x", "MASTER_ADDR=worker-0", "-x", "MASTER_PORT=29611"
                        ] + [x for k in sorted(os.environ) if k.startswith(launcher._EXPORTED) for x in ("-x", k)]
    assert "NCCL_DEBUG" in cmd[:at]
    assert cmd[at:] == (["-np", "2", "-H", "worker-0:2", "env", "CUDA_VISIBLE_DEVICES=1,3"] + rank + [":"]
                        + ["-np", "4", "-H", "worker-1:4"] + rank)


def test_exclude_num_nodes_num_gpus(tmp_path):
    a = parse("--hostfile", hostfile(tmp_path), "--exclude", "worker-0@worker-1:0", "--num_gpus", "2")
    assert a.mode == "mpirun" and dict(a.hosts) == {"worker-1": [1, 2], "worker-2": [0, 1]}
    assert a.master_addr == "worker-1"
    a = parse("--hostfile", hostfile(tmp_path), "--num_nodes", "1", "--no_local_rank", "--no_python")
    assert a.mode == "local" and dict(a.hosts) == {"worker-0": [0, 1, 2, 3]}  # one host: started here
    a = parse("--hostfile", hostfile(tmp_path), "--num_nodes", "1", "--force_multi", "--no_local_rank", "--no_python")
    assert a.mode == "mpirun"
    cmd = launcher.mpirun_command(a)
    assert cmd[cmd.index("-np"):] == ["-np", "4", "-H", "worker-0:4", sys.executable, "-u", "-m", "zoffload._rank",
                                      "--no_python", "--no_local_rank", "train.py", "--epochs", "1"]


def test_torchrun_command_for_node_rank(tmp_path):
    a = parse("--num_nodes", "2", "--node_rank", "1", "--num_gpus", "2", "--master_addr", "10.0.0.1",
              "--master_port", "29700", "--no_ssh")
    assert a.mode == "torchrun" and a.nodes == 2
    assert launcher.torchrun_command(a) == [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", "1", "--nproc_per_node", "2",
        "--master_addr", "10.0.0.1", "--master_port", "29700", "-m", "zoffload._rank", "train.py", "--epochs", "1"]
    # from a hostfile: the nodes, this node's slots and node 0's address
    a = parse("--hostfile", hostfile(tmp_path), "--node_rank", "1", "--include", "worker-0@worker-2:1")
    assert (a.mode, a.nodes, dict(a.hosts), a.master_addr) == ("torchrun", 2, {"worker-2": [1]}, "worker-0")


def test_local_include_picks_devices(monkeypatch):
    monkeypatch.setattr(launcher, "_default_procs", lambda: 4)
    a = parse("--include", "localhost:1,2")
    assert a.mode == "local" and dict(a.hosts) == {"localhost": [1, 2]}
    assert launcher._visible([1, 2]) == "1,2" and launcher._visible([0, 1]) is None


@pytest.mark.parametrize("argv,msg", [
    (["--num_nodes", "2"], "--num_nodes 2: several nodes need a --hostfile"),
    (["--node_rank", "0"], "--node_rank 0: give --num_nodes"),
    (["--num_nodes", "2", "--node_rank", "2", "--master_addr", "h"], "--node_rank 2: expected 0 .. 1"),
    (["--num_nodes", "2", "--node_rank", "1"], "give --master_addr"),
    (["--no_ssh"], "--no_ssh: give this node's --node_rank"),
    (["--hostfile", "HF", "--include", "worker-9"], "--include 'worker-9': host worker-9 is not in the hostfile"),
    (["--hostfile", "HF", "--include", "worker-0:4"], "slot '4' of worker-0: expected 0 .. 3"),
    (["--hostfile", "HF", "-i", "worker-0", "-e", "worker-1"], "--include and --exclude are mutually exclusive"),
    (["--hostfile", "HF", "--num_nodes", "4"], "--num_nodes 4: only 3 host(s)"),
    (["--hostfile", "HF", "--launcher", "pdsh"], "--launcher pdsh: zoffload hands several hosts to Open MPI"),
    (["--hostfile", "NOFILE"], "--hostfile NOFILE: No such file or directory"),
])
def test_refused_naming_the_flag(tmp_path, capsys, argv, msg):
    hf = hostfile(tmp_path)
    argv = [{"HF": hf, "NOFILE": str(tmp_path / "none")}.get(x, x) for x in argv]
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "zoffload: error:" in err and msg.replace("NOFILE", str(tmp_path / "none")) in err, err



def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                PYTHONPATH=os.pathsep.join([os.path.dirname(HERE)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


WRAP = """import os, runpy, sys
with open(sys.argv[1] + ".rank" + os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "?")), "w") as f:
    f.write(" ".join(os.environ.get(k, "-") for k in ("RANK", "WORLD_SIZE", "GROUP_RANK", "OMPI_COMM_WORLD_RANK",
                                                      "OMPI_COMM_WORLD_SIZE")) + " " + sys.argv[-1] + "\\n")
sys.argv = [%r, "2", "cpu", sys.argv[1]]
runpy.run_path(%r, run_name="__main__")
""" % (MPI_TRAIN, MPI_TRAIN)


def _one_rank(tmp_path):
    out = str(tmp_path / "one")
    r = subprocess.run([sys.executable, MPI_TRAIN, "2", "cpu", out], env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(out) as f:
        return f.read()


@slow
def test_two_nodes_through_torchrun_train_as_one_job(tmp_path):
    """Two launcher invocations, --node_rank 0 and 1 of --num_nodes 2, one rank each, meeting at 127.0.0.1:port:
    one job of two data-parallel ranks (each wrote RANK r, WORLD_SIZE 2, its node's GROUP_RANK; mpi_train.py
    asserts the engine's world size is 2), whose all-reduced losses and saved weights equal one rank's to the bit."""
    wrap = tmp_path / "wrap.py"
    wrap.write_text(WRAP)
    out, port = str(tmp_path / "two"), _free_port()
    nodes = [subprocess.Popen([sys.executable, "-m", "zoffload.launcher", "--num_nodes", "2", "--node_rank", str(r),
                               "--num_gpus", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
                               str(wrap), out], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in (0, 1)]
    logs = [p.communicate(timeout=240)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(l[-3000:] for l in logs)
    for r in (0, 1):
        assert "torch.distributed.run --nnodes 2 --node_rank %d --nproc_per_node 1" % r in logs[r]
        with open(out + ".rank%d" % r) as f:
            assert f.read() == "%d 2 %d - - --local_rank=0\n" % (r, r)
    with open(out) as f:
        assert f.read() == _one_rank(tmp_path)


@slow
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
def test_hostfile_through_mpirun_trains_as_one_job(tmp_path):
    """A hostfile of this machine with two slots, handed to mpirun (--force_multi: one host): ranks 0 and 1 of 2
    over MPI, the same losses and weights as one rank."""
    wrap = tmp_path / "wrap.py"
    wrap.write_text(WRAP)
    out = str(tmp_path / "mpi")
    r = subprocess.run([sys.executable, "-m", "zoffload.launcher", "--hostfile", hostfile(tmp_path, "localhost "
                        "slots=2\n"), "--force_multi", "--launcher_args", "--oversubscribe --bind-to none",
                        "--master_port", str(_free_port()), str(wrap), out], env=_env(), capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert "-np 2 -H localhost:2" in r.stderr
    for k in (0, 1):
        with open(out + ".rank%d" % k) as f:
            assert f.read() == "- - - %d 2 --local_rank=%d\n" % (k, k)
    with open(out) as f:
        assert f.read() == _one_rank(tmp_path)


@slow
def test_a_failing_rank_fails_the_handoff(tmp_path):
    """A rank exiting 3 under the torchrun hand-off: torchrun fails, and the launcher exits non-zero saying so."""
    script = tmp_path / "fail.py"
    script.write_text("import sys\nsys.exit(3)\n")
    r = subprocess.run([sys.executable, "-m", "zoffload.launcher", "--num_nodes", "1", "--node_rank", "0",
                        "--master_port", str(_free_port()), str(script)], env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0, (r.stdout, r.stderr)
    assert "zoffload: torchrun exited with status %d" % r.returncode in r.stderr, r.stderr[-2000:]
