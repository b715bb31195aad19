#!/usr/bin/env bash
# python_mpi_zero.sh LIBZOFFLOAD SOURCE_DIR MPIRUN... - zoffload.zero on two ranks under mpirun (python/tests/mpi_zero.py:
# a zero.Init model trained at stage 3, GatheredParameters written back from the last rank, the consolidated
# 16-bit state dict gathered on rank 0) gives the file one rank gives, to the last bit, with the parameters on
# cpu, on nvme and in device memory (no offload_param). Exit 77 without torch.
set -u
. "$(dirname "$0")/python_env.sh" torch zo-pyzero "$@" # lib, src, mpirun, py, $work, on_two_ranks
for tier in cpu nvme device; do
  "$py" "$src/python/tests/mpi_zero.py" "$tier" "$work/one" >"$work/one.out" 2>&1 \
    || { tail -20 "$work/one.out"; echo "FAIL: $tier on one rank"; exit 1; }
  on_two_ranks "$src/python/tests/mpi_zero.py" "$tier" "$work/two" >"$work/two.out" 2>&1 \
    || { tail -20 "$work/two.out"; echo "FAIL: $tier on two ranks"; exit 1; }
  cmp -s "$work/one" "$work/two" || { paste "$work/one" "$work/two"; echo "FAIL: $tier: one and two ranks differ"; exit 1; }
  echo "ok   zoffload.zero on 2 ranks ($tier): losses, the written-back row and the state dict's sum equal one rank's"
  paste "$work/one" "$work/two"
done
echo PASS
