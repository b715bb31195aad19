#!/usr/bin/env bash
# zo_train_comm.sh ZO_TRAIN CONFIG CORPUS MPIRUN... - zoffload.comm under `mpirun -np 2` on the host device:
#  - "nccl" where the device is not CUDA ends the job with one error naming the key (no silent run over MPI);
#  - "mpi" trains, saying "collectives: mpi over 2 ranks";
#  - a name outside "auto" | "nccl" | "mpi" is refused at parse time naming the key.
# (A failed NCCL start on GPUs is an error too; that needs two GPUs and is left to the gpu tests.) Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
shift 3
mpirun=("$@")
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-comm.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# mk DST COMM: the test config on the host device with zoffload.comm COMM
mk() {
  /usr/bin/python3 - "$cfg" "$1" "$2" <<'PY'
import json, sys
src, dst, comm = sys.argv[1:4]
c = json.load(open(src))
c.setdefault("zoffload", {}).update(device="host", comm=comm)
json.dump(c, open(dst, "w"))
PY
}
args=(--data "$corpus" --threads 1 --no-sample --steps 2)

mk "$work/nccl.json" nccl
timeout -k 10 120 "${mpirun[@]}" -np 2 "$zo" --config "$work/nccl.json" "${args[@]}" >"$work/nccl.out" 2>&1 \
  && { cat "$work/nccl.out"; fail "zoffload.comm nccl on the host device ran"; }
grep -q 'zo-train: error: zoffload.comm is "nccl", but the device is not CUDA' "$work/nccl.out" \
  || { cat "$work/nccl.out"; fail "zoffload.comm nccl on the host device: no error naming the key"; }
echo "ok   nccl on host: $(grep -m1 'zo-train: error:' "$work/nccl.out")"

mk "$work/mpi.json" mpi
timeout -k 10 120 "${mpirun[@]}" -np 2 "$zo" --config "$work/mpi.json" "${args[@]}" >"$work/mpi.out" 2>&1 \
  || { tail -20 "$work/mpi.out"; fail "zoffload.comm mpi exited non-zero"; }
grep -q 'zo-train: collectives: mpi over 2 ranks' "$work/mpi.out" \
  || { cat "$work/mpi.out"; fail "zoffload.comm mpi: no 'collectives: mpi over 2 ranks' line"; }
echo "ok   mpi: $(grep -m1 'collectives:' "$work/mpi.out")"

mk "$work/bad.json" gloo
timeout -k 10 60 "$zo" --config "$work/bad.json" "${args[@]}" >"$work/bad.out" 2>&1 \
  && { cat "$work/bad.out"; fail "zoffload.comm gloo ran"; }
grep -q 'zoffload.comm: expected "auto", "nccl" or "mpi", got "gloo"' "$work/bad.out" \
  || { cat "$work/bad.out"; fail "zoffload.comm gloo: no error naming the key and the choices"; }
echo "ok   gloo: $(grep -m1 'error' "$work/bad.out")"
