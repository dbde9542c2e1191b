"""Takes every request's events from ``engine_wait_events`` and hands each to its request's inbox, on the thread
of whoever is waiting: no thread of the binding's own.

- **Threads** wait as leader and followers. The first thread that needs an event becomes the leader: it waits in
  ``engine_wait_events`` (in C, without the GIL) and delivers what comes, its own events and the others'. The
  others wait on their own inbox. When the leader has what it waited for, it hands the lead to a waiting
  follower. A lone reader thus takes its events straight from ember, with no hand-over between threads.
- **asyncio** loops watch ``engine_events_fd`` and take the events on the loop's own thread when it is readable
  (``wait_events`` with timeout 0), so an awaiting task is woken with no thread involved at all.

Either way a record may be for a request read elsewhere: it goes to that inbox, and wakes that reader (a
thread's lock, or its loop through ``call_soon_threadsafe``). On this 2-vCPU machine one Python hand-over between
two threads costs 8-17 us of CPU, so saving them is most of the binding's speed (docs/python.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import itertools
import struct
import threading
import time
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Set, Tuple

from ._constants import Status
from ._lib import check, lib
from ._structs import EventRecordStruct

#: Records taken per call: one call then serves a whole engine step of a busy server.
BATCH = 256

#: ``EmberEventRecord`` as bytes: request, user_data, then the event (kind, choice, text, text_len, num_tokens,
#: finish_reason), then last and its padding. Checked against the ctypes struct's size and offsets below.
RECORD = struct.Struct("=QQIIQQII?7x")
assert RECORD.size == ctypes.sizeof(EventRecordStruct)
assert EventRecordStruct.last.offset == RECORD.size - 8 and EventRecordStruct.event.offset == 16

#: An inbox item: (kind, choice, text, num_tokens, finish_reason, last). ``kind`` 0 is the binding's own end,
#: put by :meth:`Pump.end` into the inbox of a request whose last record will never come (its engine or the
#: request itself was closed).
Item = Tuple[int, int, str, int, int, bool]
CLOSED: Item = (0, 0, "the engine was closed", 0, 0, True)
#: What a reader of a request finds once the request itself was closed (:meth:`Pump.end`).
REQUEST_CLOSED: Item = (0, 0, "the request was closed", 0, 0, True)

Waker = Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class Inbox:
    """One request's events, between whoever delivers them and the request's one reader."""

    __slots__ = ("items", "finished", "thread_waiter", "task_waiter", "handle")

    def __init__(self) -> None:
        self.items: Deque[Item] = deque()
        self.finished = False  # its last record was delivered
        # A waiting thread's lock (released to wake it), or a waiting task's loop and future.
        self.thread_waiter: Optional[threading.Lock] = None
        self.task_waiter: Optional[Waker] = None
        self.handle: Optional[int] = None


def _resolve(futures: List["asyncio.Future[None]"]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


class Pump:
    """The event delivery of one engine."""

    def __init__(self, engine: int) -> None:
        self._engine = engine
        self._inboxes: Dict[int, Inbox] = {}
        self._keys = itertools.count(1)
        self._records = (EventRecordStruct * BATCH)()
        self._count = ctypes.c_size_t()
        self._view = memoryview(self._records).cast("B")
        # Held by the one thread inside engine_wait_events (calls on one engine are serialized in C too; this
        # keeps a loop's non-blocking call from queueing behind a blocked leader).
        self._lead = threading.Lock()
        # Guards the followers' locks, so that each is released exactly once.
        self._state = threading.Lock()
        self._followers: List[Tuple[threading.Lock, Inbox]] = []
        self._loops: Set[asyncio.AbstractEventLoop] = set()
        self._fd: Optional[int] = None
        self._closing = False

    # --- requests -------------------------------------------------------------------------------------------

    def register(self) -> Tuple[int, Inbox]:
        """A new inbox and the key (``user_data``) its request's records will carry. Register before submitting:
        a record may arrive before ``engine_submit_with_user_data`` has returned."""
        inbox = Inbox()
        key = next(self._keys)
        self._inboxes[key] = inbox
        return key, inbox

    def unregister(self, key: int) -> None:
        """Forgets a request that was freed or never submitted (its records, if any, are dropped)."""
        self._inboxes.pop(key, None)

    def end(self, inbox: Inbox, item: Item) -> None:
        """Ends an inbox whose last record will never come (its request was closed, or its engine): ``item``
        is what its reader takes next, and whoever waits on it is woken, a thread or a task, and a thread that
        leads too, which may be waiting in ``engine_wait_events`` for this very inbox."""
        if not inbox.finished:
            inbox.items.append(item)
            inbox.finished = True
        self._wake_thread(inbox)
        waker = inbox.task_waiter
        if waker is not None:
            try:
                waker[0].call_soon_threadsafe(_resolve, [waker[1]])
            except RuntimeError:
                pass  # that loop is closed: nobody awaits there any more
        if self._lead.locked() and not self._closing:
            lib.engine_events_wakeup(self._engine)  # the leader looks at its inbox again

    # --- delivery -------------------------------------------------------------------------------------------

    def _take(self, timeout_ms: int, loop: Optional[asyncio.AbstractEventLoop]) -> None:
        """One ``engine_wait_events`` call, its records delivered. The caller holds ``_lead``."""
        records, count = self._records, self._count
        status = lib.engine_wait_events(self._engine, timeout_ms, records, BATCH, ctypes.byref(count))
        if status != Status.OK:
            return  # TIMEOUT, or INVALID_HANDLE once the engine is freed
        inboxes = self._inboxes
        wake: Dict[asyncio.AbstractEventLoop, List["asyncio.Future[None]"]] = {}
        # The filled records in one unpack rather than field by field through ctypes: fewer calls per record,
        # though no difference showed end to end (the readers' wake-ups dominate; docs/python.md).
        filled = self._view[: count.value * RECORD.size]
        for _, key, kind, choice, text_at, text_len, num_tokens, reason, last in RECORD.iter_unpack(filled):
            inbox = inboxes.get(key)
            if inbox is None:
                continue  # its request was freed
            text = ctypes.string_at(text_at, text_len).decode() if text_at else ""
            inbox.items.append((kind, choice, text, num_tokens, reason, last))
            if last:
                inboxes.pop(key, None)
                inbox.finished = True
            if inbox.thread_waiter is not None:
                self._wake_thread(inbox)
            waker = inbox.task_waiter
            if waker is not None:
                if waker[0] is loop:
                    _resolve([waker[1]])  # this loop's own task: no need to go through its queue
                else:
                    wake.setdefault(waker[0], []).append(waker[1])
        for other, futures in wake.items():
            try:
                other.call_soon_threadsafe(_resolve, futures)
            except RuntimeError:
                pass  # that loop is closed: nobody awaits there any more

    def _wake_thread(self, inbox: Inbox) -> None:
        with self._state:
            waiter, inbox.thread_waiter = inbox.thread_waiter, None
            if waiter is not None:
                self._followers = [f for f in self._followers if f[0] is not waiter]
        if waiter is not None:
            waiter.release()

    def _hand_over(self) -> None:
        """After the leader has let go: wakes one follower, which leads next if it still needs to."""
        with self._state:
            if not self._followers:
                return
            waiter, inbox = self._followers.pop(0)
            inbox.thread_waiter = None
        waiter.release()

    # --- threads --------------------------------------------------------------------------------------------

    def wait(self, inbox: Inbox, ready: Callable[[], bool], timeout: Optional[float] = None) -> bool:
        """Blocks this thread until ``ready()`` (something for ``inbox`` was delivered); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            if not self._closing and self._lead.acquire(blocking=False):
                try:
                    while not ready() and not self._closing:
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            break
                        self._take(-1 if left is None else max(1, int(left * 1000)), None)
                finally:
                    self._lead.release()
                    self._hand_over()
                continue
            # Follow: wait for a delivery to this inbox, or for the lead. The lock is registered before the
            # last look at ready() and at the lead, so a delivery or a hand-over in between still wakes it.
            waiter = threading.Lock()
            waiter.acquire()
            with self._state:
                inbox.thread_waiter = waiter
                self._followers.append((waiter, inbox))
            if ready() or (not self._lead.locked() and not self._closing):
                self._wake_thread(inbox)  # withdraw (releasing our own lock if nobody did)
                continue
            if not waiter.acquire(timeout=-1 if remaining is None else remaining):
                self._wake_thread(inbox)
        return True

    # --- asyncio --------------------------------------------------------------------------------------------

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Makes ``loop`` (the running one) take events when the engine has some."""
        if loop in self._loops or self._closing:
            return
        if self._fd is None:
            fd = ctypes.c_int()
            check("engine_events_fd", lib.engine_events_fd(self._engine, ctypes.byref(fd)))
            self._fd = fd.value
        self._loops.add(loop)
        loop.add_reader(self._fd, self._on_readable, loop)
        loop.call_soon(self._on_readable, loop)  # events that came before the loop watched

    def _on_readable(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._closing or not self._lead.acquire(blocking=False):
            return  # a thread leads: it delivers to this loop's tasks too
        try:
            self._take(0, loop)
        finally:
            self._lead.release()
            self._hand_over()

    # --- closing --------------------------------------------------------------------------------------------

    def close(self, drain_seconds: float) -> None:
        """Before ``engine_free``: cancels what runs and delivers each request's end (FinishReason.CANCELLED),
        for up to ``drain_seconds``; then ends every inbox whose last record never came, so that no reader
        waits for ever, and stops the loops watching the engine."""
        inboxes = list(self._inboxes.values())
        for inbox in inboxes:
            if inbox.handle is not None:
                lib.engine_cancel(inbox.handle)  # a request freed meanwhile answers INVALID_HANDLE: fine
        self._closing = True  # no new leader, and a leader stops after its current call
        check("engine_events_wakeup", lib.engine_events_wakeup(self._engine))
        with self._lead:
            deadline = time.monotonic() + drain_seconds
            while any(not inbox.finished for inbox in inboxes) and time.monotonic() < deadline:
                self._take(max(1, int((deadline - time.monotonic()) * 1000)), None)
        for key, inbox in list(self._inboxes.items()):
            self._inboxes.pop(key, None)
            self.end(inbox, CLOSED)
        for inbox in inboxes:
            self.end(inbox, CLOSED)  # finished already: only wakes its reader
        with self._state:
            followers, self._followers = self._followers, []
        for waiter, _ in followers:
            waiter.release()
        for loop in self._loops:
            try:
                loop.call_soon_threadsafe(loop.remove_reader, self._fd)
            except RuntimeError:
                pass  # closed: it watches nothing any more
        self._loops.clear()
