"""What a newcomer meets first (issue 49): the configuration as keywords, one call per answer (``chat``,
``complete``), a load progress bar, exception text that reads as a sentence, and enums where the header has them."""

from __future__ import annotations

import io
import json
import sys
from typing import Any, Dict, List

import pytest

import ember
from conftest import MODEL, chat, config
from ember._load_bar import LoadBar

MESSAGES = [{"role": "user", "content": "Name a colour."}]


class Terminal(io.StringIO):
    """A stderr that says it is (or is not) a terminal."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_the_configuration_as_keywords() -> None:
    with ember.Engine(model=MODEL, threads=1, kv_cache_tokens=512, kv_block_size=16) as engine:
        stats = engine.stats()
        assert stats.cpu_threads == 1 and stats.kv_blocks_total == 32
        assert engine.chat(MESSAGES, max_tokens=1)["usage"]["completion_tokens"] == 1
    # A dict and keywords together: the keywords win.
    with ember.Engine({"model": MODEL, "threads": 2, "kv_cache_tokens": 512}, threads=1, kv_block_size=32) as engine:
        stats = engine.stats()
        assert stats.cpu_threads == 1 and stats.kv_blocks_total == 16
    with pytest.raises(TypeError, match="JSON text"):
        ember.Engine(json.dumps({"model": str(MODEL)}), threads=1)
    with pytest.raises(ember.InvalidConfig, match="no_such_key"):
        ember.Engine(model=MODEL, no_such_key=1)


def test_chat_answers_as_the_request_api_does(engine: ember.Engine) -> None:
    answer = engine.chat(MESSAGES, max_tokens=8, temperature=0, ignore_eos=True)
    with engine.submit(chat("Name a colour.", 8, ignore_eos=True)) as request:
        expected = request.response()
    assert answer["object"] == "chat.completion" and answer["usage"]["completion_tokens"] == 8
    assert answer["choices"][0]["message"] == expected["choices"][0]["message"]


def test_a_streamed_chat_gives_the_chunks(engine: ember.Engine) -> None:
    whole = engine.chat(MESSAGES, max_tokens=8, temperature=0, ignore_eos=True)
    chunks = list(engine.chat(MESSAGES, max_tokens=8, temperature=0, ignore_eos=True, stream=True,
                              stream_options={"include_usage": True}))
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"]["completion_tokens"] == 8


def test_a_streamed_chat_raises_at_once_and_cancels_when_left(engine: ember.Engine) -> None:
    # A refused body raises at the call, before any chunk is asked for.
    with pytest.raises(ember.InvalidRequest):
        engine.chat(MESSAGES, temperature=-1, stream=True)
    stream = engine.chat(MESSAGES, max_tokens=4000, ignore_eos=True, stream=True)
    assert next(stream)["object"] == "chat.completion.chunk"
    request: ember.Request = stream.gi_frame.f_locals["request"]  # type: ignore[attr-defined]
    stream.close()  # what leaving a `for` loop early does, once the iterator is collected
    # The request was freed, which cancels it (engine_request_free): nothing reads it any more.
    with pytest.raises(ember.InvalidHandle):
        request.timing_metrics()


def test_complete_answers_a_prompt(engine: ember.Engine) -> None:
    answer = engine.complete("Once upon a", max_tokens=6, temperature=0, ignore_eos=True)
    with engine.submit({"prompt": "Once upon a", "max_tokens": 6, "temperature": 0, "ignore_eos": True}) as request:
        expected = request.response()
    assert answer["object"] == "text_completion"
    assert answer["choices"][0]["text"] == expected["choices"][0]["text"]
    ids = engine.tokenize("Once upon a")
    assert engine.complete(ids, max_tokens=6, temperature=0, ignore_eos=True)["choices"][0]["text"] == \
        expected["choices"][0]["text"]
    chunks = list(engine.complete("Once upon a", max_tokens=6, temperature=0, ignore_eos=True, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == expected["choices"][0]["text"]


def loaded_with(monkeypatch: pytest.MonkeyPatch, tty: bool, **options: Any) -> str:
    """What an engine's load wrote on a stderr that is, or is not, a terminal."""
    stderr = Terminal(tty)
    monkeypatch.setattr(sys, "stderr", stderr)
    with ember.Engine(config(load="read"), **options):
        pass
    return stderr.getvalue()


def test_the_load_bar_is_drawn_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = loaded_with(monkeypatch, tty=True)
    lines = drawn.split("\r")[1:]
    assert lines[0].startswith(f"ember: loading {MODEL.name} [") and lines[0].endswith("  0%")
    assert lines[-1].endswith("] 100%\n") and drawn.count("\n") == 1
    percents = [int(line.split("]")[1].strip().rstrip("%")) for line in lines]
    assert percents == sorted(set(percents)), "each percentage once, rising"
    assert loaded_with(monkeypatch, tty=False) == ""
    assert loaded_with(monkeypatch, tty=True, progress=False) == ""
    assert loaded_with(monkeypatch, tty=False, progress=True).endswith("] 100%\n")
    seen: List[float] = []
    assert loaded_with(monkeypatch, tty=True, progress=seen.append) == ""  # a callable replaces the bar
    assert seen[-1] == 1.0


def test_a_load_that_stops_short_ends_the_bars_line(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = Terminal(True)
    monkeypatch.setattr(sys, "stderr", stderr)
    bar = LoadBar("a model")
    bar(0.0)
    bar(0.5)
    bar(0.504)  # the same whole percentage: not redrawn
    bar.close()
    bar.close()
    assert stderr.getvalue().count("\r") == 2 and stderr.getvalue().endswith(" 50%\n")
    with pytest.raises(ember.ModelLoadFailed):
        ember.Engine(model="/nonexistent/model.gguf", progress=True)
    assert not stderr.getvalue().endswith("\r") and stderr.getvalue().endswith("\n")


def test_exception_text_reads_as_a_sentence(engine: ember.Engine) -> None:
    with pytest.raises(ember.ModelLoadFailed) as missing:
        ember.Engine(model="/nonexistent/model.gguf", progress=False)
    text = str(missing.value)
    assert text.startswith("engine_new: ") and text.count("engine_new") == 1, text
    assert "/nonexistent/model.gguf" in text and missing.value.body is None
    with pytest.raises(ember.InvalidRequest) as refused:
        engine.chat(MESSAGES, temperature=-1)
    error = refused.value
    body: Dict[str, Any] = error.body  # type: ignore[assignment]
    assert body["error"]["param"] == "temperature" and body["error"]["type"] == "invalid_request_error"
    assert error.message == body["error"]["message"] and "{" not in str(error)
    assert str(error) == f"engine_submit: {error.message}"
    # A message that does not name its field gets the field added.
    named = ember.InvalidRequest("engine_submit", ember.Status.INVALID_REQUEST,
                                 json.dumps({"error": {"message": "must be positive", "param": "n"}}))
    assert str(named) == "engine_submit: must be positive (field n)" and named.body["error"]["param"] == "n"


def test_stats_name_the_kernel_path(engine: ember.Engine) -> None:
    kernels = engine.stats().cpu_kernels
    assert isinstance(kernels, ember.CpuKernels) and kernels.name in {"SCALAR", "AVX2", "AVX512", "AMX"}
