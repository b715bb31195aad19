"""Reading checkpoint files that may come from someone else: the name `latest` holds (checked as the C library's
resolve_dir checks it), the client state of save_checkpoint() without pickle (tensors in a safetensors file, the
rest JSON in its header), and the rule for pickle files (torch.save: client_state.pt of older checkpoints, a Hugging
Face pytorch_model.bin). Not the engine's own files (manifests, rankNNNNN.bin: offload/checkpoint/save.c reads them).
"""
import base64
import errno
import json
import os
import re
import stat
import struct

import torch

CLIENT_STATE_FILE = "client_state.safetensors"  # save_checkpoint()'s client state, rank 0, beside manifest.json
LEGACY_CLIENT_STATE_FILE = "client_state.pt"  # what save_checkpoint() wrote before: a pickle (torch.save)
_META_KEY = "zoffload.client_state"  # the header metadata entry holding the JSON (format version 1)
_LATEST_MAX_BYTES = 4096  # what offload/checkpoint/save.c reads of `latest`


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read or is refused: the message names the file (and the field)."""


def name_ok(name):
    """Whether @name may be a checkpoint directory's name, as offload/checkpoint/save.c decides for `latest` and
    zo_save_opts.name: 1..255 bytes of printable ASCII without '/' or space, not starting with '.' (so neither '.'
    nor '..')."""
    return (isinstance(name, str) and 0 < len(name) < 256 and not name.startswith(".")
            and all(0x20 < ord(c) < 0x7f and c != "/" for c in name))


def check_regular(path, follow=False):
    """@path is a regular file, not a symbolic link (a checkpoint holds regular files only; @follow: a link to a
    regular file will do, as in Hugging Face's cache); CheckpointError naming it otherwise. FileNotFoundError when
    it is not there."""
    st = os.stat(path) if follow else os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise CheckpointError("%s is a symbolic link: a checkpoint holds regular files only" % path)
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError("%s is not a regular file: a checkpoint holds regular files only" % path)
    return st


def file_kind(mode):
    """What a file of @mode (st_mode) is, for a message: "a FIFO", "a directory", "a device", "a socket"."""
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a plain file")


def open_regular(path):
    """(fd, size) of @path opened to read as ck_open_regular (offload/checkpoint/save.c) opens it: not through a symbolic
    link in its last component, without blocking (a FIFO or a device in place of a checkpoint file would block or
    never end), refused unless a regular file; the descriptor blocking again on return. CheckpointError naming it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CheckpointError("checkpoint: '%s' is a symbolic link: a checkpoint holds regular files only"
                                  % path) from None
        raise CheckpointError("checkpoint: cannot open '%s': %s" % (path, e.strerror)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError("checkpoint: '%s' is not a regular file (%s): a checkpoint holds regular files only"
                                  % (path, file_kind(st.st_mode)))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read_latest(root):
    """The checkpoint name ROOT/latest holds, checked: None when there is no `latest`. CheckpointError naming
    `latest` when it is not a regular file, is longer than 4096 bytes, is not one line (an optional final newline)
    of a valid name (name_ok), or names a symbolic link or something other than a directory under @root. A name
    whose directory does not exist is returned (load_checkpoint warns, as DeepSpeed does)."""
    latest = os.path.join(str(root), "latest")
    try:
        st = check_regular(latest)
    except FileNotFoundError:
        return None
    if st.st_size > _LATEST_MAX_BYTES:
        raise CheckpointError("%s is %d bytes, more than the %d it may hold" % (latest, st.st_size,
                                                                               _LATEST_MAX_BYTES))
    with open(latest, "rb") as f:
        raw = f.read(_LATEST_MAX_BYTES + 1)
    text = raw[:-1] if raw.endswith(b"\n") else raw
    name = text.decode("ascii", errors="replace")
    if not name_ok(name) or b"\n" in text:
        raise CheckpointError("%s does not name a checkpoint directory (it holds %r; a name is 1..255 bytes of "
                              "printable ASCII without '/' or space, not starting with '.')" % (latest, raw[:96]))
    d = os.path.join(str(root), name)
    try:
        dst = os.lstat(d)
    except FileNotFoundError:
        return name
    if stat.S_ISLNK(dst.st_mode) or not stat.S_ISDIR(dst.st_mode):
        raise CheckpointError("%s names %r, which is %s, not a checkpoint directory" % (
            latest, name, "a symbolic link" if stat.S_ISLNK(dst.st_mode) else "not a directory"))
    return name


# --- pickle files ---

def pickle_loads_safely():
    """Whether this torch's torch.load(weights_only=True) can be trusted with a file from elsewhere: from torch 2.6
    on. Before (1.13 has the flag), weights_only=True still ran code from a crafted file (CVE-2025-32434)."""
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (2, 6)


def load_pickle(path, what, follow=False):
    """The objects of the pickle file @path (torch.save), loaded with torch.load(weights_only=True, map_location=
    "cpu") when this torch makes that safe (pickle_loads_safely); else CheckpointError naming @path and saying
    how to go on: a pickle runs whatever code it names when loaded, so it is never loaded plainly. @what says in
    the message what the file is and the safe alternative; @follow as check_regular's."""
    check_regular(path, follow)
    if not pickle_loads_safely():
        raise CheckpointError("%s is a pickle file (torch.save) and this torch %s cannot load one without running "
                              "the code it may name (torch.load(weights_only=True) is safe from torch 2.6 on): "
                              "refused. %s" % (path, torch.__version__, what))
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError for a global it does not allow, or a damaged file
        raise CheckpointError("%s: torch.load(weights_only=True) refused it: %s: %s" % (path, type(e).__name__,
                                                                                        e)) from e


# --- the client state: JSON with tensors by name in one safetensors file ---
# Every value is a JSON scalar (None, bool, int, float, str) or an object of one key naming its type: {"list": [..]},
# {"tuple": [..]}, {"dict": [[key, value], ..]}, {"tensor": name}, {"bytes": base64}, and numpy arrays and scalars
# (np.random.get_state() holds both) as their bytes: {"ndarray": {"tensor": name of a uint8 tensor, "dtype": "<u4",
# "shape": [..], "scalar": false}}.
_NP_KINDS = "biufc"  # numpy dtype kinds stored: bool, integers, floats, complex (never objects or records)

def _encode(obj, where, tensors, path):
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if id(obj) in path:
        raise TypeError("%s refers to itself; client_state must be a tree" % where)
    if isinstance(obj, torch.Tensor):
        name = str(len(tensors))
        tensors[name] = obj.detach().to("cpu").clone(memory_format=torch.contiguous_format)
        return {"tensor": name}
    if type(obj).__module__ == "numpy" and hasattr(obj, "dtype") and obj.dtype.kind in _NP_KINDS \
            and obj.dtype.fields is None:
        import numpy as np
        arr = np.array(obj, order="C")  # a copy; 0-d for a scalar
        name = str(len(tensors))
        tensors[name] = torch.frombuffer(bytearray(arr.tobytes()), dtype=torch.uint8) if arr.nbytes else \
            torch.zeros(0, dtype=torch.uint8)
        return {"ndarray": {"tensor": name, "dtype": arr.dtype.str, "shape": list(arr.shape),
                            "scalar": not isinstance(obj, np.ndarray)}}
    if isinstance(obj, bytes):
        return {"bytes": base64.b64encode(obj).decode()}
    path = path | {id(obj)}
    if isinstance(obj, (list, tuple)):
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return {kind: [_encode(v, "%s[%d]" % (where, i), tensors, path) for i, v in enumerate(obj)]}
    if isinstance(obj, dict):
        out = []
        for k, v in obj.items():
            if not (k is None or isinstance(k, (bool, int, float, str, tuple))):
                raise TypeError("%s has a key of type %s; client_state keys are str, int, float, bool, None or "
                                "tuples" % (where, type(k).__name__))
            out.append([_encode(k, "%s key %r" % (where, k), tensors, path),
                        _encode(v, "%s[%r]" % (where, k), tensors, path)])
        return {"dict": out}
    raise TypeError("%s is a %s.%s, which a checkpoint's client_state does not hold (it is stored without pickle: "
                    "None, bool, int, float, str, bytes, list, tuple, dict, torch tensors and numpy arrays); convert "
                    "it to one of those" % (where, type(obj).__module__, type(obj).__qualname__))


def client_state_bytes(state):
    """@state (a dict: save_checkpoint's client_state with the scheduler's and optimizer's state dicts) as the
    bytes of a safetensors file: every tensor (and numpy array) a copy in host memory, the rest JSON in the header
    metadata. TypeError naming the entry (client_state['x'][2]) of a value it cannot hold."""
    from safetensors.torch import save
    tensors = {}  # entries named as the caller knows them: client_state['x'][2], lr_scheduler['base_lrs']
    tree = {"dict": [[k, _encode(v, str(k), tensors, frozenset())] for k, v in state.items()]}
    text = json.dumps({"version": 1, "state": tree}, allow_nan=True)
    return save(tensors, metadata={"format": "pt", _META_KEY: text})


def _decode(v, where, tensors, used, file):
    def bad(why):
        return CheckpointError("%s: client state at %s: %s" % (file, where or "its top level", why))
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if not isinstance(v, dict) or len(v) != 1:
        raise bad("%s, not a value of this format" % type(v).__name__)
    (kind, x), = v.items()
    if kind in ("list", "tuple"):
        if not isinstance(x, list):
            raise bad("%s of a %s" % (kind, type(x).__name__))
        items = [_decode(e, "%s[%d]" % (where, i), tensors, used, file) for i, e in enumerate(x)]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        if not isinstance(x, list) or not all(isinstance(kv, list) and len(kv) == 2 for kv in x):
            raise bad("dict not a list of [key, value] pairs")
        out = {}
        for i, (k, e) in enumerate(x):
            key = _decode(k, "%s key %d" % (where or "the dict", i), tensors, used, file)
            try:
                hash(key)
                ok = not isinstance(key, (torch.Tensor, bytes))
            except TypeError:
                ok = False
            if not ok:
                raise bad("key %d is not a scalar or a tuple of them" % i)
            if key in out:
                raise bad("key %r twice" % (key,))
            out[key] = _decode(e, "%s[%r]" % (where, key) if where else str(key), tensors, used, file)
        return out
    if kind == "ndarray":
        if not (isinstance(x, dict) and set(x) == {"tensor", "dtype", "shape", "scalar"}
                and isinstance(x["dtype"], str) and isinstance(x["shape"], list) and isinstance(x["scalar"], bool)
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in x["shape"])):
            raise bad("ndarray not {tensor, dtype, shape, scalar}")
        import numpy as np
        try:
            dt = np.dtype(x["dtype"])
        except TypeError as e:
            raise bad("ndarray dtype %r: %s" % (x["dtype"][:40], e)) from None
        if dt.kind not in _NP_KINDS or dt.fields is not None or dt.str != x["dtype"]:
            raise bad("ndarray dtype %r is not a plain number type" % x["dtype"][:40])
        raw = _decode({"tensor": x["tensor"]}, where, tensors, used, file)
        n = 1
        for d in x["shape"]:
            n *= d
        if raw.dtype != torch.uint8 or raw.dim() != 1 or raw.numel() != n * dt.itemsize:
            raise bad("ndarray of %s %s is %d bytes" % (dt.str, x["shape"], raw.numel() * raw.element_size()))
        if len(x["shape"]) > 32:
            raise bad("ndarray of %d dimensions (32 at most)" % len(x["shape"]))
        try:
            arr = np.frombuffer(raw.numpy().tobytes(), dtype=dt).reshape(x["shape"])
        except ValueError as e:  # a shape numpy cannot make, e.g. [2^62, 0]
            raise bad("ndarray of shape %s: %s" % (str(x["shape"])[:80], e)) from None
        if x["scalar"]:
            if x["shape"]:
                raise bad("a numpy scalar of shape %s" % x["shape"])
            return arr[()]
        return arr.copy()
    if kind == "tensor":
        if not isinstance(x, str) or x not in tensors:
            raise bad("names tensor %r, which the file does not hold" % (x,))
        if x in used:
            raise bad("names tensor %r a second time" % x)
        used.add(x)
        return tensors[x]
    if kind == "bytes":
        if not isinstance(x, str):
            raise bad("bytes of a %s" % type(x).__name__)
        try:
            return base64.b64decode(x.encode("ascii"), validate=True)
        except ValueError as e:
            raise bad("bytes not base64: %s" % e) from None
    raise bad("unknown kind %r" % kind[:40])


def read_client_state(path):
    """The dict client_state_bytes() stored in the safetensors file @path. Everything is read and checked before
    it returns; CheckpointError naming @path (and the entry) for a file that is not a regular file, not a whole
    safetensors file, has no or malformed client-state metadata, or tensors it does not name."""
    check_regular(path)
    fd, _ = open_regular(path)  # and again at the open: replaced between the check and the open
    with os.fdopen(fd, "rb") as f:
        blob = f.read()
    return client_state_from_bytes(blob, path)


def client_state_from_bytes(blob, path):
    """read_client_state() of the file's bytes @blob (read whole: nothing stays mapped to the file, which a later
    write would change under the caller and a truncation turn into SIGBUS); @path names it in errors."""
    from safetensors.torch import load as st_load
    try:
        tensors = st_load(bytes(blob))
        (hlen,) = struct.unpack("<Q", blob[:8])
        meta = json.loads(blob[8:8 + hlen]).get("__metadata__") or {}
    except Exception as e:  # safetensors_rust.SafetensorError: a header or a length that does not add up
        raise CheckpointError("%s: not a safetensors file: %s: %s" % (path, type(e).__name__, e)) from e
    if not isinstance(meta, dict):
        raise CheckpointError("%s: not a safetensors file: __metadata__ is not an object" % path)
    text = meta.get(_META_KEY)
    if text is None:
        raise CheckpointError("%s: no %r entry in its metadata: not a client state save_checkpoint() wrote"
                              % (path, _META_KEY))
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise CheckpointError("%s: the client state is not JSON: %s" % (path, e)) from None
    if not isinstance(doc, dict) or doc.get("version") != 1 or "state" not in doc:
        raise CheckpointError("%s: client state of an unknown version (%r)" % (
            path, doc.get("version") if isinstance(doc, dict) else type(doc).__name__))
    used = set()
    try:
        state = _decode(doc["state"], "", tensors, used, path)
    except RecursionError:
        raise CheckpointError("%s: the client state nests deeper than this interpreter's recursion limit"
                              % path) from None
    if set(tensors) - used:
        raise CheckpointError("%s: tensors %s that the client state does not name" % (
            path, sorted(set(tensors) - used)[:8]))
    if not isinstance(state, dict):
        raise CheckpointError("%s: the client state is a %s, not a dict" % (path, type(state).__name__))
    return state
