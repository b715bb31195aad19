"""examples/cuda_on_cpu.py runs a script written for CUDA on the CPU unchanged (how DeepSpeedExamples' gan ran beside
DeepSpeed in docs/pytorch/vs-deepspeed.md): CUDA devices become the CPU, set_device/synchronize do nothing, other
devices and isinstance(x, torch.device) are untouched, and the script's arguments reach it."""
import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(HERE, "..", "examples", "cuda_on_cpu.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script runs as it is")
def test_cuda_script_runs_on_cpu(tmp_path):
    script = tmp_path / "cuda_script.py"
    script.write_text(
        "import sys, torch\n"
        "torch.cuda.set_device(int(sys.argv[1]))\n"
        "d = torch.device('cuda', int(sys.argv[1]))\n"
        "assert isinstance(d, torch.device) and d.type == 'cpu', d\n"
        "assert torch.device('cuda:0').type == 'cpu' and torch.device('meta').type == 'meta'\n"
        "x = torch.ones(3, device=d) * 2\n"
        "torch.cuda.synchronize()\n"
        "print('ran on', x.device, sys.argv[1:])\n")
    out = subprocess.run([sys.executable, SHIM, str(script), "0", "--flag"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ran on cpu ['0', '--flag']" in out.stdout
    bare = subprocess.run([sys.executable, str(script), "0"], capture_output=True, text=True, timeout=120)
    assert bare.returncode != 0  # without the shim the script needs a GPU
