"""ZeRO-3 leaf modules (zoffload.utils.set_z3_leaf_modules, deepspeed.utils' names): a flagged module's forward
pre-hook fetches its whole subtree and its children get no hooks, so a mixture-of-experts block that routes each
step's tokens to a data-dependent subset of its experts fetches the same parameters in the same order every step
(the order the engine records and prefetches along), where without the flag the order follows the routing. The
losses are torch's in both cases (experts a step does not use get a zero gradient, as in DeepSpeed)."""
import pytest
import torch

import zoffload
from zoffload.utils import (get_z3_leaf_modules, set_z3_leaf_modules, set_z3_leaf_modules_by_name,
                            set_z3_leaf_modules_by_suffix, unset_z3_leaf_modules, z3_leaf_module, z3_leaf_parameter)

STEPS = 6


class MoE(torch.nn.Module):
    """Top-1 routing of each token to one of four experts; an expert no token picks is not called."""

    def __init__(self, d=8, n=4):
        super().__init__()
        self.gate = torch.nn.Linear(d, n, bias=False)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(n))

    def forward(self, x):
        probs = torch.softmax(self.gate(x), -1)
        pick = probs.argmax(-1)
        out = torch.zeros_like(x)
        for e in pick.unique().tolist():  # data-dependent: which experts run, in which order
            rows = pick == e
            out[rows] = self.experts[e](x[rows]) * probs[rows, e:e + 1]
        return out


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(4, 8)
        self.moe = MoE()
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.out(torch.relu(self.moe(self.inp(x)))), y)


def _data(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(16, 4, generator=g) * (1 + step), torch.randint(0, 3, (16,), generator=g)


CFG = {"train_micro_batch_size_per_gpu": 16, "optimizer": {"type": "AdamW", "params": {"lr": 0.05, "weight_decay": 0.01}},
       "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}}


def _reference():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)
    losses = []
    for s in range(STEPS):
        loss = model(*_data(s))
        loss.backward()
        for q in model.parameters():  # an expert no token picked: a zero gradient, as the engine gives it
            if q.grad is None:
                q.grad = torch.zeros_like(q)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _train(leaf, leaf_config=None):
    torch.manual_seed(0)
    model = Net()
    if leaf:
        assert set_z3_leaf_modules(model, ["MoE"]) == [model.moe]
    cfg = CFG
    if leaf_config is not None:
        cfg = dict(CFG, zero_optimization=dict(CFG["zero_optimization"], leaf_module=leaf_config))
    engine, _, _, _ = zoffload.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    orders, losses = [], []
    fetch = engine._fetch

    def record(i):
        if not engine._in_backward:
            orders[-1].append(i)
        fetch(i)
    engine._fetch = record
    try:
        hooked = {n: len(m._forward_pre_hooks) for n, m in model.named_modules()}
        leaf_params = sorted(n for n, p in model.named_parameters() if z3_leaf_parameter(p))
        for s in range(STEPS):
            orders.append([])
            loss = engine(*_data(s))
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    finally:
        engine.close()
    return losses, orders, hooked, leaf_params


def test_leaf_fetches_the_same_order_every_step_and_trains_as_torch():
    want = _reference()
    losses, orders, hooked, leaf_params = _train(leaf=True)
    assert losses == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert all(o == orders[0] for o in orders), orders
    assert sorted(orders[0]) == list(range(len(orders[0])))  # every parameter once a step, the experts' too
    assert hooked["moe"] > 0 and all(hooked["moe.experts.%d" % e] == 0 for e in range(4))
    assert hooked["moe.gate"] == 0 and hooked["moe.experts"] == 0
    assert leaf_params == sorted(["moe.gate.weight"] + ["moe.experts.%d.%s" % (e, w) for e in range(4)
                                                        for w in ("weight", "bias")])


@pytest.mark.parametrize("block", [{"classes": ["MoE"]}, {"classes": "%s.MoE" % __name__},
                                   {"classes": [], "names": ["moe"]}, {"name_suffixes": "oe"}])
def test_the_config_flags_leaves(block):
    """zero_optimization.leaf_module (DeepSpeed 0.19's key): classes, names or name suffixes."""
    want = _reference()
    losses, orders, hooked, leaf_params = _train(leaf=False, leaf_config=block)
    assert losses == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert all(o == orders[0] for o in orders), orders
    assert hooked["moe"] > 0 and hooked["moe.experts.0"] == 0 and "moe.gate.weight" in leaf_params


class Qwen3MoeSparseMoeBlock(MoE):
    """Stands for transformers' class of that name, which DeepSpeed 0.19 (and zoffload) flag by default."""


Qwen3MoeSparseMoeBlock.__module__ = "transformers.models.qwen3_moe.modeling_qwen3_moe"


def test_default_leaf_classes_and_config_warnings():
    model = Net()
    model.moe = Qwen3MoeSparseMoeBlock()
    engine, _, _, _ = zoffload.initialize(model=model, model_parameters=model.parameters(), config=CFG)
    try:
        assert z3_leaf_module(model.moe) and len(model.moe.experts[0]._forward_pre_hooks) == 0
    finally:
        engine.close()
    model = Net()
    model.moe = Qwen3MoeSparseMoeBlock()
    cfg = dict(CFG, zero_optimization=dict(CFG["zero_optimization"],
                                           leaf_module={"classes": ["Mixtral"], "names": ["nope"]}))
    with pytest.warns(UserWarning) as seen:
        engine, _, _, _ = zoffload.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    engine.close()
    text = "\n".join(str(w.message) for w in seen)
    assert "leaf_module.names: no module named ['nope']" in text
    assert "leaf_module.classes: no module of ['Mixtral'] in the model" in text
    assert not z3_leaf_module(model.moe)  # the config's classes replace the defaults
    with pytest.raises(zoffload.ZoffloadError, match=r"zero_optimization.leaf_module.class: .*did you mean"):
        zoffload.initialize(model=Net(), config=dict(CFG, zero_optimization=dict(
            CFG["zero_optimization"], leaf_module={"class": "MoE"})))


def test_without_the_flag_the_order_follows_the_routing():
    """The case the flag is for (and the proof that the model above routes data-dependently)."""
    want = _reference()
    losses, orders, hooked, leaf_params = _train(leaf=False)
    assert losses == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert any(o != orders[0] for o in orders), orders
    assert hooked["moe.experts.0"] > 0 and leaf_params == []


def test_flags_and_errors():
    model = Net()
    assert get_z3_leaf_modules(model) == [] and not z3_leaf_module(model.moe)
    found = set_z3_leaf_modules(model, [torch.nn.ModuleList, "%s.MoE" % MoE.__module__])
    assert found == [model.moe, model.moe.experts] and get_z3_leaf_modules(model) == found
    assert unset_z3_leaf_modules(model, [torch.nn.ModuleList]) == [model.moe.experts]
    assert get_z3_leaf_modules(model) == [model.moe]
    with pytest.raises(ValueError, match=r"no module of \['Mixtral'\].*Linear, MoE, ModuleList, Net"):
        set_z3_leaf_modules(model, ["Mixtral"])
    assert set_z3_leaf_modules(model, ["Mixtral"], raise_if_not_found=False) == []
    with pytest.raises(TypeError, match="classes or class names"):
        set_z3_leaf_modules(model, [3])
    assert set_z3_leaf_modules_by_name(model, ["out", "nope"], raise_if_not_found=False) == ([model.out], ["nope"])
    with pytest.raises(ValueError, match=r"no module named \['nope'\]"):
        set_z3_leaf_modules_by_name(model, ["nope"])
    assert set_z3_leaf_modules_by_suffix(model, ["xperts.1", "zz"], raise_if_not_found=False) == (
        [model.moe.experts[1]], ["zz"])
    with pytest.raises(ValueError, match=r"no module whose name ends with \['zz'\]"):
        set_z3_leaf_modules_by_suffix(model, ["zz"])
    unset_z3_leaf_modules(model, [torch.nn.Linear])
    engine, _, _, _ = zoffload.initialize(model=model, model_parameters=model.parameters(), config=CFG)
    try:
        with pytest.raises(RuntimeError, match="parameter 'inp.weight' already belongs to a ZeRO stage 3 engine"):
            set_z3_leaf_modules(model, ["MoE"])
    finally:
        engine.close()
