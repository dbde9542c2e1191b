#!/usr/bin/env bash
# The real vocabularies llama.cpp tests its tokenizers with (models/ggml-vocab-*.gguf: vocabulary only, no weights)
# and their test texts with the ids Hugging Face's tokenizers give (.inp/.out), copied out of the pinned
# llama-cpp-python 0.3.36 sdist (sdist.sh) once, into the git-ignored .cache/llamacpp/vocab/. Prints that folder.
# tests/tokenizer_llamacpp_vocabs.rs reads it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=.cache/llamacpp/vocab
if [ -f "$out/COMPLETE" ]; then
  echo "$PWD/$out"; exit 0
fi
tarball="$(scripts/llamacpp/sdist.sh)"
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
tar xzf "$tarball" -C "$out.tmp" --strip-components=4 --wildcards \
  "llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-*"
ls "$out.tmp"/ggml-vocab-llama-bpe.gguf >/dev/null
touch "$out.tmp/COMPLETE"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$PWD/$out"
