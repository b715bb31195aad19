#!/usr/bin/env bash
# torch2-env.sh DIR - make (or reuse) a Python venv at DIR with the package registry's current torch 2.x and the
# libraries DeepSpeed users run beside it (torchvision, deepspeed, transformers, accelerate), and install this
# checkout's package into it as a user would (`pip install .`: the library built by pyproject.toml's backend, inside
# the package). The torch2 tests still import python/ and build/libzoffload.so (PYTHONPATH, ZOFFLOAD_LIBRARY), so
# they test the checkout as it is.
#
# About 6 GB of downloads the first time (torch's CUDA wheels and NVIDIA's libraries), so the default test command
# never runs this; the `torch2` ctest label runs the Python suite in the venv when ZO_TORCH2_VENV names one (see
# README.md) and skips (77) otherwise. Idempotent: a package already installed is left as it is (`pip install`
# without --upgrade); a second run downloads nothing and takes seconds. Prints what the venv holds at the end.
#
# Environment: ZO_TORCH2_PYTHON, the interpreter the venv is made from (default /usr/bin/python3: Debian's, whose
# version the registry's wheels cover); ZO_TORCH2_PACKAGES, the package list (default below).
# DeepSpeed runs here on the CPU (DS_ACCELERATOR=cpu) and compiles its ops at first use; its NVMe op (async_io)
# wants libaio-dev, installed here with apt-get when missing (as root; else the line to run is printed).
set -euo pipefail
[ $# -eq 1 ] && [ "$1" != -h ] && [ "$1" != --help ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
venv=$1
cd "$(dirname "$0")/.."
root=$PWD
py=${ZO_TORCH2_PYTHON:-/usr/bin/python3}
pkgs=${ZO_TORCH2_PACKAGES:-"torch torchvision deepspeed transformers accelerate safetensors pytest numpy"}
if ! dpkg -s libaio-dev >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libaio-dev >/dev/null
  else
    echo "torch2-env: DeepSpeed's NVMe offload needs libaio-dev: sudo apt-get install libaio-dev" >&2
  fi
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "torch2-env: making a venv at $venv from $py"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
# shellcheck disable=SC2086
"$venv/bin/python" -m pip install --quiet $pkgs
"$venv/bin/python" -m pip install --quiet --no-deps "$root"
# An earlier version of this script pointed the venv's activate at build/libzoffload.so; the package carries its own
# library now: drop that line (and only it, found by the comment it wrote above it).
if grep -q '^# torch2-env.sh: the library scripts/build.sh built$' "$venv/bin/activate"; then
  sed -i '/^# torch2-env.sh: the library scripts\/build.sh built$/{N;/\nexport ZOFFLOAD_LIBRARY=/d}' "$venv/bin/activate"
fi
echo "torch2-env: $venv"
(cd / && env -u ZOFFLOAD_LIBRARY -u PYTHONPATH "$venv/bin/python" - <<'EOF'
import importlib.metadata as md
for name in ("torch", "torchvision", "deepspeed", "transformers", "accelerate", "zoffload"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name}: not installed")
import torch, zoffload
print(f"  torch {torch.__version__} imports beside zoffload (cuda built: {torch.version.cuda})")
print(f"  zoffload {zoffload.__file__}, library {zoffload.__library__}")
EOF
)
