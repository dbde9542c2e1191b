#!/usr/bin/env bash
# Usage: extract.sh OUT PATTERN SENTINEL
# Copies the files of llama.cpp matching PATTERN (a path below the sdist's vendor/llama.cpp/, wildcards allowed)
# out of the pinned llama-cpp-python sdist (sdist.sh) once, into the git-ignored folder OUT, flat; SENTINEL, a
# file that must be among them, checks the copy. Prints OUT's absolute path. fetch-vocabs.sh and
# fetch-templates.sh are this with their files.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="$1" pattern="$2" sentinel="$3"
if [ -f "$out/COMPLETE" ]; then
  echo "$PWD/$out"; exit 0
fi
tarball="$(scripts/llamacpp/sdist.sh)"
root="$(basename "$tarball" .tar.gz)/vendor/llama.cpp"
# Flat: as many leading folders stripped as the pattern's path has.
strip=$(( $(tr -cd / <<<"$root/$pattern" | wc -c) ))
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
tar xzf "$tarball" -C "$out.tmp" --strip-components="$strip" --wildcards "$root/$pattern"
ls "$out.tmp/$sentinel" >/dev/null
touch "$out.tmp/COMPLETE"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$PWD/$out"
