#!/usr/bin/env bash
# python_installed.sh SOURCE_DIR WORK_DIR - the Python package as pip installs it (issue 33), not as the other
# tests load it (PYTHONPATH=python, ZOFFLOAD_LIBRARY=build/libzoffload.so):
#   1. `pip wheel SOURCE_DIR`: pyproject.toml's backend (scikit-build-core) builds libzoffload with this project's
#      CMake and puts it inside the package; WORK_DIR/pip-build keeps its build tree, so a rerun is incremental;
#   2. a fresh venv from Debian's python3 (--system-site-packages: its torch), the wheel installed into it;
#   3. the tool commands it puts on PATH (zo-report, zo-swapbench, ...) run the programs it carries;
#   4. from WORK_DIR, with ZOFFLOAD_LIBRARY, LD_LIBRARY_PATH and PYTHONPATH unset: python/tests/installed_smoke.py
#      (one initialize/backward/step; every libzoffload the process mapped lies inside the venv, none in the
#      checkout), then one file of the Python suite against the installed package (pytest --import-mode=importlib
#      puts nothing of the checkout on sys.path; the test asserts where zoffload came from).
# Exit 0 pass, 1 fail, 77 skip: python3 lacks torch, pytest or venv, or pip cannot fetch the build backend (no
# package registry), said on stdout.
set -u
src=$(cd "$1" && pwd) work=$2
py=/usr/bin/python3
"$py" -c "import torch, pytest, venv" 2>/dev/null || { echo "skip: $py lacks torch, pytest or venv"; exit 77; }
unset ZOFFLOAD_LIBRARY LD_LIBRARY_PATH PYTHONPATH GLIBC_TUNABLES LD_PRELOAD
mkdir -p "$work" && work=$(cd "$work" && pwd)
rm -rf "$work/venv" "$work/wheels" "$work/run"
mkdir -p "$work/wheels" "$work/run"
"$py" -m venv --system-site-packages "$work/venv" || exit 1
vpy=$work/venv/bin/python
# The backend comes from the package registry (pip's build isolation); without one there is nothing to test.
if ! "$vpy" -m pip download -q --no-deps -d "$work/wheels/backend" "scikit-build-core>=0.10" >/dev/null 2>&1; then
  echo "skip: pip cannot fetch scikit-build-core (no package registry reachable)"
  exit 77
fi
t0=$(date +%s)
if ! "$vpy" -m pip wheel -q --no-deps -w "$work/wheels" --config-settings build-dir="$work/pip-build" "$src"; then
  echo "FAIL: pip wheel $src"
  exit 1
fi
whl=$(ls "$work"/wheels/zoffload-*.whl)
echo "built $(basename "$whl") in $(( $(date +%s) - t0 )) s: $(du -k "$whl" | cut -f1) KiB"
"$vpy" -m zipfile -l "$whl" | grep -q "zoffload/libzoffload.so" || { echo "FAIL: $whl holds no zoffload/libzoffload.so"; exit 1; }
"$vpy" -m pip install -q --no-deps "$whl" || { echo "FAIL: pip install $whl"; exit 1; }
cd "$work/run" || exit 1
# the tool commands the wheel puts on PATH run the programs it carries (none of the checkout's build tree)
for t in zo-report zo-swapbench zo-adambench zo-stepbench zo-arenabench; do
  [ -x "$work/venv/bin/$t" ] || { echo "FAIL: the wheel put no $t command on PATH"; exit 1; }
done
PATH=$work/venv/bin:/usr/bin:/bin zo-report >"$work/run/report.txt" 2>&1 ||
  { echo "FAIL: zo-report from the wheel"; cat "$work/run/report.txt"; exit 1; }
grep -q "^  version  *0\.1\.0" "$work/run/report.txt" || { echo "FAIL: zo-report printed no version"; exit 1; }
PATH=$work/venv/bin:/usr/bin:/bin zo-swapbench --no-such-flag >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: zo-swapbench's exit status for a bad flag is not its own (2)"; exit 1; }
mkdir -p "$work/run/swap"
PATH=$work/venv/bin:/usr/bin:/bin zo-swapbench --path "$work/run/swap" --quick --no-fio --ops read \
  --block-sizes 128K --queue-depths 1 >"$work/run/swap.txt" 2>&1 ||
  { echo "FAIL: zo-swapbench from the wheel"; cat "$work/run/swap.txt"; exit 1; }
echo "the wheel's zo-report and zo-swapbench ran: $(grep -c . "$work/run/swap.txt") lines from zo-swapbench"
"$vpy" "$src/python/tests/installed_smoke.py" "$src" || exit 1
ZO_EXPECT_INSTALLED=$work/venv "$vpy" -m pytest -q -p no:cacheprovider --import-mode=importlib \
  "$src/python/tests/test_engine_lifetime.py" || exit 1
