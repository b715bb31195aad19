#!/usr/bin/env bash
# configure_missing_deps.sh SOURCE_DIR WORK_DIR - configure the project with pkg-config looking in an empty
# directory only (PKG_CONFIG_LIBDIR) and ISA-L's fallback search pointed nowhere, as on a machine without the -dev
# packages: the configure step must fail with one "zoffload: missing build dependencies" error that names each
# library's Debian package and the apt-get line, both with the tools (OpenBLAS and oneDNN too) and as `pip install .`
# builds it (SKBUILD: the library alone, neither needed).
set -u
src=$1 work=$2
rm -rf "$work" && mkdir -p "$work/empty" || exit 1
fail=0
check() { # NAME EXPECTED-PACKAGES [cmake args]
  local name=$1 want=$2
  shift 2
  PKG_CONFIG_LIBDIR=$work/empty PKG_CONFIG_PATH= cmake -S "$src" -B "$work/$name" -DZO_WITH_CUDA=OFF \
    -DISAL_INCLUDE_DIR=ISAL_INCLUDE_DIR-NOTFOUND -DISAL_LIBRARY=ISAL_LIBRARY-NOTFOUND \
    -DCMAKE_FIND_ROOT_PATH="$work/empty" -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY \
    -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY "$@" >"$work/$name.log" 2>&1
  local rc=$?
  local msg
  msg=$(tr '\n' ' ' <"$work/$name.log" | tr -s ' ' | grep -o "zoffload: missing build dependencies:[^.]*\. On Debian[^(]*")
  echo "$name: exit $rc: ${msg:-no such error}"
  if [ $rc -eq 0 ] || [ -z "$msg" ]; then
    echo "FAIL: $name: expected the configure step to fail with the missing-dependencies error; log $work/$name.log"
    fail=1
    return
  fi
  for p in $want; do
    case $msg in
      *"apt-get install"*" $p"*) ;;
      *) echo "FAIL: $name: the error does not name $p"; fail=1 ;;
    esac
  done
}
check tools "liburing-dev libhwloc-dev libjansson-dev libjemalloc-dev libisal-dev libopenblas-openmp-dev libdnnl-dev"
check pip "liburing-dev libhwloc-dev libjansson-dev libjemalloc-dev libisal-dev" -DSKBUILD=ON -DBUILD_TESTING=OFF
if grep -qi "openblas\|dnnl" "$work/pip.log"; then echo "FAIL: pip: the library alone needs neither OpenBLAS nor oneDNN"; fail=1; fi
exit $fail
