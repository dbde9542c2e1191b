"""A submitted request: its events (iterated, or awaited with ``async for``), its metrics and its final body."""

from __future__ import annotations

import asyncio
import ctypes
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Type

from ._constants import EventKind, FinishReason, Status
from ._pump import REQUEST_CLOSED, Inbox, Item
from ._lib import check, lib, take_string
from ._structs import (
    ExtendedMetrics,
    ExtendedMetricsStruct,
    TimingMetrics,
    TimingMetricsStruct,
    TokenLogprobStruct,
    from_struct,
    new_struct,
)
from .errors import ChoiceOutOfRange, InvalidHandle, RequestFailed, Timeout

if TYPE_CHECKING:
    from .engine import Engine

_KINDS = {kind.value: kind for kind in EventKind}
_REASONS = {reason.value: reason for reason in FinishReason}


@dataclass(frozen=True)
class PromptProgress:
    """How far a prompt has been computed: a ``PROMPT_PROGRESS`` event's :attr:`Event.progress`, only for a request
    with ``"return_progress": true`` (docs/protocol.md, "Prompt progress"). llama-server's ``prompt_progress``."""

    #: The prompt's tokens (``total``).
    total: int
    #: Prompt tokens the prefix cache supplied when the engine admitted the prompt (``cache``).
    cached: int
    #: Prompt tokens computed so far, the cached ones included: from ``cached`` up to ``total`` (``processed``).
    processed: int
    #: Whole milliseconds since the engine admitted the prompt (``time_ms``).
    time_ms: int


class Event(NamedTuple):
    """One event of a request."""

    #: ``DELTA`` (new text), ``FINISHED`` (a choice ended), ``PROMPT_PROGRESS`` (with ``return_progress``: how far
    #: the prompt has been computed), or ``CHUNK`` (a request submitted with ``chunks=True``: ``text`` is a
    #: streaming chunk body).
    kind: EventKind
    #: The choice the event is about (0 unless the request asked for ``n`` > 1).
    choice: int
    #: ``DELTA``: the new text (never a partial character); ``CHUNK``: the chunk's JSON; ``PROMPT_PROGRESS``:
    #: llama-server's ``prompt_progress`` JSON object; ``FINISHED``: "".
    text: str
    #: ``DELTA``: how many generated tokens the text covers (a token may produce no text on its own);
    #: ``PROMPT_PROGRESS``: the prompt tokens processed so far.
    num_tokens: int
    #: ``FINISHED``: why the choice ended; otherwise ``None``.
    finish_reason: Optional[FinishReason]

    def json(self) -> Dict[str, Any]:
        """A ``CHUNK`` event's body (or a ``PROMPT_PROGRESS`` event's object), parsed."""
        return json.loads(self.text)

    @property
    def progress(self) -> Optional[PromptProgress]:
        """A ``PROMPT_PROGRESS`` event's figures; ``None`` for other kinds. Decoded when read, so that events of
        other kinds cost nothing more (the tuple's fields are those of every event)."""
        if self.kind != EventKind.PROMPT_PROGRESS:
            return None
        p = json.loads(self.text)
        return PromptProgress(p["total"], p["cache"], p["processed"], p["time_ms"])


class Request:
    """A request submitted with :meth:`ember.Engine.submit`.

    Read its events once, from one thread or task: ``for event in request`` blocks the thread; ``async for event
    in request`` awaits in the running event loop. No thread waits per request either way, and the binding starts
    none (``_pump.py`` says how the events are delivered). Iteration ends after the last choice's ``FINISHED`` (or, with ``chunks=True``, after
    the last chunk), and raises :class:`ember.RequestFailed` if the engine failed the request.

    A request owns a C handle: close it (``with`` or :meth:`close`) when done; a forgotten one is closed when
    collected. Closing a running request cancels it. Its metrics and response stay readable after its engine is
    closed, until the request itself is.
    """

    def __init__(self, engine: "Engine", handle: int, key: int, inbox: Inbox, chunks: bool) -> None:
        self._engine = engine  # the engine stays open while a request of it is in use
        self._handle: Optional[int] = handle
        self._key = key
        self._inbox = inbox
        self._chunks = chunks
        self._ended = False

    @property
    def chunks(self) -> bool:
        """Whether the request was submitted with ``chunks=True``."""
        return self._chunks

    # --- reading events -------------------------------------------------------------------------------------

    def __iter__(self) -> "Request":
        return self

    def __next__(self) -> Event:
        self._live("Request.__next__")
        if self._ended:
            raise StopIteration
        items = self._inbox.items
        if not items:
            self._engine._pump.wait(self._inbox, items.__len__)
        return self._event(items.popleft(), StopIteration)

    def __aiter__(self) -> "Request":
        return self

    async def __anext__(self) -> Event:
        """The next event, awaited. If the awaiting task is cancelled (a client went away), the request is
        cancelled too, so the engine stops generating for nobody."""
        self._live("Request.__anext__")
        if self._ended:
            raise StopAsyncIteration
        items = self._inbox.items
        while not items:
            await self._await_delivery(items.__len__)
        return self._event(items.popleft(), StopAsyncIteration)

    def _event(self, item: Item, end: Type[Exception]) -> Event:
        kind, choice, text, num_tokens, finish_reason, last = item
        if last:
            self._ended = True
        if kind == EventKind.ERROR:
            raise RequestFailed(text)
        if kind == EventKind.STREAM_DONE:
            raise end
        if kind == 0:
            raise InvalidHandle("request", Status.INVALID_HANDLE, text)
        reason = _REASONS[finish_reason] if kind == EventKind.FINISHED else None
        return Event(_KINDS[kind], choice, text, num_tokens, reason)

    async def _await_delivery(self, ready: Callable[[], object]) -> None:
        """Waits in the running loop until something was delivered to this request and ``ready()`` holds. The
        future is parked before ``ready()`` is looked at, so a delivery in between still wakes it."""
        loop = asyncio.get_running_loop()
        self._engine._pump.watch(loop)
        inbox = self._inbox
        future: "asyncio.Future[None]" = loop.create_future()
        inbox.task_waiter = (loop, future)
        try:
            if not ready():
                await future
        except asyncio.CancelledError:
            self.cancel()
            raise
        finally:
            inbox.task_waiter = None

    def text(self) -> str:
        """Reads the events to the end and returns choice 0's text (for a request submitted without chunks)."""
        return "".join(event.text for event in self if event.kind == EventKind.DELTA and event.choice == 0)

    # --- control and results --------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Asks the engine to stop the request: its unfinished choices end with ``FinishReason.CANCELLED``
        (iteration still yields those ``FINISHED`` events); text already generated stays. Idempotent."""
        check("engine_cancel", lib.engine_cancel(self._live("engine_cancel")))

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits until the request has ended (its last event was delivered), without taking its events;
        :class:`ember.Timeout` after ``timeout`` seconds. :class:`ember.InvalidHandle` once the request is
        closed, also when another thread closes it meanwhile: a closed request's end would never come."""
        self._live("Request.wait")
        inbox = self._inbox
        if not self._engine._pump.wait(inbox, lambda: inbox.finished, timeout):
            raise Timeout("Request.wait", Status.TIMEOUT, f"the request did not end within {timeout} s")
        self._live("Request.wait")

    def response(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The whole OpenAI response body (``chat.completion`` or ``text_completion``, with ``usage`` and, when
        enabled and asked for, ``metrics``), once the request has ended: it waits for that (see :meth:`wait`).
        A request the engine failed or that was cancelled still has one."""
        self.wait(timeout)
        handle = self._live("engine_response_json")
        return json.loads(take_string("engine_response_json", lambda out: lib.engine_response_json(handle, out)))

    async def response_async(self) -> Dict[str, Any]:
        """:meth:`response`, awaited in the running loop (do not iterate the request at the same time)."""
        self._live("Request.response_async")
        inbox = self._inbox
        while not inbox.finished:
            await self._await_delivery(lambda: inbox.finished)
        return self.response()

    def timing_metrics(self, choice: int = 0) -> TimingMetrics:
        """The five timing metrics of a choice; callable at any time (while the request runs, the fields
        measured so far are present). Absent fields are ``None``."""
        out = new_struct(TimingMetricsStruct)
        handle = self._live("engine_get_choice_timing_metrics")
        check("engine_get_choice_timing_metrics",
              lib.engine_get_choice_timing_metrics(handle, _choice(choice), ctypes.byref(out)))
        return from_struct(TimingMetrics, out)

    def extended_metrics(self, choice: int = 0) -> ExtendedMetrics:
        """The extended metrics of a choice, at any time, like :meth:`timing_metrics`."""
        out = new_struct(ExtendedMetricsStruct)
        handle = self._live("engine_get_extended_metrics")
        check("engine_get_extended_metrics",
              lib.engine_get_extended_metrics(handle, _choice(choice), ctypes.byref(out)))
        return from_struct(ExtendedMetrics, out)

    def token_timestamps(self, choice: int = 0) -> List[float]:
        """Each generated token's time, in milliseconds since submission (monotonic), in generation order."""
        values = _copy_array("engine_get_token_timestamps", lib.engine_get_token_timestamps,
                             self._live("engine_get_token_timestamps"), _choice(choice), ctypes.c_double)
        return list(values)

    def token_logprobs(self, choice: int = 0) -> List[Tuple[int, float]]:
        """The sampled tokens whose text is in the output, with their log probabilities (requests that asked for
        ``logprobs``)."""
        values = _copy_array("engine_get_token_logprobs", lib.engine_get_token_logprobs,
                             self._live("engine_get_token_logprobs"), _choice(choice), TokenLogprobStruct)
        return [(entry.token, entry.logprob) for entry in values]

    # --- lifetime -------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Frees the request (cancelling it if it still runs). Idempotent. Every later call on it raises
        :class:`ember.InvalidHandle` at once, and so does a reader waiting on it in another thread or task."""
        handle, self._handle = self._handle, None
        if handle is not None:
            pump = self._engine._pump
            pump.unregister(self._key)  # its last record will never come: end its inbox instead
            pump.end(self._inbox, REQUEST_CLOSED)
            lib.engine_request_free(handle)

    def __enter__(self) -> "Request":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass  # interpreter shutdown

    def _live(self, op: str) -> int:
        if self._handle is None:
            raise InvalidHandle(op, Status.INVALID_HANDLE, "the request was closed")
        return self._handle


def _choice(choice: int) -> int:
    if not 0 <= choice < 2**32:
        raise ChoiceOutOfRange("choice", Status.CHOICE_OUT_OF_RANGE, f"choice {choice} is out of range")
    return choice


def _copy_array(op: str, function: Any, handle: int, choice: int, element: Any) -> Any:
    """Calls a size-then-copy C function: asks the count, then copies, again if more came in between."""
    count = ctypes.c_size_t()
    capacity = 0
    buffer = None
    while True:
        status = function(handle, choice, buffer, capacity, ctypes.byref(count))
        if status == Status.BUFFER_TOO_SMALL:
            capacity = count.value + 16  # room for tokens generated meanwhile
            buffer = (element * capacity)()
            continue
        check(op, status)
        return buffer[: count.value] if buffer is not None else []
