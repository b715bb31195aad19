"""Where the model computes, and how its tensors meet the engine's device memory (zoffload/device.h).

A CPU model runs on libzoffload's host backend: the engine's "device memory" is host memory. An fp32 model keeps
fp32 parameters that receive copies of the working weights (widened from bf16/fp16); a 16-bit model
(model.half(), .to(torch.bfloat16)) computes in the working dtype, its parameters the working weights themselves
(_precision.py says which, and when the module is cast).

A CUDA model runs on the CUDA backend, in the same process and the same CUDA context as torch: device pointers
are shared as they are. The engine's work is ordered against torch's compute through the stream-wrapping call
(zo_stream_wrap of torch.cuda.current_stream() at initialize, zo_engine_set_compute_stream): the engine's copies
wait on events of that stream instead of stalling the host, and fetched weights are waited for on it. When the
caller later computes on another stream (`with torch.cuda.stream(s)`), ordered() makes the two wait for each
other around each engine call. Parameters take the engine's working dtype (bf16 or fp16 when enabled, as
DeepSpeed's engine casts the module) and, at stages 1-2, alias the engine's resident working weights: no second
copy of the weights on the GPU, and a step's new weights land in the model's own storage.
"""
import contextlib
import ctypes

import torch

from . import _lib

_TYPESTR = {torch.float32: "<f4", torch.float16: "<f2", torch.bfloat16: "<i2"}  # bf16 has no type code: int16,
# viewed back as bf16 (the same element size)


class _CudaMemory:
    """An engine allocation shown to torch through the CUDA array interface (version 2: no stream, the caller
    orders). torch keeps this object alive as long as the tensor made from it, and it keeps @owner (the engine's
    memory token, engine._Memory) alive: the memory stays the engine's until no such tensor is left."""

    def __init__(self, ptr, numel, typestr, owner=None):
        self.__cuda_array_interface__ = {"shape": (numel,), "typestr": typestr, "data": (ptr, False),
                                         "strides": None, "version": 2}
        self.owner = owner


class HostPlacement:
    kind = _lib.DEVICE_HOST
    cuda = False

    def __init__(self):
        self.device = torch.device("cpu")
        self.ordinal = 0
        self.compute = torch.float32  # the model's dtype: the working dtype for a 16-bit model (_precision.py)

    def param_dtype(self, working):
        # fp32 models keep fp32 parameters and the working weights are widened into them; a 16-bit model's
        # parameters are the working weights themselves
        return torch.float32 if self.compute == torch.float32 else working

    def view(self, ptr, numel, dtype, owner=None):
        """A tensor over @numel elements of @dtype at engine address @ptr (no copy). Every tensor sharing its
        storage keeps @owner (the engine's memory token) alive."""
        nbytes = numel * torch.tensor([], dtype=dtype).element_size()
        buf = (ctypes.c_char * nbytes).from_address(ptr)
        buf.owner = owner  # torch.frombuffer keeps buf as long as the storage
        return torch.frombuffer(buf, dtype=dtype)

    def bind(self, lib, dev, eng):
        """Tell the engine where compute runs: on the host backend compute is synchronous with the caller."""

    def ordered(self):
        return contextlib.nullcontext()

    def close(self):
        pass


class CudaPlacement:
    kind = _lib.DEVICE_CUDA
    cuda = True

    def __init__(self, device):
        if not torch.cuda.is_available():
            raise RuntimeError("zoffload.initialize: device %s asked for, but torch sees no CUDA device (this torch "
                               "is %s)" % (device, "a CPU-only build" if torch.version.cuda is None
                                           else "built with CUDA %s" % torch.version.cuda))
        # "cuda" with no index: under a launcher (torchrun, mpirun, srun) the local rank's GPU, as DeepSpeed does;
        # else torch's current device. A local rank at or past torch.cuda.device_count() is an error naming it.
        self.ordinal = device.index
        if self.ordinal is None:
            self.ordinal, var = _lib.local_ordinal(torch.cuda.device_count())
            if var is None:
                self.ordinal = torch.cuda.current_device()
        self.device = torch.device("cuda", self.ordinal)
        self.stream = None  # torch's stream the engine orders against (bound at initialize)
        self.zstream = ctypes.c_void_p()

    def param_dtype(self, working):
        return working

    def view(self, ptr, numel, dtype, owner=None):
        t = torch.as_tensor(_CudaMemory(ptr, numel, _TYPESTR[dtype], owner), device=self.device)
        return t.view(dtype) if t.dtype != dtype else t

    def bind(self, lib, dev, eng):
        """The engine's compute stream: torch's current stream on this GPU, wrapped (not owned). Call before
        zo_engine_finalize()."""
        self.stream = torch.cuda.current_stream(self.device)
        _lib.check(lib.zo_stream_wrap(dev, ctypes.c_void_p(self.stream.cuda_stream), ctypes.byref(self.zstream)),
                   "zo_stream_wrap of torch's current stream")
        _lib.check(lib.zo_engine_set_compute_stream(eng, self.zstream), "zo_engine_set_compute_stream")

    @contextlib.contextmanager
    def ordered(self):
        """Around an engine call made while torch's current stream is not the bound one: the bound stream first
        waits for the work queued so far on the current one (gradients produced there, copies out of fetched
        weights), and afterwards the current one waits for what the engine queued (fetched weights landing)."""
        cur = torch.cuda.current_stream(self.device)
        if cur == self.stream:
            yield
            return
        self.stream.wait_stream(cur)
        try:
            yield
        finally:
            cur.wait_stream(self.stream)

    def close(self):
        if self.zstream.value:
            _lib.lib.zo_stream_destroy(self.zstream)  # waits for the stream; torch's stream itself stays
            self.zstream = ctypes.c_void_p()


def placement(model, device):
    """The placement for @model: @device when given ("cpu", "cuda", "cuda:N", a torch.device), else the device
    its trainable parameters are on (all on one). A CPU model may be given device="cuda": its parameters are read
    from host memory into the engine and the GPU holds only the engine's working weights, never the fp32 model."""
    devs = {p.device for p in model.parameters() if p.requires_grad}
    if device is None:
        if len(devs) > 1:
            raise TypeError("zoffload.initialize: the model's parameters are on %s; put them on one device or pass "
                            "device=" % ", ".join(sorted(str(d) for d in devs)))
        device = next(iter(devs)) if devs else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cpu":
        for d in devs:
            if d.type != "cpu":
                raise TypeError("zoffload.initialize: device cpu, but parameters are on %s" % d)
        return HostPlacement()
    if device.type == "cuda":
        return CudaPlacement(device)
    raise TypeError("zoffload.initialize: device %s: zoffload drives cpu and cuda models" % device)
