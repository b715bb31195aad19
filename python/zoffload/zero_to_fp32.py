"""zoffload-zero-to-fp32: DeepSpeed's zero_to_fp32.py for zoffload checkpoints. Reads a checkpoint directory (the
manifests and rankNNNNN.bin shard files of zo_engine_save, docs/checkpoints.md) with no engine and no GPU, joins
every tensor's fp32 master shards, and writes a consolidated fp32 state dict (torch.save) or a safetensors file.
Not a reader of DeepSpeed's own checkpoint format.

    python -m zoffload.zero_to_fp32 CHECKPOINT_DIR OUTPUT_FILE [--tag TAG] [--safe_serialization]

CHECKPOINT_DIR is the save_dir of engine.save_checkpoint() (its `latest` names the tag unless --tag is given) or a
checkpoint directory itself. A checkpoint may come from someone else: it is read under the rules of the C loader
(offload/checkpoint/load.c, what `zo-train --resume` applies), with its messages: every file opened without following
a symbolic link and without blocking, anything but a regular file refused; a manifest of at most 1 GiB, strict JSON;
every field checked (the format, each tensor's numel, shard, file, and each run's offset, nbytes, dtype and CRC32C,
every run inside its rank file) before a byte of weights is read or memory for them taken; every master shard's
CRC32C (zo_swap_crc32c) checked before it is used. Any refusal is a CheckpointError naming the file and the field.
"""
import argparse
import json
import os
import re
import sys

import torch

from . import _ckpt, _lib
from ._ckpt import CheckpointError  # a checkpoint that cannot be read: the file and the field named

CKPT_FORMAT = "zoffload-checkpoint"  # offload/checkpoint/checkpoint_internal.h
CKPT_FORMAT_VERSION = 1
CKPT_MANIFEST_MAX = 1 << 30  # offload/checkpoint/load.c: more than this is not a manifest
CKPT_CHUNK = 8 << 20  # bytes per read while checksumming (offload/checkpoint/checkpoint_internal.h)
CKPT_MAX_STEP = 1 << 48
_INT64_MAX = (1 << 63) - 1  # jansson's json_int_t: a larger integer is not one it reads
_UINT64_MAX = (1 << 64) - 1
_JSON_MAX_DEPTH = 2048  # jansson's JSON_PARSER_MAX_DEPTH
_WORLD_MAX = 1 << 16  # ranks a checkpoint may have (rankNNNNN.bin names)
_TENSORS_MAX = 1 << 22  # tensors per manifest: a million fit in CKPT_MANIFEST_MAX, more than 4 Mi do not
_KINDS = ("master", "exp_avg", "exp_avg_sq")  # ck_kind
_ESZ = {"fp32": 4, "fp16": 2, "bf16": 2}  # zo_dtype_name's names of the types a run may hold, and their sizes
_HEX8 = re.compile(r"[0-9a-fA-F]{8}\Z")


def _esc(s, n=80):
    """A string (or anything) from the manifest, shortened and escaped for a message, as zo_escape does."""
    if s is None:
        return "(missing)"
    s = s if isinstance(s, str) else repr(s)
    r = s[:n].encode("unicode_escape").decode("ascii")
    return r + ("..." if len(s) > n else "")


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _pread_all(fd, n, off, path):
    """@n bytes of @fd at @off in reads of at most CKPT_CHUNK; CheckpointError naming @path at a short file."""
    out = bytearray(n)
    view, done = memoryview(out), 0
    while done < n:
        k = os.preadv(fd, [view[done:done + CKPT_CHUNK]], off + done)
        if k <= 0:
            raise CheckpointError("checkpoint: reading '%s' at offset %d (%d bytes): unexpected end of file"
                                  % (path, off + done, n - done))
        done += k
    return out


def read_small(path, limit):
    """The whole of the small regular file @path (open_regular), at most @limit bytes, as ck_read_small reads it;
    its size checked before a byte is read."""
    fd, size = _ckpt.open_regular(path)
    try:
        if size > limit:
            raise CheckpointError("checkpoint: '%s' is %d bytes, more than the %d this file may hold"
                                  % (path, size, limit))
        return bytes(_pread_all(fd, size, 0, path))
    finally:
        os.close(fd)


def _json_too_deep(text):
    """The index of the first '[' or '{' of @text (JSON) that nests deeper than jansson's limit (its strings
    skipped), else None."""
    if text.count("[") + text.count("{") <= _JSON_MAX_DEPTH:
        return None
    depth = 0
    for tok in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        c = tok.group()
        if c in "[{":
            depth += 1
            if depth > _JSON_MAX_DEPTH:
                return tok.start()
        elif c in "]}":
            depth -= 1
    return None


def _no_dups(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError("duplicate object key %s" % json.dumps(k)[:80])
        d[k] = v
    return d


def _no_constant(name):
    raise ValueError("invalid token '%s'" % name)  # NaN, Infinity: not JSON (jansson refuses them)


def load_manifest(mpath):
    """The manifest @mpath parsed as load_manifest (offload/checkpoint/load.c) parses it: a regular file of at most
    CKPT_MANIFEST_MAX bytes, UTF-8 JSON, no key twice, no NaN, nesting within jansson's depth. CheckpointError
    "checkpoint '<mpath>':LINE:COL: malformed JSON: ..." otherwise."""
    raw = read_small(mpath, CKPT_MANIFEST_MAX)

    def malformed(pos, why, col1=1):
        line = raw.count(b"\n", 0, pos) + 1
        col = pos - (raw.rfind(b"\n", 0, pos) + 1) + col1
        return CheckpointError("checkpoint '%s':%d:%d: malformed JSON: %s" % (mpath, line, col, why))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise malformed(e.start, "unable to decode byte 0x%02x" % raw[e.start], 0) from None
    if "\0" in text:
        raise malformed(raw.index(b"\0"), "\\u0000 is not allowed")
    deep = _json_too_deep(text)
    if deep is not None:
        raise malformed(len(text[:deep].encode("utf-8")), "maximum parsing depth reached")
    try:
        return json.loads(text, object_pairs_hook=_no_dups, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise CheckpointError("checkpoint '%s':%d:%d: malformed JSON: %s" % (mpath, e.lineno, e.colno, e.msg)) \
            from None
    except RecursionError:
        raise malformed(0, "maximum parsing depth reached") from None
    except ValueError as e:  # a key twice, NaN, an integer of too many digits
        raise malformed(0, _esc(str(e))) from None


def _resolve(checkpoint_dir, tag=None):
    """The checkpoint directory, as resolve_dir (offload/checkpoint/load.c) finds it: CHECKPOINT_DIR/TAG, or
    CHECKPOINT_DIR itself when manifest.json is there (whatever it is: reading it names it when it is not a regular
    file), else the one CHECKPOINT_DIR/latest names (_ckpt.read_latest: checked as the C library checks it)."""
    d = str(checkpoint_dir)
    if tag is not None:
        if not _ckpt.name_ok(str(tag)):
            raise CheckpointError("--tag %r does not name a checkpoint directory (a name is 1..255 bytes of printable "
                                  "ASCII without '/' or space, not starting with '.')" % (str(tag)[:96],))
        d = os.path.join(d, str(tag))
        if not os.path.lexists(os.path.join(d, "manifest.json")):
            raise CheckpointError("%s is not a checkpoint directory (no manifest.json)" % d)
        return d
    if os.path.lexists(os.path.join(d, "manifest.json")):
        return d
    if not os.path.lexists(os.path.join(d, "latest")):
        raise CheckpointError("checkpoint: '%s' holds neither manifest.json nor latest" % d)
    name = _ckpt.read_latest(d)
    return os.path.join(d, name)


def _get_range(bad, o, what, key, lo, hi):
    """get_range (offload/checkpoint/load.c): the integer o[key] in lo..hi, else an error naming what.key."""
    x = o.get(key)
    field = "%s.%s" % (what, key) if what else key
    if not _is_int(x):
        raise bad("%s: %s, expected an integer in %d..%d" % (field, "missing" if x is None else "not an integer",
                                                              lo, hi))
    if x < lo or x > hi:
        raise bad("%s: %d, expected %d..%d" % (field, x, lo, hi))
    return x


def _u64(o, key):
    """get_u64: o[key] when a non-negative integer jansson can hold, else None."""
    x = o.get(key) if isinstance(o, dict) else None
    return x if _is_int(x) and 0 <= x <= _INT64_MAX else None


def check_manifest(mpath, m, rank, world=None):
    """The manifest @m (of file @mpath, rank @rank) checked as check_manifest, check_scalars and check_entry
    (offload/checkpoint/load.c) check it, with what the converter takes from the manifest itself in place of the
    engine's registration: ([(name, shape, numel, shard_offset, shard_numel, [(kind, offset, nbytes, crc)])] in the
    manifest's order, world_size). CheckpointError "checkpoint '<mpath>': <field>: ..." at the first thing wrong."""
    def bad(msg):
        return CheckpointError("checkpoint '%s': %s" % (mpath, msg))
    if not isinstance(m, dict):
        raise bad("expected a JSON object")
    fmt = m.get("format")
    if fmt != CKPT_FORMAT:
        raise bad('format: "%s", expected "%s"' % (_esc(fmt if isinstance(fmt, str) else None), CKPT_FORMAT))
    fv = m.get("format_version")
    if not _is_int(fv) or fv != CKPT_FORMAT_VERSION:
        raise bad("format_version: this zoffload reads version %d" % CKPT_FORMAT_VERSION)
    ws = m.get("world_size")
    if world is None:
        world = _get_range(bad, m, "", "world_size", 1, _WORLD_MAX)
    elif not _is_int(ws) or ws != world:
        raise bad("world_size: saved with %d ranks, manifest.json says %d" % (ws if _is_int(ws) else -1, world))
    rank_file = "rank%05d.bin" % rank
    sd = m.get("state_dtype")
    if sd not in ("fp32", "bf16"):
        raise bad("state_dtype: saved as %s, expected fp32 or bf16 (zoffload.optimizer_state_dtype)"
                  % _esc(sd if isinstance(sd, str) else None))
    ts = m.get("tensors")
    if not isinstance(ts, list):
        raise bad("tensors: expected an array")
    # rank_files: the one file this rank's manifest describes, as zo_engine_save() writes it (nothing else is opened)
    rf = m.get("rank_files")
    if not (isinstance(rf, list) and len(rf) == 1 and rf[0] == rank_file):
        got = ("no array" if not isinstance(rf, list) else "%d entries" % len(rf) if len(rf) != 1 else
               "an entry that is not a string" if not isinstance(rf[0], str) else "'%s'" % _esc(rf[0]))
        raise bad('rank_files: expected ["%s"] (this rank\'s file), got %s' % (rank_file, got))
    out = _check_tensors(bad, ts, rank_file, sd)
    _get_range(bad, m, "", "step", 0, CKPT_MAX_STEP)
    ls = m.get("loss_scaler")
    if not isinstance(ls, dict):
        raise bad("loss_scaler: %s, expected an object" % ("missing" if ls is None else "not an object"))
    it = _get_range(bad, ls, "loss_scaler", "iter", 0, CKPT_MAX_STEP)
    _get_range(bad, ls, "loss_scaler", "last_overflow", -1, it)
    _get_range(bad, ls, "loss_scaler", "hysteresis", 0, 1 << 30)
    x = ls.get("loss_scale")
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        raise bad("loss_scaler.loss_scale: %s, expected a number" % ("missing" if x is None else "not a number"))
    if not (2.0 ** -64 <= x <= 2.0 ** 64):
        raise bad("loss_scaler.loss_scale: %g, expected %g..%g" % (x, 2.0 ** -64, 2.0 ** 64))
    _check_files(bad, m)
    return out, world


_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_FORMAT_NAME = re.compile(r"(manifest\.json|manifest-rank[0-9]{5}\.json|rank[0-9]{5}\.bin)\Z")


def _check_files(bad, m):
    """check_files (offload/checkpoint/load.c): the manifest's "files" (the caller's files of the save,
    zo_save_opts.files) absent, or at most 16 entries {name, nbytes 0..2^48, crc32c 8 hex digits}, each name once.
    The converter reads none of them (they hold no weights); their form is checked as the loader checks it."""
    fs = m.get("files")
    if fs is None:
        return
    if not isinstance(fs, list) or len(fs) > 16:
        raise bad("files: expected an array of at most 16 entries")
    seen = set()
    for i, f in enumerate(fs):
        f = f if isinstance(f, dict) else {}
        nm = f.get("name")
        if not isinstance(nm, str) or not _FILE_NAME.match(nm) or _FORMAT_NAME.match(nm):
            raise bad("files[%d].name: '%s', expected 1..64 bytes of [A-Za-z0-9_.-] (not the format's own names)"
                      % (i, _esc(nm) if isinstance(nm, str) else "(missing)"))
        if nm in seen:
            raise bad("files[%d].name: '%s' is listed twice" % (i, nm))
        seen.add(nm)
        crc = f.get("crc32c")
        if not (isinstance(crc, str) and re.fullmatch(r"[0-9a-fA-F]{8}", crc)):
            raise bad("files[%d].crc32c: '%s', expected 8 hex digits" % (i, _esc(crc) if isinstance(crc, str)
                                                                          else "(missing)"))
        _get_range(bad, f, "files[%d]" % i, "nbytes", 0, CKPT_MAX_STEP)


def _check_tensors(bad, ts, rank_file, sd):
    """check_entry (offload/checkpoint/load.c) for each entry of the manifest's "tensors" @ts."""
    if len(ts) > _TENSORS_MAX:
        raise bad("tensors: %d, more than the %d a checkpoint may list" % (len(ts), _TENSORS_MAX))
    out, seen = [], set()
    for j, t in enumerate(ts):
        nm = t.get("name") if isinstance(t, dict) else None
        if not isinstance(nm, str):
            raise bad("tensors[%d].name: missing or not a string" % j)
        if nm in seen:
            raise bad("tensors[%d].name: '%s' is listed twice" % (j, _esc(nm)))
        seen.add(nm)
        numel, so, sn = _u64(t, "numel"), _u64(t, "shard_offset"), _u64(t, "shard_numel")
        if numel is None or so is None or sn is None or so > numel or sn > numel - so:
            raise bad("tensor '%s': numel, shard_offset or shard_numel missing or malformed (%s, %s, %s: the shard "
                      "must lie within the tensor)" % (_esc(nm), _esc(t.get("numel"), 24),
                                                       _esc(t.get("shard_offset"), 24), _esc(t.get("shard_numel"), 24)))
        shape = t.get("shape")  # 1..8 dims >= 0 whose product (overflow-checked) is numel
        n = 1
        ok = isinstance(shape, list) and 1 <= len(shape) <= 8
        for dim in shape if ok else ():
            if not (_is_int(dim) and 0 <= dim <= _INT64_MAX):
                ok = False
                break
            n *= dim
            if n > _UINT64_MAX:  # overflow: not a shape of numel elements (numel <= INT64_MAX)
                break
        if not ok or n != numel:
            raise bad("tensor '%s': shape: expected 1 to 8 dimensions >= 0 whose product is numel %d"
                      % (_esc(nm), numel))
        f = t.get("file")
        if f != rank_file:
            raise bad("tensor '%s': file '%s', expected '%s' (this rank's)"
                      % (_esc(nm), _esc(f if isinstance(f, str) else None), rank_file))
        runs = []
        for k in _KINDS:
            r = t.get(k) if isinstance(t.get(k), dict) else {}
            crc, dt = r.get("crc32c"), r.get("dtype")
            if not (isinstance(crc, str) and _HEX8.match(crc)):
                raise bad("tensor '%s': %s.crc32c: '%s', expected 8 hex digits"
                          % (_esc(nm), k, _esc(crc if isinstance(crc, str) else None)))
            off, nb = _u64(r, "offset"), _u64(r, "nbytes")
            if off is None or nb is None or not isinstance(dt, str) or off > _UINT64_MAX - nb:
                raise bad("tensor '%s': %s: offset, nbytes or dtype missing or malformed" % (_esc(nm), k))
            want = "fp32" if k == "master" else sd
            if dt != want or nb != sn * _ESZ[want]:
                raise bad("tensor '%s': %s is %s, %d bytes; expected %s, %d bytes (shard_numel %d)"
                          % (_esc(nm), k, _esc(dt), nb, want, sn * _ESZ[want], sn))
            runs.append((k, off, nb, int(crc, 16)))
        out.append((nm, [int(d) for d in shape], numel, so, sn, runs))
    return out


def _manifests(d):
    """Every rank's manifest of checkpoint directory @d, read and checked (load_manifest, check_manifest):
    [(rank, manifest path, entries)]: manifest.json alone for one rank, else manifest-rankNNNNN.json for each of
    its world_size ranks (manifest.json, rank 0's copy, checked first: it gives world_size)."""
    mpath = os.path.join(d, "manifest.json")
    entries, world = check_manifest(mpath, load_manifest(mpath), 0)
    if world == 1:
        return [(0, mpath, entries)]
    out = []
    for r in range(world):
        mp = os.path.join(d, "manifest-rank%05d.json" % r)
        out.append((r, mp, check_manifest(mp, load_manifest(mp), r, world)[0]))
    return out


def _read_run(fd, off, nb, path):
    """@nb bytes of @fd at @off in reads of at most CKPT_CHUNK, and their CRC32C (zo_swap_crc32c, chained as
    ck_file_crc chains it)."""
    import ctypes
    out = bytearray(nb)
    view, done, crc = memoryview(out), 0, 0
    while done < nb:
        k = os.preadv(fd, [view[done:done + CKPT_CHUNK]], off + done)
        if k <= 0:
            raise CheckpointError("checkpoint: reading '%s' at offset %d (%d bytes): unexpected end of file"
                                  % (path, off + done, nb - done))
        crc = _lib.lib.zo_swap_crc32c(crc, (ctypes.c_char * k).from_buffer(out, done), k)
        done += k
    return out, crc


def get_fp32_state_dict_from_zoffload_checkpoint(checkpoint_dir, tag=None):
    """{name: fp32 tensor in its shape} of the checkpoint's master weights (what DeepSpeed's
    get_fp32_state_dict_from_zero_checkpoint gives), every rank's shards joined. Everything the manifests say is
    checked before memory is taken for the weights (check_manifest; every run inside its rank file; the ranks'
    shards of each tensor neither overlapping nor leaving a gap), each master shard's CRC32C before it is used.
    CheckpointError naming the file and the field of anything refused."""
    d = _resolve(checkpoint_dir, tag)
    ranks = _manifests(d)
    info, order, shards = {}, [], {}
    for rank, mpath, entries in ranks:
        for nm, shape, numel, so, sn, runs in entries:
            if nm not in info:
                info[nm] = (shape, numel, mpath)
                order.append(nm)
                shards[nm] = []
            elif info[nm][:2] != (shape, numel):
                raise CheckpointError("checkpoint '%s': tensor '%s': shape %s (%d elements), '%s' says %s (%d)"
                                      % (mpath, _esc(nm), shape, numel, info[nm][2], info[nm][0], info[nm][1]))
            shards[nm].append((so, sn, rank))
    for nm in order:  # each tensor's shards: every element once
        at = 0
        for so, sn, rank in sorted(shards[nm]):
            at = at + sn if so == at else -1  # a gap or an overlap: -1 from here on
        if at != info[nm][1]:
            raise CheckpointError("checkpoint '%s': tensor '%s': the ranks' shards (offset, elements, rank) %s do not "
                                  "cover its %d elements once each"
                                  % (info[nm][2], _esc(nm), sorted(shards[nm])[:8], info[nm][1]))
    opened = []
    try:
        for rank, mpath, entries in ranks:  # every run inside its file, before anything is read
            fpath = os.path.join(d, "rank%05d.bin" % rank)
            fd, fsize = _ckpt.open_regular(fpath)
            opened.append((fd, fpath))
            for nm, _, _, _, _, runs in entries:
                for k, off, nb, _ in runs:
                    if off + nb > fsize:
                        raise CheckpointError("checkpoint '%s': tensor '%s' %s at offset %d (%d bytes) ends past the "
                                              "end of '%s' (%d bytes)" % (mpath, _esc(nm), k, off, nb, fpath, fsize))
        full = {nm: torch.empty(info[nm][1], dtype=torch.float32) for nm in order}
        for (rank, mpath, entries), (fd, fpath) in zip(ranks, opened):
            for nm, _, _, so, sn, runs in entries:
                _, off, nb, want = runs[0]  # the master weights
                raw, crc = _read_run(fd, off, nb, fpath)
                if crc != want:
                    raise CheckpointError("checkpoint '%s': tensor '%s' master at offset %d (%d bytes): CRC32C %08x, "
                                          "the manifest says %08x" % (fpath, _esc(nm), off, nb, crc, want))
                if sn:
                    full[nm][so:so + sn] = torch.frombuffer(raw, dtype=torch.float32)
    finally:
        for fd, _ in opened:
            os.close(fd)
    return {nm: full[nm].view(info[nm][0]) for nm in order}


def convert_zoffload_checkpoint_to_fp32_state_dict(checkpoint_dir, output_file, tag=None, safe_serialization=False):
    """The consolidated fp32 state dict of the checkpoint to @output_file: torch.save, or safetensors when
    @safe_serialization. Returns the state dict."""
    from .ds_api import _write_atomic  # a fresh temporary file beside it; a link or device there is refused
    sd = get_fp32_state_dict_from_zoffload_checkpoint(checkpoint_dir, tag)
    if safe_serialization:
        from safetensors.torch import save
        _write_atomic(str(output_file),
                      lambda f: f.write(save({k: v.contiguous() for k, v in sd.items()}, metadata={"format": "pt"})))
    else:
        _write_atomic(str(output_file), lambda f: torch.save(sd, f))
    return sd


def main(argv=None):
    ap = argparse.ArgumentParser(prog="zoffload-zero-to-fp32",
                                 description="A zoffload checkpoint directory to one consolidated fp32 state dict "
                                             "(DeepSpeed's zero_to_fp32.py for zoffload checkpoints).")
    ap.add_argument("checkpoint_dir", help="engine.save_checkpoint()'s save_dir (or a checkpoint directory)")
    ap.add_argument("output_file", help="the fp32 state dict to write (torch.save, or safetensors with "
                                        "--safe_serialization)")
    ap.add_argument("-t", "--tag", default=None, help="the checkpoint's tag, e.g. global_step20 (default: latest)")
    ap.add_argument("--safe_serialization", action="store_true", help="write the safetensors format")
    a = ap.parse_args(argv)
    try:
        sd = convert_zoffload_checkpoint_to_fp32_state_dict(a.checkpoint_dir, a.output_file, a.tag,
                                                            a.safe_serialization)
    except (CheckpointError, OSError) as e:  # the file named (an OSError: writing the output, its name with it)
        print("zoffload-zero-to-fp32: %s" % e, file=sys.stderr)
        return 1
    except (MemoryError, RecursionError, ValueError, RuntimeError) as e:  # not expected after the checks: named
        print("zoffload-zero-to-fp32: %s: %s: %s" % (a.checkpoint_dir, type(e).__name__, str(e)[:300]),
              file=sys.stderr)
        return 1
    n = sum(v.numel() for v in sd.values())
    print("zoffload-zero-to-fp32: %d tensors, %d parameters -> %s" % (len(sd), n, a.output_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
