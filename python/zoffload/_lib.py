"""ctypes declarations of the libzoffload calls the package uses (the C headers are the reference:
include/zoffload/adam.h, status.h). Loaded once, the first of:
  1. the package's own copy, zoffload/libzoffload.so, which `pip install .` builds and installs beside this file
     (an editable install keeps it in site-packages, which the package's __path__ lists beside the source);
  2. $ZOFFLOAD_LIBRARY (a file path): a package run from the source tree (PYTHONPATH=python) has no copy of its
     own, and the tests point it at build/libzoffload.so;
  3. the system's loader (an installed prefix on the library path, or LD_LIBRARY_PATH).
`path` is the file the process mapped (from /proc/self/maps), `source` which of the three it came from."""
import contextlib
import contextvars
import ctypes
import ctypes.util
import enum
import importlib.util
import os
import sys
import warnings

class Status(enum.IntEnum):
    """zo_status (zoffload/status.h): the ABI's numbers, named as zo_status_string() names them without "ZO_ERR_"
    (python/tests/test_abi_layout.py checks each against the library)."""
    OK = 0
    INVALID_ARG = 1
    INVALID_USAGE = 2
    OUT_OF_MEMORY = 3
    SYSTEM = 4
    IO = 5
    UNSUPPORTED = 6
    CUDA = 7
    NCCL = 8
    MPI = 9
    CONFIG = 10
    CORRUPT = 11


# zoffload/dtype.h
DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2
# zoffload/adam.h
ADAM_MODE_L2, ADAM_MODE_ADAMW = 0, 1
SIMD_AUTO = 0
ADAM_SKIP_NONFINITE = 1


class ZoffloadError(RuntimeError):
    """An error returned by libzoffload; the message is the library's (zo_last_error()), the status its name."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class AdamHparams(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float), ("mode", ctypes.c_int),
                ("bias_correction", ctypes.c_int), ("step", ctypes.c_int64), ("grad_scale", ctypes.c_float)]


class AdamShard(ctypes.Structure):
    _fields_ = [("param", ctypes.c_void_p), ("grad", ctypes.c_void_p), ("grad_dtype", ctypes.c_int),
                ("exp_avg", ctypes.c_void_p), ("exp_avg_sq", ctypes.c_void_p), ("state_dtype", ctypes.c_int),
                ("param_out", ctypes.c_void_p), ("out_dtype", ctypes.c_int), ("n", ctypes.c_size_t),
                ("seed", ctypes.c_uint64)]


class AdamPoolOpts(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int), ("numa_node", ctypes.c_int), ("bind", ctypes.c_int),
                ("tile_elems", ctypes.c_size_t), ("simd", ctypes.c_int), ("share_index", ctypes.c_int),
                ("share_count", ctypes.c_int)]


class AdamResult(ctypes.Structure):
    _fields_ = [("nonfinite", ctypes.c_int), ("skipped", ctypes.c_int)]


# libzoffload itself loads into any interpreter: it does not link jemalloc (whose "initial-exec" thread-local
# storage needs 2.6 KB of glibc's static TLS surplus, 512 bytes unless the process starts with more), it finds
# it at run time and maps pinned buffers page by page without it (zoffload/pinned.h, host_allocator()). Should a
# dependency of a differently built library still need static TLS, the fix is in the interpreter's environment.
TLS_FIX = ("start Python with GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384 in its environment, e.g. "
           "`GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384 python train.py`")


def _open(name):
    try:
        # RTLD_GLOBAL: Open MPI (a dependency when zoffload was built with MPI) loads plugins that look its own
        # symbols up in the global scope, as mpi4py arranges
        return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        if "static TLS" in str(e):
            raise ImportError("zoffload: loading %s: %s: %s" % (name, e, TLS_FIX)) from e
        raise


def _packaged():
    """The package's own libzoffload.so, or None: the first of the package's directories (more than one under an
    editable install) that holds one."""
    parent = __name__.rpartition(".")[0]
    # An editable install (pip install -e ., scikit-build-core) rebuilds the library, when it was installed with
    # editable.rebuild=true, as the spec of a file it installed is looked up: look it up (nothing is imported; any
    # other install just finds the file, or nothing). A failed rebuild raises, with CMake's output above.
    importlib.util.find_spec(parent + ".libzoffload")
    pkg = sys.modules.get(parent)
    for d in list(getattr(pkg, "__path__", None) or [os.path.dirname(os.path.abspath(__file__))]):
        f = os.path.join(d, "libzoffload.so")
        if os.path.isfile(f):
            return f
    return None


def _load():
    env = os.environ.get("ZOFFLOAD_LIBRARY")
    own = _packaged()
    if own:
        lib = _open(own)
        where = _where(lib, own)
        if env and os.path.realpath(env) != os.path.realpath(where):
            warnings.warn("zoffload: loaded the package's own %s; ZOFFLOAD_LIBRARY=%s is used only by a package "
                          "without one (run from the source tree: PYTHONPATH=python)" % (where, env), stacklevel=3)
        return lib, where, "package"
    if env:
        if not os.path.isfile(env):
            raise ImportError("zoffload: ZOFFLOAD_LIBRARY=%r is not a file" % env)
        lib = _open(env)
        return lib, _where(lib, env), "ZOFFLOAD_LIBRARY"
    tried = []
    for name in ("libzoffload.so.0", ctypes.util.find_library("zoffload"), "libzoffload.so"):
        if not name:
            continue
        try:
            lib = _open(name)
        except OSError as e:
            tried.append("%s: %s" % (name, e))
            continue
        return lib, _where(lib, name), "loader"
    raise ImportError("zoffload: libzoffload not found: this package carries no copy (install it with `pip install .` "
                      "from the zoffload checkout, which builds it), ZOFFLOAD_LIBRARY is not set (a library built "
                      "with scripts/build.sh: ZOFFLOAD_LIBRARY=build/libzoffload.so) and the loader found none; "
                      "tried " + "; ".join(tried))


def _where(lib, name):
    """The file the loader picked for @lib (from /proc/self/maps), else the name asked for."""
    try:
        addr = ctypes.cast(lib.zo_last_error, ctypes.c_void_p).value
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if lo <= addr < hi and len(parts) >= 6:
                    return parts[5]
    except (OSError, ValueError):
        pass
    return name


lib, path, source = _load()

lib.zo_last_error.restype = ctypes.c_char_p
lib.zo_last_error.argtypes = []
lib.zo_status_string.restype = ctypes.c_char_p
lib.zo_status_string.argtypes = [ctypes.c_int]
lib.zo_adam_pool_create.restype = ctypes.c_int
lib.zo_adam_pool_create.argtypes = [ctypes.POINTER(AdamPoolOpts), ctypes.POINTER(ctypes.c_void_p)]
lib.zo_adam_pool_destroy.restype = None
lib.zo_adam_pool_destroy.argtypes = [ctypes.c_void_p]
lib.zo_adam_pool_threads.restype = ctypes.c_int
lib.zo_adam_pool_threads.argtypes = [ctypes.c_void_p]
lib.zo_adam_pool_describe.restype = ctypes.c_char_p
lib.zo_adam_pool_describe.argtypes = [ctypes.c_void_p]
lib.zo_adam_pool_submit.restype = ctypes.c_int
lib.zo_adam_pool_submit.argtypes = [ctypes.c_void_p, ctypes.POINTER(AdamHparams), ctypes.POINTER(AdamShard),
                                    ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
lib.zo_adam_task_wait.restype = ctypes.c_int
lib.zo_adam_task_wait.argtypes = [ctypes.c_void_p, ctypes.POINTER(AdamResult)]


def check(status, what):
    """Raise ZoffloadError for a non-zero status, with the library's message."""
    if status != 0:
        name = lib.zo_status_string(status).decode()
        raise ZoffloadError(name, "%s: %s (%s)" % (what, lib.zo_last_error().decode(errors="replace"), name))

# --- config, device and engine (zoffload/config.h, device.h, engine.h) ---
DEVICE_HOST, DEVICE_CUDA = 0, 1


class ConfigOpts(ctypes.Structure):
    _fields_ = [("app_blocks", ctypes.c_void_p), ("world_size", ctypes.c_int), ("auto_values", ctypes.c_void_p)]


class ConfigAuto(ctypes.Structure):
    """zo_config_auto (zoffload/config.h): what the application knows, for the keys a config leaves "auto" as the
    Hugging Face Trainer writes them; the library fills each in and logs it once. zo_config_auto_init() marks every
    field unknown (-1, NAN). zoffload.hf builds one from TrainingArguments."""
    _fields_ = [("hidden_size", ctypes.c_int64), ("train_micro_batch_size_per_gpu", ctypes.c_int64),
                ("gradient_accumulation_steps", ctypes.c_int64), ("lr", ctypes.c_double), ("beta1", ctypes.c_double),
                ("beta2", ctypes.c_double), ("eps", ctypes.c_double), ("weight_decay", ctypes.c_double),
                ("gradient_clipping", ctypes.c_double), ("warmup_num_steps", ctypes.c_int64),
                ("total_num_steps", ctypes.c_int64), ("fp16", ctypes.c_int), ("bf16", ctypes.c_int)]


# The ConfigAuto the config parses of this context use (zoffload.initialize's engine, zero.Init): set by
# zoffload.hf around the calls it makes for the Trainer, None elsewhere ("auto" is then an error naming the key).
_auto_values = contextvars.ContextVar("zoffload_auto_values", default=None)


@contextlib.contextmanager
def auto_values(values):
    """Within the block, zo_config_parse() calls of this package fill the keys a config leaves "auto" from @values
    (a ConfigAuto, or None for none)."""
    token = _auto_values.set(values)
    try:
        yield values
    finally:
        _auto_values.reset(token)


def auto_values_pointer():
    """ConfigOpts.auto_values for this context: the address of auto_values()'s ConfigAuto, or None."""
    v = _auto_values.get()
    return None if v is None else ctypes.addressof(v)


class StepInfo(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int64), ("skipped", ctypes.c_int), ("lr", ctypes.c_double),
                ("grad_norm", ctypes.c_double), ("loss_scale", ctypes.c_double), ("grad_wait_s", ctypes.c_double),
                ("adam_s", ctypes.c_double), ("swap_s", ctypes.c_double), ("copy_s", ctypes.c_double),
                ("fetch_wait_s", ctypes.c_double), ("n_prefetch", ctypes.c_int64), ("n_demand_fetch", ctypes.c_int64),
                ("comm_s", ctypes.c_double), ("comm_bytes", ctypes.c_uint64)]


class ArenaStats(ctypes.Structure):  # zoffload/arena.h zo_arena_stats
    _fields_ = [(k, ctypes.c_size_t) for k in ("capacity", "live_bytes", "free_bytes", "pending_bytes",
                                                "largest_free")] + \
               [("fragmentation", ctypes.c_double)] + \
               [(k, ctypes.c_size_t) for k in ("pinned_bytes", "n_live_blocks", "peak_live_bytes")] + \
               [(k, ctypes.c_uint64) for k in ("n_allocs", "n_failed", "compactions", "bytes_moved", "copies")] + \
               [("compact_seconds", ctypes.c_double)]


class EngineMem(ctypes.Structure):  # zoffload/engine.h zo_engine_mem
    _fields_ = [(k, ctypes.c_size_t) for k in ("device_bytes", "device_peak_bytes", "host_bytes", "pinned_bytes",
                                                "nvme_bytes", "device_param_bytes")] + \
               [(k, ctypes.c_uint64) for k in ("nvme_read_bytes", "nvme_write_bytes", "h2d_bytes", "d2h_bytes")] + \
               [("arena", ArenaStats)] + \
               [(k, ctypes.c_size_t) for k in ("param_bytes", "grad_bytes", "state_bytes", "comm_bytes")]


# zoffload/engine.h zo_states_kind: DeepSpeed's OffloadStateTypeEnum as bits
STATES_OPTIM, STATES_HP_PARAMS, STATES_LP_PARAMS, STATES_LP_GRADS, STATES_GRAD_BUFFER = 1, 2, 4, 8, 16


class StatesInfo(ctypes.Structure):  # zoffload/engine.h zo_states_info
    _fields_ = [("offloaded", ctypes.c_uint), ("held", ctypes.c_uint), ("host_bytes", ctypes.c_size_t),
                ("host_pinned", ctypes.c_int),
                ("kept_device_bytes", ctypes.c_size_t), ("released_bytes", ctypes.c_size_t),
                ("offload_s", ctypes.c_double), ("reload_s", ctypes.c_double)]


CFG_I64, CFG_F64, CFG_BOOL, CFG_STR = 1, 2, 3, 4  # zo_config_value_type


_vp, _sz, _i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
for _name, _res, _args in (
        ("zo_config_sizeof", _sz, []),
        ("zo_config_parse", _i, [ctypes.c_char_p, _sz, ctypes.c_char_p, ctypes.POINTER(ConfigOpts), _vp]),
        ("zo_config_lr_at", ctypes.c_double, [_vp, ctypes.c_int64]),
        ("zo_config_auto_init", None, [ctypes.POINTER(ConfigAuto)]),
        ("zo_config_describe", _sz, [_vp, ctypes.c_char_p, _sz]),
        ("zo_config_get_i64", _i, [_vp, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)]),
        ("zo_config_get_f64", _i, [_vp, ctypes.c_char_p, ctypes.POINTER(ctypes.c_double)]),
        ("zo_config_get_bool", _i, [_vp, ctypes.c_char_p, ctypes.POINTER(_i)]),
        ("zo_config_get_str", _i, [_vp, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]),
        ("zo_config_key_type", _i, [ctypes.c_char_p]),
        ("zo_config_key_at", ctypes.c_char_p, [_sz, _vp]),
        ("zo_device_create", _i, [_i, _i, _sz, ctypes.POINTER(_vp)]),
        ("zo_device_destroy", None, [_vp]),
        ("zo_device_kind_name", ctypes.c_char_p, [_i]),
        ("zo_device_cuda_count", _i, []),
        ("zo_device_local_rank", _i, [ctypes.POINTER(_i), ctypes.POINTER(ctypes.c_char_p)]),
        ("zo_device_local_ordinal", _i, [_i, ctypes.POINTER(_i)]),
        ("zo_host_allocator", ctypes.c_char_p, []),
        ("zo_stream_wrap", _i, [_vp, _vp, ctypes.POINTER(_vp)]),
        ("zo_stream_destroy", None, [_vp]),
        ("zo_engine_set_compute_stream", _i, [_vp, _vp]),
        ("zo_device_malloc", _i, [_vp, _sz, ctypes.POINTER(_vp)]),
        ("zo_device_free", _i, [_vp, _vp]),
        ("zo_memcpy", _i, [_vp, _vp, _vp, _sz, _i]),
        ("zo_engine_create", _i, [_vp, _vp, _vp, ctypes.POINTER(_vp)]),
        ("zo_engine_destroy", None, [_vp]),
        ("zo_engine_register_param", _i, [_vp, ctypes.c_char_p, _sz, ctypes.POINTER(_vp)]),
        ("zo_engine_finalize", _i, [_vp]),
        ("zo_engine_load_param", _i, [_vp, _vp, _vp]),
        ("zo_engine_fetch", _i, [_vp, _vp, ctypes.POINTER(_vp), ctypes.POINTER(_i)]),
        ("zo_engine_release", _i, [_vp, _vp]),
        ("zo_engine_grad_ready", _i, [_vp, _vp, _vp, _i]),
        ("zo_engine_grad_accumulate", _i, [_vp, _vp, _vp, _i]),
        ("zo_engine_grad_fence", _i, [_vp, _vp]),
        ("zo_engine_grad_reopen", _i, [_vp]),
        ("zo_grad_handover_create", _i, [_vp, _sz, _sz, _vp, ctypes.POINTER(_vp)]),
        ("zo_grad_handover_destroy", None, [_vp]),
        ("zo_grad_handover_reserve", _i, [_vp, _sz, ctypes.POINTER(_sz), ctypes.POINTER(_i)]),
        ("zo_grad_handover_put", _i, [_vp, _vp, _vp, _i, _i]),
        ("zo_grad_handover_fence", _i, [_vp]),
        ("zo_grad_handover_reset", None, [_vp]),
        ("zo_engine_grad_accum_dtype", _i, [_vp]),
        ("zo_engine_step", _i, [_vp, ctypes.POINTER(StepInfo)]),
        ("zo_engine_synchronize", _i, [_vp]),
        ("zo_engine_loss_scale", ctypes.c_double, [_vp]),
        ("zo_engine_working_dtype", _i, [_vp]),
        ("zo_engine_grad_dtype", _i, [_vp]),
        ("zo_engine_mem_info", _i, [_vp, ctypes.POINTER(EngineMem)]),
        ("zo_engine_set_param_weight_decay", _i, [_vp, _vp, ctypes.c_double]),
        ("zo_engine_set_lr", _i, [_vp, ctypes.c_double]),
        ("zo_swap_crc32c", ctypes.c_uint32, [ctypes.c_uint32, _vp, _sz]),
        ("zo_engine_set_param_shape", _i, [_vp, _i, ctypes.POINTER(ctypes.c_int64)]),
        ("zo_engine_export_safetensors", _i, [_vp, ctypes.c_char_p, _i]),
        ("zo_engine_offload_states", _i, [_vp, ctypes.c_uint, _i]),
        ("zo_engine_reload_states", _i, [_vp]),
        ("zo_engine_states_info", _i, [_vp, ctypes.POINTER(StatesInfo)]),
        ("zo_engine_get_master", _i, [_vp, _vp, _vp, ctypes.POINTER(_sz), ctypes.POINTER(_sz)])):
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args



def local_ordinal(n_devices):
    """The GPU this process should use when none is named: (ordinal, variable) from the launcher's local rank
    (zo_device_local_ordinal(): LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, in that
    order), variable None when none is set. ZoffloadError naming the variable when it is malformed or not below
    @n_devices (0: not checked)."""
    lr, var = ctypes.c_int(), ctypes.c_char_p()
    check(lib.zo_device_local_rank(ctypes.byref(lr), ctypes.byref(var)), "the local rank")
    ordinal = ctypes.c_int()
    check(lib.zo_device_local_ordinal(n_devices, ctypes.byref(ordinal)), "the local GPU")
    return ordinal.value, (var.value.decode() if var.value else None)

COPY_H2D, COPY_D2H = 0, 1


class ConfigView:
    """The config in @buf (a zo_config_sizeof() buffer that zo_config_parse() filled) as the library resolved it,
    read value by value through zo_config_get_*() by DeepSpeed JSON path, never through a mirror of zo_config_t's
    layout: get("zero_optimization.stage"), get("optimizer.params.betas[0]"), or attribute by attribute
    (view.zero_optimization.offload_param.device). Integers are int, reals float, booleans bool, names and paths
    str (zoffload/config.h lists the paths and names). Keeps @buf alive; reads it on each access."""

    _GET = {CFG_I64: ("zo_config_get_i64", ctypes.c_int64), CFG_F64: ("zo_config_get_f64", ctypes.c_double),
            CFG_BOOL: ("zo_config_get_bool", ctypes.c_int), CFG_STR: ("zo_config_get_str", ctypes.c_char_p)}

    def __init__(self, buf, _prefix=""):
        self._buf, self._prefix = buf, _prefix

    def get(self, path):
        """The resolved value at the JSON path @path (relative to this view's block). ZoffloadError naming the path
        when the library has no such path."""
        full = (self._prefix + path).encode()
        fn, ctype = self._GET.get(lib.zo_config_key_type(full), ("zo_config_get_i64", ctypes.c_int64))
        out = ctype()
        check(getattr(lib, fn)(self._buf, full, ctypes.byref(out)), "the resolved config")
        if ctype is ctypes.c_char_p:
            return out.value.decode()
        return bool(out.value) if fn == "zo_config_get_bool" else out.value

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        full = self._prefix + name
        if lib.zo_config_key_type(full.encode()):
            return self.get(name)
        if any(k.startswith(full + ".") for k in config_paths()):
            return ConfigView(self._buf, full + ".")
        raise AttributeError("the resolved config has no %s (zoffload/config.h: zo_config_get_*)" % full)


def config_paths():
    """Every JSON path zo_config_get_*() reads, in the library's order."""
    global _PATHS
    if _PATHS is None:
        out, i = [], 0
        while True:
            k = lib.zo_config_key_at(i, None)
            if k is None:
                break
            out.append(k.decode())
            i += 1
        _PATHS = tuple(out)
    return _PATHS


_PATHS = None


# zo_save_opts.on_removed(path, leftover, user): each checkpoint keep_last removed, each leftover of a killed save
SaveOnRemoved = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p)


class SaveFile(ctypes.Structure):
    """zo_save_file (zoffload/checkpoint.h): one of the caller's files of a save."""
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("nbytes", ctypes.c_size_t)]


class SaveOpts(ctypes.Structure):
    """zo_save_opts (zoffload/checkpoint.h), field for field: C reads all of them, so this layout must match."""
    _fields_ = [("tag", ctypes.c_int64), ("app_state", ctypes.c_char_p), ("keep_last", ctypes.c_int),
                ("on_removed", SaveOnRemoved), ("user", ctypes.c_void_p), ("name", ctypes.c_char_p),
                ("no_latest", ctypes.c_int), ("files", ctypes.POINTER(SaveFile)), ("n_files", ctypes.c_int)]


lib.zo_checkpoint_read_file.restype = ctypes.c_int
lib.zo_checkpoint_read_file.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(ctypes.c_size_t)]


lib.zo_engine_save.restype = ctypes.c_int
lib.zo_engine_save.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(SaveOpts), ctypes.c_char_p,
                               ctypes.c_size_t]
lib.zo_engine_load.restype = ctypes.c_int
lib.zo_engine_load.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
LoadOnUnmatched = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p)


class LoadOpts(ctypes.Structure):
    """zo_load_opts (zoffload/checkpoint.h), field for field."""
    _fields_ = [("weights_only", ctypes.c_int), ("not_strict", ctypes.c_int), ("on_unmatched", LoadOnUnmatched),
                ("user", ctypes.c_void_p), ("n_missing", ctypes.c_int), ("n_unexpected", ctypes.c_int)]


lib.zo_engine_steps_applied.restype = ctypes.c_int64
lib.zo_engine_steps_applied.argtypes = [ctypes.c_void_p]
lib.zo_engine_load_ex.restype = ctypes.c_int
lib.zo_engine_load_ex.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(LoadOpts),
                                  ctypes.POINTER(ctypes.c_void_p)]
libc = ctypes.CDLL(None)  # free() for what the library malloc'd (its malloc resolves to the process's)
libc.free.argtypes = [ctypes.c_void_p]
libc.free.restype = None

# one run per checkpoint root (zoffload/checkpoint.h), the lock zo-train and zo_engine_save take
lib.zo_checkpoint_lock.restype = ctypes.c_int
lib.zo_checkpoint_lock.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
lib.zo_checkpoint_unlock.restype = None
lib.zo_checkpoint_unlock.argtypes = [ctypes.c_void_p]

lib.zo_engine_set_trace.restype = ctypes.c_int
lib.zo_engine_set_trace.argtypes = [ctypes.c_void_p, ctypes.c_int]

# --- collectives (zoffload/comm.h) ---
for _name, _res, _args in (
        ("zo_comm_create_from_env", _i, [ctypes.POINTER(_vp)]),
        ("zo_comm_destroy", None, [_vp]),
        ("zo_comm_rank", _i, [_vp]),
        ("zo_comm_size", _i, [_vp]),
        ("zo_comm_backend", ctypes.c_char_p, [_vp]),
        ("zo_comm_all_reduce_f64", _i, [_vp, ctypes.POINTER(ctypes.c_double), _sz])):
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args


class LaunchInfo(ctypes.Structure):  # zo_launch_info
    _fields_ = [("rank", ctypes.c_int), ("world_size", ctypes.c_int), ("local_rank", ctypes.c_int),
                ("local_size", ctypes.c_int), ("source", ctypes.c_char_p)]


# zo_comm_external_ops: the callbacks of an external communicator (zoffload/comm.h; comm.py supplies them)
COMM_ELEM_F32, COMM_ELEM_F64 = 0, 1
_cb = ctypes.CFUNCTYPE
CommAllGather = _cb(_i, _vp, _vp, _vp, _sz, ctypes.POINTER(_vp))
CommReduceScatter = _cb(_i, _vp, _vp, _vp, _sz, _i, ctypes.POINTER(_vp))
CommAllReduce = _cb(_i, _vp, _vp, _sz, _i, ctypes.POINTER(_vp))
CommBroadcast = _cb(_i, _vp, _vp, _sz, _i, ctypes.POINTER(_vp))
CommBarrier = _cb(_i, _vp, ctypes.POINTER(_vp))
CommWait = _cb(_i, _vp, _vp)
CommTest = _cb(_i, _vp, _vp, ctypes.POINTER(_i))
CommSplit = _cb(_i, _vp, _i, _i, ctypes.POINTER(_vp), ctypes.POINTER(_i), ctypes.POINTER(_i))
CommDestroy = _cb(None, _vp)
CommError = _cb(None, _vp, _vp, _sz)


class CommExternalOps(ctypes.Structure):
    _fields_ = [("all_gather", CommAllGather), ("reduce_scatter", CommReduceScatter), ("all_reduce", CommAllReduce),
                ("broadcast", CommBroadcast), ("barrier", CommBarrier), ("wait", CommWait), ("test", CommTest),
                ("split", CommSplit), ("destroy", CommDestroy), ("error", CommError)]


for _name, _res, _args in (
        ("zo_launch_info_get", _i, [ctypes.POINTER(LaunchInfo)]),
        ("zo_comm_create_external", _i, [ctypes.POINTER(CommExternalOps), _vp, _i, _i, ctypes.POINTER(_vp)]),
        ("zo_comm_all_gather", _i, [_vp, _vp, _vp, _sz]),
        ("zo_comm_broadcast", _i, [_vp, _vp, _sz, _i]),
        ("zo_comm_barrier", _i, [_vp])):
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args

# The library's log lines go to the `zoffload` logger of Python's logging module (_log.py), with the rank, from here on.
from . import _log  # noqa: E402
_log.install(lib, path, LaunchInfo)
