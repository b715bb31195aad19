#!/usr/bin/env bash
# deps.sh - the Debian packages zoffload builds and runs with.
#   bash scripts/deps.sh                 install the missing ones with apt-get (as root); run by
#                                        scripts/build.sh, so by train.sh, test.sh and gpu.sh too
#   bash scripts/deps.sh --download DIR  download the libraries, their -dev packages, pkgconf and
#                                        the fortunes corpus as .deb files into DIR, for a machine
#                                        that has no package registry (e.g. a lent GPU machine)
#   ZO_DEBS=DIR bash scripts/deps.sh     on that machine: unpack every DIR/*.deb with `dpkg -x`
#                                        into build/deps (never into /) and write build/deps/env.sh,
#                                        which build.sh and gpu.sh source (PKG_CONFIG_PATH,
#                                        PKG_CONFIG_SYSROOT_DIR, LD_LIBRARY_PATH, ZO_CORPUS);
#                                        ZO_DEPS_PREFIX=DIR unpacks there instead (an absolute path)
# ZO_CARRY must hold every library CMakeLists.txt requires, and what those load: tests/deps_carry.sh
# checks it against this machine's packages, tests/deps_sysroot.sh builds against an unpacked prefix.
# The CUDA toolkit, CMake and a C compiler are not packages here: the GPU machine has them.
set -euo pipefail
cd "$(dirname "$0")/.."
ZO_PACKAGES=(build-essential cmake pkg-config liburing-dev libhwloc-dev libjemalloc-dev
             libjansson-dev libopenblas-openmp-dev libisal-dev libdnnl-dev fortunes fio gnuplot-nox time python3
             python3-torch python3-numpy python3-pip clang libclang-rt-dev libomp-dev
             libopenmpi-dev openmpi-bin python3-pytest qemu-user pandoc)
# pandoc makes the man pages from docs/man/*.1.md at build time (optional: without it the build leaves them out).
# Python packages Debian does not have, for /usr/bin/python3 (the tests' interpreter): the safetensors
# reader that checks zo-train's export as Hugging Face would load it.
# Each entry is MODULE or MODULE:REQUIREMENT. transformers builds Hugging Face's GPT-2 for the Python front's stage-3
# test (random weights from a config: nothing is downloaded); 4.36.2 is a release that runs on Debian's torch 1.13.
# accelerate is what transformers' Trainer runs on (4.36 needs >= 0.21); 0.25.0 is the release of the same
# month, runs on torch 1.13 and needs nothing beyond what Debian and the lines above bring (Debian bookworm has
# no python3-accelerate). The Hugging Face integration's tests (python/tests/test_hf_trainer.py) use both.
ZO_PIP=(safetensors "transformers:transformers==4.36.2" "accelerate:accelerate==0.25.0")
# What a machine without apt needs beside its own compiler, CMake and CUDA: each library's runtime
# and -dev package, the runtime libraries they pull in that a minimal image may lack, pkg-config, and
# the corpus. Open MPI is left out (the mpi tests are optional and need a package registry).
ZO_CARRY=(liburing2 liburing-dev libhwloc15 libhwloc-dev libudev1 libjemalloc2 libjemalloc-dev
          libjansson4 libjansson-dev libopenblas0-openmp libopenblas-openmp-dev libgfortran5
          libisal2 libisal-dev libdnnl2 libdnnl-dev ocl-icd-libopencl1 pkgconf pkgconf-bin libpkgconf3 fortunes
          fortunes-min)

if [ "${1:-}" = "--download" ]; then
  dir=${2:?usage: deps.sh --download DIR}
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && apt-get update -qq
  (cd "$dir" && apt-get download "${ZO_CARRY[@]}")
  # cudnn-frontend's headers (the fused CUDA kernels' cuDNN attention; not in Debian): its wheel, unpacked there
  /usr/bin/python3 -m pip download -q --no-deps -d "$dir" nvidia-cudnn-frontend ||
    echo "zoffload: nvidia-cudnn-frontend not downloaded: the GPU build will use the baseline attention" >&2
  echo "zoffload: $(ls "$dir"/*.deb | wc -l) packages in $dir ($(du -sh "$dir" | cut -f1)); on the other machine:"
  echo "  ZO_DEBS=$dir timeout 450 ./scripts/gpu.sh   (the repository root; DIR relative to it, e.g. debs)"
  exit 0
fi

if [ -n "${ZO_DEBS:-}" ]; then
  prefix=${ZO_DEPS_PREFIX:-$PWD/build/deps} # another prefix: tests/deps_sysroot.sh
  ls "$ZO_DEBS"/*.deb >/dev/null 2>&1 || { echo "zoffload: ZO_DEBS=$ZO_DEBS holds no .deb files" >&2; exit 1; }
  mkdir -p "$prefix"
  for d in "$ZO_DEBS"/*.deb; do dpkg -x "$d" "$prefix"; done
  lib=$prefix/usr/lib/x86_64-linux-gnu
  {
    echo "# written by scripts/deps.sh from $ZO_DEBS: the carried packages, unpacked under $prefix"
    echo "export PKG_CONFIG_SYSROOT_DIR=$prefix"
    echo "export PKG_CONFIG_PATH=$lib/pkgconfig:$lib/openblas-openmp/pkgconfig:$prefix/usr/share/pkgconfig"
    echo "export LD_LIBRARY_PATH=$lib:$lib/openblas-openmp\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    # the image's own pkg-config when it has one, else the carried pkgconf
    command -v pkg-config >/dev/null || echo "export PKG_CONFIG=$prefix/usr/bin/pkgconf"
    echo "export ZO_CORPUS=$prefix/usr/share/games/fortunes"
  } >"$prefix/env.sh"
  for w in "$ZO_DEBS"/nvidia_cudnn_frontend-*.whl; do # its include/ only (header-only C++ API)
    [ -f "$w" ] || continue
    python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' "$w" "$prefix/cudnn-frontend"
    echo "export CUDNN_FRONTEND_INCLUDE=$prefix/cudnn-frontend/include" >>"$prefix/env.sh"
    echo "zoffload: cudnn-frontend headers from $(basename "$w") in $prefix/cudnn-frontend/include"
  done
  echo "zoffload: unpacked $(ls "$ZO_DEBS"/*.deb | wc -l) packages into $prefix (environment: $prefix/env.sh)"
  exit 0
fi

missing=()
for p in "${ZO_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "zoffload: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "zoffload: missing packages; run as root:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
for entry in "${ZO_PIP[@]}"; do
  m=${entry%%:*} req=${entry#*:}
  /usr/bin/python3 -c "import $m" 2>/dev/null && continue
  if [ "$(id -u)" -eq 0 ]; then
    echo "zoffload: installing Python package $req for /usr/bin/python3"
    /usr/bin/python3 -m pip install -q --break-system-packages --root-user-action=ignore "$req"
  else
    echo "zoffload: missing Python package; run: /usr/bin/python3 -m pip install --user '$req'" >&2
    exit 1
  fi
done
