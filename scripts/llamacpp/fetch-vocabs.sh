#!/usr/bin/env bash
# The real vocabularies llama.cpp tests its tokenizers with (models/ggml-vocab-*.gguf: vocabulary only, no weights)
# and their test texts with the ids Hugging Face's tokenizers give (.inp/.out), copied out of the pinned
# llama-cpp-python 0.3.36 sdist (vendor/llama.cpp, llama.cpp commit 0c1e57098) once, into the git-ignored
# .cache/llamacpp/vocab/. Prints that folder. tests/tokenizer_llamacpp_vocabs.rs reads it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
version=0.3.36
cache=.cache/llamacpp
out="$cache/vocab"
if [ -f "$out/COMPLETE" ]; then
  echo "$PWD/$out"; exit 0
fi
mkdir -p "$cache"
tarball="$cache/llama_cpp_python-$version.tar.gz"
[ -f "$tarball" ] || python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
  "llama-cpp-python==$version" -d "$cache" >&2
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
tar xzf "$tarball" -C "$out.tmp" --strip-components=4 --wildcards \
  "llama_cpp_python-$version/vendor/llama.cpp/models/ggml-vocab-*"
ls "$out.tmp"/ggml-vocab-llama-bpe.gguf >/dev/null
touch "$out.tmp/COMPLETE"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$PWD/$out"
