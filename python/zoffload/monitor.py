"""What a training run reports, as DeepSpeed's engine reports it: the steps_per_print lines ("step=..., skipped=...,
lr=[...], mom=[...]" and the throughput line with SamplesPerSec), the wall_clock_breakdown timings (forward, backward,
step and the engine's own parts from zo_step_info), the one line at start-up saying where each kind of state lives,
and DeepSpeed's monitors: csv_monitor (written here, in DeepSpeed's layout output_path/job_name/<metric>.csv),
tensorboard (torch.utils.tensorboard's SummaryWriter) and wandb. Lines go to the `zoffload` logger (_log.py); monitors
are written by rank 0 only, as DeepSpeed's. Not the training step itself (engine.py)."""
import csv
import difflib
import os
import resource
import time

import torch

from . import _log

# DeepSpeed's monitor blocks (deepspeed/monitor/config.py): key -> (type, default)
_BLOCKS = {
    "tensorboard": {"enabled": (bool, False), "output_path": (str, ""), "job_name": (str, "DeepSpeedJobName")},
    "csv_monitor": {"enabled": (bool, False), "output_path": (str, ""), "job_name": (str, "DeepSpeedJobName")},
    "wandb": {"enabled": (bool, False), "group": ((str, type(None)), None), "team": ((str, type(None)), None),
              "project": (str, "deepspeed")},
}


def _block(config, name):
    """The monitor block @name of the config dict, its defaults filled in; ValueError naming the JSON path of a key
    DeepSpeed does not know (with the nearest known one) or of a value of the wrong type."""
    given = config.get(name)
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ValueError("zoffload.initialize: config %s: expected an object, got %r" % (name, given))
    fields = _BLOCKS[name]
    out = {k: d for k, (_, d) in fields.items()}
    for k, v in given.items():
        if k not in fields:
            near = difflib.get_close_matches(k, list(fields), n=1)
            raise ValueError("zoffload.initialize: config %s.%s: not a key of %s (it takes %s)%s"
                             % (name, k, name, ", ".join(fields), "; did you mean %s.%s?" % (name, near[0])
                                if near else ""))
        want = fields[k][0]
        if want is bool and not isinstance(v, bool) or want is not bool and not isinstance(v, want):
            raise ValueError("zoffload.initialize: config %s.%s: expected %s, got %r"
                             % (name, k, "true or false" if want is bool else "a string", v))
        out[k] = v
    return out


class CsvMonitor:
    """DeepSpeed's csvMonitor: each event (name, value, step) appended to output_path/job_name/<name with "/" and " "
    as "_">.csv, a "step,<last part of the name>" header first."""

    def __init__(self, cfg):
        self.log_dir = os.path.join(cfg["output_path"], cfg["job_name"])
        os.makedirs(self.log_dir, exist_ok=True)
        self.started = set()

    def write_events(self, events):
        for name, value, step in events:
            fname = name.replace("/", "_").replace(" ", "_")
            with open(os.path.join(self.log_dir, fname + ".csv"), "a", newline="") as f:
                w = csv.writer(f)
                if fname not in self.started:
                    self.started.add(fname)
                    w.writerow(["step", name.split("/")[-1]])
                w.writerow([step, value])

    def close(self):
        pass


class TensorBoardMonitor:
    """DeepSpeed's TensorBoardMonitor: add_scalar(name, value, step) into output_path/job_name, flushed each time."""

    def __init__(self, cfg, summary_writer):
        log_dir = os.path.join(cfg["output_path"], cfg["job_name"])
        os.makedirs(log_dir, exist_ok=True)
        self.writer = summary_writer(log_dir=log_dir)

    def write_events(self, events):
        for e in events:
            self.writer.add_scalar(*e)
        self.writer.flush()

    def close(self):
        self.writer.close()


class WandbMonitor:
    """DeepSpeed's WandbMonitor: wandb.init(project, group, entity=team) at start, wandb.log({name: value}, step)."""

    def __init__(self, cfg, wandb):
        self.wandb = wandb
        wandb.init(project=cfg["project"], group=cfg["group"], entity=cfg["team"])

    def write_events(self, events):
        for name, value, step in events:
            self.wandb.log({name: value}, step=step)

    def close(self):
        pass


def _import(what, key, package):
    """The module @what, or None with one warning naming the config @key and the @package to install (the monitor
    is then off)."""
    import importlib
    try:
        return importlib.import_module(what)
    except ImportError as e:
        _log.warning("%s is enabled in the config but %s cannot be imported (%s): install the %s package (pip "
                     "install %s); this monitor is off" % (key, what, e, package, package))
        return None


class Monitors:
    """DeepSpeed's MonitorMaster: the monitors the config enables, on rank 0 (empty elsewhere)."""

    def __init__(self, config, rank):
        blocks = {name: _block(config, name) for name in _BLOCKS}  # checked on every rank
        self.monitors = []
        if rank != 0:
            return
        if blocks["csv_monitor"]["enabled"]:
            self.monitors.append(CsvMonitor(blocks["csv_monitor"]))
        if blocks["tensorboard"]["enabled"]:
            tb = _import("torch.utils.tensorboard", "tensorboard", "tensorboard")
            if tb is not None:
                self.monitors.append(TensorBoardMonitor(blocks["tensorboard"], tb.SummaryWriter))
        if blocks["wandb"]["enabled"]:
            wandb = _import("wandb", "wandb", "wandb")
            if wandb is not None:
                self.monitors.append(WandbMonitor(blocks["wandb"], wandb))

    @property
    def enabled(self):
        return bool(self.monitors)

    def write_events(self, events):
        for m in self.monitors:
            m.write_events(events)

    def close(self):
        for m in self.monitors:
            m.close()
        self.monitors = []


def configure(config):
    """Before the engine starts: the config's reporting keys checked (the monitor blocks, wall_clock_breakdown;
    ValueError naming the JSON path), its "log_level" (DeepSpeed's: debug, info, warning, error, critical) onto the
    `zoffload` loggers, and the library's threshold to match (the library is not logging then)."""
    for name in _BLOCKS:
        _block(config, name)
    if not isinstance(config.get("wall_clock_breakdown", False), bool):
        raise ValueError("zoffload.initialize: config wall_clock_breakdown: expected true or false, got %r"
                         % (config["wall_clock_breakdown"],))
    level = config.get("log_level")
    if level is not None:
        _log.set_level_from_config(level)
    _log.sync_level()


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0


def placement_line(engine):
    """Where each kind of state of @engine lives: tiers, bytes (this rank's) and paths, in one line."""
    v = engine.resolved
    zo = v.zero_optimization
    oo, op = zo.offload_optimizer.device, zo.offload_param.device
    m = engine.memory()
    dev = str(engine.place.device)

    def tier(kind, path):
        if kind == "nvme":
            return "NVMe (%s)" % os.path.join(path, "zoffload-rank%d" % engine.rank)
        if kind == "cpu":
            return "host memory"
        return "device memory (%s)" % dev if dev != "cpu" else "host memory (the model's, on the CPU)"

    state_tier = tier(oo, zo.offload_optimizer.nvme_path)
    parts = ["ZeRO stage %d on %d rank%s, compute on %s" % (zo.stage, engine.world_size,
                                                           "" if engine.world_size == 1 else "s", dev),
             "master weights and Adam state (fp32) %s in %s" % (_fmt_bytes(m["state_bytes"]), state_tier),
             "gradient shards %s in %s" % (_fmt_bytes(m["grad_bytes"]), state_tier),
             "working weights (%s) %s in %s" % (str(engine.wdtype).replace("torch.", ""), _fmt_bytes(m["param_bytes"]),
                                                tier(op, zo.offload_param.nvme_path))]
    totals = "totals: host %s (pinned %s), %s %s, NVMe %s" % (
        _fmt_bytes(m["host_bytes"]), _fmt_bytes(m["pinned_bytes"]),
        "device" if dev != "cpu" else "engine's device tier (host memory)", _fmt_bytes(m["device_bytes"]),
        _fmt_bytes(m["nvme_bytes"]))
    return "zoffload: " + "; ".join(parts) + "; " + totals


def _mem_allocated():
    """(now, peak) bytes, as DeepSpeed's MemAllocated / MaxMemAllocated: torch's CUDA allocations when CUDA is in use,
    else this process's resident set (DeepSpeed's CPU accelerator reports the RSS)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        rss = 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return rss, max(rss, peak)


# the engine's own parts of a step, from zo_step_info: (name shown, field)
ENGINE_PARTS = (("fetch_wait", "fetch_wait_s"), ("grad_wait", "grad_wait_s"), ("adam", "adam_s"),
                ("swap", "swap_s"), ("copy", "copy_s"), ("comm", "comm_s"))


class Reporter:
    """The per-step reporting of one engine: timers for forward, backward and step (wall_clock_breakdown), the
    throughput timer (DeepSpeed's ThroughputTimer: time from a micro-step's forward to its step(), the first two
    optimizer steps left out), the steps_per_print lines and the monitors' events."""

    START_STEP = 2  # DeepSpeed's ThroughputTimer start_step

    def __init__(self, engine):
        conf = engine.config
        self.engine = engine
        v = engine.resolved
        self.steps_per_print = int(v.steps_per_print)
        self.batch = int(v.train_batch_size)
        self.breakdown = conf.get("wall_clock_breakdown", False)  # checked by configure()
        self.monitors = Monitors(conf, engine.rank)
        self.cuda = engine.place.cuda
        self.skipped = 0
        self.samples = 0  # DeepSpeed's global_samples
        self.losses = 0.0  # the gas-scaled losses of this optimizer step (DeepSpeed's engine.losses)
        self.have_loss = False
        self.t_fwd = self.t_bwd = self.t_step = 0.0  # this optimizer step's, seconds
        self.sum = dict.fromkeys(["fwd", "bwd", "step"] + [n for n, _ in ENGINE_PARTS], 0.0)
        self.n_sum = 0
        self.micro_start = None  # the running micro-step's first forward (perf_counter), while timed
        # the last step()'s end: where a micro-step whose forward did not go through the engine is timed from
        self.last_end = None
        self.tput_total = 0.0  # seconds from forward to step() of the micro-steps timed so far
        self.tput_step = 0.0  # of those, this optimizer step's
        self.epoch = 0
        self.micro_in_epoch = 0

    # --- timers ---

    def _sync_now(self, prints):
        """The throughput timer's clock. DeepSpeed's ThroughputTimer synchronizes the device at every micro-step's
        start and stop (timers.throughput.synchronized); a host sync there stalls the queue zoffload keeps full
        (prefetches, uploads, the next forward) at every micro-step. So the device is synchronized only in the
        micro-steps of an optimizer step whose figures are printed (@prints: it ends at a steps_per_print
        boundary): the printed CurrSamplesPerSec is that step's time measured from a drained queue to a drained
        queue. The other steps' times, which only enter RunningAvgSamplesPerSec, are the host's: engine.step()
        waits for the step's gradients, hence for its backward on the device, so each is off by no more than the
        work still queued at its ends, which does not add up over steps. wall_clock_breakdown's timers (_now)
        synchronize at every call, as DeepSpeed's: a breakdown is asked for, not the default."""
        if self.cuda and prints:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _prints(self, step):
        """Optimizer step @step (1-based) ends with the steps_per_print lines."""
        return step % self.steps_per_print == 0

    def _now(self):
        if self.breakdown and self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def forward_begin(self):
        if self.micro_start is None and self.engine.global_steps >= self.START_STEP:
            self.micro_start = self._sync_now(self._prints(self.engine.global_steps + 1))  # the step running
        return self._now() if self.breakdown else 0.0

    def forward_end(self, t0):
        if self.breakdown:
            self.t_fwd += self._now() - t0

    def backward_begin(self):
        if self.micro_start is None and self.last_end is not None and self.engine.global_steps >= self.START_STEP:
            # The model was called directly (DeepSpeedExamples' gan calls netD(x), not the engine), so no forward
            # started the timer, and DeepSpeed prints -inf samples/s: time the micro-step from the last step()'s
            # end instead (its data loading and forward included).
            self.micro_start = self.last_end
        return self._now() if self.breakdown else 0.0

    def backward_end(self, t0, loss, scale_wrt_gas, gas):
        if self.breakdown:
            self.t_bwd += self._now() - t0
        if self.monitors.enabled and isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self.losses += float(loss.detach()) / (gas if scale_wrt_gas else 1)
            self.have_loss = True

    def step_begin(self):
        return self._now() if self.breakdown else 0.0

    def step_end(self, t0, info):
        """After engine.step(): @info the step's zo_step_info dict, None between boundaries."""
        if self.breakdown:
            self.t_step += self._now() - t0
        self.micro_in_epoch += 1
        if self.micro_start is not None:  # DeepSpeed's ThroughputTimer.stop(): every micro-step's time counts
            # at a boundary global_steps counts the step that just ended; between boundaries, it is the next one
            d = self._sync_now(self._prints(self.engine.global_steps + (info is None))) - self.micro_start
            self.tput_total += d
            self.tput_step += d
            self.micro_start = None
        self.last_end = time.perf_counter()
        if info is None:
            return
        e = self.engine
        if info["skipped"]:
            self.skipped += 1
        self.samples += self.batch
        last_step_time = self.tput_step
        self.tput_step = 0.0
        if self.breakdown:
            for k, t in (("fwd", self.t_fwd), ("bwd", self.t_bwd), ("step", self.t_step)):
                self.sum[k] += t
            for name, field in ENGINE_PARTS:
                self.sum[name] += info[field]
            self.n_sum += 1
        events = []
        if self.monitors.enabled:
            events.append(("Train/Samples/lr", e.get_lr()[0], self.samples))
            if self.have_loss:
                events.append(("Train/Samples/train_loss", self.losses, self.samples))
            if e.fp16_enabled():
                events.append(("Train/Samples/loss_scale", info["loss_scale"], self.samples))
            if self.breakdown:
                events += [("Train/Samples/elapsed_time_ms_forward", self.t_fwd * 1e3, self.samples),
                           ("Train/Samples/elapsed_time_ms_backward", self.t_bwd * 1e3, self.samples),
                           ("Train/Samples/elapsed_time_ms_step", self.t_step * 1e3, self.samples)]
                events += [("Train/Samples/elapsed_time_ms_%s" % name, info[field] * 1e3, self.samples)
                           for name, field in ENGINE_PARTS]
            self.monitors.write_events(events)
        self.losses, self.have_loss = 0.0, False
        self.t_fwd = self.t_bwd = self.t_step = 0.0
        if self._prints(e.global_steps):
            self.report_progress(e.global_steps, last_step_time)

    def report_progress(self, step, last_step_time=None):
        """DeepSpeed's _report_progress line, then (after a step) its throughput line and the breakdown."""
        e = self.engine
        _log.log_dist("step=%d, skipped=%d, lr=%s, mom=%s" % (step, self.skipped, e.get_lr(), self._mom()))
        if last_step_time is None:
            return
        now, peak = _mem_allocated()
        counted = step - self.START_STEP
        avg = self.batch / (self.tput_total / counted) if counted > 0 and self.tput_total > 0 else float("-inf")
        # DeepSpeed's TIME_EPSILON; a step not timed (the first START_STEP) has no rate: -inf, as the average
        cur = self.batch / (last_step_time + 1e-5) if last_step_time > 0 else float("-inf")
        _log.log_dist("epoch=%d/micro_step=%d/global_step=%d, RunningAvgSamplesPerSec=%s, CurrSamplesPerSec=%s, "
                      "MemAllocated=%sGB, MaxMemAllocated=%sGB" % (self.epoch, self.micro_in_epoch, step, avg, cur,
                                                                   round(now / 1024 ** 3, 2),
                                                                   round(peak / 1024 ** 3, 2)))
        if self.breakdown and self.n_sum:
            n = self.n_sum
            parts = " | ".join("%s: %.2f" % (k, self.sum[k] * 1e3 / n) for k in self.sum)
            span = "step %d" % step if n == 1 else "steps %d-%d" % (step - n + 1, step)
            _log.log_dist("time (ms), mean per optimizer step of %s | %s" % (span, parts))
            self.sum = dict.fromkeys(self.sum, 0.0)
            self.n_sum = 0

    def _mom(self):
        opt = self.engine.optimizer
        if opt is not None:
            return [tuple(g["betas"]) if "betas" in g else g.get("momentum") for g in opt.param_groups]
        o = self.engine.resolved.optimizer.params
        return [(o.get("betas[0]"), o.get("betas[1]"))]

    def close(self):
        self.monitors.close()
