"""The commands `pip install` puts on PATH for zoffload's C tools (DeepSpeed's wheel brings ds_report, ds_io and
ds_nvme_tune the same way): zo-report, zo-swapbench, zo-adambench, zo-stepbench and zo-arenabench.

The programs lie in this package's bin/ (CMakeLists.txt installs them there under pip). Each command replaces
the Python process with its program (os.execv): the arguments go through as given, and the exit status and any
signal that ends the program (Ctrl-C, SIGTERM) are the program's own. Kept apart from the zoffload package so
that a command imports neither torch nor libzoffload's binding."""
import os
import signal
import sys

TOOLS = ("zo-report", "zo-swapbench", "zo-adambench", "zo-stepbench", "zo-arenabench")


def tool_path(name):
    """The installed program `name` (one of TOOLS): bin/NAME in this package's directory, else where the zoffload
    distribution installed it (an editable install, `pip install -e .`, leaves this file in the checkout and the
    programs in site-packages). The first candidate when there is none."""
    dirs = list(globals().get("__path__") or [os.path.dirname(os.path.abspath(__file__))])
    found = [os.path.join(d, "bin", name) for d in dirs]
    for f in found:
        if os.path.isfile(f):
            return f
    try:
        from importlib import metadata
        f = str(metadata.distribution("zoffload").locate_file("_zoffload_tools/bin/" + name))
        if os.path.isfile(f):
            return f
    except Exception:  # no zoffload distribution (run from a copy of this file), or Python < 3.8
        pass
    return found[0]


def run(name, args=None):
    """Replace this process with the program `name`, given `args` (default: this command's arguments). Returns
    only on failure: exits 127 with a one-line error when the program is not installed or cannot be run."""
    path = tool_path(name)
    argv = [name] + list(sys.argv[1:] if args is None else args)
    if not os.path.isfile(path):
        sys.stderr.write(
            "%s: error: %s is not installed: this zoffload was built without its tools (ZO_BUILD_TOOLS=OFF); "
            "build with the default, or run build/tools/%s of a checkout\n" % (name, path, name))
        sys.exit(127)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec: give the program the
        # defaults a shell would (`zo-report | head` ends it quietly, as it would run alone)
        for sig in ("SIGPIPE", "SIGXFSZ"):
            if hasattr(signal, sig):
                signal.signal(getattr(signal, sig), signal.SIG_DFL)
        os.execv(path, argv)
    except OSError as e:
        sys.stderr.write("%s: error: cannot run %s: %s\n" % (name, path, e.strerror or e))
        sys.exit(127)


def zo_report():
    run("zo-report")


def zo_swapbench():
    run("zo-swapbench")


def zo_adambench():
    run("zo-adambench")


def zo_stepbench():
    run("zo-stepbench")


def zo_arenabench():
    run("zo-arenabench")


if __name__ == "__main__":  # python -m _zoffload_tools NAME ARGS
    if len(sys.argv) < 2 or sys.argv[1] not in TOOLS:
        sys.stderr.write("usage: python -m _zoffload_tools {%s} [ARGS]\n" % ",".join(TOOLS))
        sys.exit(2)
    run(sys.argv[1], sys.argv[2:])
