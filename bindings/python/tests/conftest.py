"""Shared fixtures: the real model (SmolLM2-135M-Instruct Q4_1, fetched by `make model`) and one engine for the
tests that need nothing special of it; an encoder engine on a synthetic bge-small, and a reranker engine on a
synthetic bge-small with a cross-encoder's classification head (both written by `make python-test` with `ember-cli
synthetic`, llama.cpp's real BERT vocabulary, 2 layers). The references are the project's own
fixtures (tests/fixtures/README.md says where they came from)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

import ember

ROOT = Path(__file__).resolve().parents[3]
MODEL = Path(os.environ.get("EMBER_MODEL", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
FIXTURES = ROOT / "tests" / "fixtures"
#: The encoder: `make python-test` writes it and sets EMBER_EMBED_MODEL (python.mk, PY_EMBED_MODEL).
EMBED_MODEL = Path(os.environ.get("EMBER_EMBED_MODEL", ROOT / "target" / "python" / "bge-small-synthetic.gguf"))
#: The reranker: `make python-test` writes it and sets EMBER_RERANK_MODEL (python.mk, PY_RERANK_MODEL).
RERANK_MODEL = Path(os.environ.get("EMBER_RERANK_MODEL",
                                   ROOT / "target" / "python" / "bge-small-rerank-synthetic.gguf"))


def config(**overrides: Any) -> Dict[str, Any]:
    """An engine configuration on the test model, 2 threads, with the given keys on top."""
    base: Dict[str, Any] = {"model": MODEL, "threads": 2, "enable_per_request_metrics": True}
    base.update(overrides)
    return base


def chat(content: str, max_tokens: int, **fields: Any) -> Dict[str, Any]:
    """A greedy Chat Completions body with one user message."""
    body: Dict[str, Any] = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                            "temperature": 0}
    body.update(fields)
    return body


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture(scope="session")
def engine() -> Iterator[ember.Engine]:
    assert MODEL.exists(), f"{MODEL} is missing: run `make model`"
    with ember.Engine(config()) as shared:
        yield shared


@pytest.fixture(scope="session")
def encoder() -> Iterator[ember.Engine]:
    """An engine serving embeddings: 384-wide vectors, served as "bge-test"."""
    assert EMBED_MODEL.exists(), f"{EMBED_MODEL} is missing: run `make python-test` (it writes the file)"
    with ember.Engine({"model": EMBED_MODEL, "threads": 2, "served_model_name": "bge-test"}) as shared:
        yield shared


@pytest.fixture(scope="session")
def reranker() -> Iterator[ember.Engine]:
    """An engine serving reranking (one score per query-document pair), served as "rerank-test"."""
    assert RERANK_MODEL.exists(), f"{RERANK_MODEL} is missing: run `make python-test` (it writes the file)"
    with ember.Engine({"model": RERANK_MODEL, "threads": 2, "served_model_name": "rerank-test"}) as shared:
        yield shared
