"""DeepSpeed's API on zoffload (ds_api.py, zero_to_fp32.py): initialize's arguments and 4-tuple, a client optimizer
and lr scheduler, checkpoints by string tag with tensors in client_state, save_16bit_model, the offline
zero_to_fp32 converter and a DeepSpeed-style example script. A tiny MLP, a few steps each, on the CPU."""
import argparse
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import zoffload

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def cfg(optimizer=True, bf16=False, **extra):
    c = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "bf16": {"enabled": bf16},
         "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    if optimizer:
        c["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.95], "weight_decay": 0.01}}
    c.update(extra)
    return c


def data(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)


def run(engine, steps, first=0):
    losses = []
    for s in range(first, first + steps):
        x, y = data(s)
        if engine.bfloat16_enabled() and next(engine.parameters()).dtype == torch.bfloat16:
            x, y = x.bfloat16(), y.bfloat16()  # torch 2: the model was cast, as DeepSpeed casts it
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def torch_run(model, opt, steps, sched=None):
    losses = []
    for s in range(steps):
        x, y = data(s)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return losses


def close(a, b, rtol=2e-5):
    return all(abs(x - y) <= 1e-7 + rtol * abs(y) for x, y in zip(a, b)) and len(a) == len(b)


def test_initialize_tuple_and_config_sources(tmp_path):
    path = tmp_path / "ds.json"
    c = cfg(train_batch_size=8)
    del c["gradient_accumulation_steps"]
    path.write_text(json.dumps(c))
    parser = zoffload.add_config_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--deepspeed", "--deepspeed_config", str(path)])
    assert args.deepspeed and args.deepspeed_config == str(path)
    ds = torch.utils.data.TensorDataset(torch.randn(20, 8), torch.randn(20, 4))
    engine, opt, loader, sched = zoffload.initialize(args=args, model=mlp(), training_data=ds)
    assert isinstance(engine, zoffload.Engine) and sched is None  # the config has no scheduler
    assert engine.train_batch_size() == 8 and engine.train_micro_batch_size_per_gpu() == 4
    assert engine.gradient_accumulation_steps() == 2  # derived by the C config: 8 / (4 x 1 rank)
    assert (engine.global_rank, engine.world_size, engine.local_rank, engine.device) == (0, 1, 0, torch.device("cpu"))
    assert isinstance(loader, torch.utils.data.DataLoader) and loader.batch_size == 4
    assert isinstance(loader.sampler, torch.utils.data.distributed.DistributedSampler) and len(loader) == 5
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-2) and engine.get_lr() == [pytest.approx(1e-2)]
    assert engine.train() is engine and engine.module.training and not engine.eval().module.training
    engine.close()
    # config_params: the alias of config; a config in args and in config= is refused
    e2, _, none_loader, _ = zoffload.initialize(model=mlp(), config_params=cfg())
    assert none_loader is None and e2.gradient_accumulation_steps() == 1
    e2.close()
    with pytest.raises(ValueError, match="args.deepspeed_config"):
        zoffload.initialize(args=args, model=mlp(), config=cfg())
    with pytest.raises(ValueError, match="no config"):
        zoffload.initialize(model=mlp())


def test_client_optimizer_taken_sgd_refused():
    """torch AdamW's hyper-parameters become the engine's (no config "optimizer"): 6 steps equal torch's."""
    model = mlp()
    client = torch.optim.AdamW(model.parameters(), lr=5e-3, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.05)
    engine, opt, _, _ = zoffload.initialize(model=model, optimizer=client, config=cfg(optimizer=False))
    o = engine.resolved.optimizer.params
    assert (o.lr, o.get("betas[0]"), o.get("betas[1]"), o.eps, o.adam_w_mode) == (5e-3, 0.8, 0.99, 1e-7, True)
    assert o.weight_decay == pytest.approx(0.05)
    got = run(engine, 6)
    engine.close()
    ref_model = mlp()
    want = torch_run(ref_model, torch.optim.AdamW(ref_model.parameters(), lr=5e-3, betas=(0.8, 0.99), eps=1e-7,
                                                  weight_decay=0.05), 6)
    assert close(got, want), (got, want)
    # a callable taking the parameters; a config optimizer section is replaced with a warning (DeepSpeed's choice)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        e2, _, _, _ = zoffload.initialize(model=mlp(), config=cfg(),
                                          optimizer=lambda ps: torch.optim.Adam(ps, lr=2e-3))
    assert any("\"optimizer\" section" in str(x.message) for x in w)
    o2 = e2.resolved.optimizer.params
    assert (o2.lr, o2.adam_w_mode) == (2e-3, False)  # torch Adam: L2 decay
    e2.close()
    m = mlp()
    e3, _, _, _ = zoffload.initialize(model=m, config=cfg(optimizer=False),
                                      optimizer=zoffload.optim.CPUAdam(m.parameters(), lr=4e-3, adamw_mode=False))
    assert (e3.resolved.optimizer.params.lr, e3.resolved.optimizer.params.adam_w_mode) == (4e-3, False)
    e3.close()
    with pytest.raises(TypeError, match=r"torch\.optim\.sgd\.SGD cannot run"):
        m = mlp()
        zoffload.initialize(model=m, config=cfg(optimizer=False), optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="amsgrad"):
        m = mlp()
        zoffload.initialize(model=m, config=cfg(optimizer=False),
                            optimizer=torch.optim.AdamW(m.parameters(), amsgrad=True))


def _lambda(step):
    return [1.0, 0.5, 0.25, 2.0, 0.1, 1.5, 0.3][min(step, 6)]


def test_client_scheduler_followed():
    """A LambdaLR over the client AdamW: each step's lr (zo_step_info.lr) is the scheduler's, stepped by
    engine.step(); 6 steps equal torch's AdamW + the same LambdaLR."""
    model = mlp()
    client = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(client, _lambda)
    engine, opt, _, got_sched = zoffload.initialize(model=model, optimizer=client, lr_scheduler=sched,
                                                    config=cfg(optimizer=False))
    assert got_sched is sched and opt.param_groups is client.param_groups
    lrs, losses = [], []
    for s in range(6):
        assert engine.get_lr() == [pytest.approx(1e-2 * _lambda(s))]
        losses += run(engine, 1, s)
        lrs.append(engine.last_info["lr"])
    assert lrs == [pytest.approx(1e-2 * _lambda(s), rel=1e-6) for s in range(6)], lrs
    assert sched.last_epoch == 6
    engine.close()
    ref_model = mlp()
    ref = torch.optim.AdamW(ref_model.parameters(), lr=1e-2, weight_decay=0.0)
    want = torch_run(ref_model, ref, 6, torch.optim.lr_scheduler.LambdaLR(ref, _lambda))
    assert close(losses, want), (losses, want)
    # a callable taking the returned optimizer, as DeepSpeed calls it
    e2, opt2, _, s2 = zoffload.initialize(model=mlp(), config=cfg(),
                                          lr_scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.5))
    assert isinstance(s2, torch.optim.lr_scheduler.StepLR) and s2.optimizer is opt2
    run(e2, 2)
    assert e2.last_info["lr"] == pytest.approx(0.5e-2, rel=1e-6) and e2.get_lr() == [pytest.approx(0.25e-2)]
    e2.close()


def _sched_engine(seed, stage):
    model = mlp(seed)
    client = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(client, _lambda)
    c = cfg(optimizer=False)
    c["zero_optimization"]["stage"] = stage
    return zoffload.initialize(model=model, optimizer=client, lr_scheduler=sched, config=c)


@pytest.mark.parametrize("stage", [2, 3])
def test_string_tag_checkpoint_resumes_exactly(tmp_path, stage):
    e1, _, _, s1 = _sched_engine(0, stage)
    run(e1, 3)
    keep = torch.arange(5.0)
    assert e1.save_checkpoint(tmp_path, tag="global_step3", client_state={"t": keep, "epoch": 1}) is True
    assert (tmp_path / "latest").read_text() == "global_step3\n"
    # the default tag is global_step3 again: that checkpoint is replaced, client_state.safetensors with it
    assert e1.save_checkpoint(tmp_path, client_state={"t": keep, "epoch": 1}, save_latest=False) is True
    rest = run(e1, 3, 3)
    e1.save_checkpoint(tmp_path, tag="other", save_latest=False)
    assert (tmp_path / "latest").read_text() == "global_step3\n"
    e1.close()
    e2, opt2, _, s2 = _sched_engine(5, stage)  # other initial weights, a fresh scheduler
    path, client = e2.load_checkpoint(tmp_path)
    assert path == os.path.join(str(tmp_path), "global_step3")
    assert torch.equal(client["t"], keep) and client["epoch"] == 1
    assert (e2.global_steps, e2.micro_steps, s2.last_epoch) == (3, 3, 3)
    assert e2.get_lr() == [pytest.approx(1e-2 * _lambda(3))]
    assert run(e2, 3, 3) == rest  # exact: weights, Adam state, step and the scheduler all came back
    e2.close()


def test_load_checkpoint_missing(tmp_path):
    e, _, _, _ = zoffload.initialize(model=mlp(), config=cfg())
    with pytest.warns(UserWarning, match="latest"):
        assert e.load_checkpoint(tmp_path / "nothing") == (None, None)
    with pytest.warns(UserWarning, match="does not exist"):
        assert e.load_checkpoint(tmp_path, tag="global_step9") == (None, None)
    e.close()


@pytest.mark.parametrize("bf16,stage", [(False, 2), (True, 2), (True, 3)])
def test_save_16bit_model_round_trip(tmp_path, bf16, stage):
    model = mlp()
    c = cfg(bf16=bf16)
    c["zero_optimization"]["stage"] = stage
    e, _, _, _ = zoffload.initialize(model=model, config=c)
    run(e, 3)
    assert e.save_16bit_model(str(tmp_path)) is True
    sd = torch.load(tmp_path / "pytorch_model.bin")
    want = torch.bfloat16 if bf16 else torch.float32
    assert list(sd) == list(model.state_dict())
    for name, _ in model.named_parameters():
        assert sd[name].dtype == want and torch.equal(sd[name], e.master_weights(name).to(want)), name
    fresh = mlp(9)
    fresh.load_state_dict({k: v.float() for k, v in sd.items()})  # strict: every key, every shape
    e.save_16bit_model(str(tmp_path), "model.safetensors")
    from safetensors.torch import load_file
    st = load_file(str(tmp_path / "model.safetensors"))
    assert all(torch.equal(st[k], sd[k]) for k in sd)
    e.close()


def test_zero_to_fp32_equals_masters(tmp_path):
    e, _, _, _ = zoffload.initialize(model=mlp(), config=cfg())
    run(e, 4)
    e.save_checkpoint(tmp_path / "ckpt")
    masters = {n: e.master_weights(n) for n, _ in e.params}
    e.close()
    env = dict(os.environ)
    out = tmp_path / "fp32.pt"
    r = subprocess.run([sys.executable, "-m", "zoffload.zero_to_fp32", str(tmp_path / "ckpt"), str(out)], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "4 tensors" in r.stdout
    sd = torch.load(out)
    assert list(sd) == list(masters) and all(torch.equal(sd[k], masters[k]) for k in masters)
    r = subprocess.run([sys.executable, "-m", "zoffload.zero_to_fp32", str(tmp_path / "ckpt"),
                        str(tmp_path / "fp32.safetensors"), "--tag", "global_step4", "--safe_serialization"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    from safetensors.torch import load_file
    st = load_file(str(tmp_path / "fp32.safetensors"))
    assert all(torch.equal(st[k], masters[k]) for k in masters)
    # a flipped byte in a master shard is caught by its CRC32C, named
    binf = tmp_path / "ckpt" / "global_step4" / "rank00000.bin"
    raw = bytearray(binf.read_bytes())
    raw[0] ^= 1
    binf.write_bytes(bytes(raw))
    r = subprocess.run([sys.executable, "-m", "zoffload.zero_to_fp32", str(tmp_path / "ckpt"), str(out)], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 1 and "CRC32C" in r.stderr and "rank00000.bin" in r.stderr, r.stderr


def test_ds_style_example_runs(tmp_path):
    """python/examples/ds_style_train.py (a DeepSpeed script with only the import changed): 4 steps, save by string
    tag, then resume to 6 from the checkpoint."""
    script = os.path.join(EXAMPLES, "ds_style_train.py")
    save = tmp_path / "run"
    r = subprocess.run([sys.executable, script, "--deepspeed", "--steps", "4", "--eval_every", "2", "--save_dir",
                        str(save)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("step ")]
    assert [ln.split()[1] for ln in lines] == ["1", "2", "3", "4"], r.stdout
    assert "eval step 2" in r.stdout and (save / "global_step4" / "client_state.safetensors").is_file()
    r = subprocess.run([sys.executable, script, "--deepspeed", "--deepspeed_config", str(save / "ds_config.json"),
                        "--steps", "6", "--load_dir", str(save)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "loaded %s at step 4" % (save / "global_step4") in r.stdout, r.stdout
    assert [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("step ")] == ["5", "6"]


def _example_torch_losses(steps):
    """ds_style_train.py's run replayed with torch AdamW: the same model, DataLoader order (DistributedSampler,
    epoch 0), 2 micro-batches of 4 per step, gradient clipping 1.0; the last micro-batch's loss of each step."""
    sys.path.insert(0, EXAMPLES)
    from ds_style_train import Windows
    from train_gpt import GPT, corpus
    torch.manual_seed(1337)
    model, ds = GPT(layers=1), Windows(corpus())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    it = iter(torch.utils.data.DataLoader(ds, batch_size=4,
                                          sampler=torch.utils.data.distributed.DistributedSampler(ds, 1, 0)))
    out = []
    for _ in range(steps):
        for _ in range(2):
            x, y = next(it)
            loss = model(x, y)
            (loss / 2).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return out


@pytest.mark.parametrize("stage,tier", [(2, "cpu"), (3, "nvme")])
def test_ds_style_example_matches_torch(tmp_path, stage, tier):
    """The DeepSpeed-style example, 20 steps at stage 2 (optimizer on cpu) and stage 3 (parameters and optimizer on
    nvme), against torch AdamW: losses within 1e-4 relative (seen: 2.45e-7 both)."""
    off = {"device": tier, "nvme_path": str(tmp_path)} if tier == "nvme" else {"device": "cpu"}
    zero = {"stage": stage, "offload_optimizer": off}
    if stage == 3:
        zero["offload_param"] = dict(off)
    c = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
         "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                                                   "weight_decay": 0.01}},
         "zero_optimization": zero}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(c))
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "ds_style_train.py"), "--deepspeed",
                        "--deepspeed_config", str(path), "--steps", "20", "--eval_every", "100"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = [float(ln.split()[3]) for ln in r.stdout.splitlines() if ln.startswith("step ")]
    want = _example_torch_losses(20)
    assert len(got) == 20 and all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(got, want)), (got, want)
    print("ds_style_train.py stage %d %s vs torch AdamW, 20 steps: max relative loss difference %.3g, last loss %.6f "
          "vs %.6f" % (stage, tier, max(abs(a - b) / abs(b) for a, b in zip(got, want)), got[-1], want[-1]))
