"""Gradient accumulation in the Python front: the accumulation steps come from the config as the library resolved it
(a gradient_accumulation_steps derived from train_batch_size / train_micro_batch_size_per_gpu counts), and each
parameter's gradient goes to the engine from its gradient hook in every micro-batch (zo_engine_grad_accumulate
before the boundary, zo_engine_grad_ready in it) and is freed there: after backward no parameter holds a .grad.
"""
import ctypes
import json
import os
import sys

import torch

import zoffload
from zoffload import _lib

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT, batches, config, corpus  # noqa: E402


def _describe(cfg_dict):
    """(_lib.ConfigView of the parsed @cfg_dict, {key: value text} of zo_config_describe())."""
    buf = ctypes.create_string_buffer(_lib.lib.zo_config_sizeof())
    raw = json.dumps(cfg_dict).encode()
    _lib.check(_lib.lib.zo_config_parse(raw, len(raw), b"config", None, buf), "parse")
    out = ctypes.create_string_buffer(1 << 16)
    _lib.lib.zo_config_describe(buf, out, len(out))
    kv = dict(line.split(" = ", 1) for line in out.value.decode().splitlines())
    head = _lib.ConfigView(buf)
    return head, kv, buf


def test_config_view_matches_describe():
    """_lib.ConfigView (zo_config_get_*() by JSON path) reads what the library resolved."""
    for cfg in ({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.5,
                 "steps_per_print": 7,
                 "optimizer": {"type": "Adam", "params": {"lr": 2e-4, "betas": [0.8, 0.99], "eps": 1e-6,
                                                          "weight_decay": 0.25, "bias_correction": False}}},
                {"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5,
                 "optimizer": {"type": "AdamW"}}):
        head, kv, _buf = _describe(cfg)
        o = head.optimizer.params
        assert str(head.train_batch_size) == kv["train_batch_size"]
        assert str(head.train_micro_batch_size_per_gpu) == kv["train_micro_batch_size_per_gpu"]
        assert str(head.gradient_accumulation_steps) == kv["gradient_accumulation_steps"]
        assert "%g" % head.gradient_clipping == kv["gradient_clipping"]
        assert str(head.steps_per_print) == kv["steps_per_print"]
        assert head.optimizer.type == kv["optimizer.type"]
        assert str(int(o.adam_w_mode)) == kv["optimizer.adam_w_mode"]
        assert "%g" % o.lr == kv["optimizer.lr"]
        assert "[%g, %g]" % (o.get("betas[0]"), o.get("betas[1]")) == kv["optimizer.betas"]
        assert "%g" % o.eps == kv["optimizer.eps"]
        assert "%g" % o.weight_decay == kv["optimizer.weight_decay"]
        assert str(int(o.bias_correction)) == kv["optimizer.bias_correction"]
    head, kv, _buf = _describe({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2})
    assert head.gradient_accumulation_steps == 4


def _train(cfg, steps, micro):
    """@steps micro-steps of a 1-layer GPT on micro-batches of @micro sequences: (losses, boundaries seen before
    each backward, step() results' None-ness, fp32 masters, the engine's counters)."""
    torch.manual_seed(1337)
    model = GPT(layers=1)
    engine, _, _, _ = zoffload.initialize(model=model, config=cfg)
    it = batches(corpus(), micro, 32, 0)
    losses, bounds, infos = [], [], []
    for _ in range(steps):
        x, y = next(it)
        loss = engine(x, y)
        bounds.append(engine.is_gradient_accumulation_boundary())
        engine.backward(loss)
        infos.append(engine.step() is not None)
        losses.append(loss.item())
    masters = {n: engine.master_weights(n).clone() for n, _ in engine.params}
    counts = (engine.gas, engine.global_steps, engine.micro_steps)
    engine.close()
    return losses, bounds, infos, masters, counts


def test_gas_from_resolved_config():
    """{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2} means gradient_accumulation_steps 4 (the
    library derives it, as DeepSpeed): 12 micro-steps are 3 optimizer steps, bit for bit those of a config that
    says gradient_accumulation_steps 4; the boundary is the last micro-step of each step, as DeepSpeed's."""
    derived = config(batch=2)
    del derived["gradient_accumulation_steps"]
    derived["train_batch_size"] = 8
    explicit = config(batch=2)
    explicit["gradient_accumulation_steps"] = 4
    ld, bd, sd, md, cd = _train(derived, 12, 2)
    le, be, se, me, ce = _train(explicit, 12, 2)
    print("\nderived: gas, global_steps, micro_steps = %s; explicit: %s" % (cd, ce))
    assert cd == ce == (4, 3, 12)
    assert bd == be == [k % 4 == 3 for k in range(12)]
    assert sd == se == [k % 4 == 3 for k in range(12)]
    assert ld == le
    for n in me:
        assert torch.equal(md[n], me[n]), n


def _train_reference(cfg, steps, micro):
    """Today's path before the per-micro-batch hand-over, as a reference: torch sums the micro-batches' gradients
    (each loss / gas) in .grad, and one zo_engine_grad_ready() per tensor hands the sum over at the boundary
    (an engine configured with gradient_accumulation_steps 1, whose step() runs every gas micro-batches; a plain
    loss.backward() outside engine.backward() leaves .grad to torch)."""
    gas = cfg["gradient_accumulation_steps"]
    one = dict(cfg, gradient_accumulation_steps=1)
    torch.manual_seed(1337)
    model = GPT(layers=1)
    engine, _, _, _ = zoffload.initialize(model=model, config=one)
    it = batches(corpus(), micro, 32, 0)
    losses = []
    for k in range(steps):
        x, y = next(it)
        loss = engine(x, y)
        (loss * (engine.loss_scale / gas)).backward()
        if k % gas == gas - 1:
            engine.step()
        losses.append(loss.item())
    masters = {n: engine.master_weights(n).clone() for n, _ in engine.params}
    assert engine.handed_in_backward == 0
    engine.close()
    return losses, masters


def test_gas4_matches_summed_gradients():
    """gradient_accumulation_steps 4, fp32: each micro-batch's fp32 gradient handed over from the hook
    (zo_engine_grad_accumulate x3, zo_engine_grad_ready) and summed by the engine in fp32, in the order torch sums
    them in .grad: 16 micro-steps give the losses and masters of the summed-in-.grad path bit for bit.
    bf16 working weights: the micro-batches now reach the engine in fp32 and are summed there in fp32, where the
    old path rounded torch's fp32 sum to bf16 once; losses agree to 1e-3 relative and the masters' mean absolute
    difference is within 1e-2 of their mean magnitude (the test prints what it saw)."""
    cfg = config(batch=2)
    cfg["gradient_accumulation_steps"] = 4
    lh, _, _, mh, counts = _train(cfg, 16, 2)
    lr, mr = _train_reference(cfg, 16, 2)
    assert counts == (4, 4, 16)
    assert lh == lr
    for n in mh:
        assert torch.equal(mh[n], mr[n]), n
    cfg = config(batch=2, bf16=True)
    cfg["gradient_accumulation_steps"] = 4
    lh, _, _, mh, _ = _train(cfg, 16, 2)
    lr, mr = _train_reference(cfg, 16, 2)
    dl = max(abs(a - b) / abs(b) for a, b in zip(lh, lr))
    num = sum((mh[n] - mr[n]).abs().sum().item() for n in mh)
    den = sum(mr[n].abs().sum().item() for n in mh)
    print("\nbf16, gas 4: largest loss difference %.3g relative, masters %.3g" % (dl, num / den))
    assert dl <= 1e-3 and num / den <= 1e-2, (dl, num / den)


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)
        self.seen = []  # during backward: the parameters holding a .grad when l1's output gradient is formed

    def forward(self, x, y):
        h = self.l1(x)
        if h.requires_grad:
            h.register_hook(lambda g: self.seen.append(
                sorted(n for n, p in self.named_parameters() if p.grad is not None)))
        out = self.l3(torch.tanh(self.l2(torch.tanh(h))))
        return torch.nn.functional.mse_loss(out, y)


def test_backward_frees_every_grad():
    """After engine.backward() no parameter holds a .grad, in every micro-step (gas 2) and at gas 1, and during
    backward the gradients of the layers backward has passed are gone already (l2's and l3's when l1's output
    gradient is formed): backward never holds the full set. Every tensor reached the engine from its hook
    (accumulate before the boundary, ready in it), so step() hands nothing over, and the masters move."""
    for gas in (2, 1):
        torch.manual_seed(0)
        model = _MLP()
        cfg = config(batch=4)
        cfg["gradient_accumulation_steps"] = gas
        engine, _, _, _ = zoffload.initialize(model=model, config=cfg)
        before = {n: engine.master_weights(n).clone() for n, _ in engine.params}
        n_params = len(engine.params)
        for k in range(2 * gas):
            x, y = torch.randn(4, 8), torch.randn(4, 4)
            model.seen.clear()
            engine.backward(engine(x, y))
            held = [n for n, p in model.named_parameters() if p.grad is not None]
            assert held == [], (gas, k, held)
            assert model.seen == [[]], (gas, k, model.seen)  # l2, l3 handed over and freed before l1's turn
            engine.step()
        assert engine.global_steps == 2
        assert engine.handed_in_backward == 2 * n_params
        assert engine.accumulated_in_backward == 2 * (gas - 1) * n_params
        for n, _ in engine.params:
            assert not torch.equal(before[n], engine.master_weights(n)), n
        engine.close()
