"""Bad input gets a clear exception and loses nothing; every status has its exception class."""

from __future__ import annotations

import pytest

import ember
from conftest import chat, config


def test_every_failure_status_has_its_exception_class() -> None:
    for status in ember.Status:
        if status == ember.Status.OK:
            continue
        cls = ember.error_class(status)
        assert cls is not ember.Error and cls.status_code == status, status
        assert cls.__name__.lower() == status.name.replace("_", "").lower()
        assert getattr(ember, cls.__name__) is cls


def test_a_refused_request_carries_the_openai_error(engine: ember.Engine) -> None:
    with pytest.raises(ember.InvalidRequest) as refused:
        engine.submit(chat("Hi", 4, temperature=-1))
    error = refused.value.body["error"]
    assert error["param"] == "temperature" and error["type"] == "invalid_request_error"
    assert refused.value.status == ember.Status.INVALID_REQUEST and refused.value.op == "engine_submit"
    with pytest.raises(ember.InvalidRequest) as unknown:
        engine.submit({"messages": [{"role": "user", "content": "Hi"}], "no_such_field": 1})
    assert "no_such_field" in unknown.value.body["error"]["message"]
    with pytest.raises(ember.InvalidRequest):
        engine.submit('{"messages": [')  # malformed JSON text
    # The engine serves on after each refusal.
    assert engine.submit(chat("Hi", 2)).response()["usage"]["completion_tokens"] >= 1


def test_text_that_is_not_utf8_is_refused_by_ember(engine: ember.Engine) -> None:
    with pytest.raises(ember.InvalidUtf8):
        engine.submit('{"prompt": "\ud800", "max_tokens": 1}')
    with pytest.raises(ember.InvalidUtf8):
        engine.tokenize("\udcff")
    with pytest.raises(ember.InvalidArgument):
        engine.submit('{"prompt": "a\0b"}')
    with pytest.raises(TypeError):
        engine.submit(42)  # type: ignore[arg-type]


def test_bad_token_ids_are_refused(engine: ember.Engine) -> None:
    with pytest.raises(ember.InvalidArgument, match=r"ids\[1\]"):
        engine.detokenize([1, -1])
    with pytest.raises(ember.InvalidArgument):
        engine.detokenize([10**6])  # outside the vocabulary: ember's own check


def test_bad_configurations() -> None:
    with pytest.raises(ember.InvalidConfig, match="no_such_key"):
        ember.Engine(config(no_such_key=1))
    with pytest.raises(ember.InvalidConfig):
        ember.Engine(config(enable_per_request_metrics=True, disable_log_stats=True))
    with pytest.raises(ember.ModelLoadFailed):
        ember.Engine(config(model="/nonexistent/model.gguf"))
    with pytest.raises(ember.InvalidConfig):
        ember.Engine("{not json")


def test_load_progress_can_cancel_and_its_exceptions_surface() -> None:
    seen = []
    with ember.Engine(config(load="read"), progress=seen.append) as engine:
        assert engine.stats().model_load_time_ms > 0
    assert seen[-1] == 1.0 and seen == sorted(seen)
    with pytest.raises(ember.LoadCancelled):
        ember.Engine(config(load="read"), progress=lambda fraction: False)

    def broken(fraction: float) -> None:
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        ember.Engine(config(load="read"), progress=broken)


def test_overloaded_and_deadline() -> None:
    with ember.Engine(config(max_num_seqs=1, max_waiting_requests=1)) as engine:
        running = engine.submit(chat("Tell me a story.", 4000, ignore_eos=True))
        assert next(running).kind == ember.EventKind.DELTA
        waiting = engine.submit(chat("Hi", 4, deadline_ms=20))
        with pytest.raises(ember.Overloaded) as overloaded:
            engine.submit(chat("Hi", 4))
        assert overloaded.value.body["error"]["code"] == "overloaded"
        events = list(waiting)
        assert events[-1].finish_reason == ember.FinishReason.DEADLINE
        running.cancel()


def test_closed_handles_are_refused_not_crashes() -> None:
    engine = ember.Engine(config())
    request = engine.submit(chat("Hi", 2))
    request.wait()
    engine.close()
    engine.close()  # idempotent
    assert engine.closed
    for call in (lambda: engine.submit(chat("Hi", 1)), engine.stats, engine.model_info,
                 lambda: engine.tokenize("x")):
        with pytest.raises(ember.InvalidHandle):
            call()
    # A request outlives its engine: its results stay readable until it is closed.
    assert request.response()["usage"]["completion_tokens"] >= 1
    assert request.timing_metrics().time_to_first_token_ms is not None
    request.close()
    with pytest.raises(ember.InvalidHandle):
        request.timing_metrics()
    with pytest.raises(ember.InvalidHandle):
        request.response()
