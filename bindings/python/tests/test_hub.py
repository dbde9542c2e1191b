"""A model by name (issue 49): ``ember.Engine(model="org/repo:QUANT")`` downloads the file from the hub into the
Hugging Face cache, reporting the download as the first half of the load's progress, then serves it; a second
engine takes it from the cache with the hub gone. The hub is scripts/local_hub.py's stand-in on 127.0.0.1, serving
the test model as a one-file repository; the client's handling of a hostile hub is tests/hub.rs's."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Iterator, List

import pytest

import ember
from conftest import MODEL, ROOT

REPO = "test-org/SmolLM2-135M-Instruct-GGUF"
HUB_VARIABLES = ("HF_ENDPOINT", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN")


def load_local_hub():
    spec = importlib.util.spec_from_file_location("local_hub", ROOT / "scripts" / "local_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def hub_home(tmp_path: Path) -> Iterator[Path]:
    """An empty Hugging Face home, the hub variables restored afterwards."""
    saved = {name: os.environ.get(name) for name in HUB_VARIABLES}
    for name in HUB_VARIABLES:
        os.environ.pop(name, None)
    os.environ["HF_HOME"] = str(tmp_path / "hf")
    try:
        yield tmp_path / "hf"
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_a_model_by_name_is_downloaded_then_served_from_the_cache(hub_home: Path, tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    repository.mkdir()
    (repository / "SmolLM2-135M-Instruct.Q4_1.gguf").symlink_to(MODEL.resolve())
    local_hub = load_local_hub()
    server = local_hub.serve({REPO: local_hub.Repository(repository)})
    os.environ["HF_ENDPOINT"] = local_hub.endpoint(server)
    fractions: List[float] = []
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    try:
        with ember.Engine(model=f"{REPO}:q4_1", threads=2, progress=lambda f: fractions.append(f) or True) as engine:
            first = engine.chat(messages, max_tokens=8, temperature=0)
    finally:
        server.shutdown()
        server.server_close()
    # The download is the first half of the fractions, the load the second.
    assert any(0 < f < 0.5 for f in fractions) and fractions[-1] == 1.0
    assert fractions == sorted(fractions)
    blobs = list((hub_home / "hub" / f"models--{REPO.replace('/', '--')}" / "blobs").iterdir())
    assert [b.stat().st_size for b in blobs] == [MODEL.stat().st_size]
    # The hub is gone and the client told to stay offline: the cache serves the same model.
    os.environ["HF_HUB_OFFLINE"] = "1"
    with ember.Engine(model=f"{REPO}:Q4_1", threads=2, progress=False) as engine:
        again = engine.chat(messages, max_tokens=8, temperature=0)
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"] != ""


def test_a_name_the_hub_does_not_have_is_a_sentence(hub_home: Path) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    with pytest.raises(ember.ModelLoadFailed) as raised:
        ember.Engine(model=f"{REPO}:Q4_1", progress=False)
    message = str(raised.value)
    assert message.startswith("engine_new: ") and "{" not in message
    assert "offline" in message.lower() or "cache" in message.lower()
