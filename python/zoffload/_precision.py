"""A CPU model's dtype against the config's fp16/bf16 blocks, as DeepSpeed's engine takes a model: which dtype the
model computes in on the host device, the module's parameters cast to it where DeepSpeed casts them (its buffers
as data_types.buffer_dtype says), refused where it would train without the precision the config asks for. Not the
engine's precision itself (fp32 masters, the working dtype: zo_engine_working_dtype) nor how CUDA models compute
(_device.CudaPlacement gives those the working dtype always); a 16-bit CUDA model without fp16/bf16 is refused the
same way as a CPU one (model_compute_dtype).
"""
import torch

HALF = (torch.float16, torch.bfloat16)


def check_param_dtypes(params, cuda):
    """Before the engine exists: every trained parameter is floating point; on the CPU fp32, fp16 or bf16 (the
    engine's dtypes). TypeError naming the first parameter that is not."""
    for n, p in params:
        if not p.is_floating_point():
            raise TypeError("zoffload.initialize: parameter '%s' is %s, not a floating-point tensor" % (n, p.dtype))
        if not cuda and p.dtype not in (torch.float32,) + HALF:
            raise TypeError("zoffload.initialize: parameter '%s' is %s; a CPU model trains with fp32 parameters, or "
                            "fp16/bf16 ones with the config's fp16/bf16 block enabled" % (n, p.dtype))


def cpu_compute_dtype(model, params, working, buffers=None):
    """The dtype a CPU @model computes in, given the engine's @working dtype (torch.float32, or the 16-bit dtype of
    the config's enabled fp16/bf16 block), casting the module where DeepSpeed's engine would:
      - every trained parameter fp32 and @working 16-bit where this torch's CPU kernels have the ops a model
        trains with in that dtype (cpu_kernels(): torch 2.x): the module cast to @working, as DeepSpeed's engine
        casts it (a DeepSpeed script then casts its inputs by engine.bfloat16_enabled()/fp16_enabled());
      - every trained parameter fp32 otherwise (fp32 training, or a torch whose CPU kernels lack 16-bit ops, e.g.
        fp16 matmul and bf16 mse_loss in torch 1.13): torch.float32, nothing cast. The parameters receive the
        working weights widened; model.half() / .to(torch.bfloat16) before initialize() gives 16-bit compute;
      - some trained parameter fp16/bf16 (model.half(), .to(torch.bfloat16)) and @working 16-bit: the module's
        parameters (frozen ones too) cast to @working, so a bf16 model under fp16.enabled becomes fp16; the
        parameters are then the working copy itself;
      - some trained parameter 16-bit and @working fp32 (neither fp16 nor bf16 enabled): TypeError naming the
        parameter (DeepSpeed's engine refused this too in the versions whose __check_params ran: "torch.float32
        is enabled but the following parameters have dtype that is not torch.float32"); training a 16-bit copy
        without fp16's loss scaling would let small gradients underflow silently.
    Where the module is cast (the first and third case) its floating buffers keep their dtype (a Llama's fp32
    rotary inv_freq stays fp32), or are cast to @buffers, the config's data_types.buffer_dtype, when given: as
    DeepSpeed 0.19's engine casts (_cast_module_mixed_precision, "Cast params only; preserve fp32 buffers"), where
    older DeepSpeed called module.half() / module.bfloat16() on everything.
    """
    half = [(n, p) for n, p in params if p.dtype in HALF]
    if not half and (working == torch.float32 or not cpu_kernels(working)):
        return torch.float32
    refuse_half_without_precision(half, working)  # (nothing to refuse when no parameter is 16-bit)
    cast_module(model, working, buffers)
    return working


BUFFER_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def buffer_dtype(config):
    """The config dict's data_types.buffer_dtype as a torch dtype ("fp32", "bf16" or "fp16"; the library's parser
    refused any other value before this is asked), or None when absent: buffers keep the dtype they were built in."""
    name = (config.get("data_types") or {}).get("buffer_dtype")
    return BUFFER_DTYPES[name] if name else None


def cast_module(model, working, buffers=None):
    """@model's floating parameters (trained and frozen) to @working; its floating buffers to @buffers when that is
    not None, else left as they are. In place (parameter.data, the module's _buffers entries)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.dtype != working:
                p.data = p.data.to(working)
        if buffers is not None:
            for m in model.modules():
                for key, b in m._buffers.items():
                    if b is not None and b.is_floating_point() and b.dtype != buffers:
                        m._buffers[key] = b.to(buffers)


_KERNELS = {}


def cpu_kernels(dtype):
    """Whether this torch trains in @dtype on the CPU: a forward and backward through the ops GPT-, BERT- and
    CNN-style models use (linear, conv2d, max_pool2d, layer_norm, gelu, softmax, embedding, cross_entropy,
    mse_loss) runs without error. Probed once per dtype; torch 1.13 fails it (no CPU fp16 matmul, no bf16
    mse_loss), torch 2.x passes."""
    if dtype not in _KERNELS:
        import torch.nn.functional as F
        try:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(2, 3, 8, 8, generator=g).to(dtype).requires_grad_()
            w = torch.randn(4, 3, 3, 3, generator=g).to(dtype).requires_grad_()
            h = F.max_pool2d(F.relu(F.conv2d(x, w, torch.zeros(4, dtype=dtype))), 2).flatten(1)
            lin = torch.randn(8, h.shape[1], generator=g).to(dtype).requires_grad_()
            h = F.gelu(F.layer_norm(F.linear(h, lin), (8,)))
            emb = torch.randn(10, 8, generator=g).to(dtype).requires_grad_()
            h = h + F.embedding(torch.tensor([1, 2]), emb)
            loss = F.cross_entropy(h, torch.tensor([0, 1])) + F.mse_loss(F.softmax(h, -1), torch.zeros_like(h))
            loss.backward()
            _KERNELS[dtype] = all(t.grad is not None and t.grad.dtype == dtype for t in (x, w, lin, emb))
        except (RuntimeError, NotImplementedError, TypeError):
            _KERNELS[dtype] = False
    return _KERNELS[dtype]


def refuse_half_without_precision(params, working):
    """TypeError naming the first fp16/bf16 parameter of @params when the engine's @working dtype is fp32 (the
    config enables neither fp16 nor bf16): CPU and CUDA models alike."""
    half = [(n, p) for n, p in params if p.dtype in HALF]
    if half and working == torch.float32:
        n, p = half[0]
        raise TypeError("zoffload.initialize: parameter '%s' is %s, but the config enables neither fp16 nor bf16: "
                        "set \"%s\": {\"enabled\": true} (the engine then keeps fp32 master weights of the 16-bit "
                        "model), or train the model in fp32 (model.float())"
                        % (n, p.dtype, "fp16" if p.dtype == torch.float16 else "bf16"))


def model_compute_dtype(model, params, working, cuda, buffers=None):
    """The dtype @model computes in, decided before its parameters meet the engine: on the CPU cpu_compute_dtype();
    on CUDA @working (CudaPlacement gives the parameters the working dtype), after the same refusal of a 16-bit
    model under a config with neither fp16 nor bf16 (which would otherwise get fp32 parameters silently)."""
    if not cuda:
        return cpu_compute_dtype(model, params, working, buffers)
    refuse_half_without_precision(params, working)
    return working
