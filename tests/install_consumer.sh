#!/usr/bin/env bash
# install_consumer.sh BUILD_DIR SOURCE_DIR - the library as a user installs and consumes it:
# `cmake --install BUILD_DIR --prefix P` into a fresh temporary prefix (not /usr/local), then the
# program in tests/consumer built and run twice against P: as a separate CMake project with
# find_package(zoffload), and with plain cc and `pkg-config --cflags --libs zoffload`. Both must
# resolve to P. Exit 0 pass, 1 fail.
set -u
build=$1 src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install"; }
lib=$(dirname "$(find "$prefix" -name 'libzoffload.so' | head -1)")
[ -n "$lib" ] && [ -e "$lib/libzoffload.so.0" ] || fail "no libzoffload.so(.0) under $prefix"
[ -e "$prefix/include/zoffload/zoffload.h" ] || fail "headers not installed"
# 1. find_package
cmake -S "$src/consumer" -B "$work/b1" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_RPATH="$lib" \
      >"$work/b1.log" 2>&1 || { cat "$work/b1.log"; fail "find_package(zoffload) project did not configure"; }
cmake --build "$work/b1" >"$work/b1b.log" 2>&1 || { cat "$work/b1b.log"; fail "find_package(zoffload) project did not build"; }
"$work/b1/consumer" || fail "the find_package build does not run"
ldd "$work/b1/consumer" | grep -q "$lib/libzoffload.so.0" || fail "the find_package build did not link $lib"
# 2. pkg-config
pcdir=$(dirname "$(find "$prefix" -name zoffload.pc | head -1)")
export PKG_CONFIG_PATH="$pcdir"
flags=$(pkg-config --cflags --libs zoffload) || fail "pkg-config zoffload"
case "$flags" in *"$prefix"*) ;; *) fail "pkg-config flags do not point into the prefix: $flags" ;; esac
# shellcheck disable=SC2086
cc -o "$work/consumer2" "$src/consumer/main.c" $flags -Wl,-rpath,"$lib" 2>"$work/cc.log" \
  || { cat "$work/cc.log"; fail "cc with pkg-config flags"; }
"$work/consumer2" || fail "the pkg-config build does not run"
echo "pkg-config: prefix=$(pkg-config --variable=prefix zoffload)"
echo PASS
