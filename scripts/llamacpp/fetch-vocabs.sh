#!/usr/bin/env bash
# The real vocabularies llama.cpp tests its tokenizers with (models/ggml-vocab-*.gguf: vocabulary only, no weights)
# and their test texts with the ids Hugging Face's tokenizers give (.inp/.out), copied out of the pinned
# llama-cpp-python 0.3.36 sdist once (extract.sh), into the git-ignored .cache/llamacpp/vocab/. Prints that folder.
# tests/tokenizer_llamacpp_vocabs.rs reads it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec scripts/llamacpp/extract.sh .cache/llamacpp/vocab "models/ggml-vocab-*" ggml-vocab-llama-bpe.gguf
