#!/usr/bin/env python3
"""test_limit_ratio.py SCRIPT - scripts/limit_ratio.py on canned inputs: a zo-train log of 6 steps whose figures
are chosen so each part of the bound has a known value, a zo-adambench and a zo-swapbench JSON; the bound, the part
that sets it, the ratio, the breakdown and the per-step bytes against arithmetic done here; missing figures n/a;
bad input exit 2 naming the file. Standard library only. Exit 0 pass, 1 fail."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

SCRIPT = None

GB = 1e9


def log_rows(n=6, step_ms=(5000, 4000, 3000, 3000, 3200, 2800), h2d_step=20 * GB, d2h_step=19 * GB,
             rd_step=2 * GB, wr_step=1 * GB, extra=None):
    """n consecutive steps; per-step parts fixed (compute 900 = fwd 300 + bwd 650 - fetch 50, optimizer 1500, adam
    1400, swap 100), written as zo-train writes them: running means over the steps so far; byte counters cumulative
    from a start-up upload of 40 GB."""
    rows = []
    per = {"step_ms": None, "forward_ms": 300.0, "backward_ms": 650.0, "fetch_wait_ms": 50.0,
           "optimizer_ms": 1500.0, "adam_ms": 1400.0, "swap_wait_ms": 100.0}
    sums = {k: 0.0 for k in per}
    h2d, d2h, rd, wr = 40 * GB, 0.0, 0.0, 0.0
    for i in range(n):
        k = i + 1
        vals = dict(per, step_ms=float(step_ms[i]))
        for key in sums:
            sums[key] += vals[key]
        h2d += h2d_step
        d2h += d2h_step
        rd += rd_step
        wr += wr_step
        r = {"step": k, "loss": 11.0, "last_step_ms": float(step_ms[i]),
             "tokens_per_step": 8192.0, "flops_per_token": 6.0e10, "peak_tflops": 989.0,
             "parameters": 9_680_000_000, "ranks": 1, "h2d_rate_bytes_per_s": 50 * GB,
             "d2h_rate_bytes_per_s": 40 * GB, "link_rate_source": "measured: 64 MiB",
             "h2d_bytes": int(h2d), "d2h_bytes": int(d2h), "nvme_read_bytes": int(rd),
             "nvme_write_bytes": int(wr)}
        r.update({key: sums[key] / k for key in sums})
        if extra:
            r.update(extra)
        rows.append(r)
    return rows


ADAM = {"results": [
    {"variant": "adamw_bf16g_out_bf16s", "n": 1 << 20, "threads": 16, "gbps": 500.0, "bytes_per_param": 14},
    {"variant": "adamw_bf16g_out_bf16s", "n": 1 << 26, "threads": 1, "gbps": 20.0, "bytes_per_param": 14},
    {"variant": "adamw_bf16g_out_bf16s", "n": 1 << 26, "threads": 16, "gbps": 100.0, "bytes_per_param": 14},
    {"variant": "adamw_bf16g_out", "n": 1 << 26, "threads": 16, "gbps": 120.0, "bytes_per_param": 18},
]}
SWAP = {"best": {"read": {"gbps": 4.0}, "write": {"gbps": 2.0}}}


class LimitRatio(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="zo-limit-ratio.")
        self.d = self.dir.name

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, obj, lines=False):
        p = os.path.join(self.d, name)
        with open(p, "w") as f:
            if lines:
                f.write("".join(json.dumps(r) + "\n" for r in obj))
            else:
                json.dump(obj, f)
        return p

    def run_script(self, *args):
        r = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
        return r.returncode, r.stdout, r.stderr

    def figure(self, out, name):
        m = re.search(name + r" ([0-9.]+) s", out)
        self.assertIsNotNone(m, f"no '{name} N s' in: {out}")
        return float(m.group(1))

    def test_every_part(self):
        log = self.write("run.jsonl", log_rows(), lines=True)
        rc, out, err = self.run_script("--log", log, "--adam-json", self.write("adam.json", ADAM),
                                       "--swap-json", self.write("swap.json", SWAP))
        self.assertEqual(rc, 0, err)
        # compute: 6e10 x 8192 FLOP at 0.5 x 989e12; pcie max(20/50, 19/40) = 0.475 s; adam 9.68e9 x 14 B at
        # 100 GB/s (the largest n, then the most threads) = 1.3552 s; nvme 2/4 + 1/2 = 1.0 s
        compute = 6e10 * 8192 / (0.5 * 989e12)
        self.assertAlmostEqual(self.figure(out, "compute"), compute, places=3)
        self.assertAlmostEqual(self.figure(out, "pcie"), 0.475, places=3)
        self.assertAlmostEqual(self.figure(out, "adam"), 1.3552, places=3)
        self.assertAlmostEqual(self.figure(out, "nvme"), 1.0, places=3)
        # the measured step: the median of steps 3-6 (3000, 3000, 3200, 2800) = 3.0 s; bound adam 1.3552 s
        self.assertIn("over the measured step 3.000 s (median of steps 3-6)", out)
        self.assertIn("bound 1.355 s (adam)", out)
        ratio = float(re.search(r"limit ratio ([0-9.]+):", out).group(1))
        self.assertAlmostEqual(ratio, 1.3552 / 3.0, places=3)
        self.assertNotIn("partial", out)
        # the breakdown over steps 3-6 from the running means: step mean (3000+3000+3200+2800)/4, compute 900
        self.assertIn("breakdown: per step over steps 3-6: 3000.0 ms = compute 900.0 + exposed: fetch 50.0, "
                      "optimizer step 1500.0 (adam 1400.0, swap 100.0)", out)
        # the start-up upload (40 GB before step 1) is not a step's: 20.00 GB h2d a step
        self.assertIn("20.00 GB h2d at 50.0 GB/s", out)

    def test_warmup_and_basis(self):
        log = self.write("run.jsonl", log_rows(), lines=True)
        rc, out, err = self.run_script("--log", log, "--warmup", "0", "--mfu-basis", "1.0")
        self.assertEqual(rc, 0, err)
        self.assertIn("median of steps 1-6", out)  # (5000, 4000, 3000, 3000, 3200, 2800): 3100 ms
        self.assertIn("measured step 3.100 s", out)
        self.assertAlmostEqual(self.figure(out, "compute"), 6e10 * 8192 / 989e12, places=3)

    def test_missing_figures_are_na(self):
        rows = log_rows(extra={"peak_tflops": None, "h2d_rate_bytes_per_s": None})
        log = self.write("run.jsonl", rows, lines=True)
        rc, out, err = self.run_script("--log", log)
        self.assertEqual(rc, 2, out)  # no part at all: compute, pcie, adam, nvme all lack a rate
        self.assertIn("run.jsonl", err)
        rc, out, err = self.run_script("--log", log, "--swap-json", self.write("swap.json", SWAP))
        self.assertEqual(rc, 0, err)
        self.assertIn("compute n/a", out)
        self.assertIn("pcie n/a", out)
        self.assertIn("adam n/a (no zo-adambench figures)", out)
        self.assertIn("bound 1.000 s (nvme, partial: compute, pcie, adam n/a)", out)

    def test_no_nvme_traffic_is_zero(self):
        log = self.write("run.jsonl", log_rows(rd_step=0, wr_step=0), lines=True)
        rc, out, err = self.run_script("--log", log)
        self.assertEqual(rc, 0, err)
        self.assertIn("nvme 0.000 s (no NVMe bytes)", out)
        self.assertIn("bound 0.994 s (compute, partial: adam n/a)", out)

    def test_bad_input(self):
        rc, _, err = self.run_script("--log", os.path.join(self.d, "nosuch.jsonl"))
        self.assertEqual(rc, 2)
        self.assertIn("nosuch.jsonl", err)
        bad = os.path.join(self.d, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"step": 1}\nnot json\n')
        rc, _, err = self.run_script("--log", bad)
        self.assertEqual(rc, 2)
        self.assertIn("bad.jsonl:2: not JSON", err)
        short = self.write("short.jsonl", log_rows()[:2], lines=True)
        rc, _, err = self.run_script("--log", short)
        self.assertEqual(rc, 2)
        self.assertIn("2 logged steps", err)
        gap = self.write("gap.jsonl", [r for r in log_rows() if r["step"] != 4], lines=True)
        rc, _, err = self.run_script("--log", gap)
        self.assertEqual(rc, 2)
        self.assertIn("not consecutive", err)
        log = self.write("run.jsonl", log_rows(), lines=True)
        rc, _, err = self.run_script("--log", log, "--adam-json", self.write("adam.json", ADAM),
                                     "--adam-variant", "adamw_nosuch")
        self.assertEqual(rc, 2)
        self.assertIn("adam.json: no results for the Adam variant 'adamw_nosuch'", err)
        old = self.write("old.jsonl", [{k: v for k, v in r.items() if k != "flops_per_token"} for r in log_rows()],
                         lines=True)
        rc, _, err = self.run_script("--log", old)
        self.assertEqual(rc, 2)
        self.assertIn('has no "flops_per_token"', err)


if __name__ == "__main__":
    SCRIPT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "scripts",
                                                                       "limit_ratio.py")
    unittest.main(verbosity=1)
