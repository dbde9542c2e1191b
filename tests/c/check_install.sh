#!/usr/bin/env bash
# The installed library as packagers and linkers see it (docs/c_api.md, "Versions and the shared library"):
# `make install` into a scratch prefix lays out libember.so.MAJOR.MINOR.PATCH with the links libember.so.MAJOR
# and libember.so; the SONAME is libember.so.MAJOR, MAJOR being the header's EMBER_VERSION_MAJOR; the library
# exports exactly the functions include/ember.h declares, nothing of its dependencies (nm -D); and a program
# builds against it with pkg-config and with CMake (shared and static), records NEEDED libember.so.MAJOR, and
# runs with the library of its header's version.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

fail() {
  echo "check_install: $*" >&2
  exit 1
}

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
prefix="$scratch/prefix"
make -s install PREFIX="$prefix" >"$scratch/install.log" 2>&1 || { cat "$scratch/install.log" >&2; fail "make install failed"; }
lib="$prefix/lib"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
major="$(sed -n 's/^#define EMBER_VERSION_MAJOR \([0-9]*\)$/\1/p' include/ember.h)"
[ -n "$major" ] && [ "$major" = "${version%%.*}" ] || fail "EMBER_VERSION_MAJOR '$major' is not the major of $version"

# The layout.
[ -f "$lib/libember.so.$version" ] && [ ! -L "$lib/libember.so.$version" ] || fail "no file libember.so.$version"
[ "$(readlink "$lib/libember.so.$major")" = "libember.so.$version" ] || fail "libember.so.$major -> libember.so.$version"
[ "$(readlink "$lib/libember.so")" = "libember.so.$major" ] || fail "libember.so -> libember.so.$major"
[ -f "$lib/libember.a" ] && [ -f "$prefix/include/ember.h" ] || fail "libember.a or ember.h missing"

# The SONAME.
soname="$(readelf -d "$lib/libember.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
[ "$soname" = "libember.so.$major" ] || fail "SONAME is '$soname', not libember.so.$major"

# The exported symbols: exactly the header's functions.
declared="$(grep -oE '^[A-Za-z][^(;]*[ *]engine_[a-z0-9_]+\(' include/ember.h | grep -oE 'engine_[a-z0-9_]+' | sort)"
exported="$(nm -D --defined-only "$lib/libember.so.$version" | awk '{print $3}' | sort)"
if [ "$declared" != "$exported" ]; then
  diff <(echo "$declared") <(echo "$exported") | sed 's/^</  declared, not exported:/; s/^>/  exported, not declared:/' >&2 || true
  fail "the library's dynamic symbols differ from include/ember.h's functions"
fi
echo "check_install: $(echo "$exported" | wc -l) symbols exported, all declared in include/ember.h; SONAME $soname"

# needed BINARY: the program asks the loader for libember.so.MAJOR.
needed() {
  readelf -d "$1" | grep -q "(NEEDED).*\[libember.so.$major\]" || fail "$1 does not need libember.so.$major"
}

# pkg-config, shared.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046 # the flags are words
cc -std=c11 -Wall -Werror tests/c/install_consumer/version_check.c $(pkg-config --cflags --libs ember) \
  -o "$scratch/version_pkgconfig"
needed "$scratch/version_pkgconfig"
LD_LIBRARY_PATH="$lib" "$scratch/version_pkgconfig"

# CMake: find_package(ember 0.1), both targets.
cmake -S tests/c/install_consumer -B "$scratch/cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$scratch/cmake" >/dev/null
needed "$scratch/cmake/version_shared"
LD_LIBRARY_PATH="$lib" "$scratch/cmake/version_shared"
"$scratch/cmake/version_static"
# A major the package is not: refused.
cat > "$scratch/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(wrong_major C)
find_package(ember 99 REQUIRED)
CMAKE
if cmake -S "$scratch" -B "$scratch/wrong" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null 2>&1; then
  fail "find_package(ember 99) accepted version $version"
fi
echo "check_install: ok"
