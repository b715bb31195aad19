#!/usr/bin/env bash
# zo_train_safetensors.sh ZO_TRAIN CONFIG CORPUS - zo-train --export-safetensors as the ecosystem
# reads it: after 10 steps the fp32 export and a bf16 export (from the saved checkpoint) are loaded
# with the safetensors package into PyTorch (safetensors.torch.load_file, /usr/bin/python3 with
# Debian's python3-torch) and every tensor compared: names and shapes as zo-train names them, fp32
# values bit for bit those of the checkpoint's master weights (read from its manifest offsets with
# numpy), bf16 values equal to torch's round-to-nearest-even of the fp32 ones.
# Exit 0 pass, 1 fail, 77 when the Python packages are missing.
set -u
zo=$1 cfg=$2 corpus=$3
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-safetensors.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$py" -c "import safetensors.torch, torch, numpy" 2>/dev/null \
  || { echo "skip: $py lacks safetensors, torch or numpy (scripts/deps.sh installs them)"; exit 77; }
"$zo" --config "$cfg" --data "$corpus" --threads 2 --no-sample --steps 10 --save "$work/ckpt" \
      --export-safetensors "$work/w32.safetensors" >"$work/a.out" 2>&1 || { cat "$work/a.out"; fail "training run"; }
"$zo" --config "$cfg" --data "$corpus" --threads 2 --no-sample --steps 10 --resume "$work/ckpt" \
      --export-safetensors "$work/w16.safetensors" --export-dtype bf16 >"$work/b.out" 2>&1 \
  || { cat "$work/b.out"; fail "bf16 export from the checkpoint"; }
"$py" - "$work/w32.safetensors" "$work/w16.safetensors" "$work/ckpt" <<'PY' || fail "the safetensors files do not match"
import json, os, sys
import numpy as np, torch
from safetensors.torch import load_file
w32, w16, root = sys.argv[1:4]
t32, t16 = load_file(w32), load_file(w16)
ck = os.path.join(root, open(os.path.join(root, "latest")).read().strip())
man = json.load(open(os.path.join(ck, "manifest.json")))
names = [t["name"] for t in man["tensors"]]
assert list(t32) != [] and set(t32) == set(names) == set(t16), "tensor names differ"
C = t32["wte"].shape[1]
want = {"h.0.attn.c_attn.weight": (3 * C, C), "h.0.mlp.c_proj.weight": (C, 4 * C), "ln_f.bias": (C,)}
for n, s in want.items():
    assert tuple(t32[n].shape) == s, f"{n}: shape {tuple(t32[n].shape)}, expected {s}"
bad = 0
for t in man["tensors"]:
    n, shape, m = t["name"], tuple(t["shape"]), t["master"]
    with open(os.path.join(ck, t["file"]), "rb") as f:
        f.seek(m["offset"])
        master = np.frombuffer(f.read(m["nbytes"]), dtype="<f4").reshape(shape)
    a, b = t32[n], t16[n]
    ok = (a.dtype == torch.float32 and b.dtype == torch.bfloat16 and tuple(a.shape) == shape == tuple(b.shape)
          and torch.equal(a, torch.from_numpy(master.copy())) and torch.equal(b, a.to(torch.bfloat16)))
    if not ok:
        bad += 1
        print(f"mismatch in {n}: {a.dtype} {tuple(a.shape)} / {b.dtype} {tuple(b.shape)}, manifest {shape}")
total = sum(t["numel"] for t in man["tensors"])
print(f"{len(names)} tensors, {total} parameters: fp32 equal to the checkpoint's master weights, "
      f"bf16 equal to torch's rounding of them; {bad} mismatches")
sys.exit(1 if bad else 0)
PY
echo PASS
