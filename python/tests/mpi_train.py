"""mpi_train.py STAGE TIER OUT - the small GPT of examples/train_gpt.py trained 10 steps through zoffload.initialize,
on the ranks the launcher started (mpirun -np 2, or torchrun --nproc_per_node 2 over torch.distributed: data parallel, each rank on its half of every global batch of 8
windows) or on one rank with two micro-batches of 4 accumulated (the same samples). Rank 0 writes the losses,
the mean over the ranks of each step's loss, one per line with 17 digits, to OUT, then a digest of
save_16bit_model()'s consolidated weights and one of zero_to_fp32's reading of save_checkpoint()'s shards (the
ranks' shards joined; rank 0 checks the two agree). fp32, no clipping: run by tests/python_mpi.sh and
tests/python_torchrun.sh, which compare them. Each step's mean is also checked against zoffload.comm.all_reduce
(torch.distributed's under torchrun, the C communicator's under mpirun)."""
import hashlib
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import zoffload  # noqa: E402
import zoffload.comm  # noqa: E402
from train_gpt import GPT, batches, config, corpus  # noqa: E402

stage, tier, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
world = zoffload.comm.get_world_size()  # the launcher's: mpirun's or torchrun's variables
torch.manual_seed(1337)
model = GPT(layers=1)
cfg = config(device=tier, nvme=os.environ.get("ZO_TEST_NVME"), batch=4)
cfg["gradient_accumulation_steps"] = 2 if world == 1 else 1
cfg["zero_optimization"]["stage"] = stage
if stage == 3:
    cfg["zero_optimization"]["offload_param"] = {"device": tier, "nvme_path": os.environ.get("ZO_TEST_NVME")}
engine, _, _, _ = zoffload.initialize(model=model, config=cfg)
assert engine.world_size == world, (engine.world_size, world)
it = batches(corpus(), 8, 32, 0)  # the global batch: 8 windows, the same on every rank
losses = []
for _ in range(10):
    x, y = next(it)
    if world == 1:  # two micro-batches of 4, accumulated
        parts = []
        for k in range(2):
            loss = engine(x[4 * k:4 * k + 4], y[4 * k:4 * k + 4])
            engine.backward(loss)
            engine.step()
            parts.append(loss.item())
        losses.append((parts[0] + parts[1]) / 2)
    else:  # rank r: windows 4r .. 4r+3
        r = engine.rank
        loss = engine(x[4 * r:4 * r + 4], y[4 * r:4 * r + 4])
        engine.backward(loss)
        engine.step()
        losses.append(engine.all_reduce_mean(loss.item()))
        t = torch.tensor([loss.item()], dtype=torch.float64)
        zoffload.comm.all_reduce(t, op=zoffload.comm.ReduceOp.AVG)
        assert t.item() == losses[-1], (t.item(), losses[-1])
zoffload.comm.barrier()
assert engine.rank == zoffload.comm.get_rank(), (engine.rank, zoffload.comm.get_rank())


def digest(sd):
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode() + sd[k].contiguous().numpy().tobytes())
    return h.hexdigest()


engine.save_16bit_model(out + ".16bit")  # a collective: every rank's shards gathered, rank 0 writes
engine.save_checkpoint(out + ".ckpt", tag="global_step10")
if engine.rank == 0:
    from zoffload.zero_to_fp32 import get_fp32_state_dict_from_zoffload_checkpoint
    sd16 = torch.load(os.path.join(out + ".16bit", "pytorch_model.bin"))
    fp32 = get_fp32_state_dict_from_zoffload_checkpoint(out + ".ckpt")
    assert all(torch.equal(sd16[k], v) for k, v in fp32.items()), "save_16bit_model and zero_to_fp32 differ"
    with open(out, "w") as f:
        f.write("".join("%.17g\n" % v for v in losses))
        f.write("16bit %s\nfp32 %s\n" % (digest(sd16), digest(fp32)))
engine.close()
