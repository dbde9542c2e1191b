"""ember: an LLM inference engine with exact per-request timing, from Python.

    import ember

    engine = ember.Engine(model="models/SmolLM2-135M-Instruct.Q4_1.gguf", threads=2)
    answer = engine.chat([{"role": "user", "content": "Hi!"}], max_tokens=32)
    print(answer["choices"][0]["message"]["content"])  # the OpenAI response body, as a dict

    with engine:                               # or close() it: the model's memory is freed at once
        request = engine.submit({"messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 32})
        for event in request:                  # or: async for event in request
            print(event.text, end="", flush=True)
        print(request.timing_metrics())        # the five per-request timings; absent ones are None

docs/python.md is the guide; include/ember.h and docs/c_api.md define what lies beneath.
"""

from ._constants import API, CpuKernels, EventKind, FinishReason, LogLevel, Status
from ._lib import BINDING_VERSION as __version__
from ._lib import lib as _lib
from ._structs import ExtendedMetrics, Stats, TimingMetrics
from .embeddings import EmbeddingInput, Embeddings, EmbeddingUsage
from .engine import Engine
from .errors import (
    BufferTooSmall,
    ChoiceOutOfRange,
    EngineStartFailed,
    Error,
    Forked,
    InvalidArgument,
    InvalidConfig,
    InvalidHandle,
    InvalidRequest,
    InvalidUtf8,
    LoadCancelled,
    ModelLoadFailed,
    NotFinished,
    Overloaded,
    Panic,
    RequestFailed,
    StreamDone,
    Timeout,
    TooManyHandles,
    error_class,
)
from .request import Event, PromptProgress, Request
from .rerank import RankedDocument, RerankDocument, Reranking


def library_version() -> str:
    """The loaded libember's version (``engine_version``)."""
    return _lib.engine_version().decode()


__all__ = [
    "API", "BufferTooSmall", "ChoiceOutOfRange", "CpuKernels", "EmbeddingInput", "EmbeddingUsage", "Embeddings", "Engine",
    "EngineStartFailed", "Error", "Event", "EventKind", "ExtendedMetrics", "FinishReason", "Forked",
    "InvalidArgument", "InvalidConfig", "InvalidHandle", "InvalidRequest", "InvalidUtf8", "LoadCancelled",
    "LogLevel", "ModelLoadFailed", "NotFinished", "Overloaded", "Panic", "PromptProgress", "RankedDocument",
    "RerankDocument", "Reranking", "Request", "RequestFailed", "Stats", "Status", "StreamDone", "Timeout",
    "TimingMetrics", "TooManyHandles", "error_class", "library_version",
]
