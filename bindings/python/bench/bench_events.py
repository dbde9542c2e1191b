"""What the Python binding costs per streamed event, on the real model: the CPU time of the Python threads that
read the events (taking them from ``engine_wait_events``, copying the text, handing them to the requests'
inboxes, waking and building each ``Event``: the binding's whole path, since it has no thread of its own), per
event, for thread readers and for asyncio readers; and the delay from each token's engine timestamp to its
reader. Beside each, the same workload read by the least a Python host can do (a bare ctypes loop over
``engine_wait_events``, blocking or on an asyncio loop watching ``engine_events_fd``, that only counts the
records): what the binding adds is the difference. On a small machine most of the bare loop's cost is the
thread's sleep and wake-up per engine step, which every host pays. Prints a table, then the same as JSON.

    python bench/bench_events.py [--model PATH] [--requests 8] [--tokens 256] [--threads 2]

Target (issue 32): the binding adds at most 20 us of CPU per streamed event.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import ember
from ember._lib import lib
from ember._structs import EventRecordStruct

ROOT = Path(__file__).resolve().parents[3]


def body(tokens: int, index: int) -> Dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"Tell me story number {index}."}], "max_tokens": tokens,
            "ignore_eos": True, "temperature": 0}


def delays_ms(submitted: float, received: List[Tuple[float, int]], stamps: List[float]) -> List[float]:
    """Each delta's arrival at its reader after its last token's engine timestamp (stamps are ms after
    submission on the same monotonic clock; `submitted` was read just before the submit call, so each delay is
    over-stated by the submit call's own microseconds)."""
    out = []
    for arrived, last_token in received:
        out.append((arrived - submitted) * 1000 - stamps[last_token])
    return out


def read_sync(request: ember.Request) -> Tuple[float, List[Tuple[float, int]]]:
    cpu = time.thread_time()
    received = []
    count = 0
    for event in request:
        if event.kind == ember.EventKind.DELTA:
            count += event.num_tokens
            received.append((time.monotonic(), count - 1))
    return time.thread_time() - cpu, received


def run_threads(engine: ember.Engine, requests: int, tokens: int) -> Dict[str, Any]:
    results: List[Any] = [None] * requests

    def reader(index: int, submitted: float, request: ember.Request) -> None:
        results[index] = (submitted, request, *read_sync(request))

    threads = []
    for index in range(requests):
        submitted = time.monotonic()
        request = engine.submit(body(tokens, index))
        thread = threading.Thread(target=reader, args=(index, submitted, request))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return summarize(results)


def run_asyncio(engine: ember.Engine, requests: int, tokens: int) -> Dict[str, Any]:
    async def reader(submitted: float, request: ember.Request) -> Tuple[Any, ...]:
        received = []
        count = 0
        async for event in request:
            if event.kind == ember.EventKind.DELTA:
                count += event.num_tokens
                received.append((time.monotonic(), count - 1))
        return submitted, request, received

    async def main() -> Tuple[List[Any], float]:
        cpu = time.thread_time()
        tasks = []
        for index in range(requests):
            submitted = time.monotonic()
            tasks.append(asyncio.ensure_future(reader(submitted, engine.submit(body(tokens, index)))))
        done = await asyncio.gather(*tasks)
        return done, time.thread_time() - cpu

    done, loop_cpu = asyncio.run(main())
    # One thread read every request: its CPU is shared out over all of them.
    results = [(submitted, request, loop_cpu / requests, received) for submitted, request, received in done]
    return summarize(results)


def submit_raw(engine: ember.Engine, requests: int, tokens: int) -> List[int]:
    handle = engine._core.handle
    out = ctypes.c_void_p()
    handles = []
    for index in range(requests):
        data = json.dumps(body(tokens, index)).encode()
        # user_data keys far from the binding's own, which count from 1.
        assert lib.engine_submit_with_user_data(handle, data, 2**40 + index, 1, ctypes.byref(out)) == 0
        handles.append(out.value)
    return handles


def bare_blocking(engine: ember.Engine, requests: int, tokens: int) -> Dict[str, Any]:
    """The bare loop on one thread, blocking in engine_wait_events."""
    handle = engine._core.handle
    records = (EventRecordStruct * 256)()
    count = ctypes.c_size_t()
    handles = submit_raw(engine, requests, tokens)
    cpu = time.thread_time()
    events = ended = 0
    while ended < requests:
        lib.engine_wait_events(handle, -1, records, 256, ctypes.byref(count))
        for i in range(count.value):
            events += 1
            ended += records[i].last
    cpu = time.thread_time() - cpu
    for request in handles:
        lib.engine_request_free(request)
    return {"events": events, "binding_us_per_event": cpu / events * 1e6}


def bare_asyncio(engine: ember.Engine, requests: int, tokens: int) -> Dict[str, Any]:
    """The bare loop as an asyncio reader callback on engine_events_fd."""
    handle = engine._core.handle
    records = (EventRecordStruct * 256)()
    count = ctypes.c_size_t()
    fd = ctypes.c_int()
    assert lib.engine_events_fd(handle, ctypes.byref(fd)) == 0
    seen = {"events": 0, "ended": 0}

    async def main() -> None:
        loop = asyncio.get_running_loop()
        all_ended = loop.create_future()

        def readable() -> None:
            if lib.engine_wait_events(handle, 0, records, 256, ctypes.byref(count)) != 0:
                return
            for i in range(count.value):
                seen["events"] += 1
                seen["ended"] += records[i].last
            if seen["ended"] == requests and not all_ended.done():
                all_ended.set_result(None)

        loop.add_reader(fd.value, readable)
        await all_ended
        loop.remove_reader(fd.value)

    handles = submit_raw(engine, requests, tokens)
    cpu = time.thread_time()
    asyncio.run(main())
    cpu = time.thread_time() - cpu
    for request in handles:
        lib.engine_request_free(request)
    return {"events": seen["events"], "binding_us_per_event": cpu / seen["events"] * 1e6}


def summarize(results: List[Any]) -> Dict[str, Any]:
    events = 0
    reader_cpu = 0.0
    delays: List[float] = []
    for submitted, request, cpu, received in results:
        stamps = request.token_timestamps()
        delays += delays_ms(submitted, received, stamps)
        events += len(received)
        reader_cpu += cpu
        request.close()
    delays.sort()
    return {
        "events": events,
        "binding_us_per_event": reader_cpu / events * 1e6,
        "token_to_reader_p50_us": delays[len(delays) // 2] * 1000,
        "token_to_reader_p99_us": delays[min(len(delays) - 1, int(len(delays) * 0.99))] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.environ.get("EMBER_MODEL",
                                                          ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with ember.Engine({"model": str(args.model), "threads": args.threads}) as engine:
        engine.submit(body(4, 0)).wait()  # warm up, and start the event thread
        # The binding's events never reach the bare loops, nor the bare loops' the binding: neither reads the
        # other's keys, and each waits until its own requests have ended.
        for round_index in range(args.rounds):
            for name, run in (("threads", run_threads), ("bare blocking", bare_blocking),
                              ("asyncio", run_asyncio), ("bare asyncio", bare_asyncio)):
                row = run(engine, args.requests, args.tokens)
                row.update(readers=name, round=round_index)
                rows.append(row)
    header = ("readers", "events", "host CPU us/event", "token->reader p50 us", "p99 us")
    print(" | ".join(header))
    for row in rows:
        delays = [f"{row[k]:.0f}" if k in row else "" for k in ("token_to_reader_p50_us", "token_to_reader_p99_us")]
        print(" | ".join([row["readers"], str(row["events"]), f"{row['binding_us_per_event']:.1f}", *delays]))
    for name, bare in (("threads", "bare blocking"), ("asyncio", "bare asyncio")):
        mine = statistics.median(row["binding_us_per_event"] for row in rows if row["readers"] == name)
        floor = statistics.median(row["binding_us_per_event"] for row in rows if row["readers"] == bare)
        print(f"{name}: {mine:.1f} us/event, the bare loop {floor:.1f}: the binding adds {mine - floor:.1f} "
              "(target <= 20)")
    print(json.dumps({"bench": "python_binding_events", "requests": args.requests, "tokens": args.tokens,
                      "rows": rows}))


if __name__ == "__main__":
    main()
