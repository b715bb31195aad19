"""zoffload.launcher (the `zoffload` console script): ranks started as `deepspeed --num_gpus N script.py` starts
them, and a failing rank ends the launch with its status."""
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import os, sys
    # one write per line: the ranks share the pipe and run unbuffered (python -u), so print()'s separate writes of
    # each argument could interleave between ranks
    line = " ".join(["rank", os.environ["RANK"], "local", os.environ["LOCAL_RANK"], "world", os.environ["WORLD_SIZE"],
                     os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], "args"] + sys.argv[1:]) + "\\n"
    os.write(1, line.encode())
    if os.environ.get("FAIL_RANK") == os.environ["RANK"]:
        sys.exit(3)
    if os.environ.get("FAIL_RANK"):
        import time; time.sleep(60)
""")


def launch(tmp_path, *args, env=None):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, "-m", "zoffload.launcher", *args, str(script), "--epochs", "2"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, **(env or {})))


def test_ranks_and_local_rank_argument(tmp_path):
    r = launch(tmp_path, "--num_gpus", "3", "--master_port", "29611")
    assert r.returncode == 0, r.stderr
    lines = sorted(l for l in r.stdout.splitlines() if l.startswith("rank"))
    assert lines == ["rank %d local %d world 3 127.0.0.1 29611 args --epochs 2 --local_rank=%d" % (i, i, i)
                     for i in range(3)], r.stdout


def test_no_local_rank(tmp_path):
    r = launch(tmp_path, "--num_procs", "1", "--no_local_rank")
    assert r.returncode == 0, r.stderr
    assert "rank 0 local 0 world 1 127.0.0.1 29500 args --epochs 2\n" in r.stdout


def test_a_failing_rank_stops_the_others(tmp_path):
    r = launch(tmp_path, "--num_gpus", "2", env={"FAIL_RANK": "1"})
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "rank 1 exited with status 3; stopping the others" in r.stderr


@pytest.mark.parametrize("bad", [["--num_nodes", "2"], ["--num_gpus", "0"], ["--master_port", "70000"]])
def test_refused(tmp_path, bad):
    r = launch(tmp_path, *bad)
    assert r.returncode == 2 and "zoffload: error:" in r.stderr, r.stderr


def test_omp_threads_shared_out(tmp_path):
    """Several ranks: OMP_NUM_THREADS = the cores shared out unless it is set; one rank: left alone."""
    script = tmp_path / "omp.py"
    script.write_text("import os\nos.write(1, ('omp %s\\n' % os.environ.get('OMP_NUM_THREADS')).encode())\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}

    def run(*args, **extra):
        r = subprocess.run([sys.executable, "-m", "zoffload.launcher", *args, "--no_local_rank", str(script)],
                           capture_output=True, text=True, timeout=120, env=dict(env, **extra))
        assert r.returncode == 0, r.stderr
        return sorted(l for l in r.stdout.splitlines() if l.startswith("omp")), r.stderr
    want = str(max(1, len(os.sched_getaffinity(0)) // 2))
    lines, err = run("--num_gpus", "2")
    assert lines == ["omp " + want] * 2 and "OMP_NUM_THREADS=%s for each of the 2 ranks" % want in err, (lines, err)
    assert run("--num_gpus", "2", OMP_NUM_THREADS="3")[0] == ["omp 3"] * 2
    assert run("--num_gpus", "1")[0] == ["omp None"]
