"""An engine's log lines reach the callable or logger it was created with, and only its own."""

from __future__ import annotations

import logging
import sys
import threading

import pytest

import ember
from conftest import config


def test_lines_reach_the_callable_of_their_engine_only() -> None:
    lines = []
    lock = threading.Lock()

    def keep(level: ember.LogLevel, message: str) -> None:
        with lock:
            lines.append((level, message))

    with ember.Engine(config(), log=keep):
        pass
    assert lines and all(isinstance(level, ember.LogLevel) for level, _ in lines)
    assert any(level == ember.LogLevel.INFO and "engine started" in message for level, message in lines)
    count = len(lines)
    with ember.Engine(config()):  # created after: it does not inherit the callable
        pass
    assert len(lines) == count


def test_a_logger_receives_lines_at_loggings_levels(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ember.test")
    with ember.Engine(config(), log=logging.getLogger("ember.test")):
        pass
    started = [r for r in caplog.records if r.name == "ember.test" and "engine started" in r.getMessage()]
    assert started and started[0].levelno == logging.INFO


def test_a_failing_callable_is_reported_and_does_not_break_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: reported.append(unraisable.exc_value))

    def broken(level: ember.LogLevel, message: str) -> None:
        raise RuntimeError("the host's bug")

    with ember.Engine(config(), log=broken) as engine:
        assert engine.submit({"prompt": "Hi", "max_tokens": 2}).response()["usage"]["completion_tokens"] >= 1
    assert reported and all(isinstance(error, RuntimeError) for error in reported)


def test_a_failed_engine_forgets_its_target() -> None:
    from ember import _log

    before = dict(_log._targets)
    with pytest.raises(ember.ModelLoadFailed):
        ember.Engine(config(model="/nonexistent.gguf"), log=lambda level, message: None)
    assert _log._targets == before
