#!/usr/bin/env bash
# The real chat templates llama.cpp tests its template engine with (models/templates/*.jinja: 70 models' own
# templates, from Llama 3.x and Qwen to DeepSeek, Mistral, Granite and gpt-oss), copied out of the pinned
# llama-cpp-python 0.3.36 sdist (sdist.sh) once, into the git-ignored .cache/llamacpp/templates/. Prints that
# folder. tests/chat_templates_llamacpp.rs renders each against tests/fixtures/templates/expected.json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=.cache/llamacpp/templates
if [ -f "$out/COMPLETE" ]; then
  echo "$PWD/$out"; exit 0
fi
tarball="$(scripts/llamacpp/sdist.sh)"
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
tar xzf "$tarball" -C "$out.tmp" --strip-components=5 --wildcards \
  "llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/*.jinja"
ls "$out.tmp"/meta-llama-Llama-3.1-8B-Instruct.jinja >/dev/null
touch "$out.tmp/COMPLETE"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$PWD/$out"
