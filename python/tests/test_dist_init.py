"""initialize(dist_init_required=...) as DeepSpeed takes it (ds_api.dist_init): True initialises torch.distributed
(one rank without a launcher), None leaves it alone without a launcher, False under torchrun's two ranks with no
process group is refused at once, naming the fix (rather than waiting in init_process_group for a rank that
never comes). Each case in a subprocess of its own (torch.distributed is process-wide state)."""
import os
import subprocess
import sys
import textwrap

from test_comm import _free_port

CODE = """
import torch, torch.distributed as dist, zoffload
model = torch.nn.Linear(4, 2)
cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
       "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
try:
    e, _, _, _ = zoffload.initialize(model=model, config=cfg, dist_init_required=%s)
    print("initialised", dist.is_initialized(), dist.get_world_size() if dist.is_initialized() else 0, e.world_size)
    e.close()
except RuntimeError as x:
    print("refused:", x)
"""


def _run(arg, **env):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("OMPI_", "PMI_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                             "MASTER_ADDR", "MASTER_PORT")}
    e.update(env)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(CODE % arg)], env=e, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip().splitlines()[-1]


def test_dist_init_required_true_initialises():
    assert _run("True") == "initialised True 1 1"
    assert _run("None") == "initialised False 0 1"


def test_dist_init_required_false_under_torchrun_refused():
    env = dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()))
    out = _run("False", **env)
    assert out.startswith("refused: zoffload.initialize: dist_init_required=False, but torch.distributed is not "
                          "initialised and the launcher started 2 ranks (RANK=0)"), out
