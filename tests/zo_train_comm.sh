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

# Stage 3 without offload_param on GPU ranks, planned by a dry run here (no GPU): each rank's blocks of the
# parameters in device memory, 1/N of one rank's (over "mpi" the device block is exactly those blocks; over "auto"
# with NCCL built, the block also holds the reduction ring and the gather ring, and NCCL's staging is planned).
mk3() {
  /usr/bin/python3 - "$cfg" "$1" "$2" <<'PY'
import json, sys
src, dst, comm = sys.argv[1:4]
c = json.load(open(src))
c.pop("train_batch_size", None)
z = c["zero_optimization"]
z["stage"] = 3
z.pop("offload_param", None)
c.setdefault("zoffload", {}).update(device="cuda", comm=comm)
json.dump(c, open(dst, "w"))
PY
}
dry=(--dry-run --device cuda --device-memory-limit 80000000000)
block() { awk '$1 == "device" && $2 == "device_block" {print $5}' "$1" | head -1; }
mk3 "$work/z3mpi.json" mpi
mk3 "$work/z3auto.json" auto
timeout -k 10 60 "$zo" --config "$work/z3mpi.json" "${dry[@]}" >"$work/z3one.out" 2>&1 \
  || { cat "$work/z3one.out"; fail "stage 3 dry run on one rank"; }
timeout -k 10 120 "${mpirun[@]}" -np 2 "$zo" --config "$work/z3mpi.json" "${dry[@]}" >"$work/z3mpi.out" 2>&1 \
  || { cat "$work/z3mpi.out"; fail "stage 3, offload_param none, 2 ranks (mpi): the dry run refused"; }
one=$(block "$work/z3one.out") two=$(block "$work/z3mpi.out")
[ -n "$one" ] && [ -n "$two" ] || { cat "$work/z3one.out" "$work/z3mpi.out"; fail "no device_block line"; }
# 1/2 of the parameters: each tensor's block padded to 2 ranks; one rank rounds each tensor's region to 256 bytes,
# the blocks are packed (so a little under half is right, and 40% would be wrong)
[ "$two" -le $((one / 2 + 8192)) ] && [ "$two" -ge $((one * 4 / 10)) ] \
  || fail "stage 3 on 2 GPU ranks (mpi): device_block $two B, one rank $one B: not half"
echo "ok   stage 3, offload_param none, 2 GPU ranks planned (mpi): device_block $two B a rank, one rank $one B"
timeout -k 10 120 "${mpirun[@]}" -np 2 "$zo" --config "$work/z3auto.json" "${dry[@]}" >"$work/z3auto.out" 2>&1 \
  || { cat "$work/z3auto.out"; fail "stage 3, offload_param none, 2 ranks (auto): the dry run refused"; }
grep -q 'dry run: the configuration fits' "$work/z3auto.out" || { cat "$work/z3auto.out"; fail "no fit line"; }
if grep -q '^device  *comm_staging' "$work/z3auto.out"; then # built with NCCL: collectives in device memory
  grep -q '^host  *dp_land' "$work/z3auto.out" && ! grep -q '^host  *pg_ring' "$work/z3auto.out" \
    || { cat "$work/z3auto.out"; fail "stage 3 over NCCL: the rings are not planned in device memory"; }
  echo "ok   stage 3, offload_param none, 2 GPU ranks planned (nccl): device_block $(block "$work/z3auto.out") B" \
    "(the rank's blocks and both rings), $(grep -c '^device  *comm_staging' "$work/z3auto.out") staging line"
fi
echo "PASS"
