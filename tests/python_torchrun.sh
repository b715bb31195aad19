#!/usr/bin/env bash
# python_torchrun.sh LIBZOFFLOAD SOURCE_DIR [MPIRUN...] - zoffload.initialize on two ranks started by torchrun
# (python -m torch.distributed.run --nproc_per_node 2: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT, no MPI),
# on CPU over torch.distributed's gloo through libzoffload's `external` communicator (zoffload/comm.py), logs the
# same losses, to the last bit, as mpirun -np 2 (when MPIRUN is given) and as one rank accumulating the two
# halves, at stage 2 (state on cpu) and stage 3 (parameters and state on nvme): python/tests/mpi_train.py, as
# tests/python_mpi.sh runs it. Exit 77 without torch or torch.distributed.run.
set -u
. "$(dirname "$0")/python_env.sh" torch.distributed.run zo-pytorchrun "$@" # lib, src, mpirun, py, $work, on_two_ranks
# A free port for the rendezvous (torchrun's rank 0 listens on it); the kernel picks one.
port=$("$py" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
# --redirects 2 --tee 2: Debian's torch 1.13 under Python 3.11 parses the default "0" to None (enum.Flag iteration
# changed) and fails in to_map(); stderr through a log file and tee'd back is what the default does otherwise.
torchrun=("$py" -m torch.distributed.run --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$port"
          --redirects 2 --tee 2 --log_dir "$work/logs")
for sc in "2 cpu" "3 nvme"; do
  set -- $sc
  rm -rf "$work/logs"
  "$py" "$src/python/tests/mpi_train.py" "$1" "$2" "$work/one" >"$work/one.out" 2>&1 \
    || { tail -20 "$work/one.out"; echo "FAIL: stage $1 $2 on one rank"; exit 1; }
  OMP_NUM_THREADS=1 "${torchrun[@]}" "$src/python/tests/mpi_train.py" "$1" "$2" "$work/tr" >"$work/tr.out" 2>&1 \
    || { tail -30 "$work/tr.out"; echo "FAIL: stage $1 $2 under torchrun"; exit 1; }
  grep -q "zoffload.initialize: ranks\|Traceback" "$work/tr.out" && { tail -30 "$work/tr.out"; echo "FAIL: stage $1 $2: errors under torchrun"; exit 1; }
  cmp -s "$work/one" "$work/tr" || { paste "$work/one" "$work/tr"; echo "FAIL: stage $1 $2: torchrun's losses differ from one rank's"; exit 1; }
  if [ ${#mpirun[@]} -gt 0 ]; then
    on_two_ranks "$src/python/tests/mpi_train.py" "$1" "$2" "$work/mpi" >"$work/mpi.out" 2>&1 \
      || { tail -20 "$work/mpi.out"; echo "FAIL: stage $1 $2 under mpirun"; exit 1; }
    cmp -s "$work/mpi" "$work/tr" || { paste "$work/mpi" "$work/tr"; echo "FAIL: stage $1 $2: torchrun's losses differ from mpirun's"; exit 1; }
    also=" and mpirun -np 2's"
  else
    also=" (no mpirun in this build: compared with one rank only)"
  fi
  [ -z "$(ls -A "$ZO_TEST_NVME")" ] || { echo "FAIL: swap files left: $(ls -A "$ZO_TEST_NVME")"; exit 1; }
  echo "ok   torchrun --nproc_per_node 2, stage $1 ($2): $(wc -l <"$work/tr") losses identical to one rank's$also"
done
echo PASS
