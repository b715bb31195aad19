"""engine.offload_states() / engine.reload_states() as DeepSpeed 0.16+ defines them (deepspeed/runtime/engine.py,
runtime/zero/offload_states.py): move the engine's states off the accelerator between training phases (e.g. while
an RLHF loop generates with another model) and back. The names are DeepSpeed's (OffloadStateTypeEnum,
OffloadDeviceEnum here, with the same values; DeepSpeed's own enums and plain strings are accepted too).

What each state is in zoffload, and where the config puts it:
  optim_states            Adam's exp_avg and exp_avg_sq      offload_optimizer.device: host memory ("cpu"), NVMe
  hp_params               the fp32 master weights            ("nvme"), or the engine's device memory ("none")
  lp_grads                the gradient shards                the same tier (grad.swp on NVMe)
  lp_params               the working (16-bit) weights       the engine's device memory, unless offload_param puts
                                                             them in host memory or on NVMe (with copies cached
                                                             in device memory while in use)
  contiguous_grad_buffer  the gradient hand-over space       the engine's own device buffers of the gradient path
                                                             (device Adam's norm partials); torch's memory of the
                                                             hand-over is released at every fence already
A CPU model's engine runs on the host backend, whose "device memory" is host memory the engine reserves for itself:
the same calls move it (a host-to-host copy, so nothing is saved overall; it keeps CPU and GPU models alike).

offload_states() calls zo_engine_offload_states() (include/zoffload/engine.h): the named states that are in the
engine's device memory are copied to host memory (page-locked with pin_memory on a GPU, within the pinned budget),
the states not named stay in device memory (moved into one allocation of their own), the device copies of offloaded
parameters are dropped, and the engine's whole device reservation is given back, so another model can use the GPU;
states already in host memory or on NVMe stay where they are (said at INFO, logger "zoffload.offload_states"). Then
torch's cached free blocks go back to the driver (torch.cuda.empty_cache(), as DeepSpeed does). While lp_params are
offloaded, the model's parameters that viewed the engine's weights (stages 1-2) are empty and a forward raises
RuntimeError naming reload_states(); backward() and step() are refused by the engine (ZoffloadError naming the
offloaded states). With lp_params kept (include without it), the model still runs forward, e.g. to generate.
reload_states() brings every moved byte back and the parameters view the engine's weights again: training continues
bit for bit as without the round trip. Both calls are synchronous (non_blocking is accepted: the copies have
completed when they return). Call offload_states() between step() and the next forward.
"""
import ctypes
import enum
import gc
import logging
import types

import torch

from . import _lib

log = logging.getLogger("zoffload.offload_states")


class OffloadStateTypeEnum(str, enum.Enum):
    """DeepSpeed's runtime.zero.offload_config.OffloadStateTypeEnum."""
    optim_states = "optim_states"
    hp_params = "hp_params"
    lp_params = "lp_params"
    lp_grads = "lp_grads"
    contiguous_grad_buffer = "contiguous_grad_buffer"


class OffloadDeviceEnum(str, enum.Enum):
    """DeepSpeed's runtime.zero.offload_config.OffloadDeviceEnum."""
    none = "none"
    cpu = "cpu"
    nvme = "nvme"


def _value(x):
    return x.value if isinstance(x, enum.Enum) else x


def states(include):
    """The OffloadStateTypeEnum members @include names (None: all, in DeepSpeed's order): an iterable of
    DeepSpeed's or zoffload's enum members or their string values, or one of them alone. ValueError naming a value
    that is not one, with the valid ones."""
    if include is None:
        return list(OffloadStateTypeEnum)
    items = [include] if isinstance(include, (str, enum.Enum)) else list(include)
    out = []
    for x in items:
        try:
            s = OffloadStateTypeEnum(_value(x))
        except ValueError:
            raise ValueError("offload_states: include has %r, not a state DeepSpeed offloads; valid: %s"
                             % (x, ", ".join(s.value for s in OffloadStateTypeEnum))) from None
        if s not in out:
            out.append(s)
    return out


def device(value):
    """The OffloadDeviceEnum @value names (DeepSpeed's member, zoffload's, or the string); ValueError naming it."""
    try:
        return OffloadDeviceEnum(_value(value))
    except ValueError:
        raise ValueError("offload_states: device %r; valid: %s" % (value, ", ".join(d.value for d in
                                                                                    OffloadDeviceEnum))) from None


def placement(cuda, mem, optimizer_device, param_device, ring_bytes, stage=3):
    """{state: (where, bytes, why)}: where each state lives ("host memory", "NVMe" or "GPU memory"), its bytes on
    this rank and what put it there. @cuda: the model computes on a GPU (else the engine runs on the host backend,
    whose "device memory" is host memory); @mem: engine.memory(); @optimizer_device, @param_device: the resolved
    offload_optimizer.device and offload_param.device ("none", "cpu", "nvme"; @param_device counts at @stage 3
    only); @ring_bytes: the gradient ring (CPU models)."""
    third = mem["state_bytes"] // 3  # master weights, exp_avg, exp_avg_sq: one fp32 element each per element

    def tier(dev):
        return "NVMe" if dev == "nvme" else "GPU memory" if cuda and dev == "none" else "host memory"
    out = {}
    why = 'offload_optimizer.device "%s"' % optimizer_device
    for s, nbytes in ((OffloadStateTypeEnum.optim_states, 2 * third), (OffloadStateTypeEnum.hp_params, third),
                      (OffloadStateTypeEnum.lp_grads, mem["grad_bytes"])):
        out[s] = (tier(optimizer_device), nbytes, why)
    pdev = param_device if stage == 3 else "none"
    out[OffloadStateTypeEnum.lp_params] = (tier(pdev), mem["param_bytes"], 'offload_param.device "%s"' % pdev
                                           if stage == 3 else "stage %d: resident" % stage)
    out[OffloadStateTypeEnum.contiguous_grad_buffer] = (
        ("torch's GPU memory", 0, "released at every fence") if cuda else ("host memory", ring_bytes,
                                                                          "the gradient ring"))
    return out


def _bytes(n):
    return "%d bytes" % n


BITS = {OffloadStateTypeEnum.optim_states: _lib.STATES_OPTIM, OffloadStateTypeEnum.hp_params: _lib.STATES_HP_PARAMS,
        OffloadStateTypeEnum.lp_params: _lib.STATES_LP_PARAMS, OffloadStateTypeEnum.lp_grads: _lib.STATES_LP_GRADS,
        OffloadStateTypeEnum.contiguous_grad_buffer: _lib.STATES_GRAD_BUFFER}


def info(engine):
    """zo_engine_states_info() as a dict: offloaded (the OffloadStateTypeEnum members in host memory now), held
    (those in the engine's device memory now: what offload_states() would move), host_bytes, host_pinned,
    kept_device_bytes, released_bytes, offload_s, reload_s."""
    i = _lib.StatesInfo()
    _lib.check(_lib.lib.zo_engine_states_info(engine.eng, ctypes.byref(i)), "zo_engine_states_info")
    out = {k: getattr(i, k) for k, _ in _lib.StatesInfo._fields_}
    out["offloaded"] = [s for s in OffloadStateTypeEnum if i.offloaded & BITS[s]]
    out["held"] = [s for s in OffloadStateTypeEnum if i.held & BITS[s]]
    out["host_pinned"] = bool(i.host_pinned)
    return out


def refuse_while_offloaded(engine, call):
    """engine.backward() and engine.step() while states are offloaded: RuntimeError naming them, before anything is
    computed or handed over (the engine would refuse the hand-over halfway through backward)."""
    off = getattr(engine, "_offloaded_states", None)
    if off:
        raise RuntimeError("zoffload: engine.%s() while %s are offloaded (engine.offload_states()); call "
                           "engine.reload_states() first; nothing was computed"
                           % (call, ", ".join(s.value for s in off)))


def _reattach(engine, ptrs):
    """The parameters _detach_params() let go of view the engine's working weights again at @ptrs (engine._aliased
    before it), through engine._alias() as engine._write_back() aliases them; the memory has not moved."""
    with torch.no_grad():
        for i, ptr in enumerate(ptrs):
            if ptr is not None and engine._aliased[i] is None:
                engine._alias(i, ptr, engine.params[i][1].dtype)


def _refuse_forward(engine):
    def hook(module, args):
        raise RuntimeError("zoffload: forward while lp_params are offloaded (engine.offload_states()): the model's "
                           "weights are in host memory; call engine.reload_states() first")
    try:  # before stage 3's own hooks (their fetches would be refused by the engine, less clearly)
        return engine.module.register_forward_pre_hook(hook, prepend=True)
    except TypeError:  # torch < 2.0: no prepend
        return engine.module.register_forward_pre_hook(hook)


def _detach_params(engine):
    """The parameters that viewed the engine's working weights (stages 1-2) no longer view them: each is one NaN
    broadcast to its shape (no memory; a computation that bypasses the forward's refusal gives NaN, never stale
    numbers). Returns how many tensors still view the engine's memory after that: tensors taken from the parameters
    (a view, .data, .detach(), a graph's saved tensors), whose storages hold the engine's memory token."""
    with torch.no_grad():
        engine._unalias(lambda p: torch.full((1,), float("nan"), dtype=p.dtype, device=p.device).expand(p.shape))
    gc.collect()
    return sum(1 for r in gc.get_referrers(engine._mem)
               if r is not engine.__dict__ and not isinstance(r, types.FrameType))


def offload(engine, include, dev, pin_memory):
    """engine.offload_states() (synchronous, whatever its non_blocking): see the module's text. Returns the states
    moved."""
    dev = device(dev)
    chosen = states(include)
    if dev == OffloadDeviceEnum.none:
        log.warning("zoffload: offload_states: no device given (device none); nothing offloaded")
        return []
    if dev == OffloadDeviceEnum.nvme:
        raise ValueError("offload_states: device nvme: NVMe is not a target for offloading states (DeepSpeed "
                         "refuses it too); use device cpu, or offload_optimizer/offload_param \"nvme\" in the config")
    cuda = engine.place.cuda
    mask = 0
    for s in chosen:
        mask |= BITS[s]
    # Whatever moves, the engine's device memory is freed, the kept states' too (they move into an allocation of
    # their own): no tensor may view it then. The parameters let go of it here; other views are refused.
    ptrs = list(getattr(engine, "_aliased", []))
    held = info(engine)["held"]
    if any(s in held for s in chosen) and any(a is not None for a in ptrs):
        n = _detach_params(engine)
        if n:
            _reattach(engine, ptrs)
            raise RuntimeError("zoffload: offload_states: %d tensor(s) taken from the model's parameters (a view, "
                               ".data, .detach(), or the saved tensors of a graph not yet backpropagated) view the "
                               "engine's device memory, which offload_states() frees; delete them or take .clone()s "
                               "first. Nothing was moved" % n)
    try:
        with engine.place.ordered():
            _lib.check(_lib.lib.zo_engine_offload_states(engine.eng, mask, int(bool(pin_memory) and cuda)),
                       "offload_states")
    except Exception:
        _reattach(engine, ptrs)  # nothing moved (the engine's promise on an error): the parameters view it again
        raise
    now = info(engine)
    moved = [s for s in chosen if s in now["offloaded"]]
    if not moved:
        _reattach(engine, ptrs)  # nothing moved: the parameters view the engine's weights where they were
    elif OffloadStateTypeEnum.lp_params in now["offloaded"]:
        engine._states_hook = _refuse_forward(engine)
    else:
        engine._write_back()  # the kept working weights are at new addresses: the parameters view them there
    if moved:
        log.info("zoffload: offload_states: %s moved from the engine's %s memory to %s host memory (%s); %s kept "
                 "there; the engine's device reservation (%s) given back", ", ".join(s.value for s in moved),
                 "GPU" if cuda else "device (host backend)", "page-locked" if now["host_pinned"] else "pageable",
                 _bytes(now["host_bytes"]), _bytes(now["kept_device_bytes"]), _bytes(now["released_bytes"]))
    rest = [s for s in chosen if s not in now["offloaded"]]
    if rest:
        z = engine.resolved.zero_optimization
        where = placement(cuda, engine.memory(), z.offload_optimizer.device, z.offload_param.device,
                          getattr(engine, "ring_bytes", 0), z.stage)
        log.info("zoffload: offload_states: not in the engine's device memory, so not moved: %s", "; ".join(
            "%s (%s, %s)" % (s.value, where[s][0], where[s][2]) for s in rest))
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
    return moved


def reload(engine):
    """engine.reload_states() (synchronous, whatever its non_blocking): every moved byte back to the engine's device
    memory, the parameters viewing it again (the engine's addresses change)."""
    was = info(engine)["offloaded"]
    if not was:
        return
    with engine.place.ordered():
        _lib.check(_lib.lib.zo_engine_reload_states(engine.eng), "reload_states")
    hook = getattr(engine, "_states_hook", None)
    if hook is not None:
        hook.remove()
        engine._states_hook = None
    engine._write_back()  # stages 1-2: the parameters view the engine's weights at their new addresses
    engine._reporter.micro_start = None  # a forward refused meanwhile started the throughput timer: not a step
    log.info("zoffload: reload_states: %s back in the engine's device memory (%.3f s)",
             ", ".join(s.value for s in was), info(engine)["reload_s"])


def reload_for_close(engine):
    """engine.close() with lp_params offloaded: reload_states() first, so that the parameters get their values
    (close() gives them copies); when the device has no room for that now, a warning says they stay empty."""
    try:
        reload(engine)
    except _lib.ZoffloadError as err:
        log.warning("zoffload: engine.close(): lp_params were offloaded and could not be reloaded (%s): the model's "
                    "parameters that viewed them stay empty", err)
