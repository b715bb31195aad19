#!/usr/bin/env python3
"""limit_ratio.py - how close a zo-train run came to the machine's limit: the step's lower bound over the measured step.

    limit_ratio.py --log RUN.jsonl [--adam-json ADAM.json --adam-variant NAME] [--swap-json SWAP.json]
                   [--warmup N] [--mfu-basis F] [--label TEXT]

RUN.jsonl is zo-train's --log-json of a run logged every step (steps_per_print 1). The first N steps (--warmup,
default 2) are left out; over the rest (the window) the script takes:
  - the measured step: the median of `last_step_ms`;
  - the breakdown: the mean per step of compute (forward + backward less fetch waits), the exposed fetch waits,
    the optimizer step and its Adam and swap waits, from the log's running means;
  - the bytes a step moves: the median per-step difference of the counters `h2d_bytes`, `d2h_bytes`,
    `nvme_read_bytes`, `nvme_write_bytes`.
The lower bound of a step is the largest of four times, each what one resource needs at its rate if everything else
were hidden behind it:
  compute  model FLOPs (flops_per_token x tokens_per_step, as MFU counts them: an activation checkpointing's
           recompute is not in them) at F (--mfu-basis, default 0.5) of `peak_tflops`, the GPU's dense bf16 peak
           that zo-train's MFU is taken against;
  pcie     max(h2d bytes / h2d rate, d2h bytes / d2h rate): the link is full duplex; the rates zo-train measured at
           start-up (`h2d_rate_bytes_per_s`, `d2h_rate_bytes_per_s`; `link_rate_source` says how);
  adam     the elements one rank updates (parameters / ranks) x the variant's bytes a parameter, over the GB/s
           zo-adambench measured for that variant (its largest size, then its most threads) on this machine;
  nvme     read bytes / read rate + write bytes / write rate: one disk does one at a time; the rates are
           zo-swapbench's best zoffload figures (its "best" read and write).
A part whose rate is missing is n/a and left out of the bound (which is then said to be partial); a part with no
bytes to move is 0. limit ratio = bound / measured step: 1 when the step takes no longer than its slowest resource.

Prints two lines: "breakdown: ..." and "limit ratio R: ...". Exit 0, or 2 with a message naming the file for input
it cannot use (a missing file, no JSON, fewer steps than the warm-up plus one). Standard library only.
"""
import argparse
import json
import statistics
import sys


class InputError(Exception):
    pass


def read_log(path):
    """The run's step objects, in step order; InputError naming @path when unusable."""
    try:
        with open(path) as f:
            lines = [ln for ln in f if ln.strip()]
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}")
    rows = []
    for i, ln in enumerate(lines, 1):
        try:
            r = json.loads(ln)
        except ValueError as e:
            raise InputError(f"{path}:{i}: not JSON ({e})")
        if not isinstance(r, dict) or "step" not in r:
            raise InputError(f"{path}:{i}: not a zo-train step object (no \"step\")")
        rows.append(r)
    rows.sort(key=lambda r: r["step"])
    return rows


def read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}")
    except ValueError as e:
        raise InputError(f"{path}: not JSON ({e}); expected {what}")


def need(row, key, path):
    if key not in row:
        raise InputError(f"{path}: step {row.get('step')} has no \"{key}\" (a zo-train older than this script?)")
    return row[key]


def window_figures(rows, warmup, path):
    """Measured step (s), breakdown (ms, by the log's keys) and per-step bytes over the steps after @warmup."""
    if len(rows) < warmup + 1:
        raise InputError(f"{path}: {len(rows)} logged steps; the window needs more than the {warmup} warm-up steps")
    steps = [r["step"] for r in rows]
    # the running means need every step logged: step k's mean is over k - first + 1 steps
    if steps != list(range(steps[0], steps[0] + len(steps))):
        raise InputError(f"{path}: the logged steps are not consecutive ({steps[:6]}...): log every step "
                         "(steps_per_print 1 or --print-every 1)")
    win = rows[warmup:]
    measured = statistics.median(need(r, "last_step_ms", path) for r in win) / 1e3

    def mean_over_window(key):
        # row i (0-based) holds the mean over i + 1 steps: the window's sum is the difference of two sums
        last = len(rows) - 1
        total = need(rows[last], key, path) * (last + 1)
        before = need(rows[warmup - 1], key, path) * warmup if warmup > 0 else 0.0
        return (total - before) / (len(rows) - warmup)

    parts = {k: mean_over_window(k) for k in ("step_ms", "forward_ms", "backward_ms", "fetch_wait_ms",
                                                "optimizer_ms", "adam_ms", "swap_wait_ms")}
    parts["compute_ms"] = parts["forward_ms"] + parts["backward_ms"] - parts["fetch_wait_ms"]

    def per_step(key):
        prev = [need(r, key, path) for r in rows[warmup - 1:-1]] if warmup > 0 else [0] + [
            need(r, key, path) for r in rows[:-1]]
        cur = [need(r, key, path) for r in win]
        return statistics.median(c - p for c, p in zip(cur, prev))

    moved = {k: per_step(k) for k in ("h2d_bytes", "d2h_bytes", "nvme_read_bytes", "nvme_write_bytes")}
    return measured, parts, moved, (win[0]["step"], win[-1]["step"])


def best_adam_row(adam, variant):
    """The row of @variant in zo-adambench's JSON that sets its rate: its largest size, most threads; None when the
    variant has no row."""
    res = [r for r in adam.get("results", []) if isinstance(r, dict) and r.get("variant") == variant]
    return max(res, key=lambda r: (r.get("n", 0), r.get("threads", 0))) if res else None


def adam_rate(adam, variant, path):
    """(GB/s, bytes a parameter, threads, n) of @variant in zo-adambench's JSON (best_adam_row)."""
    r = best_adam_row(adam, variant)
    if r is None:
        have = sorted({r.get("variant") for r in adam.get("results", []) if isinstance(r, dict)})
        raise InputError(f"{path}: no results for the Adam variant '{variant}' (it has: {', '.join(map(str, have))})")
    if not r.get("gbps", 0) > 0 or not r.get("bytes_per_param", 0) > 0:
        raise InputError(f"{path}: variant '{variant}' has no positive gbps and bytes_per_param")
    return r["gbps"] * 1e9, r["bytes_per_param"], r.get("threads"), r.get("n")


def swap_rates(swap, path):
    best = swap.get("best", {}) if isinstance(swap, dict) else {}
    out = []
    for op in ("read", "write"):
        g = best.get(op, {}).get("gbps") if isinstance(best.get(op), dict) else None
        out.append(g * 1e9 if g and g > 0 else None)
    if out == [None, None]:
        raise InputError(f"{path}: no \"best\" read or write figure (zo-swapbench --json)")
    return out


def fmt_s(s):
    return f"{s:.3f} s" if s < 10 else f"{s:.1f} s"


def gb(b):
    return f"{b / 1e9:.2f} GB"


def analyse(args):
    rows = read_log(args.log)
    measured, parts, moved, (s0, s1) = window_figures(rows, args.warmup, args.log)
    last = rows[-1]
    bound_parts = {}  # name -> (seconds or None, how)

    peak = last.get("peak_tflops")
    flops = need(last, "flops_per_token", args.log) * need(last, "tokens_per_step", args.log)
    if peak and peak > 0:
        t = flops / (args.mfu_basis * peak * 1e12)
        bound_parts["compute"] = (t, f"{flops:.3g} FLOP at {100 * args.mfu_basis:.0f}% of {peak:.0f} TFLOP/s")
    else:
        bound_parts["compute"] = (None, f"{flops:.3g} FLOP; no GPU peak in the log")

    h2d, d2h = moved["h2d_bytes"], moved["d2h_bytes"]
    rh, rd = last.get("h2d_rate_bytes_per_s"), last.get("d2h_rate_bytes_per_s")
    if h2d <= 0 and d2h <= 0:
        bound_parts["pcie"] = (0.0, "no bytes over the link")
    elif (h2d <= 0 or rh) and (d2h <= 0 or rd):
        t = max(h2d / rh if h2d > 0 else 0.0, d2h / rd if d2h > 0 else 0.0)
        how = []
        if h2d > 0:
            how.append(f"{gb(h2d)} h2d at {rh / 1e9:.1f} GB/s")
        if d2h > 0:
            how.append(f"{gb(d2h)} d2h at {rd / 1e9:.1f} GB/s")
        bound_parts["pcie"] = (t, ", ".join(how) + (f" ({last['link_rate_source']})" if last.get(
            "link_rate_source") else ""))
    else:
        bound_parts["pcie"] = (None, f"{gb(h2d)} h2d, {gb(d2h)} d2h; no link rate in the log")

    elems = need(last, "parameters", args.log) / max(1, last.get("ranks") or 1)
    if args.adam_json:
        rate, bpp, thr, n = adam_rate(read_json(args.adam_json, "zo-adambench --json"), args.adam_variant,
                                      args.adam_json)
        bound_parts["adam"] = (elems * bpp / rate, f"{elems:.3g} parameters x {bpp} B at {rate / 1e9:.1f} GB/s: "
                               f"zo-adambench {args.adam_variant}, {thr} threads, n {n}")
    else:
        bound_parts["adam"] = (None, "no zo-adambench figures")

    rb, wb = moved["nvme_read_bytes"], moved["nvme_write_bytes"]
    if rb <= 0 and wb <= 0:
        bound_parts["nvme"] = (0.0, "no NVMe bytes")
    elif args.swap_json:
        rr, wr = swap_rates(read_json(args.swap_json, "zo-swapbench --json"), args.swap_json)
        if (rb > 0 and not rr) or (wb > 0 and not wr):
            bound_parts["nvme"] = (None, f"{gb(rb)} read, {gb(wb)} written; zo-swapbench lacks a rate")
        else:
            t = (rb / rr if rb > 0 else 0.0) + (wb / wr if wb > 0 else 0.0)
            how = ([f"{gb(rb)} read at {rr / 1e9:.2f} GB/s"] if rb > 0 else []) + (
                [f"{gb(wb)} written at {wr / 1e9:.2f} GB/s"] if wb > 0 else [])
            bound_parts["nvme"] = (t, " + ".join(how) + ": zo-swapbench")
    else:
        bound_parts["nvme"] = (None, f"{gb(rb)} read, {gb(wb)} written; no zo-swapbench figures")

    known = {k: v[0] for k, v in bound_parts.items() if v[0] is not None}
    if not known:
        raise InputError(f"{args.log}: no part of the bound could be computed")
    limit = max(known, key=known.get)
    bound = known[limit]
    missing = [k for k, v in bound_parts.items() if v[0] is None]
    return {"measured": measured, "parts": parts, "window": (s0, s1), "bound": bound, "limit": limit,
            "bound_parts": bound_parts, "missing": missing, "ratio": bound / measured if measured > 0 else 0.0}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log", required=True, help="zo-train --log-json of a run logged every step")
    ap.add_argument("--adam-json", help="zo-adambench --json of this machine")
    ap.add_argument("--adam-variant", default="adamw_bf16g_out_bf16s",
                    help="the zo-adambench variant the run's Adam is (default adamw_bf16g_out_bf16s)")
    ap.add_argument("--swap-json", help="zo-swapbench --json of the run's nvme path")
    ap.add_argument("--warmup", type=int, default=2, help="steps left out at the start (default 2)")
    ap.add_argument("--mfu-basis", type=float, default=0.5,
                    help="fraction of the GPU's peak the compute bound assumes (default 0.5)")
    ap.add_argument("--label", default="", help="a prefix for both lines")
    args = ap.parse_args(argv)
    if args.warmup < 0:
        ap.error("--warmup must be 0 or more")
    if not 0 < args.mfu_basis <= 1:
        ap.error("--mfu-basis must be in (0, 1]")
    try:
        r = analyse(args)
    except InputError as e:
        print(f"limit_ratio.py: {e}", file=sys.stderr)
        return 2
    p, lab = r["parts"], (args.label + " " if args.label else "")
    s0, s1 = r["window"]
    print(f"{lab}breakdown: per step over steps {s0}-{s1}: {p['step_ms']:.1f} ms = compute "
          f"{p['compute_ms']:.1f} + exposed: fetch {p['fetch_wait_ms']:.1f}, optimizer step "
          f"{p['optimizer_ms']:.1f} (adam {p['adam_ms']:.1f}, swap {p['swap_wait_ms']:.1f})")
    parts = "; ".join(f"{k} {fmt_s(t) if t is not None else 'n/a'} ({how})"
                      for k, (t, how) in r["bound_parts"].items())
    partial = f", partial: {', '.join(r['missing'])} n/a" if r["missing"] else ""
    print(f"{lab}limit ratio {r['ratio']:.3f}: bound {fmt_s(r['bound'])} ({r['limit']}{partial}) over the measured "
          f"step {fmt_s(r['measured'])} (median of steps {s0}-{s1}); {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
