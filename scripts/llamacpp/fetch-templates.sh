#!/usr/bin/env bash
# The real chat templates llama.cpp tests its template engine with (models/templates/*.jinja: 70 models' own
# templates, from Llama 3.x and Qwen to DeepSeek, Mistral, Granite and gpt-oss), copied out of the pinned
# llama-cpp-python 0.3.36 sdist once (extract.sh), into the git-ignored .cache/llamacpp/templates/. Prints that
# folder. tests/chat_templates_llamacpp.rs renders each against tests/fixtures/templates/expected.json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec scripts/llamacpp/extract.sh .cache/llamacpp/templates "models/templates/*.jinja" \
  meta-llama-Llama-3.1-8B-Instruct.jinja
