"""mpi_zero.py TIER OUT - zoffload.zero on the ranks a launcher started (or one), the parameters on TIER (cpu, nvme,
or device: no offload_param, the optimizer on cpu): the small GPT of
examples/train_gpt.py built under zero.Init, trained 4 steps at stage 3 (data parallel: rank r on windows
4r..4r+3 of each global batch of 8; one rank accumulates the two halves), then GatheredParameters with
modifier_rank = the last rank (it writes 0.25 into row 0 of wte.weight, the other ranks 7 + rank; the
modifier's value must win everywhere), then engine._zero3_consolidated_16bit_state_dict(). Rank 0 writes the losses, row 0
and a float64 sum of every tensor of the dict, one per line with 17 digits, to OUT; other ranks check that
their dict is empty. Run by tests/python_mpi_zero.sh, which compares one rank's file with two ranks'."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import zoffload  # noqa: E402
import zoffload.zero  # noqa: E402
from train_gpt import GPT, batches, config, corpus  # noqa: E402


def _init(**kw):
    """zoffload.initialize's engine (the DeepSpeed 4-tuple's first item, or the engine itself)."""
    r = zoffload.initialize(**kw)
    return r[0] if isinstance(r, tuple) else r

tier, out = sys.argv[1], sys.argv[2]
world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
cfg = config(device="cpu" if tier == "device" else tier, nvme=os.environ.get("ZO_TEST_NVME"), batch=4)
cfg["gradient_accumulation_steps"] = 2 if world == 1 else 1
cfg["zero_optimization"]["stage"] = 3
if tier != "device":  # "device": no offload_param (ZeRO-Offload's stage 3: the parameters in device memory)
    cfg["zero_optimization"]["offload_param"] = {"device": tier, "nvme_path": os.environ.get("ZO_TEST_NVME")}
torch.manual_seed(1337)
with zoffload.zero.Init(config_dict_or_path=cfg):
    model = GPT(layers=1)
assert all(p.numel() == 0 for p in model.parameters())
engine = _init(model=model, config=cfg)
assert engine.world_size == world, (engine.world_size, world)
it = batches(corpus(), 8, 32, 0)
lines = []
for _ in range(4):
    x, y = next(it)
    if world == 1:
        parts = []
        for k in range(2):
            loss = engine(x[4 * k:4 * k + 4], y[4 * k:4 * k + 4])
            engine.backward(loss)
            engine.step()
            parts.append(loss.item())
        lines.append((parts[0] + parts[1]) / 2)
    else:
        r = engine.rank
        loss = engine(x[4 * r:4 * r + 4], y[4 * r:4 * r + 4])
        engine.backward(loss)
        engine.step()
        lines.append(engine.all_reduce_mean(loss.item()))
w = model.wte.weight
with zoffload.zero.GatheredParameters(w, modifier_rank=world - 1):
    w.data[0].fill_(0.25 if engine.rank == world - 1 else 7.0 + engine.rank)
off, shard = engine.master_shard("wte.weight")
row = w.ds_shape[1]
mine = shard[: max(0, min(row - off, shard.numel()))] if off < row else shard[:0]
assert torch.all(mine == 0.25), (engine.rank, mine[:4])  # the modifier's value on every rank's shard
sd = engine._zero3_consolidated_16bit_state_dict()
if engine.rank == 0:
    lines += sd["wte.weight"][0, :4].tolist()
    lines.append(sum(float(t.double().sum()) for t in sd.values()))
    with open(out, "w") as f:
        f.write("".join("%.17g\n" % v for v in lines))
else:
    assert len(sd) == 0, list(sd)[:3]
engine.close()
