"""mpi_broadcast.py STAGE TIER - on the ranks the launcher started, each rank builds its model from a seed of its
own (its rank); after zoffload.initialize every rank's frozen parameters and buffers, and the working weights of
its trained parameters, equal rank 0's (DeepSpeed broadcasts the module at start). Run by tests/python_mpi.sh."""
import os
import sys

import torch

import zoffload
import zoffload.comm

stage, tier = int(sys.argv[1]), sys.argv[2]
rank = zoffload.comm.get_rank()
torch.manual_seed(100 + rank)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4))
model[0].weight.requires_grad_(False)  # frozen: not the engine's
model[1].running_mean.uniform_(-1, 1)  # a buffer that differs between the seeds
nvme = os.environ.get("ZO_TEST_NVME")
off = {"device": tier, "nvme_path": nvme} if tier == "nvme" else {"device": tier}
zero = {"stage": stage, "offload_optimizer": off}
if stage == 3:
    zero["offload_param"] = dict(off)
cfg = {"train_batch_size": 2 * zoffload.comm.get_world_size(), "train_micro_batch_size_per_gpu": 2,
       "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": zero}
engine, _, _, _ = zoffload.initialize(model=model, config=cfg)


def same_on_every_rank(name, t):
    mine = t.detach().double().flatten()
    hi, lo = mine.clone(), mine.clone()
    zoffload.comm.all_reduce(hi, op=zoffload.comm.ReduceOp.MAX)
    zoffload.comm.all_reduce(lo, op=zoffload.comm.ReduceOp.MIN)
    assert torch.equal(hi, lo), "rank %d: '%s' differs between the ranks after initialize" % (rank, name)


checked = 0
for name, t in list(model.named_parameters()) + list(model.named_buffers()):
    if t.numel():
        same_on_every_rank(name, t)
    else:  # stage 3: a partitioned parameter, empty between uses: gathered
        with zoffload.zero.GatheredParameters([t]):
            same_on_every_rank(name, t)
    checked += 1
if rank == 0:
    print("ok   %d tensors (frozen parameters, buffers, working weights) equal on every rank after initialize, "
          "stage %d (%s)" % (checked, stage, tier))
engine.close()
