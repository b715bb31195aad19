"""The DeepSpeed names DeepSpeedExamples' training scripts call beyond initialize/backward/step (cifar10_deepspeed.py,
HelloDeepSpeed/train_bert_ds.py): deepspeed.accelerator.get_accelerator, deepspeed.moe.utils'
split_params_into_different_moe_groups_for_optimizer, deepspeed.init_distributed, engine.bfloat16_enabled() /
fp16_enabled(), and the engine answering nn.Module's questions about its model (parameters(), state_dict(), ...)."""
import pytest
import torch

import zoffload as deepspeed
from zoffload.accelerator import get_accelerator
from zoffload.moe.utils import split_params_into_different_moe_groups_for_optimizer


def test_accelerator_names_the_device_torch_uses():
    acc = get_accelerator()
    assert acc is get_accelerator()
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert acc.device_name() == want
    assert acc.is_available()
    assert acc.communication_backend_name() == ("nccl" if want == "cuda" else "gloo")
    if want == "cpu":
        assert acc.device_name(0) == "cpu" and acc.current_device_name() == "cpu" and acc.device_count() == 1
        acc.set_device(0)  # a no-op on the CPU, as the examples call it with LOCAL_RANK
        t = torch.ones(2)
        assert acc.on_accelerator(t) and acc.pin_memory(t) is t
    else:
        assert acc.device_name(1) == "cuda:1"


def test_moe_split_without_experts_returns_the_groups():
    model = torch.nn.Linear(3, 2)
    groups = {"params": [p for p in model.parameters()], "name": "parameters"}
    out = split_params_into_different_moe_groups_for_optimizer(groups)
    assert isinstance(out, list) and len(out) == 1
    assert out[0]["name"] == "parameters" and [id(p) for p in out[0]["params"]] == [id(p) for p in model.parameters()]
    two = split_params_into_different_moe_groups_for_optimizer(({"params": [model.weight]}, {"params": [model.bias]}))
    assert [len(g["params"]) for g in two] == [1, 1]
    model.bias.allreduce = False  # what deepspeed.moe's layers set on an expert's parameters
    with pytest.raises(NotImplementedError, match="group 1 .*expert parameter"):
        split_params_into_different_moe_groups_for_optimizer([{"params": [model.weight]}, {"params": [model.bias]}])
    with pytest.raises(ValueError, match="must be a dict or a list/tuple of dicts"):
        split_params_into_different_moe_groups_for_optimizer([model.weight])


def test_init_distributed_is_the_comm_one():
    assert deepspeed.init_distributed is deepspeed.comm.init_distributed


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_engine_precision_and_module_questions(precision):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    cfg = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    if precision != "fp32":
        cfg[precision] = {"enabled": True}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    try:
        assert engine.bfloat16_enabled() == (precision == "bf16")
        assert engine.fp16_enabled() == (precision == "fp16")
        assert [id(p) for p in engine.parameters()] == [id(p) for p in model.parameters()]
        assert [n for n, _ in engine.named_parameters()] == [n for n, _ in model.named_parameters()]
        assert sum(p.numel() for p in engine.parameters()) == 8 * 8 + 8 + 8 * 4 + 4
        assert list(engine.state_dict()) == list(model.state_dict())
        assert len(list(engine.modules())) == 4 and len(list(engine.children())) == 3
        x = torch.randn(2, 8)
        if engine.bfloat16_enabled() or engine.fp16_enabled():  # as DeepSpeed's examples cast their inputs
            x = x.to(next(engine.parameters()).dtype)
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
        assert engine.global_steps == 1
    finally:
        engine.close()


def test_destroy_closes_and_keeps_the_model(tmp_path):
    """engine.destroy() (DeepSpeed's, which DeepSpeed-ZenFlow's zf_benchmark.py calls at its end) closes the
    engine: its swap directory is gone, the model keeps the trained weights, and a later call is refused by name."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    cfg = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": str(tmp_path)}}}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    engine.backward(engine(torch.randn(2, 8)).pow(2).mean())
    engine.step()
    trained = model.weight.detach().clone()
    assert list(tmp_path.iterdir())  # the swap directory
    engine.destroy()
    assert list(tmp_path.iterdir()) == []
    assert torch.equal(model.weight, trained)
    with pytest.raises(RuntimeError, match="step"):
        engine.step()


def test_ops_adam_is_cpu_adam_and_configures_the_engine():
    """SuperOffload's finetune_zero3.py: `from deepspeed.ops.adam import DeepSpeedCPUAdam` on a bf16 model, passed as
    the client optimizer of a bf16 stage-3 engine; its lr and betas become the engine's Adam."""
    from zoffload.ops.adam import DeepSpeedCPUAdam
    from zoffload.optim import CPUAdam
    assert DeepSpeedCPUAdam is CPUAdam
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)).to(torch.bfloat16)
    opt = DeepSpeedCPUAdam(model.parameters(), lr=0.001, betas=(0.9, 0.999))
    cfg = {"train_batch_size": 4, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    try:
        x = torch.randn(4, 8).to(torch.bfloat16)
        losses = []
        for _ in range(3):
            loss = engine(x).float().pow(2).mean()
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        assert engine.get_lr() == [0.001]
        assert losses[2] < losses[0], losses
    finally:
        engine.close()
