"""zoffload for PyTorch: a thin ctypes binding over libzoffload (the C library is the product; nothing here
reimplements it). ``zoffload.__library__`` is the file that was loaded.

    import zoffload.optim
    opt = zoffload.optim.CPUAdam(model.parameters(), lr=1e-3)   # DeepSpeedCPUAdam's arguments
    engine = zoffload.initialize(model=model, config="ds_config.json")   # the engine, as deepspeed.initialize
"""
# torch before libzoffload: torch's libraries, loaded into a process that already holds the jemalloc that
# libzoffload links, abort in free() ("free(): invalid pointer") while `import torch` runs. Loaded first, they
# keep glibc's allocator, and `import zoffload` works before or after `import torch`.
import torch  # noqa: F401

from ._lib import ZoffloadError, path as __library__  # noqa: E402

__version__ = "0.1.0"
__all__ = ["ZoffloadError", "__library__", "optim", "initialize", "Engine"]

from . import optim  # noqa: E402  (after the library is loaded)
from .engine import Engine, initialize  # noqa: E402
