"""zoffload for PyTorch: a thin ctypes binding over libzoffload (the C library is the product; nothing here
reimplements it). ``zoffload.__library__`` is the file that was loaded.

    import zoffload.optim
    opt = zoffload.optim.CPUAdam(model.parameters(), lr=1e-3)   # DeepSpeedCPUAdam's arguments
    engine, optimizer, _, lr_scheduler = zoffload.initialize(model=model, config="ds_config.json")  # deepspeed's
"""
from ._lib import ZoffloadError, lib as _clib, path as __library__

__version__ = "0.1.0"
__all__ = ["ZoffloadError", "__library__", "optim", "initialize", "add_config_arguments", "Engine", "host_allocator",
           "init_distributed", "accelerator", "moe"]


def host_allocator():
    """What the pinned host pool allocates small buffers with (zo_host_allocator()): jemalloc found in the process
    or loaded privately (its malloc never replaces the interpreter's), or page mappings when this interpreter
    cannot load Debian's jemalloc (it needs GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384 at start-up;
    training is the same either way, buffers under 1 MiB just take whole pages)."""
    return _clib.zo_host_allocator().decode()


from . import optim  # noqa: E402  (after the library is loaded)
from . import zero  # noqa: E402  (deepspeed.zero: Init, GatheredParameters, register_external_parameter)
from .engine import Engine  # noqa: E402
from .api import initialize  # noqa: E402
from .ds_api import add_config_arguments  # noqa: E402
from .comm import init_distributed  # noqa: E402  (deepspeed.init_distributed)
from . import accelerator, moe  # noqa: E402,F401  (deepspeed.accelerator.get_accelerator, deepspeed.moe.utils)
