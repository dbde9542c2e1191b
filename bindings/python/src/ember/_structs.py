"""The C structs the binding reads, and the dataclasses it gives for the versioned ones.

Each versioned struct (``EmberPerRequestTimingMetrics``, ``EmberExtendedTimingMetrics``, ``EmberStats``) is
declared once, as a dataclass whose fields carry their C type: the ctypes ``Structure`` is built from that list,
and a field's presence bit is its position in it (the header's ``EMBER_TIMING_*``, ``EMBER_EXTENDED_*`` and
``EMBER_STATS_*`` bits follow the same order). tests/c_struct_fields.rs holds the lists here to the Rust one, in
order and type, as it does the header, the Go binding and the docs.

An absent field is ``None``: the event it measures has not happened yet, or the engine records no stats.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any, Optional, Type, TypeVar

from ._constants import CpuKernels


def _f64() -> Any:
    return field(default=None, metadata={"ctype": ctypes.c_double})


def _u32(enum: Optional[Type[IntEnum]] = None) -> Any:
    """A ``uint32_t``; with ``enum``, read as that enum (a value this binding does not know stays an ``int``)."""
    return field(default=None, metadata={"ctype": ctypes.c_uint32, "enum": enum})


def _u64() -> Any:
    return field(default=None, metadata={"ctype": ctypes.c_uint64})


@dataclass(frozen=True)
class TimingMetrics:
    """The five per-request timing metrics of one choice (docs/per_request_metrics.md defines them), in
    milliseconds but for ``tokens_per_second``."""

    #: From the request's first scheduling to its first generated token (queueing excluded).
    time_to_first_token_ms: Optional[float] = _f64()
    #: From the first to the last generated token.
    generation_time_ms: Optional[float] = _f64()
    #: From queueing to first scheduling.
    queue_time_ms: Optional[float] = _f64()
    #: Mean gap between consecutive generated tokens (needs 2 tokens).
    mean_itl_ms: Optional[float] = _f64()
    #: Generated tokens per second from first scheduling to the last token (prefill included).
    tokens_per_second: Optional[float] = _f64()


@dataclass(frozen=True)
class ExtendedMetrics:
    """The metrics beyond the five, of one choice, for latency debugging and billing
    (docs/per_request_metrics.md, "Extended metrics"). Durations are milliseconds."""

    #: From submission to the end of the choice (absent until it has ended).
    e2e_latency_ms: Optional[float] = _f64()
    #: From submission to the first generated token (queueing included).
    ttft_from_arrival_ms: Optional[float] = _f64()
    #: The engine steps that computed the prompt.
    prefill_time_ms: Optional[float] = _f64()
    #: Prompt tokens computed per second of prefill.
    prefill_tokens_per_second: Optional[float] = _f64()
    #: Nearest-rank percentiles and the largest of the gaps between consecutive generated tokens.
    itl_p50_ms: Optional[float] = _f64()
    itl_p90_ms: Optional[float] = _f64()
    itl_p99_ms: Optional[float] = _f64()
    itl_max_ms: Optional[float] = _f64()
    #: Engine compute attributed to this choice (each step's time split by tokens).
    compute_share_ms: Optional[float] = _f64()
    #: Mean time a generated token waited for the host to read it.
    output_wait_ms: Optional[float] = _f64()
    #: Prompt tokens, and those whose keys and values were reused rather than computed.
    num_prompt_tokens: Optional[int] = _u32()
    num_cached_prompt_tokens: Optional[int] = _u32()
    #: Times the choice was preempted (its KV cache released and later recomputed).
    num_preemptions: Optional[int] = _u32()
    #: Speculative decoding: draft tokens verified for the choice, and those accepted.
    num_draft_tokens: Optional[int] = _u32()
    num_accepted_tokens: Optional[int] = _u32()


@dataclass(frozen=True)
class Stats:
    """An engine's counters as of its last step (``EmberStats``; docs/c_api.md)."""

    #: Sequences (choices) admitted and not finished, and those waiting for admission.
    num_running: Optional[int] = _u32()
    num_waiting: Optional[int] = _u32()
    #: KV cache blocks free and in all (the global pool).
    kv_blocks_free: Optional[int] = _u32()
    kv_blocks_total: Optional[int] = _u32()
    #: Forward steps run since the engine started.
    num_steps: Optional[int] = _u64()
    #: The CPU kernel path, and the threads of each operation.
    cpu_kernels: Optional[CpuKernels] = _u32(CpuKernels)
    cpu_threads: Optional[int] = _u32()
    #: Blocks free and in all of the sliding-window layers' own pool (e.g. Gemma 3 on the CPU).
    kv_window_blocks_free: Optional[int] = _u32()
    kv_window_blocks_total: Optional[int] = _u32()
    #: Blocks of the global pool findable in the prefix cache now.
    prefix_cache_blocks: Optional[int] = _u32()
    #: Sequences preempted since the engine started.
    num_preemptions: Optional[int] = _u32()
    #: Prompt tokens looked up in the prefix cache, and those found cached.
    prefix_cache_queries: Optional[int] = _u64()
    prefix_cache_hits: Optional[int] = _u64()
    #: Speculative decoding: draft tokens verified since the engine started, and those accepted.
    spec_decode_num_draft_tokens: Optional[int] = _u64()
    spec_decode_num_accepted_tokens: Optional[int] = _u64()
    #: How long the engine took to start (model read or mapped, backend built).
    model_load_time_ms: Optional[float] = _f64()


T = TypeVar("T")


def c_struct(cls: type) -> Type[ctypes.Structure]:
    """The ctypes struct of a versioned dataclass: ``struct_size``, ``present``, then its fields in order."""
    layout = [("struct_size", ctypes.c_uint32), ("present", ctypes.c_uint32)]
    layout += [(f.name, f.metadata["ctype"]) for f in fields(cls)]
    return type("Ember" + cls.__name__, (ctypes.Structure,), {"_fields_": layout})


def new_struct(struct_type: Type[ctypes.Structure]) -> Any:
    """A zeroed struct whose ``struct_size`` tells ember how far it may write."""
    out = struct_type()
    out.struct_size = ctypes.sizeof(struct_type)
    return out


def from_struct(cls: Type[T], struct: Any) -> T:
    """The dataclass of a filled struct: a field whose presence bit is clear is ``None``."""
    present = struct.present
    values = {f.name: _read(f, getattr(struct, f.name)) if present & (1 << i) else None
              for i, f in enumerate(fields(cls))}
    return cls(**values)


def _read(declared: Any, value: Any) -> Any:
    enum = declared.metadata.get("enum")
    return enum(value) if enum is not None and value in enum._value2member_map_ else value


TimingMetricsStruct = c_struct(TimingMetrics)
ExtendedMetricsStruct = c_struct(ExtendedMetrics)
StatsStruct = c_struct(Stats)


class EventStruct(ctypes.Structure):
    """``EmberEvent``."""

    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("choice", ctypes.c_uint32),
        ("text", ctypes.c_void_p),
        ("text_len", ctypes.c_size_t),
        ("num_tokens", ctypes.c_uint32),
        ("finish_reason", ctypes.c_uint32),
    ]


class EventRecordStruct(ctypes.Structure):
    """``EmberEventRecord``."""

    _fields_ = [
        ("request", ctypes.c_void_p),
        ("user_data", ctypes.c_uint64),
        ("event", EventStruct),
        ("last", ctypes.c_bool),
    ]


class TokenLogprobStruct(ctypes.Structure):
    """``EmberTokenLogprob``."""

    _fields_ = [("token", ctypes.c_uint32), ("logprob", ctypes.c_float)]
