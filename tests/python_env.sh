# python_env.sh - sourced by the tests that run python/tests/ programs on several ranks (python_mpi.sh,
# python_mpi_zero.sh, python_torchrun.sh):  . python_env.sh MODULE PREFIX LIBZOFFLOAD SOURCE_DIR [MPIRUN...]
# Sets lib, src, mpirun (an array, empty without MPIRUN) and py (/usr/bin/python3: the python3 on PATH has no
# torch); exits 77 when py cannot import MODULE; makes a work directory "$work" (TMPDIR/PREFIX.XXXXXX, removed on
# exit) with the swap directory ZO_TEST_NVME in it; exports ZOFFLOAD_LIBRARY and PYTHONPATH. Defines
# on_two_ranks PROGRAM ARGS...: py PROGRAM under mpirun -np 2 with those variables passed on.
py_module=$1 work_prefix=$2 lib=$3 src=$4
shift 4
mpirun=("$@")
py=/usr/bin/python3
"$py" -c "import $py_module" 2>/dev/null || { echo "skip: /usr/bin/python3 lacks $py_module"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/$work_prefix.XXXXXX")
trap 'rm -rf "$work"' EXIT
export ZOFFLOAD_LIBRARY=$lib PYTHONPATH=$src/python
export ZO_TEST_NVME=$work/nvme
mkdir -p "$ZO_TEST_NVME"

on_two_ranks() {
  "${mpirun[@]}" -np 2 -x ZOFFLOAD_LIBRARY -x PYTHONPATH -x ZO_TEST_NVME "$py" "$@"
}
