"""The `zoffload` logger of Python's logging module: what the Python front says (DeepSpeed's log lines: steps_per_print,
wall_clock_breakdown, where the state lives) and every line libzoffload logs (zo_log_set_handler, zoffload/status.h),
each with its rank: "[Rank N] ..." in the message and record.rank. Not the monitors (monitor.py).

As DeepSpeed's "DeepSpeed" logger: its own handler ("[time] [LEVEL] [file:line:function] message"), on stderr
(DeepSpeed's is on stdout; the library wrote to stderr, and so does logging by default), not propagated to the root
logger, level INFO. The library's lines come through its child `zoffload.lib`, level WARNING
(the library's info lines are diagnostics). The environment's ZO_LOG_LEVEL (error|warn|info|debug) sets both, the
config's "log_level" (DeepSpeed's key) too, at initialize(); an application's own setLevel() is kept. The library
only formats the lines `zoffload.lib` shows as it is when the package loads and at each initialize(). Which rank
shows a line:
  - informational lines (INFO, DEBUG): rank 0's only (DeepSpeed's log_dist(ranks=[0]));
  - warnings and errors: every rank's, each naming its rank, except the library's lines about the config
    ("config: ..."), which every rank parses alike: rank 0's, once per process (zero.Init and initialize() both
    parse the same config).
The library calls the handler from its worker threads: the callback takes the GIL (every call into the library goes
through ctypes.CDLL, which releases it), holds no lock of this module while it logs, and is removed at interpreter
exit (atexit), after which the library writes to stderr again."""
import atexit
import ctypes
import logging
import os
import sys
import threading

logger = logging.getLogger("zoffload")
lib_logger = logging.getLogger("zoffload.lib")  # the library's lines (they propagate to logger's handler)

# zo_log_level (zoffload/status.h) <-> logging's levels
_FROM_C = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}
_ENV_LEVELS = {"error": logging.ERROR, "warn": logging.WARNING, "warning": logging.WARNING, "info": logging.INFO,
               "debug": logging.DEBUG}
# DeepSpeed's log_level config key takes these (deepspeed.utils.logging.log_levels)
CONFIG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR,
                 "critical": logging.CRITICAL}
FORMAT = "[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s"  # DeepSpeed's
LIB_FORMAT = "[%(asctime)s] [%(levelname)s] %(message)s"  # the library's lines: no Python file and line to name

_rank = 0  # this process's rank: the launcher's environment, then the engine's communicator
_config_seen = set()  # the library's "config: ..." lines shown so far
_HandlerType = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_callback = None  # the installed _HandlerType: referenced for as long as the library may call it
_lib = None  # the ctypes library the handler is installed in
_c_level = None  # the max_level last handed to zo_log_set_handler
_install_lock = threading.Lock()  # install()/sync_level()/_uninstall(); never held while the library is called to log


class _Formatter(logging.Formatter):
    """DeepSpeed's format; the library's lines (logger zoffload.lib) without the Python file, line and function."""

    def __init__(self):
        super().__init__(FORMAT)
        self._lib = logging.Formatter(LIB_FORMAT)

    def format(self, record):
        if record.name == lib_logger.name:
            return self._lib.format(record)
        return super().format(record)


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever sys.stderr is when a record is written (as logging's last-resort handler): a
    process or a test that replaces sys.stderr gets the lines."""

    def __init__(self):
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr


def _setup():
    """The logger's defaults, as DeepSpeed sets up its own, but on stderr (where the library wrote before, and
    Python's logging writes by default): a handler with DeepSpeed's format unless the application gave the logger
    one, not propagated, level from ZO_LOG_LEVEL (else INFO) unless already set."""
    if not logger.handlers:
        h = _StderrHandler()
        h.setFormatter(_Formatter())
        logger.addHandler(h)
        logger.propagate = False
    env = _ENV_LEVELS.get(os.environ.get("ZO_LOG_LEVEL", "").lower())
    if logger.level == logging.NOTSET:
        logger.setLevel(env or logging.INFO)
    if lib_logger.level == logging.NOTSET:  # the library's own default: warnings (its info lines are diagnostics)
        lib_logger.setLevel(env or logging.WARNING)


def rank():
    """This process's rank as the log lines name it."""
    return _rank


def set_rank(r):
    """The rank the lines name from now on (the engine's, once its communicator is made)."""
    global _rank
    _rank = int(r)


def _rank_from_env(lib, launch_info):
    """The rank the launcher's environment gives (zo_launch_info_get), 0 when none or malformed (the engine names
    a malformed one when it starts)."""
    li = launch_info()
    return li.rank if lib.zo_launch_info_get(ctypes.byref(li)) == 0 else 0


def log_dist(message, ranks=(0,), level=logging.INFO, extra=None):
    """DeepSpeed's log_dist: "[Rank N] @message" at @level when this rank is in @ranks (-1 in it: every rank).
    Returns True when it was handed to the logger."""
    if ranks is not None and -1 not in ranks and _rank not in ranks:
        return False
    if not logger.isEnabledFor(level):
        return False
    logger.log(level, "[Rank %d] %s", _rank, message, extra=dict(extra or {}, rank=_rank), stacklevel=2)
    return True


def warning(message):
    """A warning from this rank, naming it (every rank's is shown)."""
    log_dist(message, ranks=None, level=logging.WARNING)


def _on_line(level, msg, _user):
    """zo_log_handler: one library line into the logger (any library thread; exceptions never reach C)."""
    try:
        text = msg.decode("utf-8", errors="replace") if msg else ""
        pylevel = _FROM_C.get(level, logging.ERROR)
        if text.startswith("config: "):  # alike on every rank, and parsed more than once
            if _rank != 0 or text in _config_seen:
                return
            _config_seen.add(text)
        elif pylevel < logging.WARNING and _rank != 0:
            return
        if not lib_logger.isEnabledFor(pylevel):
            return
        record = lib_logger.makeRecord(lib_logger.name, pylevel, _lib_path, 0, "[Rank %d] %s" % (_rank, text),
                                       None, None, func="libzoffload", extra={"rank": _rank})
        lib_logger.handle(record)
    except Exception:  # noqa: BLE001 (a failing handler must not unwind into the library's thread)
        pass


_lib_path = "libzoffload.so"


def _c_level_of(pylevel):
    """The library's max_level that lets through what the logger at @pylevel shows."""
    if pylevel <= logging.DEBUG:
        return 3
    if pylevel <= logging.INFO:
        return 2
    if pylevel <= logging.WARNING:
        return 1
    return 0


def install(lib, path, launch_info):
    """Route @lib's log lines (the library mapped from @path) into the logger; @launch_info: _lib.LaunchInfo.
    Called once, as the package loads the library."""
    global _callback, _lib, _lib_path, _c_level
    _setup()
    with _install_lock:
        if _callback is not None:
            return
        _lib, _lib_path = lib, path
        lib.zo_log_set_handler.restype = None
        lib.zo_log_set_handler.argtypes = [_HandlerType, ctypes.c_void_p, ctypes.c_int]
        set_rank(_rank_from_env(lib, launch_info))
        _callback = _HandlerType(_on_line)
        _c_level = _c_level_of(lib_logger.getEffectiveLevel())
        lib.zo_log_set_handler(_callback, None, _c_level)
    atexit.register(_uninstall)


def sync_level():
    """The library's threshold to the logger's level, when it changed since install() (initialize() calls it before
    the engine starts: zo_log_set_handler is not to be called while the library logs)."""
    global _c_level
    with _install_lock:
        want = _c_level_of(lib_logger.getEffectiveLevel())
        if _callback is None or want == _c_level:
            return
        _c_level = want
        _lib.zo_log_set_handler(_callback, None, want)


def _uninstall():
    """At exit: the library's default handler (stderr, ZO_LOG_LEVEL's level) again; no callback into an interpreter
    that is shutting down. The callback object stays referenced (a line already on its way may still arrive)."""
    global _c_level
    with _install_lock:
        if _lib is None or _c_level is None:
            return
        env = os.environ.get("ZO_LOG_LEVEL", "").lower()
        _lib.zo_log_set_handler(_HandlerType(), None, _c_level_of(_ENV_LEVELS.get(env, logging.WARNING)))
        _c_level = None


def set_level_from_config(name):
    """DeepSpeed's config "log_level" (debug|info|warning|error|critical) onto the logger; ValueError naming the key
    for anything else."""
    if not isinstance(name, str) or name.lower() not in CONFIG_LEVELS:
        raise ValueError("zoffload.initialize: config log_level %r: expected one of %s"
                         % (name, ", ".join(CONFIG_LEVELS)))
    logger.setLevel(CONFIG_LEVELS[name.lower()])
    lib_logger.setLevel(CONFIG_LEVELS[name.lower()])
