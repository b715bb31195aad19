"""engine.offload_states() / engine.reload_states() as DeepSpeed 0.16+ defines them (deepspeed/runtime/engine.py,
runtime/zero/offload_states.py): move the optimizer's states off the accelerator between training phases (e.g.
while an RLHF loop generates) and back. The names are DeepSpeed's (OffloadStateTypeEnum, OffloadDeviceEnum here,
with the same values; DeepSpeed's own enums and plain strings are accepted too).

What each state is in zoffload, and where it lives:
  optim_states            Adam's exp_avg and exp_avg_sq      offload_optimizer.device: host memory ("cpu"), NVMe
  hp_params               the fp32 master weights            ("nvme"), or the GPU's engine block ("none")
  lp_grads                the gradient shards                the same tier (grad.swp on NVMe)
  lp_params               the working (16-bit) weights       the GPU's engine block unless offload_param puts
                                                             them in host memory or on NVMe (with copies cached
                                                             on the GPU while in use)
  contiguous_grad_buffer  the gradient hand-over space       CPU models: the ring in host memory; GPU models:
                                                             torch's memory, released at every fence (nothing
                                                             is held between steps)
A CPU model's engine runs on the host backend: everything lives in host memory (or on NVMe) already.

zoffload's engine places these at initialize() and keeps them there (its GPU memory is one block held for its
life), so offload_states() moves nothing itself: what already lives in host memory or on NVMe stays, and the call
says so at INFO (logger "zoffload.offload_states"); what lives in GPU memory stays there too, and a WARNING names
it with its bytes: offload_optimizer / offload_param "cpu" keep it in host memory from the start, engine.close()
frees it. On a GPU the call also returns torch's cached free blocks to the driver (torch.cuda.empty_cache(), as
DeepSpeed does). Training continues unchanged after reload_states().
"""
import enum
import gc
import logging

import torch

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


_TIER_NAME = {"cpu": "host memory", "nvme": "NVMe", "none": "GPU memory"}


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


def offload(engine, include, dev, pin_memory, non_blocking):
    """engine.offload_states(): see the module's text. Returns the states named (recorded for reload)."""
    dev = device(dev)
    chosen = states(include)
    if dev == OffloadDeviceEnum.none:
        log.warning("zoffload: offload_states: no device given (device none); nothing offloaded")
        return []
    if dev == OffloadDeviceEnum.nvme:
        raise ValueError("offload_states: device nvme: NVMe is not a target for offloading states (DeepSpeed "
                         "refuses it too); use device cpu, or offload_optimizer/offload_param \"nvme\" in the config")
    z = engine.resolved.zero_optimization
    cuda = engine.place.cuda
    where = placement(cuda, engine.memory(), z.offload_optimizer.device, z.offload_param.device,
                      getattr(engine, "ring_bytes", 0), z.stage)
    stay = [s for s in chosen if where[s][0] == "GPU memory" and where[s][1]]
    rest = [s for s in chosen if s not in stay]
    if rest:
        log.info("zoffload: offload_states: nothing to move%s: %s", "" if cuda else " (a CPU model: its engine "
                 "runs on the host)", "; ".join(
            "%s (%s) in %s (%s)" % (s.value, _bytes(where[s][1]), where[s][0], where[s][2]) for s in rest))
    if stay:
        log.warning("zoffload: offload_states: %s stay in GPU memory (%s in all): zoffload's engine holds its GPU "
                    "memory for its life; offload_optimizer.device / offload_param.device \"cpu\" keep them in host "
                    "memory from the start, engine.close() frees them",
                    ", ".join("%s (%s, %s)" % (s.value, _bytes(where[s][1]), where[s][2]) for s in stay),
                    _bytes(sum(where[s][1] for s in stay)))
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
    return chosen


def reload(engine, offloaded, non_blocking):
    """engine.reload_states(): nothing was moved, so nothing comes back; says so at INFO for the states named."""
    if offloaded:
        log.info("zoffload: reload_states: %s were not moved; nothing to bring back",
                 ", ".join(s.value for s in offloaded))
