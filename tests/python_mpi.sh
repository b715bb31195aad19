#!/usr/bin/env bash
# python_mpi.sh LIBZOFFLOAD SOURCE_DIR MPIRUN... - zoffload.initialize on two ranks under mpirun (data parallel,
# each rank on half of every global batch) logs the losses of one rank accumulating the same two halves, to the
# last bit (fp32, no clipping; the reasoning is zo_train_mpi.sh's), at stage 2 (state on cpu) and stage 3
# (parameters and state on nvme); save_16bit_model and zoffload-zero-to-fp32's reading of a two-rank checkpoint
# give the one rank's weights too (digests in the same files); ranks seeded differently hold rank 0's model
# (trained and frozen parameters, buffers) after initialize. Exit 77 without torch.
set -u
. "$(dirname "$0")/python_env.sh" torch zo-pympi "$@" # lib, src, mpirun, py, $work, on_two_ranks
for sc in "2 cpu" "3 nvme"; do
  set -- $sc
  "$py" "$src/python/tests/mpi_train.py" "$1" "$2" "$work/one" >"$work/one.out" 2>&1 \
    || { tail -20 "$work/one.out"; echo "FAIL: stage $1 $2 on one rank"; exit 1; }
  on_two_ranks "$src/python/tests/mpi_train.py" "$1" "$2" "$work/two" >"$work/two.out" 2>&1 \
    || { tail -20 "$work/two.out"; echo "FAIL: stage $1 $2 on two ranks"; exit 1; }
  cmp -s "$work/one" "$work/two" || { paste "$work/one" "$work/two"; echo "FAIL: stage $1 $2: losses differ"; exit 1; }
  [ -z "$(ls -A "$ZO_TEST_NVME")" ] || { echo "FAIL: swap files left: $(ls -A "$ZO_TEST_NVME")"; exit 1; }
  rm -rf "$work"/one.ckpt "$work"/one.16bit "$work"/two.ckpt "$work"/two.16bit
  echo "ok   zoffload.initialize on 2 ranks, stage $1 ($2): $(grep -vc ' ' "$work/two") losses, the 16-bit model and the zero_to_fp32 weights identical to one rank's"
done
# Ranks that built their models from different seeds train one model: rank 0's (frozen parameters and buffers too)
for sc in "2 cpu" "3 nvme"; do
  set -- $sc
  on_two_ranks "$src/python/tests/mpi_broadcast.py" "$1" "$2" >"$work/bc.out" 2>&1 \
    || { tail -20 "$work/bc.out"; echo "FAIL: stage $1 $2: the ranks' models differ after initialize"; exit 1; }
  grep '^ok' "$work/bc.out"
done
echo PASS
