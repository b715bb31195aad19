#!/usr/bin/env bash
# python_mpi.sh LIBZOFFLOAD SOURCE_DIR MPIRUN... - zoffload.initialize on two ranks under mpirun (data parallel,
# each rank on half of every global batch) logs the losses of one rank accumulating the same two halves, to the
# last bit (fp32, no clipping; the reasoning is zo_train_mpi.sh's), at stage 2 (state on cpu) and stage 3
# (parameters and state on nvme); save_16bit_model and zoffload-zero-to-fp32's reading of a two-rank checkpoint
# give the one rank's weights too (digests in the same files). Exit 77 without torch.
set -u
lib=$1 src=$2
shift 2
mpirun=("$@")
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || { echo "skip: /usr/bin/python3 lacks torch"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-pympi.XXXXXX")
trap 'rm -rf "$work"' EXIT
export ZOFFLOAD_LIBRARY=$lib PYTHONPATH=$src/python
export ZO_TEST_NVME=$work/nvme
mkdir -p "$ZO_TEST_NVME"
for sc in "2 cpu" "3 nvme"; do
  set -- $sc
  "$py" "$src/python/tests/mpi_train.py" "$1" "$2" "$work/one" >"$work/one.out" 2>&1 \
    || { tail -20 "$work/one.out"; echo "FAIL: stage $1 $2 on one rank"; exit 1; }
  "${mpirun[@]}" -np 2 -x ZOFFLOAD_LIBRARY -x PYTHONPATH -x ZO_TEST_NVME \
    "$py" "$src/python/tests/mpi_train.py" "$1" "$2" "$work/two" >"$work/two.out" 2>&1 \
    || { tail -20 "$work/two.out"; echo "FAIL: stage $1 $2 on two ranks"; exit 1; }
  cmp -s "$work/one" "$work/two" || { paste "$work/one" "$work/two"; echo "FAIL: stage $1 $2: losses differ"; exit 1; }
  [ -z "$(ls -A "$ZO_TEST_NVME")" ] || { echo "FAIL: swap files left: $(ls -A "$ZO_TEST_NVME")"; exit 1; }
  rm -rf "$work"/one.ckpt "$work"/one.16bit "$work"/two.ckpt "$work"/two.16bit
  echo "ok   zoffload.initialize on 2 ranks, stage $1 ($2): $(grep -vc ' ' "$work/two") losses, the 16-bit model and the zero_to_fp32 weights identical to one rank's"
done
echo PASS
