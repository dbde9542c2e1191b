#!/usr/bin/env bash
# Downloads the pinned llama-cpp-python 0.3.36 sdist (its vendor/llama.cpp is llama.cpp commit 0c1e57098) once,
# into the git-ignored .cache/llamacpp/, and prints the tarball's path. The scripts that take llama.cpp's files
# out of it (extract.sh, for fetch-vocabs.sh and fetch-templates.sh) share this one download.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
version=0.3.36
cache=.cache/llamacpp
tarball="$cache/llama_cpp_python-$version.tar.gz"
mkdir -p "$cache"
[ -f "$tarball" ] || python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
  "llama-cpp-python==$version" -d "$cache" >&2
echo "$PWD/$tarball"
