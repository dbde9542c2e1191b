"""Prompt progress (``"return_progress": true``, docs/protocol.md "Prompt progress"): ``PROMPT_PROGRESS`` events
before the first token, decoded by ``Event.progress``, and llama-server's progress chunks; none unless asked."""

from __future__ import annotations

import ember
from conftest import chat


def test_progress_events_come_before_the_text_from_the_cached_prefix_to_the_whole_prompt(engine: ember.Engine) -> None:
    with engine.submit(chat("Name three primary colors.", 4, return_progress=True)) as request:
        events = list(request)
    kinds = [event.kind for event in events]
    first_delta = kinds.index(ember.EventKind.DELTA)
    progress = [event.progress for event in events if event.kind == ember.EventKind.PROMPT_PROGRESS]
    assert len(progress) >= 2 and all(k == ember.EventKind.PROMPT_PROGRESS for k in kinds[:len(progress)])
    assert first_delta == len(progress), "every report comes before the first token"
    for event in events[:first_delta]:
        assert event.choice == 0 and event.finish_reason is None
        assert event.num_tokens == event.progress.processed
        assert list(event.json()) == ["total", "cache", "processed", "time_ms"], "llama-server's object"
    assert progress[0].processed == progress[0].cached and progress[0].time_ms == 0
    assert progress[-1].processed == progress[-1].total > 0
    assert all(event.progress is None for event in events[first_delta:])


def test_a_request_that_does_not_ask_gets_no_progress(engine: ember.Engine) -> None:
    with engine.submit(chat("Name three primary colors.", 4)) as request:
        assert all(event.kind != ember.EventKind.PROMPT_PROGRESS for event in request)


def test_progress_chunks_open_the_stream(engine: ember.Engine) -> None:
    body = chat("Name three primary colors.", 4, stream=True, return_progress=True)
    with engine.submit(body, chunks=True) as request:
        chunks = [event.json() for event in request]
    reports = [c for c in chunks if "prompt_progress" in c]
    assert len(reports) >= 2 and chunks[:len(reports)] == reports
    for chunk in reports:
        assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert reports[-1]["prompt_progress"]["processed"] == reports[-1]["prompt_progress"]["total"]
