"""Run a training script written for CUDA on the CPU, unchanged: `python cuda_on_cpu.py SCRIPT [ARGS...]`.

Some DeepSpeedExamples scripts call torch.cuda.set_device() and build torch.device("cuda", rank) whether or not a
GPU is there (training/gan/gan_deepspeed_train.py does). This runs SCRIPT as __main__ with those CUDA calls aimed at
the CPU, the same way under zoffload and under DeepSpeed (DS_ACCELERATOR=cpu), so the two can be compared side by
side on a machine without a GPU:
  - torch.device("cuda"...) and torch.device("cuda", n) give torch.device("cpu") (other devices are untouched, and
    isinstance(x, torch.device) still holds);
  - torch.cuda.set_device, torch.cuda.synchronize and torch.cuda.manual_seed_all do nothing, as there is no GPU.
Only when torch.cuda.is_available() is False; with a GPU it runs SCRIPT as it is.
"""
import os
import runpy
import sys

import torch

_device = torch.device


class _DeviceMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _device)


class device(metaclass=_DeviceMeta):
    """torch.device, with CUDA devices mapped to the CPU."""

    def __new__(cls, kind, index=None):
        if isinstance(kind, str) and kind.split(":")[0] == "cuda":
            return _device("cpu")
        return _device(kind) if index is None else _device(kind, index)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: cuda_on_cpu.py SCRIPT [ARGS...]")
    if not torch.cuda.is_available():
        torch.device = device
        torch.cuda.set_device = lambda *a, **k: None
        torch.cuda.synchronize = lambda *a, **k: None
        torch.cuda.manual_seed_all = lambda *a, **k: None
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
