"""The ctypes mirrors in zoffload/_lib.py against the C headers (issue 42: StepInfo mirrored zo_step_info by hand
with no layout check). A C program compiled against include/zoffload prints sizeof and every field's offsetof of
each mirrored struct; each must equal ctypes' own, field by field by name. And _lib.Status against
zo_status_string(). A field added in C and not in Python (or the reverse, or reordered) fails here."""
import ctypes
import os
import shutil
import subprocess

import pytest

from zoffload import _lib

INCLUDE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "include")

# (the ctypes mirror, the C type it mirrors)
MIRRORS = [
    (_lib.AdamHparams, "zo_adam_hparams"), (_lib.AdamShard, "zo_adam_shard"),
    (_lib.AdamPoolOpts, "zo_adam_pool_opts"), (_lib.AdamResult, "zo_adam_result"),
    (_lib.ConfigOpts, "zo_config_opts"), (_lib.ConfigAuto, "zo_config_auto"),
    (_lib.StepInfo, "zo_step_info"), (_lib.ArenaStats, "zo_arena_stats"), (_lib.EngineMem, "zo_engine_mem"),
    (_lib.SaveFile, "zo_save_file"), (_lib.SaveOpts, "zo_save_opts"), (_lib.LoadOpts, "zo_load_opts"),
    (_lib.LaunchInfo, "zo_launch_info"), (_lib.CommExternalOps, "zo_comm_external_ops"),
    (_lib.StatesInfo, "zo_states_info"),
]


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not os.path.isdir(INCLUDE):
        pytest.skip("no C compiler or no include/ beside the tests")
    lines = ['#include <stddef.h>', '#include <stdio.h>']
    lines += ['#include "zoffload/%s.h"' % h for h in ("adam", "arena", "checkpoint", "comm", "config", "engine")]
    lines.append("int main(void) {")
    for cls, ctype in MIRRORS:
        lines.append('  printf("%s sizeof %%zu\\n", sizeof(%s));' % (ctype, ctype))
        for name, *_ in cls._fields_:
            lines.append('  printf("%s %s %%zu\\n", offsetof(%s, %s));' % (ctype, name, ctype, name))
    lines.append("  return 0;\n}")
    d = tmp_path_factory.mktemp("abi")
    src, exe = d / "layout.c", d / "layout"
    src.write_text("\n".join(lines) + "\n")
    r = subprocess.run([cc, "-std=gnu11", "-I", INCLUDE, str(src), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, "a ctypes field the C struct does not have (by name):\n" + r.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {tuple(ln.split()[:2]): int(ln.split()[2]) for ln in out.splitlines()}


@pytest.mark.parametrize("cls,ctype", MIRRORS, ids=[m[1] for m in MIRRORS])
def test_ctypes_mirror_matches_the_header(c_layout, cls, ctype):
    for name, *_ in cls._fields_:
        assert getattr(cls, name).offset == c_layout[(ctype, name)], "%s.%s: ctypes offset %d, C %d" % (
            ctype, name, getattr(cls, name).offset, c_layout[(ctype, name)])
    assert ctypes.sizeof(cls) == c_layout[(ctype, "sizeof")], (
        "%s: ctypes %d bytes, C %d: a field the mirror lacks" % (ctype, ctypes.sizeof(cls), c_layout[(ctype, "sizeof")]))


def test_status_names_match_the_library():
    for s in _lib.Status:
        want = "ZO_OK" if s == 0 else "ZO_ERR_" + s.name
        assert _lib.lib.zo_status_string(int(s)).decode() == want, s
    assert _lib.lib.zo_status_string(len(_lib.Status)).decode() == "ZO_ERR_UNKNOWN", "a status _lib.Status lacks"
