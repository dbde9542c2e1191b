"""Calls on a closed request or engine raise ``ember.InvalidHandle`` at once (issue 43: ``response()`` and
``wait()`` without a timeout on a closed request used to block for ever, its last event never coming), and so do
readers that were waiting on a request when another thread or task closed it.

Nothing here is timed: each call runs in a thread of its own, and a call still running after ``HANG`` seconds is
reported as blocked (only a broken binding gets there)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Dict, List

import pytest

import ember
from conftest import chat, config

#: How long a call may run before it counts as blocked: a bound for a hang, never a measured duration.
HANG = 60.0

LONG = chat("Tell me a long story.", 4000, ignore_eos=True)


def outcome(call: Callable[[], Any]) -> BaseException:
    """Runs ``call`` in a thread and returns what it raised; fails the test if it blocks or returns."""
    raised: List[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # noqa: B902: handed to the test
            raised.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), f"{call} blocked"
    assert raised, f"{call} returned"
    return raised[0]


def until(condition: Callable[[], bool], what: str) -> None:
    """Waits (on another thread's progress, yielding the GIL) until ``condition`` holds."""
    done = threading.Event()
    for _ in range(int(HANG * 1000)):
        if condition():
            return
        done.wait(0.001)
    raise AssertionError(f"never {what}")


def request_calls(request: ember.Request) -> Dict[str, Callable[[], Any]]:
    """Every call a reader makes on a request, by name."""

    async def iterate_async() -> None:
        async for _ in request:
            pass

    return {
        "response()": request.response,
        "response(timeout)": lambda: request.response(timeout=HANG),
        "wait()": request.wait,
        "text()": request.text,
        "next()": lambda: next(request),
        "list()": lambda: list(request),
        "response_async()": lambda: asyncio.run(request.response_async()),
        "async for": lambda: asyncio.run(iterate_async()),
        "timing_metrics()": request.timing_metrics,
        "extended_metrics()": request.extended_metrics,
        "token_timestamps()": request.token_timestamps,
        "token_logprobs()": request.token_logprobs,
        "cancel()": request.cancel,
    }


@pytest.mark.parametrize("state", ["running", "ended", "waiting"])
def test_every_call_on_a_closed_request_raises_at_once(engine: ember.Engine, state: str) -> None:
    if state == "waiting":
        # Never scheduled: the engine's one sequence is taken.
        small = ember.Engine(config(max_num_seqs=1))
        holder = small.submit(LONG)
        next(holder)
        request = small.submit(chat("Hi", 4))
    else:
        small, holder = None, None
        request = engine.submit(LONG if state == "running" else chat("Hi", 2))
        if state == "running":
            next(request)
        else:
            request.wait()
    request.close()
    for name, call in request_calls(request).items():
        error = outcome(call)
        assert isinstance(error, ember.InvalidHandle), (state, name, error)
    request.close()  # idempotent
    if small is not None:
        holder.close()
        small.close()
    # The engine serves on.
    assert engine.submit(chat("Hi", 2)).response(timeout=HANG)["usage"]["completion_tokens"] >= 1


def test_readers_waiting_on_a_request_are_woken_when_it_is_closed(engine: ember.Engine) -> None:
    """Two threads wait without a timeout, one leading (in engine_wait_events, for its own request) and one
    following (on its own lock): closing each request from here wakes its reader with InvalidHandle."""
    first, second = engine.submit(LONG), engine.submit(LONG)
    next(first), next(second)
    raised: Dict[str, BaseException] = {}

    def wait(name: str, request: ember.Request) -> None:
        try:
            request.wait()
        except BaseException as error:  # noqa: B902: checked below
            raised[name] = error

    readers = [threading.Thread(target=wait, args=(name, request), daemon=True)
               for name, request in (("first", first), ("second", second))]
    for reader in readers:
        reader.start()
    pump = engine._pump
    until(lambda: pump._lead.locked() and (first._inbox.thread_waiter is not None
                                           or second._inbox.thread_waiter is not None),
          "one reader leading and the other following")
    follower = first if first._inbox.thread_waiter is not None else second
    leader = second if follower is first else first
    follower.close()  # woken through its lock
    leader.close()  # woken out of engine_wait_events
    for reader in readers:
        reader.join(HANG)
        assert not reader.is_alive(), "a reader stayed blocked on a closed request"
    assert set(raised) == {"first", "second"}
    assert all(isinstance(error, ember.InvalidHandle) for error in raised.values()), raised
    assert engine.submit(chat("Hi", 2)).response(timeout=HANG)["usage"]["completion_tokens"] >= 1


def test_a_task_waiting_on_a_request_is_woken_when_it_is_closed(engine: ember.Engine) -> None:
    async def main() -> List[BaseException]:
        reading, responding = engine.submit(LONG), engine.submit(LONG)

        async def iterate() -> None:
            async for _ in reading:
                pass

        tasks = [asyncio.ensure_future(iterate()), asyncio.ensure_future(responding.response_async())]
        while reading._inbox.task_waiter is None or responding._inbox.task_waiter is None:
            await asyncio.sleep(0)  # until both tasks are parked on their requests
        reading.close()
        responding.close()
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    for error in asyncio.run(main()):
        assert isinstance(error, ember.InvalidHandle), error


def test_every_call_on_a_closed_engine_raises_invalid_handle() -> None:
    engine = ember.Engine(config())
    engine.close()
    calls: Dict[str, Callable[[], Any]] = {
        "submit": lambda: engine.submit(chat("Hi", 1)),
        "submit, chunks": lambda: engine.submit(chat("Hi", 1), chunks=True),
        "submit of a bad body": lambda: engine.submit(42),  # type: ignore[arg-type]
        "tokenize": lambda: engine.tokenize("x"),
        "detokenize": lambda: engine.detokenize([1]),
        "detokenize of a bad id": lambda: engine.detokenize([-1]),
        "apply_chat_template": lambda: engine.apply_chat_template(chat("Hi", 1)),
        "model_info": engine.model_info,
        "metrics_text": engine.metrics_text,
        "stats": engine.stats,
        "chat": lambda: engine.chat([{"role": "user", "content": "Hi"}], max_tokens=1),
        "chat, streamed": lambda: engine.chat([{"role": "user", "content": "Hi"}], max_tokens=1, stream=True),
        "chat of bad messages": lambda: engine.chat(42),  # type: ignore[arg-type]
        "complete": lambda: engine.complete("Hi", max_tokens=1),
        "submit_api": lambda: engine.submit_api(ember.API.ANTHROPIC_MESSAGES, {"max_tokens": 1, "messages": []}),
        "submit_api of a bad api": lambda: engine.submit_api(-1, "{}"),  # type: ignore[arg-type]
        "token_bytes": lambda: engine.token_bytes(1),
        "token_bytes of a bad id": lambda: engine.token_bytes(-1),
    }
    for name, call in calls.items():
        error = outcome(call)
        assert isinstance(error, ember.InvalidHandle), (name, error)
    engine.close()  # idempotent
