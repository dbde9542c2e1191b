# ember's Python side, included from the root Makefile (`include python.mk`).
#   make python-test    build the wheel as a user does (`pip wheel ./bindings/python`: builds the release library
#                       and bundles it, the PEP 517 build `pip install ./bindings/python` runs), check it with
#                       auditwheel (bindings/python/check_wheel.py: its manylinux tag is the one auditwheel computes,
#                       the library is in platlib, the README is its description), install it into a fresh virtual
#                       environment, run the example, then the pytest suite on the real model and, for embeddings
#                       and reranking, on a synthetic bge-small encoder and reranker (ember-cli synthetic, llama.cpp's
#                       real BERT vocabulary from the `vocabs` target)
#   make python-sdist-test  build the sdist (`python -m build --sdist`: it carries the crate's source package), install
#                       it into a fresh virtual environment (cargo builds the library from the sdist's copy, in the
#                       shared target directory: the dependencies are compiled once, but the crate recompiles, here
#                       and at the checkout's next build), and answer a chat with it (4 minutes on 2 cores)
#   make python-bench   what the binding costs per streamed event, beside a bare ctypes loop
#                       (bindings/python/bench/bench_events.py; a minute on 2 cores)
# Needs Python >= 3.9 with venv and pip, and PyPI (setuptools and wheel for the build, pytest, auditwheel, build).
# The model comes from the root Makefile's `model` target (EMBER_MODEL overrides its path).

PYTHON ?= python3
PY_TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
PY_VENV := $(PY_TARGET_DIR)/python-venv
PY_SDIST_VENV := $(PY_TARGET_DIR)/python-sdist-venv
PY_DIST := $(PY_TARGET_DIR)/python/dist
PY_PYTEST := pytest==8.3.5
PY_AUDITWHEEL := auditwheel==6.8.2
PY_BUILD := build==1.2.2.post1
# The encoder the embedding tests use (bindings/python/tests/conftest.py reads EMBER_EMBED_MODEL) and the reranker
# the rerank tests use (EMBER_RERANK_MODEL): never committed.
PY_EMBED_MODEL := $(PY_TARGET_DIR)/python/bge-small-synthetic.gguf
PY_RERANK_MODEL := $(PY_TARGET_DIR)/python/bge-small-rerank-synthetic.gguf

.PHONY: python-test python-venv python-bench python-embed-model python-rerank-model python-sdist-test

python-venv: model
	rm -rf $(PY_VENV) $(PY_DIST)
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(PY_PYTEST) $(PY_AUDITWHEEL)
	$(PY_VENV)/bin/python -m pip wheel --quiet --disable-pip-version-check --no-deps -w $(PY_DIST) ./bindings/python
	$(PY_VENV)/bin/python bindings/python/check_wheel.py $(PY_DIST)/ember-*.whl
	$(PY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(PY_DIST)/ember-*.whl

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

python-sdist-test: model
	rm -rf $(PY_SDIST_VENV) $(PY_DIST)/ember-*.tar.gz
	$(PYTHON) -m venv $(PY_SDIST_VENV)
	$(PY_SDIST_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(PY_BUILD)
	$(PY_SDIST_VENV)/bin/python -m build --sdist --outdir $(PY_DIST) bindings/python
	CARGO_TARGET_DIR=$(PY_TARGET_DIR) $(PY_SDIST_VENV)/bin/python -m pip install --quiet \
		--disable-pip-version-check $(PY_DIST)/ember-*.tar.gz
	cd $(PY_TARGET_DIR) && $(PY_SDIST_VENV)/bin/python -c 'import ember, sys; \
		engine = ember.Engine(model=sys.argv[1], threads=2, progress=True); \
		print(engine.chat([{"role": "user", "content": "Hi!"}], max_tokens=8)["choices"][0]["message"])' \
		$(abspath $(or $(EMBER_MODEL),models/SmolLM2-135M-Instruct.Q4_1.gguf))
