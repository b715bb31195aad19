#!/usr/bin/env bash
# deps_sysroot.sh SOURCE_DIR BUILD_DIR - the GPU machine's way of getting the Debian libraries, replayed on this one:
# scripts/deps.sh's ZO_CARRY packages as .deb files (made here from the installed packages' file lists, each file a
# symbolic link to the installed one: no registry, a few MB), unpacked by `ZO_DEBS=... scripts/deps.sh` under a
# prefix, CMake configured with the prefix's env.sh: every pkg-config module resolves into the prefix and the
# prefix's multiarch include directory (hwloc/autogen/config.h) is on the compile line. And BUILD_DIR's library and
# zo-train find the CUDA runtime and NCCL they were linked with through their own RUNPATH (a GPU image need not list
# its toolkit in ld.so.conf). Not the bare-system build itself (this machine has the libraries in / as well, so a
# missing include directory still compiles here): docs/gpu-check.md says how that was checked. Exit 0 pass, 1 fail,
# 77 without dpkg-deb or a carried package not installed here.
set -u
src=$(cd "$1" && pwd) bd=$2
command -v dpkg-deb >/dev/null && command -v dpkg-query >/dev/null && command -v readelf >/dev/null ||
  { echo "skip: needs dpkg-deb, dpkg-query and readelf"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-deps-sysroot.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
no() { echo "FAIL: $*"; fail=1; }
carry=$(sed -n '/^ZO_CARRY=(/,/)/p' "$src/scripts/deps.sh" | tr -d '()' | sed 's/ZO_CARRY=//' | tr -s ' \n' '\n' | grep .)
mkdir -p "$work/debs"
for p in $carry; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    { echo "skip: $p (scripts/deps.sh's ZO_CARRY) is not installed here"; exit 77; }
  r=$work/pkg/$p
  mkdir -p "$r/DEBIAN"
  # directories as directories (never through a link: merged /usr's /lib is one), everything else as a link
  while read -r f; do
    if [ -d "$f" ]; then
      mkdir -p "$r$f"
    else
      mkdir -p "$r$(dirname "$f")"
      ln -sfn "$(readlink -f "$f")" "$r$f"
    fi
  done < <(dpkg-query -L "$p" | grep '^/' | grep -v '^/\.$')
  printf 'Package: %s\nVersion: 0\nArchitecture: all\nMaintainer: zoffload tests\nDescription: links to %s\n' \
    "$p" "$p" >"$r/DEBIAN/control"
  dpkg-deb -Znone -b "$r" "$work/debs/$p.deb" >/dev/null || { no "dpkg-deb -b $p"; exit 1; }
done
prefix=$work/deps
ZO_DEBS=$work/debs ZO_DEPS_PREFIX=$prefix bash "$src/scripts/deps.sh" || { no "ZO_DEBS=... scripts/deps.sh"; exit 1; }
[ -f "$prefix/env.sh" ] || { no "no $prefix/env.sh"; exit 1; }
# configure against the prefix only (no CUDA, no MPI: this is about the Debian libraries)
(
  unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR PKG_CONFIG
  . "$prefix/env.sh"
  cmake -S "$src" -B "$work/b" -DCMAKE_BUILD_TYPE=Release -DZO_WITH_CUDA=OFF -DZO_WITH_MPI=OFF >"$work/cmake.log" 2>&1
) || { cat "$work/cmake.log"; no "cmake against the unpacked prefix"; exit 1; }
for m in URING HWLOC JEMALLOC JANSSON OPENBLAS; do
  inc=$(sed -n "s/^${m}_INCLUDE_DIRS:INTERNAL=//p" "$work/b/CMakeCache.txt")
  case $inc in "$prefix"/*) ;; *) no "$m include directory '$inc' is not under the prefix $prefix" ;; esac
  libs=$(sed -n "s/^pkgcfg_lib_${m}_[^:]*:FILEPATH=//p" "$work/b/CMakeCache.txt")
  [ -n "$libs" ] || no "$m: no library found (pkgcfg_lib_${m}_*)"
  for lib in $libs; do
    case $lib in "$prefix"/*) ;; *) no "$m library '$lib' is not under the prefix $prefix" ;; esac
  done
done
arch=$(gcc -print-multiarch 2>/dev/null)
if [ -n "$arch" ] && [ -f "$prefix/usr/include/$arch/hwloc/autogen/config.h" ]; then
  grep -q -- "-isystem $prefix/usr/include/$arch " "$work/b/compile_commands.json" ||
    no "the compile line lacks -isystem $prefix/usr/include/$arch (hwloc.h includes hwloc/autogen/config.h from there;" \
       "a machine without libhwloc-dev in / fails)"
fi
# RUNPATH of the build tree's programs: a directory holding each CUDA library they need
for f in "$bd/libzoffload.so" "$bd/tools/zo-train"; do
  [ -e "$f" ] || { no "no $f"; continue; }
  rp=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  for lib in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(lib\(cudart\|nccl\|cublas\)\.so[.0-9]*\)\]/\1/p'); do
    found=0
    IFS=: read -ra dirs <<<"$rp"
    for d in "${dirs[@]}"; do [ -n "$d" ] && [ -e "$d/$lib" ] && found=1; done
    [ $found -eq 1 ] || no "$(basename "$f") needs $lib but its RUNPATH '$rp' has no directory holding it"
  done
done
echo "$(echo "$carry" | wc -l) packages unpacked under a prefix; cmake found each library there"
[ $fail -eq 0 ] && echo PASS
exit $fail
