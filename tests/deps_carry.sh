#!/usr/bin/env bash
# deps_carry.sh SOURCE_DIR BUILD_DIR - scripts/deps.sh's ZO_CARRY (the .deb files a GPU machine without the Debian
# libraries gets) holds everything this build needs from Debian: the package of every pkg-config module CMakeLists.txt
# requires (and the modules those require), and the package of every shared library libzoffload.so and zo-train load
# that a CUDA image with a compiler would lack. Not the bare-system build itself (docs/gpu-check.md says how that was
# checked): a cheap guard against a new library that only this machine has. 77 without dpkg-query, pkg-config or objdump.
set -u
src=$1 bd=$2
command -v dpkg-query >/dev/null && command -v pkg-config >/dev/null && command -v objdump >/dev/null ||
  { echo "skip: needs dpkg-query, pkg-config and objdump"; exit 77; }
carry=$(sed -n '/^ZO_CARRY=(/,/)/p' "$src/scripts/deps.sh" | tr -d '()' | sed 's/ZO_CARRY=//' | tr -s ' \n' '\n')
[ -n "$carry" ] || { echo "FAIL: no ZO_CARRY=(...) in scripts/deps.sh"; exit 1; }
# What the GPU image has without the .debs: the C runtime and the compiler's own libraries (gcc brings libgomp,
# libquadmath), and whatever is not a Debian package (the CUDA toolkit).
base='^(libc6|libgcc-s1|libstdc\+\+6|libgomp1|libquadmath0|libzstd1|liblzma5|zlib1g)$'
fail=0
carried() { # PACKAGE WHY
  local p=${1%%:*}
  echo "$p" | grep -qE "$base" && return 0
  echo "$carry" | grep -qx "$p" && return 0
  echo "FAIL: $p ($2) is not in scripts/deps.sh's ZO_CARRY: a GPU machine without it cannot build or run"
  fail=1
}
# the package that owns PATH, as dpkg registered it (merged /usr: /lib/x86_64-linux-gnu or /usr/lib/x86_64-linux-gnu)
pkg_of() {
  local f
  for f in "$1" "$(readlink -f "$1")" "${1#/usr}" "$(readlink -f "$1" | sed 's,^/usr,,')"; do
    dpkg-query -S "$f" 2>/dev/null | head -1 | cut -d: -f1 | grep . && return 0
  done
  return 0
}
# 1. pkg-config modules, with what they require
mods=$(grep -o '^ *zo_require_pkg([A-Z_]* [^ )]*' "$src/CMakeLists.txt" | awk '{print $2}')
[ -n "$mods" ] || { echo "FAIL: no zo_require_pkg(VAR module package) in CMakeLists.txt"; exit 1; }
seen=""
queue=($mods)
while [ ${#queue[@]} -gt 0 ]; do
  m=${queue[0]}
  queue=("${queue[@]:1}")
  case " $seen " in *" $m "*) continue ;; esac
  seen="$seen $m"
  pc=$(pkg-config --path "$m" 2>/dev/null)
  [ -n "$pc" ] || { echo "FAIL: pkg-config module $m not found here"; fail=1; continue; }
  p=$(pkg_of "$pc")
  [ -n "$p" ] || { echo "FAIL: $pc belongs to no package"; fail=1; continue; }
  carried "$p" "pkg-config module $m, $pc"
  queue+=($(pkg-config --print-requires --print-requires-private "$m" 2>/dev/null | awk '{print $1}'))
done
# 2. the shared libraries the build's library and main program need (DT_NEEDED), and those the carried ones need in
# turn. Open MPI is optional (find_package(MPI QUIET): a machine without it builds without the mpi backend).
optional='^(libopenmpi3)$'
n=0
queue=("$bd/libzoffload.so" "$bd/tools/zo-train")
done_files=""
while [ ${#queue[@]} -gt 0 ]; do
  f=${queue[0]}
  queue=("${queue[@]:1}")
  case " $done_files " in *" $f "*) continue ;; esac
  done_files="$done_files $f"
  [ -e "$f" ] || { echo "FAIL: no $f (build first)"; fail=1; continue; }
  declare -A where=()
  while read -r name path; do where[$name]=$path; done < <(ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
  for lib in $(objdump -p "$f" | awk '$1 == "NEEDED" {print $2}'); do
    n=$((n + 1))
    case $lib in ld-linux*) continue ;; esac # the loader itself (libc6)
    path=${where[$lib]:-}
    [ -n "$path" ] || { echo "FAIL: $lib (needed by $(basename "$f")) is not found by the loader"; fail=1; continue; }
    p=$(pkg_of "$path")
    [ -n "$p" ] || continue # not a Debian package: the CUDA toolkit's (the GPU machine has its own)
    echo "$p" | grep -qE "$optional" && continue
    echo "$p" | grep -qE "$base" && continue
    carried "$p" "$lib, needed by $(basename "$f")"
    queue+=("$path")
  done
  unset where
done
echo "modules:$seen; $n DT_NEEDED entries checked"
[ $fail -eq 0 ] && echo PASS
exit $fail
