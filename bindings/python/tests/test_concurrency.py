"""Many readers at once, from threads and from asyncio; cancellation; closing under load. Greedy outputs are the
same batched as alone (docs/architecture.md, "Numerics"), which makes a mixed-up delivery visible."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import ember
from conftest import chat, config

PROMPTS = ["Name a fruit.", "Name a colour.", "What is 2 + 2?", "Say hello.", "Name a planet.", "Name a tree."]


def os_threads() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def alone(engine: ember.Engine) -> dict:
    return {prompt: engine.submit(chat(prompt, 12)).text() for prompt in PROMPTS}


def test_threads_each_reading_their_own_requests(engine: ember.Engine) -> None:
    expected = alone(engine)

    def run(index: int) -> tuple:
        prompt = PROMPTS[index % len(PROMPTS)]
        with engine.submit(chat(prompt, 12)) as request:
            return prompt, request.text()

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(run, range(48)))
    for prompt, text in results:
        assert text == expected[prompt], prompt


def test_asyncio_tasks_need_no_thread(engine: ember.Engine) -> None:
    expected = alone(engine)
    threads_before = os_threads()

    async def one(prompt: str) -> str:
        with engine.submit(chat(prompt, 12)) as request:
            parts = [event.text async for event in request if event.kind == ember.EventKind.DELTA]
            body = await request.response_async()
            assert "".join(parts) == body["choices"][0]["message"]["content"]
            return "".join(parts)

    async def main() -> tuple:
        most = 0
        tasks = [asyncio.ensure_future(one(PROMPTS[i % len(PROMPTS)])) for i in range(200)]
        while not all(task.done() for task in tasks):
            most = max(most, os_threads())
            await asyncio.sleep(0)
        return [task.result() for task in tasks], most

    texts, most = asyncio.run(main())
    for i, text in enumerate(texts):
        assert text == expected[PROMPTS[i % len(PROMPTS)]]
    # 200 streams at once, and not one thread more than before: the loop takes the events itself.
    assert most <= threads_before, (threads_before, most)


def test_a_cancelled_task_cancels_its_request(engine: ember.Engine) -> None:
    async def main() -> ember.Request:
        request = engine.submit(chat("Tell me a long story.", 4000, ignore_eos=True))
        first = asyncio.Event()

        async def read() -> None:
            async for _ in request:
                first.set()

        task = asyncio.ensure_future(read())
        await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return request

    request = asyncio.run(main())
    body = request.response(timeout=60)
    assert body["choices"][0]["finish_reason"] == "cancelled"
    request.close()


def test_cancel_ends_the_stream_normally(engine: ember.Engine) -> None:
    with engine.submit(chat("Tell me a long story.", 4000, ignore_eos=True)) as request:
        events = iter(request)
        assert next(events).kind == ember.EventKind.DELTA
        request.cancel()
        request.cancel()  # idempotent
        last = list(events)[-1]
        assert last.kind == ember.EventKind.FINISHED and last.finish_reason == ember.FinishReason.CANCELLED
        assert list(request) == []  # ended: iteration stays ended


def test_closing_the_engine_ends_every_reader() -> None:
    engine = ember.Engine(config(max_num_seqs=2))
    requests = [engine.submit(chat("Tell me a long story.", 4000, ignore_eos=True)) for _ in range(6)]
    ended = []

    def read(request: ember.Request) -> None:
        ended.append(list(request)[-1].finish_reason)

    readers = [threading.Thread(target=read, args=(r,)) for r in requests]
    for reader in readers:
        reader.start()
    engine.close()
    for reader in readers:
        reader.join()
    assert ended == [ember.FinishReason.CANCELLED] * 6
    for request in requests:
        assert request.response()["choices"][0]["finish_reason"] == "cancelled"
        request.close()


def test_a_request_closed_while_running_is_cancelled(engine: ember.Engine) -> None:
    request = engine.submit(chat("Tell me a long story.", 4000, ignore_eos=True))
    next(request)
    request.close()
    request.close()  # idempotent
    # The engine drops it at its next step: a short request after it completes, and then nothing runs.
    assert engine.submit(chat("Hi", 2, ignore_eos=True)).response()["usage"]["completion_tokens"] == 2
    assert engine.stats().num_running == 0
