"""An engine's log lines, to a Python callable or a ``logging.Logger``.

The C API has one callback for the engines created while it is set (``engine_set_log_callback``), with a
``userdata`` pointer. One C function pointer serves every engine (it lives as long as the module); ``userdata``
is the key of the engine's target in a table, set around ``engine_new`` under a lock, so that engines made at the
same time by other threads do not inherit it. The key is forgotten after ``engine_free``, which joins every
thread that could log.
"""

from __future__ import annotations

import itertools
import logging
import threading
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, Optional, Union

from ._constants import LogLevel
from ._lib import LogCallback, lib

#: What receives an engine's lines: a callable of (level, message), or a logger.
LogTarget = Union[Callable[[LogLevel, str], None], logging.Logger]

_LEVELS = {LogLevel.ERROR: logging.ERROR, LogLevel.WARN: logging.WARNING, LogLevel.INFO: logging.INFO,
           LogLevel.DEBUG: logging.DEBUG}
_targets: Dict[int, Callable[[LogLevel, str], None]] = {}
_keys = itertools.count(1)
_setup = threading.Lock()


def _forward(userdata: Optional[int], level: int, message: bytes) -> None:
    # Called on ember's threads (the GIL taken by ctypes); an exception is reported by ctypes, never raised into C.
    target = _targets.get(userdata or 0)
    if target is not None:
        target(LogLevel(level), message.decode("utf-8", "replace"))


_TRAMPOLINE = LogCallback(_forward)


def _callable(target: LogTarget) -> Callable[[LogLevel, str], None]:
    if isinstance(target, logging.Logger):
        return lambda level, message: target.log(_LEVELS.get(level, logging.INFO), "%s", message)
    return target


@contextmanager
def logging_to(target: Optional[LogTarget]) -> Iterator[Optional[int]]:
    """Sets the callback for the engine created inside the block; yields the key to forget once it is freed."""
    if target is None:
        yield None
        return
    key = next(_keys)
    _targets[key] = _callable(target)
    with _setup:
        lib.engine_set_log_callback(_TRAMPOLINE, key)
        try:
            yield key
        finally:
            # Engines made later, also by other code in this process, must not inherit this one's target.
            lib.engine_set_log_callback(LogCallback(), None)


def forget(key: Optional[int]) -> None:
    """After ``engine_free`` (or a failed ``engine_new``): the engine logs no more."""
    if key is not None:
        _targets.pop(key, None)
