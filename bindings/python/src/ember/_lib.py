"""Loads libember and declares the C functions the binding calls (include/ember.h).

ctypes, not cffi: it is in the standard library, so the wheel needs no compiler and no dependency at install or
run time, and its foreign calls release the GIL, so a thread blocked in ``engine_wait_events`` costs the other
Python threads nothing. The price, a microsecond or so per call, is paid a few times per batch of events, not per
token (docs/python.md measures it).
"""

from __future__ import annotations

import ctypes
import os
import sys
from ctypes import POINTER, c_bool, c_char_p, c_float, c_int, c_int32, c_size_t, c_uint32, c_uint64, c_void_p
from pathlib import Path
from typing import Any, Callable

from ._constants import Status
from ._structs import (
    EventRecordStruct,
    EventStruct,
    ExtendedMetricsStruct,
    StatsStruct,
    TimingMetricsStruct,
    TokenLogprobStruct,
)
from .errors import from_status

#: The version of ember this binding was written for; the library must have its major and minor version.
BINDING_VERSION = "0.1.0"

_LIBRARY_NAME = "libember.dylib" if sys.platform == "darwin" else "libember.so"

#: ``bool (*)(void *userdata, float progress)``, the load progress callback of ``engine_new_with_progress``.
ProgressCallback = ctypes.CFUNCTYPE(c_bool, c_void_p, c_float)
#: ``void (*)(void *userdata, EmberLogLevel level, const char *message)``, the log callback.
LogCallback = ctypes.CFUNCTYPE(None, c_void_p, c_uint32, c_char_p)

# Each C function: (result type, argument types).
_PROTOTYPES = {
    "engine_version": (c_char_p, []),
    "engine_status_message": (c_char_p, [c_uint32]),
    "engine_last_error_message": (c_char_p, []),
    "engine_string_free": (None, [c_void_p]),
    "engine_new": (c_uint32, [c_char_p, POINTER(c_void_p)]),
    "engine_new_with_progress": (c_uint32, [c_char_p, ProgressCallback, c_void_p, POINTER(c_void_p)]),
    "engine_free": (None, [c_void_p]),
    "engine_submit_with_user_data": (c_uint32, [c_void_p, c_char_p, c_uint64, c_uint32, POINTER(c_void_p)]),
    "engine_submit_api": (c_uint32, [c_void_p, c_uint32, c_char_p, c_uint64, c_uint32, POINTER(c_void_p)]),
    "engine_wait_events": (c_uint32, [c_void_p, c_int32, POINTER(EventRecordStruct), c_size_t, POINTER(c_size_t)]),
    "engine_events_wakeup": (c_uint32, [c_void_p]),
    "engine_poll": (c_uint32, [c_void_p, c_void_p, c_int32, POINTER(EventStruct)]),
    "engine_cancel": (c_uint32, [c_void_p]),
    "engine_request_free": (None, [c_void_p]),
    "engine_response_json": (c_uint32, [c_void_p, POINTER(c_void_p)]),
    "engine_get_choice_timing_metrics": (c_uint32, [c_void_p, c_uint32, POINTER(TimingMetricsStruct)]),
    "engine_get_extended_metrics": (c_uint32, [c_void_p, c_uint32, POINTER(ExtendedMetricsStruct)]),
    "engine_get_token_timestamps": (c_uint32, [c_void_p, c_uint32, POINTER(ctypes.c_double), c_size_t,
                                               POINTER(c_size_t)]),
    "engine_get_token_logprobs": (c_uint32, [c_void_p, c_uint32, POINTER(TokenLogprobStruct), c_size_t,
                                             POINTER(c_size_t)]),
    "engine_get_stats": (c_uint32, [c_void_p, POINTER(StatsStruct)]),
    "engine_metrics_text": (c_uint32, [c_void_p, POINTER(c_void_p)]),
    "engine_model_info_json": (c_uint32, [c_void_p, POINTER(c_void_p)]),
    "engine_apply_chat_template": (c_uint32, [c_void_p, c_char_p, POINTER(c_void_p)]),
    "engine_tokenize": (c_uint32, [c_void_p, c_char_p, c_size_t, c_bool, c_bool, POINTER(c_uint32), c_size_t,
                                   POINTER(c_size_t)]),
    "engine_token_bytes": (c_uint32, [c_void_p, c_uint32, POINTER(ctypes.c_uint8), c_size_t, POINTER(c_size_t)]),
    "engine_detokenize": (c_uint32, [c_void_p, POINTER(c_uint32), c_size_t, c_bool, POINTER(c_void_p)]),
    "engine_embed": (c_uint32, [c_void_p, c_char_p, POINTER(c_void_p)]),
    "engine_rerank": (c_uint32, [c_void_p, c_char_p, POINTER(c_void_p)]),
    "engine_events_fd": (c_uint32, [c_void_p, POINTER(c_int)]),
    "engine_set_log_callback": (c_uint32, [LogCallback, c_void_p]),
}


def library_path() -> str:
    """``EMBER_LIBRARY`` when set (a library built elsewhere), else the one the wheel bundles."""
    override = os.environ.get("EMBER_LIBRARY")
    if override:
        return override
    bundled = Path(__file__).with_name(_LIBRARY_NAME)
    if not bundled.exists():
        raise ImportError(
            f"ember: {bundled} is missing: install the package with `pip install ./bindings/python` from a "
            "checkout of ember (it builds the library), or set EMBER_LIBRARY to a libember built with "
            "`cargo build --release --lib`"
        )
    return str(bundled)


def _load() -> ctypes.CDLL:
    path = library_path()
    lib = ctypes.CDLL(path)
    for name, (restype, argtypes) in _PROTOTYPES.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    version = lib.engine_version().decode()
    if version.split(".")[:2] != BINDING_VERSION.split(".")[:2]:
        raise ImportError(f"ember: {path} is version {version}; this binding needs {BINDING_VERSION}")
    return lib


lib = _load()


def last_error() -> str:
    """This thread's last failure message (read right after the failing call)."""
    return lib.engine_last_error_message().decode("utf-8", "replace")


def check(op: str, status: int) -> None:
    """Raises the exception of a failed call; nothing for ``EMBER_STATUS_OK``."""
    if status != Status.OK:
        raise from_status(op, status, last_error())


def take_string(op: str, call: Callable[[Any], int]) -> str:
    """Calls ``call(&out)`` for a ``char **`` output, copies the string and frees ember's."""
    out = c_void_p()
    check(op, call(ctypes.byref(out)))
    try:
        return ctypes.string_at(out.value).decode()
    finally:
        lib.engine_string_free(out)
