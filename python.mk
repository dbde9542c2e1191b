# ember's Python side, included from the root Makefile (`include python.mk`).
#   make python-test    install the binding as a user does (`pip install ./bindings/python`: builds the release
#                       library and bundles it in a wheel) into a fresh virtual environment, run the example, then
#                       its pytest suite on the real model and, for embeddings and reranking, on a synthetic
#                       bge-small encoder and reranker (ember-cli synthetic, llama.cpp's real BERT vocabulary from
#                       the `vocabs` target)
#   make python-bench   what the binding costs per streamed event, beside a bare ctypes loop
#                       (bindings/python/bench/bench_events.py; a minute on 2 cores)
# Needs Python >= 3.9 with venv and pip, and PyPI (setuptools and wheel for the build, pytest).
# The model comes from the root Makefile's `model` target (EMBER_MODEL overrides its path).

PYTHON ?= python3
PY_TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
PY_VENV := $(PY_TARGET_DIR)/python-venv
PY_PYTEST := pytest==8.3.5
# The encoder the embedding tests use (bindings/python/tests/conftest.py reads EMBER_EMBED_MODEL) and the reranker
# the rerank tests use (EMBER_RERANK_MODEL): never committed.
PY_EMBED_MODEL := $(PY_TARGET_DIR)/python/bge-small-synthetic.gguf
PY_RERANK_MODEL := $(PY_TARGET_DIR)/python/bge-small-rerank-synthetic.gguf

.PHONY: python-test python-venv python-bench python-embed-model python-rerank-model

python-venv: model
	rm -rf $(PY_VENV)
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check ./bindings/python $(PY_PYTEST)

python-embed-model: vocabs
	$(CARGO) build --release --bin ember-cli
	@mkdir -p $(dir $(PY_EMBED_MODEL))
	$(PY_TARGET_DIR)/release/ember-cli synthetic $(PY_EMBED_MODEL) --family bge-small --layers 2 --seed 1 \
		--vocab .cache/llamacpp/vocab/ggml-vocab-bert-bge.gguf

# bge-small's layers with a cross-encoder's classification head (a pooler with tanh and one score).
python-rerank-model: vocabs
	$(CARGO) build --release --bin ember-cli
	@mkdir -p $(dir $(PY_RERANK_MODEL))
	$(PY_TARGET_DIR)/release/ember-cli synthetic $(PY_RERANK_MODEL) --family bge-small-rerank --layers 2 --seed 1 \
		--vocab .cache/llamacpp/vocab/ggml-vocab-bert-bge.gguf

python-test: python-venv python-embed-model python-rerank-model
	$(PY_VENV)/bin/python bindings/python/examples/chat.py "What is the capital of France?"
	cd bindings/python && EMBER_EMBED_MODEL=$(PY_EMBED_MODEL) EMBER_RERANK_MODEL=$(PY_RERANK_MODEL) \
		$(PY_VENV)/bin/python -m pytest -q -p no:cacheprovider tests

python-bench: python-venv
	$(PY_VENV)/bin/python bindings/python/bench/bench_events.py
