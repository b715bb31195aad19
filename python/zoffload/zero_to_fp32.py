"""zoffload-zero-to-fp32: DeepSpeed's zero_to_fp32.py for zoffload checkpoints. Reads a checkpoint directory (the
manifests and rankNNNNN.bin shard files of zo_engine_save, docs/checkpoints.md) with no engine and no GPU, joins
every tensor's fp32 master shards, and writes a consolidated fp32 state dict (torch.save) or a safetensors file.
Not a reader of DeepSpeed's own checkpoint format.

    python -m zoffload.zero_to_fp32 CHECKPOINT_DIR OUTPUT_FILE [--tag TAG] [--safe_serialization]

CHECKPOINT_DIR is the save_dir of engine.save_checkpoint() (its `latest` names the tag unless --tag is given) or a
checkpoint directory itself. Every master shard's CRC32C is checked (zo_swap_crc32c) before it is used.
"""
import argparse
import json
import os
import sys

import torch

from . import _ckpt, _lib
from ._ckpt import CheckpointError  # a checkpoint that cannot be read: the file and the field named


def _resolve(checkpoint_dir, tag=None):
    """The checkpoint directory: CHECKPOINT_DIR/TAG, CHECKPOINT_DIR itself when it holds manifest.json, else the one
    CHECKPOINT_DIR/latest names."""
    d = str(checkpoint_dir)
    if tag is not None:
        d = os.path.join(d, str(tag))
    elif not os.path.isfile(os.path.join(d, "manifest.json")):
        name = _ckpt.read_latest(d)  # checked as offload/checkpoint.c checks it
        if name is None:
            raise CheckpointError("%s holds neither manifest.json nor latest; pass --tag" % d)
        d = os.path.join(d, name)
    if not os.path.isfile(os.path.join(d, "manifest.json")):
        raise CheckpointError("%s is not a checkpoint directory (no manifest.json)" % d)
    return d


def _manifests(d):
    """Every rank's manifest of checkpoint directory @d: manifest.json alone for one rank, else
    manifest-rankNNNNN.json for each of its world_size ranks."""
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)
    world = m.get("world_size")
    if not isinstance(world, int) or world < 1:
        raise CheckpointError("%s/manifest.json: world_size %r" % (d, world))
    if world == 1:
        return [("manifest.json", m)]
    out = []
    for r in range(world):
        name = "manifest-rank%05d.json" % r
        with open(os.path.join(d, name)) as f:
            out.append((name, json.load(f)))
    return out


def get_fp32_state_dict_from_zoffload_checkpoint(checkpoint_dir, tag=None):
    """{name: fp32 tensor in its shape} of the checkpoint's master weights (what DeepSpeed's
    get_fp32_state_dict_from_zero_checkpoint gives), every rank's shards joined. CheckpointError naming the file
    and field of anything inconsistent (a shard outside its tensor, a short file, a CRC32C mismatch, a gap)."""
    d = _resolve(checkpoint_dir, tag)
    full, filled, shapes, order = {}, {}, {}, []
    for mname, m in _manifests(d):
        for t in m.get("tensors", []):
            name, numel = t.get("name"), t.get("numel")
            off, cnt, rm = t.get("shard_offset"), t.get("shard_numel"), t.get("master") or {}
            if not isinstance(name, str) or not isinstance(numel, int) or numel < 0:
                raise CheckpointError("%s/%s: a tensor without name or numel: %r" % (d, mname, t))
            if name not in full:
                full[name] = torch.empty(numel, dtype=torch.float32)
                filled[name] = 0
                shapes[name] = [int(x) for x in t.get("shape", [numel])]
                order.append(name)
            if not (isinstance(off, int) and isinstance(cnt, int) and 0 <= off and off + cnt <= numel):
                raise CheckpointError("%s/%s: tensor '%s': shard [%r, +%r) outside its %d elements"
                                      % (d, mname, name, off, cnt, numel))
            if rm.get("dtype") != "fp32" or rm.get("nbytes") != cnt * 4:
                raise CheckpointError("%s/%s: tensor '%s': master is %r of %r bytes, expected fp32 of %d"
                                      % (d, mname, name, rm.get("dtype"), rm.get("nbytes"), cnt * 4))
            fname = t.get("file", "")
            if "/" in fname or fname.startswith("."):
                raise CheckpointError("%s/%s: tensor '%s': file %r" % (d, mname, name, fname))
            path = os.path.join(d, fname)
            with open(path, "rb") as f:
                f.seek(int(rm.get("offset", 0)))
                raw = f.read(cnt * 4)
            if len(raw) != cnt * 4:
                raise CheckpointError("%s: tensor '%s': %d bytes at offset %s, the file ends after %d"
                                      % (path, name, cnt * 4, rm.get("offset"), len(raw)))
            crc = "%08x" % _lib.lib.zo_swap_crc32c(0, raw, len(raw))
            if crc != rm.get("crc32c"):
                raise CheckpointError("%s: tensor '%s': master at offset %s: CRC32C %s, the manifest says %s"
                                      % (path, name, rm.get("offset"), crc, rm.get("crc32c")))
            if cnt:
                full[name][off:off + cnt] = torch.frombuffer(bytearray(raw), dtype=torch.float32)
            filled[name] += cnt
    out = {}
    for name in order:
        if filled[name] != full[name].numel():
            raise CheckpointError("%s: tensor '%s': the ranks' shards cover %d of its %d elements"
                                  % (d, name, filled[name], full[name].numel()))
        out[name] = full[name].view(shapes[name]) if shapes[name] else full[name]
    return out


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
    except (CheckpointError, OSError, json.JSONDecodeError) as e:
        print("zoffload-zero-to-fp32: %s" % e, file=sys.stderr)
        return 1
    n = sum(v.numel() for v in sd.values())
    print("zoffload-zero-to-fp32: %d tensors, %d parameters -> %s" % (len(sd), n, a.output_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
