# ember's Python side, included from the root Makefile (`include python.mk`).
#   make python-test    install the binding as a user does (`pip install ./bindings/python`: builds the release
#                       library and bundles it in a wheel) into a fresh virtual environment, run the example, then
#                       its pytest suite on the real model
#   make python-bench   what the binding costs per streamed event, beside a bare ctypes loop
#                       (bindings/python/bench/bench_events.py; a minute on 2 cores)
# Needs Python >= 3.9 with venv and pip, and PyPI (setuptools and wheel for the build, pytest).
# The model comes from the root Makefile's `model` target (EMBER_MODEL overrides its path).

PYTHON ?= python3
PY_VENV := $(abspath $(or $(CARGO_TARGET_DIR),target))/python-venv
PY_PYTEST := pytest==8.3.5

.PHONY: python-test python-venv python-bench

python-venv: model
	rm -rf $(PY_VENV)
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check ./bindings/python $(PY_PYTEST)

python-test: python-venv
	$(PY_VENV)/bin/python bindings/python/examples/chat.py "What is the capital of France?"
	cd bindings/python && $(PY_VENV)/bin/python -m pytest -q -p no:cacheprovider tests

python-bench: python-venv
	$(PY_VENV)/bin/python bindings/python/bench/bench_events.py
