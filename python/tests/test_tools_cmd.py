"""The wheel's tool commands (python/_zoffload_tools, [project.scripts] in pyproject.toml): each execs the program in
the package's bin/ with the arguments as given, and the program's exit status and the signal that ends it are the
command's. Run against stand-in programs in a copy of the package; tests/python_installed.sh runs the real ones
from a wheel in a fresh venv."""
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(SRC, "python", "_zoffload_tools")
STANDIN = """#!/bin/sh
for a in "$@"; do echo "arg=$a"; done
case "$1" in
  --exit) exit "$2" ;;
  --kill) kill -"$2" $$ ;;
  --sigign) grep '^SigIgn:' /proc/$$/status ;;
esac
"""


@pytest.fixture
def pkg(tmp_path):
    """A copy of the wrapper package whose bin/ holds a stand-in zo-report (and no zo-swapbench)."""
    dst = tmp_path / "_zoffload_tools"
    dst.mkdir()
    shutil.copy(os.path.join(PKG, "__init__.py"), dst / "__init__.py")
    (dst / "bin").mkdir()
    tool = dst / "bin" / "zo-report"
    tool.write_text(STANDIN)
    tool.chmod(0o755)
    return tmp_path


def run(pkg, func, *args):
    # -S: no site-packages, so an installed zoffload's programs are never found instead of the stand-ins
    code = "import sys, _zoffload_tools as t; sys.argv = ['cmd'] + sys.argv[1:]; t.%s()" % func
    env = dict(os.environ, PYTHONPATH=str(pkg))
    return subprocess.run([sys.executable, "-S", "-c", code] + list(args), env=env, capture_output=True, text=True,
                          timeout=60)


def test_arguments_pass_through(pkg):
    r = run(pkg, "zo_report", "--path", "a dir", "", "--json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["arg=--path", "arg=a dir", "arg=", "arg=--json"]


def test_exit_status_passes_through(pkg):
    r = run(pkg, "zo_report", "--exit", "3")
    assert r.returncode == 3


def test_signal_passes_through(pkg):
    # the program replaced the interpreter: the signal that ends it ends the command, not a Python exception
    r = run(pkg, "zo_report", "--kill", "TERM")
    assert r.returncode == -signal.SIGTERM
    assert "Traceback" not in r.stderr


def test_signals_python_ignores_are_default_again(pkg):
    # python ignores SIGPIPE (and SIGXFSZ), which exec would hand on: `zo-report | head` must end the program
    r = run(pkg, "zo_report", "--sigign")
    assert r.returncode == 0, r.stderr
    ignored = int(r.stdout.split("SigIgn:")[1].split()[0], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (sig - 1)), "%s is ignored in the program (SigIgn %x)" % (sig.name, ignored)


def test_missing_program_is_named(pkg):
    r = run(pkg, "zo_swapbench", "--help")
    assert r.returncode == 127
    assert "zo-swapbench" in r.stderr and os.path.join("_zoffload_tools", "bin", "zo-swapbench") in r.stderr
    assert "Traceback" not in r.stderr


def test_wrapper_imports_neither_torch_nor_the_library(pkg):
    code = "import sys, _zoffload_tools; print('torch' in sys.modules, 'zoffload' in sys.modules)"
    r = subprocess.run([sys.executable, "-S", "-c", code], env=dict(os.environ, PYTHONPATH=str(pkg)),
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["False", "False"], r.stderr


def test_every_tool_has_a_command_and_an_install_rule():
    sys.path.insert(0, os.path.join(SRC, "python"))
    try:
        import _zoffload_tools as t
    finally:
        sys.path.pop(0)
    with open(os.path.join(SRC, "pyproject.toml")) as f:
        scripts = dict(re.findall(r'^(zo-[a-z]+) = "_zoffload_tools:([a-z_]+)"$', f.read(), re.M))
    assert sorted(scripts) == sorted(t.TOOLS)
    for name, func in scripts.items():
        assert func == name.replace("-", "_") and callable(getattr(t, func))
    with open(os.path.join(SRC, "tools", "CMakeLists.txt")) as f:
        installed = set(re.findall(r"install\(TARGETS (zo-[a-z]+) \$\{ZO_TOOLS_INSTALL\}\)", f.read()))
    assert set(t.TOOLS) <= installed
