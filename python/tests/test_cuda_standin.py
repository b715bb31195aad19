"""The parts of the CUDA placement (zoffload/_device.py CudaPlacement) that run without torch.cuda, against the
stand-in libcudart (tests/fake_cudart.c, FAKE_CUDA_DEVICES=2): the local ordinal from the launcher's variables
checked against the devices libzoffload sees, and the ctypes calls of bind() and close() (zo_stream_wrap of a
CUDA stream handle, zo_engine_set_compute_stream, zo_stream_destroy leaving the wrapped stream alive), and
ordered()'s waits. Run by ctest python_cuda_standin; skipped where libzoffload sees no CUDA device or where
torch has CUDA (python/tests/test_cuda.py runs the whole path there). What cannot run here: CudaPlacement's
constructor (it needs torch.cuda.is_available()), view() (torch.as_tensor of a __cuda_array_interface__ needs a
CUDA torch), and every training step of a CUDA model (torch's kernels)."""
import ctypes
import json
import os

import pytest
import torch

from zoffload import _device, _lib

pytestmark = pytest.mark.skipif(torch.cuda.is_available() or _lib.lib.zo_device_cuda_count() == 0,
                                reason="needs libzoffload on the stand-in libcudart and a torch without CUDA")


def test_local_ordinal_against_the_standin(monkeypatch):
    n = _lib.lib.zo_device_cuda_count()
    assert n == 2, "FAKE_CUDA_DEVICES=2 expected, libzoffload sees %d" % n
    for var in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    assert _lib.local_ordinal(n) == (1, "OMPI_COMM_WORLD_LOCAL_RANK")
    monkeypatch.setenv("LOCAL_RANK", "2")  # read first; past the two devices
    with pytest.raises(_lib.ZoffloadError, match="LOCAL_RANK=2"):
        _lib.local_ordinal(n)


def test_cuda_placement_refused_by_cpu_torch():
    with pytest.raises(RuntimeError, match="torch sees no CUDA device \\(this torch is a CPU-only build\\)"):
        _device.CudaPlacement(torch.device("cuda"))


class _Stream:
    """torch.cuda.Stream's two members that _device.py uses, over a raw cudaStream_t."""

    def __init__(self, handle, log=None):
        self.cuda_stream, self.log = handle, log

    def wait_stream(self, other):
        self.log.append((self, other))


def _engine(dev):
    cfg = ctypes.create_string_buffer(_lib.lib.zo_config_sizeof())
    app = (ctypes.c_char_p * 1)()
    opts = _lib.ConfigOpts(app_blocks=ctypes.cast(app, ctypes.c_void_p), world_size=1, auto_values=None)
    raw = json.dumps({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                      "zoffload": {"device_arena_bytes": "fit"}}).encode()  # as Engine sets for a GPU model
    _lib.check(_lib.lib.zo_config_parse(raw, len(raw), b"standin", ctypes.byref(opts), cfg), "config")
    eng = ctypes.c_void_p()
    _lib.check(_lib.lib.zo_engine_create(cfg, dev, None, ctypes.byref(eng)), "zo_engine_create")
    return eng


def test_bind_and_close_on_a_standin_stream(monkeypatch):
    cudart = ctypes.CDLL("libcudart.so.%d" % int(os.environ.get("ZO_CUDART_MAJOR", "13")))  # the one loaded
    raw = ctypes.c_void_p()
    assert cudart.cudaStreamCreate(ctypes.byref(raw)) == 0
    torch_stream = _Stream(raw.value)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: torch_stream)
    place = object.__new__(_device.CudaPlacement)  # the constructor needs torch.cuda: set what it would
    place.ordinal, place.device, place.stream, place.zstream = 0, torch.device("cuda", 0), None, ctypes.c_void_p()
    dev = ctypes.c_void_p()
    _lib.check(_lib.lib.zo_device_create(_lib.DEVICE_CUDA, 0, 0, ctypes.byref(dev)), "zo_device_create(cuda)")
    eng = _engine(dev)
    try:
        h = ctypes.c_void_p()
        _lib.check(_lib.lib.zo_engine_register_param(eng, b"w", 1000, ctypes.byref(h)), "register")
        place.bind(_lib.lib, dev, eng)
        assert place.stream is torch_stream and place.zstream.value
        _lib.check(_lib.lib.zo_engine_finalize(eng), "finalize")
        w = (ctypes.c_float * 1000)(*[0.5] * 1000)
        _lib.check(_lib.lib.zo_engine_load_param(eng, h, w), "load")
    finally:
        _lib.lib.zo_engine_destroy(eng)
    place.close()
    assert not place.zstream.value
    place.close()  # twice: nothing left to destroy
    # the wrapped stream is torch's: still alive (the stand-in aborts on any use of a destroyed stream)
    assert cudart.cudaStreamQuery(ctypes.c_void_p(raw.value)) == 0
    assert cudart.cudaStreamDestroy(ctypes.c_void_p(raw.value)) == 0
    _lib.lib.zo_device_destroy(dev)


def test_ordered_waits_both_ways(monkeypatch):
    log = []
    bound, other = _Stream(1, log), _Stream(2, log)
    place = object.__new__(_device.CudaPlacement)
    place.device, place.stream = torch.device("cuda", 0), bound
    cur = [bound]
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: cur[0])
    with place.ordered():
        assert log == []
    assert log == []  # on the bound stream: no waits
    cur[0] = other
    with place.ordered():
        assert log == [(bound, other)]  # the bound stream waits for the current one's work first
    assert log == [(bound, other), (other, bound)]  # and the current one for what the engine queued
