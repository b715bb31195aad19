"""What a DeepSpeed user sees through Python's logging: the library's lines in the `zoffload` logger (zoffload.lib,
with the rank; config lines once, on rank 0), the steps_per_print lines in DeepSpeed's format, wall_clock_breakdown,
the csv_monitor / tensorboard / wandb monitors, the start-up line saying where the state lives, and the handler
removed at exit."""
import csv
import ctypes
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import types

import pytest
import torch

import zoffload
from test_comm import _free_port
from zoffload import _lib, _log


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def _config(**extra):
    cfg = {"train_batch_size": 4, "steps_per_print": 5, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 8, "warmup_max_lr": 1e-3}},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    cfg.update(extra)
    return cfg


class Records:
    """The records the `zoffload` logger (and its child zoffload.lib) hands its handlers, within the block."""

    def __init__(self, level=logging.DEBUG):
        self.records = []
        self.handler = logging.Handler(level)
        self.handler.emit = self.records.append

    def __enter__(self):
        _log.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        _log.logger.removeHandler(self.handler)

    def messages(self, pattern=""):
        return [r.getMessage() for r in self.records if re.search(pattern, r.getMessage())]


def _train(engine, steps, gas=1):
    x, y = torch.randn(64, 8, generator=torch.Generator().manual_seed(1)), torch.randn(64, 1)
    losses = []
    for s in range(steps * gas):
        i = (s * 4) % 64
        loss = torch.nn.functional.mse_loss(engine(x[i:i + 4]), y[i:i + 4])
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def _parse_config(text):
    """zo_config_parse() of @text (JSON), as the package calls it; the status."""
    buf = ctypes.create_string_buffer(_lib.lib.zo_config_sizeof())
    app = (ctypes.c_char_p * 1)()
    opts = _lib.ConfigOpts(app_blocks=ctypes.cast(app, ctypes.c_void_p), world_size=1, auto_values=None)
    raw = text.encode()
    return _lib.lib.zo_config_parse(raw, len(raw), b"t.json", ctypes.byref(opts), buf)


def test_steps_per_print_lines_as_deepspeed():
    """step=0 at initialize(), then at every steps_per_print steps DeepSpeed's two lines: "[Rank 0] step=N,
    skipped=S, lr=[...], mom=[(b1, b2)]" with the lr of the next step (the schedule's), and the throughput line."""
    with Records() as rec:
        engine, _, _, _ = zoffload.initialize(model=_model(), config=_config())
        lrs = {}
        x = torch.randn(4, 8)
        for s in range(10):
            engine.backward(engine(x).pow(2).mean())
            engine.step()
            lrs[engine.global_steps] = engine.get_lr()
        engine.close()
    steps = rec.messages(r"step=\d+, skipped")
    assert steps[0] == "[Rank 0] step=0, skipped=0, lr=[0.0], mom=[(0.9, 0.999)]", steps
    assert steps[1:] == ["[Rank 0] step=%d, skipped=0, lr=%s, mom=[(0.9, 0.999)]" % (n, lrs[n]) for n in (5, 10)]
    assert lrs[5] != lrs[10] and lrs[10][0] > 0  # the schedule moved between the two lines
    tput = rec.messages("SamplesPerSec")
    assert len(tput) == 2, tput
    m = re.fullmatch(r"\[Rank 0\] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=([0-9.e+-]+), "
                     r"CurrSamplesPerSec=([0-9.e+-]+), MemAllocated=([0-9.]+)GB, MaxMemAllocated=([0-9.]+)GB", tput[1])
    assert m, tput[1]
    assert float(m.group(1)) > 0 and float(m.group(2)) > 0 and float(m.group(4)) >= float(m.group(3)) > 0
    assert not rec.messages("time \\(ms\\)")  # wall_clock_breakdown is off
    assert all(r.rank == 0 for r in rec.records)


def test_throughput_when_the_model_is_called_directly():
    """A script that calls the model itself (DeepSpeedExamples' gan: netD(real), then engine.backward()) starts no
    timer in the engine's forward; DeepSpeed prints -inf samples/s there. zoffload times each micro-step from the
    last step()'s end: finite rates."""
    with Records() as rec:
        model = _model()
        engine, _, _, _ = zoffload.initialize(model=model, config=_config())
        x = torch.randn(4, 8)
        for s in range(10):
            engine.backward(model(x).pow(2).mean())
            engine.step()
        engine.close()
    tput = rec.messages("SamplesPerSec")
    assert len(tput) == 2, tput
    m = re.search(r"RunningAvgSamplesPerSec=([^,]+), CurrSamplesPerSec=([^,]+),", tput[1])
    assert m and 0 < float(m.group(1)) < float("inf") and 0 < float(m.group(2)) < float("inf"), tput[1]


def test_start_up_line_names_tiers_bytes_and_paths(tmp_path):
    with Records() as rec:
        engine, _, _, _ = zoffload.initialize(model=_model(), config=_config(zero_optimization={
            "stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": str(tmp_path)},
            "offload_param": {"device": "cpu"}}))
        mem = engine.memory()
        engine.close()
    lines = rec.messages("where|master weights")
    assert len(lines) == 1, rec.messages()
    line = lines[0]
    assert line.startswith("[Rank 0] zoffload: ZeRO stage 3 on 1 rank, compute on cpu; "), line
    assert "master weights and Adam state (fp32) %s in NVMe (%s)" % (
        _fmt(mem["state_bytes"]), os.path.join(str(tmp_path), "zoffload-rank0")) in line, line
    assert "working weights (float32) %s in host memory" % _fmt(mem["param_bytes"]) in line, line
    assert "NVMe %s" % _fmt(mem["nvme_bytes"]) in line and mem["nvme_bytes"] > 0, line


def _fmt(n):
    from zoffload.monitor import _fmt_bytes
    return _fmt_bytes(n)


def test_wall_clock_breakdown_at_steps_per_print():
    with Records() as rec:
        engine, _, _, _ = zoffload.initialize(model=_model(), config=_config(wall_clock_breakdown=True,
                                                                             gradient_accumulation_steps=2))
        _train(engine, 10, gas=2)
        engine.close()
    lines = rec.messages(r"time \(ms\)")
    assert len(lines) == 2, rec.messages()
    names = ["fwd", "bwd", "step", "fetch_wait", "grad_wait", "adam", "swap", "copy", "comm"]
    for line, span in zip(lines, ("1-5", "6-10")):
        head, *parts = line.split(" | ")
        assert head == "[Rank 0] time (ms), mean per optimizer step of steps %s" % span, line
        got = dict(p.split(": ") for p in parts)
        assert list(got) == names, line
        values = {k: float(v) for k, v in got.items()}
        assert all(v >= 0 for v in values.values()) and values["fwd"] > 0 and values["bwd"] > 0, line


def test_csv_monitor_layout_and_values(tmp_path):
    """DeepSpeed's csv_monitor layout: output_path/job_name/Train_Samples_<metric>.csv, a step,<metric> header,
    one row per optimizer step at the samples seen so far; the lr rows are the engine's, the loss rows the mean
    loss of the step's micro-batches."""
    cfg = _config(train_batch_size=8, wall_clock_breakdown=True, gradient_accumulation_steps=2,
                  csv_monitor={"enabled": True, "output_path": str(tmp_path), "job_name": "job"})
    engine, _, _, _ = zoffload.initialize(model=_model(), config=cfg)
    lrs = []
    x, y = torch.randn(64, 8, generator=torch.Generator().manual_seed(1)), torch.randn(64, 1)
    losses = []
    for s in range(6):
        i = (s * 4) % 64
        loss = torch.nn.functional.mse_loss(engine(x[i:i + 4]), y[i:i + 4])
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
        if s % 2 == 1:  # a boundary: the lr the monitor writes is the next step's, as get_lr() gives it
            lrs.append(engine.get_lr()[0])
    engine.close()
    d = tmp_path / "job"
    names = sorted(os.listdir(d))
    assert "Train_Samples_lr.csv" in names and "Train_Samples_train_loss.csv" in names, names
    for part in ("forward", "backward", "step", "fetch_wait", "adam", "swap"):
        assert "Train_Samples_elapsed_time_ms_%s.csv" % part in names, names
    rows = list(csv.reader(open(d / "Train_Samples_lr.csv")))
    assert rows[0] == ["step", "lr"]
    assert [int(r[0]) for r in rows[1:]] == [8, 16, 24]  # train_batch_size 8 (4 x 2 micro-batches) per step
    assert [float(r[1]) for r in rows[1:]] == pytest.approx(lrs, rel=1e-12)
    loss_rows = list(csv.reader(open(d / "Train_Samples_train_loss.csv")))
    assert loss_rows[0] == ["step", "train_loss"]
    want = [(losses[2 * k] + losses[2 * k + 1]) / 2 for k in range(3)]
    assert [float(r[1]) for r in loss_rows[1:]] == pytest.approx(want, rel=1e-6)


def test_monitor_package_missing_warns_once_and_trains(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "wandb", None)
    with Records() as rec:
        engine, _, _, _ = zoffload.initialize(model=_model(), config=_config(
            tensorboard={"enabled": True, "output_path": str(tmp_path)}, wandb={"enabled": True}))
        _train(engine, 2)
        engine.close()
    warned = [r.getMessage() for r in rec.records if r.levelno == logging.WARNING]
    assert len(warned) == 2, warned
    assert "tensorboard is enabled in the config but torch.utils.tensorboard cannot be imported" in warned[0]
    assert "install the tensorboard package" in warned[0]
    assert "wandb is enabled in the config but wandb cannot be imported" in warned[1]


def test_tensorboard_and_wandb_when_importable(monkeypatch, tmp_path):
    scalars, logged, inits = [], [], []

    class SummaryWriter:
        def __init__(self, log_dir):
            self.log_dir = log_dir

        def add_scalar(self, name, value, step):
            scalars.append((self.log_dir, name, value, step))

        def flush(self):
            pass

        def close(self):
            pass
    tb = types.ModuleType("torch.utils.tensorboard")
    tb.SummaryWriter = SummaryWriter
    wandb = types.ModuleType("wandb")
    wandb.init = lambda **kw: inits.append(kw)
    wandb.log = lambda data, step=None: logged.append((data, step))
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", tb)
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    engine, _, _, _ = zoffload.initialize(model=_model(), config=_config(
        tensorboard={"enabled": True, "output_path": str(tmp_path), "job_name": "tb"},
        wandb={"enabled": True, "project": "p", "team": "t"}))
    _train(engine, 3)
    engine.close()
    assert inits == [{"project": "p", "group": None, "entity": "t"}]
    lr = [(s[1], s[3]) for s in scalars if s[1] == "Train/Samples/lr"]
    assert lr == [("Train/Samples/lr", 4), ("Train/Samples/lr", 8), ("Train/Samples/lr", 12)], scalars
    assert {s[0] for s in scalars} == {os.path.join(str(tmp_path), "tb")}
    assert [step for data, step in logged if "Train/Samples/lr" in data] == [4, 8, 12]


def test_monitor_block_errors_name_the_key():
    with pytest.raises(ValueError, match=r"csv_monitor\.enabeld: not a key of csv_monitor .*did you mean "
                                         r"csv_monitor\.enabled\?"):
        zoffload.initialize(model=_model(), config=_config(csv_monitor={"enabeld": True}))
    with pytest.raises(ValueError, match=r"wall_clock_breakdown: expected true or false, got 'yes'"):
        zoffload.initialize(model=_model(), config=_config(wall_clock_breakdown="yes"))


def test_library_lines_through_logging_with_rank(capfd):
    """A library warning is a record of zoffload.lib, "[Rank N] ..." with record.rank, on stderr through the
    logger's handler (not the library's own "zoffload: warning:" line); a config line comes once however often the
    config is parsed; on another rank, config lines and info lines are left out, warnings kept with the rank."""
    text = '{"train_batch_size": 2, "my_block_a": 1, "fp16": {"auto_cast": true}}'
    with Records() as rec:
        assert _parse_config(text) == 0
        assert _parse_config(text) == 0
    lines = [(r.name, r.levelno, r.rank, r.getMessage()) for r in rec.records]
    assert lines == [
        ("zoffload.lib", logging.WARNING, 0,
         "[Rank 0] config: my_block_a is not a DeepSpeed or zoffload key; ignored"),
        ("zoffload.lib", logging.WARNING, 0,
         "[Rank 0] config: fp16.auto_cast is accepted but has no effect in zoffload; cast the inputs to fp16 "
         "before the forward")], lines
    err = capfd.readouterr().err
    assert "zoffload: warning:" not in err and "[WARNING] [Rank 0] config: my_block_a" in err, err
    old = _log.rank()
    try:
        _log.set_rank(1)
        with Records() as rec:
            assert _parse_config('{"train_batch_size": 2, "my_block_b": 1}') == 0
            _log._on_line(2, b"an info line", None)
            _log._on_line(1, b"swap: a warning", None)
        assert [(r.rank, r.getMessage()) for r in rec.records] == [(1, "[Rank 1] swap: a warning")]
    finally:
        _log.set_rank(old)


def test_lines_from_many_threads_at_once():
    """The library calls the handler from any thread; eight threads parsing at once (each call releases the GIL,
    the handler takes it back) all get through, without a deadlock."""
    errors = []

    def work(i):
        try:
            for j in range(20):
                assert _parse_config('{"train_batch_size": 2, "thread_%d_%d": 1}' % (i, j)) == 0
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    with Records() as rec:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert len(rec.messages(r"config: thread_\d+_\d+ is not a DeepSpeed")) == 160


def _run(script, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, **env))


def test_handler_removed_at_exit():
    """After the interpreter's exit handlers ran, the library writes its own stderr lines again: a line logged by an
    exit handler that runs after zoffload's comes out as "zoffload: warning: ...", not through logging."""
    r = _run("""
        import atexit, ctypes
        def at_exit():
            from zoffload import _lib
            buf = ctypes.create_string_buffer(_lib.lib.zo_config_sizeof())
            raw = b'{"train_batch_size": 2, "after_exit_key": 1}'
            _lib.lib.zo_config_parse(raw, len(raw), b"t.json", None, buf)
        atexit.register(at_exit)  # registered first: runs after zoffload's own exit handler
        import zoffload
        from zoffload import _lib
        buf = ctypes.create_string_buffer(_lib.lib.zo_config_sizeof())
        raw = b'{"train_batch_size": 2, "before_exit_key": 1}'
        _lib.lib.zo_config_parse(raw, len(raw), b"t.json", None, buf)
    """)
    assert r.returncode == 0, r.stderr
    assert "[WARNING] [Rank 0] config: before_exit_key is not a DeepSpeed" in r.stderr, r.stderr
    assert "zoffload: warning: config: after_exit_key is not a DeepSpeed" in r.stderr, r.stderr


def test_log_level_from_config_and_environment():
    r = _run("""
        import torch, zoffload
        m = torch.nn.Linear(2, 1)
        e, *_ = zoffload.initialize(model=m, config={"train_batch_size": 1, "log_level": "warning"})
        print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    assert "step=0" not in r.stderr and "zoffload: ZeRO stage" not in r.stderr, r.stderr
    r = _run("""
        import torch, zoffload
        e, *_ = zoffload.initialize(model=torch.nn.Linear(2, 1), config={"train_batch_size": 1})
    """, ZO_LOG_LEVEL="info")
    assert r.returncode == 0, r.stderr
    assert "[INFO] [Rank 0] Adam pool:" in r.stderr, r.stderr  # the library's info lines, shown on request
    r = _run("""
        import torch, zoffload
        e, *_ = zoffload.initialize(model=torch.nn.Linear(2, 1), config={"train_batch_size": 1})
    """)
    assert "Adam pool:" not in r.stderr and "[Rank 0] step=0, skipped=0" in r.stderr, r.stderr


TWO_RANKS = """
import torch, zoffload
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
cfg = {"train_batch_size": 4, "steps_per_print": 2, "my_block": 1,
       "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
engine, _, _, _ = zoffload.initialize(model=model, config=cfg)
for _ in range(2):
    engine.backward(engine(torch.randn(2, 4)).sum())
    engine.step()
engine.close()
"""


def test_two_ranks_under_the_launcher(tmp_path):
    """Under `zoffload --num_gpus 2`: the config warning once (rank 0's, naming it), the start-up and step lines
    from rank 0 only."""
    script = tmp_path / "two.py"
    script.write_text(TWO_RANKS)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    # a port nobody listens on now (a fixed one met another test's rendezvous)
    r = subprocess.run([sys.executable, "-m", "zoffload.launcher", "--num_gpus", "2", "--master_port", str(_free_port()),
                        "--no_local_rank", str(script)], capture_output=True, text=True, timeout=240,
                       env=dict(env, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stderr
    warn = [ln for ln in out.splitlines() if "my_block is not a DeepSpeed" in ln]
    assert len(warn) == 1 and "[Rank 0] config: my_block" in warn[0], out
    assert out.count("zoffload: ZeRO stage 2 on 2 ranks") == 1, out
    steps = [ln for ln in out.splitlines() if re.search(r"step=\d+, skipped", ln)]
    assert [re.search(r"\[Rank \d\] step=\d+", s).group(0) for s in steps] == ["[Rank 0] step=0",
                                                                               "[Rank 0] step=2"], out
    assert "[Rank 1]" not in out, out
