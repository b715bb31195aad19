"""zoffload beside torch in either import order (DeepSpeed's scripts import deepspeed, so zoffload, before torch).

libzoffload must not bring an NCCL of its own into the process at import: torch's CUDA wheels need their newer
libnccl.so.2, and an older one already loaded under that soname shadowed it ("libtorch_cuda.so: undefined symbol:
ncclCommResume", torch 2.15). Each case runs in a fresh interpreter, as a script would start."""
import os
import subprocess
import sys

import pytest


def _run(code):
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=os.environ)
    assert p.returncode == 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout, p.stderr[-4000:])
    return p.stdout


MAPPED = ("import os\n"
          "def mapped(word):\n"
          "    return sorted({l.split()[-1] for l in open('/proc/self/maps') if word in l.split()[-1]})\n")


def test_library_loads_no_nccl():
    """The library alone (the package imports torch, which may map its own NCCL): opened, it maps none."""
    lib = os.environ.get("ZOFFLOAD_LIBRARY")
    if not lib:
        pytest.skip("ZOFFLOAD_LIBRARY is not set (the library is found by the loader)")
    out = _run(MAPPED + "import ctypes\nctypes.CDLL(%r)\nprint(mapped('libnccl'))" % lib)
    assert out.strip() == "[]", "opening libzoffload mapped an NCCL: " + out


@pytest.mark.parametrize("order", ["zoffload, torch", "torch, zoffload"])
def test_import_order(order):
    out = _run(MAPPED + "import %s\nimport torch.distributed\n"
               "print(torch.__version__, torch.distributed.is_nccl_available(), mapped('libnccl'))" % order)
    print(order, "->", out.strip())
