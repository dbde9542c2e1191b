"""The per-request metrics through the binding: their values against the token timestamps they are defined on
(docs/per_request_metrics.md), and every gate that leaves a field absent (None)."""

from __future__ import annotations

import math

import pytest

import ember
from conftest import chat, config


def test_the_five_metrics_follow_their_definitions(engine: ember.Engine) -> None:
    with engine.submit(chat("Tell me about the sea.", 12, ignore_eos=True)) as request:
        for _ in request:
            pass
        metrics = request.timing_metrics()
        extended = request.extended_metrics()
        stamps = request.token_timestamps()
        body = request.response()
    assert len(stamps) == 12 and stamps == sorted(stamps)
    assert math.isclose(metrics.generation_time_ms, stamps[-1] - stamps[0], rel_tol=1e-9, abs_tol=1e-6)
    assert math.isclose(metrics.mean_itl_ms, metrics.generation_time_ms / 11, rel_tol=1e-9)
    assert metrics.queue_time_ms >= 0 and metrics.time_to_first_token_ms > 0
    scheduled_to_last_s = (metrics.time_to_first_token_ms + metrics.generation_time_ms) / 1000
    assert math.isclose(metrics.tokens_per_second, 12 / scheduled_to_last_s, rel_tol=1e-6)
    assert math.isclose(extended.ttft_from_arrival_ms, stamps[0], rel_tol=1e-9, abs_tol=1e-6)
    assert extended.itl_max_ms >= extended.itl_p99_ms >= extended.itl_p90_ms >= extended.itl_p50_ms > 0
    assert extended.e2e_latency_ms >= stamps[-1]
    assert extended.num_prompt_tokens == body["usage"]["prompt_tokens"]
    assert extended.num_preemptions == 0 and extended.num_draft_tokens == 0
    # enable_per_request_metrics lets a body that asks carry them; this one did not ask.
    assert "metrics" not in body


def test_a_body_that_asks_carries_the_same_metrics(engine: ember.Engine) -> None:
    with engine.submit(chat("Hi", 4, ignore_eos=True, include_metrics=True)) as request:
        body = request.response()
        metrics = request.timing_metrics()
    for name, value in vars(metrics).items():
        assert math.isclose(body["metrics"][name], value, rel_tol=1e-9), name


def test_one_token_has_no_inter_token_latency(engine: ember.Engine) -> None:
    with engine.submit(chat("Hi", 1, ignore_eos=True)) as request:
        request.wait()
        metrics = request.timing_metrics()
        extended = request.extended_metrics()
    assert metrics.generation_time_ms == 0.0  # first token is last: a zero-length interval, present
    assert metrics.mean_itl_ms is None and extended.itl_p50_ms is None and extended.itl_max_ms is None
    assert metrics.time_to_first_token_ms is not None and metrics.tokens_per_second is not None


def test_metrics_of_a_request_still_waiting_are_absent() -> None:
    # One sequence at a time: the second request waits while the first generates, so nothing of it is measured
    # but its arrival.
    with ember.Engine(config(max_num_seqs=1)) as engine:
        running = engine.submit(chat("Tell me a story.", 4000, ignore_eos=True))
        assert next(iter(running)).kind == ember.EventKind.DELTA
        waiting = engine.submit(chat("Hi", 4))
        metrics = waiting.timing_metrics()
        assert metrics == ember.TimingMetrics()  # every field None
        assert waiting.extended_metrics().e2e_latency_ms is None
        running.cancel()
        waiting.wait()
        assert waiting.timing_metrics().queue_time_ms is not None


def test_no_stats_means_no_metrics() -> None:
    with ember.Engine(config(enable_per_request_metrics=False, disable_log_stats=True)) as engine:
        with engine.submit(chat("Hi", 3, ignore_eos=True)) as request:
            request.wait()
            assert request.timing_metrics() == ember.TimingMetrics()
            assert request.token_timestamps() == []
            assert request.extended_metrics().e2e_latency_ms is None


def test_each_choice_has_its_own_metrics(engine: ember.Engine) -> None:
    with engine.submit(chat("Hi", 3, n=2, ignore_eos=True)) as request:
        request.wait()
        assert request.timing_metrics(1).time_to_first_token_ms is not None
        assert len(request.token_timestamps(1)) == 3
        with pytest.raises(ember.ChoiceOutOfRange):
            request.timing_metrics(2)
        with pytest.raises(ember.ChoiceOutOfRange):
            request.extended_metrics(-1)
