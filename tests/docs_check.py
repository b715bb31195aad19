#!/usr/bin/env python3
"""docs_check.py SOURCE_DIR TOOLS_DIR [FILE.md ...] - the figures the docs quote, against the tools' real output.

Every Markdown file of the checkout (README.md, docs/**/*.md; or the FILEs given) is scanned for two markers,
written as HTML comments so that they do not show on the rendered page (docs/README.md describes them):

  <!-- checked -->            before a ```console block: every `$ COMMAND` line of the block is run (bash, in
  <!-- checked: exit N -->    SOURCE_DIR, TOOLS_DIR first on PATH) and must exit 0 (or N); the lines after it
                              are its output (stdout and stderr), matched in order against what it printed:
                              a line `...` skips any number of lines, `...` inside a line stands for any text,
                              runs of spaces count as one. Anything else, every figure included, must be equal.

  <!-- checked: presets       before a table of zo-train presets (first column: the config file in backquotes,
  bytes: ARGS                 found in configs/): each row's config is planned with `zo-train --config FILE ARGS`
  COLUMN: ARGS                for the byte columns ("parameters", "device bytes", "host (pinned) bytes", "NVMe
  -->                         bytes": the first figure is the tier's need_bytes, "engine N" its engine_bytes,
                              "pinned N" the pinned tier's need, "-" no bytes on that tier), where the flags a row
                              quotes in backquotes (`--device host`) replace the same flags of ARGS; a column
                              named on a line of its own ("fits the GPU machine: ARGS") is planned with its ARGS
                              and says yes (exit 0) or no (exit 1), the tiers in its brackets being those refused.

Every `configs/NAME.json` (or tests/configs/..., python/.../configs/...) a file names must exist in the checkout.

Prints one line per failure (file:line, what the doc says, what the tool said) and a summary. Exit 0 when every
figure agrees, 1 when one does not or a command fails, 2 on a malformed marker."""
import glob
import os
import re
import shlex
import subprocess
import sys

TIERS = ("device", "host", "pinned", "nvme")
TIER_WORDS = {"device": "device", "host": "host", "pinned": "pinned", "nvme": "nvme"}
BYTE_COLUMNS = ("parameters", "device bytes", "host (pinned) bytes", "nvme bytes")


class Checker:
    def __init__(self, src, tools):
        self.src = src
        self.env = dict(os.environ, PATH=tools + os.pathsep + os.environ.get("PATH", ""))
        self.cache = {}
        self.failures = 0
        self.figures = 0
        self.blocks = 0
        self.tables = 0
        self.paths = 0

    def fail(self, where, msg):
        self.failures += 1
        print("FAIL %s: %s" % (where, msg))

    def run(self, cmd):
        """(exit status, output lines) of a shell command, run once per distinct command."""
        if cmd not in self.cache:
            r = subprocess.run(["bash", "-c", cmd], cwd=self.src, env=self.env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace", timeout=300)
            self.cache[cmd] = (r.returncode, r.stdout.splitlines())
        return self.cache[cmd]

    # --- console blocks -------------------------------------------------------------------------------------
    def console(self, where, lines, want_rc):
        """lines: the block's lines (without the fences), each with its line number."""
        cmds = []  # [command, line number, expected lines]
        i = 0
        while i < len(lines):
            no, text = lines[i]
            if text.startswith("$ "):
                cmd = text[2:]
                while cmd.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd = cmd[:-1].rstrip() + " " + lines[i][1].strip()
                cmds.append([cmd, no, []])
            elif cmds:
                cmds[-1][2].append((no, text))
            elif text.strip():
                self.fail("%s:%d" % (where, no), "output before the block's first `$ ` command")
            i += 1
        if not cmds:
            self.fail(where, "a checked console block without a `$ COMMAND` line")
        self.blocks += 1
        for cmd, no, expected in cmds:
            rc, out = self.run(cmd)
            if rc != want_rc:
                self.fail("%s:%d" % (where, no), "`%s` exited %d, the doc expects %d; its output ends:\n  %s"
                          % (cmd, rc, want_rc, "\n  ".join(out[-8:])))
                continue
            self.match(where, cmd, expected, out)

    @staticmethod
    def norm(s):
        return " ".join(s.split())

    @staticmethod
    def skeleton(s):
        return re.sub(r"\d[\d,.]*", "#", Checker.norm(s))

    def match(self, where, cmd, expected, out):
        pos = 0
        skip = False
        for no, text in expected:
            e = self.norm(text)
            if e == "...":
                skip = True
                continue
            if not e:
                continue
            rx = re.compile(".*".join(re.escape(part) for part in e.split("...")))
            found = None
            for j in range(pos, len(out) if skip else min(pos + 1, len(out))):
                if rx.fullmatch(self.norm(out[j])):
                    found = j
                    break
            if found is None:
                near = [o for o in out[pos:] if self.skeleton(o) == self.skeleton(e.replace("...", ""))]
                near = near or [o for o in out[pos:] if self.skeleton(o).startswith(self.skeleton(e)[:24])]
                self.fail("%s:%d" % (where, no), "`%s` printed no line%s\n  doc:    %s\n  output: %s"
                          % (cmd, "" if skip else " here", e, self.norm(near[0]) if near else
                             "(no line like it%s)" % ("" if skip else "; `...` skips lines")))
                return
            self.figures += len(re.findall(r"\d[\d,.]*", e))
            pos = found + 1
            skip = False

    # --- preset tables --------------------------------------------------------------------------------------
    def dry_run(self, cfg, args):
        cmd = "zo-train --config %s %s" % (shlex.quote(cfg), " ".join(shlex.quote(a) for a in args))
        rc, out = self.run(cmd)
        res = {"rc": rc, "cmd": cmd, "tiers": {}, "refused": set(), "out": out}
        for line in out:
            m = re.search(r": (\d+) parameters in ", line)
            if m:
                res["parameters"] = int(m.group(1))
            m = re.match(r"(device|host|pinned|nvme) +(\d+) +(\d+) +(\d+) +\S+ +(yes|NO) ", line)
            if m:
                res["tiers"][m.group(1)] = (int(m.group(2)), int(m.group(3)))
                if m.group(5) == "NO":
                    res["refused"].add(m.group(1))
        return res

    @staticmethod
    def override(args, row_flags):
        args = list(args)
        for flag, value in row_flags:
            if flag in args:
                k = args.index(flag)
                del args[k:k + (2 if value is not None else 1)]
            args += [flag] + ([value] if value is not None else [])
        return args

    @staticmethod
    def figures_of(cell):
        return [int(x.replace(",", "")) for x in re.findall(r"\d[\d,]*", cell)]

    def presets(self, where, spec, header_no, rows):
        runs = {}
        for no, line in spec:
            m = re.match(r"\s*([^:]+):\s*(.*)$", line)
            if not m:
                print("ERROR %s:%d: a presets marker line is `NAME: ARGS`, not %r" % (where, no, line))
                sys.exit(2)
            runs[m.group(1).strip().lower()] = shlex.split(m.group(2))
        header = [c.strip().lower() for c in rows[0][1].strip().strip("|").split("|")]
        self.tables += 1
        for no, line in rows[2:]:
            cells = dict(zip(header, [c.strip() for c in line.strip().strip("|").split("|")]))
            at = "%s:%d" % (where, no)
            m = re.search(r"`([^`]+\.json)`", cells.get(header[0], ""))
            if not m:
                self.fail(at, "the row names no config file in backquotes")
                continue
            cfg = "configs/" + m.group(1)
            row_flags = [(f, v) for f, v in re.findall(r"`(--[a-z-]+)(?: ([^`]+))?`", line)]
            row_flags = [(f, v if v else None) for f, v in row_flags]
            if any(c in cells for c in BYTE_COLUMNS):
                if "bytes" not in runs:
                    print("ERROR %s: a presets table with byte columns needs a `bytes: ARGS` line" % where)
                    sys.exit(2)
                self.bytes_row(at, cells, self.dry_run(cfg, self.override(runs["bytes"], row_flags)))
            for col, args in runs.items():
                if col == "bytes":
                    continue
                if col not in cells:
                    print("ERROR %s: the marker names column %r, the table has %s" % (where, col, header))
                    sys.exit(2)
                self.fits_cell(at, col, cells[col], self.dry_run(cfg, args))

    def expect(self, at, what, doc, real, res):
        self.figures += 1
        if doc != real:
            self.fail(at, "%s: the doc says %s, `%s` says %s" % (what, "{:,}".format(doc), res["cmd"],
                                                                 "-" if real is None else "{:,}".format(real)))

    def bytes_row(self, at, cells, res):
        if res["rc"] not in (0, 1) or "parameters" not in res:
            self.fail(at, "`%s` exited %d:\n  %s" % (res["cmd"], res["rc"], "\n  ".join(res["out"][-6:])))
            return
        tiers = res["tiers"]
        if "parameters" in cells:
            self.expect(at, "parameters", self.figures_of(cells["parameters"])[0], res["parameters"], res)
        for col, tier in (("device bytes", "device"), ("host (pinned) bytes", "host"), ("nvme bytes", "nvme")):
            if col not in cells:
                continue
            cell = cells[col]
            if cell.strip() == "-":
                need = tiers.get(tier, (0, 0))[0]
                self.figures += 1
                if need:
                    self.fail(at, "%s: the doc says none, `%s` says %s" % (col, res["cmd"], "{:,}".format(need)))
                continue
            figs = self.figures_of(cell)
            self.expect(at, "%s need" % tier, figs[0], tiers.get(tier, (None,))[0], res)
            m = re.search(r"engine ([\d,]+)", cell)
            if m:
                self.expect(at, "%s engine" % tier, int(m.group(1).replace(",", "")),
                            tiers.get(tier, (None, None))[1], res)
            m = re.search(r"pinned ([\d,]+)", cell)
            if m:
                self.expect(at, "pinned need", int(m.group(1).replace(",", "")), tiers.get("pinned", (None,))[0],
                            res)

    def fits_cell(self, at, col, cell, res):
        self.figures += 1
        said = cell.split()[0].lower() if cell.split() else ""
        if res["rc"] not in (0, 1):
            self.fail(at, "`%s` exited %d:\n  %s" % (res["cmd"], res["rc"], "\n  ".join(res["out"][-6:])))
            return
        real = "yes" if res["rc"] == 0 else "no"
        if said != real:
            self.fail(at, "%s: the doc says %r, `%s` says %s (refused: %s)"
                      % (col, cell, res["cmd"], real, ", ".join(sorted(res["refused"])) or "none"))
            return
        m = re.search(r"\(([^)]*)\)", cell)
        if real == "no" and m:
            named = set()  # the leading comma list of tier names: "host, pinned, NVMe: why"
            for piece in re.split(r"[,:]", m.group(1)):
                if piece.strip().lower() not in TIER_WORDS:
                    break
                named.add(TIER_WORDS[piece.strip().lower()])
            if named != res["refused"]:
                self.fail(at, "%s: the doc names %s as refused, `%s` refuses %s"
                          % (col, ", ".join(sorted(named)) or "no tier", res["cmd"],
                             ", ".join(sorted(res["refused"])) or "none"))

    # --- files ----------------------------------------------------------------------------------------------
    def check_file(self, path):
        where = os.path.relpath(path, self.src)
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for no, line in enumerate(lines, 1):  # every config a doc names is one the checkout has
            for cfg in re.findall(r"(?<![\w/.-])((?:tests/|python/[\w/]+/)?configs/[\w.-]+\.json)", line):
                self.paths += 1
                if not os.path.isfile(os.path.join(self.src, cfg)):
                    self.fail("%s:%d" % (where, no), "%s does not exist" % cfg)
        i = 0
        while i < len(lines):
            if not lines[i].startswith("<!-- checked"):
                i += 1
                continue
            start = i
            marker = [(i + 1, lines[i][len("<!-- checked"):])]
            while "-->" not in marker[-1][1]:
                i += 1
                if i >= len(lines):
                    print("ERROR %s:%d: the marker is not closed (-->)" % (where, start + 1))
                    sys.exit(2)
                marker.append((i + 1, lines[i]))
            marker[-1] = (marker[-1][0], marker[-1][1].split("-->")[0])
            head = marker[0][1].strip().lstrip(":").strip()
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            if head == "presets":
                rows = []
                while i < len(lines) and lines[i].startswith("|"):
                    rows.append((i + 1, lines[i]))
                    i += 1
                if len(rows) < 3:
                    print("ERROR %s:%d: a presets marker is followed by a table" % (where, start + 1))
                    sys.exit(2)
                self.presets(where, [(n, t) for n, t in marker[1:] if t.strip()], start + 1, rows)
                continue
            m = re.fullmatch(r"(?:exit (\d+))?", head)
            if not m or len(marker) > 1 or i >= len(lines) or lines[i].strip() != "```console":
                print("ERROR %s:%d: `<!-- checked -->` or `<!-- checked: exit N -->` comes right before a "
                      "```console block; `<!-- checked: presets` before a table" % (where, start + 1))
                sys.exit(2)
            i += 1
            block = []
            while i < len(lines) and lines[i].strip() != "```":
                block.append((i + 1, lines[i]))
                i += 1
            self.console(where, block, int(m.group(1) or 0))
            i += 1


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    src, tools = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    files = sys.argv[3:] or ([os.path.join(src, "README.md")] +
                             sorted(glob.glob(os.path.join(src, "docs", "**", "*.md"), recursive=True)))
    c = Checker(src, tools)
    for f in files:
        c.check_file(os.path.abspath(f))
    print("docs_check: %d checked blocks and %d preset tables, %d figures and answers compared, %d commands run, "
          "%d config paths, %d failed" % (c.blocks, c.tables, c.figures, len(c.cache), c.paths, c.failures))
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
